"""tvmgen's TFLite operator converter: TVM's, with registered custom operators and two fixes.

- **Custom operators** from the ``custom_ops`` registry (tvmgen's own entries, in ``mediapipe_ops``:
  MediaPipe's ``Convolution2DTransposeBias``, and the face-mesh attention operators
  ``Landmarks2TransformMatrix``, ``TransformTensorBilinear``, ``TransformLandmarks``) become converter
  entries named ``CUSTOM:<code>``.
- **Sparse and fp16 weights.** TVM's ``DENSIFY`` converter keeps the dense weights aside
  ("prefetched"); its ``DEQUANTIZE`` of fp16 weights then reads the raw buffer of DENSIFY's
  output, which has none, and fails with ``TypeError: a bytes-like object is required, not
  'int'`` (MediaPipe's sparse fp16 face and pose detectors). Here a tensor's value is the
  prefetched one when there is one.
- **Buffers stored after the flatbuffer** (``offset``/``size``, used by converters for large
  models) are read from the file instead of the empty in-line vector.
- **DEQUANTIZE of int8/uint8 constants** (weights kept quantised in the file): TVM's converter looks
  for an expression of its input, which a constant buffer has none of; here it gets the constant.
- **EXPAND_DIMS**: TVM's converter calls ``relax.op.expand_dims`` with three arguments (a TypeError on
  every model); here the axis (negative or not, stored or folded by tflite_fold) is normalised and
  passed alone.
- **Quantised slicing and splitting** (``STRIDED_SLICE``, ``SLICE``, ``SPLIT``, ``SPLIT_V`` on 8-bit
  tensors): TVM's converters only move values, but its check refuses every quantised operator outside
  its list. They are let through: the 8-bit integers move as they are, as LiteRT's kernels move them
  (exactly, whatever scale and zero point the output declares: LiteRT never requantises these).
- **Errors name the operator**: a failure inside one operator's conversion becomes ``OperatorConversionError``,
  which names the operator (type, index in the original model, output tensor), its operands (shape,
  dtype, constant or computed and by what) and the operand TVM's converter read as a constant while
  the file holds no value for it.

Custom operators read their constant inputs (weights, bias) through ``tflite_constants.constant_value``: a buffer, a
prefetched value, or whatever the graph computes them with when that folds to a constant (fp16 or
int8 weights through ``DEQUANTIZE``, as MediaPipe's fp16 segmentation models store them).
"""

from __future__ import annotations

import numpy as np

from tvmgen.frontends.custom_ops import TFLITE

# Operators that only move values: on quantised tensors TVM's converters move the 8-bit integers themselves.
MOVING_OPS = frozenset({"STRIDED_SLICE", "SLICE", "SPLIT", "SPLIT_V"})


class NotConstantOperandError(TypeError):
    """TVM's converter read, as a constant, a tensor the file holds no value for (a TypeError, as
    ``np.frombuffer`` on the missing buffer raised before)."""


class OperatorConversionError(Exception):
    """TVM's TFLite importer failed on one operator: ``message`` names it, its operands and the
    operand that was not constant; ``not_constant`` is that operand's description (or None)."""

    def __init__(self, message: str, op_name: str, where: str, not_constant: str | None):
        super().__init__(message)
        self.message, self.op_name, self.where, self.not_constant = message, op_name, where, not_constant


