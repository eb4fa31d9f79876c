"""tvmgen's TFLite operator converter: TVM's, with registered custom operators and two fixes.

- **Custom operators** from the ``custom_ops`` registry (tvmgen's own entries: MediaPipe's
  ``Convolution2DTransposeBias``, and the face-mesh attention operators ``Landmarks2TransformMatrix``,
  ``TransformTensorBilinear``, ``TransformLandmarks``) become converter entries named ``CUSTOM:<code>``.
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
- **Errors name the operator**: a failure inside one operator's conversion becomes ``OperatorConversionError``,
  which names the operator (type, index in the original model, output tensor), its operands (shape,
  dtype, constant or computed and by what) and the operand TVM's converter read as a constant while
  the file holds no value for it.

Custom operators read their constant inputs (weights, bias) through ``constant_value``: a buffer, a
prefetched value, or whatever the graph computes them with when that folds to a constant (fp16 or
int8 weights through ``DEQUANTIZE``, as MediaPipe's fp16 segmentation models store them).
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from tvmgen.frontends.custom_ops import TFLITE, tflite_op


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

    from tvmgen.core.errors import ModelError
    from tvmgen.frontends import custom_ops

    custom_ops.load()
    removed = set(folded.removed_ops) if folded is not None else set()

    class TvmgenOperatorConverter(OperatorConverter):
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
# tested against NumPy statements of MediaPipe's kernels (tests/test_mediapipe_ops.py).
NOT_IN_LITERT = frozenset({"Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"})


def supported_custom() -> set[str]:
    from tvmgen.frontends import custom_ops

    custom_ops.load()
    return {f"CUSTOM:{code}" for code in TFLITE} | {"CUSTOM:TFLite_Detection_PostProcess"}


# ------------------------------------------------------------------- constant inputs of custom operators


def constant_value(conv, tensor, op_name: str, what: str) -> np.ndarray:
    """The value of ``tensor``, the input ``what`` ("weights", "bias") of custom operator ``op_name``
    that tvmgen needs as a constant: the tensor's buffer (in line or after the flatbuffer), a value
    the converter prefetched (DENSIFY), or else the value of the expression the converter built for
    whatever computes the tensor (DEQUANTIZE of fp16 or of int8/uint8 weights, any chain of
    operators on constants), evaluated here. A tensor computed from the model's inputs is refused."""
    from tvmgen.core.errors import ModelError

    name = tensor.tensor.Name().decode(errors="replace")
    subject = f"custom operator {op_name}: its {what} (tensor '{name}')"
    are = "are" if what.endswith("s") else "is"
    fix = f"re-export the model with the {what} of {op_name} stored as constants"
    if conv.is_prefetched(tensor.tensor_idx) or not conv.has_expr(tensor.tensor_idx):
        buffer = tensor.buffer
        stored = not isinstance(buffer.DataAsNumpy(), int) or (hasattr(buffer, "Offset") and buffer.Offset() > 1)
        if not conv.is_prefetched(tensor.tensor_idx) and not stored:
            raise ModelError(
                f"{subject} {are} not constant: the file holds no value for the tensor and no operator computes it", fix
            )
        return np.asarray(conv.get_tensor_value(tensor))
    expr = conv.get_expr(tensor.tensor_idx)
    order, unbound = _bindings_used(conv, expr)
    model_inputs = {
        str(conv.get_expr(int(i)).name): conv.get_expr(int(i))
        for i in conv.subgraph.InputsAsNumpy()
        if conv.has_expr(int(i))
    }
    from_inputs = [n for n, v in model_inputs.items() if any(v.same_as(u) for u in unbound)]
    if from_inputs:
        raise ModelError(
            f"{subject} {are} not constant: computed from the model's input(s) "
            f"{', '.join(from_inputs)} at run time, and tvmgen needs the {what} of {op_name} "
            "constant",
            fix,
        )
    try:
        if unbound:
            raise ValueError(f"it depends on {', '.join(str(v.name) for v in unbound)}")
        return _evaluate(conv, expr, order)
    except Exception as e:
        raise ModelError(
            f"{subject} {are} not constant: computed by operators tvmgen could not evaluate to a "
            f"constant ({type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1][:200]})",
            fix,
        ) from e


