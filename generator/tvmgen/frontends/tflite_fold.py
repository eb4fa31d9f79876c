"""Constant folding over a TFLite graph before TVM's importer sees it.

TVM's TFLite converters read many operands as constants (``np.frombuffer`` on the tensor's buffer):
STRIDED_SLICE's begin/end, RESHAPE's shape, PAD's paddings, EXPAND_DIMS's axis... A model computes
them in the graph when its converter could not (a dynamic batch at conversion: ``SHAPE`` ->
``STRIDED_SLICE`` -> ``PACK`` -> ``RESHAPE``). Once the input shapes are fixed those values are fixed
too; here LiteRT computes them and they become constant buffers, so every converter sees constants.

The rule, by mechanism (no operator is special-cased by what it computes):

- A tensor is *computed from constants* when the operator writing it reads only constant tensors
  (a buffer in the file) or tensors computed from constants, or when that operator is ``SHAPE`` or
  ``RANK`` (their values depend on shapes only, which are fixed once the input shapes are).
  Never through ``DEQUANTIZE``/``DENSIFY`` (fp16, int8 and sparse weights stay as stored: tvmgen's
  converter keeps them so, and --separate-params writes them as stored), stateful or random
  operators, control flow or custom operators.
- Such a tensor is folded (stored as a constant buffer, the operators only it needed removed) when
  an operator that stays, or the model's output, reads it, and it has at most ``FOLD_MAX_ELEMENTS``
  elements: what converters need as constants is that small; larger ones (weights transformed in
  the graph) stay as TVM imports them.
- LiteRT (builtin kernels, no default delegates, every intermediate kept) runs the model twice, on
  two different seeded inputs at the chosen input shapes; a value that differs between the runs (a
  shape that depends on data, a random operator) is not folded.
- When LiteRT runs, every tensor's stored shape is also replaced by the one LiteRT computed at the
  chosen input shapes (a converter writes 1 for a dimension it did not know), so the converters'
  shapes are the real ones at any ``--input`` size.

A model with nothing to fold whose tensors all have fixed shapes equal to the chosen ones is passed
through untouched (byte for byte, no LiteRT run).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tvmgen.core import interrupts

log = logging.getLogger("tvmgen.frontends.tflite")

FOLD_MAX_ELEMENTS = 4096

# Operators whose outputs are never folded, whatever they read.
NOT_FOLDED = {
    "DEQUANTIZE": "weights stay as stored (fp16/int8)",
    "DENSIFY": "sparse weights stay as stored",
    "VAR_HANDLE": "a resource variable",
    "READ_VARIABLE": "a resource variable (its state changes between runs)",
    "ASSIGN_VARIABLE": "a resource variable",
    "CALL_ONCE": "runs a subgraph once per interpreter",
    "RANDOM_UNIFORM": "a new value each run",
    "RANDOM_STANDARD_NORMAL": "a new value each run",
    "MULTINOMIAL": "a new value each run",
    "STABLEHLO_RNG_BIT_GENERATOR": "a new value each run",
    "HASHTABLE": "a lookup table",
    "HASHTABLE_FIND": "a lookup table",
    "HASHTABLE_IMPORT": "a lookup table",
    "HASHTABLE_SIZE": "a lookup table",
    "WHILE": "control flow",
    "IF": "control flow",
    "CALL": "control flow",
    "CUSTOM": "a custom operator",
}
SHAPE_ONLY = frozenset({"SHAPE", "RANK"})


@dataclass
class Folded:
    """The model TVM's importer reads, and what folding did."""

    model_bytes: bytes  # the input bytes themselves when nothing changed
    folded: list[int] = field(default_factory=list)  # tensors now stored as constants
    removed_ops: list[int] = field(default_factory=list)  # operator indices (of the original model) removed
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why LiteRT could not compute the values, when it could not
    graph: Graph | None = None  # the original graph's analysis, for errors that say why a tensor is not constant
    too_large: set[int] = field(default_factory=set)
    unstable: set[int] = field(default_factory=set)


