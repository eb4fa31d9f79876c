"""ONNX frontend: normalize the model (onnx_normalize: opset, input shapes, folding), expand what TVM lacks, import with TVM's Relax ONNX frontend."""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import numpy as np

from tvmgen.core.errors import CheckError, InputError, ModelError
from tvmgen.core.model import ImportedModel
from tvmgen.frontends import onnx_normalize
from tvmgen.frontends.base import InputOverride, const_value, failing_locals, resolve_inputs

log = logging.getLogger("tvmgen.frontends.onnx")


def read_model(path: Path):
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path), load_external_data=True)
    except (DecodeError, ValueError, OSError, RuntimeError) as e:
        raise ModelError(
            f"{path} is not a readable ONNX model ({type(e).__name__}: {e})",
            "check the file is complete (not truncated) and really ONNX; re-export it from your framework",
        ) from e
    if not model.graph.node:
        raise ModelError(f"{path} holds no ONNX graph (0 nodes): the file is empty or not ONNX", "re-export the model")
    return model


def load(path: Path, overrides: list[InputOverride], consts=None, **_) -> ImportedModel:
    return import_model(read_model(path), overrides, source=str(path), fmt="onnx", consts=consts)


def bind_consts(model, consts: dict[str, str]) -> dict:
    """--const: each named graph input becomes an initializer (so onnxslim folds what depends on
    it, an ``If`` on a sample rate included); returns the values bound."""
    from onnx import numpy_helper

    inputs = {vi.name: vi for vi in model.graph.input}
    unknown = [n for n in consts if n not in inputs]
    if unknown:
        raise InputError(
            f"--const names {', '.join(map(repr, unknown))}, not among the model's inputs",
            f"the model's inputs are: {', '.join(inputs) or '(none)'}",
        )
    values = {}
    for name, text in consts.items():
        t = inputs[name].type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        values[name] = const_value(name, text, dims, _np_dtype(t.elem_type))
        model.graph.input.remove(inputs[name])
        model.graph.initializer.append(numpy_helper.from_array(values[name], name))
    return values


def import_model(model, overrides: list[InputOverride], source: str, fmt: str, consts=None) -> ImportedModel:
    """Shared by the ONNX and TensorFlow frontends (TensorFlow arrives here through tf2onnx)."""
    bound = bind_consts(model, consts) if consts else {}
    original = model.SerializeToString()
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    raw = []
    for vi in graph.input:
        if vi.name in initializers:
            continue
        t = vi.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None) for d in t.shape.dim
        ]
        raw.append((vi.name, dims, _np_dtype(t.elem_type)))
    specs = resolve_inputs(raw, overrides)

    notes: list[str] = []
    model = onnx_normalize.normalize(model, specs, notes)
    import tvmgen.frontends.onnx_ops_attention  # registers its expansion
    import tvmgen.frontends.onnx_ops_nn  # noqa: F401  (registers its expansions)
    from tvmgen.frontends import onnx_ops, onnx_ops_recurrent  # onnx_ops_recurrent registers RNN, GRU, LSTM

    expanded: set = set()
    model = onnx_ops.expand(model, expanded)  # operators TVM's importer lacks (LSTM, GRU, registered ones)
    custom = sorted(k for k in expanded if "." in k)  # a custom domain: onnxruntime cannot run the original
    onnx_ops_recurrent.register_converters()  # the fused LSTM/GRU nodes the expansion writes
    check_operators(model)
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    shape_dict = {s.name: list(s.shape) for s in specs}
    dtype_dict = {s.name: s.dtype for s in specs}
    # TVM prints a half-line naming the operator before it re-raises; the error below names it in full
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            mod = from_onnx(model, shape_dict, dtype_dict, keep_params_in_input=True)
        except Exception as e:  # TVM raises many types; all mean the same to the user
            where, bindable = _describe(model, failing_locals(e, "_construct_nodes"), specs)
            raise ModelError(
                f"TVM's ONNX importer failed on {source}{where}: {type(e).__name__}: {_first_line(e)}",
                (
                    f"{', '.join(bindable)} {'is a small integer graph input' if len(bindable) == 1 else 'are small integer graph inputs'} "
                    f"the operator needs as a constant: bind {'it' if len(bindable) == 1 else 'them'} at compile time with "
                    f"{' '.join(f'--const {n}=VALUE' for n in bindable)} (tvmgen then folds what depends on it)"
                    if bindable
                    else "if a shape is computed inside the graph, fix every input shape with --input (tvmgen folds "
                    "what depends only on constants and fixed shapes); otherwise TVM 0.27 cannot import this "
                    "operator form: re-export the model at another opset or replace the operator"
                ),
            ) from e
    mod, params = relax.frontend.detach_params(mod)
    output_names = [o.name for o in graph.output]

    integer_ops = sorted({n.op_type for n in graph.node if n.op_type in INTEGER_PRODUCT_OPS})
    if integer_ops:
        reference, reference_name = (
            exact_integer_reference(original),
            (
                f"NumPy (onnx {_version('onnx')} reference evaluator, {', '.join(integer_ops)} exact in int64; "
                "onnxruntime's 8-bit integer products saturate on x86-64 CPUs without VNNI)"
            ),
        )
    elif custom:
        reference, reference_name = (
            onnxruntime_reference(model.SerializeToString()),
            (f"onnxruntime {_version('onnxruntime')} (on tvmgen's expansion of {', '.join(custom)})"),
        )
    elif _quantised_products(graph):
        reference, reference_name = (
            onnxruntime_reference(original, fuse=False),
            (
                f"onnxruntime {_version('onnxruntime')} (basic graph optimisations: its QDQ fusion's 8-bit "
                "products saturate on x86-64 CPUs without VNNI)"
            ),
        )
    else:
        reference, reference_name = onnxruntime_reference(original), f"onnxruntime {_version('onnxruntime')}"
    return ImportedModel(
        mod=mod,
        params=list(params.get("main", [])),
        inputs=specs,
        output_names=output_names,
        format=fmt,
        reference_name=reference_name,
        reference=reference,
        nodes=[(n.op_type, n.name or (n.output[0] if n.output else "?")) for n in graph.node],
        constants={n: v.tolist() for n, v in bound.items()},
        notes=notes,
    )


