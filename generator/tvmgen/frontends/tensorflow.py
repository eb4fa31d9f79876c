"""TensorFlow frozen GraphDef (.pb) and SavedModel, through tf2onnx and then the ONNX path.

TVM 0.27 has no TensorFlow frontend. Input and output node names are detected from the
graph (Placeholders in; nodes nobody consumes out) and can be set with --inputs/--outputs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tvmgen.core.errors import ModelError, ToolMissingError
from tvmgen.core.model import ImportedModel
from tvmgen.frontends import onnx as onnx_frontend
from tvmgen.frontends.base import InputOverride

log = logging.getLogger("tvmgen.frontends.tensorflow")

OPSET = 17
# Ops that end a graph without being a model output.
NOT_OUTPUTS = {
    "Const",
    "NoOp",
    "Placeholder",
    "PlaceholderWithDefault",
    "Assert",
    "VarHandleOp",
    "SaveV2",
    "RestoreV2",
    "VariableV2",
    "Assign",
}


def _import_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
        import tf2onnx
    except ImportError as e:
        raise ToolMissingError(
            f"TensorFlow models need the tensorflow extra ({e.name} is not installed)",
            "pip install 'tvmgen[tensorflow]' (installs tensorflow-cpu and tf2onnx)",
        ) from e
    from tvmgen.core.log import to_file_only

    to_file_only("tensorflow", "tf2onnx")  # deprecation chatter belongs in the log file
    return tf, tf2onnx


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def detect_io(graph_def) -> tuple[list[str], list[str]]:
    """Placeholders are inputs; nodes whose outputs nobody reads are outputs."""
    consumed = set()
    for node in graph_def.node:
        for inp in node.input:
            consumed.add(inp.lstrip("^").split(":")[0])
    inputs = [n.name for n in graph_def.node if n.op == "Placeholder"]
    outputs = [n.name for n in graph_def.node if n.name not in consumed and n.op not in NOT_OUTPUTS]
    return inputs, outputs


def read_graph_def(path: Path):
    tf, _ = _import_tf()
    from google.protobuf.message import DecodeError

    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(path.read_bytes())
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelError(
            f"{path} is not a readable TensorFlow GraphDef ({type(e).__name__}: {e})",
            "pass a frozen graph (.pb written by tf.io.write_graph after freezing) that is complete",
        ) from e
    if not gd.node:
        raise ModelError(
            f"{path} holds no TensorFlow graph nodes: the file is empty, truncated or not a GraphDef",
            "pass a frozen GraphDef; for a SavedModel pass its directory",
        )
    return gd


def load(path: Path, overrides: list[InputOverride], input_names=None, output_names=None, consts=None) -> ImportedModel:
    tf, tf2onnx = _import_tf()
    notes = []
    if path.is_dir():
        from tf2onnx import tf_loader

        try:
            gd, ins, outs = tf_loader.from_saved_model(
                str(path),
                [_tensor(n) for n in input_names] if input_names else None,
                [_tensor(n) for n in output_names] if output_names else None,
            )
        except Exception as e:
            raise ModelError(
                f"cannot load the SavedModel {path}: {type(e).__name__}: {str(e).strip()[:300]}",
                "check it loads with tf.saved_model.load; name its tensors with --inputs/--outputs",
            ) from e
        notes.append(f"SavedModel signature: inputs {', '.join(ins)}; outputs {', '.join(outs)}")
    else:
        gd = read_graph_def(path)
        detected_in, detected_out = detect_io(gd)
        node_names = {n.name for n in gd.node}
        ins = [_tensor(n) for n in (input_names or detected_in)]
        outs = [_tensor(n) for n in (output_names or detected_out)]
        for flag, names in (("--inputs", ins), ("--outputs", outs)):
            missing = [n for n in names if n.split(":")[0] not in node_names]
            if missing:
                raise ModelError(
                    f"{flag}: no node named {', '.join(missing)} in {path.name}",
                    f"detected inputs: {', '.join(detected_in) or '-'}; outputs: {', '.join(detected_out) or '-'}",
                )
        if not ins or not outs:
            raise ModelError(
                f"could not detect the {'inputs' if not ins else 'outputs'} of {path.name}",
                "name them with --inputs NAME[,NAME] --outputs NAME[,NAME]",
            )
        notes.append(
            f"graph inputs: {', '.join(ins)}; outputs: {', '.join(outs)}"
            + (" (detected; override with --inputs/--outputs)" if not (input_names and output_names) else "")
        )

    # --input may name a node ("input") or a tensor ("input:0").
    overrides = [
        InputOverride(_tensor(o.name) if _tensor(o.name) in ins else o.name, o.shape, o.dtype) for o in overrides
    ]
    shape_override = {o.name: list(o.shape) for o in overrides if o.shape is not None} or None
    try:
        model, _ = tf2onnx.convert.from_graph_def(
            gd, input_names=ins, output_names=outs, opset=OPSET, shape_override=shape_override
        )
    except Exception as e:
        raise ModelError(
            f"tf2onnx could not convert {path.name}: {type(e).__name__}: {str(e).strip()[:300]}",
            "check the input/output names (--inputs/--outputs) and that the graph is frozen",
        ) from e
    consts = {(_tensor(n) if _tensor(n) in ins else n): v for n, v in (consts or {}).items()}
    imported = onnx_frontend.import_model(
        model, overrides, source=str(path), fmt="savedmodel" if path.is_dir() else "tensorflow", consts=consts
    )
    imported.notes[:0] = notes + [f"converted with tf2onnx {tf2onnx.__version__} (opset {OPSET})"]
    imported.reference_name += " (on the tf2onnx conversion)"
    return imported
