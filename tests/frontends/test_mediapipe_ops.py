"""MediaPipe's face-mesh-with-attention custom TFLite operators (Landmarks2TransformMatrix,
TransformTensorBilinear, TransformLandmarks): small TFLite models holding them, compiled by
tvmgen, run, and compared with NumPy statements of MediaPipe's CPU kernels (no runtime here
runs these operators: LiteRT lacks them)."""

from __future__ import annotations

import numpy as np
import pytest

# ------------------------------------------------------------------ NumPy references (MediaPipe's semantics)


def _rot(r):
    return np.array([[np.cos(r), -np.sin(r)], [np.sin(r), np.cos(r)]])


def landmarks_to_transform_matrix_ref(landmarks, o):
    """Landmarks2TransformMatrix v2: rotation r = target - angle(left -> right landmark); the
    subset rotated by r gives a box (centre, width, height); the matrix maps output pixel
    (x, y, z, 1) to shift(centre) . rot(-r) . scale(scale * box / output size) . shift(-output / 2)."""
    flat = np.asarray(landmarks, np.float64).reshape(-1)
    xy = lambda i: flat[3 * i : 3 * i + 2]  # noqa: E731
    left, right = xy(o["left_rotation_idx"]), xy(o["right_rotation_idx"])
    r = o.get("target_rotation_radians", 0.0) - np.arctan2(right[1] - left[1], right[0] - left[0])
    idx = list(o["subset_idxs"]) + ([o["subset_idxs"][-1]] if len(o["subset_idxs"]) % 2 else [])
    pts = _rot(r) @ np.stack([xy(i) for i in idx], axis=1)
    lo, hi = pts.min(axis=1), pts.max(axis=1)
    centre = _rot(-r) @ ((lo + hi) / 2)
    ow, oh = o["output_width"], o["output_height"]

    def m4(lin=None, t=(0, 0)):
        m = np.eye(4)
        m[:2, :2], m[:2, 3] = np.eye(2) if lin is None else lin, t
        return m

    scale = np.diag([o["scale_x"] * (hi - lo)[0] / ow, o["scale_y"] * (hi - lo)[1] / oh])
    t = m4(t=centre) @ m4(_rot(-r)) @ m4(scale) @ m4(t=(-ow / 2, -oh / 2))
    return t.reshape(1, 4, 4)


def transform_tensor_bilinear_ref(data, matrix, out_hw, align_corners):
    """TransformTensorBilinear: output pixel (x, y) samples data bilinearly at (row 0, row 1) of
    the matrix times (x, y, 0, 1); 0 outside [0, W-1] x [0, H-1]; v2 (align_corners) samples at
    pixel centres: the matrix is conjugated by a half-pixel shift. Also returns the sample
    positions, for the tests' distance-to-the-edge checks."""
    m = np.asarray(matrix, np.float64).reshape(-1)[:8].reshape(2, 4).copy()
    if align_corners:
        m[:, 3] += 0.5 * m[:, 0] + 0.5 * m[:, 1] - 0.5
    _, h, w, c = data.shape
    oh, ow = out_hw
    out = np.zeros((1, oh, ow, c), np.float64)
    pos = np.zeros((oh, ow, 2))
    for y in range(oh):
        for x in range(ow):
            tx, ty = m @ np.array([x, y, 0.0, 1.0])
            pos[y, x] = tx, ty
            if tx < 0 or tx > w - 1 or ty < 0 or ty > h - 1:
                continue
            x0, y0 = int(np.floor(tx)), int(np.floor(ty))
            fx, fy = tx - x0, ty - y0
            read = lambda yy, xx: data[0, yy, xx] if yy < h and xx < w else np.zeros(c)  # noqa: E731
            upper = (1 - fx) * read(y0, x0) + fx * read(y0, x0 + 1)
            lower = (1 - fx) * read(y0 + 1, x0) + fx * read(y0 + 1, x0 + 1)
            out[0, y, x] = fy * lower + (1 - fy) * upper
    return out.astype(np.float32), pos


def transform_landmarks_ref(landmarks, matrix, dims, scale=1.0):
    """TransformLandmarks: (x, y) -> rows 0 and 1 of the matrix times (x, y, 0, scale); z kept."""
    m = np.asarray(matrix, np.float64).reshape(-1)
    lm = np.asarray(landmarks, np.float64).reshape(-1, dims)
    out = lm.copy()
    out[:, 0] = m[0] * lm[:, 0] + m[1] * lm[:, 1] + m[3] * scale
    out[:, 1] = m[4] * lm[:, 0] + m[5] * lm[:, 1] + m[7] * scale
    return out.reshape(landmarks.shape).astype(np.float32)