def _bindings_used(conv, expr):
    """The variables ``expr`` uses, directly or through the converter's earlier bindings:
    ([(variable, bound value)] in binding order, [variables bound to nothing: the model's inputs])."""
    from tvm import relax

    order, unbound, seen = [], [], []

    def visit(e):
        for var in relax.analysis.free_vars(e):
            if any(var.same_as(v) for v in seen):
                continue
            seen.append(var)
            value = conv.bb.lookup_binding(var)
            if value is None:
                unbound.append(var)
                continue
            visit(value)
            order.append((var, value))

    visit(expr)
    return order, unbound


def _evaluate(conv, expr, bindings) -> np.ndarray:
    """The value of a Relax expression that uses no model input: a function of no parameters
    (the bindings it uses, then the expression), legalised and constant-folded to one constant."""
    import tvm
    from tvm import relax

    out = relax.Var("value", expr.ty)
    block = relax.DataflowBlock([relax.VarBinding(v, value) for v, value in bindings] + [relax.VarBinding(out, expr)])
    func = relax.Function([], relax.SeqExpr([block], out), expr.ty).with_attr("global_symbol", "main")
    mod = relax.transform.Normalize()(tvm.IRModule({"main": func}))
    mod = relax.transform.FoldConstant()(relax.transform.LegalizeOps()(mod))
    body = mod["main"].body
    result = body.body
    for block in reversed(body.blocks):
        for binding in block.bindings:
            if binding.var.same_as(result):
                result = binding.value
    if not isinstance(result, tvm.ir.expr.Constant):
        raise ValueError(f"it did not fold to a constant ({type(result).__name__} left)")
    return result.value.numpy()


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
            full[:, y * sh : y * sh + kh, x_ * sw : x_ * sw + kw, :] += np.einsum(
                "nc,ohwc->nhwo", x[:, y, x_, :].astype(np.float64), w.astype(np.float64)
            )
    out = full[:, top : full.shape[1] - bottom, left : full.shape[2] - right, :] + b
    return out.astype(np.float32)


def _transpose_conv_bias_numpy_entry(inputs, options):
    return [transpose_conv_bias_numpy(*inputs, options)]


@tflite_op("Convolution2DTransposeBias", numpy=_transpose_conv_bias_numpy_entry)
def transpose_conv_bias(conv, op):
    """A transposed convolution plus bias: NHWC input, OHWI weights (constants), SAME/VALID."""
    from tvm import relax

    data_t, weight_t, bias_t = conv.get_input_tensors(op)
    _, h, w, _ = [int(d) for d in conv.get_tensor_shape(data_t)]
    name = "Convolution2DTransposeBias"
    weights = np.asarray(constant_value(conv, weight_t, name, "weights"), np.float32)  # [out, kh, kw, in]
    strides, padding = _transpose_conv_bias_params(op.CustomOptionsAsNumpy().tobytes(), (h, w), weights.shape[1:3])
    data = conv.get_tensor_expr(data_t)
    nchw = relax.op.permute_dims(data, [0, 3, 1, 2])
    kernel = relax.const(np.ascontiguousarray(weights.transpose(3, 0, 1, 2)), "float32")  # IOHW
    out = relax.op.nn.conv2d_transpose(
        nchw, kernel, strides=strides, padding=padding, data_layout="NCHW", kernel_layout="IOHW"
    )
    bias = relax.const(
        np.asarray(constant_value(conv, bias_t, name, "bias"), np.float32).reshape(1, -1, 1, 1), "float32"
    )
    return relax.op.permute_dims(relax.op.add(out, bias), [0, 2, 3, 1])


# MediaPipe's face-mesh-with-attention operators: Landmarks2TransformMatrix (v2) computes a crop
# matrix from landmarks; TransformTensorBilinear (v1, v2) samples a feature map through it;
# TransformLandmarks (v1, v2) maps landmarks through it. Options are flexbuffer maps.


