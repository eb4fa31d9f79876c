"""Issue 52, import side: TFLite resource variables become explicit state (one more input and output of
``main`` per variable, the initial value from the CALL_ONCE init subgraph), and quantized STRIDED_SLICE,
SLICE, SPLIT and SPLIT_V move the 8-bit values exactly as LiteRT does.

The compiled function is run here through TVM's VM with the state threaded by the test itself (each
step's state outputs are the next step's state inputs, from ``initial``), against LiteRT on the
original model, which keeps its variables between ``invoke()`` calls (``reference_sequence``). The
runtimes that hold the state between runs have tests of their own."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from conftest import REPO, require_tool, unavailable

sys.path.insert(0, str(REPO / "benchmarks"))

STEPS = 24


def vm_main(artifact):
    """The artifact's ``main`` in TVM's Python VM: inputs by name -> outputs in order."""
    import tvm
    from tvm import relax

    from tvmgen.core.artifact import load

    manifest = load(artifact)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(artifact / manifest.export["library"])), tvm.cpu())
    names = [s.name for s in manifest.inputs]

    def run(inputs: dict) -> list[np.ndarray]:
        out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(inputs[n])) for n in names])
        return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]

    return run


def run_steps(main, imported, steps: list[dict]) -> tuple[list[list[np.ndarray]], list[dict]]:
    """``main`` over ``steps`` (own inputs) from the initial state: (each step's own outputs, each step's
    state after it, by state input name)."""
    state = {s.input: s.initial if s.initial is not None else np.zeros(s.shape, s.dtype) for s in imported.state}
    own = len(imported.output_names) - len(imported.state)
    outputs, states = [], []
    for inputs in steps:
        result = main({**inputs, **state})
        state = {s.input: result[own + k] for k, s in enumerate(imported.state)}
        outputs.append(result[:own])
        states.append(state)
    return outputs, states


def first_read_quantization(model: bytes) -> tuple[float, int]:
    """(scale, zero point) of the first READ_VARIABLE's output in subgraph 0 of ``model``."""
    from ai_edge_litert import schema_py_generated as fb

    m = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(model, 0))
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    sub = m.subgraphs[0]
    for op in sub.operators:
        code = m.operatorCodes[op.opcodeIndex]
        if names[max(code.builtinCode, code.deprecatedBuiltinCode)] == "READ_VARIABLE":
            q = sub.tensors[op.outputs[0]].quantization
            return float(q.scale[0]), int(q.zeroPoint[0])
    raise AssertionError("no READ_VARIABLE")


# ----------------------------------------------------------------- the zoo's streaming keyword spotter


@pytest.fixture(scope="module")
def spotter(tmp_path_factory):
    """The zoo's spotter with a seeded, non-zero initial ring buffer: (path, the initializer)."""
    import zoo_streaming

    initial = np.random.default_rng(7).uniform(-0.9, 0.9, (1, zoo_streaming.FRAMES, zoo_streaming.BINS))
    path = zoo_streaming.streaming_kws_int8(tmp_path_factory.mktemp("kws") / "kws.tflite", initial.astype(np.float32))
    return path, initial


@pytest.fixture(scope="module")
def spotter_model(spotter):
    from tvmgen import frontends

    return frontends.load(spotter[0], [])