# Integer matrix products whose onnxruntime kernels are not exact on every x86-64 CPU: without
# VNNI, u8 x s8 products are summed in pairs into saturating 16-bit lanes (vpmaddubsw), so a
# result can differ from the true integer product. tvmgen's kernels are exact.
INTEGER_PRODUCT_OPS = ("MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv")


def _quantised_products(graph) -> bool:
    """Whether the graph spells quantised layers in QDQ form (a DequantizeLinear, and a MatMul, Gemm or
    convolution): onnxruntime's extended optimisations fuse those into 8-bit integer products, which on an
    x86-64 CPU without VNNI add pairs of u8 x s8 products into 16-bit lanes (vpmaddubsw) and saturate: a
    matmul of 64-deep rows off by up to 24 where the layer's exact result is within 3e-5 of its basic
    (unfused) evaluation. The reference is the same on every CPU only unfused."""
    ops = {n.op_type for n in graph.node}
    return "DequantizeLinear" in ops and bool(ops & {"MatMul", "Gemm", "Conv", "ConvTranspose"})


def onnxruntime_reference(model_bytes: bytes, fuse: bool = True):
    """onnxruntime on the CPU; ``fuse=False``: basic graph optimisations only (no QDQ fusion)."""

    def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if not fuse:
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        try:
            sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own kinds (InvalidGraph, Fail, ...)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckError(
                f"onnxruntime, the reference --check compares with, cannot load this model: {first}",
                "the model is not valid ONNX as onnxruntime reads it (onnx.checker.check_model says more); "
                "fix the model, or compile without --check",
            ) from e
        return sess.run(None, inputs)

    return run


