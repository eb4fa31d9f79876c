"""TFLite frontend: TVM's Relax TFLite importer, custom operators named before import."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from tvmgen.core.errors import ModelError
from tvmgen.core.model import ImportedModel
from tvmgen.frontends.base import InputOverride, importer_failed, resolve_inputs

log = logging.getLogger("tvmgen.frontends.tflite")

# TFLite TensorType enum -> numpy dtype name (tflite/TensorType.py).
TENSOR_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}


def read_model(path: Path):
    import tflite

    buf = path.read_bytes()
    # A flatbuffer carries its file identifier at bytes 4..8; "TFL3" for TFLite.
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise ModelError(
            f"{path} is not a TFLite model (no TFL3 identifier; the file is corrupt or another format)",
            "convert the model again with tf.lite.TFLiteConverter / ai-edge-torch",
        )
    try:
        model = tflite.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() < 1:
            raise ValueError("no subgraphs")
        sub = model.Subgraphs(0)
        sub.InputsAsNumpy(), sub.OutputsAsNumpy(), sub.OperatorsLength()
    except Exception as e:
        raise ModelError(
            f"{path} is a truncated or corrupt TFLite model ({type(e).__name__}: {e})", "convert the model again"
        ) from e
    return buf, model


def operators(model) -> list[tuple[int, str, str]]:
    """(index, operator name, name of its first output tensor) for every operator of subgraph 0."""
    from tflite.BuiltinOperator import BuiltinOperator

    names = {v: k for k, v in BuiltinOperator.__dict__.items() if not k.startswith("_")}
    sub = model.Subgraphs(0)
    ops = []
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.DeprecatedBuiltinCode(), code.BuiltinCode())
        if builtin == BuiltinOperator.CUSTOM:
            name = "CUSTOM:" + (code.CustomCode() or b"?").decode(errors="replace")
        else:
            name = names.get(builtin, f"BUILTIN_{builtin}")
        out = sub.Tensors(op.Outputs(0)).Name().decode(errors="replace") if op.OutputsLength() else "?"
        ops.append((i, name, out))
    return ops


def check_operators(model, ops: list[tuple[int, str, str]]) -> None:
    """Refuse, naming them and their nodes, the operators of ``ops`` (``operators(model)``) that
    neither TVM's TFLite frontend nor tvmgen's registry converts."""
    from tvm.relax.frontend.tflite.tflite_frontend import ExprTable, OperatorConverter

    try:
        supported = set(OperatorConverter(model, model.Subgraphs(0), ExprTable(), None).convert_map)
    except Exception as e:  # the converter's constructor is internal API: fall back to TVM's own check
        log.debug("could not read TVM's TFLite convert map: %s", e)
        supported = None
    from tvmgen.frontends.tflite_ops import supported_custom

    custom_supported = supported_custom()
    bad: dict[str, list[str]] = {}
    for i, name, out in ops:
        ok = name in custom_supported if name.startswith("CUSTOM:") else supported is None or name in supported
        if not ok:
            bad.setdefault(name, []).append(f"#{i} -> {out}")
    if bad:
        custom = [n for n in bad if n.startswith("CUSTOM:")]
        desc = "; ".join(
            f"{op} (operators: {', '.join(nodes[:5])}{' …' if len(nodes) > 5 else ''})" for op, nodes in bad.items()
        )
        hint = (
            "custom operators need the framework that defined them: register a converter for them "
            '(TVMGEN_CUSTOM_OPS, see the README\'s "Custom operators"), or re-convert the model with builtin '
            "operators only (TFLiteConverter without custom ops / SELECT_TF_OPS)"
            if custom
            else "TVM 0.27's TFLite frontend lacks these operators; convert the source model to ONNX instead, "
            "or replace them"
        )
        raise ModelError(f"unsupported TFLite operator(s): {desc}", hint)


def load(path: Path, overrides: list[InputOverride], **_) -> ImportedModel:
    from tvm import relax
    from tvm.relax.frontend.tflite import from_tflite

    buf, model = read_model(path)
    sub = model.Subgraphs(0)
    raw = []
    for idx in sub.InputsAsNumpy():
        t = sub.Tensors(int(idx))
        sig = t.ShapeSignatureAsNumpy() if t.ShapeSignatureLength() else t.ShapeAsNumpy()
        dims = [int(d) if d > 0 else None for d in (sig if not isinstance(sig, int) else [])]
        raw.append((t.Name().decode(), dims, TENSOR_TYPES.get(t.Type(), f"tflite-type-{t.Type()}")))
    specs = resolve_inputs(raw, overrides)
    ops = operators(model)
    check_operators(model, ops)
    output_names = [sub.Tensors(int(i)).Name().decode() for i in sub.OutputsAsNumpy()]
    try:
        from tvmgen.frontends.tflite_ops import converter_class

        mod = from_tflite(
            model, {s.name: s.shape for s in specs}, {s.name: s.dtype for s in specs}, op_converter=converter_class(buf)
        )
    except ModelError:  # a converter of tvmgen's refused an operator's version or option: its own message
        raise
    except Exception as e:
        raise importer_failed(
            "TFLite", path, e, "the model uses an operator form TVM 0.27 cannot import; try converting it to ONNX"
        ) from e
    mod = relax.transform.Normalize()(mod)
    params = []
    if mod["main"].attrs is not None and "params" in mod["main"].attrs:
        mod, detached = relax.frontend.detach_params(mod)
        # TVM's TFLite importer records the weights there but keeps them as constants in the graph:
        # they are parameters only when main takes them (--separate-params lifts the constants)
        if len(mod["main"].params) > len(specs):
            params = list(detached.get("main", []))

    from tvmgen.frontends.tflite_ops import NOT_IN_LITERT

    unrunnable = sorted({name.split(":", 1)[1] for _, name, _ in ops if name.startswith("CUSTOM:")} & NOT_IN_LITERT)

    def reference(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        from ai_edge_litert.interpreter import Interpreter

        if unrunnable:
            raise ModelError(
                f"cannot check {path.name} against LiteRT: LiteRT does not run MediaPipe's custom "
                f"operator(s) {', '.join(unrunnable)}",
                "compile it without --check; tvmgen's conversions of these operators are tested against "
                "NumPy statements of MediaPipe's kernels",
            )

        interp = Interpreter(model_content=buf, num_threads=1)
        details = interp.get_input_details()
        for d in details:
            if tuple(d["shape"]) != tuple(inputs[d["name"]].shape):
                interp.resize_tensor_input(d["index"], inputs[d["name"]].shape)
        interp.allocate_tensors()
        for d in interp.get_input_details():
            interp.set_tensor(d["index"], inputs[d["name"]])
        interp.invoke()
        by_name = {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}
        return [by_name[n] for n in output_names]

    from importlib.metadata import version

    return ImportedModel(
        mod=mod,
        params=params,
        inputs=specs,
        output_names=output_names,
        format="tflite",
        reference_name=f"LiteRT {version('ai-edge-litert')}",
        reference=reference,
        nodes=[(name, out) for _, name, out in ops],
    )
