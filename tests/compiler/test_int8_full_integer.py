"""Full-integer models (issue 37, keras_mobilenet_v2_int8).

- Depthwise convolutions of 8-bit activations with 8-bit weights (a scale per channel, zero point
  0) sum (x8 - zero) x w8 exactly in float32 (the padding is the zero point) and scale once per
  channel (int8_qdq._integer_depthwise_weights): equal to the exact integer sum computed by NumPy up
  to the one rounding of the scale, where the dequantised kernel rounded every product.
- On x86's u8 x s8 dot product int8 activations are shifted to uint8 for ``vpdpbusd``; where the
  same activations also feed a residual add, that add reads the shifted copy (``dequantize(u, s,
  z + 128)``, the same values exactly), so the shift fuses into the kernel that writes them and no
  kernel of its own shifts them (int8_qdq.share_shifted_activations). The structure is checked for an
  AVX-512 VNNI target whatever CPU runs the tests; the outputs on this CPU are bit-identical to the
  build without the rewrite."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from helpers import keras_int8_model
from tvmgen import frontends
from tvmgen.compiler import cpu, int8
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.int8 import int8_qdq
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target
from tvmgen.runtime.runner import HostModel


def depthwise_module(h: int, c: int, stride: int, padding: list[int], sx: float, zx: int, w8, sw):
    """main(x8 NHWC int8) = depthwise conv2d(dequantize(x8), reshape(dequantize(w8 [1, 3, 3, C],
    sw per channel)) as HWOI), as TVM's TFLite importer writes a full-integer depthwise layer."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, h, h, c], "int8"))
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            xf = bb.emit(relax.op.dequantize(x, relax.const(np.float32(sx)), relax.const(zx, "int32"), 0, "float32"))
            wf = bb.emit(relax.op.dequantize(relax.const(w8), relax.const(sw), relax.const(0, "int32"), 3, "float32"))
            wr = bb.emit(relax.op.reshape(wf, [3, 3, c, 1]))
            y = bb.emit(
                relax.op.nn.conv2d(
                    xf, wr, [stride, stride], padding, groups=c, data_layout="NHWC", kernel_layout="HWOI"
                )
            )
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


def exact_depthwise(x8, w8, sw, sx, zx, stride, padding):
    """The layer from the integers, in float64: sx * sw[c] * sum (x8 - zx) * w8 (padding: x8 = zx)."""
    top, left, bottom, right = padding
    xi = np.pad(x8.astype(np.int64) - zx, [(0, 0), (top, bottom), (left, right), (0, 0)])
    k = w8.reshape(3, 3, -1).astype(np.int64)
    oh = (xi.shape[1] - 3) // stride + 1
    ow = (xi.shape[2] - 3) // stride + 1
    acc = np.zeros((1, oh, ow, k.shape[-1]), np.int64)
    for dy in range(3):
        for dx in range(3):
            acc += xi[:, dy : dy + stride * oh : stride, dx : dx + stride * ow : stride, :] * k[dy, dx]
    return acc * (np.float64(np.float32(sx)) * sw.astype(np.float64))


@pytest.mark.parametrize("stride,padding", [(1, [1, 1, 1, 1]), (2, [0, 0, 1, 1])], ids=["same", "stride2"])
def test_integer_depthwise_is_the_exact_sum_scaled_once(stride, padding):
    from tvm import relax

    from tvmgen.compiler.cpu import stack_tiles

    h, c, sx, zx = 14, 48, 0.0235, -128
    rng = np.random.default_rng(3)
    w8 = rng.integers(-127, 128, (1, 3, 3, c)).astype(np.int8)
    sw = rng.uniform(0.002, 0.05, c).astype(np.float32)
    x8 = rng.integers(-128, 128, (1, h, h, c)).astype(np.int8)
    x8[0, 0, :4, :4] = [-128, 127, -128, 127]  # the extremes
    target = make_target(PLATFORMS["host"].cpu_target())
    mod = depthwise_module(h, c, stride, padding, sx, zx, w8, sw)
    with target:
        ex = relax.build(
            mod, target, relax_pipeline=cpu.pipeline(target), tir_pipeline=stack_tiles.tir_pipeline(target)
        )
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x8)).numpy()
    want = exact_depthwise(x8, w8, sw, sx, zx, stride, padding)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)  # one float32 rounding of the scale
    # the kernel reads the 8-bit tensor, padded with its zero point (not 0: not dequantised first)
    with target:
        prepared = tvm.transform.Sequential(cpu.prepare_passes(target))(mod)
    (dw,) = [
        f for f in prepared.functions.values() if isinstance(f, tvm.tirx.PrimFunc) and "group_conv2d" in f.script()
    ]
    assert str(dw.params[0].ty.dtype) == "int8"
    lines = [line.strip() for line in dw.script().splitlines()]
    assert any(line.endswith('= T.Cast("float32", x[v_i0, v_i1, v_i2, v_i3])') for line in lines), lines
    assert any("T.if_then_else(" in line and line.endswith(", T.float32(-128.0))") for line in lines), lines


VNNI = {"kind": "llvm", "mcpu": "icelake-server"}  # AVX-512 VNNI: vpdpbusd takes u8 activations
SHIFT_ONLY = re.compile(r"^fused_cast\d*_add\d*_cast\d*$")  # astype(int32) + 128, astype(uint8)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return keras_int8_model(tmp_path_factory.mktemp("int8-shifts"))


def _prepared(path, spec):
    imported = frontends.load(path, [])
    target = make_target(spec)
    with target:
        return tvm.transform.Sequential(cpu.prepare_passes(target))(imported.mod)


def _functions(mod) -> list[str]:
    return sorted(gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))