# ------------------------------------------------------------------ TFLite models holding the operators


def _schema():
    from ai_edge_litert import schema_py_generated as fb

    return fb


def tflite_model(tensors, ops, inputs, outputs, quant=None) -> bytes:
    """A TFLite flatbuffer: tensors {name: shape} (float32, no value) or {name: ndarray} (a constant
    of the array's dtype and shape, in a buffer); ops [(code, version, inputs, outputs, options)]:
    a builtin operator by its name (``"DEQUANTIZE"``) or a custom code, options a dict (flexbuffer),
    bytes (raw custom options), a schema ``...OptionsT`` object (builtin options) or None; quant
    {name: (scales, zero points, axis)}; subgraph inputs and outputs by name."""
    import flatbuffers
    from flatbuffers import flexbuffers

    fb = _schema()
    types = {
        np.dtype(np.float32): fb.TensorType.FLOAT32,
        np.dtype(np.float16): fb.TensorType.FLOAT16,
        np.dtype(np.int8): fb.TensorType.INT8,
        np.dtype(np.uint8): fb.TensorType.UINT8,
        np.dtype(np.int32): fb.TensorType.INT32,
    }
    names = list(tensors)
    model = fb.ModelT()
    model.version = 3
    model.buffers = [fb.BufferT()]
    sub = fb.SubGraphT()
    sub.tensors = []
    for name in names:
        t = fb.TensorT()
        value = tensors[name]
        t.name, t.type, t.buffer = name, fb.TensorType.FLOAT32, 0
        if isinstance(value, np.ndarray):
            t.shape, t.type = list(value.shape), types[value.dtype]
            buf = fb.BufferT()
            buf.data = list(np.ascontiguousarray(value).tobytes())
            model.buffers.append(buf)
            t.buffer = len(model.buffers) - 1
        else:
            t.shape = list(value)
        if quant and name in quant:
            scales, zero_points, axis = quant[name]
            q = fb.QuantizationParametersT()
            q.scale = [float(v) for v in np.atleast_1d(scales)]
            q.zeroPoint = [int(v) for v in np.atleast_1d(zero_points)]
            q.quantizedDimension = axis
            t.quantization = q
        sub.tensors.append(t)
    model.operatorCodes, sub.operators = [], []
    for code_name, version, ins, outs, options in ops:
        code = fb.OperatorCodeT()
        builtin = getattr(fb.BuiltinOperator, code_name, None) if code_name.isupper() else None
        if builtin is None:
            code.builtinCode = code.deprecatedBuiltinCode = 32  # CUSTOM
            code.customCode = code_name
        else:
            code.builtinCode, code.deprecatedBuiltinCode = builtin, min(builtin, 127)
        code.version = version
        model.operatorCodes.append(code)
        op = fb.OperatorT()
        op.opcodeIndex = len(model.operatorCodes) - 1
        op.inputs, op.outputs = [names.index(n) for n in ins], [names.index(n) for n in outs]
        if type(options).__name__.endswith("OptionsT"):
            op.builtinOptionsType = getattr(fb.BuiltinOptions, type(options).__name__[:-1])
            op.builtinOptions = options
        elif isinstance(options, bytes):
            op.customOptions = list(options)
        elif builtin is None:
            op.customOptions = list(flexbuffers.Dumps(options)) if options else []
        op.customOptionsFormat = 0  # FLEXBUFFERS
        sub.operators.append(op)
    sub.inputs, sub.outputs = [names.index(n) for n in inputs], [names.index(n) for n in outputs]
    model.subgraphs = [sub]
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def compile_run(tmp_path, model: bytes, inputs: dict, name="m"):
    """Import with tvmgen's TFLite frontend, compile for the host, run."""
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.runtime.runner import HostModel

    path = tmp_path / f"{name}.tflite"
    path.write_bytes(model)
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / name, True, {"name": name})
    return HostModel(tmp_path / name).run(inputs)


