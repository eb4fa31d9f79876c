"""HostModel.run called frame after frame (issue 32): an input array passed again is wrapped once and
read afresh every call; ``out=`` arrays receive the outputs in place, checked the first time they come."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import save_onnx, single_op_models
from tvmgen.core.errors import InputError
from tvmgen.runtime.runner import HostModel


@pytest.fixture(scope="module")
def two_outputs(compiled, tmp_path_factory):
    path = save_onnx(single_op_models()["two_outputs"], tmp_path_factory.mktemp("reuse") / "two_outputs.onnx")
    return compiled(path, name="two_outputs")


def expected(a: np.ndarray) -> list[np.ndarray]:
    return [np.maximum(a, 0), 1 / (1 + np.exp(-a))]


def test_the_same_array_refilled_in_place_is_wrapped_once_and_read_every_call(two_outputs):
    model = HostModel(two_outputs)
    frame = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    first = model.run({"a": frame})
    wrapped = model._wrapped[0]
    assert wrapped is not None and wrapped[0] is frame  # used in place, its tensor kept
    frame[...] = -frame  # the next camera frame, written into the same buffer
    second = model.run({"a": frame})
    assert model._wrapped[0][1] is wrapped[1]  # the same tensor: not wrapped again
    for got, want in zip(second, expected(frame), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(first, expected(-frame), strict=True):  # the first run's arrays left alone
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    other = frame + 1  # another array: wrapped anew
    third = model.run({"a": other})
    assert model._wrapped[0][0] is other
    np.testing.assert_allclose(third[0], np.maximum(other, 0), rtol=1e-5, atol=1e-6)
    # the same array object still has its shape and dtype checked on every call
    frame.shape = (5, 2)
    with pytest.raises(InputError, match="has shape"):
        model.run({"a": frame})
    frame.shape = (2, 5)
    np.testing.assert_allclose(model.run({"a": frame})[0], np.maximum(frame, 0), rtol=1e-5, atol=1e-6)


def test_outputs_into_the_callers_arrays(two_outputs):
    model = HostModel(two_outputs)
    frame = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    out = [np.empty((2, 5), np.float32), np.empty((2, 5), np.float32)]
    got = model.run({"a": frame}, out=out)
    assert got is out
    for a, want in zip(out, expected(frame), strict=True):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
    wrapped = [w[1] for w in model._out_wrapped]
    frame[...] = frame * 2
    model.run({"a": frame}, out=out)  # the same arrays: overwritten, through the tensors made the first time
    assert [w[1] for w in model._out_wrapped] == wrapped
    for a, want in zip(out, expected(frame), strict=True):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
    default = model.run({"a": frame})  # without out: arrays of their own
    assert not any(np.shares_memory(d, o) for d in default for o in out)
    for bad, cause in [
        ([out[0]], "out has 1 array"),
        ([out[0], np.empty((5, 2), np.float32)], r"out\[1\] is float32\[5, 2\]"),
        ([out[0], np.empty((2, 5), np.float64)], r"out\[1\] is float64"),
        ([out[0], np.empty((5, 2), np.float32).T], "not a writable C-contiguous"),
        ([out[0], [[0.0] * 5] * 2], "not a writable C-contiguous"),
    ]:
        with pytest.raises(InputError, match=cause):
            model.run({"a": frame}, out=bad)