def exact_integer_reference(model_bytes: bytes):
    """ONNX's own NumPy evaluator with integer matmuls in int64: the same answer on every CPU."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops.op_matmul_integer import MatMulInteger

    class ExactMatMulInteger(MatMulInteger):
        def _run(self, A, B, a_zero_point=None, b_zero_point=None):
            a, b = A.astype(np.int64), B.astype(np.int64)
            if a_zero_point is not None:  # a scalar, or one per row of A
                zp = a_zero_point.astype(np.int64)
                a = a - (zp.reshape(-1, 1) if zp.ndim == 1 else zp)
            if b_zero_point is not None:  # a scalar, or one per column of B
                b = b - b_zero_point.astype(np.int64)
            return ((a @ b).astype(np.int32),)

    def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        import onnx

        evaluator = ReferenceEvaluator(onnx.load_from_string(model_bytes), new_ops=[ExactMatMulInteger])
        return [np.asarray(o) for o in evaluator.run(None, inputs)]

    return run


def check_operators(model) -> None:
    """Name every operator TVM cannot import, with the nodes that use it, before importing."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    from tvmgen.frontends.onnx_ops import _graphs

    supported = set(_get_convert_map()) | {"Constant", "If"}
    bad: dict[str, list[str]] = {}
    for i, node in enumerate(n for g in _graphs(model.graph) for n in g.node):  # If branches too
        if node.op_type not in supported:
            bad.setdefault(node.op_type if not node.domain else f"{node.domain}.{node.op_type}", []).append(
                node.name or f"#{i}"
            )
    if bad:
        desc = "; ".join(
            f"{op} (nodes: {', '.join(nodes[:5])}{' …' if len(nodes) > 5 else ''})" for op, nodes in bad.items()
        )
        raise ModelError(
            f"unsupported operator(s) for TVM 0.27's ONNX frontend: {desc}",
            "replace these operators in the source model (or export with a different opset), or register "
            'an expansion for them (TVMGEN_CUSTOM_OPS, see the README\'s "Custom operators"), then compile again',
        )


# a graph input this small and integer is a shape, an axis or a count: --const can bind it
BINDABLE_ELEMENTS = 64


def _describe(model, failed: dict, specs) -> tuple[str, list[str]]:
    """(" at operator TYPE #INDEX 'NAME' (inputs: a float32[1x3] graph input, b int64[2] computed in the
    graph, ...)", the small integer graph inputs among them), from the locals of TVM's node loop when it
    raised (``failed``: its ``node`` and the Relax ``inputs`` it built for it)."""
    node = failed.get("node")
    if node is None:
        return "", []
    nodes = list(model.graph.node)
    index = next((i for i, n in enumerate(nodes) if n == node), None)  # None inside an If branch
    constants = {i.name for i in model.graph.initializer} | {
        o for n in nodes if n.op_type == "Constant" for o in n.output
    }
    graph_inputs = {vi.name for vi in model.graph.input}
    described, bindable = [], []
    sizes = {sp.name: (sp.dtype, int(np.prod(sp.shape, dtype=np.int64))) for sp in specs}
    for name, expr in zip(node.input, failed.get("inputs") or [], strict=False):
        if not name and expr is None:
            continue
        kind = "constant" if name in constants else "graph input" if name in graph_inputs else "computed in the graph"
        described.append(f"{name or '?'} {_struct_info(expr)} {kind}".replace("  ", " "))
        dtype, size = sizes.get(name, ("", 0))
        if kind == "graph input" and dtype.startswith(("int", "uint")) and size <= BINDABLE_ELEMENTS:
            bindable.append(name)
    where = f"#{index} " if index is not None else ""
    label = f" '{node.name}'" if node.name else ""
    text = f" at operator {node.op_type} {where}{label}".replace("  ", " ").rstrip() + (
        f" (inputs: {', '.join(described)})" if described else ""
    )
    return text, bindable


def _struct_info(expr) -> str:
    info = getattr(expr, "ty", None)  # TVM 0.27's Relax type (TensorType: shape, dtype)
    shape, dtype = getattr(info, "shape", None), getattr(info, "dtype", None)
    if dtype is None:
        return ""
    try:
        dims = (
            "x".join(str(int(d)) if hasattr(d, "value") else str(d) for d in shape.values) if shape is not None else "?"
        )
    except Exception:
        dims = "?"
    return f"{dtype}[{dims}]"


def _np_dtype(elem_type: int) -> str:
    from onnx.helper import tensor_dtype_to_np_dtype

    try:
        return str(np.dtype(tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        return f"onnx-elem-type-{elem_type}"


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TVM errors end with the useful line; tracebacks come before it.
    return lines[-1] if lines else type(e).__name__


def _version(pkg: str) -> str:
    from importlib.metadata import version

    try:
        return version(pkg)
    except Exception:
        return "?"
