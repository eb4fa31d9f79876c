"""Direct calls in the Python runtime (runtime/direct_calls.py): from the second run on, HostModel.run makes
main's recorded kernel calls itself, in one call of the model library's tvmgen_replay. Every model here gives the Relax VM's outputs bit for bit, whatever
arrays come (new ones, one refilled in place, read-only ones that are copied), and says which executor ran."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import branching_model, onnx_model, save_onnx, single_op_models
from tvmgen.core.model import random_inputs
from tvmgen.runtime.direct_calls import read_calls
from tvmgen.runtime.runner import FRESH_OUTPUT_BYTES, HostModel

STRAIGHT = """@main:
  call  vm.builtin.check_tensor_info in: %0, i2, c[0], c[1] dst: %void
  call  vm.builtin.alloc_storage in: %vm, c[2], i0, c[3], c[4] dst: %1
  call  fused_add_relu   in: %0, c[6], %2 dst: %void
  ret   %2

@vm.builtin.check_tensor_info packed_func;

@vm.builtin.alloc_storage packed_func;

@fused_add_relu packed_func;
"""


def test_read_calls_takes_one_straight_line_of_packed_calls():
    assert read_calls(STRAIGHT, "main") == (
        ["vm.builtin.check_tensor_info", "vm.builtin.alloc_storage", "fused_add_relu"],
        "",
    )
    branching = STRAIGHT.replace("  ret   %2", "  If    %3 3\n  ret   %2")
    assert read_calls(branching, "main") == ([], "main branches (If): its calls can differ from run to run")
    own = STRAIGHT.replace("@fused_add_relu packed_func;", "")  # a function of the VM's own (a closure)
    assert read_calls(own, "main") == ([], "main calls fused_add_relu, a function of the VM itself")
    assert read_calls(STRAIGHT.replace("  ret   %2\n", ""), "main")[1] == (
        "the executable's text has no function main ending in ret"
    )
    assert read_calls(STRAIGHT, "other")[1] == "the executable's text has no function other ending in ret"


def identity_and_view_models():
    """Inputs that must stay the recorded tensors: one main returns (y = x beside Relu(x)) and one a builtin
    keeps (a reshape, a view of the input, fed to a matmul)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    returned = onnx_model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
        [x],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8]),
        ],
    )
    viewed = onnx_model(
        [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("MatMul", ["r", "r"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor("s", TensorProto.INT64, [2], [4, 4])],
    )
    return {
        "returned": (returned, lambda a: [a, np.maximum(a, 0)]),
        "viewed": (viewed, lambda a: [a.reshape(4, 4) @ a.reshape(4, 4)]),
    }


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, builtin_onnx, compiled):
    d = tmp_path_factory.mktemp("direct")
    arts = {"mobilenet": compiled(builtin_onnx, "host", "cpu", name="mobilenet")}
    arts["mobilenet-params"] = compiled(builtin_onnx, "host", "cpu", name="mobilenet", separate_params=True)
    for name in ("two_outputs", "matmul"):
        arts[name] = compiled(save_onnx(single_op_models()[name], d / f"{name}.onnx"), "host", "cpu", name=name)
    for name, (model, _) in identity_and_view_models().items():
        arts[name] = compiled(save_onnx(model, d / f"{name}.onnx"), "host", "cpu", name=name)
    return arts


def frames(specs, seed: int):
    """Inputs as an app passes them: new arrays, the same arrays refilled in place, other new arrays, then
    read-only ones (which are copied). A generator: each refill happens after the last call has run."""
    first, second = random_inputs(specs, seed), random_inputs(specs, seed + 1)
    yield first
    for k, v in first.items():  # the next frame written into the arrays passed last time
        v[...] = second[k][::-1].reshape(v.shape)
    yield first
    yield second
    for v in second.values():
        v.flags.writeable = False
    yield second


@pytest.mark.parametrize("name", ["mobilenet", "mobilenet-params", "two_outputs", "matmul"])
def test_direct_calls_equal_the_vm_bit_for_bit(artifacts, name):
    direct, vm = HostModel(artifacts[name]), HostModel(artifacts[name], direct_calls=False)
    assert direct.executor == "direct calls"
    assert vm.executor == "relax vm: direct calls are turned off (direct_calls=False; tvmgen run --vm)"
    for k, inputs in enumerate(frames(direct.inputs, seed=5)):
        got, want = direct.run(inputs), vm.run(inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and np.array_equal(g, w), (name, k)
    assert direct._direct is not None and direct._direct.recorded and not direct._direct.fixed_inputs
    assert direct._fast is not None  # the app's call: one function once recorded
    # the kernels called in one call of the library's tvmgen_replay, each new input's tensor put in its place
    assert direct._direct.replayed_by == "one native call"
    inputs = next(frames(direct.inputs, seed=9))
    want = vm.run(inputs)
    for got in (direct.run(inputs, repeat=3), direct.run(inputs, out=[np.empty_like(w) for w in want])):
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert len(direct.timings.runs_ms) == 4 + 3  # every run after the first is timed, on every path
    # An app's frame after frame on one set of arrays makes the native call as it is; a call in between on
    # other arrays (through run's general path) put their tensors in the recorded arguments, and the next
    # frame puts the first ones back: every result is its own inputs'.
    a, b = random_inputs(direct.inputs, 21), random_inputs(direct.inputs, 22)
    want_a, want_b = vm.run(a), vm.run(b)
    for got, want in (
        (direct.run(a), want_a),
        (direct.run(a), want_a),
        (direct.run(b, out=[np.empty_like(w) for w in want_b]), want_b),
        (direct.run(a), want_a),
        (direct.run(b), want_b),
        (direct.run(a), want_a),
    ):
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), name


@pytest.mark.parametrize("name", ["returned", "viewed"])
def test_inputs_a_builtin_keeps_or_main_returns_are_copied_into_the_recorded_tensors(artifacts, name):
    """Putting another tensor where the recorded one was would leave a stale view or output: the recording
    finds that, records again on tensors of the model's own and copies each call's inputs into them."""
    reference = identity_and_view_models()[name][1]
    model = HostModel(artifacts[name])
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    for k in range(6):
        if k == 2:
            x[...] = x * -2  # the same array, refilled
        elif k == 4:
            x = x + 1
            x.flags.writeable = False  # read-only
        elif k == 5:
            x = np.asfortranarray(x + 1)  # not C-contiguous
        elif k:
            x = x + 1  # a new array
        got = model.run({"x": x})
        for g, w in zip(got, reference(x), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert model.executor == "direct calls" and model._direct.fixed_inputs and model._direct.recorded
    assert model._direct.replayed_by == "one native call"
    assert model._fast is not None  # the app's call: the arrays copied into the recorded tensors, then the calls


def test_a_branching_main_keeps_the_vm_and_says_why(compiled, tmp_path):
    art = compiled(branching_model(tmp_path / "branching.onnx"), "host", "cpu")
    model = HostModel(art)
    assert model.executor == "relax vm: main branches (If): its calls can differ from run to run"
    for x in ([[1, 2, 3, -1]], [[-1, -2, 3, -1]], [[1, 2, 3, -1]]):
        x = np.array(x, np.float32)
        np.testing.assert_array_equal(model.run({"x": x})[0], x + 1 if x.sum() > 0 else x - 1)


def test_tvmgen_run_says_which_executor_ran(tvmgen_inprocess, artifacts):
    import json

    r = tvmgen_inprocess("run", artifacts["two_outputs"], "--json", "--repeat", "2")
    assert r.returncode == 0, r.output
    said = json.loads(r.stdout)
    assert said["executor"] == "direct calls" and said["replay"] == "one native call", said
    r = tvmgen_inprocess("run", artifacts["two_outputs"], "--vm", "--repeat", "2")
    assert r.returncode == 0, r.output
    assert "main ran on the relax vm: direct calls are turned off" in r.stderr


def test_without_tvmgen_replay_the_calls_are_made_from_python(artifacts, monkeypatch):
    """A model library compiled by an older tvmgen has no tvmgen_replay: each recorded call is made from Python
    (as the plan's refusal here), with the same outputs, and replayed_by says so."""
    from tvmgen.runtime.direct_calls import DirectCalls

    monkeypatch.setattr(DirectCalls, "_native_plan", lambda self, names, inputs, outs: "python: refused here")
    direct, vm = HostModel(artifacts["two_outputs"]), HostModel(artifacts["two_outputs"], direct_calls=False)
    for k, inputs in enumerate(frames(direct.inputs, seed=3)):
        got, want = direct.run(inputs), vm.run(inputs)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), k
    assert direct.executor == "direct calls" and direct.replayed_by == "python: refused here"
    assert direct._direct._native is None


def large_output_models():
    """Outputs of 128 KB (over runner.FRESH_OUTPUT_BYTES): ``two`` has a product's output that a softmax also
    reads (the kernels write into the caller's new arrays, the later one reading the earlier one's), ``view``
    one whose reshape (a view of its memory, ``vm.builtin.reshape``) another product reads: that output stays the
    runtime's tensor and is copied out, else the second product would read the recorded tensor's old values;
    ``constant`` returns the bias its product's kernel adds: it keeps its tensor too (TVM returns a constant of
    its own beside the kernel's; only tensors the run allocated are ever replaced, should the two be one)."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((32, 512)).astype(np.float32) / 8, "w")
    two = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]), helper.make_node("Softmax", ["logits"], ["p"], axis=-1)],
        [x],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [64, 512]),
            helper.make_tensor_value_info("p", TensorProto.FLOAT, [64, 512]),
        ],
        [w],
    )
    shape = numpy_helper.from_array(np.array([128, 256], np.int64), "shape")
    w2 = numpy_helper.from_array(np.random.default_rng(4).standard_normal((256, 8)).astype(np.float32), "w2")
    view = onnx_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["logits"]),
            helper.make_node("Reshape", ["logits", "shape"], ["rows"]),
            helper.make_node("MatMul", ["rows", "w2"], ["y"]),
        ],
        [x],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [64, 512]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 8]),
        ],
        [w, shape, w2],
    )
    # main returns a constant that a kernel also reads: it must keep its tensor (and its values)
    b = numpy_helper.from_array(np.random.default_rng(5).standard_normal((64, 512)).astype(np.float32), "b")
    constant = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]), helper.make_node("Add", ["logits", "b"], ["y"])],
        [x],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 512]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [64, 512]),
        ],
        [w, b],
    )
    return {"two": two, "view": view, "constant": constant}


@pytest.mark.parametrize("name", ["two", "view", "constant"])
def test_large_outputs_are_written_into_new_arrays_of_the_callers(tmp_path_factory, compiled, name):
    """The frame-after-frame call writes an output of 64 KB or more straight into a new, 64-byte aligned array
    of the caller's (a CTC head's 2.9 MB of probabilities cost 0.23-0.28 ms a run to copy out), with the
    recorded tensors put back in the native arguments afterwards; an output that is a view of another
    tensor is copied as before. Every run equals the VM's bit for bit, and keeps its own arrays."""
    path = save_onnx(large_output_models()[name], tmp_path_factory.mktemp("fresh") / f"{name}.onnx")
    art = compiled(path, name=f"fresh_{name}")
    direct, vm = HostModel(art), HostModel(art, direct_calls=False)
    frame = random_inputs(direct.inputs, 7)
    direct.run(frame)
    direct.run(frame)  # recorded, then the first replay: the fast path from here on
    assert direct.replayed_by == "one native call"
    replaceable = [direct._direct.output_replaceable(k) for k in range(len(direct.outputs))]
    assert replaceable == {"two": [True, True], "view": [False, True], "constant": [True, False]}[name]
    # written into the caller's arrays: the replaceable outputs of 64 KB or more (the view model's 4 KB `y` is copied)
    written = [r and s.nbytes >= FRESH_OUTPUT_BYTES for r, s in zip(replaceable, vm.run(frame), strict=True)]
    assert written == {"two": [True, True], "view": [False, False], "constant": [True, False]}[name]
    recorded = direct._direct._packed.copy()
    kept = []
    for k in range(3):
        frame["x"][...] = random_inputs(direct.inputs, 10 + k)["x"]  # the next frame, in the same array
        got, want = direct.run(frame), vm.run(frame)
        for g, w, fresh in zip(got, want, written, strict=True):
            assert np.array_equal(g, w), (name, k)
            assert g.flags.c_contiguous and g.flags.writeable and (g.ctypes.data % 64 == 0 or not fresh)
        kept.append((got, want))
        assert np.array_equal(direct._direct._packed, recorded)  # the recorded tensors back in their places
    for got, want in kept:  # a later run left each run's arrays alone
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert len({id(g) for got, _ in kept for g in got}) == 3 * len(direct.outputs)
    # the other paths, on the recorded tensors, after the fast path: out= arrays, repeats, other inputs
    other = random_inputs(direct.inputs, 30)
    want = vm.run(other)
    for got in (direct.run(other, out=[np.empty_like(w) for w in want]), direct.run(other, repeat=2)):
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