class Graph:
    """Subgraph 0 of a TFLite model, read (not unpacked) with LiteRT's flatbuffer schema."""

    def __init__(self, buf: bytes):
        from ai_edge_litert import schema_py_generated as fb

        names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
        model = fb.Model.GetRootAsModel(buf, 0)
        sub = model.Subgraphs(0)
        codes = []
        for i in range(model.OperatorCodesLength()):
            c = model.OperatorCodes(i)
            codes.append(names.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "?"))
        self.tensor_names: list[str] = []
        self.shapes: list[tuple[int, ...]] = []
        self.dynamic: list[bool] = []  # a -1 in shape_signature
        self.types: list[int] = []
        self.constant: list[bool] = []
        self.string_type = fb.TensorType.STRING
        for i in range(sub.TensorsLength()):
            t = sub.Tensors(i)
            self.tensor_names.append((t.Name() or b"").decode(errors="replace"))
            self.shapes.append(tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ())
            self.dynamic.append(bool(t.ShapeSignatureLength()) and bool((t.ShapeSignatureAsNumpy() < 0).any()))
            self.types.append(t.Type())
            b = model.Buffers(t.Buffer()) if t.Buffer() < model.BuffersLength() else None
            stored = b is not None and (b.DataLength() > 0 or (b.Offset() > 1 and b.Size() > 0))
            self.constant.append(stored and not t.IsVariable())
        self.ops: list[tuple[str, list[int], list[int]]] = []
        for i in range(sub.OperatorsLength()):
            op = sub.Operators(i)
            ins = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
            outs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
            self.ops.append((codes[op.OpcodeIndex()], ins, outs))
        self.inputs = [int(x) for x in sub.InputsAsNumpy()] if sub.InputsLength() else []
        self.outputs = [int(x) for x in sub.OutputsAsNumpy()] if sub.OutputsLength() else []
        self.producer = {t: i for i, (_, _, outs) in enumerate(self.ops) for t in outs}

    def static_ops(self, demoted: frozenset[int] | set[int] = frozenset()) -> set[int]:
        """The operators whose outputs are computed from constants (operators are stored in execution order)."""
        static = {t for t, c in enumerate(self.constant) if c}
        ops = set()
        for i, (name, ins, outs) in enumerate(self.ops):
            if name in NOT_FOLDED or i in demoted:
                continue
            if name in SHAPE_ONLY or all(t in static for t in ins if t >= 0):
                ops.add(i)
                static.update(outs)
        return ops

    def plan(self, static_ops: set[int], size) -> tuple[set[int], set[int]]:
        """(tensors to fold, operators kept): the computed-from-constants tensors that a kept operator or
        the model's output reads, of at most FOLD_MAX_ELEMENTS elements (``size(t)``); a larger one keeps
        its operator, whose inputs are then needed in turn."""
        kept = set(range(len(self.ops))) - static_ops
        needed = [t for o in kept for t in self.ops[o][1] if t >= 0] + list(self.outputs)
        fold, seen = set(), set()
        while needed:
            t = needed.pop()
            if t in seen:
                continue
            seen.add(t)
            p = self.producer.get(t)
            if p is None or p not in static_ops:
                continue
            if self.types[t] != self.string_type and size(t) <= FOLD_MAX_ELEMENTS:
                fold.add(t)
            elif p not in kept:
                kept.add(p)
                needed += [i for i in self.ops[p][1] if i >= 0]
        # an output of an operator that stays is written by it: it cannot also be a constant
        return {t for t in fold if self.producer[t] not in kept}, kept


