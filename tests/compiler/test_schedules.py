"""tvmgen's default CPU schedules: awkward shapes still match onnxruntime, and the schedules apply.

Speed is measured in benchmarks/, not here; these tests check that the schedules are used
(parallel, vectorised, epilogues fused) and that they never change results.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import onnx_model, run_native, save_onnx
from helpers import CPU_TARGETS, assert_close, compile_and_run, prepared_and_scheduled
from tvmgen import frontends
from tvmgen.compiler import cpu
from tvmgen.compiler.cpu import schedules
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target


def conv_params(w, name: str, cout: int, cin: int, k: int) -> list:
    """A convolution's weight W<name> [cout, cin, k, k] and bias B<name> [cout], drawn by ``w`` in that order."""
    return [w(f"W{name}", cout, cin, k, k), w(f"B{name}", cout)]


def awkward_models() -> dict:
    """Shapes that do not divide by the vector width or the register tile, and unusual convolutions."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def const(name, value):
        return numpy_helper.from_array(np.array(value, np.float32), name)

    conv = helper.make_node
    return {
        # 3 input channels, 5 outputs, odd spatial size, stride 2
        "conv_odd": onnx_model(
            [conv("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])],
            [vi("x", [1, 3, 15, 15])],
            [vi("y", [1, 5, 8, 8])],
            [w("W", 5, 3, 3, 3), w("B", 5)],
        ),
        "conv_dilated": onnx_model(
            [conv("Conv", ["x", "W"], ["y"], pads=[2, 2, 2, 2], dilations=[2, 2])],
            [vi("x", [1, 8, 13, 13])],
            [vi("y", [1, 12, 13, 13])],
            [w("W", 12, 8, 3, 3)],
        ),
        "conv_grouped": onnx_model(
            [conv("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], group=2)],
            [vi("x", [1, 8, 12, 12])],
            [vi("y", [1, 16, 12, 12])],
            [w("W", 16, 4, 3, 3)],
        ),
        "depthwise_multiplier": onnx_model(
            [conv("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], group=8)],
            [vi("x", [1, 8, 10, 10])],
            [vi("y", [1, 16, 10, 10])],
            [w("W", 16, 1, 3, 3)],
        ),
        # conv -> relu6 -> 1x1 conv -> residual add: epilogues and a consumer with two producers
        "conv_relu6_residual": onnx_model(
            [
                conv("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
                conv("Clip", ["c1", "lo", "hi"], ["r"]),
                conv("Conv", ["r", "W2"], ["c2"]),
                conv("Add", ["c2", "x"], ["y"]),
            ],
            [vi("x", [1, 24, 9, 9])],
            [vi("y", [1, 24, 9, 9])],
            [w("W1", 40, 24, 3, 3), w("B1", 40), w("W2", 24, 40, 1, 1), const("lo", 0), const("hi", 6)],
        ),
        "conv_avgpool": onnx_model(
            [
                conv("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
                conv("AveragePool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
            ],
            [vi("x", [1, 4, 14, 14])],
            [vi("y", [1, 20, 7, 7])],
            [w("W", 20, 4, 3, 3)],
        ),
        # a consumer that is not elementwise (the epilogue cannot be fused)
        "conv_transpose_out": onnx_model(
            [conv("Conv", ["x", "W"], ["c"]), conv("Transpose", ["c"], ["y"], perm=[0, 3, 1, 2])],
            [vi("x", [1, 6, 7, 9])],
            [vi("y", [1, 9, 10, 7])],
            [w("W", 10, 6, 1, 1)],
        ),
        "gemm_1000": onnx_model(
            [conv("Gemm", ["a", "W", "B"], ["y"], transB=1)],
            [vi("a", [3, 72])],
            [vi("y", [3, 1000])],
            [w("W", 1000, 72), w("B", 1000)],
        ),
        "matmul_batched": onnx_model(
            [conv("MatMul", ["a", "b"], ["y"])], [vi("a", [3, 33, 70]), vi("b", [3, 70, 17])], [vi("y", [3, 33, 17])]
        ),
    }


def _heavy(name: str) -> bool:
    return "conv" in name or "matmul" in name or "pool" in name


@pytest.mark.parametrize("name", sorted(awkward_models()))
def test_awkward_shapes_match_onnxruntime_and_are_scheduled(name, tmp_path):
    path = save_onnx(awkward_models()[name], tmp_path / f"{name}.onnx")
    _, done, left = prepared_and_scheduled(path)
    assert [f for f in left if _heavy(f)] == [], f"convolutions / matmuls left unscheduled: {left}"
    assert any(_heavy(f) for f in done), done
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_builtin_model_schedules(builtin_onnx, cpu):
    spec, (lanes, registers), dense_tile = CPU_TARGETS[cpu]
    shape = schedules.cpu_shape(make_target(spec))
    assert (shape.lanes(32), shape.registers) == (lanes, registers)
    mod, done, left = prepared_and_scheduled(builtin_onnx, target_spec=spec)
    assert set(left) <= {"softmax"}, left  # softmax's two reductions are left to TVM (1000 values)
    convs = [f for f in done if f.startswith("fused_conv2d")]
    assert len(convs) >= 19
    # ReLU6 is part of every convolution's kernel: no activation pass of its own, no layout
    # transposes around it (only the input's NCHW -> NHWC and the classifier's flatten).
    assert all("maximum" in f and "minimum" in f for f in convs), convs
    assert len([f for f in done if "transpose" in f]) <= 2, done
    for name in convs:
        script = mod[name].script()
        assert "T.parallel" in script and "T.vectorized" in script, name
        assert 'scope="local"' in script, name  # accumulators in registers, written back once
    depthwise = [f for f in convs if "group_conv2d" in mod[f].script()]
    assert len(depthwise) >= 9, depthwise
    for name in depthwise:
        # The depthwise rule: a task per output row and channel vector, padding made per window
        # row inside the tile (no pass over the whole padded input), the 3x3 window unrolled.
        script = mod[name].script()
        assert re.search(r"for nn_yy_ff_0_fused in T\.parallel", script), name
        assert "for ry in T.unroll(T.int64(3))" in script and "for rx in T.unroll(T.int64(3))" in script, name
        # a tile of 8 output pixels where the row has a multiple of 8 (112, 56), else 7 (28, 14, 7)
        width = int(mod[name].params[-1].shape[2])
        assert f"for xx_1 in T.unroll(T.int64({8 if width % 8 == 0 else 7}))" in script, (name, width)
        pad = script.index('T.sblock("pad_temp")') if 'T.sblock("pad_temp")' in script else None
        if pad is not None:
            assert script.rindex("for ry in", 0, pad) > script.index("T.parallel"), name
    for name in ("fused_conv2d2_add1_maximum1_minimum1", "fused_conv2d_add_maximum_minimum"):
        # other convolutions: a parallel task is a band of output rows (112 rows: 16 bands of 7)
        assert re.search(r"for \w+_0_fused in T\.parallel\(T\.int64\(16\)\)", mod[name].script()), name
    # no NCHW -> NHWC transpose of the input: the first convolution reads NCHW and writes NHWC
    assert "transpose" not in done, done
    (first,) = [f for f in convs if [int(d) for d in mod[f].params[0].shape] == [1, 3, 224, 224]]
    assert [int(d) for d in mod[first].params[-1].shape] == [1, 112, 112, 16], first
    dense = mod["fused_matmul_add10"].script()  # (1, 512) x (512, 1000): a matrix-vector product
    assert f"T.parallel(T.int64({dense_tile['tasks']}))" in dense, dense
    assert (f"T.unroll(T.int64({dense_tile['vectors']}))" in dense) == (dense_tile["vectors"] > 1), dense


def test_injective_rule_on_an_nchw_to_nhwc_transpose():
    """A task per output row (224), the 3 channels one vector (not a task per element)."""
    from tvm import te, topi

    x = te.placeholder((1, 3, 224, 224), name="x")
    func = te.create_prim_func([x, topi.transpose(x, [0, 2, 3, 1])])
    shape = schedules.cpu_shape(make_target(PLATFORMS["host"].cpu_target()))
    script = schedules.default_schedule(func, shape).mod["main"].script()
    assert "T.parallel(224)" in script.replace("T.int64(224)", "224") and "T.vectorized(3)" in script.replace(
        "T.int64(3)", "3"
    ), script


def test_first_convolution_reads_nchw_and_matches_onnxruntime(tmp_path):
    """Layout conversion's input transpose is folded into the first convolution (odd sizes,
    stride 2, dilation), and a transposed input used elsewhere too keeps its transpose."""
    for name in ("conv_odd", "conv_dilated", "conv_relu6_residual"):
        path = save_onnx(awkward_models()[name], tmp_path / f"{name}.onnx")
        mod, done, _ = prepared_and_scheduled(path)
        x = [int(d) for d in frontends.load(path, []).inputs[0].shape]
        readers = sorted(f for f in done if [int(d) for d in mod[f].params[0].shape] == x)
        # the residual model's input also feeds the add: its transpose stays for it
        expected_readers = 2 if name == "conv_relu6_residual" else 1
        assert len(readers) == expected_readers and any("conv2d" in f for f in readers), (name, readers)
        assert ("transpose" in " ".join(readers)) == (name == "conv_relu6_residual"), (name, readers)
        _, _, actual, expected = compile_and_run(path, tmp_path / name)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _compiled_module(path, bind=True, target_spec=None):
    """The module as `compile` hands it to TVM's lowering: prepared, scheduled, weights folded."""
    import tvm
    from tvm import relax

    imported = frontends.load(path, [])
    mod = imported.mod
    if bind:
        weights = mod["main"].params[len(imported.inputs) :]
        mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    target = make_target(target_spec or PLATFORMS["host"].cpu_target())
    with target:
        return tvm.transform.Sequential(cpu.prepare_passes(target) + cpu.schedule_passes(target))(mod)


