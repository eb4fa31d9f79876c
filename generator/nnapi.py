"""NNAPI partitioning: which parts of a model Android's NNAPI would run, and whether that pays.

TVM 0.27 ships a pattern-based partitioner (tvm.relax.backend.contrib.nnapi, 31 patterns) but not
the NNAPI code generator or runtime in its PyPI build. This module prepares a model the way TVM's
own NNAPI flow does (constant folding, 2-D matmuls as batched matmuls, clip as maximum/minimum),
runs the partitioner, and reports the result: partitions, the operators on each side with their
share of FLOPs, what blocks a larger partition, and the NNAPI<->TVM transitions per inference.

On top of the patterns, the `cost` strategy searches the placement with a cost table: dynamic
programming over the operators in execution order, with a cost for every switch between TVM and
NNAPI, so a piece too small to pay for its transitions stays on TVM. The table is static, or its TVM
side is measured on a device over RPC (each op kind built alone and timed with bench's machinery).

With a TVM that has the NNAPI code generator (USE_NNAPI_CODEGEN=ON), `generate` turns the chosen
placement into a module for an ordinary CPU build: rejected partitions become plain Relax functions
again, the rest go through relax.transform.RunCodegen.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tvmgen.errors import InputError, TvmgenError
from tvmgen.log import step

# Static costs (the NNAPI RFC's approach for users without a phone at hand). Rates in GFLOP/s; a
# transition hands a tensor between TVM and an NNAPI execution: a fixed cost plus a per-MB copy.
DEFAULT_COSTS = {
    "nnapi_gflops": {"conv2d": 40.0, "batch_matmul": 30.0, "default": 8.0},
    "tvm_gflops": {"conv2d": 4.0, "batch_matmul": 4.0, "default": 2.0},
    "transition_ms": 0.25,
    "transition_ms_per_mb": 0.5,
}


class NnapiBuildError(TvmgenError):
    exit_code = 4


# ------------------------------------------------------------------ preparation

def prepare(mod):
    """What TVM's own NNAPI flow does before partitioning, written for tvmgen."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_op, wildcard

    from tvmgen.compiler.rewrites import tir_min_max_as_relax

    mod = relax.transform.FoldConstant()(mod)

    # NNAPI's batch matmul wants rank-3 operands: give 2-D matmuls a batch of one.
    a, b = wildcard(), wildcard()
    matmul = is_op("relax.matmul")(a, b)

    def batch_matmul(expr, matches):
        x, y = matches[a], matches[b]
        if len(x.ty.shape) == 2 and len(y.ty.shape) == 2:
            out = matches[matmul].ty.shape
            return relax.op.reshape(relax.op.matmul(relax.op.reshape(x, [1, *x.ty.shape.values]),
                                                    relax.op.reshape(y, [1, *y.ty.shape.values])), out)
        return expr

    # clip(x, lo, hi) as minimum(maximum(x, lo), hi): both have NNAPI patterns, clip has none.
    x = wildcard()
    clip = is_op("relax.clip")(x, wildcard(), wildcard())

    def min_max(expr, matches):
        call = matches[clip]
        dtype = call.ty.dtype
        lo, hi = (relax.const(float(v.value), dtype) for v in call.args[1:3])
        return relax.op.minimum(relax.op.maximum(matches[x], lo), hi)

    main = rewrite_call(matmul, batch_matmul, mod["main"])
    mod["main"] = rewrite_call(clip, min_max, main)
    # Importers lower clip / relu6 to TIR calls that no pattern can match: give them their Relax ops.
    return tir_min_max_as_relax(mod)


# ------------------------------------------------------------------ the report

@dataclass
class Op:
    index: int
    name: str  # relax op (conv2d), TIR function (maximum), or the partition's composite ops
    side: str  # "nnapi" or "tvm"
    partition: int | None
    flops: float
    out_bytes: int
    inputs: list[int] = field(default_factory=list)  # producers' indexes (-1: a model input)
    composites: list[str] = field(default_factory=list)
    kind_flops: dict[str, float] = field(default_factory=dict)  # FLOPs per Relax op kind inside
    blocked_because: str = ""