def fold(buf: bytes, input_shapes: Sequence[tuple[int, ...]], input_dtypes: Sequence[str]) -> Folded:
    """Fold ``buf`` (a TFLite model) at ``input_shapes`` (one per subgraph input, in order)."""
    graph = Graph(buf)
    result = Folded(buf, graph=graph)
    static = graph.static_ops()

    def stored_size(t):
        return int(np.prod(graph.shapes[t], dtype=np.int64)) if not graph.dynamic[t] else 1

    to_fold, _ = graph.plan(static, stored_size)
    resized = [tuple(graph.shapes[t]) for t in graph.inputs] != [tuple(s) for s in input_shapes]
    if not to_fold and not resized and not any(graph.dynamic):
        return result  # nothing to fold, every shape fixed as stored: untouched, no LiteRT run
    try:
        runs = _run_litert(buf, graph, input_shapes, input_dtypes, static)
    except Exception as e:  # LiteRT cannot run the model (custom operators, bad shapes): TVM gets it as it is
        interrupts.reraise_if_interrupted(e)
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        result.skipped = f"LiteRT cannot run the model ({reason})"
        if to_fold:  # said only when something needed folding
            result.notes.append(
                f"not folded: {len(to_fold)} computed operand(s) TVM's importer may need as constants, "
                f"because {result.skipped}"
            )
        log.debug("folding skipped: %s", e)
        return result
    (shapes1, values1), (shapes2, values2) = runs

    def actual_size(t):
        return int(np.prod(shapes1[t], dtype=np.int64)) if t in shapes1 else stored_size(t)

    demoted: set[int] = set()
    while True:  # a value that differs between the two runs is not a constant: its operator stays
        static = graph.static_ops(demoted)
        to_fold, kept = graph.plan(static, actual_size)
        unstable = {t for t in to_fold if t not in values1 or t not in values2 or not _same(values1[t], values2[t])}
        if not unstable:
            break
        result.unstable |= unstable
        demoted |= {graph.producer[t] for t in unstable}
    result.too_large = {t for o in static for t in graph.ops[o][2] if actual_size(t) > FOLD_MAX_ELEMENTS and o in kept}
    stable_shapes = {t: s for t, s in shapes1.items() if shapes2.get(t) == s}
    changed = {t for t, s in stable_shapes.items() if s != graph.shapes[t] or graph.dynamic[t]}
    removed = sorted(set(range(len(graph.ops))) - kept)
    if not to_fold and not removed and not changed:
        return result
    result.model_bytes = _rewrite(buf, graph, {t: values1[t] for t in to_fold}, stable_shapes, kept)
    result.folded, result.removed_ops = sorted(to_fold), removed
    if to_fold:
        kinds = sorted({graph.ops[o][0] for o in removed})
        result.notes.append(
            f"folded {len(to_fold)} computed operand(s) to constants with LiteRT at the input shape(s) "
            f"{', '.join('x'.join(map(str, s)) or 'scalar' for s in input_shapes)} "
            f"({len(removed)} operator(s) removed: {', '.join(kinds)})"
        )
    return result


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _run_litert(buf, graph: Graph, input_shapes, input_dtypes, static: set[int]):
    """Two runs of LiteRT on seeded inputs at ``input_shapes``: [(shapes {tensor: shape}, values {tensor:
    value} of the small computed-from-constants tensors)] for each."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tvmgen.core.model import TensorSpec, random_inputs

    interp = Interpreter(
        model_content=buf,
        num_threads=1,
        experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    for t, shape in zip(graph.inputs, input_shapes):
        if tuple(graph.shapes[t]) != tuple(shape):
            interp.resize_tensor_input(t, list(shape), strict=False)
    interp.allocate_tensors()
    specs = [TensorSpec(str(t), tuple(s), d) for t, s, d in zip(graph.inputs, input_shapes, input_dtypes)]
    computed = {t for o in static for t in graph.ops[o][2]}
    runs = []
    for seed in (0, 1):
        for name, value in random_inputs(specs, seed).items():
            interp.set_tensor(int(name), value)
        interp.invoke()
        shapes = {  # LiteRT adds tensors of its own (scratch buffers) after the model's
            int(d["index"]): tuple(int(x) for x in d["shape"])
            for d in interp.get_tensor_details()
            if int(d["index"]) < len(graph.shapes)
        }
        values = {}
        for t in computed:
            if t in shapes and int(np.prod(shapes[t], dtype=np.int64)) <= FOLD_MAX_ELEMENTS:
                with contextlib.suppress(ValueError):  # no data kept for it
                    values[t] = np.array(interp.get_tensor(t))
        runs.append((shapes, values))
    return runs


def _rewrite(buf: bytes, graph: Graph, values: dict[int, np.ndarray], shapes: dict[int, tuple], kept: set[int]):
    """The model with ``values`` as constant buffers, ``shapes`` as the tensors' (fixed) shapes, and only
    the operators ``kept``, re-packed with the flatbuffer object API."""
    from ai_edge_litert import schema_py_generated as fb

    model = unpack(buf)
    sub = model.subgraphs[0]
    for t, shape in shapes.items():
        if t < len(sub.tensors) and not graph.constant[t]:
            sub.tensors[t].shape = list(shape)
            sub.tensors[t].shapeSignature = None
    for t, value in values.items():
        b = fb.BufferT()
        b.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
        model.buffers.append(b)
        tensor = sub.tensors[t]
        tensor.buffer, tensor.shape, tensor.shapeSignature = len(model.buffers) - 1, list(value.shape), None
    sub.operators = [op for i, op in enumerate(sub.operators) if i in kept]
    return pack(model, len(buf))


def unpack(buf: bytes):
    """The model as the flatbuffer object API's ``ModelT``, to edit; data stored after the flatbuffer
    moved into its buffers (packing again changes the offsets)."""
    from ai_edge_litert import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(buf, 0))
    for b in model.buffers or []:
        if b.offset > 1 and b.size > 0:
            b.data, b.offset, b.size = np.frombuffer(buf[b.offset : b.offset + b.size], np.uint8), 0, 0
    return model


def pack(model, size_hint: int) -> bytes:
    """A ``ModelT`` (``unpack``) as TFLite model bytes."""
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def why_not_constant(result: Folded | None, t: int) -> str:
    """Why tensor ``t`` (of the original model) is still computed at run time, in a few words."""
    graph = result.graph if result is not None else None
    if result is None or graph is None or t < 0 or t >= len(graph.tensor_names):
        return "computed at run time"
    p = graph.producer.get(t)
    if p is None:
        return "a model input" if t in graph.inputs else "no value in the file and no operator writes it"
    where = f"computed by #{p} {graph.ops[p][0]}"
    if t in result.unstable:
        return f"{where}; its value changed between two LiteRT runs on different inputs, so it is not folded"
    if t in result.too_large:
        return f"{where} from constants, but has more than {FOLD_MAX_ELEMENTS} elements, so it is not folded"
    if result.skipped and p in graph.static_ops():
        return f"{where} from constants, not folded because {result.skipped}"
    # the model inputs and never-folded operators it depends on (through values, not SHAPE)
    inputs, blockers, seen, todo = [], [], set(), [t]
    while todo:
        u = todo.pop()
        if u in seen or u < 0:
            continue
        seen.add(u)
        q = graph.producer.get(u)
        if q is None:
            if u in graph.inputs:
                inputs.append(graph.tensor_names[u])
            continue
        name, ins, _ = graph.ops[q]
        if name in SHAPE_ONLY:
            continue
        if name in NOT_FOLDED:
            blockers.append(f"#{q} {name} ({NOT_FOLDED[name]})")
            continue
        todo += ins
    parts = []
    if inputs:
        parts.append(f"from the value of the model's input(s) {', '.join(repr(n) for n in sorted(set(inputs)))}")
    if blockers:
        parts.append(f"through {', '.join(sorted(set(blockers))[:3])}, which tvmgen does not fold")
    return f"{where} at run time {' and '.join(parts)}" if parts else f"{where} at run time"