def _custom_options(op) -> dict:
    """The operator's flexbuffer custom options as a dict ({} when it has none)."""
    raw = op.CustomOptionsAsNumpy()
    if isinstance(raw, int) or not len(raw):
        return {}
    from flatbuffers import flexbuffers

    value = flexbuffers.Loads(bytes(np.asarray(raw, np.uint8).tobytes()))
    return value if isinstance(value, dict) else {}


def _op_version(conv, op) -> int:
    return int(conv.model.OperatorCodes(op.OpcodeIndex()).Version() or 1)


def _refuse(name: str, what: str) -> NoReturn:
    from tvmgen.core.errors import ModelError

    raise ModelError(f"MediaPipe custom operator {name}: {what} is not supported by tvmgen")


def _shape(conv, tensor) -> list[int]:
    return [int(d) for d in conv.get_tensor_shape(tensor)]


def _scalars(flat, indices):
    """Elements ``indices`` of the 1-D Relax tensor ``flat``, each as a [1] tensor."""
    from tvm import relax

    return [relax.op.take(flat, relax.const(np.array([i], np.int32)), axis=0) for i in indices]


def _f32(value):
    from tvm import relax

    return relax.const(np.float32(value), "float32")


def landmarks_to_transform_matrix_options(options: dict, version: int, num_landmarks: int | None = None) -> dict:
    """Landmarks2TransformMatrix v2's options, checked as MediaPipe's kernel checks them. The
    flat ``subset_idxs`` list is read in pairs (an odd last index is paired with itself)."""
    name = "Landmarks2TransformMatrix"
    if version != 2:
        _refuse(name, f"version {version} (only version 2, as in the face-mesh attention models)")
    missing = [
        k
        for k in (
            "subset_idxs",
            "left_rotation_idx",
            "right_rotation_idx",
            "output_height",
            "output_width",
            "scale_x",
            "scale_y",
        )
        if k not in options
    ]
    if missing:
        _refuse(name, f"custom options without {', '.join(missing)}")
    p: dict[str, Any] = {
        "subset_idxs": [int(i) for i in options["subset_idxs"]],
        "left_rotation_idx": int(options["left_rotation_idx"]),
        "right_rotation_idx": int(options["right_rotation_idx"]),
        "target_rotation_radians": float(options.get("target_rotation_radians", 0.0)),
        "output_height": int(options["output_height"]),
        "output_width": int(options["output_width"]),
        "scale_x": float(options["scale_x"]),
        "scale_y": float(options["scale_y"]),
    }
    for key in ("output_height", "output_width", "scale_x", "scale_y"):
        if not p[key] > 0:
            _refuse(name, f"{key} = {p[key]} (must be > 0)")
    indices = [p["left_rotation_idx"], p["right_rotation_idx"]] + p["subset_idxs"]
    if not p["subset_idxs"]:
        _refuse(name, "an empty subset_idxs")
    bad = [i for i in indices if i < 0 or (num_landmarks is not None and i >= num_landmarks)]
    if bad:
        _refuse(name, f"landmark index {bad[0]} (the input has {num_landmarks} landmarks)")
    return p