@dataclass
class Report:
    strategy: str
    feature_level: int | None
    ops: list[Op]
    tvm_costs: list[dict] = field(default_factory=list)  # --measure: per op kind, measured or from the table

    @property
    def partitions(self) -> int:
        return len({o.partition for o in self.ops if o.side == "nnapi"})

    @property
    def transitions(self) -> int:
        """Switches between TVM and NNAPI per inference: into and out of each NNAPI partition."""
        return 2 * self.partitions

    def flops_share(self) -> dict:
        total = sum(o.flops for o in self.ops) or 1.0
        nn = sum(o.flops for o in self.ops if o.side == "nnapi")
        return {"nnapi": nn / total, "tvm": 1 - nn / total, "total_mflops": total / 1e6}

    def counts(self, side: str) -> dict:
        out: dict[str, int] = {}
        for o in self.ops:
            if o.side == side:
                for name in (o.composites or [o.name]):
                    out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def blockers(self) -> list[dict]:
        """TVM-side operators on a path from one NNAPI partition to another: they split it."""
        nn = {o.index for o in self.ops if o.side == "nnapi"}
        after_nnapi: set[int] = set()  # TVM ops reached from an NNAPI op through TVM ops
        for o in self.ops:
            if o.side == "tvm" and any(i in nn or i in after_nnapi for i in o.inputs):
                after_nnapi.add(o.index)
        before_nnapi: set[int] = set()  # TVM ops leading into an NNAPI op through TVM ops
        for o in reversed(self.ops):
            if o.index in nn or o.index in before_nnapi:
                before_nnapi.update(i for i in o.inputs if i >= 0 and self.ops[i].side == "tvm")
        seen: dict[str, dict] = {}
        for o in self.ops:
            if o.index in after_nnapi and o.index in before_nnapi:
                entry = seen.setdefault(o.name, {"op": o.name, "count": 0, "why": o.blocked_because})
                entry["count"] += 1
        return list(seen.values())

    def to_json(self) -> dict:
        return {"strategy": self.strategy, "feature_level": self.feature_level, "partitions": self.partitions,
                "transitions_per_inference": self.transitions, "flops": self.flops_share(),
                "nnapi_ops": self.counts("nnapi"), "tvm_ops": self.counts("tvm"), "blockers": self.blockers(),
                "ops": [asdict(o) for o in self.ops],
                **({"tvm_costs": self.tvm_costs, "nnapi_costs": "table"} if self.tvm_costs else {})}


def _shape(ty) -> list[int]:
    shape = getattr(ty, "shape", None)
    try:
        return [int(d) for d in shape.values]
    except Exception:
        return []


def _nbytes(ty) -> int:
    shape = _shape(ty)
    dtype = getattr(ty, "dtype", "float32")
    try:
        return int(np.prod(shape or [1])) * np.dtype(str(dtype)).itemsize
    except TypeError:
        return 0


def op_flops(name: str, call) -> float:
    """FLOPs of one Relax operator from its shapes and attributes (a multiply-add counts two).

    Convolutions are counted in any layout: a weight tensor holds (output channels) x (input
    channels per group) x (window) values, so an output element takes ``weights / out_channels``
    multiply-adds whatever the layout (OIHW, HWIO, depthwise HWOI), groups, strides or dilation
    (those two are in the output's size). A transposed convolution spreads each *input* element
    over ``weights / in_channels`` outputs.
    """
    out = _shape(call.ty)
    n_out = float(np.prod(out)) if out else 1.0
    attrs = call.attrs
    if name.startswith("conv") and len(call.args) >= 2:
        w = _shape(call.args[1].ty)
        n_w = float(np.prod(w)) if w else 0.0
        if name.endswith("_transpose"):
            data = _shape(call.args[0].ty)
            c_in = _channels(data, getattr(attrs, "data_layout", None))
            return 2.0 * float(np.prod(data)) * n_w / c_in if c_in else 0.0
        layout = getattr(attrs, "out_layout", None) or getattr(attrs, "data_layout", None)
        c_out = _channels(out, layout)
        return 2.0 * n_out * n_w / c_out if c_out else 0.0
    if name in ("matmul", "batch_matmul", "dense"):
        a = _shape(call.args[0].ty)
        return 2.0 * n_out * (a[-1] if a else 1)
    if name.startswith(("max_pool", "avg_pool")):
        size = [int(s) for s in attrs.pool_size] if hasattr(attrs, "pool_size") else [1]
        return n_out * float(np.prod(size))
    if name in ("mean", "sum", "max", "min") or name.startswith("adaptive_avg_pool"):
        return float(np.prod(_shape(call.args[0].ty) or [1]))
    return n_out