def face_landmarks(n=478, seed=0, size=16.0):
    """A plausible face: landmarks on an ellipse-ish cloud, tilted, in a size x size map."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 2 * np.pi, n)
    rad = rng.uniform(0.1, 1.0, n)
    pts = np.stack([0.22 * size * rad * np.cos(a), 0.28 * size * rad * np.sin(a)], axis=1)
    tilt = 0.3
    pts = pts @ _rot(tilt).T + size / 2 + rng.uniform(-0.5, 0.5, 2)
    z = rng.standard_normal((n, 1))
    return np.concatenate([pts, z], axis=1).astype(np.float32).reshape(1, n, 3)


# the face-mesh attention models' style: eye contour subsets, eye corners for the rotation
LEFT_EYE = [33, 7, 163, 144, 145, 153, 154, 155, 133, 246, 161, 160, 159, 158, 157, 173]
L2TM = dict(
    subset_idxs=LEFT_EYE,
    left_rotation_idx=33,
    right_rotation_idx=133,
    target_rotation_radians=0.0,
    output_height=4,
    output_width=4,
    scale_x=1.5,
    scale_y=1.5,
)


def assert_close(actual, expected, rtol=1e-4, atol=1e-4):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * max(1.0, float(np.abs(expected).max())))


def assert_clear_of_edges(pos, h, w, margin=1e-3):
    """No sample within ``margin`` of the in/out boundary (where float32 and float64 may disagree)."""
    for v, hi in ((pos[..., 0], w - 1), (pos[..., 1], h - 1)):
        assert np.min(np.minimum(np.abs(v), np.abs(v - hi))) > margin


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("case", ["face_478_eye_subset", "subset_odd_target_rotation"])
def test_landmarks_to_transform_matrix(case, tmp_path):
    if case == "face_478_eye_subset":
        lm, opts = face_landmarks(), dict(L2TM)
    else:  # 20 landmarks, an odd subset (last index paired with itself), a target rotation
        lm = face_landmarks(20, seed=3, size=192.0)
        opts = dict(
            subset_idxs=[0, 4, 9, 11, 17],
            left_rotation_idx=2,
            right_rotation_idx=15,
            target_rotation_radians=0.7,
            output_height=32,
            output_width=24,
            scale_x=1.2,
            scale_y=1.8,
        )
    model = tflite_model(
        {"landmarks": lm.shape, "matrix": [1, 4, 4]},
        [("Landmarks2TransformMatrix", 2, ["landmarks"], ["matrix"], opts)],
        ["landmarks"],
        ["matrix"],
    )
    (got,) = compile_run(tmp_path, model, {"landmarks": lm})
    assert got.shape == (1, 4, 4)
    assert_close(got, landmarks_to_transform_matrix_ref(lm, opts))


def _affine(angle, scale, shift):
    m = np.eye(4, dtype=np.float32)
    m[:2, :2] = _rot(angle) * scale
    m[:2, 3] = shift
    return m.reshape(1, 4, 4)


@pytest.mark.parametrize("version", [2, 1])
def test_transform_tensor_bilinear(version, tmp_path):
    """A [1, 16, 16, 8] map sampled to [1, 4, 4, 8] and to [1, 6, 5, 8] (some samples off the map)."""
    rng = np.random.default_rng(5)
    data = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
    m_in = _affine(0.4, 2.3, (5.1, 3.7))  # inside the map
    m_off = _affine(0.3, 3.4, (2.3, -4.6))  # partly off it: zeros there
    opts = (
        ({"output_height": 4, "output_width": 4}, {"output_height": 6, "output_width": 5})
        if version == 2
        else ({"mode": "bilinear", "output_size": [4, 4]}, {"mode": "bilinear", "output_size": [6, 5]})
    )
    model = tflite_model(
        {"data": data.shape, "m_in": [1, 4, 4], "m_off": [1, 4, 4], "a": [1, 4, 4, 8], "b": [1, 6, 5, 8]},
        [
            ("TransformTensorBilinear", version, ["data", "m_in"], ["a"], opts[0]),
            ("TransformTensorBilinear", version, ["data", "m_off"], ["b"], opts[1]),
        ],
        ["data", "m_in", "m_off"],
        ["a", "b"],
    )
    got = compile_run(tmp_path, model, {"data": data, "m_in": m_in, "m_off": m_off})
    for g, m, hw in zip(got, (m_in, m_off), ((4, 4), (6, 5))):
        ref, pos = transform_tensor_bilinear_ref(data, m, hw, align_corners=version == 2)
        assert_clear_of_edges(pos, 16, 16)
        assert g.shape == ref.shape
        assert_close(g, ref)
    assert (got[1] == 0).all(axis=-1).any() and (got[1] != 0).any()  # both kinds of sample occur


def test_transform_landmarks(tmp_path):
    """v2 with [1, N, 3] (z kept) and [1, N, 2]; v1 with [1, 1, N, 3k] and a scale."""
    rng = np.random.default_rng(7)
    m = _affine(0.6, 1.7, (40.0, -12.0))
    lm3 = rng.uniform(0, 64, (1, 80, 3)).astype(np.float32)
    lm2 = rng.uniform(0, 64, (1, 30, 2)).astype(np.float32)
    lm_v1 = rng.uniform(0, 64, (1, 1, 5, 6)).astype(np.float32)
    model = tflite_model(
        {
            "m": [1, 4, 4],
            "lm3": lm3.shape,
            "lm2": lm2.shape,
            "lm_v1": lm_v1.shape,
            "o3": lm3.shape,
            "o2": lm2.shape,
            "o_v1": lm_v1.shape,
        },
        [
            ("TransformLandmarks", 2, ["lm3", "m"], ["o3"], None),
            ("TransformLandmarks", 2, ["lm2", "m"], ["o2"], None),
            ("TransformLandmarks", 1, ["lm_v1", "m"], ["o_v1"], {"dimensions": 3, "scale": 0.5}),
        ],
        ["m", "lm3", "lm2", "lm_v1"],
        ["o3", "o2", "o_v1"],
    )
    o3, o2, o_v1 = compile_run(tmp_path, model, {"m": m, "lm3": lm3, "lm2": lm2, "lm_v1": lm_v1})
    assert_close(o3, transform_landmarks_ref(lm3, m, 3))
    np.testing.assert_array_equal(o3[..., 2], lm3[..., 2])
    assert_close(o2, transform_landmarks_ref(lm2, m, 2))
    assert_close(o_v1, transform_landmarks_ref(lm_v1, m, 3, scale=0.5))


def test_face_mesh_attention_chain(tmp_path):
    """As the face model chains them: 478 landmarks -> Landmarks2TransformMatrix -> the matrix
    crops a [1, 16, 16, 8] feature map (TransformTensorBilinear, 4 x 4) and maps crop-space
    landmarks [1, 16, 3] back (TransformLandmarks)."""
    rng = np.random.default_rng(11)
    lm = face_landmarks(seed=1)
    feat = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
    crop_lm = rng.uniform(0, 4, (1, 16, 3)).astype(np.float32)
    model = tflite_model(
        {
            "landmarks": lm.shape,
            "features": feat.shape,
            "crop_landmarks": crop_lm.shape,
            "matrix": [1, 4, 4],
            "crop": [1, 4, 4, 8],
            "eye": crop_lm.shape,
        },
        [
            ("Landmarks2TransformMatrix", 2, ["landmarks"], ["matrix"], L2TM),
            ("TransformTensorBilinear", 2, ["features", "matrix"], ["crop"], {"output_height": 4, "output_width": 4}),
            ("TransformLandmarks", 2, ["crop_landmarks", "matrix"], ["eye"], None),
        ],
        ["landmarks", "features", "crop_landmarks"],
        ["crop", "eye", "matrix"],
    )
    crop, eye, matrix = compile_run(tmp_path, model, {"landmarks": lm, "features": feat, "crop_landmarks": crop_lm})
    m_ref = landmarks_to_transform_matrix_ref(lm, L2TM)
    assert_close(matrix, m_ref)
    crop_ref, pos = transform_tensor_bilinear_ref(feat, m_ref, (4, 4), align_corners=True)
    assert_clear_of_edges(pos, 16, 16)
    assert_close(crop, crop_ref, rtol=1e-4, atol=3e-4)
    assert_close(eye, transform_landmarks_ref(crop_lm, m_ref, 3))


def test_unsupported_versions_and_options_are_refused(tmp_path, tvmgen):
    from tvmgen import frontends
    from tvmgen.core.errors import ModelError

    lm_shape = [1, 478, 3]
    cases = {
        "l2tm_v1": (
            [("Landmarks2TransformMatrix", 1, ["x"], ["y"], L2TM)],
            lm_shape,
            [1, 4, 4],
            "Landmarks2TransformMatrix: version 1",
        ),
        "l2tm_scale": (
            [("Landmarks2TransformMatrix", 2, ["x"], ["y"], dict(L2TM, scale_x=0.0))],
            lm_shape,
            [1, 4, 4],
            "Landmarks2TransformMatrix: scale_x = 0.0",
        ),
        "l2tm_index": (
            [("Landmarks2TransformMatrix", 2, ["x"], ["y"], dict(L2TM, subset_idxs=[1, 500]))],
            lm_shape,
            [1, 4, 4],
            "Landmarks2TransformMatrix: landmark index 500",
        ),
        "ttb_mode": (
            [("TransformTensorBilinear", 1, ["x", "m"], ["y"], {"mode": "nearest", "output_size": [4, 4]})],
            [1, 8, 8, 2],
            [1, 4, 4, 2],
            "TransformTensorBilinear: mode 'nearest'",
        ),
        "ttb_v3": (
            [("TransformTensorBilinear", 3, ["x", "m"], ["y"], {"output_height": 4, "output_width": 4})],
            [1, 8, 8, 2],
            [1, 4, 4, 2],
            "TransformTensorBilinear: version 3",
        ),
        "tl_dims": (
            [("TransformLandmarks", 2, ["x", "m"], ["y"], None)],
            [1, 10, 4],
            [1, 10, 4],
            "TransformLandmarks: dimensions = 4",
        ),
    }
    for name, (ops, x_shape, y_shape, message) in cases.items():
        tensors = {"x": x_shape, "y": y_shape} | ({"m": [1, 4, 4]} if len(ops[0][2]) == 2 else {})
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(tflite_model(tensors, ops, list(tensors)[:1] + list(tensors)[2:], ["y"]))
        with pytest.raises(ModelError, match=message):
            frontends.load(path, [])
    # the CLI says so too, with its usual exit status for a model it cannot import
    r = tvmgen("compile", tmp_path / "l2tm_v1.tflite", "-o", tmp_path / "out")
    assert r.returncode != 0 and "Landmarks2TransformMatrix: version 1" in r.output, r.output


def test_check_says_litert_cannot_run_them_and_writes_nothing(tmp_path, tvmgen):
    """`compile --check` has no reference for these operators (LiteRT lacks them): it says so, with
    the way out, exits 2 and leaves no artifact; without --check the same model compiles."""
    path = tmp_path / "l2tm.tflite"
    path.write_bytes(
        tflite_model(
            {"x": [1, 478, 3], "y": [1, 4, 4]}, [("Landmarks2TransformMatrix", 2, ["x"], ["y"], L2TM)], ["x"], ["y"]
        )
    )
    r = tvmgen("compile", path, "--check", "-o", tmp_path / "checked")
    assert r.returncode == 2, r.output
    assert "LiteRT does not run MediaPipe's custom operator(s) Landmarks2TransformMatrix" in r.output, r.output
    assert "without --check" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "checked").exists()
    r = tvmgen("compile", path, "-o", tmp_path / "plain")
    assert r.returncode == 0, r.output
    assert (tmp_path / "plain" / "manifest.json").is_file()


# ------------------------------------------------------------------ Convolution2DTransposeBias, computed weights
# MediaPipe's fp16 segmentation models (selfie segmentation) store the weights and bias of
# Convolution2DTransposeBias as fp16 constants run through DEQUANTIZE: the operator's inputs have no
# buffer, only a producer that folds to a constant.


def _conv_t_options(padding="same", stride=2) -> bytes:
    import struct

    return struct.pack("<iii", 1 if padding == "same" else 2, stride, stride)  # padding, stride_w, stride_h


def _litert(model: bytes, inputs: dict) -> list:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model, num_threads=1)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], inputs[d["name"]])
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def _conv_t_bias_case(case, rng):
    """(tensors, producer ops, quant, float weights, float bias) for one way of storing the weights."""
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)  # OHWI
    b = rng.standard_normal(3).astype(np.float32)
    if case in ("fp16", "fp16_then_neg"):
        w16, b16 = w.astype(np.float16), b.astype(np.float16)
        tensors = {"w16": w16, "b16": b16, "wd": w.shape, "w": w.shape, "b": b.shape}
        ops = [
            ("DEQUANTIZE", 1, ["w16"], ["wd" if case == "fp16_then_neg" else "w"], None),
            ("DEQUANTIZE", 1, ["b16"], ["b"], None),
        ]
        if case == "fp16_then_neg":  # a longer chain on constants: folded as well
            ops.append(("NEG", 1, ["wd"], ["w"], None))
            return tensors, ops, None, -w16.astype(np.float32), b16.astype(np.float32)
        del tensors["wd"]
        return tensors, ops, None, w16.astype(np.float32), b16.astype(np.float32)
    # int8 weights quantised per output channel (axis 0), uint8 bias per tensor with a zero point
    scales = (np.abs(w).reshape(3, -1).max(axis=1) / 127).astype(np.float32)
    wq = np.clip(np.round(w / scales[:, None, None, None]), -127, 127).astype(np.int8)
    bq = np.clip(np.round(b / 0.02) + 128, 0, 255).astype(np.uint8)
    tensors = {"wq": wq, "bq": bq, "w": w.shape, "b": b.shape}
    ops = [("DEQUANTIZE", 2, ["wq"], ["w"], None), ("DEQUANTIZE", 1, ["bq"], ["b"], None)]
    quant = {"wq": (scales, np.zeros(3, np.int64), 0), "bq": (0.02, 128, 0)}
    return tensors, ops, quant, wq * scales[:, None, None, None], (bq.astype(np.float32) - 128) * 0.02


def _as_builtin_transpose_conv(ops, tensors, stride=2):
    """The same graph with LiteRT's builtin TRANSPOSE_CONV (output shape, weights, data, bias; SAME)
    in place of the custom operator."""
    fb = _schema()
    options = fb.TransposeConvOptionsT()
    options.padding, options.strideW, options.strideH = fb.Padding.SAME, stride, stride
    tensors = {**tensors, "out_shape": np.array(tensors["y"], np.int32)}
    return [
        op
        if op[0] != "Convolution2DTransposeBias"
        else ("TRANSPOSE_CONV", 3, ["out_shape", op[2][1], op[2][0], op[2][2]], op[3], options)
        for op in ops
    ], tensors


@pytest.mark.parametrize("case", ["fp16", "int8", "fp16_then_neg"])
def test_convolution2d_transpose_bias_weights_through_dequantize(case, tmp_path):
    """Weights and bias through DEQUANTIZE (fp16; int8 per-axis and uint8 with a zero point; fp16
    then NEG): tvmgen matches LiteRT running the custom operator (its XNNPACK delegate runs it only
    with weights it sees as static: fp16 through DEQUANTIZE), LiteRT running the same graph with the builtin
    TRANSPOSE_CONV, and MediaPipe's kernel on the dequantised values."""
    from tvmgen.frontends.mediapipe_ops import transpose_conv_bias_numpy

    rng = np.random.default_rng(21)
    tensors, ops, quant, w, b = _conv_t_bias_case(case, rng)
    tensors = {"x": [1, 6, 6, 4], **tensors, "y": [1, 12, 12, 3]}
    ops = ops + [("Convolution2DTransposeBias", 1, ["x", "w", "b"], ["y"], _conv_t_options())]
    model = tflite_model(tensors, ops, ["x"], ["y"], quant=quant)
    x = rng.standard_normal((1, 6, 6, 4)).astype(np.float32)
    (got,) = compile_run(tmp_path, model, {"x": x})
    assert got.shape == (1, 12, 12, 3)
    (builtin,) = _litert(
        tflite_model(*_as_builtin_transpose_conv(ops, tensors)[::-1], ["x"], ["y"], quant=quant), {"x": x}
    )
    assert_close(got, builtin)
    if case == "fp16":  # the one LiteRT runs with the custom operator itself
        (custom,) = _litert(model, {"x": x})
        assert_close(got, custom)
    assert_close(got, transpose_conv_bias_numpy(x, w, b, _conv_t_options()))
    if case != "fp16":  # the stored numbers themselves (int8 unscaled, fp16 not negated) do not pass
        raw = tensors.get("w16", tensors.get("wq")).astype(np.float32)
        assert not np.allclose(got, transpose_conv_bias_numpy(x, raw, b, _conv_t_options()), atol=1e-2)


def test_convolution2d_transpose_bias_weights_from_an_input_are_refused(tmp_path, tvmgen):
    """Weights computed from a model input (NEG of it): `tvmgen compile` says which operator and
    which input is not constant, and why, exits non-zero and writes nothing."""
    b = np.arange(3, dtype=np.float32)
    model = tflite_model(
        {"x": [1, 6, 6, 4], "w_in": [3, 3, 3, 4], "w": [3, 3, 3, 4], "b": b, "y": [1, 12, 12, 3]},
        [
            ("NEG", 1, ["w_in"], ["w"], None),
            ("Convolution2DTransposeBias", 1, ["x", "w", "b"], ["y"], _conv_t_options()),
        ],
        ["x", "w_in"],
        ["y"],
    )
    path = tmp_path / "dynamic_weights.tflite"
    path.write_bytes(model)
    r = tvmgen("compile", path, "-o", tmp_path / "out")
    assert r.returncode != 0, r.output
    assert "Convolution2DTransposeBias" in r.output and "weights (tensor 'w') are not constant" in r.output, r.output
    assert "computed from the model's input(s) w_in at run time" in r.output, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
