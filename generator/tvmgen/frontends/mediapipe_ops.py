"""MediaPipe's custom TFLite operators, converted by tvmgen (``custom_ops`` registry entries, registered
when ``tflite_ops`` reads the registry): ``Convolution2DTransposeBias`` (a transposed convolution plus
bias, with a NumPy statement of MediaPipe's kernel) and the face-mesh attention operators
``Landmarks2TransformMatrix``, ``TransformTensorBilinear`` and ``TransformLandmarks``. Their constant
inputs are read through ``tflite_constants.constant_value``."""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from tvmgen.frontends.custom_ops import tflite_op
from tvmgen.frontends.tflite_constants import constant_value


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