def _channels(shape: list[int], layout) -> int:
    """The channel count of a tensor in ``layout`` (NCHW, NHWC, NCW...): where its C is."""
    layout = str(layout) if layout is not None else ""
    if shape and len(layout) == len(shape) and "C" in layout:
        return shape[layout.index("C")]
    return shape[1] if len(shape) > 1 else 0


def _op_name(call, mod) -> tuple[str, object]:
    from tvm import ir, relax

    op = call.op
    if isinstance(op, ir.Op):
        if op.name == "relax.call_tir":
            return call.args[0].name_hint.rstrip("0123456789"), None
        return op.name.split(".")[-1], None
    if isinstance(op, ir.GlobalVar):
        fn = mod[op]
        if isinstance(fn, relax.Function) and fn.attrs is not None and "Codegen" in fn.attrs:
            return op.name_hint, fn
        return op.name_hint, None
    return type(op).__name__, None


def _inner_ops(fn) -> tuple[list[str], dict[str, float], list]:
    """The composite ops inside an NNAPI partition function, its FLOPs per Relax op kind, and its
    Relax op calls as (kind, call, flops)."""
    from tvm import ir, relax

    names, kind_flops, calls = [], {}, []

    def walk(f):
        local: dict = {}  # composite functions bound to local variables
        for block in f.body.blocks:
            for b in block.bindings:
                v = b.value
                if isinstance(v, relax.Function):
                    local[b.var] = v
                    continue
                if not isinstance(v, relax.Call):
                    continue
                callee = local.get(v.op, v.op) if isinstance(v.op, relax.Var) else v.op
                if isinstance(callee, relax.Function):
                    if callee.attrs is not None and "Composite" in callee.attrs:
                        names.append(str(callee.attrs["Composite"]).removeprefix("nnapi."))
                    walk(callee)
                elif isinstance(callee, ir.Op):
                    kind = callee.name.split(".")[-1]
                    flops = op_flops(kind, v)
                    kind_flops[kind] = kind_flops.get(kind, 0.0) + flops
                    calls.append((kind, v, flops))

    walk(fn)
    return names, kind_flops, calls


def analyse(partitioned, strategy: str, feature_level: int | None) -> Report:
    """Read the partitioned module's main: one Op per binding, in execution order."""
    from tvm import relax

    main = partitioned["main"]
    producer: dict = {}
    for p in main.params:
        producer[p] = -1
    ops: list[Op] = []
    partitions = 0
    for block in main.body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, relax.Call):
                producer[b.var] = producer.get(v, -1) if isinstance(v, relax.Var) else (len(ops) - 1 if ops else -1)
                continue
            name, nnapi_fn = _op_name(v, partitioned)
            args = []
            for a in v.args:
                args.extend(a.fields if isinstance(a, relax.Tuple) else [a])
            inputs = sorted({producer[a] for a in args if isinstance(a, relax.Var) and a in producer})
            if nnapi_fn is not None:
                composites, kind_flops, _ = _inner_ops(nnapi_fn)
                # every call is its own NNAPI execution, even of a function another call shares
                op = Op(len(ops), name, "nnapi", partitions, sum(kind_flops.values()), _nbytes(b.var.ty), inputs,
                        composites, kind_flops)
                partitions += 1
            else:
                flops = op_flops(name, v)
                op = Op(len(ops), name, "tvm", None, flops, _nbytes(b.var.ty), inputs, kind_flops={name: flops})
                op.blocked_because = why_not_nnapi(name, feature_level)
            producer[b.var] = op.index
            ops.append(op)
    return Report(strategy, feature_level, ops)