def input_models():
    """``input_view``: a builtin keeps a view of the input (a reshape of ``x`` that a product reads: an audio
    model's unsqueeze, a flatten), which the kernels read, so the view moves with the input (a view of the same
    shape on the bound bytes); ``input_returned``: main returns its input, which keeps the runtime's tensor and
    is copied into."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])
    shape = numpy_helper.from_array(np.array([32, 64], np.int64), "shape")
    w = numpy_helper.from_array(np.random.default_rng(6).standard_normal((64, 512)).astype(np.float32) / 8, "w")
    view = onnx_model(
        [helper.make_node("Reshape", ["x", "shape"], ["rows"]), helper.make_node("MatMul", ["rows", "w"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 512])],
        [shape, w],
    )
    w2 = numpy_helper.from_array(np.random.default_rng(7).standard_normal((32, 512)).astype(np.float32) / 8, "w2")
    returned = onnx_model(
        [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("MatMul", ["x", "w2"], ["y"])],
        [x],
        [
            helper.make_tensor_value_info("same", TensorProto.FLOAT, [64, 32]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 512]),
        ],
        [w2],
    )
    return {"input_view": view, "input_returned": returned}


# per model: which inputs the kernels read from the caller's bound bytes, which outputs they write there
IN_PLACE = {
    "two": ([True], [True, True]),
    "view": ([True], [False, True]),
    "constant": ([True], [True, False]),
    "input_view": ([True], [True]),
    "input_returned": ([False], [False, True]),
}


def bound_model(name: str, tmp_path_factory, compiled):
    """(artifact, two frames of inputs, the VM's outputs for each) of a model of ``IN_PLACE``."""
    model = input_models()[name] if name.startswith("input_") else large_output_models()[name]
    path = save_onnx(model, tmp_path_factory.mktemp("fresh") / f"{name}.onnx")
    art = compiled(path, name=f"fresh_{name}")
    frames_ = [random_inputs(HostModel(art).inputs, seed) for seed in (7, 8)]
    vm = HostModel(art, direct_calls=False)
    return art, frames_, [vm.run(f) for f in frames_]


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_the_native_runtime_reads_and_writes_bound_buffers_in_place(
    tmp_path_factory, tmp_path, compiled, host_runtime, name
):
    """Model::BindInput / BindOutput, through tvmgen-run (which binds 64-byte aligned buffers): from the second
    run the kernels read each input no builtin keeps a view of from the caller's bytes, and write each output that
    is a buffer of the run's own there (no copy in or out); the others are copied. Every output equals the VM's
    bit for bit. --vm (no direct calls) copies everything."""
    import json

    from fixtures_runtime import run_native

    art, (frame, _), (want, _) = bound_model(name, tmp_path_factory, compiled)
    ins, outs = IN_PLACE[name]
    for extra, expected in ((("--warmup", "1"), (ins, outs)), (("--vm",), ([False] * len(ins), [False] * len(outs)))):
        proc, got = run_native(host_runtime, art, frame, tmp_path, *extra, tag=extra[0][2:], repeat=3)
        assert proc.returncode == 0, proc.stderr
        said = json.loads(proc.stdout.strip().splitlines()[-1])
        assert (said["inputs_in_place"], said["outputs_in_place"]) == expected, (name, extra, said)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), (name, extra)


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_java_bound_inputs_and_outputs(tmp_path_factory, tmp_path, compiled, java_build, name):
    """Model.bindInput / bindOutput (tests/java/BindCheck.java): aligned tensors from allocateInput / allocateOutput
    are read / written in place from the second run where the kernels can, else copied; a new frame written
    into the bound input is what the next run reads; binding another output tensor leaves the latest run's
    outputs readable; a tensor off the 64-byte boundary is copied into; unbound, the input keeps its last
    bytes and setInput / getOutput copy as before. Every file equals the VM's output bit for bit."""
    import json

    from java_support import java

    art, frames_, wants = bound_model(name, tmp_path_factory, compiled)
    for k, frame in enumerate(frames_, 1):
        for name_, v in frame.items():
            v.astype(v.dtype.newbyteorder("<")).tofile(tmp_path / f"{name_}.{k}.bin")
    p = java(java_build, "BindCheck", art, tmp_path, tmp_path / "out")
    assert p.returncode == 0, p.stdout + p.stderr
    ins, outs = IN_PLACE[name]
    copied = ([False] * len(ins), [False] * len(outs))
    unaligned = (ins, [False] * len(outs))
    said = [tuple(r) for r in json.loads(p.stdout.strip().splitlines()[-1])["runs"]]
    assert said == [copied, (ins, outs), (ins, outs), unaligned, copied, copied], said
    for stage, want in (("bound", 0), ("frame2", 1), ("rebound", 1), ("unaligned", 1), ("unbound", 1), ("again", 0)):
        for k, w in enumerate(wants[want]):
            got = np.fromfile(tmp_path / "out" / f"{stage}_{k}.bin", dtype=w.dtype).reshape(w.shape)
            assert np.array_equal(got, w), (name, stage, k)