def test_no_kernel_only_shifts_the_residual_input(model, monkeypatch):
    """The model's residual input feeds a 1x1 convolution (shifted) and the residual add: with the
    rewrite, no function is a shift alone and the add reads uint8; without it, one function is."""
    assert int8.dot_product(make_target(VNNI), "int8") is not None
    names = _functions(_prepared(model, VNNI))
    assert not [n for n in names if SHIFT_ONLY.match(n)], names
    monkeypatch.setattr(int8_qdq, "share_shifted_activations", lambda mod: mod)
    before = _functions(_prepared(model, VNNI))
    assert [n for n in before if SHIFT_ONLY.match(n)], before  # the test sees what the rewrite removes


def test_outputs_bit_identical_to_the_build_without_the_rewrite(model, tmp_path, monkeypatch):
    imported = frontends.load(model, [])
    name = imported.inputs[0].name
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / "shared", True, {"name": "q"})
    monkeypatch.setattr(int8_qdq, "share_shifted_activations", lambda mod: mod)
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / "apart", True, {"name": "q"})
    monkeypatch.undo()
    shared, apart = HostModel(tmp_path / "shared"), HostModel(tmp_path / "apart")
    rng = np.random.default_rng(11)
    for _ in range(3):
        x = rng.uniform(-1, 1, (1, 14, 14, 24)).astype(np.float32)
        (a,) = shared.run({name: x})
        (b,) = apart.run({name: x})
        np.testing.assert_array_equal(a, b)
        (ref,) = imported.reference({name: x})
        q = float(ref.max() - ref.min()) / 255
        assert np.abs(a - ref).max() <= 2.01 * q  # LiteRT, within its own rounding (test_int8)


# ------------------------------------------------------------------ GPU builds: one dequantized copy

LONE_DEQUANTIZE = re.compile(r"^dequantize\d*$")  # a kernel that only dequantizes


@pytest.fixture(scope="module")
def stem_model(tmp_path_factory):
    """A residual block whose input is a convolution's 8-bit output (as in MobileNetV2)."""
    return keras_int8_model(tmp_path_factory.mktemp("int8-stem"), stem=True)


def _gpu_fused(path, family: str) -> list[str]:
    """The function names of the GPU pipeline's fused module (up to FuseTIR) for ``family``."""
    from tvmgen.compiler import gpu
    from tvmgen.compiler.gpu import adreno
    from tvmgen.compiler.targets.platforms import BuildTarget

    target = BuildTarget(PLATFORMS["android-arm64"], "opencl", family).tvm
    if family == "adreno":
        passes = adreno.legalize_passes(target, True)
        passes = passes[: [p.info.name for p in passes].index("FuseTIR") + 1]
    else:
        passes = gpu.prepare_passes(target)
    with target:
        return _functions(tvm.transform.Sequential(passes)(frontends.load(path, []).mod))


@pytest.mark.parametrize("family", ["generic", "adreno"])
def test_gpu_kernels_read_one_dequantized_copy_of_the_residual_input(stem_model, monkeypatch, family):
    """TVM's TFLite importer dequantizes the block's input twice (for the 1x1 convolution and for the
    residual add): with int8_qdq.share_dequantized one binding, fused into the stem convolution's kernel,
    which writes the float copy both read; without it a kernel of its own dequantizes."""
    names = _gpu_fused(stem_model, family)
    assert not [n for n in names if LONE_DEQUANTIZE.match(n)], names
    monkeypatch.setattr(int8_qdq, "share_dequantized", lambda mod: mod)
    before = _gpu_fused(stem_model, family)
    assert [n for n in before if LONE_DEQUANTIZE.match(n)], before  # the test sees what the rewrite removes
    assert len(before) == len(names) + 1


def test_shared_dequantize_leaves_the_input_module_and_other_models_alone(stem_model):
    """A pass returns a new module (the build's fallback pipelines rerun on its input); a model without
    duplicate dequantizes comes back as it was."""
    mod = frontends.load(stem_model, []).mod
    text = mod.script()
    shared = int8_qdq.share_dequantized(mod)
    assert mod.script() == text
    assert shared.script().count("R.dequantize(") == text.count("R.dequantize(") - 1
    assert int8_qdq.share_dequantized(shared) is shared


@pytest.mark.slow
def test_gpu_build_with_shared_dequantize_matches_litert_on_pocl(stem_model, ocl_runtime, opencl_lib, tmp_path):
    """The OpenCL build, run by tvmgen-run on PoCL: no dequantize-only kernel, within two output
    quanta of LiteRT (as the CPU build, test_int8) and equal to the CPU build but for roundings."""
    from helpers import run_tool
    from tvmgen.core import kernel_table

    imported = frontends.load(stem_model, [])
    name = imported.inputs[0].name
    gpu_art, cpu_art = tmp_path / "gpu", tmp_path / "cpu"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "opencl"), gpu_art, True, {"name": "q"})
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), cpu_art, True, {"name": "q"})
    names = [k["name"] for k in kernel_table.load(gpu_art)["kernels"]]
    assert not [n for n in names if LONE_DEQUANTIZE.match(n)], names
    cpu_model = HostModel(cpu_art)
    rng = np.random.default_rng(13)
    for i in range(3):
        x = rng.uniform(-1, 1, (1, 14, 14, 24)).astype(np.float32)
        rc, (got,), _, err = run_tool(ocl_runtime, gpu_art, tmp_path, {name: x}, tag=f"o{i}")
        assert rc == 0, err
        (ref,) = imported.reference({name: x})
        q = float(ref.max() - ref.min()) / 255
        assert np.abs(got - ref).max() <= 2.01 * q
        (on_cpu,) = cpu_model.run({name: x})
        assert np.abs(got - on_cpu).max() <= 1.01 * q