def _param_shapes(mod) -> dict:
    import tvm

    return {
        gv.name_hint: [tuple(int(d) for d in p.shape) for p in f.params]
        for gv, f in mod.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc)
    }


@pytest.mark.parametrize("cpu", ["avx512", "avx2"])
def test_constant_weights_are_packed_at_compile_time(builtin_onnx, cpu):
    spec, (lanes, _), dense_tile = CPU_TARGETS[cpu]
    mod = _compiled_module(builtin_onnx, target_spec=spec)
    shapes = _param_shapes(mod)
    # the classifier (512 -> 1000, one row): each of its tasks streams one contiguous block
    (dense,) = [n for n in shapes if n.startswith("fused_matmul")]
    w = shapes[dense][1]  # (tasks, 512, vectors per tile, vector): (5, 512, 25, 8) with AVX-512
    assert dense.endswith("_prepacked") and w == (dense_tile["tasks"], 512, dense_tile["vectors"], 8), w
    # 1x1 convolutions: [Cout / tile width, Cin, tile width] instead of HWIO's [1, 1, Cin, Cout]
    conv = shapes["fused_conv2d18_add9_maximum9_minimum9_prepacked"]  # 7x7, 512 -> 512
    width = 2 * lanes  # two vectors of output channels per tile
    # weight-stationary: a block of 512 x width weights over 32 KB runs in chunks that fit L1 (256
    # input channels with AVX-512): [Cout / width, Cin / chunk, chunk, width]
    chunk = 512 if 512 * width * 4 <= 32 * 1024 else 32 * 1024 // (width * 4)
    blocks = (512 // width, 512, width) if chunk == 512 else (512 // width, 512 // chunk, chunk, width)
    assert conv[1] == blocks and conv[2] == (512 // width, width), conv
    # the copies that pack them were folded: nothing left to run at inference
    assert not [n for n in shapes if n.endswith("_weight_prepack")], sorted(shapes)
    assert "_weight_prepack" not in mod["main"].script(show_meta=False)


def test_weights_passed_at_run_time_are_not_repacked(builtin_onnx):
    """--separate-params: packing would cost a copy per inference, so the weights keep their layout."""
    mod = _compiled_module(builtin_onnx, bind=False)
    names = list(_param_shapes(mod))
    assert not [n for n in names if "prepack" in n], names


@pytest.mark.parametrize(
    "platform,lanes,registers", [("host", None, None), ("linux-aarch64", 4, 32), ("android-armv7", 4, 16)]
)
def test_vector_shape_follows_the_target(platform, lanes, registers):
    target = make_target(PLATFORMS[platform].cpu_target())
    shape = schedules.cpu_shape(target)
    if lanes is None:  # the host: whatever LLVM says this CPU has, at least SSE
        assert shape.lanes(32) >= 4
    else:
        assert (shape.lanes(32), shape.registers) == (lanes, registers)


def test_aarch64_schedules_use_neon_tiles(builtin_onnx):
    mod, done, left = prepared_and_scheduled(builtin_onnx, "linux-aarch64")
    assert set(left) <= {"softmax"}
    script = mod["fused_conv2d4_add3_maximum3_minimum3"].script()
    # 128-bit NEON: tiles of 2 x 4 floats along the channels (vectorised 8 wide, split by LLVM)
    widths = {int(m) for m in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", script)}
    assert widths and max(widths) <= 8, widths


def test_cli_reports_kernels_and_schedules_none_gives_same_outputs(tvmgen, tmp_path):
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    path = save_onnx(awkward_models()["conv_relu6_residual"], tmp_path / "m.onnx")
    r = tvmgen("compile", path, "-o", tmp_path / "default", "--check")
    assert r.returncode == 0, r.output
    m = re.search(r"kernels: (\d+) tvmgen defaults", r.output)
    assert m and int(m.group(1)) >= 2, r.output
    r = tvmgen("compile", path, "-o", tmp_path / "none", "--schedules", "none", "--check")
    assert r.returncode == 0, r.output
    assert "kernels:" not in r.output  # TVM's own pipeline: nothing scheduled, nothing to report
    a, b = HostModel(tmp_path / "default"), HostModel(tmp_path / "none")
    inputs = random_inputs(a.manifest.inputs, seed=1)
    for x, y in zip(a.run(inputs), b.run(inputs)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4 * float(np.abs(y).max()))  # summation order differs


# x86-64 builds for CPUs other than this one. Each runs where the host has its instructions, else
# under qemu-x86_64 emulating that CPU (QEMU 7.2 emulates AVX2, not AVX-512). The AVX2 and SSE builds
# always run under emulation too: that proves no newer instruction slipped into them.
X86_BUILDS = {  # name: (LLVM CPU, (lanes, registers), vector registers the code uses, qemu CPU or None)
    "avx512": ("skylake-avx512", (16, 32), "zmm", None),
    "avx2": ("haswell", (8, 16), "ymm", "Haswell-v4"),
    "sse": ("x86-64", (4, 16), "xmm", "qemu64"),
}


@pytest.mark.parametrize("name", sorted(X86_BUILDS))
def test_x86_builds_use_their_vector_width_and_run_on_their_cpu(name, tmp_path):
    import platform as host_platform
    import subprocess

    from conftest import require_tool
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import missing_cpu_features
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime import runtime_build
    from tvmgen.runtime.runner import HostModel

    if host_platform.machine() != "x86_64":
        pytest.skip("x86-64 builds run on an x86-64 host; the Arm build is tested under qemu-aarch64")
    mcpu, (lanes, registers), widest, qemu_cpu = X86_BUILDS[name]
    plat = PLATFORMS["host"].with_cpu(mcpu)
    target = plat.cpu_target()
    assert target["mcpu"] == mcpu
    shape = schedules.cpu_shape(make_target(target))
    assert (shape.lanes(32), shape.registers) == (lanes, registers)
    path = save_onnx(awkward_models()["conv_relu6_residual"], tmp_path / "m.onnx")
    imported = frontends.load(path, [])
    out = tmp_path / "art"
    compile_to_artifact(imported, BuildOptions(plat, "cpu"), out, True, {"name": name})
    assert out.joinpath("manifest.json").read_text().count(f'"mcpu": "{mcpu}"') == 1
    require_tool("objdump")
    code = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(out / "model.so")], capture_output=True, text=True, check=True
    ).stdout
    used = {r for r in ("xmm", "ymm", "zmm") if f"%{r}" in code}
    assert max(used, key=["xmm", "ymm", "zmm"].index) == widest, used

    inputs = random_inputs(imported.inputs, seed=2)
    (expected,) = imported.reference(inputs)
    ran = False
    if not missing_cpu_features(target):  # this CPU has the build's instructions
        (actual,) = HostModel(out).run(inputs)
        assert_close([actual], [expected], atol=1e-4, rtol=1e-4)
        ran = True
    if qemu_cpu:
        require_tool("qemu-x86_64")
        proc, outs = run_native(
            runtime_build.cached_build("host"),
            out,
            {"x": inputs["x"]},
            tmp_path,
            "--warmup",
            "0",
            launcher=("qemu-x86_64", "-cpu", qemu_cpu),
        )
        assert proc.returncode == 0, proc.stderr
        assert_close([outs[0]], [expected], atol=1e-4, rtol=1e-4)
        ran = True
    if not ran:
        reason = (
            f"this CPU lacks {', '.join(missing_cpu_features(target))} and qemu-x86_64 cannot emulate "
            f"{mcpu} (QEMU has no AVX-512): the build's instructions were checked, not run"
        )
        print(f"skipping the run: {reason}")
        pytest.skip(reason)


def test_an_avx512_build_is_refused_on_an_avx2_cpu_with_the_fix(tmp_path):
    """Checked against an explicit AVX2 CPU, so it holds on any host: `run` names the missing
    instructions instead of stopping with SIGILL; under emulation the same library does die."""
    from tvmgen.compiler.targets.platforms import missing_cpu_features

    avx512 = PLATFORMS["host"].with_cpu("skylake-avx512").cpu_target()
    missing = missing_cpu_features(avx512, host_cpu="haswell")
    assert "avx512f" in missing and "avx2" not in missing, missing
    assert missing_cpu_features(PLATFORMS["host"].with_cpu("haswell").cpu_target(), host_cpu="skylake-avx512") == []
    assert missing_cpu_features(PLATFORMS["linux-aarch64"].cpu_target(), host_cpu="haswell") == []  # not run here


def test_cpu_flag(tvmgen, tmp_path):
    path = save_onnx(awkward_models()["conv_odd"], tmp_path / "m.onnx")
    bad = tvmgen("compile", path, "--cpu", "pentium-9000", "-o", tmp_path / "bad")
    assert bad.returncode == 2 and "LLVM knows no CPU 'pentium-9000'" in bad.output and "--cpu haswell" in bad.output
    assert not (tmp_path / "bad").exists()
    ok = tvmgen("compile", path, "--cpu", "skylake-avx512", "--check", "-o", tmp_path / "a")
    assert ok.returncode == 0, ok.output
    from tvmgen.compiler.targets.platforms import missing_cpu_features

    if missing_cpu_features({"kind": "llvm", "mcpu": "skylake-avx512"}):  # this host lacks AVX-512
        assert "cannot run here; checking a host/cpu build" in ok.output
        r = tvmgen("run", tmp_path / "a")
        assert r.returncode == 2 and "lacks: avx512" in r.output and "--cpu haswell" in r.output, r.output


# ------------------------------------------------------------------ SiLU, squeeze-excitation, odd channels


def _conv_models() -> dict:
    """Small models with EfficientNet's and ShuffleNet's patterns (random weights)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    node = helper.make_node
    silu_se = [  # conv -> SiLU -> squeeze-excitation (mean, 1x1 conv, SiLU, 1x1 conv, sigmoid, scale)
        node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        node("Sigmoid", ["c1"], ["s1"]),
        node("Mul", ["c1", "s1"], ["a1"]),
        node("GlobalAveragePool", ["a1"], ["p"]),
        node("Conv", ["p", "W2", "B2"], ["c2"]),
        node("Sigmoid", ["c2"], ["s2"]),
        node("Mul", ["c2", "s2"], ["a2"]),
        node("Conv", ["a2", "W3", "B3"], ["c3"]),
        node("Sigmoid", ["c3"], ["s3"]),
        node("Mul", ["a1", "s3"], ["y"]),
    ]
    odd = [  # ShuffleNet's branch: 1x1 conv to 58 channels, depthwise 3x3 stride 2, 1x1 conv to 116
        node("Conv", ["x", "W1", "B1"], ["c1"]),
        node("Relu", ["c1"], ["r1"]),
        node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=58),
        node("Conv", ["c2", "W3", "B3"], ["y"]),
    ]
    # 3x3, 128 -> 256 channels on 5x5 pixels: 1.2 MB of weights, more channels than pixels
    big = [node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["y"])]
    return {
        "silu_se": onnx_model(
            silu_se,
            [vi("x", [1, 8, 12, 12])],
            [vi("y", [1, 32, 12, 12])],
            [w("W1", 32, 8, 3, 3), w("B1", 32), w("W2", 8, 32, 1, 1), w("B2", 8), w("W3", 32, 8, 1, 1), w("B3", 32)],
        ),
        "odd_channels": onnx_model(
            odd,
            [vi("x", [1, 24, 10, 10])],
            [vi("y", [1, 116, 5, 5])],
            [*conv_params(w, "1", 58, 24, 1), *conv_params(w, "2", 58, 1, 3), *conv_params(w, "3", 116, 58, 1)],
        ),
        "large_weights": onnx_model(
            big,
            [vi("x", [1, 128, 5, 5])],
            [vi("y", [1, 256, 5, 5])],
            [w("W1", 256, 128, 3, 3, scale=0.05), w("B1", 256)],
        ),
    }


def test_silu_and_squeeze_excitation_fold_into_the_convolution(tmp_path):
    """x * sigmoid(x) after a convolution is part of its tile's write-back (not TVM's serial loops),
    and sigmoid is tvmgen's vectorisable one (no T.sigmoid, whose exp is a libm call per lane)."""
    path = save_onnx(_conv_models()["silu_se"], tmp_path / "silu_se.onnx")
    mod, done, left = prepared_and_scheduled(path)
    assert not [f for f in left if "conv" in f], left
    (first,) = [f for f in done if [int(d) for d in mod[f].params[0].shape] == [1, 8, 12, 12]]  # reads the input
    script = mod[first].script()
    assert "sigmoid" in first and "tir_sigmoid" not in first, first
    blocks = re.findall(r'T\.sblock\("(\w+)"\)', script)
    assert not [b for b in blocks if b.startswith(("T_multiply", "compute", "sigmoid", "T_add"))], blocks
    assert "T.sigmoid" not in "".join(mod[f].script() for f in done), "TVM's sigmoid left"
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-5, rtol=1e-4)