def test_the_ring_buffer_becomes_int8_state_starting_at_its_initializer(spotter, spotter_model):
    import zoo_streaming

    path, initializer = spotter
    m = spotter_model
    shape = (1, zoo_streaming.FRAMES, zoo_streaming.BINS)
    (s,) = m.state
    assert (s.input, s.output, s.shape, s.dtype) == ("state:ring", "next_state:ring", shape, "int8")
    assert [(i.name, i.shape, i.dtype) for i in m.inputs] == [
        ("serving_default_features:0", (1, 3, 40), "int8"),
        ("state:ring", shape, "int8"),
    ]
    assert m.output_names == ["StatefulPartitionedCall:0", "next_state:ring"]
    # the initial value: the initializer as the converter quantised it (the variable's own integers)
    scale, zero = first_read_quantization(path.read_bytes())
    expected = np.clip(np.round(initializer / scale) + zero, -128, 127)
    assert s.initial.dtype == np.int8 and s.initial.shape == shape and np.ptp(s.initial.astype(np.int64)) > 100
    assert np.abs(s.initial.astype(np.int64) - expected).max() <= 1  # the converter's own rounding at halves
    assert np.mean(s.initial == expected) > 0.99
    params = [(str(p.name), str(p.ty.dtype)) for p in m.mod["main"].params[:2]]
    assert params == [("serving_default_features:0", "int8"), ("state:ring", "int8")]
    assert any("made explicit state" in n for n in m.notes)


def test_compiled_spotter_matches_litert_step_by_step(spotter, spotter_model, compiled):
    """24 seeded steps from the initial state, the state threaded through main's inputs and outputs: every
    step's probability equals LiteRT's, and the ring buffer is the last 24 frames of the initial buffer and
    the features, integer for integer."""
    path, _ = spotter
    m = spotter_model
    rng = np.random.default_rng(11)
    steps = [{"serving_default_features:0": rng.integers(-128, 128, (1, 3, 40), dtype=np.int8)} for _ in range(STEPS)]
    outputs, states = run_steps(vm_main(compiled(path, name="streaming_kws_int8")), m, steps)
    expected = m.reference_sequence(steps)
    assert len(expected) == STEPS
    got = np.array([o[0].item() for o in outputs])
    want = np.array([e[0].item() for e in expected])
    assert outputs[0][0].dtype == np.uint8 and len(set(want)) > 10  # the probability moves with the input
    # TVM computes the convolutions and dense layers in float, LiteRT in fixed point: an output within a
    # float rounding of a half could round the other way. Here every step is exact.
    np.testing.assert_array_equal(got, want)
    ring = m.state[0].initial
    for k, (x, state) in enumerate(zip(steps, states)):
        ring = np.concatenate([ring, x["serving_default_features:0"]], axis=1)[:, 3:]
        np.testing.assert_array_equal(state["state:ring"], ring, err_msg=f"step {k}")
    # the functional reference (LiteRT on the model as a function of its state) is one step of the sequence
    first = m.reference({**steps[0], "state:ring": m.state[0].initial})
    assert first[0].item() == want[0] and np.array_equal(first[1], states[0]["state:ring"])


def test_spotter_on_linux_aarch64_matches_litert_step_by_step(spotter, spotter_model, compiled, tmp_path):
    """The cross build, run under qemu-aarch64 by the aarch64 tvmgen-run holding the state (one --sequence
    run of 20 seeded steps), equals LiteRT's sequence exactly: --check's sequence comparison at zero tolerance."""
    require_tool("aarch64-linux-gnu-g++")
    from tvmgen.core.artifact import load
    from tvmgen.runtime import check

    out = compiled(spotter[0], "linux-aarch64", name="streaming_kws_int8")
    manifest = load(out)
    assert manifest.platform == "linux-aarch64"
    assert [s.name for s in manifest.inputs] == ["serving_default_features:0", "state:ring"]
    assert [s["input"] for s in manifest.state] == ["state:ring"]
    elf = (out / manifest.export["library"]).read_bytes()[:20]
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64
    runner, why = check.aarch64_runner()
    if runner is None:
        unavailable(why)  # qemu-user and the aarch64 C library come with scripts/bootstrap.sh: a failure under CI
    first = check.check_sequence(spotter_model, check.Aarch64Run(runner, out, tmp_path), rtol=0.0, atol=0.0, seed=3)
    assert set(first) == {"serving_default_features:0"}  # the state is the runtime's, never a step's input


def test_a_state_input_keeps_its_shape(spotter):
    from tvmgen import frontends
    from tvmgen.core.errors import InputError
    from tvmgen.frontends.base import InputOverride

    with pytest.raises(InputError, match="state of the model's resource variable 'ring'"):
        frontends.load(spotter[0], [InputOverride("state:ring", (1, 12, 40), None)])


