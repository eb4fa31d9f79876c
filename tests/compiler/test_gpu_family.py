"""--gpu-family desktop: dlight's matmul/convolution rule with the tile configuration dlight gives
CUDA, for OpenCL on PC GPUs; the other families keep theirs. A desktop build runs on PoCL through
tvmgen-run and matches onnxruntime."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import run_native, save_onnx, single_op_models
from tvmgen import frontends
from tvmgen.compiler import gpu
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target, target_dict


def _target(family):
    return make_target(target_dict(PLATFORMS["host"], "opencl", family))


def test_desktop_family_takes_dlights_cuda_configuration():
    from tvm.s_tir import dlight as dl

    cuda = dl.gpu.Matmul().get_configs(make_target({"kind": "cuda"}))

    def matmul_rule(target):
        return next(r for r in gpu.default_rules(target) if isinstance(r, dl.gpu.Matmul))

    desktop_rule = matmul_rule(_target("desktop"))
    assert desktop_rule.get_configs(_target("desktop")) == cuda
    assert (cuda.block_size_y, cuda.micro_size_k, cuda.vector_size) == (16, 16, 2)
    for family in ("generic", "mali"):  # unchanged: dlight's default configuration
        rule = matmul_rule(_target(family))
        assert rule.get_configs(_target(family)) == dl.gpu.Matmul.Config()
    assert gpu.is_desktop(_target("desktop")) and not gpu.is_desktop(_target("generic"))
    assert not gpu.is_desktop(make_target({"kind": "cuda"}))


@pytest.mark.parametrize("name", ["conv3x3", "conv1x1"])
def test_desktop_build_runs_on_pocl_and_matches_onnxruntime(ocl_runtime, opencl_lib, tmp_path, name):
    import onnxruntime as ort

    path = save_onnx(single_op_models()[name], tmp_path / f"{name}.onnx")
    sources = {}
    for family in ("generic", "desktop"):
        art = tmp_path / family
        compile_to_artifact(
            frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", family), art, True, {"name": name}
        )
        sources[family] = (art / "model.so").read_bytes()
    # the CUDA configuration loads pairs of values (float2), dlight's OpenCL default single ones
    assert b"float2" in sources["desktop"] and b"float2" not in sources["generic"]
    # both keep their unrolled loops as loops (compiler.opencl_loops, tests/compiler/test_opencl_loops.py)
    assert all(b"#pragma unroll\n" in src and b"_unrl = 0; " in src for src in sources.values())
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    for family in ("generic", "desktop"):
        proc, outs = run_native(ocl_runtime, tmp_path / family, {"x": x}, tmp_path, repeat=2)
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4, err_msg=family)


def test_cli_accepts_desktop_and_names_the_families(tvmgen, tmp_path):
    r = tvmgen("compile", "builtin:mobilenet", "--device", "opencl", "--gpu-family", "nvidia", "-o", tmp_path / "x")
    assert r.returncode == 2 and "desktop" in r.output and not (tmp_path / "x").exists()
    r = tvmgen("compile", "--help")
    assert "desktop" in r.output


def test_short_reductions_get_a_thread_per_output():
    """Which functions the small-reduction rule takes: a depthwise convolution (9 products per
    output) and a pooling window, not a 1x1 convolution over 256 channels nor a 1000-wide softmax."""
    from tvm import te, topi

    def func(out, *ins):
        return te.create_prim_func([*ins, out])

    x = te.placeholder((1, 32, 28, 28), "float32", "x")
    w = te.placeholder((32, 1, 3, 3), "float32", "w")
    dw = topi.nn.depthwise_conv2d_nchw(x, w, 1, 1, 1)
    assert gpu._short_reductions(func(dw, x, w))
    pool = topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), "max")
    assert gpu._short_reductions(func(pool, x))
    x2 = te.placeholder((1, 256, 14, 14), "float32", "x2")
    w2 = te.placeholder((64, 256, 1, 1), "float32", "w2")
    assert not gpu._short_reductions(func(topi.nn.conv2d_nchw(x2, w2, 1, 0, 1), x2, w2))
    s = te.placeholder((4, 1000), "float32", "s")
    assert not gpu._short_reductions(func(topi.nn.softmax(s), s))
    tiny = te.placeholder((1, 8, 3, 3), "float32", "tiny")  # 8 outputs: too few threads to bother
    assert not gpu._short_reductions(func(topi.nn.pool2d(tiny, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), "max"), tiny))


@pytest.mark.parametrize("family", ["generic", "desktop"])
def test_depthwise_convolution_without_local_memory_reductions_on_pocl(ocl_runtime, opencl_lib, tmp_path, family):
    """Depthwise convolutions: one thread per output (no work-group tree reduction through local
    memory, which dlight's reduction rules made of 9 products); the result matches onnxruntime."""
    import onnxruntime as ort

    path = save_onnx(single_op_models()["conv_depthwise"], tmp_path / "dw.onnx")
    art = tmp_path / family
    compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", family), art, True, {"name": "dw"}
    )
    assert b"red_buf" not in (art / "model.so").read_bytes()
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_a_rule_that_raises_or_leaves_host_loops_is_passed_over_for_that_kernel_alone():
    """compiler.gpu.apply_rules: a rule raising on a kernel, or scheduling it with blocks outside
    the GPU threads, gives way to the next rule for that kernel, and the report names it."""
    import tvm
    from tvm.s_tir import dlight as dl

    a = tvm.te.placeholder((64, 64), "float32", name="a")
    double = tvm.te.compute(a.shape, lambda i, j: a[i, j] * 2.0, name="double")

    def module():
        return tvm.IRModule({"double": tvm.te.create_prim_func([a, double])})

    class Raises(dl.ScheduleRule):
        def apply(self, func, target, tunable):
            raise RuntimeError("cannot schedule this one")

    class LeavesHostLoops(dl.ScheduleRule):
        def apply(self, func, target, tunable):
            return tvm.s_tir.Schedule(func)  # nothing bound to threads

    target = _target("generic")
    report: dict = {}
    with target:
        out = gpu.apply_rules(Raises(), LeavesHostLoops(), dl.gpu.Fallback(), report=report)(module())
    func = next(f for gv, f in out.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    assert func.attrs["tirx.is_scheduled"] and "threadIdx.x" in func.script()
    assert {(f["rule"], f["scheduled_by"]) for f in report["rule_failures"]} == {
        ("Raises", "Fallback"),
        ("LeavesHostLoops", "Fallback"),
    }
    assert "outside the GPU threads" in next(
        f["error"] for f in report["rule_failures"] if f["rule"] == "LeavesHostLoops"
    )
    lines = gpu.rule_failures_summary(report["rule_failures"])
    assert any("dlight's Raises rule failed on 1 kernel(s)" in ln and "slower" in ln for ln in lines)
    # raised inside a pass: it reaches the caller through TVM's FFI as a RuntimeError (build_executable
    # reports it as a CompileError with this message)
    with target, pytest.raises(Exception, match="no GPU schedule for kernel double: dlight's Raises rule failed"):
        gpu.apply_rules(Raises(), LeavesHostLoops())(module())


def test_a_short_reduction_and_its_epilogue_are_one_kernel():
    """compiler.gpu.fused_short_reduction: a depthwise convolution followed by bias and hard-swish is one
    OpenCL kernel whose window sum stays in a register; dlight's Fallback gave two (the sum stored to
    global memory, a second kernel reading it back)."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir import dlight as dl

    x = te.placeholder((1, 14, 14, 24), "float32", "x")
    w = te.placeholder((5, 5, 24, 1), "float32", "w")
    b = te.placeholder((24,), "float32", "b")
    dw = topi.nn.depthwise_conv2d_nhwc(x, w, 2, 2, 1)
    y = te.compute(dw.shape, lambda n, i, j, c: dw[n, i, j, c] + b[c], name="bias")
    hs = te.compute(dw.shape, lambda n, i, j, c: y[n, i, j, c] * te.max(te.min(y[n, i, j, c] + 3.0, 6.0), 0.0) / 6.0)
    func = te.create_prim_func([x, w, b, hs])
    target = _target("generic")
    assert gpu._short_reductions(func)

    def kernels(sch):
        mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "dw")})
        src = tvm.tirx.build(mod, target=target).imports[0].inspect_source()
        return src, [ln for ln in src.splitlines() if ln.startswith("__kernel void") and ln.endswith("{")]

    src, fused = kernels(gpu.fused_short_reduction(func, target))
    assert len(fused) == 1 and "local_ptr[1]" in src, src[:1500]
    with target:
        _, fallback = kernels(dl.gpu.Fallback().apply(func, target, False))
    assert len(fallback) == 2
    # not taken: an epilogue that broadcasts the sums (one sum per channel, read by every pixel)
    r = te.reduce_axis((0, 7), "r")
    colsum = te.compute((14, 24), lambda i, c: te.sum(x[0, i, r, c], axis=r), name="colsum")
    spread = te.compute((14, 14, 24), lambda i, j, c: colsum[i, c] * x[0, i, j, c], name="spread")
    assert gpu.fused_short_reduction(te.create_prim_func([x, spread]), target) is None


def test_depthwise_hard_swish_on_pocl_matches_onnxruntime(ocl_runtime, opencl_lib, tmp_path):
    import onnxruntime as ort

    path = save_onnx(single_op_models()["conv_dw5_hardswish"], tmp_path / "dwhs.onnx")
    art = tmp_path / "dwhs"
    compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {"name": "dwhs"}
    )
    assert b"_kernel_1(" not in (art / "model.so").read_bytes()  # the convolution and hard-swish: one kernel
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype("float32") * 3
    want = ort.InferenceSession(str(path)).run(None, {"x16": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x16": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def _litert(path, x):
    """LiteRT's output for the one input ``x`` of the TFLite model at ``path``."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def test_fp16_tflite_transposed_convolution_on_adreno_pocl(ocl_runtime, opencl_lib, tmp_path, capsys):
    """A TFLite model with float16 weights (a selfie segmenter's decoder): its transposed convolution's kernel is
    a cast of a constant, not a constant, when it is lowered. Its rearrangement is folded on the CPU right after
    (conv_transpose.lower_only_pass); left to the Adreno pipeline it ran as an OpenCL kernel on host arrays
    ("Mismatched lv55.device_type") and every pipeline failed. Built with texture memory, it matches LiteRT."""
    import tensorflow as tf

    tf.random.set_seed(2)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8, 8, 8), batch_size=1, name="x"),
            tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            tf.keras.layers.Conv2DTranspose(8, 2, strides=2, bias_initializer="random_normal"),
        ]
    )
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
    path = tmp_path / "ct16.tflite"
    path.write_bytes(converter.convert())
    art = tmp_path / "ct16"
    capsys.readouterr()
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "opencl", "adreno"), art, True, {"name": "ct16"})
    printed = capsys.readouterr()
    assert "failed" not in printed.out + printed.err, printed  # the Adreno texture pipeline built it
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype("float32")
    want = _litert(path, x)
    proc, outs = run_native(ocl_runtime, art, {imported.inputs[0].name: x}, tmp_path, repeat=1)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-3, rtol=1e-3)


