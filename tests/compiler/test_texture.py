"""OpenCL texture (image) memory in libtvmgen_opencl, on PoCL.

TVM's Adreno schedules keep tensors in the memory scopes global.texture, global.texture-nhwc and
global.texture-weight (2-d image arrays, RGBA pixels). Checked here: the runtime's images hold a
tensor in the layout TVM's generated kernels read (a TVM-compiled kernel reads every scope back
exactly), copies between host, buffers and images, the refusal of a buffer where a kernel declares an
image, and tvmgen's legalization of grouped NCHWc convolutions (TVM's divides by zero on depthwise).
TVM 0.27 alone writes images wrongly (its vectorizer scalarizes texture stores: each iteration of the
channel loop writes a whole pixel); tvmgen's TIR pipeline for textures fixes that (adreno.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import run_native, save_onnx
from helpers import python_c

SCOPES = ("global.texture", "global.texture-nhwc", "global.texture-weight")

SCRIPT = r"""
import ctypes, json, sys
import numpy as np
import tvm
from tvm.script import tirx as T
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
from tvmgen.compiler.gpu import adreno
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target, target_dict

mode, work = sys.argv[2], sys.argv[3]
dev = tvm.opencl(0)
rng = np.random.default_rng(0)
out = {}
for scope in ("global.texture", "global.texture-nhwc", "global.texture-weight"):
    shape = (2, 3, 5, 7, 4)
    a = rng.standard_normal(shape).astype("float32")
    if mode == "copies":
        img = tvm.runtime.empty(shape, "float32", dev, mem_scope=scope)
        img.copyfrom(a)                                    # host -> image
        buf = tvm.runtime.empty(shape, "float32", dev)
        buf.copyfrom(img)                                  # image -> buffer
        img2 = tvm.runtime.empty(shape, "float32", dev, mem_scope=scope)
        img2.copyfrom(buf)                                 # buffer -> image
        img3 = tvm.runtime.empty(shape, "float32", dev, mem_scope=scope)
        img3.copyfrom(img2)                                # image -> image
        out[scope] = [bool(np.array_equal(t.numpy(), a)) for t in (img, buf, img2, img3)]
        continue
    n0, n1, n2, n3, _ = shape

    @T.prim_func(s_tir=True)
    def kernel(A: T.Buffer(shape, "float32", scope=scope), B: T.Buffer(shape, "float32", scope=scope),
               C: T.Buffer(shape, "float32")):
        T.func_attr({"global_symbol": "kernel", "tirx.noalias": True})
        for i in T.thread_binding(n0 * n1, thread="blockIdx.x"):
            for j in T.thread_binding(n2 * n3, thread="threadIdx.x"):
                for c in T.vectorized(4):
                    with T.sblock("read"):  # image -> buffer, scaled
                        C[i // n1, i % n1, j // n3, j % n3, c] = A[i // n1, i % n1, j // n3, j % n3, c] * T.float32(2)
                for c in T.vectorized(4):
                    with T.sblock("write"):  # image -> image
                        B[i // n1, i % n1, j // n3, j % n3, c] = A[i // n1, i % n1, j // n3, j % n3, c]

    target = make_target(target_dict(PLATFORMS["host"], "opencl", "adreno"))
    lib = tvm.tirx.build(tvm.IRModule({"kernel": kernel}), target=target, pipeline=adreno.register_tir_pipeline())
    path = f"{work}/{scope}.so"
    lib.export_library(path)
    lib = tvm.runtime.load_module(path)
    A = tvm.runtime.empty(shape, "float32", dev, mem_scope=scope)
    A.copyfrom(a)
    B = tvm.runtime.empty(shape, "float32", dev, mem_scope=scope)
    C = tvm.runtime.empty(shape, "float32", dev)
    lib["kernel"](A, B, C)
    r = {"read": float(np.abs(C.numpy() - 2 * a).max()), "write": float(np.abs(B.numpy() - a).max())}
    try:
        lib["kernel"](C, B, C)  # a buffer where the kernel declares an image
        r["refused"] = ""
    except Exception as e:  # noqa: BLE001
        r["refused"] = str(e)
    out[scope] = r
print(json.dumps(out))
"""


def _run(opencl_lib, mode: str, tmp_path) -> dict:
    script = tmp_path / "texture_check.py"  # a file: TVMScript reads the kernel's source
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(opencl_lib), mode, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_images_copy_exactly_between_host_buffers_and_images(opencl_lib, tmp_path):
    r = _run(opencl_lib, "copies", tmp_path)
    assert set(r) == set(SCOPES)
    for scope, ok in r.items():
        assert ok == [True, True, True, True], (scope, "host->image, image->buffer, buffer->image, image->image", ok)


@pytest.fixture(scope="module")
def kernels(opencl_lib, tmp_path_factory) -> dict:
    return _run(opencl_lib, "kernels", tmp_path_factory.mktemp("tex"))


def test_tvm_kernels_read_images_in_the_runtimes_layout(kernels):
    # every pixel where TVM's codegen looks for it: the flattening of each scope agrees
    for scope in SCOPES:
        assert kernels[scope]["read"] == 0.0, (scope, kernels[scope])


def test_a_buffer_for_an_image_argument_is_refused(kernels):
    for scope in SCOPES:
        msg = kernels[scope]["refused"]
        assert "argument 0 is declared as an image (texture memory) but got a buffer" in msg, msg


def test_tvm_kernels_write_images(kernels):
    # TVM 0.27 alone writes every pixel as its last channel: adreno.retype_texture_stores fixes that
    for scope in SCOPES:
        assert kernels[scope]["write"] == 0.0, (scope, kernels[scope])


def test_grouped_nchwc_convolution_matches_numpy():
    """tvmgen's legalization of grouped / depthwise convolutions in NCHW4c / OIHW4o, on the CPU."""
    import tvm
    from tvm import te

    from tvmgen.compiler.gpu.adreno import grouped_conv2d_nchwc

    rng = np.random.default_rng(1)
    for cin, cout, groups, stride in ((16, 16, 16, 1), (16, 16, 16, 2), (16, 32, 2, 1), (8, 16, 2, 1)):
        x = rng.standard_normal((1, cin, 9, 9)).astype("float32")
        w = rng.standard_normal((cout, cin // groups, 3, 3)).astype("float32")
        xc = x.reshape(1, cin // 4, 4, 9, 9).transpose(0, 1, 3, 4, 2)  # NCHW4c
        wc = w.reshape(cout // 4, 4, cin // groups, 3, 3).transpose(0, 2, 3, 4, 1)  # OIHW4o
        data = te.placeholder(xc.shape, name="data")
        kernel = te.placeholder(wc.shape, name="kernel")
        out = grouped_conv2d_nchwc(data, kernel, (stride, stride), (1, 1, 1, 1), (1, 1), groups)
        f = tvm.tirx.build(te.create_prim_func([data, kernel, out]), target="llvm")
        res = tvm.runtime.empty([int(d) for d in out.shape], "float32", tvm.cpu())
        f(tvm.runtime.tensor(xc), tvm.runtime.tensor(wc), res)
        got = res.numpy().transpose(0, 1, 4, 2, 3).reshape(1, cout, *res.shape[2:4])
        # reference: grouped convolution, NCHW, padding 1
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        oh = (9 + 2 - 3) // stride + 1
        ref = np.zeros((1, cout, oh, oh), "float32")
        per_in, per_out = cin // groups, cout // groups
        for o in range(cout):
            g = o // per_out
            for y in range(oh):
                for xx in range(oh):
                    patch = xp[
                        0, g * per_in : (g + 1) * per_in, y * stride : y * stride + 3, xx * stride : xx * stride + 3
                    ]
                    ref[0, o, y, xx] = (patch * w[o]).sum()
        np.testing.assert_allclose(
            got, ref, atol=1e-4, rtol=1e-4, err_msg=f"{cin}->{cout} groups {groups} stride {stride}"
        )


@pytest.mark.parametrize("name", ["conv3x3", "conv1x1", "conv_depthwise"])
def test_adreno_models_run_in_texture_memory(ocl_runtime, opencl_lib, tmp_path, name):
    """--gpu-family adreno end to end: the model's kernels take images (TVM's texture schedules, not
    a buffer fallback), the VM's storage views become images through tvmgen's allocator, texture
    weights are uploaded as images, and tvmgen-run (C++) and the Python VM match onnxruntime."""
    import onnxruntime as ort

    from conftest import save_onnx, single_op_models
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    path = save_onnx(single_op_models()[name], tmp_path / f"{name}.onnx")
    art = tmp_path / "adreno"
    report = compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "adreno"), art, True, {"name": name}
    )
    assert report.target["keys"] == ["adreno", "opencl", "gpu", "texture"]
    lib = (art / "model.so").read_bytes()
    assert b"image2d_array_t" in lib and b"write_imagef" in lib, "built without texture memory"
    assert len(report.vm["devices"]) > 2  # one OpenCL entry per memory scope, then the host
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    assert "Scope Loaded" not in proc.stderr  # TVM's per-constant log lines are filtered out
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)
    # the Python VM, in a process of its own: PoCL's LLVM crashes when it loads into a process where
    # TensorFlow's (another LLVM) already is, as in this test session
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, numpy as np; from tvmgen.runtime.runner import HostModel; "
        "np.save(sys.argv[3], np.asarray(HostModel(sys.argv[1]).run({'x': np.load(sys.argv[2])})[0]))"
    )
    proc = subprocess.run(
        [*python_c(code), str(art), str(tmp_path / "x.npy"), str(tmp_path / "py.npy")],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, TVMGEN_OPENCL_BACKEND=str(opencl_lib)),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Scope Loaded" not in proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "py.npy"), want, atol=1e-4, rtol=1e-4)


def test_bench_over_rpc_runs_a_texture_artifact(opencl_lib, tmp_path):
    """`tvmgen bench ARTIFACT` of a --gpu-family adreno build on the native device server: the remote VM
    gets one OpenCL device per memory scope, and the outputs match the reference."""
    from conftest import save_onnx, single_op_models
    from helpers import bench_on_a_gpu_device
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    path = save_onnx(single_op_models()["conv1x1"], tmp_path / "conv1x1.onnx")
    art = tmp_path / "adreno"
    compile_to_artifact(
        frontends.load(path, []),
        BuildOptions(PLATFORMS["host"], "opencl", "adreno"),
        art,
        True,
        {"name": "conv1x1", "source": str(path), "format": "onnx"},
    )
    res = bench_on_a_gpu_device(art, tmp_path)
    assert res["dev"] == "opencl" and res["check"][0]["max_abs"] < 1e-4, res


def test_a_hard_swish_between_texture_convolutions_on_pocl(ocl_runtime, opencl_lib, tmp_path):
    """A hard-swish between two convolutions reads the first one's texture twice (x * clip(x + 3, 0, 6) / 6).
    Relax's clip has no layout inference, so the NCHW4c conversion left it and its division in NCHW buffers
    between layout transforms, and the second convolution's results were wrong (max abs error 13.5 on PoCL).
    ``rewrites.clip_as_min_max`` gives the clip an elementwise form that converts with the convolutions."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from conftest import save_onnx
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((32, 16, 1, 1)) * 0.3).astype("float32"), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 32, 3, 3)) * 0.2).astype("float32"), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(64).astype("float32"), "b2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["y1"]),
        helper.make_node("HardSwish", ["y1"], ["h"]),
        helper.make_node("Conv", ["h", "w2", "b2"], ["y"], strides=[2, 2], pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "hard_swish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w1, w2, b2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = save_onnx(model, tmp_path / "hs.onnx")
    art = tmp_path / "adreno"
    compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "adreno"), art, True, {"name": "hs"}
    )
    assert b"tir_clip" not in (art / "model.so").read_bytes()  # the clip converted with the convolutions
    x = rng.standard_normal((1, 16, 64, 64)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=1)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_a_transposed_convolution_builds_with_the_adreno_pipeline_on_pocl(ocl_runtime, opencl_lib, tmp_path, capsys):
    """A convolution, then a 4x4 stride-2 transposed convolution (the zoo's seg_head decoder). Its constant kernel
    is rearranged when it is lowered (compiler.conv_transpose); left to the Adreno pipeline, FoldConstant ran the
    rearrangement's OpenCL kernel on host arrays ("Mismatched A.device_type"), both Adreno builds failed, and
    the fallback, TVM's own generic GPU pipeline, computed seg_head wrong (max abs error 0.077)."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    from conftest import save_onnx
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    rng = np.random.default_rng(4)
    w1 = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.3).astype("float32"), "w1")
    wt = numpy_helper.from_array((rng.standard_normal((16, 8, 4, 4)) * 0.2).astype("float32"), "wt")
    bt = numpy_helper.from_array(rng.standard_normal(8).astype("float32"), "bt")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4),
        helper.make_node("ConvTranspose", ["c", "wt", "bt"], ["t"], strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    path = save_onnx(_float_model(nodes, [1, 8, 12, 12], [w1, wt, bt]), tmp_path / "up.onnx")
    art = tmp_path / "adreno"
    compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "adreno"), art, True, {"name": "up"}
    )
    printed = capsys.readouterr()
    assert "failed" not in printed.out + printed.err, printed  # the Adreno texture pipeline built it, no fallback
    assert b"conv2d_transpose_weights" not in (art / "model.so").read_bytes()  # no kernel rearranges the weights
    x = rng.standard_normal((1, 8, 12, 12)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=1)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def _squeeze_excite_model(path):
    """Two MobileNetV3 / EfficientNet blocks: a 1x1 convolution with a SiLU, a squeeze-excite whose reduction
    has 6 channels (not a multiple of 4: its convolutions stay on buffers, and its scale is multiplied in by a
    kernel of its own into a texture); then a convolution with a hard-swish and a squeeze-excite of 8 channels
    (its expand convolution, hard-sigmoid and broadcast multiply in one kernel), and a third of 6 on that block's
    output, whose mean is the second block's, called into a buffer instead of a texture."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = []

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name))
        return name

    def se(x, c, r, gate, tag):
        nodes = [
            helper.make_node("GlobalAveragePool", [x], [f"{tag}p"]),
            helper.make_node("Conv", [f"{tag}p", w(f"{tag}w1", r, c, 1, 1), w(f"{tag}b1", r)], [f"{tag}q"]),
            helper.make_node("Relu", [f"{tag}q"], [f"{tag}r"]),
            helper.make_node("Conv", [f"{tag}r", w(f"{tag}w2", c, r, 1, 1), w(f"{tag}b2", c)], [f"{tag}s0"]),
            gate(f"{tag}s0", f"{tag}s"),
            helper.make_node("Mul", [x, f"{tag}s"], [f"{tag}y"]),
        ]
        return nodes, f"{tag}y"

    nodes = [
        helper.make_node("Conv", ["x", w("w0", 24, 16, 1, 1), w("b0", 24)], ["c0"]),
        helper.make_node("Sigmoid", ["c0"], ["g0"]),
        helper.make_node("Mul", ["c0", "g0"], ["h0"]),
    ]
    block, out = se("h0", 24, 6, lambda a, b: helper.make_node("Sigmoid", [a], [b]), "a")
    nodes += block
    nodes += [
        helper.make_node("Conv", [out, w("w3", 32, 24, 3, 3), w("b3", 32)], ["c1"], pads=[1] * 4),
        helper.make_node("HardSwish", ["c1"], ["h1"]),
    ]
    block, out = se("h1", 32, 8, lambda a, b: helper.make_node("HardSigmoid", [a], [b], alpha=1 / 6, beta=0.5), "b")
    nodes += block
    block, out = se(out, 32, 6, lambda a, b: helper.make_node("Sigmoid", [a], [b]), "c")
    nodes += block + [helper.make_node("Identity", [out], ["y"])]
    return save_onnx(_float_model(nodes, [1, 16, 20, 20], inits), path)


def _float_model(nodes, shape, inits):
    """An ONNX model of ``nodes`` from the float input "x" of ``shape`` to the float output "y"."""
    from onnx import TensorProto, helper

    from conftest import onnx_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    return onnx_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def _weight(rng, name, *shape):
    """A float32 ONNX initializer of ``shape``, normal values scaled by 0.3."""
    from onnx import numpy_helper

    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)


def _matches_onnxruntime_on_pocl(ocl_runtime, path, art, x, work):
    """The artifact ``art`` of the model at ``path`` run on ``x`` (input "x") by tvmgen-run on PoCL gives
    onnxruntime's output; returns that output."""
    import onnxruntime as ort

    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, work, repeat=1)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)
    return want


