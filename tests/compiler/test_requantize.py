"""An 8-bit output's per-channel chain folded into one multiply-add (compiler.requantize, issue 37).

The chain ``subtract(acc, C) -> float -> * S -> + B -> quantize -> clip [-> uint8 shift]`` is built
in Relax as the importer and compiler.int8 write it, compiled with the CPU pipeline (which folds
it), and checked against the same arithmetic in float64 NumPy. The accumulators sit near large
zero-point corrections C (x = C + a small signal, as ``zx * colsum`` makes them): folding C into
the float constant would cancel against x * a and round about 1 value in 100 the wrong way, so the
integer offset has to stay exact; the test catches that."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from helpers import keras_int8_model
from tvmgen import frontends
from tvmgen.compiler import cpu, int8
from tvmgen.compiler.int8 import requantize
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

C = 32


def chain_module(start_dtype: str, shift: bool, consts: dict, clip: tuple[int, int]):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 32, 32, C], start_dtype))
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            v = bb.emit(relax.op.subtract(x, relax.const(consts["offset"].astype(start_dtype))))
            if start_dtype == "int32":
                v = bb.emit(relax.op.astype(v, "float32"))
            v = bb.emit(relax.op.multiply(v, relax.const(consts["scale"])))
            v = bb.emit(relax.op.add(v, relax.const(consts["bias"])))
            s, z = consts["s"], consts["z"]
            q = bb.emit(relax.op.quantize(v, relax.const(np.float32(s)), relax.const(z, "int32"), 0, "int8"))
            q = bb.emit(relax.op.clip(q, *clip))
            if shift:
                q = bb.emit(relax.op.astype(q, "int32"))
                q = bb.emit(relax.op.add(q, relax.const(128, "int32")))
                q = bb.emit(relax.op.astype(q, "uint8"))
            gv = bb.emit_output(q)
        bb.emit_func_output(gv)
    return bb.get()


def _ops(mod) -> list[str]:
    return [
        getattr(b.value.op, "name", "")
        for block in mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, tvm.relax.Call)
    ]


@pytest.mark.parametrize("start_dtype", ["int32", "float32"], ids=["dot_accumulator", "depthwise_sum"])
@pytest.mark.parametrize("shift", [False, True], ids=["int8", "uint8_shift"])
def test_folded_chain_equals_the_exact_arithmetic(start_dtype, shift):
    from tvm import relax

    rng = np.random.default_rng(1)
    # K = 960 int8 products reach 3e7; float sums (a depthwise convolution's) stay exact below 2**24
    big = 30_000_000 if start_dtype == "int32" else 60_000
    consts = {
        "offset": rng.integers(-big, big, C).astype(np.float64),
        "scale": rng.uniform(2e-4, 1e-3, C).astype(np.float32),
        "bias": rng.uniform(-1, 1, C).astype(np.float32),
        "s": 0.0235,
        "z": -40 if shift else 5,
    }
    clip = (-100, 20) if shift else (-60, 60)
    x = (consts["offset"] + rng.integers(-2000, 2000, (1, 32, 32, C))).astype(start_dtype)
    mod = chain_module(start_dtype, shift, consts, clip)

    folded = requantize.fold_requantize(mod)
    assert _ops(folded) == ["relax.call_tir"], _ops(folded)  # the whole chain: one function
    target = make_target(PLATFORMS["host"].cpu_target())
    ex = relax.build(mod, target, relax_pipeline=cpu.pipeline(target))
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy().astype(np.int64)

    s32 = consts["scale"].astype(np.float64)
    value = ((x.astype(np.float64) - consts["offset"]) * s32 + consts["bias"]) / np.float64(np.float32(consts["s"]))
    exact = np.clip(np.round(value) + consts["z"], *clip) + (128 if shift else 0)
    near_half = np.abs(np.abs(value - np.floor(value)) - 0.5) < 1e-4  # float32 may round either way there
    assert out.dtype == np.int64 and out.shape == exact.shape
    wrong = (out != exact) & ~near_half
    assert not wrong.any(), f"{int(wrong.sum())} of {out.size} values differ from the exact arithmetic"
    assert np.abs(out - exact).max() <= 1
    assert len(np.unique(out)) > 100  # the inputs span the range, clipped at both ends
    assert (exact == clip[0] + (128 if shift else 0)).any() and (exact == clip[1] + (128 if shift else 0)).any()


def test_a_step_read_twice_is_not_folded():
    """A value of the chain that another operator also reads (a residual add) stays computed."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 4, 4, C], "float32"))
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            v = bb.emit(relax.op.multiply(x, relax.const(np.full(C, 0.5, np.float32))))
            q = bb.emit(relax.op.quantize(v, relax.const(np.float32(0.1)), relax.const(0, "int32"), 0, "int8"))
            r = bb.emit(relax.op.add(v, x))  # v read twice
            gv = bb.emit_output(relax.Tuple([q, r]))
        bb.emit_func_output(gv)
    assert _ops(requantize.fold_requantize(bb.get())) == ["relax.multiply", "relax.quantize", "relax.add"]


def test_int8_model_kernels_end_in_one_requantize(tmp_path):
    """The full-integer model: every 8-bit product's epilogue is the folded form (no quantize or
    float scale steps of their own left in any kernel) for an AVX-512 VNNI target, on any host."""
    path = keras_int8_model(tmp_path)
    imported = frontends.load(path, [])
    target = make_target({"kind": "llvm", "mcpu": "icelake-server"})
    with target:
        mod = tvm.transform.Sequential(cpu.prepare_passes(target))(imported.mod)
    names = sorted(gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    dots = [n for n in names if "int8_dot" in n]
    assert len(dots) == 3, names
    assert all("requantize" in n and "multiply" not in n for n in dots[:2]), dots  # the two 1x1 convolutions
    depthwise = [n for n in names if n.startswith("fused_conv2d")]
    assert depthwise and all("requantize" in n and "multiply" not in n for n in depthwise), names


@pytest.mark.parametrize("registers", [32, 16])
def test_dot_tiles_fit_the_registers(registers):
    """rows x cols accumulators, cols weight vectors and a broadcast row: at most the register
    file (a 7 x 4 tile on AVX-512, 33 registers, spilled its accumulators to the stack in every
    step of K: MobileNetV2's 14 x 14 layers ran at 2/5 of their speed)."""
    for m in (1, 2, 3, 7, 14, 28, 56, 112, 5, 49):
        for col_blocks in (1, 2, 3, 4, 6, 9, 12, 20, 36, 63):
            rows, cols = int8.dot_tile(m, col_blocks, registers)
            assert m % rows == 0 and col_blocks % cols == 0
            assert rows * cols + cols + 1 <= registers or cols == 1, (m, col_blocks, rows, cols)
    assert int8.dot_tile(112, 6, 32) == (4, 6)  # MobileNetV2's 112 x 112 expansion: 24 accumulators
