"""TFLite frontend: TVM's Relax TFLite importer, custom operators named before import."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from tvmgen.core import interrupts
from tvmgen.core.errors import ModelError
from tvmgen.core.model import ImportedModel
from tvmgen.frontends.base import InputOverride, importer_failed, resolve_inputs
from tvmgen.frontends.tflite_constants import TENSOR_TYPES

log = logging.getLogger("tvmgen.frontends.tflite")


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
        interrupts.reraise_if_interrupted(e)
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
    from tvmgen.frontends.tflite_state import attach, explicit_state, refuse_overrides

    buf, model = read_model(path)
    state = explicit_state(buf)  # resource variables: the model as a function of its state
    if state is None:
        return _import(path, buf, model, overrides)
    refuse_overrides(state, overrides)
    import tflite

    rewritten = tflite.Model.GetRootAsModel(state.model_bytes, 0)
    imported = _import(path, state.model_bytes, rewritten, overrides, state.removed_ops)
    n = len(state.variables)
    own_outputs = list(imported.output_names[: len(imported.output_names) - n])
    ops = operators(tflite.Model.GetRootAsModel(buf, 0))  # for what LiteRT cannot run
    # functional: LiteRT on the rewritten model (state in, state out); the sequence: on the original file
    functional = litert_runs(path, state.model_bytes, ops, list(imported.output_names))
    attach(imported, state, functional, litert_runs(path, buf, ops, own_outputs))
    return imported


def _import(path: Path, buf: bytes, model, overrides: list[InputOverride], removed_before=()) -> ImportedModel:
    """The model ``buf`` (``model``, read) imported; ``removed_before``: the operators of the file that an
    earlier rewrite removed (errors number operators as in the file)."""
    from tvm import relax
    from tvm.relax.frontend.tflite import from_tflite

    sub = model.Subgraphs(0)
    raw, notes = [], []
    overridden = {o.name for o in overrides if o.shape is not None}
    for idx in sub.InputsAsNumpy():
        t = sub.Tensors(int(idx))
        name = t.Name().decode()
        stored = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        sig = [int(d) for d in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else stored
        # a dynamic dimension (-1 in shape_signature) is taken at its stored size, as LiteRT runs it,
        # unless --input chooses another; with no stored size (0 or -1) it stays unknown (the usual error)
        at = [stored[i] if i < len(stored) and stored[i] > 0 else None for i in range(len(sig))]
        dims = [d if d > 0 else at[i] for i, d in enumerate(sig)]
        if any(d <= 0 for d in sig) and None not in dims and name not in overridden:
            notes.append(
                f"input '{name}' has dynamic dimensions ({_dims(sig)}): taken at the stored size {_dims(dims)}, "
                f"as LiteRT runs it (another size: --input {name}:{_dims(sig, 'N')})"
            )
        raw.append((name, dims, TENSOR_TYPES.get(t.Type(), f"tflite-type-{t.Type()}")))
    specs = resolve_inputs(raw, overrides)
    from tvmgen.frontends.tflite_fold import FOLD_MAX_ELEMENTS, Folded, fold

    try:
        folded = fold(buf, [s.shape for s in specs], [s.dtype for s in specs])
    except Exception as e:  # a model this folding does not understand: TVM gets it as stored
        interrupts.reraise_if_interrupted(e)
        log.debug("folding failed", exc_info=True)
        folded = Folded(buf)
        folded.notes.append(f"not folded: tvmgen's folding failed on this model ({type(e).__name__}: {e})"[:300])
    notes += folded.notes
    if removed_before:
        n = len(removed_before) + model.Subgraphs(0).OperatorsLength()
        kept = [i for i in range(n) if i not in set(removed_before)]
        folded.removed_ops = sorted({*removed_before, *(kept[i] for i in folded.removed_ops)})
    if folded.model_bytes is not buf:
        import tflite

        model = tflite.Model.GetRootAsModel(folded.model_bytes, 0)
    # the operators TVM sees, numbered as in the original model (folding removes some)
    removed = set(folded.removed_ops)
    original = [i for i in range(len(removed) + model.Subgraphs(0).OperatorsLength()) if i not in removed]
    ops = [(original[i], name, out) for i, name, out in operators(model)]
    output_names = [sub.Tensors(int(i)).Name().decode() for i in sub.OutputsAsNumpy()]
    try:
        check_operators(model, ops)
        from tvmgen.frontends.tflite_ops import converter_class

        mod = from_tflite(
            model,
            {s.name: s.shape for s in specs},
            {s.name: s.dtype for s in specs},
            op_converter=converter_class(folded.model_bytes, folded),
        )
    except ModelError as e:  # an unsupported operator, or a converter of tvmgen's refused a version or option
        if not e.message.startswith("unsupported TFLite operator") or any(n.startswith("CUSTOM:") for _, n, _ in ops):
            raise  # custom operators: tf2onnx converts only TensorFlow's Flex ones, which LiteRT cannot run
        why = "TVM 0.27's TFLite frontend lacks " + ", ".join(sorted({n for _, n, _ in ops} - _supported(model)))
        imported = second_route(path, folded.model_bytes, specs, output_names, e, why)
        imported.notes[:0] = notes
        return imported
    except Exception as e:
        interrupts.reraise_if_interrupted(e)  # not a reason for the second route
        from tvmgen.frontends.tflite_ops import OperatorConversionError

        if isinstance(e, OperatorConversionError):
            hint = (
                f"TVM's {e.op_name} converter needs that operand constant; tvmgen folds operands computed from "
                f"constants and shapes (at most {FOLD_MAX_ELEMENTS} elements), not ones that depend on input "
                "values: re-export the model with the operand constant, or convert the source model to ONNX"
                if e.not_constant
                else f"this form of {e.op_name} is one TVM 0.27's TFLite importer cannot import; convert the "
                "source model to ONNX"
            )
            error, why = ModelError(e.message, hint), f"TVM's TFLite importer failed on {e.where}"
        else:
            error = importer_failed(
                "TFLite", path, e, "the model uses an operator form TVM 0.27 cannot import; try converting it to ONNX"
            )
            why = f"TVM's TFLite importer failed ({type(e).__name__})"
        imported = second_route(path, folded.model_bytes, specs, output_names, error, why)
        imported.notes[:0] = notes
        return imported
    mod = relax.transform.Normalize()(mod)
    params = []
    if mod["main"].attrs is not None and "params" in mod["main"].attrs:
        mod, detached = relax.frontend.detach_params(mod)
        # TVM's TFLite importer records the weights there but keeps them as constants in the graph:
        # they are parameters only when main takes them (--separate-params lifts the constants)
        if len(mod["main"].params) > len(specs):
            params = list(detached.get("main", []))

    from importlib.metadata import version

    return ImportedModel(
        mod=mod,
        params=params,
        inputs=specs,
        output_names=output_names,
        format="tflite",
        reference_name=f"LiteRT {version('ai-edge-litert')}",
        reference=litert_reference(path, buf, ops, output_names),
        notes=notes,
        nodes=[(name, out) for _, name, out in ops],
    )


def _dims(dims, unknown="?") -> str:
    return "x".join(str(d) if d is not None and d > 0 else unknown for d in dims) or "scalar"


def litert_reference(path: Path, buf: bytes, ops, output_names: list[str]):
    """LiteRT on the original model (``buf``), resized to the inputs it is given."""
    runs = litert_runs(path, buf, ops, output_names)
    return lambda inputs: runs([inputs])[0]


def litert_runs(path: Path, buf: bytes, ops, output_names: list[str]):
    """LiteRT on the model ``buf``: a sequence of inputs by name -> each run's outputs in order, all run by
    one new interpreter (resized to the first inputs), which keeps the model's resource variables from one
    run to the next."""
    from tvmgen.frontends.tflite_ops import NOT_IN_LITERT

    unrunnable = sorted({name.split(":", 1)[1] for _, name, _ in ops if name.startswith("CUSTOM:")} & NOT_IN_LITERT)

    def runs(steps: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        from ai_edge_litert.interpreter import Interpreter

        if unrunnable:
            raise ModelError(
                f"cannot check {path.name} against LiteRT: LiteRT does not run MediaPipe's custom "
                f"operator(s) {', '.join(unrunnable)}",
                "compile it without --check; tvmgen's conversions of these operators are tested against "
                "NumPy statements of MediaPipe's kernels",
            )

        interp = Interpreter(model_content=buf, num_threads=1)
        for d in interp.get_input_details():
            if steps and tuple(d["shape"]) != tuple(steps[0][d["name"]].shape):
                interp.resize_tensor_input(d["index"], steps[0][d["name"]].shape)
        interp.allocate_tensors()
        outputs = []
        for inputs in steps:
            for d in interp.get_input_details():
                interp.set_tensor(d["index"], inputs[d["name"]])
            interp.invoke()
            by_name = {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}
            outputs.append([by_name[n] for n in output_names])
        return outputs

    return runs


TF2ONNX_OPSET = 17


def _supported(model) -> set[str]:
    from tvm.relax.frontend.tflite.tflite_frontend import ExprTable, OperatorConverter

    try:
        return set(OperatorConverter(model, model.Subgraphs(0), ExprTable(), None).convert_map)
    except Exception:
        return set()


def second_route(
    path: Path, model_bytes: bytes, specs, output_names: list[str], error: ModelError, why: str
) -> ImportedModel:
    """Where TVM's TFLite importer fails: the (folded) model through tf2onnx's TFLite route and tvmgen's
    ONNX path. LiteRT on the original .tflite stays the reference; the inputs and outputs keep their
    TFLite names. When tf2onnx is not installed or this fails too, ``error`` (TVM's failure) is raised,
    with what the second route said."""
    import os
    import tempfile

    from tvmgen.core.errors import TvmgenError
    from tvmgen.core.model import TensorSpec
    from tvmgen.frontends import onnx as onnx_frontend
    from tvmgen.frontends.base import InputOverride

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tf2onnx
        import tf2onnx.convert
    except ImportError:  # a base install: TVM's error is all there is to say
        raise error from None
    from tvmgen.core.log import to_file_only

    to_file_only("tensorflow", "tf2onnx")

    def failed(what: str) -> ModelError:
        return ModelError(
            error.message, f"{error.hint} (tvmgen also tried tf2onnx {tf2onnx.__version__}'s TFLite route: {what})"
        )

    with tempfile.TemporaryDirectory(prefix="tvmgen-tflite-") as scratch:
        tmp = Path(scratch) / path.name
        tmp.write_bytes(model_bytes)
        try:
            onnx_model, _ = tf2onnx.convert.from_tflite(str(tmp), opset=TF2ONNX_OPSET)
        except Exception as e:
            raise failed(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1][:200]}") from e
    initializers = {i.name for i in onnx_model.graph.initializer}
    onnx_inputs = [vi.name for vi in onnx_model.graph.input if vi.name not in initializers]
    onnx_outputs = [o.name for o in onnx_model.graph.output]
    if len(onnx_inputs) != len(specs) or len(onnx_outputs) != len(output_names):
        raise failed(
            f"its ONNX model has {len(onnx_inputs)} input(s) and {len(onnx_outputs)} output(s), "
            f"the TFLite model {len(specs)} and {len(output_names)}"
        )
    unconverted = sorted({n.op_type for n in onnx_model.graph.node if n.op_type.startswith("TFL_")})
    if unconverted:
        raise failed(f"it left {', '.join(unconverted)} unconverted")
    try:  # tf2onnx keeps the TFLite inputs and outputs in order: map them by position
        imported = onnx_frontend.import_model(
            onnx_model,
            [InputOverride(n, s.shape, s.dtype) for n, s in zip(onnx_inputs, specs)],
            source=str(path),
            fmt="tflite",
        )
    except TvmgenError as e:
        raise failed(f"then TVM's ONNX importer: {e.message}") from e
    from tvmgen.core.model import output_specs

    try:  # what the build will need: outputs of fixed shapes
        output_specs(imported.mod, output_names)
    except TvmgenError as e:
        raise failed(f"its ONNX model imports, but {e.message}") from e
    buf, model = read_model(path)
    imported.inputs = [TensorSpec(s.name, s.shape, s.dtype) for s in specs]
    imported.output_names = list(output_names)
    imported.reference = litert_reference(path, buf, operators(model), output_names)
    from importlib.metadata import version

    imported.reference_name = f"LiteRT {version('ai-edge-litert')}"
    imported.notes.append(
        f"{why}: imported instead through tf2onnx {tf2onnx.__version__} (TFLite -> ONNX opset {TF2ONNX_OPSET}) "
        "and TVM's ONNX importer; --check still runs LiteRT on the original .tflite"
    )
    return imported
