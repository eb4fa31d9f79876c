"""The NNAPI partition report: the model prepared as TVM's NNAPI flow does, one Op per operator with
its side and FLOPs, partitions, transitions and what splits them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


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
            return relax.op.reshape(
                relax.op.matmul(
                    relax.op.reshape(x, [1, *x.ty.shape.values]), relax.op.reshape(y, [1, *y.ty.shape.values])
                ),
                out,
            )
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
                for name in o.composites or [o.name]:
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
        return {
            "strategy": self.strategy,
            "feature_level": self.feature_level,
            "partitions": self.partitions,
            "transitions_per_inference": self.transitions,
            "flops": self.flops_share(),
            "nnapi_ops": self.counts("nnapi"),
            "tvm_ops": self.counts("tvm"),
            "blockers": self.blockers(),
            "ops": [asdict(o) for o in self.ops],
            **({"tvm_costs": self.tvm_costs, "nnapi_costs": "table"} if self.tvm_costs else {}),
        }


def tensor_shape(ty) -> list[int]:
    shape = getattr(ty, "shape", None)
    if shape is None:
        return []
    try:
        return [int(d) for d in shape.values]
    except Exception:
        return []


def _nbytes(ty) -> int:
    shape = tensor_shape(ty)
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
    out = tensor_shape(call.ty)
    n_out = float(np.prod(out)) if out else 1.0
    attrs = call.attrs
    if name.startswith("conv") and len(call.args) >= 2:
        w = tensor_shape(call.args[1].ty)
        n_w = float(np.prod(w)) if w else 0.0
        if name.endswith("_transpose"):
            data = tensor_shape(call.args[0].ty)
            c_in = _channels(data, getattr(attrs, "data_layout", None))
            return 2.0 * float(np.prod(data)) * n_w / c_in if c_in else 0.0
        layout = getattr(attrs, "out_layout", None) or getattr(attrs, "data_layout", None)
        c_out = _channels(out, layout)
        return 2.0 * n_out * n_w / c_out if c_out else 0.0
    if name in ("matmul", "batch_matmul", "dense"):
        a = tensor_shape(call.args[0].ty)
        return 2.0 * n_out * (a[-1] if a else 1)
    if name.startswith(("max_pool", "avg_pool")):
        size = [int(s) for s in attrs.pool_size] if hasattr(attrs, "pool_size") else [1]
        return n_out * float(np.prod(size))
    if name in ("mean", "sum", "max", "min") or name.startswith("adaptive_avg_pool"):
        return float(np.prod(tensor_shape(call.args[0].ty) or [1]))
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


def inner_ops(fn) -> tuple[list[str], dict[str, float], list]:
    """The composite ops inside an NNAPI partition function, its FLOPs per Relax op kind, and its
    Relax op calls as (kind, call, flops)."""
    from tvm import ir, relax

    names: list[str] = []
    kind_flops: dict[str, float] = {}
    calls: list = []

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
            args: list = []
            for a in v.args:
                args.extend(a.fields if isinstance(a, relax.Tuple) else [a])
            inputs = sorted({producer[a] for a in args if isinstance(a, relax.Var) and a in producer})
            if nnapi_fn is not None:
                composites, kind_flops, _ = inner_ops(nnapi_fn)
                # every call is its own NNAPI execution, even of a function another call shares
                op = Op(
                    len(ops),
                    name,
                    "nnapi",
                    partitions,
                    sum(kind_flops.values()),
                    _nbytes(b.var.ty),
                    inputs,
                    composites,
                    kind_flops,
                )
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


def format_report(r: Report) -> str:
    share = r.flops_share()
    lines = [
        f"NNAPI partitioning ({r.strategy} strategy, feature level {r.feature_level or 'any'}):",
        f"  partitions: {r.partitions}   NNAPI<->TVM transitions per inference: {r.transitions}",
        f"  FLOPs: {share['total_mflops']:.1f} MFLOP, NNAPI {share['nnapi'] * 100:.1f}%, TVM {share['tvm'] * 100:.1f}%",
        "  on NNAPI: " + (", ".join(f"{k} x{v}" for k, v in r.counts("nnapi").items()) or "nothing"),
        "  on TVM:   " + (", ".join(f"{k} x{v}" for k, v in r.counts("tvm").items()) or "nothing"),
    ]
    blockers = r.blockers()
    if blockers:
        lines.append("  splitting NNAPI partitions:")
        lines += [f"    {b['op']} x{b['count']}: {b['why']}" for b in blockers]
    if r.partitions and r.flops_share()["nnapi"] < 0.5:
        lines.append("  warning: NNAPI holds under half the work; many small partitions often run slower than the CPU")
    return "\n".join(lines)