# ----------------------------------------------------------------- two variables, two dtypes


def two_variable_model(path, assign_count: bool = True):
    """A float32 counter (read, incremented, read again: the second read sees the new value) and an int8
    history buffer (slice, concat, assign), in a float model. ``assign_count=False``: the counter's
    ASSIGN_VARIABLE is taken out of the file, so the counter is read and never written."""
    import tensorflow as tf
    from ai_edge_litert import schema_py_generated as fb

    from tvmgen.frontends.tflite_fold import pack, unpack

    class Counter(tf.Module):
        def __init__(self):
            super().__init__()
            self.count = tf.Variable([2.5], dtype=tf.float32, trainable=False, name="count")
            self.hist = tf.Variable(np.arange(1, 13, dtype=np.int8).reshape(1, 4, 3), trainable=False, name="hist")

        @tf.function(
            input_signature=[
                tf.TensorSpec([1, 3], tf.float32, name="x"),
                tf.TensorSpec([1, 1, 3], tf.int8, name="q"),
            ]
        )
        def __call__(self, x, q):
            before = self.count.read_value()
            self.count.assign_add([1.0])
            after = self.count.read_value()
            h = tf.concat([self.hist[:, 1:], q], axis=1)
            self.hist.assign(h)
            total = tf.reduce_sum(tf.cast(h, tf.float32), axis=1)
            return {"y": x * after + total * tf.constant([[0.5, -1.0, 2.0]]) - before, "oldest": h[:, 0, :]}

    module = Counter()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    converter.experimental_enable_resource_variables = True
    model = converter.convert()
    if not assign_count:
        m = unpack(model)
        names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
        sub = m.subgraphs[0]

        def name(op):
            c = m.operatorCodes[op.opcodeIndex]
            return names[max(c.builtinCode, c.deprecatedBuiltinCode)]

        handle = next(
            op.outputs[0]
            for op in sub.operators
            if name(op) == "VAR_HANDLE" and b"count" in op.builtinOptions.sharedName
        )
        sub.operators = [op for op in sub.operators if not (name(op) == "ASSIGN_VARIABLE" and op.inputs[0] == handle)]
        model = pack(m, len(model))
    path.write_bytes(model)
    return path


@pytest.mark.parametrize("assign_count", [True, False], ids=["assigned", "never-assigned"])
def test_two_variables_of_different_dtypes_thread_through_main(assign_count, tmp_path, compiled):
    from tvmgen import frontends

    path = two_variable_model(tmp_path / f"counter-{assign_count}.tflite", assign_count)
    m = frontends.load(path, [])
    assert [(s.input, s.output, s.shape, s.dtype) for s in m.state] == [
        ("state:count", "next_state:count", (1,), "float32"),
        ("state:hist", "next_state:hist", (1, 4, 3), "int8"),
    ]
    np.testing.assert_array_equal(m.state[0].initial, [2.5])
    np.testing.assert_array_equal(m.state[1].initial, np.arange(1, 13).reshape(1, 4, 3))
    assert [s.name for s in m.inputs][2:] == ["state:count", "state:hist"]
    assert m.output_names[-2:] == ["next_state:count", "next_state:hist"]
    own = [s for s in m.inputs if not s.name.startswith("state:")]
    rng = np.random.default_rng(3)
    steps = [
        {
            s.name: rng.standard_normal(s.shape).astype(s.dtype)
            if s.dtype == "float32"
            else rng.integers(-128, 128, s.shape, dtype=np.int8)
            for s in own
        }
        for _ in range(20)
    ]
    outputs, states = run_steps(vm_main(compiled(path, name=path.stem)), m, steps)
    expected = m.reference_sequence(steps)
    for k, (got, want) in enumerate(zip(outputs, expected)):
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            if a.dtype == np.float32:
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-5, err_msg=f"step {k}")
            else:
                np.testing.assert_array_equal(a, b, err_msg=f"step {k}")
    counts = [s["state:count"].item() for s in states]
    assert counts == ([3.5 + k for k in range(20)] if assign_count else [2.5] * 20)
    q_name = next(s.name for s in own if s.dtype == "int8")
    np.testing.assert_array_equal(states[-1]["state:hist"][0], np.concatenate([x[q_name] for x in steps[-4:]], 1)[0])


