"""Frontends: one module per model format, each returning an ImportedModel.

Dispatch is by file extension (or a SavedModel directory); ``builtin:NAME`` models are
materialised as ONNX first.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from tvmgen.core import fold_builds
from tvmgen.core.errors import InputError
from tvmgen.core.model import ImportedModel
from tvmgen.frontends.base import InputOverride

# extension -> (format name, module)
FORMATS = {
    ".onnx": ("onnx", "onnx"),
    ".tflite": ("tflite", "tflite"),
    ".pt2": ("pytorch", "pytorch"),
    ".pb": ("tensorflow", "tensorflow"),
}


def detect_format(path: Path) -> str:
    if path.is_dir():
        if (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
            return "savedmodel"
        raise InputError(
            f"{path} is a directory but not a TensorFlow SavedModel (no saved_model.pb)",
            "pass a model file (.onnx, .tflite, .pt2, .pb) or a SavedModel directory",
        )
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(
            f"cannot tell the format of {path.name}: unknown extension {path.suffix or '(none)'}",
            "supported: .onnx, .tflite, .pt2 (torch.export), .pb (TensorFlow frozen graph), "
            "a SavedModel directory, or builtin:mobilenet",
        )
    return fmt[0]


def load(
    path: Path,
    overrides: list[InputOverride],
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    consts: dict[str, str] | None = None,
) -> ImportedModel:
    """Import a model; ``consts`` (from --const) binds inputs to values at compile time: ONNX and
    TensorFlow before the import (so branches on them fold), the others in Relax."""
    path = Path(path)
    if not path.exists():
        raise InputError(
            f"model file {path} does not exist", "check the path (relative paths are from the current directory)"
        )
    fmt = detect_format(path)
    module = {
        "onnx": "onnx",
        "tflite": "tflite",
        "pytorch": "pytorch",
        "tensorflow": "tensorflow",
        "savedmodel": "tensorflow",
    }[fmt]
    if (input_names or output_names) and module != "tensorflow":
        raise InputError(
            "--inputs/--outputs name TensorFlow graph nodes and apply only to .pb and SavedModel",
            "use --input NAME:SHAPE:DTYPE to set shapes for other formats",
        )
    frontend = importlib.import_module(f"tvmgen.frontends.{module}")
    fold_builds.install()  # the importers fold constants too (core/fold_builds.py)
    if module in ("onnx", "tensorflow"):
        return frontend.load(path, overrides, input_names=input_names, output_names=output_names, consts=consts)
    imported = frontend.load(path, overrides, input_names=input_names, output_names=output_names)
    if consts:
        from tvmgen.frontends.base import bind_inputs

        imported = bind_inputs(imported, consts)
    return imported
