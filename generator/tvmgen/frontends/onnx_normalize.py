"""Every ONNX model is normalized before TVM's importer sees it, so a model family never seen
before passes because its class is covered, not its case:

1. **opset upgraded** to the one TVM's importer handles best (``TARGET_OPSET``) with onnx's version
   converter. TVM 0.27's converters read the newer forms only (an opset-9 ``Slice`` with
   starts/ends as attributes reaches its opset-13 converter and fails; tvmgen's own RNN
   expansion writes opset-13 ``Unsqueeze``/``Slice``). Where the converter cannot, the output
   says which operator stopped it and the model is imported at its own opset.
2. **input shapes fixed** to the resolved ones (``--input`` or the model's own).
3. **folded to a fixed point**: onnxslim's folding and shape inference, then every node left
   whose inputs are constants or shapes known once the inputs are fixed (``Shape`` →
   ``Gather`` → ``Unsqueeze`` → ``Concat`` chains, ``ConstantOfShape`` from the batch size,
   ``Slice``/``Reshape``/``Expand`` parameters) evaluated with onnx's reference evaluator,
   repeated while a round folds something (one onnxslim pass can leave such chains behind).
"""

from __future__ import annotations

import copy
import logging

import numpy as np

from tvmgen.core import interrupts

log = logging.getLogger("tvmgen.frontends.onnx")

TARGET_OPSET = 17  # TVM 0.27's converters implement up to the opset-13+ forms; 17 is what its tests export
FOLD_MAX_ELEMENTS = 1 << 16  # a folded result above this stays a computation (no weight copies in the file)
MAX_ROUNDS = 6
# Never evaluated at import: random or quantization operators (an int8 weight must stay int8 for the
# integer path), and control flow (its branches are the importer's business).
NOT_FOLDED = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "DequantizeLinear",
        "QuantizeLinear",
        "DynamicQuantizeLinear",
        "If",
        "Loop",
        "Scan",
        "Constant",
    }
)


def opset_of(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def upgrade_opset(model, notes: list[str]):
    """The model at ``TARGET_OPSET`` when it is older; itself when newer or when the converter fails."""
    from onnx import version_converter

    opset = opset_of(model)
    if not opset or opset >= TARGET_OPSET:
        return model
    try:
        upgraded = version_converter.convert_version(model, TARGET_OPSET)
    except Exception as e:  # onnx raises RuntimeError / ConvertError with the adapter's words
        interrupts.reraise_if_interrupted(e)
        operator = _converter_operator(model, str(e))
        notes.append(
            f"opset {opset} kept: onnx's version converter cannot upgrade it to {TARGET_OPSET}"
            f"{f' at operator {operator}' if operator else ''} ({_first_line(e)}); TVM's importer reads some "
            "operators (Slice, Unsqueeze, Split, Squeeze, Pad) in their newer form only, so an import error may follow"
        )
        log.info("version converter failed: %s", e)
        return model
    # the converter keeps value_info of the old opset; types stay valid, shapes are inferred again below
    del upgraded.graph.value_info[:]
    notes.append(f"opset {opset} upgraded to {TARGET_OPSET} (onnx's version converter)")
    return upgraded


def _converter_operator(model, message: str) -> str | None:
    """The operator type the version converter's message names, if it names one of the model's."""
    types = sorted({n.op_type for n in model.graph.node}, key=len, reverse=True)
    return next((t for t in types if t in message), None)


def fix_input_shapes(model, specs) -> None:
    by_name = {s.name: s for s in specs}
    for vi in model.graph.input:
        s = by_name.get(vi.name)
        if s is None:
            continue
        dims = vi.type.tensor_type.shape.dim
        del dims[:]
        for d in s.shape:
            dims.add().dim_value = d


def normalize(model, specs, notes: list[str]):
    """Upgrade, fix the input shapes, fold to a fixed point. ``notes`` gets one line per thing done
    that a user should know about."""
    model = upgrade_opset(model, notes)
    fix_input_shapes(model, specs)
    inputs = {vi.name: copy.deepcopy(vi) for vi in model.graph.input}
    folded = 0
    for _ in range(MAX_ROUNDS):
        model = _slim(model)
        model, n = fold_constants(model)
        folded += n
        if not n:
            break
    if folded:
        log.info("folded %d node(s) onnxslim left", folded)
    _keep_inputs(model, [inputs[s.name] for s in specs if s.name in inputs])
    return model


def _keep_inputs(model, inputs) -> None:
    """Every input the model was given, in its order, even where folding left it unread (a graph that
    computes only from an input's shape): the artifact takes the inputs the model declares, and TVM's
    importer makes one parameter per graph input."""
    graph = model.graph
    present = {vi.name: vi for vi in graph.input}
    wanted = [present.get(vi.name, vi) for vi in inputs]
    rest = [vi for vi in graph.input if vi.name not in {w.name for w in wanted}]
    del graph.input[:]
    graph.input.extend([*wanted, *rest])


def _slim(model):
    import onnx
    import onnxslim

    try:
        slimmed = onnxslim.slim(model)
        if slimmed is not None:
            return slimmed
    except Exception as e:  # onnxslim is best effort: ONNX's own shape inference and tvmgen's folding follow
        interrupts.reraise_if_interrupted(e)
        log.warning("onnxslim could not simplify the graph (%s); using ONNX shape inference and folding only", e)
    return onnx.shape_inference.infer_shapes(model)


def fold_constants(model):
    """One round over the main graph: every node whose inputs are all known (initializers,
    Constant nodes, earlier folds, or a ``Shape``/``Size`` of a tensor whose shape inference fixed)
    becomes initializers. Returns (model, nodes folded)."""
    import onnx
    from onnx import numpy_helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # a model shape inference rejects is left to the importer's own error
        interrupts.reraise_if_interrupted(e)
        log.info("shape inference failed before folding: %s", e)
        return model, 0
    graph = model.graph
    shapes = _static_shapes(inferred.graph)
    known: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    graph_inputs = {vi.name for vi in graph.input} - set(known)
    folded: dict[str, np.ndarray] = {}
    kept, nodes_folded = [], 0
    opset = opset_of(model)
    for node in graph.node:
        value = _evaluate(node, known, shapes, graph_inputs, opset)
        if value is None:
            kept.append(node)
            continue
        nodes_folded += 1
        for name, v in zip(node.output, value, strict=True):
            if name:
                known[name] = folded[name] = v
    if not folded:
        return model, 0
    used = {i for n in kept for i in _all_inputs(n)} | {o.name for o in graph.output}
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items() if name in used)
    return model, nodes_folded