def why_not_nnapi(name: str, feature_level: int | None) -> str:
    from tvm.relax.backend.contrib.nnapi import min_feature_level
    from tvm.relax.backend.pattern_registry import get_patterns_with_prefix

    known = {p.name.removeprefix("nnapi."): p.name for p in get_patterns_with_prefix("nnapi")}
    aliases = {"clip": "minimum", "sigmoid": "logistic", "max_pool2d": "max_pool_2d", "matmul": "batch_matmul"}
    key = aliases.get(name, name)
    if key in known:
        level = min_feature_level(known[key])
        if feature_level is not None and level > feature_level:
            return f"needs NNAPI feature level {level} (asked for {feature_level})"
        if name == "conv2d":
            return "TVM's NNAPI conv2d pattern needs the convolution followed by a bias add"
        if name in ("maximum", "minimum", "add", "multiply", "subtract", "divide"):
            return "already lowered to a TIR function by the importer, so no NNAPI pattern matches it"
        return "its form (shapes, attributes or operand kinds) matches no NNAPI pattern"
    return "NNAPI has no pattern for it in TVM 0.27"


# ------------------------------------------------------------------ strategies

# Rates are looked up by Relax op kind (conv2d, add, ...); a batched matmul is the table's batch_matmul.
_RATE_ALIASES = {"matmul": "batch_matmul"}


def rate_gflops(kind: str, rates: dict) -> float:
    return float(rates.get(kind) or rates.get(_RATE_ALIASES.get(kind, ""), 0) or rates["default"])


def op_cost_ms(op: Op, side: str, costs: dict) -> float:
    rates = costs["nnapi_gflops" if side == "nnapi" else "tvm_gflops"]
    parts = op.kind_flops or {op.name: op.flops}
    return sum(f / (rate_gflops(kind, rates) * 1e9) for kind, f in parts.items()) * 1e3


def transition_ms(nbytes: int, costs: dict) -> float:
    return costs["transition_ms"] + costs["transition_ms_per_mb"] * nbytes / 1e6


def cost_strategy(patterns: Report, costs: dict) -> Report:
    """Dynamic programming over the ops in execution order: each NNAPI-capable op on NNAPI or TVM,
    paying a transition whenever consecutive ops change sides (the model starts and ends on TVM)."""
    ops = patterns.ops
    inf = float("inf")
    # best[i][s]: cheapest cost of ops[:i+1] with op i on side s; s: 0 tvm, 1 nnapi
    best = [[inf, inf] for _ in ops]
    back = [[0, 0] for _ in ops]
    for i, op in enumerate(ops):
        in_bytes = ops[i - 1].out_bytes if i else op.out_bytes
        for s in (0, 1):
            if s == 1 and op.side != "nnapi":
                continue  # only what a pattern matched can go to NNAPI
            own = op_cost_ms(op, "nnapi" if s else "tvm", costs)
            if i == 0:
                best[i][s] = own + (transition_ms(in_bytes, costs) if s else 0.0)
                continue
            for prev in (0, 1):
                c = best[i - 1][prev] + own + (transition_ms(in_bytes, costs) if prev != s else 0.0)
                if c < best[i][s]:
                    best[i][s], back[i][s] = c, prev
    if not ops:
        return Report("cost", patterns.feature_level, [])
    last = len(ops) - 1
    end = [best[last][0], best[last][1] + transition_ms(ops[last].out_bytes, costs)]
    side = 0 if end[0] <= end[1] else 1
    chosen = [0] * len(ops)
    for i in range(last, -1, -1):
        chosen[i] = side
        side = back[i][side]
    new_ops, partition, prev = [], -1, 0
    for op, s in zip(ops, chosen):
        o = Op(**{**asdict(op)})
        if s:
            partition += 0 if prev else 1
            o.side, o.partition = "nnapi", partition
        else:
            if op.side == "nnapi":
                o.blocked_because = "kept on TVM: its transitions cost more than NNAPI saves"
            o.side, o.partition = "tvm", None
        prev = s
        new_ops.append(o)
    return Report("cost", patterns.feature_level, new_ops)


