"""Softmax on CPUs (compiler.softmax): tvmgen's lowering (exp in vectors, one division per row)
and schedule (rows in parallel, each row's steps in cache, vectors) match onnxruntime, with a
fused producer, on shapes the vector width does not divide (a long row's whole vectors and its tail reduced
apart), over an axis that is not the last (TVM's own lowering ran unscheduled, one thread and no vectors), and
for aarch64 NEON (scheduled)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from helpers import CPU_TARGETS, compile_and_run, prepared_and_scheduled

CASES = {  # name: (input shape, ONNX axis, scale applied before the softmax)
    "classifier_1000": ((1, 1000), -1, None),
    "attention_scores": ((1, 4, 33, 33), -1, 0.125),  # scaled: the multiply fuses in front
    "rows_of_7": ((3, 5, 7), 2, None),
    "wide_values": ((2, 64), -1, 40.0),  # exp of large differences: underflow to ~0, no inf/nan
    "other_axis": ((2, 6, 5), 1, None),  # moved last and back by transposes
    "dfl_bins": ((1, 16, 4, 84), 1, None),  # YOLOv8's distribution focal loss: 16 bins on axis 1
    "ctc_classes": ((1, 40, 6625), -1, None),  # a CTC head's character set: no vector divides a row
    "long_rows": ((1, 3, 4096), -1, None),  # long rows: four vectors of partial maxima and sums
    "ragged_tail": ((2, 3, 1999), -1, 3.0),  # 124 x 16 + 15: a long row of no whole vectors, a tail of 15
}


def softmax_model(shape, axis, scale):
    nodes, inits, x = [], [], "x"
    if scale is not None:
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), "s"))
        nodes.append(helper.make_node("Mul", ["x", "s"], ["xs"]))
        x = "xs"
    nodes.append(helper.make_node("Softmax", [x], ["y"], axis=axis))
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_softmax_matches_onnxruntime_and_is_scheduled(name, tmp_path):
    shape, axis, scale = CASES[name]
    path = save_onnx(softmax_model(shape, axis, scale), tmp_path / f"{name}.onnx")
    for spec, (lanes, _), _ in CPU_TARGETS.values():  # the expectations follow from each target, not the host
        mod, done, left = prepared_and_scheduled(path, target_spec=spec)
        assert not left and any("softmax" in f for f in done), (done, left)
        script = "".join(f.script(show_meta=False) for f in mod.functions.values())
        assert "T.parallel" in script and "T.vectorized" in script and "T.exp(" not in script
        if shape[axis] >= 64:  # long rows: the maximum and the sum as vectors of partial results, not scalar chains
            assert 'T.sblock("softmax_max_rf")' in script and 'T.sblock("softmax_sum_rf")' in script, script
        widths = {int(w) for w in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", script)}
        if name in ("ctc_classes", "ragged_tail"):  # 6625 = 53 x 125: whole vectors and a scalar tail
            assert 'T.sblock("softmax_out_' in script and "_partition" in script, script
            assert lanes in widths, (lanes, widths)
            # the maximum and the sum over the row's whole vectors in partials of whole vectors (they were 5 or 53
            # lanes, mostly masked: 0.94 ms against onnxruntime's 0.47 over 40 x 18,385), its tail apart
            parts = re.findall(r"softmax_(?:max|sum)_rf = T\.sblock_alloc_buffer\(\(.*T\.int64\((\d+)\)\)\)", script)
            assert len(parts) == 2 and all(int(p) % lanes == 0 for p in parts), (parts, script)
            assert 'T.sblock("softmax_max_tail")' in script and 'T.sblock("softmax_sum_tail")' in script, script
        if name == "long_rows":  # partial results in four vectors: four chains of maxima in flight, not one
            assert 4 * lanes in widths and "softmax_max_rf = T.sblock_alloc_buffer((T.int64(1), T.int64(3), "
            f"T.int64({4 * lanes})))" in script, script
    _, _, actual, expected = compile_and_run(path, tmp_path)
    for a, e in zip(actual, expected):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(a.sum(axis=axis), 1.0, rtol=1e-5)