def converter_class(model_bytes: bytes, folded=None):
    """An ``OperatorConverter`` subclass for one model (``from_tflite(..., op_converter=...)``);
    ``folded`` (a ``tflite_fold.Folded``) says what folding did, for errors that name operators."""
    from tflite.BuiltinOperator import BuiltinOperator
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter, get_tensor_name

    import tvmgen.frontends.mediapipe_ops  # noqa: F401  (registers tvmgen's own, before the user's replace them)
    from tvmgen.core.errors import ModelError
    from tvmgen.frontends import custom_ops

    custom_ops.load()
    removed = set(folded.removed_ops) if folded is not None else set()

    class TvmgenOperatorConverter(OperatorConverter):
        _SUPPORTED_QUANTIZED_OPS = OperatorConverter._SUPPORTED_QUANTIZED_OPS | MOVING_OPS

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for code, entry in TFLITE.items():
                self.convert_map[f"CUSTOM:{code}"] = (lambda fn: lambda op: fn(self, op))(entry.fn)
            self._not_constant = None
            n = self.subgraph.OperatorsLength() + len(removed)
            self._original_index = [i for i in range(n) if i not in removed]  # folded model -> original

        def convert_op_to_relax(self):
            """TVM's loop over the operators (same steps), each operator's failure named."""
            for op_idx in range(self.subgraph.OperatorsLength()):
                op = self.subgraph.Operators(op_idx)
                self._not_constant = None
                try:
                    op_code_str = self.get_op_code_str(op)
                    output_tensors = self.get_output_tensors(op)
                    ret = self.convert_map[op_code_str](op=op)
                    if ret is None:  # prefetched: the output is optimised out
                        continue
                    ret = self.bb.normalize(ret)
                    if len(output_tensors) == 1:
                        self.exp_tab.set_expr(get_tensor_name(self.subgraph, output_tensors[0].tensor_idx), ret)
                    else:
                        for idx, output_tensor in enumerate(output_tensors):
                            self.exp_tab.set_expr(get_tensor_name(self.subgraph, output_tensor.tensor_idx), ret[idx])
                except ModelError:  # tvmgen's own converters refuse with their own message
                    raise
                except Exception as e:
                    raise self._failed(op_idx, op, e) from e

        def _failed(self, op_idx, op, e) -> OperatorConversionError:
            from tvmgen.frontends.tflite_fold import why_not_constant

            try:
                name = self.get_op_code_str(op)
            except Exception:
                name = "?"
            index = self._original_index[op_idx] if op_idx < len(self._original_index) else op_idx
            outs = [get_tensor_name(self.subgraph, int(t)) for t in op.OutputsAsNumpy()] if op.OutputsLength() else []
            operands, not_constant = [], None
            ins = [int(t) for t in op.InputsAsNumpy()] if op.InputsLength() else []
            for k, t in enumerate(ins):
                if t < 0:
                    operands.append(f"{k}: absent (optional)")
                    continue
                tensor = self.subgraph.Tensors(t)
                shape = "x".join(str(int(d)) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else "scalar"
                desc = f"{k}: '{get_tensor_name(self.subgraph, t)}' {shape} {_TYPE_NAMES.get(tensor.Type(), '?')}"
                if folded is not None and t in folded.folded:
                    origin = "constant (folded by tvmgen)"
                elif _stored(self.model.Buffers(tensor.Buffer()), self, t):
                    origin = "constant"
                elif t in [int(i) for i in self.subgraph.InputsAsNumpy()]:
                    origin = "a model input"
                else:
                    origin = "NOT constant: " + why_not_constant(folded, t)
                if t == self._not_constant:
                    not_constant = desc
                operands.append(f"{desc} ({origin})")
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            where = f"operator #{index} {name} (output {', '.join(repr(o) for o in outs) or '?'})"
            if isinstance(e, NotConstantOperandError) and self._not_constant is not None:
                t = self._not_constant
                if not_constant is None:  # a tensor the converter reached through another one
                    what = not_constant = f"tensor '{get_tensor_name(self.subgraph, t)}'"
                else:
                    what = f"operand {not_constant.split(':', 1)[0]} ('{get_tensor_name(self.subgraph, t)}')"
                cause = f"its converter reads {what} as a constant, but it is {why_not_constant(folded, t)}"
            else:
                cause = f"{type(e).__name__}: {lines[-1] if lines else ''}"
            message = f"TVM's TFLite importer failed on {where}: {cause}\n  operands: {'; '.join(operands) or 'none'}"
            return OperatorConversionError(message, name, where, not_constant)

        def get_op_code_str(self, op):
            code = self.model.OperatorCodes(op.OpcodeIndex())
            if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) == BuiltinOperator.CUSTOM:
                custom = (code.CustomCode() or b"").decode(errors="replace")
                if custom in TFLITE:
                    return f"CUSTOM:{custom}"
            return super().get_op_code_str(op)

        def get_tensor_value(self, tensor_wrapper, is_sparse=False):
            if not is_sparse and self.is_prefetched(tensor_wrapper.tensor_idx):
                return np.asarray(self.get_prefetched_node(tensor_wrapper.tensor_idx))
            buffer = tensor_wrapper.buffer
            if not _stored(buffer, self, tensor_wrapper.tensor_idx):
                self._not_constant = tensor_wrapper.tensor_idx
                raise NotConstantOperandError(
                    f"tensor '{get_tensor_name(self.subgraph, tensor_wrapper.tensor_idx)}' is read as a constant "
                    "but the file holds no value for it"
                )
            if isinstance(buffer.DataAsNumpy(), int) and hasattr(buffer, "Offset") and buffer.Offset() > 1:
                start, size = int(buffer.Offset()), int(buffer.Size())
                dtype = self.get_tensor_type_as_numpy(tensor_wrapper)
                data = np.frombuffer(model_bytes[start : start + size], dtype=dtype)
                shape = (
                    [int(d) for d in self.get_tensor_shape(tensor_wrapper)]
                    if tensor_wrapper.tensor.ShapeLength()
                    else []
                )
                return data if is_sparse else data.reshape(shape)
            return super().get_tensor_value(tensor_wrapper, is_sparse)

        def convert_dequantize(self, op):
            from tflite.TensorType import TensorType

            (tensor,) = self.get_input_tensors(op)
            if (
                tensor.tensor.Type() != TensorType.FLOAT16
                and tensor.qnn_params
                and not self.has_expr(tensor.tensor_idx)
            ):  # a quantised constant
                return self.dequantize(self.get_tensor_expr(tensor), tensor)
            return super().convert_dequantize(op)

        def convert_expand_dims(self, op):
            """EXPAND_DIMS: insert one axis of size 1 at ``axis`` (a constant, stored or folded; negative
            counts from the end of the output, as in TFLite: -1 appends)."""
            from tvm import relax

            data, axis_t = self.get_input_tensors(op)
            if data.qnn_params:
                (out,) = self.get_output_tensors(op)
                if not self.has_same_qnn_params(data, out):
                    raise ValueError("EXPAND_DIMS of a quantised tensor needs the same scale and zero point out")
            axis = np.asarray(self.get_tensor_value(axis_t)).reshape(-1)
            if axis.size != 1:
                raise ValueError(f"EXPAND_DIMS takes one axis, got {axis.size}")
            rank = len(self.get_tensor_shape(data)) if data.tensor.ShapeLength() else 0
            a = int(axis[0])
            if not -rank - 1 <= a <= rank:
                raise ValueError(f"EXPAND_DIMS axis {a} is out of range for a rank-{rank} input")
            return relax.op.expand_dims(self.get_tensor_expr(data), a + rank + 1 if a < 0 else a)

    return TvmgenOperatorConverter