def load_costs(path: Path | None) -> dict:
    costs = json.loads(json.dumps(DEFAULT_COSTS))
    if path is None:
        return costs
    try:
        user = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"cannot read the cost table {path}: {e}",
                         "give a JSON object like: " + json.dumps(DEFAULT_COSTS)) from e
    for k, v in user.items():
        if k not in DEFAULT_COSTS:
            raise InputError(f"unknown key {k!r} in the cost table {path}", f"keys: {', '.join(DEFAULT_COSTS)}")
        costs[k] = {**costs[k], **v} if isinstance(costs[k], dict) else float(v)
    return costs


def partition(mod, params: list, n_inputs: int, feature_level: int | None = None, strategy: str = "patterns",
              costs: dict | None = None) -> tuple[object, Report]:
    """Bind the weights, prepare, partition; returns the partitioned module and its report."""
    from tvm import relax
    from tvm.relax.backend.contrib.nnapi import partition_for_nnapi

    if params:
        mod = relax.transform.BindParams("main", dict(zip(mod["main"].params[n_inputs:], params)))(mod)
    partitioned = partition_for_nnapi(prepare(mod), feature_level=feature_level)
    report = analyse(partitioned, "patterns", feature_level)
    if strategy == "cost":
        report = cost_strategy(report, costs or DEFAULT_COSTS)
    return partitioned, report


# ------------------------------------------------------------------ code generation

# TVM registers its NNAPI code generator under this name (src/relax/backend/contrib/nnapi/codegen.cc,
# built with USE_NNAPI_CODEGEN=ON); RunCodegen calls it for every function marked Codegen="nnapi".
CODEGEN = "relax.ext.nnapi"

# What a phone needs to run an NNAPI artifact: the manifest records it, the apps check it.
RUNTIME_NEEDS = {
    "library": "libtvm_runtime_extra.so",  # TVM's runtime built with USE_NNAPI_RUNTIME=ON holds the loader
    "loader": "ffi.Module.load_from_bytes.nnapi",
    "tvm_build_option": "USE_NNAPI_RUNTIME=ON",
    "system_library": "libneuralnetworks.so",  # an NDK public library: no manifest declaration needed
    "min_android_api": 27,  # NNAPI arrived in Android 8.1
}


def has_codegen() -> bool:
    import tvm

    return tvm.get_global_func(CODEGEN, allow_missing=True) is not None


def _nnapi_calls(mod) -> list:
    """The calls of NNAPI partition functions in main, in execution order (as `analyse` numbers them)."""
    from tvm import ir, relax

    calls = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and isinstance(v.op, ir.GlobalVar):
                fn = mod[v.op]
                if isinstance(fn, relax.Function) and fn.attrs is not None and "Codegen" in fn.attrs:
                    calls.append(v)
    return calls


def _plain_function(fn):
    """An NNAPI partition function as an ordinary Relax function: composites inlined, no Codegen."""
    import tvm
    from tvm import relax

    lifted = relax.transform.LambdaLift()(tvm.IRModule({"partition": fn.without_attr("Codegen")}))
    inner = {g: lifted[g].without_attr("Composite") for g in lifted.get_global_vars() if g.name_hint != "partition"}
    return lifted["partition"].inline_functions(inner).without_attr("global_symbol")