# ----------------------------------------------------------------- quantized slicing and splitting alone


def int8_model(fn, shape):
    """``fn`` converted full-integer: int8 in and out, a seeded representative dataset."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    converter.representative_dataset = lambda: ([rng.uniform(-2, 2, shape).astype(np.float32)] for _ in range(16))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    with warnings.catch_warnings():  # int8 inputs: the converter needs no float statistics for them
        warnings.filterwarnings("ignore", "Statistics for quantized inputs", UserWarning)
        return converter.convert()


def slicing_model(op: str) -> bytes:
    import tensorflow as tf

    spec = [tf.TensorSpec([1, 9, 40], tf.float32, name="x")]
    functions = {
        "STRIDED_SLICE": tf.function(lambda x: x[:, 1:8:2, 3:-2], input_signature=spec),
        "SLICE": tf.function(lambda x: tf.slice(x, [0, 2, 5], [1, 4, -1]), input_signature=spec),
        "SPLIT": tf.function(lambda x: tf.split(x, 3, axis=1), input_signature=spec),
        "SPLIT_V": tf.function(lambda x: tf.split(x, [2, 3, 4], axis=1), input_signature=spec),
    }
    return int8_model(functions[op], (1, 9, 40))


def other_output_quantization(model: bytes) -> bytes:
    """``model`` with its first output declared at another scale and zero point than its input."""
    from tvmgen.frontends.tflite_fold import pack, unpack

    m = unpack(model)
    sub = m.subgraphs[0]
    q = sub.tensors[sub.outputs[0]].quantization
    q.scale, q.zeroPoint = [float(q.scale[0]) * 2.0], [int(q.zeroPoint[0]) + 5]
    return pack(m, len(model))


@pytest.mark.parametrize(
    "op,other",
    [
        ("STRIDED_SLICE", False),
        ("SPLIT_V", False),
        ("SLICE", False),
        ("SPLIT", False),
        ("STRIDED_SLICE", True),
        ("SPLIT_V", True),
    ],
    ids=["strided_slice", "split_v", "slice", "split", "strided_slice-other-scale", "split_v-other-scale"],
)
def test_quantized_slicing_moves_the_integers_as_litert_does(op, other, tmp_path, compiled):
    """Exact against LiteRT. Its kernels copy the 8-bit values whatever scale and zero point the output
    declares (``other``: an output declared at twice the scale, zero point + 5; LiteRT still copies), and
    so does the import."""
    import zoo_streaming
    from tvmgen import frontends

    model = slicing_model(op)
    assert zoo_streaming.operator_names(model) == [op]
    if other:
        model = other_output_quantization(model)
    path = tmp_path / f"{op.lower()}{'-other' if other else ''}.tflite"
    path.write_bytes(model)
    m = frontends.load(path, [])
    assert m.state == [] and m.inputs[0].dtype == "int8"
    x = np.random.default_rng(5).integers(-128, 128, (1, 9, 40), dtype=np.int8)
    got = vm_main(compiled(path, name=path.stem))({m.inputs[0].name: x})
    want = m.reference({m.inputs[0].name: x})
    assert len(got) == len(want) == len(m.output_names) >= 1
    for a, b in zip(got, want):
        assert a.dtype == np.int8
        np.testing.assert_array_equal(a, b)
    if other:  # LiteRT copied the integers: the check above is not one of requantised values
        np.testing.assert_array_equal(want[0], x[:, 1:8:2, 3:-2] if op == "STRIDED_SLICE" else x[:, :2])