@tflite_op("Landmarks2TransformMatrix")
def landmarks_to_transform_matrix(conv, op):
    """The 4x4 matrix mapping crop pixels to input coordinates: rotation from two landmarks,
    crop box from the rotated extent of a landmark subset, scaled to output_width x output_height."""
    from tvm import relax

    (lm_t,) = conv.get_input_tensors(op)
    (out_t,) = conv.get_output_tensors(op)
    shape = _shape(conv, lm_t)
    size = int(np.prod(shape))
    if len(shape) != 3 or shape[-1] != 3:
        _refuse("Landmarks2TransformMatrix", f"landmarks of shape {shape} (v2 reads [1, N, 3])")
    p = landmarks_to_transform_matrix_options(_custom_options(op), _op_version(conv, op), size // 3)
    flat = relax.op.reshape(conv.get_tensor_expr(lm_t), [size])
    li, ri = p["left_rotation_idx"], p["right_rotation_idx"]
    lx, ly, rx, ry = _scalars(flat, [3 * li, 3 * li + 1, 3 * ri, 3 * ri + 1])
    # cos/sin of theta = atan2(dy, dx) without atan2: (dx, dy) / |(dx, dy)|, theta = 0 at the origin
    dx, dy = relax.op.subtract(rx, lx), relax.op.subtract(ry, ly)
    rho = relax.op.sqrt(relax.op.add(relax.op.multiply(dx, dx), relax.op.multiply(dy, dy)))
    nonzero = relax.op.greater(rho, _f32(0))
    safe = relax.op.where(nonzero, rho, _f32(1))
    ct = relax.op.where(nonzero, relax.op.divide(dx, safe), _f32(1))
    st = relax.op.where(nonzero, relax.op.divide(dy, safe), _f32(0))
    # rotation r = target - theta
    target = p["target_rotation_radians"]
    cr = relax.op.add(relax.op.multiply(_f32(np.cos(target)), ct), relax.op.multiply(_f32(np.sin(target)), st))
    sr = relax.op.subtract(relax.op.multiply(_f32(np.sin(target)), ct), relax.op.multiply(_f32(np.cos(target)), st))
    idx = np.array(p["subset_idxs"], np.int32) * 3
    xs = relax.op.take(flat, relax.const(idx), axis=0)
    ys = relax.op.take(flat, relax.const(idx + 1), axis=0)
    xr = relax.op.subtract(relax.op.multiply(cr, xs), relax.op.multiply(sr, ys))
    yr = relax.op.add(relax.op.multiply(sr, xs), relax.op.multiply(cr, ys))
    ext = [relax.op.max(v, axis=0, keepdims=True) for v in (xr, yr)] + [
        relax.op.min(v, axis=0, keepdims=True) for v in (xr, yr)
    ]
    width, height = relax.op.subtract(ext[0], ext[2]), relax.op.subtract(ext[1], ext[3])
    mx = relax.op.multiply(relax.op.add(ext[0], ext[2]), _f32(0.5))
    my = relax.op.multiply(relax.op.add(ext[1], ext[3]), _f32(0.5))
    cx = relax.op.add(relax.op.multiply(cr, mx), relax.op.multiply(sr, my))  # rotated back by -r
    cy = relax.op.subtract(relax.op.multiply(cr, my), relax.op.multiply(sr, mx))
    ow, oh = float(p["output_width"]), float(p["output_height"])
    sx = relax.op.multiply(width, _f32(p["scale_x"] / ow))
    sy = relax.op.multiply(height, _f32(p["scale_y"] / oh))
    a, b = relax.op.multiply(cr, sx), relax.op.multiply(sr, sy)
    c, d = relax.op.negative(relax.op.multiply(sr, sx)), relax.op.multiply(cr, sy)
    tx = relax.op.subtract(cx, relax.op.add(relax.op.multiply(a, _f32(ow / 2)), relax.op.multiply(b, _f32(oh / 2))))
    ty = relax.op.subtract(cy, relax.op.add(relax.op.multiply(c, _f32(ow / 2)), relax.op.multiply(d, _f32(oh / 2))))
    zero, one = relax.const(np.zeros(1, np.float32)), relax.const(np.ones(1, np.float32))
    rows = [a, b, zero, tx, c, d, zero, ty, zero, zero, one, zero, zero, zero, zero, one]
    out_shape = _shape(conv, out_t)
    return relax.op.reshape(
        relax.op.concat(rows, axis=0), out_shape if int(np.prod(out_shape or [0])) == 16 else [1, 4, 4]
    )


def transform_tensor_bilinear_options(options: dict, version: int) -> dict:
    """(output_height, output_width or None, align_corners) of TransformTensorBilinear: v2 reads
    output_height / output_width and always aligns corners (samples at pixel centres); v1 reads
    output_size [h, w] and mode (only "bilinear"), without the correction."""
    name = "TransformTensorBilinear"
    if version == 2:
        return {"output_hw": (options.get("output_height"), options.get("output_width")), "align_corners": True}
    if version == 1:
        mode = options.get("mode", "bilinear")
        if mode != "bilinear":
            _refuse(name, f"mode {mode!r} (only 'bilinear')")
        size = options.get("output_size")
        return {"output_hw": tuple(size[:2]) if size is not None else (None, None), "align_corners": False}
    _refuse(name, f"version {version} (only versions 1 and 2)")


@tflite_op("TransformTensorBilinear")
def transform_tensor_bilinear(conv, op):
    """Bilinear sampling of an NHWC map at the first two rows of a 4x4 matrix applied to each
    output pixel's (x, y, 0, 1); samples outside [0, W-1] x [0, H-1] are 0."""
    from tvm import relax

    name = "TransformTensorBilinear"
    data_t, matrix_t = conv.get_input_tensors(op)[:2]
    (out_t,) = conv.get_output_tensors(op)
    p = transform_tensor_bilinear_options(_custom_options(op), _op_version(conv, op))
    n, h, w, ch = _shape(conv, data_t)
    out_shape = _shape(conv, out_t)
    if n != 1:
        _refuse(name, f"batch {n} (MediaPipe's kernel samples batch 1 only)")
    if len(out_shape) == 4 and all(d > 0 for d in out_shape):
        oh, ow = out_shape[1:3]
    else:
        oh, ow = p["output_hw"]
    if oh is None or ow is None:
        _refuse(name, "an output without a known height and width")
    opt_h, opt_w = p["output_hw"]
    if (opt_h is not None and int(opt_h) != oh) or (opt_w is not None and int(opt_w) != ow):
        _refuse(name, f"output size options {opt_h}x{opt_w} that differ from the output tensor's {oh}x{ow}")
    m_size = int(np.prod(_shape(conv, matrix_t)))
    if m_size < 8:
        _refuse(name, f"a matrix input of {m_size} elements (needs a 4x4 matrix)")
    m = relax.op.reshape(conv.get_tensor_expr(matrix_t), [m_size])
    m0, m1, m3, m4, m5, m7 = _scalars(m, [0, 1, 3, 4, 5, 7])
    if p["align_corners"]:  # sample pixel centres: T -> S(-0.5) * T * S(+0.5)
        m3 = relax.op.add(m3, relax.op.subtract(relax.op.multiply(relax.op.add(m0, m1), _f32(0.5)), _f32(0.5)))
        m7 = relax.op.add(m7, relax.op.subtract(relax.op.multiply(relax.op.add(m4, m5), _f32(0.5)), _f32(0.5)))
    gy, gx = np.meshgrid(np.arange(oh, dtype=np.float32), np.arange(ow, dtype=np.float32), indexing="ij")
    gx, gy = relax.const(gx.reshape(-1, 1)), relax.const(gy.reshape(-1, 1))
    tx = relax.op.add(relax.op.add(relax.op.multiply(m0, gx), relax.op.multiply(m1, gy)), m3)  # [P, 1]
    ty = relax.op.add(relax.op.add(relax.op.multiply(m4, gx), relax.op.multiply(m5, gy)), m7)
    inside = relax.op.logical_and(
        relax.op.logical_and(relax.op.greater_equal(tx, _f32(0)), relax.op.less_equal(tx, _f32(w - 1))),
        relax.op.logical_and(relax.op.greater_equal(ty, _f32(0)), relax.op.less_equal(ty, _f32(h - 1))),
    )
    x0, y0 = relax.op.floor(tx), relax.op.floor(ty)
    fx, fy = relax.op.subtract(tx, x0), relax.op.subtract(ty, y0)

    def index(v, hi):  # clamped before the cast: far outside samples must not overflow int32
        return relax.op.astype(relax.op.minimum(relax.op.maximum(v, _f32(0)), _f32(hi)), "int32")

    x1, y1 = relax.op.add(x0, _f32(1)), relax.op.add(y0, _f32(1))
    xi0, xi1, yi0, yi1 = index(x0, w - 1), index(x1, w - 1), index(y0, h - 1), index(y1, h - 1)
    flat = relax.op.reshape(conv.get_tensor_expr(data_t), [h * w, ch])

    def read(yi, xi, valid):  # [P, C]; a neighbour past the last row/column reads 0
        flat_idx = relax.op.reshape(relax.op.add(relax.op.multiply(yi, relax.const(np.int32(w))), xi), [oh * ow])
        value = relax.op.take(flat, flat_idx, axis=0, mode="clip")
        return value if valid is None else relax.op.where(valid, value, _f32(0))

    x1_ok = relax.op.less_equal(x1, _f32(w - 1))
    y1_ok = relax.op.less_equal(y1, _f32(h - 1))
    q11, q21 = read(yi0, xi0, None), read(yi0, xi1, x1_ok)
    q12, q22 = read(yi1, xi0, y1_ok), read(yi1, xi1, relax.op.logical_and(x1_ok, y1_ok))
    one = _f32(1)
    upper = relax.op.add(relax.op.multiply(relax.op.subtract(one, fx), q11), relax.op.multiply(fx, q21))
    lower = relax.op.add(relax.op.multiply(relax.op.subtract(one, fx), q12), relax.op.multiply(fx, q22))
    result = relax.op.add(relax.op.multiply(fy, lower), relax.op.multiply(relax.op.subtract(one, fy), upper))
    result = relax.op.where(inside, result, _f32(0))
    return relax.op.reshape(result, [1, oh, ow, ch])


def transform_landmarks_options(options: dict, version: int, shape: list[int]) -> dict:
    """(dimensions, scale) of TransformLandmarks: v2 takes [1, N, D] landmarks, D = 2 or 3, and no
    options; v1 takes [1, H, W, C] with options dimensions (2 or 3, dividing C) and scale, which
    multiplies the translation."""
    name = "TransformLandmarks"
    if version == 2:
        if len(shape) != 3 or shape[0] != 1:
            _refuse(name, f"v2 landmarks of shape {shape} (expects [1, N, 2 or 3])")
        dims, scale = shape[-1], 1.0
    elif version == 1:
        if len(shape) != 4 or shape[0] != 1:
            _refuse(name, f"v1 landmarks of shape {shape} (expects [1, H, W, C])")
        dims, scale = int(options.get("dimensions", 0)), float(options.get("scale", 0.0))
        if scale == 0:
            _refuse(name, "scale = 0")
        if dims in (2, 3) and shape[-1] % dims:
            _refuse(name, f"dimensions = {dims}, which does not divide the {shape[-1]} channels")
    else:
        _refuse(name, f"version {version} (only versions 1 and 2)")
    if dims not in (2, 3):
        _refuse(name, f"dimensions = {dims} (2 or 3)")
    return {"dimensions": dims, "scale": scale}


@tflite_op("TransformLandmarks")
def transform_landmarks(conv, op):
    """x, y of each landmark through the first two rows of a 4x4 matrix (z read as 0, the
    translation times scale); z, when there is one, passes through."""
    from tvm import relax

    lm_t, matrix_t = conv.get_input_tensors(op)[:2]
    shape = _shape(conv, lm_t)
    p = transform_landmarks_options(_custom_options(op), _op_version(conv, op), shape)
    dims = p["dimensions"]
    m_size = int(np.prod(_shape(conv, matrix_t)))
    if m_size < 8:
        _refuse("TransformLandmarks", f"a matrix input of {m_size} elements (needs a 4x4 matrix)")
    m = relax.op.reshape(conv.get_tensor_expr(matrix_t), [m_size])
    m0, m1, m3, m4, m5, m7 = _scalars(m, [0, 1, 3, 4, 5, 7])
    if p["scale"] != 1.0:
        m3, m7 = relax.op.multiply(m3, _f32(p["scale"])), relax.op.multiply(m7, _f32(p["scale"]))
    lm = relax.op.reshape(conv.get_tensor_expr(lm_t), [int(np.prod(shape)) // dims, dims])
    x, y = (relax.op.take(lm, relax.const(np.array([i], np.int32)), axis=1) for i in (0, 1))
    out_x = relax.op.add(relax.op.add(relax.op.multiply(m0, x), relax.op.multiply(m1, y)), m3)
    out_y = relax.op.add(relax.op.add(relax.op.multiply(m4, x), relax.op.multiply(m5, y)), m7)
    parts = [out_x, out_y] + ([relax.op.take(lm, relax.const(np.array([2], np.int32)), axis=1)] if dims == 3 else [])
    return relax.op.reshape(relax.op.concat(parts, axis=1), shape)