def _evaluate(node, known, shapes, graph_inputs, opset):
    """The node's outputs as arrays when they can be known at import, else None."""
    if (
        node.domain not in ("", "ai.onnx")
        or node.op_type in NOT_FOLDED
        or any(a.type == a.GRAPH for a in node.attribute)
    ):
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes and node.input[0] not in known:
        shape = np.array(shapes[node.input[0]], np.int64)
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        return [shape[attrs.get("start", 0) : attrs.get("end", len(shape))]]
    inputs = [i for i in node.input if i]
    if not inputs or any(i not in known for i in inputs):
        return None
    if sum(int(np.size(known[i])) for i in inputs) > 4 * FOLD_MAX_ELEMENTS:
        return None  # weights: the compiler folds their arithmetic itself
    try:
        outputs = _run_node(node, known, opset)
    except Exception as e:  # an operator onnx's evaluator lacks or rejects: leave it to TVM
        interrupts.reraise_if_interrupted(e)
        log.debug("not folded %s %s: %s", node.op_type, node.name, e)
        return None
    if any(o is None or o.dtype == object or o.size > FOLD_MAX_ELEMENTS for o in outputs):
        return None
    return outputs


def _run_node(node, known, opset):
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    inputs = [i for i in node.input if i]
    graph = helper.make_graph(
        [node],
        "fold",
        [],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o],
        [numpy_helper.from_array(np.asarray(known[i]), i) for i in dict.fromkeys(inputs)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or TARGET_OPSET)])
    results = ReferenceEvaluator(model).run(None, {})
    out = iter(results)
    return [np.asarray(next(out)) if o else None for o in node.output]


def _static_shapes(graph) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if all(d >= 0 for d in dims):
            shapes[vi.name] = tuple(dims)
    return shapes


def _all_inputs(node):
    """A node's inputs, and those its subgraphs take from the enclosing scope."""
    yield from node.input
    for a in node.attribute:
        for g in [a.g] if a.type == a.GRAPH else list(a.graphs):
            for n in g.node:
                yield from _all_inputs(n)


def _first_line(e: Exception) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else type(e).__name__
