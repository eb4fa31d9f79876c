"""tvmgen's default CPU schedules: awkward shapes still match onnxruntime, and the schedules apply.

Speed is measured in benchmarks/, not here; these tests check that the schedules are used
(parallel, vectorised, epilogues fused) and that they never change results. Convolutions' register
tiles and L1 chunks are checked in test_schedule_tiles.py, where kernels keep their data (packed
weights, in-place concatenations, prefetches, the stack) in test_schedule_memory.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import onnx_model, run_native, save_onnx
from helpers import CPU_TARGETS, assert_close, compile_and_run, prepared_and_scheduled
from schedule_models import conv_params
from tvmgen import frontends
from tvmgen.compiler.cpu import schedules
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target


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
    # the first and third convolutions (112 x 112; with 16 registers computed 114 wide in tiles of 6 rows and
    # sliced back: their names gain the slice)
    bands = [f for f in convs if re.fullmatch(r"fused_conv2d2?_(strided_slice\d*_)?add1?_maximum1?_minimum1?", f)]
    assert len(bands) == 2 and all(("strided_slice" in f) == (registers < 32) for f in bands), bands
    for name in bands:
        # other convolutions: a parallel task is a band of output rows (112 rows: 16 bands of 7)
        assert re.search(r"for \w+_0_fused in T\.parallel\(T\.int64\(16\)\)", mod[name].script()), name
    # no NCHW -> NHWC transpose of the input: the first convolution reads NCHW and writes NHWC
    assert "transpose" not in done, done
    (first,) = [f for f in convs if [int(d) for d in mod[f].params[0].shape] == [1, 3, 224, 224]]
    assert [int(d) for d in mod[first].params[-1].shape] == [1, 112, 112, 16], first
    (dense,) = [mod[f].script() for f in done if f.startswith("fused_matmul_add")]  # (1, 512) x (512, 1000)
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


def test_an_einsum_with_a_constant_operand_goes_through_the_layout_passes(tmp_path):
    """The Clip/ReLU6 rewrite (``rewrites.tir_min_max_as_relax``) matched a call_tir through the variable
    it is bound to and read ``.args`` off the variable: every model with such an einsum fell back to the
    pipeline without the NHWC layout conversion."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 64, 32)).astype(np.float32), "w")
    model = onnx_model(
        [helper.make_node("Einsum", ["x", "w"], ["y"], equation="bij,bjk->bik")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16, 32])],
        [w],
    )
    _, done, left = prepared_and_scheduled(save_onnx(model, tmp_path / "einsum.onnx"))  # raised before
    assert any("einsum" in f for f in done) and not left, (done, left)