def keep_on_tvm(partitioned, report: Report):
    """The partitioned module with the NNAPI calls that ``report`` placed on TVM (the cost strategy's
    choice) computed by TVM instead; partition functions no call uses any more are dropped."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    calls = _nnapi_calls(partitioned)
    candidates = [o for o in report.ops if o.composites]  # what a pattern matched, in the same order
    if len(candidates) != len(calls):
        raise TvmgenError(f"the NNAPI placement names {len(candidates)} partition calls, the module has {len(calls)}",
                          "a bug in tvmgen: report it with the log file")
    kept = [c for c, o in zip(calls, candidates) if o.side == "tvm"]
    if not kept:
        return partitioned
    mod, plain = partitioned, {}
    for call in kept:
        if call.op not in plain:  # one TVM copy per shared partition function
            bb = relax.BlockBuilder(mod)
            name = call.op.name_hint.removesuffix("_nnapi") + "_tvm"
            plain[call.op] = bb.add_func(_plain_function(mod[call.op]), name)
            mod = bb.get()

    @mutator
    class Redirect(PyExprMutator):
        def visit_call_(self, call):
            if any(call.same_as(k) for k in kept):
                return relax.Call(plain[call.op], [self.visit_expr(a) for a in call.args])
            return super().visit_call_(call)

    mod["main"] = Redirect(mod).visit_expr(mod["main"])
    used = {c.op for c in _nnapi_calls(mod)}
    return tvm.IRModule({g: f for g, f in mod.functions.items()
                         if g in used or not (isinstance(f, relax.Function) and f.attrs is not None
                                              and "Codegen" in f.attrs)}, attrs=mod.attrs)


def generate(imported, partitioned, report: Report):
    """Run TVM's NNAPI code generator on the NNAPI parts of ``partitioned`` placed as ``report`` says.

    Returns an ImportedModel whose module holds the generated NNAPI modules, ready for an ordinary
    CPU build; its weights are bound (the NNAPI parts take them as constants)."""
    import dataclasses

    from tvm import relax

    require_codegen()
    mod = relax.transform.RunCodegen()(keep_on_tvm(partitioned, report))
    return dataclasses.replace(imported, mod=mod, params=[])


def runtime_needs(report: Report) -> dict:
    """The manifest's record of what running this artifact takes."""
    return {"nnapi": {**RUNTIME_NEEDS, "partitions": report.partitions, "strategy": report.strategy,
                      "feature_level": report.feature_level}}


def require_codegen() -> None:
    """NNAPI code generation needs a TVM built with it; say exactly which options when it is not."""
    if not has_codegen():
        raise NnapiBuildError(
            "this TVM build has no NNAPI code generator (relax.ext.nnapi): the PyPI apache-tvm is built with "
            "USE_NNAPI_CODEGEN=OFF and USE_NNAPI_RUNTIME=OFF",
            "build TVM from source with USE_NNAPI_CODEGEN=ON for compiling, and the Android runtime with "
            "USE_NNAPI_RUNTIME=ON (tvmgen's jni/ CMake: -DTVMGEN_NNAPI=ON); `tvmgen partition MODEL --nnapi` "
            "shows the placement meanwhile")


# ------------------------------------------------------------------ measured TVM-side costs

def op_instances(partitioned) -> dict[str, tuple]:
    """Per Relax op kind inside the NNAPI partitions (what the cost strategy places): the call with
    the most FLOPs, which stands for its kind when measured, and those FLOPs."""
    from tvm import relax

    found: dict[str, tuple] = {}
    for fn in partitioned.functions.values():
        if isinstance(fn, relax.Function) and fn.attrs is not None and "Codegen" in fn.attrs:
            for kind, call, flops in _inner_ops(fn)[2]:
                if kind not in found or flops > found[kind][1]:
                    found[kind] = (call, flops)
    return dict(sorted(found.items()))


def single_op_model(kind: str, call):
    """An ImportedModel whose main runs ``call`` alone, its tensor operands as inputs (None when an
    operand is neither a tensor nor a constant, or a shape is not static)."""
    from tvm import ir, relax

    from tvmgen.frontends.base import ImportedModel, TensorSpec

    params, args, specs = [], [], []
    for a in call.args:
        if isinstance(a, ir.Constant):
            args.append(a)
        elif isinstance(a, relax.Var) and isinstance(a.ty, relax.TensorType) and a.ty.shape is not None \
                and len(_shape(a.ty)) == a.ty.ndim:  # a static shape (scalars included)
            name = f"x{len(params)}"
            v = relax.Var(name, a.ty)
            params.append(v)
            args.append(v)
            specs.append(TensorSpec(name, tuple(_shape(a.ty)), str(a.ty.dtype)))
        else:
            return None
    bb = relax.BlockBuilder()
    with bb.function("main", params, attrs={"num_input": len(params)}):
        with bb.dataflow():
            out = bb.emit_output(relax.Call(call.op, args, call.attrs, call.ty_args))
        bb.emit_func_output(out)
    return ImportedModel(bb.get(), [], specs, [kind], "relax", "", None)