def _stored(buffer, conv, tensor_idx) -> bool:
    """Whether the file holds a value for the tensor (in line, after the flatbuffer, or prefetched)."""
    if tensor_idx < 0:  # an absent optional operand
        return False
    if conv.is_prefetched(tensor_idx):
        return True
    if buffer is None or isinstance(buffer, int):
        return False
    if not isinstance(buffer.DataAsNumpy(), int):
        return True
    return hasattr(buffer, "Offset") and buffer.Offset() > 1


_TYPE_NAMES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    5: "string",
    6: "bool",
    7: "int16",
    8: "complex64",
    9: "int8",
    10: "float64",
    11: "complex128",
    12: "uint64",
    13: "resource",
    14: "variant",
    15: "uint32",
    16: "uint16",
    17: "int4",
}


# Custom operators tvmgen converts that LiteRT itself cannot run (MediaPipe registers them only in its
# own graphs): `compile --check` has no reference for a model using them. tvmgen's conversions are
# tested against NumPy statements of MediaPipe's kernels (tests/frontends/test_mediapipe_ops.py).
NOT_IN_LITERT = frozenset({"Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"})


def supported_custom() -> set[str]:
    import tvmgen.frontends.mediapipe_ops  # noqa: F401  (registers tvmgen's own, before the user's replace them)
    from tvmgen.frontends import custom_ops

    custom_ops.load()
    return {f"CUSTOM:{code}" for code in TFLITE} | {"CUSTOM:TFLite_Detection_PostProcess"}
