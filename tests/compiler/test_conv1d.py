"""1-D convolutions (ONNX Conv with a 1-D kernel) go through the 2-D convolution path
(compiler.conv1d): NHWC, tiled and vectorised; results match onnxruntime for strides, padding,
dilation, groups and bias, on this CPU and for aarch64 NEON (prepared and scheduled)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from helpers import assert_close, compile_and_run, prepared_and_scheduled

CASES = {  # name: (in channels, out channels, width, kernel, stride, pads, dilation, groups, bias)
    "audio_front_end": (40, 64, 50, 3, 1, (1, 1), 1, 1, True),
    "strided_asymmetric_pad": (12, 29, 33, 5, 2, (2, 1), 1, 1, True),
    "dilated_no_bias": (16, 32, 40, 3, 1, (2, 2), 2, 1, False),
    "depthwise": (24, 24, 31, 5, 1, (2, 2), 1, 24, True),
    "grouped": (16, 32, 20, 3, 1, (0, 0), 1, 4, False),
    "framing_long_window": (1, 64, 4000, 400, 160, (0, 0), 1, 1, True),  # an STFT / raw-audio front end
    "framing_awkward_frames": (1, 32, 9520, 400, 160, (0, 0), 1, 1, True),  # 58 frames, computed as 60
}


def conv1d_model(cin, cout, width, k, stride, pads, dilation, groups, bias):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (cout, cin // groups, k)).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.3, cout).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node(
        "Conv", inputs, ["c"], kernel_shape=[k], strides=[stride], pads=list(pads), dilations=[dilation], group=groups
    )
    relu = helper.make_node("Relu", ["c"], ["y"])
    return onnx_model(
        [node, relu],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv1d_matches_onnxruntime_as_a_scheduled_2d_convolution(name, tmp_path):
    path = save_onnx(conv1d_model(*CASES[name]), tmp_path / f"{name}.onnx")
    for platform in ("host", "linux-aarch64"):
        mod, done, left = prepared_and_scheduled(path, platform)
        scripts = "".join(f.script(show_meta=False) for f in mod.functions.values())
        assert "conv1d" not in scripts and "conv2d" in scripts
        assert not [f for f in left if "conv" in f], left
        assert any("conv2d" in f for f in done), done
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("platform", ["avx512", "linux-aarch64"])
def test_a_long_window_stays_a_loop_and_its_tile_takes_every_frame(platform, tmp_path):
    """A framing convolution (one input channel, a 400-sample window, hop 160: 23 frames) is scheduled by the
    depthwise rule, whose 8-pixel tile and fully unrolled window suit 3x3 windows. Unrolled, the window was
    3,200 multiply-adds of straight code (beyond the instruction cache), and 23 frames made tiles of 8, the
    last guarded by a condition in the reduction loop: the mel front end's kernel ran at 54-63 GFLOP/s at one
    thread on AVX-512, 141 with the window a loop (unrolled by 4) and one tile of the 23 frames that the 32
    registers of AVX-512 and NEON hold."""
    from tvmgen.compiler.targets.platforms import PLATFORMS

    spec = PLATFORMS["host"].with_cpu("skylake-avx512").cpu_target() if platform == "avx512" else None
    path = save_onnx(conv1d_model(*CASES["framing_long_window"]), tmp_path / "frames.onnx")
    mod, done, _ = prepared_and_scheduled(path, "host" if spec else platform, spec)
    (conv,) = [f for gv, f in mod.functions.items() if "conv2d" in gv.name_hint]
    script = conv.script(show_meta=False)
    assert "T.unroll(T.int64(400))" not in script and "T.unroll(T.int64(4))" in script, script
    assert "T.unroll(T.int64(23))" in script and "T.where" not in script, script  # one whole tile


def test_a_long_window_has_tiles_of_two_vectors_with_16_registers(tmp_path):
    """The same framing convolution (23 frames computed as 24, 64 channels) for AVX2: a tile of 12 frames x one
    vector loads 13 values per 12 multiply-adds; 6 frames x 2 vectors, 8 (12 accumulators either way). The mel
    front end's framing 165 -> 109 us, raw_audio_cnn's 880 -> 540 us at one thread on a Zen 2 core. The window
    stays a loop. The AVX2 build's results as onnxruntime's (natively, or under qemu-x86_64)."""
    from helpers import CPU_TARGETS, run_as_haswell

    path = save_onnx(conv1d_model(*CASES["framing_long_window"]), tmp_path / "frames.onnx")
    mod, done, _ = prepared_and_scheduled(path, "host", CPU_TARGETS["avx2"][0])
    (conv,) = [f for gv, f in mod.functions.items() if "conv2d" in gv.name_hint]
    script = conv.script(show_meta=False)
    assert "T.unroll(T.int64(400))" not in script and "T.unroll(T.int64(4))" in script, script
    assert "T.unroll(T.int64(6))" in script and "T.where(xx_0 * T.int64(6) + xx_1" not in script, script  # 4 whole
    # tiles of 6 frames: only their write-back keeps the first 23
    assert re.search(r"co_1 in T\.vectorized\(T\.int64\(16\)\)", script), script  # 2 vectors of 8 channels
    run_as_haswell(path, tmp_path)


def test_frames_no_register_tile_divides_are_computed_in_whole_tiles(tmp_path):
    """raw_audio_cnn's framing convolution has 898 frames (2 x 449): no tile of 8 to 28 pixels divides them,
    and its tiles were 2 pixels (41 GFLOP/s, 1.1 ms at one thread). conv1d.pad_frames computes the fewest more
    frames, on zero input, that a register tile divides (900: tiles of 25 on AVX-512, 0.37 ms), and the model
    keeps the first ones; frame counts a tile divides are left alone."""
    from tvmgen.compiler.cpu.conv1d import frames_to_compute

    assert frames_to_compute(898, 28) == 900 and frames_to_compute(23, 28) == 23  # AVX-512 / NEON: 28 tile rows
    assert frames_to_compute(23, 12) == 24 and frames_to_compute(58, 28) == 60  # AVX2: 12
    path = save_onnx(conv1d_model(*CASES["framing_awkward_frames"]), tmp_path / "frames.onnx")
    mod, _, _ = prepared_and_scheduled(path, "linux-aarch64")
    (conv,) = [f for gv, f in mod.functions.items() if "conv2d" in gv.name_hint]
    script = conv.script(show_meta=False)
    assert "T.int64(60)" in script and "T.unroll(T.int64(20))" in script, script  # 60 frames, tiles of 20


def test_axes_counted_from_the_end_keep_the_layout_conversion(tvmgen, tmp_path):
    """silero-vad's shape: a convolution, then squeeze / mean over axes counted from the end (-1).
    TVM's layout conversion failed on them with std::bad_alloc and the CPU build fell back to no
    NHWC conversion; rewrites.non_negative_axes writes them from the start first."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 1, 3)).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    last = numpy_helper.from_array(np.array([-1], np.int64), "last")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 1, 0, 1]),
        helper.make_node("Squeeze", ["c", "two"], ["q"]),
        helper.make_node("Relu", ["q"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["m"], axes=[-1], keepdims=1),
        helper.make_node("Squeeze", ["m", "last"], ["y"]),
        helper.make_node("Concat", ["r", "r"], ["z"], axis=-1),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 5])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        [w, two, last],
    )
    path = save_onnx(model, tmp_path / "neg_axes.onnx")
    r = tvmgen("compile", path, "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert "failed" not in r.stderr and "ok y: max abs error" in r.stderr and "ok z: max abs error" in r.stderr


def unit_axis_conv_model(unit: str, combine: str):
    """A 1-D convolution written as a 2-D one with a unit ``unit`` axis ("width": [1, C, L, 1],
    weights [O, C, 5, 1]; "height": [1, C, 1, L]), pooled, then an ONNX ``combine`` of several inputs
    (Max(x, 0), Mean of three): TVM's importer writes those as a reduction over a ``stack``."""
    rng = np.random.default_rng(0)
    cin, cout, length = 32, 64, 48
    kernel, pads, squeezed = ([5, 1], [2, 0, 2, 0], 3) if unit == "width" else ([1, 5], [0, 2, 0, 2], 2)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.2, (cout, cin, *kernel)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.1, cout).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([squeezed], np.int64), "unit"),
        numpy_helper.from_array(rng.normal(0, 0.2, (cout, 10)).astype(np.float32), "fc"),
        numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=kernel, pads=pads),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Squeeze", ["r", "unit"], ["s"]),  # [1, O, L]
        helper.make_node("ReduceMax", ["s"], ["p"], axes=[2], keepdims=0),  # [1, O]
        helper.make_node("MatMul", ["p", "fc"], ["m"]),
    ]
    if combine == "max":
        nodes.append(helper.make_node("Max", ["m", "zero"], ["y"]))
    else:
        nodes += [
            helper.make_node("Neg", ["m"], ["n"]),
            helper.make_node("Relu", ["m"], ["q"]),
            helper.make_node("Mean", ["m", "n", "q"], ["y"]),
        ]
    shape = [1, cin, length, 1] if unit == "width" else [1, cin, 1, length]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )


@pytest.mark.parametrize(("unit", "combine"), [("width", "max"), ("height", "max"), ("width", "mean")])
def test_unit_axis_convolution_before_an_nary_max_keeps_the_layout_conversion(unit, combine, tvmgen, tmp_path):
    """Issue 37: TVM's layout inference names a stack's new axis "S", and the Max / Mean of several
    inputs that the importer writes as a reduction over a stack failed the layout conversion
    ("Invalid SLayout: can't find S in source layout ABC"): the whole model fell back to NCHW, its
    convolution 14x slower. rewrites.stack_free removes the stack; the convolution is NHWC."""
    import tvm

    from tvmgen import frontends
    from tvmgen.compiler.cpu import schedules
    from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

    path = save_onnx(unit_axis_conv_model(unit, combine), tmp_path / f"{unit}_{combine}.onnx")
    target = make_target(PLATFORMS["host"].cpu_target())
    passes = schedules.layout_passes(target)
    upto = [p.info.name for p in passes].index("ConvertLayout") + 1  # before the layout passes legalize
    with target:
        laid_out = tvm.transform.Sequential(passes[:upto])(frontends.load(path, []).mod)
    script = laid_out["main"].script(show_meta=False)
    assert "R.stack" not in script and 'data_layout="NHWC"' in script, script
    _, done, left = prepared_and_scheduled(path)
    assert any("conv2d" in f for f in done) and not [f for f in left if "conv" in f], (done, left)
    r = tvmgen("compile", path, "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert "failed" not in r.output and "ok y: max abs error" in r.output, r.output


def test_a_fallback_build_names_its_cost(tvmgen_inprocess, monkeypatch, tmp_path):
    """Where the CPU pipeline still falls back (here: the stack rewrite taken away, so the layout
    conversion fails as before), compile says what that costs: the convolutions left in NCHW."""
    from tvmgen.compiler import rewrites

    monkeypatch.setattr(rewrites, "stack_free", lambda mod: mod)
    path = save_onnx(unit_axis_conv_model("width", "max"), tmp_path / "m.onnx")
    r = tvmgen_inprocess("compile", path, "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.output
    out = " ".join(r.output.split())  # the console wraps long lines
    assert "tvmgen's CPU pipeline failed: " in out and "can't find S" in out, out
    assert "built with tvmgen's CPU pipeline without the NHWC layout conversion instead" in out, out
    assert "cost: 1 kernel (fused_conv2d" in out and "of the model's FLOPs) left in the model's NCHW layout" in out
    assert "ok y: max abs error" in out