def measure_tvm_costs(partitioned, target, platform: str | None, costs: dict, scratch: Path,
                      repeat: int = 5, number: int = 10) -> list[dict]:
    """Time each op kind the NNAPI partitions hold, compiled alone for the device's CPU, over RPC
    (tvmgen bench's machinery); returns one row per kind: measured GFLOP/s (median of ``repeat``
    repeats of ``number`` runs), or the table's rate where a kind cannot be built alone."""
    from tvmgen import bench
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import check_pair, get_platform

    with step(f"Connecting to device {target.key!r}"):
        remote, info = bench.connect(target)
    plat = get_platform(platform or info.get("platform") or "host")
    check_pair(plat, "cpu")
    rows = []
    for kind, (call, flops) in op_instances(partitioned).items():
        table = rate_gflops(kind, costs["tvm_gflops"])
        row = {"op": kind, "flops": flops, "source": "table", "gflops": table, "table_gflops": table}
        model = single_op_model(kind, call)
        if model is None:
            row["why"] = "its operands cannot be given as inputs of a one-op model"
            rows.append(row)
            continue
        row["inputs"] = [list(s.shape) for s in model.inputs]
        directory = scratch / f"op-{kind}"
        build.compile_to_artifact(model, build.BuildOptions(plat, "cpu"), directory, True, {"name": f"op-{kind}"})
        timed = bench.bench_model(remote, info, directory, target.key, repeat, number, 0, seed=0)
        median = float(np.median(timed.warm_ms))
        row.update(source="measured", median_ms=median, gflops=flops / (median / 1e3) / 1e9,
                   device=f"{info.get('platform', plat.name)} ({info.get('arch', plat.arch)})")
        rows.append(row)
    return rows


def with_measured(costs: dict, rows: list[dict]) -> dict:
    """The cost table with its TVM column replaced by the measured rates."""
    out = json.loads(json.dumps(costs))
    out["tvm_gflops"].update({r["op"]: r["gflops"] for r in rows if r["source"] == "measured"})
    return out


def format_costs(rows: list[dict]) -> str:
    device = next((r["device"] for r in rows if "device" in r), "?")
    lines = [f"TVM-side costs measured on {device} (median; NNAPI-side and transition costs stay from the cost table):",
             f"  {'op':<14}{'MFLOP':>10}{'median ms':>12}{'GFLOP/s':>10}{'table':>8}  source"]
    for r in rows:
        ms = f"{r['median_ms']:.4f}" if "median_ms" in r else "-"
        lines.append(f"  {r['op']:<14}{r['flops'] / 1e6:>10.3f}{ms:>12}{r['gflops']:>10.2f}{r['table_gflops']:>8.1f}  "
                     f"{r['source']}{' (' + r['why'] + ')' if 'why' in r else ''}")
    return "\n".join(lines)


def format_report(r: Report) -> str:
    share = r.flops_share()
    lines = [f"NNAPI partitioning ({r.strategy} strategy, feature level {r.feature_level or 'any'}):",
             f"  partitions: {r.partitions}   NNAPI<->TVM transitions per inference: {r.transitions}",
             f"  FLOPs: {share['total_mflops']:.1f} MFLOP, NNAPI {share['nnapi'] * 100:.1f}%, TVM {share['tvm'] * 100:.1f}%",
             "  on NNAPI: " + (", ".join(f"{k} x{v}" for k, v in r.counts("nnapi").items()) or "nothing"),
             "  on TVM:   " + (", ".join(f"{k} x{v}" for k, v in r.counts("tvm").items()) or "nothing")]
    blockers = r.blockers()
    if blockers:
        lines.append("  splitting NNAPI partitions:")
        lines += [f"    {b['op']} x{b['count']}: {b['why']}" for b in blockers]
    if r.partitions and r.flops_share()["nnapi"] < 0.5:
        lines.append("  warning: NNAPI holds under half the work; many small partitions often run slower than the CPU")
    return "\n".join(lines)
