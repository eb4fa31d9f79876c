"""tvmgen's TFLite operator converter: TVM's, with registered custom operators and two fixes.

- **Custom operators** from the ``custom_ops`` registry (MediaPipe's ``Convolution2DTransposeBias``
  is tvmgen's own entry) become converter entries named ``CUSTOM:<code>``.
- **Sparse and fp16 weights.** TVM's ``DENSIFY`` converter keeps the dense weights aside
  ("prefetched"); its ``DEQUANTIZE`` of fp16 weights then reads the raw buffer of DENSIFY's
  output, which has none, and fails with ``TypeError: a bytes-like object is required, not
  'int'`` (MediaPipe's sparse fp16 face and pose detectors). Here a tensor's value is the
  prefetched one when there is one.
- **Buffers stored after the flatbuffer** (``offset``/``size``, used by converters for large
  models) are read from the file instead of the empty in-line vector.
"""

from __future__ import annotations

import numpy as np

from tvmgen.custom_ops import TFLITE, tflite_op


def converter_class(model_bytes: bytes):
    """An ``OperatorConverter`` subclass for one model (``from_tflite(..., op_converter=...)``)."""
    from tflite.BuiltinOperator import BuiltinOperator
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    from tvmgen import custom_ops

    custom_ops.load()

    class TvmgenOperatorConverter(OperatorConverter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for code, entry in TFLITE.items():
                self.convert_map[f"CUSTOM:{code}"] = (lambda fn: lambda op: fn(self, op))(entry.fn)

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
            if isinstance(buffer.DataAsNumpy(), int) and hasattr(buffer, "Offset") and buffer.Offset() > 1:
                start, size = int(buffer.Offset()), int(buffer.Size())
                dtype = self.get_tensor_type_as_numpy(tensor_wrapper)
                data = np.frombuffer(model_bytes[start:start + size], dtype=dtype)
                shape = [int(d) for d in self.get_tensor_shape(tensor_wrapper)] if tensor_wrapper.tensor.ShapeLength() else []
                return data if is_sparse else data.reshape(shape)
            return super().get_tensor_value(tensor_wrapper, is_sparse)

    return TvmgenOperatorConverter


def supported_custom() -> set[str]:
    from tvmgen import custom_ops

    custom_ops.load()
    return {f"CUSTOM:{code}" for code in TFLITE} | {"CUSTOM:TFLite_Detection_PostProcess"}


# ------------------------------------------------------------------- MediaPipe's custom operators

def _transpose_conv_bias_params(options: bytes, in_hw, kernel_hw):
    """MediaPipe's ``TfLiteTransposeConvParams`` (padding, stride_w, stride_h as int32) ->
    strides and [top, left, bottom, right] output cropping, as its Prepare computes them."""
    padding, stride_w, stride_h = np.frombuffer(bytes(options[:12]), "<i4")
    strides = (int(stride_h), int(stride_w))
    total = [0, 0]
    if padding == 1:  # SAME
        total = [max(0, k - (n - 1) % s - 1) for n, k, s in zip(in_hw, kernel_hw, strides)]
    return strides, [total[0] // 2, total[1] // 2, total[0] - total[0] // 2, total[1] - total[1] // 2]


def transpose_conv_bias_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray, options: bytes) -> np.ndarray:
    """MediaPipe's kernel, as its reference loops state it: NHWC input, OHWI weights, each input
    pixel scattered into the output through the kernel, bias first."""
    n, h, wd, _ = x.shape
    cout, kh, kw, _ = w.shape
    (sh, sw), (top, left, bottom, right) = _transpose_conv_bias_params(options, (h, wd), (kh, kw))
    full = np.zeros((n, (h - 1) * sh + kh, (wd - 1) * sw + kw, cout), np.float64)
    for y in range(h):
        for x_ in range(wd):
            full[:, y * sh:y * sh + kh, x_ * sw:x_ * sw + kw, :] += np.einsum(
                "nc,ohwc->nhwo", x[:, y, x_, :].astype(np.float64), w.astype(np.float64))
    out = full[:, top:full.shape[1] - bottom, left:full.shape[2] - right, :] + b
    return out.astype(np.float32)


def _transpose_conv_bias_numpy_entry(inputs, options):
    return [transpose_conv_bias_numpy(*inputs, options)]


@tflite_op("Convolution2DTransposeBias", numpy=_transpose_conv_bias_numpy_entry)
def transpose_conv_bias(conv, op):
    """A transposed convolution plus bias: NHWC input, OHWI weights (constants), SAME/VALID."""
    from tvm import relax

    data_t, weight_t, bias_t = conv.get_input_tensors(op)
    _, h, w, _ = [int(d) for d in conv.get_tensor_shape(data_t)]
    weights = np.asarray(conv.get_tensor_value(weight_t), np.float32)  # [out, kh, kw, in]
    strides, padding = _transpose_conv_bias_params(op.CustomOptionsAsNumpy().tobytes(), (h, w), weights.shape[1:3])
    data = conv.get_tensor_expr(data_t)
    nchw = relax.op.permute_dims(data, [0, 3, 1, 2])
    kernel = relax.const(np.ascontiguousarray(weights.transpose(3, 0, 1, 2)), "float32")  # IOHW
    out = relax.op.nn.conv2d_transpose(nchw, kernel, strides=strides, padding=padding,
                                       data_layout="NCHW", kernel_layout="IOHW")
    bias = relax.const(np.asarray(conv.get_tensor_value(bias_t), np.float32).reshape(1, -1, 1, 1), "float32")
    return relax.op.permute_dims(relax.op.add(out, bias), [0, 2, 3, 1])