def test_vector_exp_and_sigmoid_match_numpy():
    """fast_math.vector_exp: float32 accuracy over the whole range, saturating (never inf / nan) outside it."""
    import tvm
    from tvm import te

    from tvmgen.compiler.cpu.fast_math import vector_exp

    n = 1 << 16
    x = te.placeholder((n,), "float32", name="x")
    one = tvm.tirx.const(1.0, "float32")
    e = te.compute((n,), lambda i: vector_exp(x[i]), name="e")
    s = te.compute((n,), lambda i: one / (one + vector_exp(-x[i])), name="s")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, e, s]))
    for name in ("e", "s"):
        _, inner = sch.split(sch.get_loops(sch.get_sblock(name))[0], [None, 8])
        sch.vectorize(inner)
    f = tvm.compile(sch.mod, target=make_target(PLATFORMS["host"].cpu_target()))
    values = np.concatenate([np.linspace(-120, 120, n // 2), np.random.default_rng(0).standard_normal(n // 2) * 8])
    values = values.astype(np.float32)
    out_e, out_s = (tvm.runtime.tensor(np.zeros(n, np.float32)) for _ in range(2))
    f(tvm.runtime.tensor(values), out_e, out_s)
    exact = np.exp(values.astype(np.float64))
    inside = (values > -87) & (values < 88)
    assert np.max(np.abs(out_e.numpy() - exact)[inside] / exact[inside]) < 3e-7
    assert np.all(np.isfinite(out_e.numpy())) and np.all(out_e.numpy() > 0)
    sigmoid = 1 / (1 + np.exp(-values.astype(np.float64)))
    assert np.max(np.abs(out_s.numpy() - sigmoid)) < 2e-7
    assert np.all((out_s.numpy() >= 0) & (out_s.numpy() <= 1))


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_odd_channel_counts_are_padded_to_whole_vectors(cpu, tmp_path):
    """ShuffleNet's branch, 1x1 conv to 58 channels, depthwise 3x3, 1x1 conv to 116: the chain through
    the depthwise convolution runs on 58 channels rounded up to whole vectors, with no slice or pad
    (zero filters in the first two, zero input channels in the last: conv_layout.pad_depthwise_chains);
    the last convolution's 116 outputs are padded and sliced off in its kernel
    (conv_layout.pad_conv_output_channels) where 116 is not whole vectors."""
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    path = save_onnx(_conv_models()["odd_channels"], tmp_path / "odd.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not [f for f in left if "conv" in f], left
    convs = sorted(f for f in done if "conv2d" in f)
    assert len(convs) == 3, done
    padded = -(-58 // lanes) * lanes
    assert padded > 58
    # each convolution by its weights (HWIO): 1x1 24 -> 58, depthwise 3x3 on 58, 1x1 58 -> 116
    widths = {tuple(int(d) for d in mod[f].params[1].shape[:3]): (f, int(mod[f].params[1].shape[3])) for f in convs}
    assert sorted(widths) == [(1, 1, 24), (1, 1, padded), (3, 3, 1)], widths
    for key in ((1, 1, 24), (3, 3, 1)):
        f, width = widths[key]
        assert width == padded and "strided_slice" not in f and "pad" not in f.replace("prepacked", ""), (f, width)
    f, width = widths[(1, 1, padded)]
    if 116 % lanes == 0:  # NEON: whole vectors already
        assert width == 116 and "strided_slice" not in f, (f, width)
    else:
        assert width % lanes == 0 and 116 < width < 116 + 2 * lanes and "strided_slice" in f, (f, width)
    if cpu == "avx2":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_a_depthwise_chain_whose_steps_are_used_elsewhere_is_left_unpadded(tmp_path):
    """The chain rewrite pads only values nothing else reads: here the first ReLU is also a model
    output, so the depthwise convolution keeps its 58 channels, and both outputs match onnxruntime."""
    import onnx

    model = _conv_models()["odd_channels"]
    model.graph.output.append(onnx.helper.make_tensor_value_info("r1", onnx.TensorProto.FLOAT, [1, 58, 10, 10]))
    path = save_onnx(model, tmp_path / "odd2.onnx")
    mod, done, _ = prepared_and_scheduled(path)
    (dw,) = [f for f in done if "conv2d" in f and int(mod[f].params[1].shape[2]) == 1]
    assert int(mod[dw].params[1].shape[3]) == 58, dw
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_large_weights_make_channel_blocks_the_tasks(tmp_path):
    """A convolution with more weights than activations: a task is a block of output channels over
    every pixel (each weight read once), the padded input made once before; a small one keeps
    bands of rows."""
    path = save_onnx(_conv_models()["large_weights"], tmp_path / "big.onnx")
    shape = schedules.cpu_shape(make_target(PLATFORMS["host"].cpu_target()))
    mod, done, _ = prepared_and_scheduled(path)
    (conv,) = [f for f in done if "conv2d" in f]
    script = mod[conv].script()
    tasks = 256 // (2 * shape.lanes(32))  # two vectors of channels per tile
    parallel = re.findall(r"(\w+) in T\.parallel\(T\.int64\((\d+)\)\)", script)
    # the padding's own pass, then the channel blocks (the convolution reads NCHW: "co", not "ff")
    assert len(parallel) == 2 and parallel[1][1] == str(tasks) and parallel[1][0].endswith("_0"), parallel
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    small = save_onnx(awkward_models()["conv_relu6_residual"], tmp_path / "small.onnx")
    mod, done, _ = prepared_and_scheduled(small)
    first = [f for f in done if "conv2d" in f and [int(d) for d in mod[f].params[1].shape][:2] == [3, 3]]
    assert first and re.search(r"_fused in T\.parallel", mod[first[0]].script()), first  # bands of rows


# ------------------------------------------------------------------ concatenations, pooling, large weights


def _fire_and_pool_models() -> dict:
    """SqueezeNet's fire module (convolutions concatenated, then a ceil_mode max pool) on awkward
    shapes, a concatenation whose input is read elsewhere too, and poolings with padding."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    node = helper.make_node
    fire = [
        node("Conv", ["x", "Ws", "Bs"], ["s0"]),
        node("Relu", ["s0"], ["s"]),  # squeeze: 6 -> 5
        node("Conv", ["s", "Wa", "Ba"], ["a0"]),
        node("Relu", ["a0"], ["a"]),  # expand 1x1: 7
        node("Conv", ["s", "Wb", "Bb"], ["b0"], pads=[1, 1, 1, 1]),
        node("Relu", ["b0"], ["b"]),  # 3x3: 9
        node("Conv", ["s", "Wc", "Bc"], ["c"], pads=[1, 1, 1, 1]),  # 3x3: 9 more, no activation
        node("Concat", ["a", "b", "c"], ["cat"], axis=1),  # 25 channels, made in place
        node("MaxPool", ["cat"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),  # 9x10 -> 4x5
        node("Conv", ["s", "Wd"], ["d"]),
        node("Concat", ["d", "s"], ["y2"], axis=1),  # s is read by the convolutions too: a copy
    ]
    pools = [  # NHWC after the convolution, padded windows
        node("Conv", ["x", "Wp", "Bp"], ["p"], pads=[1, 1, 1, 1]),
        node("MaxPool", ["p"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("AveragePool", ["p"], ["y2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("AveragePool", ["p"], ["y3"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1),
    ]
    return {
        "fire": onnx_model(
            fire,
            [vi("x", [1, 6, 9, 10])],
            [vi("y1", [1, 25, 4, 5]), vi("y2", [1, 9, 9, 10])],
            [
                *conv_params(w, "s", 5, 6, 1),
                *conv_params(w, "a", 7, 5, 1),
                *conv_params(w, "b", 9, 5, 3),
                *conv_params(w, "c", 9, 5, 3),
                w("Wd", 4, 5, 1, 1),
            ],
        ),
        "pools": onnx_model(
            pools,
            [vi("x", [1, 6, 13, 10])],
            [vi("y1", [1, 20, 7, 5]), vi("y2", [1, 20, 7, 5]), vi("y3", [1, 20, 7, 5])],
            [w("Wp", 20, 6, 3, 3), w("Bp", 20)],
        ),
    }


def test_concatenated_kernels_write_their_slices_in_place(tmp_path):
    """A concatenation of kernels' outputs that nothing else reads is no copy: one kernel runs the
    producers, each writing its channels of the concatenation (memory_rewrites.concat_in_place); a
    concatenation of a value read elsewhere keeps its copy. Results as onnxruntime's."""
    path = save_onnx(_fire_and_pool_models()["fire"], tmp_path / "fire.onnx")
    mod = _compiled_module(path)
    names = list(_param_shapes(mod))
    merged = [n for n in names if n.startswith("fused_conv") and "concatenate" in n]
    assert len(merged) == 1 and merged[0].count("conv2d") == 3, names
    assert [int(d) for d in mod[merged[0]].params[-1].shape] == [1, 9, 10, 25]  # NHWC, all 25 channels
    copies = [n for n in names if "concatenate" in n and n not in merged]
    assert len(copies) == 1, names  # concat(d, s) (with the transpose to NCHW): s has other readers
    main = mod["main"].script(show_meta=False)
    assert f"{merged[0]}," in main and f"{copies[0]}," in main
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_pooling_reads_its_input_without_a_padded_copy(tmp_path):
    """Max and average pooling with padded windows (and a ceil_mode window past the edge) compute
    their padding in the window loop: no padded copy of the input (reduction_rules._is_pool)."""
    path = save_onnx(_fire_and_pool_models()["pools"], tmp_path / "pools.onnx")
    mod, done, left = prepared_and_scheduled(path)
    pools = [f for f in done if "pool" in f]
    assert len(pools) == 3 and not [f for f in left if "pool" in f], (done, left)
    for f in pools:
        assert "pad_temp" not in mod[f].script(), f
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def _one_conv(x, y, w, seed: int, relu: bool = False, scale: float = 0.1, **attrs):
    """A model of one convolution with a bias (random weights, ``w``'s shape, times ``scale``),
    then a ReLU if asked."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c" if relu else "y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        [
            numpy_helper.from_array((rng.standard_normal(w) * scale).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal(w[0]).astype(np.float32), "B"),
        ],
    )


def _scheduled_conv(path, cpu: str) -> str:
    """The script of the model's one scheduled convolution kernel, for ``CPU_TARGETS[cpu]``."""
    mod, done, _ = prepared_and_scheduled(path, target_spec=CPU_TARGETS[cpu][0])
    (conv,) = [f for f in done if "conv2d" in f]
    return mod[conv].script()


@pytest.mark.parametrize("cpu", ["avx512", "avx2"])
def test_large_weights_tiles_have_as_many_rows_as_registers_hold(cpu, tmp_path):
    """A weight-stationary convolution (13 x 13 pixels, 1x1 256 -> 512: 512 KB of weights) reads its
    block of weights once per tile: 13 rows per tile with AVX-512's 32 registers (2 vectors each:
    26 accumulators), at most 6 with AVX2's 16."""
    model = _one_conv([1, 256, 13, 13], [1, 512, 13, 13], (512, 256, 1, 1), seed=9, scale=0.05)
    path = save_onnx(model, tmp_path / "wide.onnx")
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    assert unrolled and max(unrolled) == (13 if cpu == "avx512" else 5), unrolled
    lanes = CPU_TARGETS[cpu][1][0]  # channel blocks of two vectors are the tasks
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({512 // (2 * lanes)}\)\)", script), script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ L1 chunks, wider band tiles


def _stationary_3x3_model():
    """A late-stage 3x3 convolution on awkward pixels: 5 x 6 output, 3x3 x 264 -> 512 (4.9 MB of
    weights, more channels than pixels: weight-stationary), residual add and ReLU fused."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    node = helper.make_node
    return onnx_model(
        [
            node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
            node("Add", ["c", "r"], ["s"]),
            node("Relu", ["s"], ["y"]),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 264, 5, 6]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 512, 5, 6]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512, 5, 6])],
        [
            numpy_helper.from_array((rng.standard_normal((512, 264, 3, 3)) * 0.02).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal(512).astype(np.float32), "B"),
        ],
    )


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_large_weights_reduction_runs_in_chunks_that_fit_l1(cpu, tmp_path):
    """A weight-stationary convolution whose block of weights is larger than L1 runs its input
    channels in chunks (a power of two dividing them, window x chunk x tile channels <= 32 KB),
    each over all the task's pixels, with the accumulators' init before the first chunk. The tile
    is 2 vectors of channels on every target (4 with 7 rows spilled accumulators out of 32
    registers). 264 input channels: chunks of a power of two dividing them whose weights fit
    32 KB: 8 (264 = 33 x 8). Results as onnxruntime's."""
    path = save_onnx(_stationary_3x3_model(), tmp_path / "late.onnx")
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    mod, done, _ = prepared_and_scheduled(path, target_spec=spec)
    (conv,) = [f for f in done if "conv2d" in f]
    script = mod[conv].script()
    tile = lanes * 2
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({512 // tile}\)\)", script), script
    window_bytes = 9 * tile * 4
    chunk = max(c for c in (1, 2, 4, 8, 16, 32, 64) if c * window_bytes <= 32 * 1024 and 264 % c == 0)
    assert chunk == 8, chunk  # 264 = 33 x 8 on each target
    # the chunks outside the rows: for rc_0 in 33 chunks: (n, y: the rows): for xx_0, ry, rx, rc_1 (8)
    assert re.search(r"for rc_0 in T\.serial\(T\.int64\(33\), annotations=\{\"tvmgen\.weight_chunks\"", script), script
    assert re.search(r"for \w+, ry, rx, rc_1 in T\.grid\(.*T\.int64\(8\)\)", script.split("for rc_0")[1]), script
    assert re.search(r"T\.sblock\(\"\w+_init\"\)", script.split("for rc_0")[0])  # accumulators zeroed once
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_large_1x1_weights_run_in_chunks_that_fit_l1(cpu, tmp_path):
    """A weight-stationary 1x1 convolution whose task's block of weights is larger than L1 (7 x 7
    pixels, 1152 -> 320, MnasNet's and EfficientNet-B0's last stage: 1152 x 2 vectors of weights
    per task, 147 KB with AVX-512) runs its input channels in chunks that fit 32 KB, as a 3x3 one
    does: a power of two dividing 1152 (128 on each target: 1152 = 9 x 128), each over all the
    task's 7 rows of 7-pixel tiles, the accumulators zeroed once. Results as onnxruntime's."""
    model = _one_conv([1, 1152, 7, 7], [1, 320, 7, 7], (320, 1152, 1, 1), seed=15, scale=0.03)
    path = save_onnx(model, tmp_path / "project.onnx")
    _, (lanes, registers), _ = CPU_TARGETS[cpu]
    script = _scheduled_conv(path, cpu)
    tile = lanes * 2
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({320 // tile}\)\)", script), script
    chunk = max(c for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if c * tile * 4 <= 32 * 1024 and 1152 % c == 0)
    assert chunk == 128, chunk
    assert re.search(r"for rc_0 in T\.serial\(T\.int64\(9\), annotations=\{\"tvmgen\.weight_chunks\"", script), script
    assert re.search(r"for \w+, ry, rx, rc_1 in T\.grid\(.*T\.int64\(128\)\)", script.split("for rc_0")[1]), script
    assert re.search(r"T\.sblock\(\"\w+_init\"\)", script.split("for rc_0")[0])  # accumulators zeroed once
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    assert max(unrolled) == (7 if registers >= 32 else 4), unrolled  # 7 x 2 vectors; AVX2's 16 registers: 4
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_band_tiles_have_up_to_14_rows(cpu, tmp_path):
    """A convolution in bands of rows: tiles of up to 14 rows x 2 vectors with 32 registers (28
    accumulators: a weight vector feeds 14 multiply-adds, not 8), 6 with AVX2's 16. On an awkward
    width of 30 (no divisor from 4 to 14 but 5, 6, 10): the largest divisor. Matches onnxruntime."""
    model = _one_conv([1, 20, 9, 30], [1, 64, 9, 30], (64, 20, 3, 3), seed=12, pads=[1, 1, 1, 1])
    path = save_onnx(model, tmp_path / "band.onnx")
    registers = CPU_TARGETS[cpu][1][1]
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    assert unrolled and max(unrolled) == (10 if registers >= 32 else 6), unrolled
    assert re.search(r"_fused in T\.parallel", script)  # still bands of rows
    if cpu == "avx512":
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _ragged_models() -> dict:
    """Output widths whose register tile would end part-full: a first convolution (3 -> 64, 3x3
    stride 2, no padding: 103 -> 51 = 3 x 17 pixels) and a 1x1 convolution on 13 x 13 pixels."""
    return {
        "first_conv_51": _one_conv([1, 3, 5, 103], [1, 64, 2, 51], (64, 3, 3, 3), seed=13, relu=True, strides=[2, 2]),
        "pointwise_13": _one_conv([1, 16, 13, 13], [1, 64, 13, 13], (64, 16, 1, 1), seed=13, relu=True),
    }


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
@pytest.mark.parametrize("name", ["first_conv_51", "pointwise_13"])
def test_ragged_widths_get_whole_register_tiles(cpu, name, tmp_path):
    """A width with no divisor from 4 to the preferred rows gets a divisor up to what the registers
    hold (13 rows of 2 vectors with 32 registers), else 3 or 2 rows, before a tile whose last one
    is partial: that one is guarded by a condition on every row inside the reduction loop
    (SqueezeNet's first convolution: 52 GFLOP/s in guarded tiles of 14, 129 in tiles of 3). With
    AVX2's 16 registers (6 rows) a prime 13 still ends part-full. Results as onnxruntime's."""
    path = save_onnx(_ragged_models()[name], tmp_path / f"{name}.onnx")
    registers = CPU_TARGETS[cpu][1][1]
    script = _scheduled_conv(path, cpu)
    rows = max(int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script))
    budget = (registers - 4) // 2  # rows of two vectors of channels (64 = 2 x 32, 2 x 16, 2 x 8 values)
    if name == "first_conv_51":  # 51 = 3 x 17: no divisor from 4 to 14
        assert rows == 3 and "T.where" not in script, script
    elif budget >= 13:  # 13 rows fit the registers
        assert rows == 13 and "T.where" not in script, script
    else:  # AVX2: 13 is prime and more than 6 rows: the tile that wastes least, guarded
        assert rows == 5 and "T.where" in script, script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_transposes_to_nchw_run_in_blocks(cpu, tmp_path):
    """An output transpose NHWC -> NCHW (a feature-map output: 64 channels, 6 x 45 pixels) is
    scheduled in blocks: a loop of one vector's worth of channels around the vectorised pixels, so
    each input cache line read serves a block of output rows. 45 pixels divide by no power of two:
    the pixels in vectors of a divisor of 45 (15). Row by row, a task read the whole input once per channel: 4.8 ms for
    64 x 111 x 111, 0.5 in blocks. Results as onnxruntime's."""
    from onnx import TensorProto, helper

    model = onnx_model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), helper.make_node("Relu", ["t"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 45, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 45])],
    )
    path = save_onnx(model, tmp_path / "to_nchw.onnx")
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    mod, done, _ = prepared_and_scheduled(path, target_spec=spec)
    (kernel,) = [f for f in done if "transpose" in f]
    script = mod[kernel].script()
    # for ..., ax1_1 in T.grid(..., T.int64(lanes)): for ax3_1 in T.vectorized(T.int64(15))
    block = re.search(rf"T\.int64\({lanes}\)\):\s+for \w+ in T\.vectorized\(T\.int64\((\d+)\)\)", script)
    assert block and 45 % int(block.group(1)) == 0 and int(block.group(1)) >= 4, script
    tasks = int(re.search(r"T\.parallel\(T\.int64\((\d+)\)\)", script).group(1))
    assert tasks >= 64 // lanes * 6, script  # channel blocks x rows at least
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=0, rtol=0)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_odd_vector_counts_tile_three_vectors_of_channels(cpu, tmp_path):
    """48 output channels are 3 vectors with AVX-512: the tile is rows x 3 vectors, the vectors an
    unrolled loop of their own around one vectorised vector (a single vector of 48 floats LLVM
    scalarised), so each input value loaded feeds 3 multiply-adds; AVX2 and NEON tile 2 vectors
    (6 and 12 of them). Results as onnxruntime's."""
    model = _one_conv([1, 16, 14, 14], [1, 48, 14, 14], (48, 16, 1, 1), seed=14, relu=True)
    path = save_onnx(model, tmp_path / "pointwise48.onnx")
    lanes = CPU_TARGETS[cpu][1][0]
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    vectorized = {int(n) for n in re.findall(r"in T\.vectorized\(T\.int64\((\d+)\)\)", script)}
    if (48 // lanes) % 2:  # an odd number of vectors: rows (7 of 14) x 3 vectors of `lanes`
        assert sorted(set(unrolled)) == [3, 7] and lanes in vectorized, script
    else:  # two vectors in one vectorised loop, rows only unrolled
        assert 3 not in unrolled and 2 * lanes in vectorized, script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _prefetching_conv(path, arch: str) -> str:
    """The script of the model's convolution after the schedules and ``PrefetchNextWeights``."""
    import tvm
    from tvm import relax

    imported = frontends.load(path, [])
    weights = imported.mod["main"].params[len(imported.inputs) :]
    mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(imported.mod)
    target = make_target(CPU_TARGETS[arch][0])
    with target:
        mod = tvm.transform.Sequential(cpu.prepare_passes(target) + cpu.schedule_passes(target))(mod)
    (script,) = [
        f.script() for gv, f in mod.functions.items() if "conv2d" in gv.name_hint and isinstance(f, tvm.tirx.PrimFunc)
    ]
    return script


def _prefetched_lines(script: str, rows: int, block: int) -> str:
    """The one prefetch of ``script``, checked to cover a ``block`` of floats in the rows after the
    first of ``rows``, a share each, clamped inside it."""
    loop = re.search(
        r"for (\w+) in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.prefetch_next_weights\"", script
    )
    assert loop and int(loop[2]) == rows, script
    lines = re.search(r"for line in range\(T\.int64\((\d+)\)\)", script)
    assert lines, script
    per_line = 64 // 4
    assert int(lines[1]) * (rows - 1) * per_line >= block > (int(lines[1]) - 1) * (rows - 1) * per_line
    (hint,) = [ln for ln in script.splitlines() if "T.prefetch" in ln]
    assert f"T.min((({loop[1]} - T.int64(1)) * T.int64({lines[1]}) + line) * T.int64(16), T.int64({block - 1}))" in hint
    return hint


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_weight_stationary_rows_prefetch_the_next_block_of_weights(arch, tmp_path):
    """A weight-stationary 1x1 convolution (7 x 7 pixels, 192 -> 1152: 884 KB of weights) runs a
    task per block of output channels. Its rows after the first prefetch the next task's block
    into L2, a share each: together every cache line of it, at addresses inside the packed weights."""
    model = _one_conv([1, 192, 7, 7], [1, 1152, 7, 7], (1152, 192, 1, 1), seed=3, relu=True)
    path = save_onnx(model, tmp_path / "late.onnx")
    script = _prefetching_conv(path, arch)
    lanes = CPU_TARGETS[arch][1][0]
    block = 192 * 2 * lanes  # a task: two vectors of channels by the 192 input channels
    tasks = 1152 // (2 * lanes)
    task = re.search(rf"(\w+) in T\.parallel\(T\.int64\({tasks}\)\)", script)
    assert task, script
    hint = _prefetched_lines(script, 7, block)
    t = task[1]
    assert f"param_0_global_flat[({t} + T.int64(1)) * T.int64({block}) + " in hint, hint
    assert hint.endswith(", 0, 2, 1)"), hint  # locality 2: L2
    assert re.search(rf"if \w+ >= T\.int64\(1\) and {t} \+ T\.int64\(1\) < T\.int64\({tasks}\)", script), script
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_weight_chunks_prefetch_the_next_chunk(arch, tmp_path):
    """A weight-stationary 3x3 convolution in chunks of input channels (5 x 6 pixels, 264 -> 512:
    33 chunks of 8 channels per task): the rows after a chunk's first prefetch the next chunk
    into L1, a share each, the next task's first chunk after a task's last (the packed weights'
    blocks in order), none after the last task's last. Results as onnxruntime's."""
    path = save_onnx(_stationary_3x3_model(), tmp_path / "late.onnx")
    script = _prefetching_conv(path, arch)
    lanes = CPU_TARGETS[arch][1][0]
    tasks, block = 512 // (2 * lanes), 9 * 8 * 2 * lanes  # a chunk: 3x3 x 8 channels x 2 vectors
    task = re.search(rf"(\w+) in T\.parallel\(T\.int64\({tasks}\)\)", script)
    assert task, script
    hint = _prefetched_lines(script, 5, block)
    following = f"{task[1]} * T.int64(33) + rc_0 + T.int64(1)"
    assert f"param_0_global_flat[({following}) * T.int64({block}) + " in hint, hint
    assert hint.endswith(", 0, 3, 1)"), hint  # locality 3: L1
    assert re.search(rf"if \w+ >= T\.int64\(1\) and {re.escape(following)} < T\.int64\({tasks * 33}\)", script)
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["avx512", "neon"])
def test_small_buffers_are_on_the_stack_and_large_ones_in_the_workspace(arch, tmp_path):
    """tvmgen's TIR pipeline puts a kernel's allocations of up to 4 KB (its register tile) on the
    stack, where LLVM keeps a tile in registers; TVM's own lowering calls the workspace allocator
    for every buffer but a "global" one under 1 KB. Larger buffers (a band's padded input rows)
    stay in the workspace."""
    import tvm
    from tvm import s_tir, tirx

    from tvmgen.compiler.cpu import stack_tiles

    model = _one_conv([1, 16, 20, 20], [1, 32, 20, 20], (32, 16, 3, 3), seed=3, relu=True, pads=[1, 1, 1, 1])
    mod, done, _ = prepared_and_scheduled(save_onnx(model, tmp_path / "c.onnx"), target_spec=CPU_TARGETS[arch][0])
    (conv,) = [f for f in done if "conv2d" in f]
    kernel = tvm.IRModule({"main": mod[conv].with_attr("global_symbol", "main")})
    lowered = kernel
    for p in [
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
    ]:
        lowered = p(lowered)
    sizes = {}  # bytes of each allocation, by whether TVM 0.27 would put it on the stack itself
    for line in lowered["main"].script().splitlines():
        m = re.search(r"= T\.alloc_(buffer|local)\(\(T\.int64\((\d+)\),\)", line)
        if m:
            sizes.setdefault("global" if m[1] == "buffer" else "local", []).append(int(m[2]) * 4)
    tiles = [b for b in sizes.get("local", []) if b <= stack_tiles.STACK_BYTES]
    large = [b for kind in sizes.values() for b in kind if b > stack_tiles.STACK_BYTES]
    small_global = [b for b in sizes.get("global", []) if b < 1024]
    assert tiles and large, sizes  # the tile, and the band's padded input rows (4 KB and more)

    def workspace_calls(pipeline):
        ll = tvm.tirx.build(kernel, target=make_target(CPU_TARGETS[arch][0]), pipeline=pipeline).inspect_source("ll")
        return len(re.findall(r"= load ptr, ptr @__TVMBackendAllocWorkspace", ll))

    assert workspace_calls(stack_tiles.register_tir_pipeline()) == len(large), sizes
    assert workspace_calls("s_tir") == sum(len(v) for v in sizes.values()) - len(small_global), sizes