def _keras_prelu_tflite(path, shared_axes):
    import tensorflow as tf

    tf.random.set_seed(3)
    prelu = tf.keras.layers.PReLU(
        shared_axes=shared_axes, alpha_initializer=tf.keras.initializers.RandomUniform(0.1, 0.5)
    )
    model = tf.keras.Sequential(
        [tf.keras.Input((12, 12, 3), batch_size=1, name="image"), tf.keras.layers.Conv2D(16, 3, padding="same"), prelu]
    )
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return path


def test_tflite_prelu_joins_its_convolution_on_the_gpu(ocl_runtime, opencl_lib, tmp_path):
    """TVM's TFLite importer flattens PRELU's input (reshape, prelu on axis 0 with alpha broadcast to the
    input, reshape back), which kept it a kernel of its own after the convolution; the GPU pipeline makes
    a per-channel alpha a channel-wise PReLU (rewrites.prelu_unflattened), fused into the convolution's
    epilogue. The result matches LiteRT on PoCL. An alpha that differs per pixel is left as it was."""
    from tvm import relax

    from tvmgen.compiler import rewrites

    path = _keras_prelu_tflite(tmp_path / "prelu.tflite", shared_axes=[1, 2])
    art = tmp_path / "prelu"
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {"name": "prelu"})
    names = [k["name"] for k in json.loads((art / "kernels.json").read_text())["kernels"]]
    assert names and all("conv2d" in n for n in names) and any("prelu" in n for n in names), names
    x = np.random.default_rng(6).standard_normal((1, 12, 12, 3)).astype("float32")
    want = _litert(path, x)
    proc, outs = run_native(ocl_runtime, art, {imported.inputs[0].name: x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)
    assert (want < 0).any()  # the negative slope was exercised

    def prelu_axes(mod):
        mod = rewrites.prelu_unflattened(relax.transform.FoldConstant()(mod))
        return [int(c.attrs.axis) for c in _calls(mod["main"], "relax.nn.prelu")]

    assert prelu_axes(frontends.load(path, []).mod) == [3]
    per_pixel = _keras_prelu_tflite(tmp_path / "prelu_hw.tflite", shared_axes=None)
    assert prelu_axes(frontends.load(per_pixel, []).mod) == [0]


def _calls(func, op_name):
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(
        func.body,
        lambda e: found.append(e) if isinstance(e, relax.Call) and getattr(e.op, "name", "") == op_name else None,
    )
    return found


def test_tflite_transposed_convolution_4x4_stride_2_same_on_pocl(ocl_runtime, opencl_lib, tmp_path):
    """A 4 x 4, stride-2, "same" TFLite transposed convolution (NHWC, top padding 1) on the GPU against
    LiteRT: TVM's index simplification dropped the padding from (y + pad) % stride in the GPU kernel's
    thread arithmetic (max error 2.4 on PoCL, right on the CPU) until compiler.conv_transpose indexed its
    phases by y % stride."""
    import tensorflow as tf

    tf.random.set_seed(1)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8, 8, 6), batch_size=1, name="x"),
            tf.keras.layers.Conv2DTranspose(8, 4, strides=2, padding="same", bias_initializer="random_normal"),
        ]
    )
    path = tmp_path / "ct.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    art = tmp_path / "ct"
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {"name": "ct"})
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 6)).astype("float32")
    want = _litert(path, x)
    proc, outs = run_native(ocl_runtime, art, {imported.inputs[0].name: x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def _flattened_mlp_block(path):
    """A transformer's MLP block as exporters write it: the tokens flattened for each product and unflattened
    after it (``Reshape -> MatMul -> Add -> Reshape``), a GELU by Erf between the products and the residual
    add after the second."""
    from onnx import TensorProto, helper, numpy_helper

    from conftest import onnx_model

    rng = np.random.default_rng(7)

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    def shape(name, dims):
        return numpy_helper.from_array(np.asarray(dims, dtype=np.int64), name)

    inits = [
        const("w1", rng.standard_normal((32, 64)) / 6),
        const("b1", rng.standard_normal(64)),
        const("w2", rng.standard_normal((64, 32)) / 8),
        const("b2", rng.standard_normal(32)),
        const("sqrt2", 2**0.5),
        const("one", 1.0),
        const("half", 0.5),
        shape("rows32", [16, 32]),
        shape("rows64", [16, 64]),
        shape("tokens32", [1, 16, 32]),
        shape("tokens64", [1, 16, 64]),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "rows32"], ["x2"]),
        helper.make_node("MatMul", ["x2", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["h2"]),
        helper.make_node("Reshape", ["h2", "tokens64"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["g0"]),
        helper.make_node("Mul", ["g0", "half"], ["g"]),
        helper.make_node("Reshape", ["g", "rows64"], ["g2"]),
        helper.make_node("MatMul", ["g2", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["o2"]),
        helper.make_node("Reshape", ["o2", "tokens32"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 32]) for n in ("x", "y")]
    return save_onnx(onnx_model(nodes, [io[0]], [io[1]], inits), path)


def test_a_flattened_products_gelu_and_residual_join_its_kernel(ocl_runtime, opencl_lib, tmp_path):
    """Reshapes that keep the last axis (the tokens of a linear layer flattened into rows and back) are moved
    after the elementwise operators that follow them (rewrites.sink_row_reshapes): the GELU joins the first
    product's kernel and the residual add the second's, two kernels in all (four before) where each launch
    costs microseconds on a GPU; the reshapes are views. The build matches onnxruntime on PoCL."""
    import onnxruntime as ort

    path = _flattened_mlp_block(tmp_path / "mlp.onnx")
    art = tmp_path / "mlp"
    compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {})
    names = [k["name"] for k in json.loads((art / "kernels.json").read_text())["kernels"]]
    computing = [n for n in names if n.rstrip("0123456789") != "reshape"]  # a reshape alone: a view, not launched
    gelu, residual = sorted(computing, key=lambda n: "erf" not in n)  # (a third kernel: unpacking fails)
    assert gelu.startswith("fused_matmul") and "reshape" not in gelu, computing
    assert residual.startswith("fused_matmul") and residual.count("_add") == 2 and "reshape" not in residual, computing
    x = np.random.default_rng(8).standard_normal((1, 16, 32)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_a_reshape_stays_before_an_operand_that_broadcasts():
    """An operand that broadcasts against the reshaped tensor (a [1, 1, 64] tensor that is no constant: it
    does not keep its values per row once the rows are regrouped) leaves the operator after the reshape; of
    two reshaped operands, the operator moves to the one of fewer axes (a flattened product's rows)."""
    from tvm import relax

    from tvmgen.compiler import rewrites

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([16, 64], "float32"))
    b = relax.Var("b", relax.TensorType([1, 1, 64], "float32"))
    t = relax.Var("t", relax.TensorType([1, 2, 8, 64], "float32"))
    with bb.function("main", [x, b, t]):
        with bb.dataflow():
            h = bb.emit(relax.op.reshape(x, [1, 16, 64]))
            kept = bb.emit(relax.op.add(h, b))
            tokens = bb.emit(relax.op.reshape(t, [1, 16, 64]))
            moved = bb.emit(relax.op.add(tokens, h))
            out = bb.emit_output(relax.op.multiply(kept, moved))
        bb.emit_func_output(out)
    mod = rewrites.sink_row_reshapes(bb.get())
    adds = _calls(mod["main"], "relax.add")
    assert sorted([int(d) for d in c.ty.shape.values] for c in adds) == [[1, 16, 64], [16, 64]], mod["main"]


def test_a_product_with_a_computed_transpose_reads_it_transposed(ocl_runtime, opencl_lib, tmp_path):
    """Attention's scores, ``Q x K^T`` of computed tensors: one kernel reading K transposed (TVM's
    FuseTransposeMatmul, an NT_matmul) instead of a transpose kernel and a product; a product with a constant's
    transpose (a weight) keeps its weights transposed as they are built. Matches onnxruntime on PoCL."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from conftest import onnx_model

    rng = np.random.default_rng(9)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["q", "wt"], ["k"]),  # a weight's transpose: folded
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["y"]),  # a computed one's: read transposed
    ]
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 16, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])
    path = save_onnx(onnx_model(nodes, [q], [y], [w]), tmp_path / "scores.onnx")
    art = tmp_path / "scores"
    compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {})
    names = [k["name"] for k in json.loads((art / "kernels.json").read_text())["kernels"]]
    assert sorted(n.rstrip("0123456789") for n in names) == ["NT_matmul", "matmul"], names
    x = rng.standard_normal((1, 4, 16, 8)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"q": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"q": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_expand_dims_and_squeeze_chains_become_one_reshape_or_none():
    """rewrites.reshape_views: read by a product (which takes no producer into its kernel) or returned,
    ``expand_dims(reshape(x))`` is one reshape, a chain that gives the shape back is none, a squeeze is a reshape;
    a chain that an elementwise operator reads stays (it is part of that operator's kernel)."""
    from tvm import relax

    from tvmgen.compiler import rewrites

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 16000], "float32"))
    w = relax.Var("w", relax.TensorType([1, 1], "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            a = bb.emit(relax.op.expand_dims(bb.emit(relax.op.reshape(x, [1, 16000, 1])), [1]))  # [1, 1, 16000, 1]
            p = bb.emit(relax.op.matmul(a, w))
            back = bb.emit(relax.op.expand_dims(bb.emit(relax.op.reshape(p, [1, 16000, 1])), [1]))  # p's own shape
            q = bb.emit(relax.op.matmul(back, w))
            kept = bb.emit(relax.op.nn.relu(bb.emit(relax.op.expand_dims(q, [4]))))
            out = bb.emit_output(relax.Tuple([relax.op.squeeze(q, [3]), kept]))
        bb.emit_func_output(out)
    main = rewrites.reshape_views(bb.get())["main"]
    assert len(_calls(main, "relax.expand_dims")) == 1 and not _calls(main, "relax.squeeze"), main
    shapes = sorted([int(d) for d in c.ty.shape.values] for c in _calls(main, "relax.reshape"))
    assert shapes == [[1, 1, 16000], [1, 1, 16000, 1]], main
    first, second = _calls(main, "relax.matmul")
    assert second.args[0].same_as(next(b.var for b in main.body.blocks[0].bindings if b.value.same_as(first))), main


def _conv1d_as_tflite_writes_it(path):
    """A 1-D convolution written as TFLite's converter lowers it: reshape and unsqueeze to a 2-D image of one
    row, the convolution, squeeze; twice, the second input reshaped back to the shape it already has."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(4)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [8, 1, 1, 5], rng.standard_normal(40).astype("float32"))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [4, 8, 1, 3], rng.standard_normal(96).astype("float32"))
    shapes = {
        n: helper.make_tensor(n, TensorProto.INT64, [len(v)], v)
        for n, v in {"s1": [1, 1, 256], "s2": [1, 8, 252], "ax2": [2], "ax": [2]}.items()
    }
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["x3"]),
        helper.make_node("Unsqueeze", ["x3", "ax2"], ["x4"]),  # [1, 1, 1, 256]
        helper.make_node("Conv", ["x4", "w1"], ["c1"]),  # [1, 8, 1, 252]
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Squeeze", ["r1", "ax"], ["q1"]),  # [1, 8, 252]
        helper.make_node("Reshape", ["q1", "s2"], ["q2"]),
        helper.make_node("Unsqueeze", ["q2", "ax2"], ["q3"]),  # [1, 8, 1, 252]: r1's shape
        helper.make_node("Conv", ["q3", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 250])],
        [w1, w2, *shapes.values()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return save_onnx(model, path)


def test_reshape_chains_around_convolutions_launch_no_kernel_on_pocl(ocl_runtime, opencl_lib, tmp_path):
    """A 1-D convolution as TFLite writes it: the reshape and unsqueeze before each convolution are views, not
    copy kernels (two convolutions, two kernels: four before). Matches onnxruntime on PoCL."""
    import onnxruntime as ort

    path = _conv1d_as_tflite_writes_it(tmp_path / "c1d.onnx")
    art = tmp_path / "c1d"
    compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {})
    names = [k["name"] for k in json.loads((art / "kernels.json").read_text())["kernels"]]
    computing = [n for n in names if n.rstrip("0123456789") != "reshape"]  # a reshape alone: a view, not launched
    assert len(computing) == 2 and all("conv2d" in n for n in computing), names
    x = np.random.default_rng(9).standard_normal((1, 256)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def _split_read_by_elementwise_ops(path):
    """A ring buffer's update as a streaming model writes it: the 24 x 40 buffer split at 9 rows, each part
    read by an elementwise operator."""
    from onnx import TensorProto, helper

    split = helper.make_tensor("split", TensorProto.INT64, [2], [9, 15])
    nodes = [
        helper.make_node("Split", ["x", "split"], ["old", "new"], axis=1),
        helper.make_node("Relu", ["old"], ["a"]),
        helper.make_node("Sigmoid", ["new"], ["b"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ring",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 40])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 9, 40]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 15, 40]),
        ],
        [split],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return save_onnx(model, path)


def test_a_splits_parts_are_read_in_place_by_their_readers_on_pocl(ocl_runtime, opencl_lib, tmp_path):
    """rewrites.splits_as_slices: a split's parts are slices that join the kernels reading them (two kernels:
    the relu and the sigmoid, each reading its rows of the input), not a copy kernel per part before them
    (four). Matches onnxruntime on PoCL."""
    import onnxruntime as ort

    path = _split_read_by_elementwise_ops(tmp_path / "ring.onnx")
    art = tmp_path / "ring"
    compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {})
    library = (art / "model.so").read_bytes().decode("latin-1")
    kernels = set(re.findall(r"__kernel void (\w+)\(", library))
    assert len(kernels) == 2 and not any(k.startswith("split") for k in kernels), kernels
    x = np.random.default_rng(10).standard_normal((1, 24, 40)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
