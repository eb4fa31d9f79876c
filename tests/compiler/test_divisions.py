"""Divisions by constants become multiplications (compiler.divisions), and an activation that
reads the convolution's output twice through a chain (hard-swish as Keras spells it,
x * relu6(x + 3) / 6) is folded into the convolution's parallel write-back."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from helpers import assert_close, compile_and_run, prepared_and_scheduled


def hard_swish_conv(cin=3, cout=16, size=17, stride=2, divisor=6.0):
    """Conv -> x * clip(x + 3, 0, 6) / divisor, as the TFLite / Keras importers spell hard-swish."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (cout, cin, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.5, cout).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(3.0, np.float32), "three"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(6.0, np.float32), "six"),
        numpy_helper.from_array(np.array(divisor, np.float32), "d"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], strides=[stride] * 2, pads=[1] * 4),
        helper.make_node("Add", ["c", "three"], ["c3"]),
        helper.make_node("Clip", ["c3", "zero", "six"], ["r6"]),
        helper.make_node("Mul", ["c", "r6"], ["m"]),
        helper.make_node("Div", ["m", "d"], ["y"]),
    ]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )


def _top_level_loops(func):
    """The loops directly under a scheduled function's root block, as (parallel?, extent)."""
    import tvm

    body = func.body.block.body
    stmts = list(body.seq) if isinstance(body, tvm.tirx.SeqStmt) else [body]
    return [
        (s.kind == tvm.tirx.ForKind.PARALLEL, int(s.extent))
        for s in stmts
        if isinstance(s, tvm.tirx.For) and "layout_rewrite_preproc" not in str(s)
    ]  # weight copies: folded at compile time


@pytest.mark.parametrize("divisor", [6.0, 0.3])
def test_hard_swish_folds_into_the_convolution_and_matches(divisor, tmp_path):
    path = save_onnx(hard_swish_conv(divisor=divisor), tmp_path / "hs.onnx")
    for platform in ("host", "linux-aarch64"):
        mod, done, left = prepared_and_scheduled(path, platform)
        scripts = "".join(f.script(show_meta=False) for f in mod.functions.values())
        assert "T.Div(" not in scripts and " / T.float32" not in scripts, "a division is left"
        conv = [gv for gv in mod.get_global_vars() if "conv2d" in gv.name_hint]
        assert len(conv) == 1 and conv[0].name_hint in done, (conv, left)
        loops = _top_level_loops(mod[conv[0]])  # as schedule_module scheduled it
        # one parallel loop: the activation is computed on the tile, not in loops of its own after it
        assert len(loops) == 1 and loops[0][0], loops
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_division_by_a_tensor_or_an_integer_is_left_alone():
    import tvm
    from tvm import relax

    from tvmgen.compiler.cpu import divisions

    x = relax.Var("x", relax.TensorType((2, 4), "float32"))
    y = relax.Var("y", relax.TensorType((2, 4), "float32"))
    n = relax.Var("n", relax.TensorType((2, 4), "int32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y, n]):
        with bb.dataflow():
            a = bb.emit(relax.op.divide(x, y))  # not a constant
            b = bb.emit(relax.op.divide(n, relax.const(np.full(4, 3, np.int32))))  # integer: truncation
            c = bb.emit(relax.op.divide(x, relax.const(np.array([2.0, 0.0, 4.0, 8.0], np.float32))))  # a zero
            d = bb.emit(relax.op.divide(x, relax.const(np.array([2.0, 3.0, 4.0, 8.0], np.float32))))
            out = bb.emit_output(relax.Tuple([a, b, c, d]))
        bb.emit_func_output(out)
    text = divisions.divide_by_constants(bb.get()).script()
    assert text.count("R.divide(") == 3 and text.count("R.multiply(") == 1
    mod = divisions.divide_by_constants(bb.get())
    ex = tvm.compile(mod, "llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(2, 4)).astype(np.float32)
    got = vm["main"](tvm.runtime.tensor(xv), tvm.runtime.tensor(xv + 5), tvm.runtime.tensor(np.ones((2, 4), np.int32)))
    np.testing.assert_allclose(got[3].numpy(), xv / np.array([2.0, 3.0, 4.0, 8.0], np.float32), rtol=2e-7)
