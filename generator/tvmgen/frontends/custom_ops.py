"""Operators the importers lack, done by tvmgen: one registry, which users extend.

Two kinds of entry:

- **ONNX expansions** (``@onnx_op("LSTM")``): ``fn(node, ctx) -> list of NodeProto`` replaces a
  node by standard ONNX operators before TVM's importer sees the graph (``ctx.constant(array)``
  adds an initializer, ``ctx.name(hint)`` makes a fresh tensor name, ``ctx.shape(name)`` and
  ``ctx.value(name)`` read the known shape or constant value of a tensor). The reference runtime
  still runs the original model, so every expansion is checked against onnxruntime.
- **TFLite converters** (``@tflite_op("Convolution2DTransposeBias")``, for custom operators):
  ``fn(conv, op) -> relax.Expr`` where ``conv`` is TVM's TFLite ``OperatorConverter``
  (``conv.get_input_tensors(op)``, ``conv.get_tensor_expr(t)``, ``conv.get_tensor_value(t)``,
  ``conv.get_tensor_shape(t)``) and ``op`` the TFLite operator (``op.CustomOptionsAsNumpy()``).
  A ``numpy=fn(inputs, options) -> outputs`` reference may be given for the checks.

Users add their own in a Python file named by ``TVMGEN_CUSTOM_OPS`` (several separated by
``os.pathsep``), loaded before a model is imported; their entries take precedence over
tvmgen's own. tvmgen's own entries live in ``frontends/onnx_ops_recurrent.py``, ``frontends/onnx_ops_nn.py``,
``frontends/onnx_ops_attention.py`` and ``frontends/mediapipe_ops.py``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tvmgen.core.errors import InputError


@dataclass
class Entry:
    name: str
    fn: Callable
    numpy: Callable | None = None
    source: str = "tvmgen"


ONNX: dict[str, Entry] = {}
TFLITE: dict[str, Entry] = {}
_loaded: set[str] = set()


def onnx_op(op_type: str, domain: str = ""):
    """Register an ONNX expansion for ``op_type`` (``domain`` for non-standard operators)."""

    def register(fn):
        ONNX[f"{domain}.{op_type}" if domain else op_type] = Entry(op_type, fn, source=_source(fn))
        return fn

    return register


def tflite_op(custom_code: str, numpy: Callable | None = None):
    """Register a converter for the TFLite custom operator ``custom_code``."""

    def register(fn):
        TFLITE[custom_code] = Entry(custom_code, fn, numpy, _source(fn))
        return fn

    return register


def _source(fn) -> str:
    module = getattr(fn, "__module__", "") or ""
    return (
        "tvmgen"
        if module.startswith("tvmgen.")
        else ((getattr(fn, "__code__", None) and fn.__code__.co_filename) or module)
    )


def load() -> None:
    """The user's files from ``TVMGEN_CUSTOM_OPS`` (once each), whose entries replace tvmgen's own.
    tvmgen's own register as ``frontends.onnx_ops_*`` / ``frontends.mediapipe_ops`` are imported;
    ``onnx_ops`` and ``tflite_ops`` import them, then call this before they read the registry."""
    for item in filter(None, os.environ.get("TVMGEN_CUSTOM_OPS", "").split(os.pathsep)):
        path = Path(item).expanduser().resolve()
        if str(path) in _loaded:
            continue
        if not path.is_file():
            raise InputError(
                f"TVMGEN_CUSTOM_OPS names {item}, which is not a file",
                "set it to the Python file(s) that register your operators",
            )
        spec = importlib.util.spec_from_file_location(f"tvmgen_user_ops_{len(_loaded)}", path)
        if spec is None or spec.loader is None:  # a suffix no import loader takes
            raise InputError(
                f"TVMGEN_CUSTOM_OPS names {item}, which Python cannot load as a module",
                "set it to the Python file(s) (.py) that register your operators",
            )
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise InputError(
                f"loading custom operators from {path} failed: {type(e).__name__}: {e}",
                "fix the file, or unset TVMGEN_CUSTOM_OPS",
            ) from e
        _loaded.add(str(path))
