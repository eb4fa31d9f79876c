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


def placed(shape, offset: int) -> np.ndarray:
    """A float32 array ``offset`` bytes past a 64-byte boundary (4: DLPack refuses it where kernels need 64)."""
    size = int(np.prod(shape)) * 4
    raw = np.empty(size + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start : start + size].view(np.float32).reshape(shape)


def test_an_array_the_kernels_cannot_read_in_place_is_copied_every_call_without_asking_again(two_outputs):
    """numpy's memory is 64-byte aligned by chance: an input whose kernels need 64 bytes is copied into a tensor
    of the model's own. The same array next call goes straight to that copy (asking DLPack again raised and
    parsed an exception per call: a 1.2 us model took 27 us a call, and never the one native call)."""
    model = HostModel(two_outputs)
    model._alignment = [64]  # as an input that some kernel writes in place, or an older artifact, requires
    asked = []
    from_dlpack = model._from_dlpack
    model._from_dlpack = lambda a, **kw: asked.append(a) or from_dlpack(a, **kw)
    frame = placed((2, 5), 4)
    frame[...] = np.random.default_rng(2).standard_normal((2, 5))
    for k in range(4):
        got = model.run({"a": frame})
        for g, want in zip(got, expected(frame), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
        frame[...] = frame * -1.5 + k  # the next frame, in the same buffer
    assert len(asked) == 1  # refused once, then copied without asking
    wrapped = model._wrapped[0]
    assert wrapped[0] is frame and wrapped[2] is not None  # the array, its tensor and that tensor's numpy view
    assert wrapped[2].ctypes.data != frame.ctypes.data
    assert model._fast is not None and model.replayed_by == "one native call"
    # an aligned array after it is used in place; the misaligned one, back, is asked about and copied again
    aligned = placed((2, 5), 0)
    aligned[...] = frame * 2
    for a, view in ((aligned, False), (frame, True)):
        np.testing.assert_allclose(model.run({"a": a})[0], np.maximum(a, 0), rtol=1e-5, atol=1e-6)
        assert model._wrapped[0][0] is a and (model._wrapped[0][2] is not None) == view
    assert len(asked) == 3


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