def _built_in_texture_memory(path, art, capsys, images: bool = True):
    """The model at ``path`` compiled for Adreno into ``art``, by the texture pipeline (no fallback said, the
    kernels write images where ``images``)."""
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "adreno"), art, True, {"name": path.stem}
    )
    printed = capsys.readouterr()
    assert "texture memory failed" not in printed.out + printed.err, printed
    assert (b"write_imagef" in (art / "model.so").read_bytes()) == images
    return art


def test_squeeze_excite_blocks_stay_in_texture_memory_on_pocl(ocl_runtime, opencl_lib, tmp_path, capsys):
    """MobileNetV3-Small, EfficientNet-B0 and the zoo's seg_head fell back to buffers on Adreno: dlight's Conv2d
    rule left a squeeze-excite's broadcast multiply outside the GPU threads. With their texture builds, what the
    texture pipeline got wrong came out: the squeeze's mean and a lone multiply stored a texture pixel one
    channel at a time (each store writes the whole pixel), and a mean called once into a texture and once into a
    buffer was compiled for one of them. Each has its rule now (adreno.Conv2dEpilogue, TextureReduction,
    dlight's Adreno fallback for elementwise kernels, callee_per_scopes); the model builds in texture memory
    and matches onnxruntime on PoCL."""
    import onnxruntime as ort

    path = _squeeze_excite_model(tmp_path / "se.onnx")
    art = _built_in_texture_memory(path, tmp_path / "adreno", capsys)
    x = np.random.default_rng(6).standard_normal((1, 16, 20, 20)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=1)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_a_layout_transform_that_only_reshapes_keeps_texture_memory_on_pocl(ocl_runtime, opencl_lib, tmp_path, capsys):
    """A TFLite convolution of 4 channels before a bilinear upsampling (the zoo's det_head_tflite, MobileNetV3's
    classifier): its NCHW4c result goes back to NHWC by a layout transform that only reshapes (one block of 4
    channels). TVM's RewriteDataflowReshape turned it into a reshape under a new variable and left the model's
    output naming the old one ("Var lv2 is not defined" at VM codegen), so the model fell back to buffers.
    ``adreno.reshapes_as_reshapes`` makes the reshape first, every use following it; the model builds in texture
    memory and matches LiteRT on PoCL."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    x = tf.keras.Input((16, 16, 8), batch_size=1)
    c = tf.keras.layers.Conv2D(4, 3, padding="same")(x)
    keras = tf.keras.Model(x, tf.keras.layers.UpSampling2D(2, interpolation="bilinear")(c))
    path = tmp_path / "up.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(keras).convert())
    art = _built_in_texture_memory(path, tmp_path / "adreno", capsys)
    data = np.random.default_rng(8).standard_normal((1, 16, 16, 8)).astype("float32")
    interp = tf.lite.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], data)
    interp.invoke()
    want = interp.get_tensor(interp.get_output_details()[0]["index"])
    name = interp.get_input_details()[0]["name"]
    proc, outs = run_native(ocl_runtime, art, {name: data}, tmp_path, repeat=1)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_ceil_mode_max_pooling_keeps_texture_memory_on_pocl(ocl_runtime, opencl_lib, tmp_path, capsys):
    """SqueezeNet's max poolings (3x3, stride 2, ceil mode: a row and a column of padding on the far side)
    fell back to buffers on Adreno: dlight's Adreno Pool2D vectorises a pixel's 4 channels around the window's
    loops, TVM's vectorizer cannot vectorise a loop holding serial ones, and the texture store was left with one
    channel ("Expected Data to be Written equal to Texture Store length"). ``adreno.TexturePool2D`` walks the
    window outside the channels. Here a ceil-mode pooling, one padded on every side and one over a window that
    does not divide the rows build in texture memory, the pooling kernels written by that rule, and match
    onnxruntime on PoCL (the padding is -inf, so a padded pixel never wins)."""
    from onnx import helper

    rng = np.random.default_rng(3)
    inits = [_weight(rng, *spec) for spec in (("w0", 8, 4, 3, 3), ("b0", 8), ("w1", 16, 8, 1, 1), ("b1", 16))]

    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("Conv", ["p0", "w1", "b1"], ["c1"]),
        helper.make_node("MaxPool", ["c1"], ["p1"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["p1"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    ]
    path = save_onnx(_float_model(nodes, [1, 4, 47, 47], inits), tmp_path / "pools.onnx")  # 4 channels in: NCHW4c
    art = _built_in_texture_memory(path, tmp_path / "adreno", capsys)
    source = (art / "model.so").read_bytes()
    # the kernels' definitions (not the declarations before them), each to the next kernel
    found = re.finditer(rb"__kernel void (max_pool2d\w*)\([^;{]*\{.*?(?=__kernel|\Z)", source, re.S)
    bodies = {m.group(1): m.group(0) for m in found}
    assert len(bodies) == 3, list(bodies)
    for body in bodies.values():  # TexturePool2D's: the image read, no padded copy made first
        assert b"READ_IMAGEF(" in body and b"pad_temp" not in body, body[:2000]
    # each writes its pixel into an image, but the last: the model's output is a buffer
    assert sum(b"write_imagef" in body for body in bodies.values()) == 2
    x = rng.standard_normal((1, 4, 47, 47)).astype("float32")
    assert _matches_onnxruntime_on_pocl(ocl_runtime, path, art, x, tmp_path).shape == (1, 16, 6, 6)


def test_channel_splits_keep_texture_memory_and_cut_where_meant_on_pocl(ocl_runtime, opencl_lib, tmp_path, capsys):
    """YOLOv8's C2f blocks split their channels in halves (ONNX Split with sizes). TVM's layout inference
    moves a split's axis into NCHW4c but keeps its indices: 32 channels (8 blocks of 4) cut at 16 left the
    second half 0 channels, and the texture build of the whole detector failed ("the data channel size is
    0"). ``rewrites.splits_by_sections`` makes equal parts a number of sections (the same in either layout)
    and unequal ones slices. Here an equal split and an unequal one between convolutions build in texture
    memory and match onnxruntime on PoCL."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(4)
    inits = [_weight(rng, *spec) for spec in (("w0", 32, 4, 3, 3), ("w1", 16, 16, 3, 3), ("w2", 8, 24, 1, 1))]
    inits += [
        numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in (("halves", [16, 16]), ("uneven", [8, 24]))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4),
        helper.make_node("Split", ["c0", "halves"], ["a", "b"], axis=1),
        helper.make_node("Conv", ["b", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Concat", ["a", "c1"], ["cat"], axis=1),
        helper.make_node("Split", ["cat", "uneven"], ["u", "v"], axis=1),
        helper.make_node("Conv", ["v", "w2"], ["c2"]),
        helper.make_node("Concat", ["c2", "u"], ["y"], axis=1),
    ]
    path = save_onnx(_float_model(nodes, [1, 4, 12, 12], inits), tmp_path / "splits.onnx")
    art = _built_in_texture_memory(path, tmp_path / "adreno", capsys)
    x = rng.standard_normal((1, 4, 12, 12)).astype("float32")
    assert _matches_onnxruntime_on_pocl(ocl_runtime, path, art, x, tmp_path).shape == (1, 16, 12, 12)


def test_splits_by_sections_rewrites_only_cuts_by_index_of_4d_tensors():
    """Equal parts become sections, unequal ones slices of the same bounds; a split by sections and a split of a
    3-D tensor are left as they are."""
    from tvm import relax

    from tvmgen.compiler import rewrites

    bb = relax.BlockBuilder()
    x4 = relax.Var("x", relax.TensorType((1, 32, 4, 4), "float32"))
    x3 = relax.Var("z", relax.TensorType((1, 144, 10), "float32"))
    with bb.function("main", [x4, x3]):
        with bb.dataflow():
            parts = [
                bb.emit(relax.op.split(x4, [16], axis=1)),
                bb.emit(relax.op.split(x4, [8, 24], axis=1)),
                bb.emit(relax.op.split(x4, 2, axis=-1)),
                bb.emit(relax.op.split(x3, [64], axis=1)),
            ]
            items = [relax.TupleGetItem(p, 1) for p in parts] + [relax.TupleGetItem(parts[1], 0)]
            out = bb.emit_output(relax.Tuple(items))
        bb.emit_func_output(out)
    text = rewrites.splits_by_sections(bb.get())["main"].script()
    assert "R.split(x, indices_or_sections=2, axis=1)" in text
    assert "R.strided_slice(x, (1,), (0,), (8,)" in text and "R.strided_slice(x, (1,), (8,), (24,)" in text
    assert "R.split(x, indices_or_sections=2, axis=-1)" in text
    assert "R.split(z, indices_or_sections=[64], axis=1)" in text
    assert text.count("R.split(") == 3


def test_stacked_maximum_and_recurrent_kernels_stay_on_the_texture_pipeline_on_pocl(
    ocl_runtime, opencl_lib, tmp_path, capsys
):
    """Two more causes of whole-model fallbacks to buffers. ONNX ``Max(x, 0)`` imports as a stack and a max,
    and TVM's layout conversion of a stack fails ("can't find S in source layout ABC": the zoo's byte_cnn);
    the Adreno pipeline now runs the rewrites the CPU pipeline runs before its conversion
    (``rewrites.before_layout_conversion``: no stack, no negative axes). tvmgen's LSTM/GRU kernels declared
    int32 sizes, and the texture pipeline's SpecializePrimFuncBasedOnCallSite takes an int32 50 for another
    number than Relax's int64 50 (audio_rnn, the VADs); their sizes are int64 now. Both models build with the
    texture pipeline and match onnxruntime on PoCL."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(5)
    zero = numpy_helper.from_array(np.zeros((1,), "float32"), "zero")
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4),
        helper.make_node("Max", ["c0", "zero"], ["m"]),
        helper.make_node("ReduceMean", ["m"], ["y"], axes=[-1], keepdims=0),
    ]
    stacked = save_onnx(
        _float_model(nodes, [1, 4, 10, 10], [_weight(rng, "w0", 8, 4, 3, 3), zero]), tmp_path / "max.onnx"
    )
    seq, size, hidden = 7, 5, 6
    lstm = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden)
    inits = [
        _weight(rng, "W", 1, 4 * hidden, size),
        _weight(rng, "R", 1, 4 * hidden, hidden),
        _weight(rng, "B", 1, 8 * hidden),
    ]
    recurrent = save_onnx(_float_model([lstm], [seq, 1, size], inits), tmp_path / "lstm.onnx")
    for path, images in ((stacked, True), (recurrent, False)):
        art = _built_in_texture_memory(path, tmp_path / path.stem, capsys, images=images)
        x = rng.standard_normal(ort.InferenceSession(str(path)).get_inputs()[0].shape).astype("float32")
        _matches_onnxruntime_on_pocl(ocl_runtime, path, art, x, tmp_path / path.stem)
