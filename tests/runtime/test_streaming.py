"""Streaming state held by the runtime: an ONNX model with explicit state pairs (the zoo's stream_gru: a
frame ring buffer and a GRU state) compiled once with --state, run step by step through `tvmgen run
--sequence` and the Python runner, against onnxruntime with the state threaded by the test."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

PAIRS = ["h0=hn", "frames_in=frames_out"]
STEPS = 20
TOL = 1e-4 + 1e-3  # --check's limit (atol + rtol x the largest output): the logits stay below 1


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    import zoo

    return zoo.build("stream_gru", tmp_path_factory.mktemp("stream"))[0]


@pytest.fixture(scope="module")
def art(model_path, compiled):
    return compiled(model_path, name="stream_gru", state=PAIRS)


def steps_of(n: int = STEPS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 40)).astype("float32")} for _ in range(n)]


def onnxruntime_steps(model_path, steps, h=None, frames=None) -> tuple[list, np.ndarray, np.ndarray]:
    """The logits of each step, the state threaded here; and the state after the last step."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    h = np.zeros((1, 64), "float32") if h is None else h
    frames = np.zeros((1, 40, 3), "float32") if frames is None else frames
    logits = []
    for step in steps:
        y, frames, h = sess.run(None, {"x": step["x"], "frames_in": frames, "h0": h})
        logits.append(y)
    return logits, h, frames


def write_sequence(directory, steps):
    for k, step in enumerate(steps):
        (directory / f"{k:06d}").mkdir(parents=True)
        np.save(directory / f"{k:06d}" / "x.npy", step["x"])
    return directory


def test_manifest_lists_the_state_and_the_callers_tensors(art):
    from tvmgen.core import artifact

    m = artifact.load(art)
    assert m.state == [
        {"input": "h0", "output": "hn", "shape": [1, 64], "dtype": "float32", "initial": None},
        {"input": "frames_in", "output": "frames_out", "shape": [1, 40, 3], "dtype": "float32", "initial": None},
    ]
    assert [s.name for s in m.inputs] == ["x", "frames_in", "h0"]  # main's signature is unchanged
    assert [s.name for s in m.own_inputs] == ["x"] and [s.name for s in m.own_outputs] == ["logits"]
    assert artifact.Manifest.from_json(json.loads(json.dumps(m.to_json()))).state == m.state
    assert "state" not in artifact.Manifest.from_json({**m.to_json(), "state": []}).to_json()


def test_run_sequence_matches_onnxruntime_step_by_step(art, model_path, tvmgen, tmp_path):
    steps = steps_of()
    seq = write_sequence(tmp_path / "seq", steps)
    r = tvmgen("run", art, "--sequence", seq, "-o", tmp_path / "out", "--json")
    assert r.returncode == 0, r.stderr
    expected, _, _ = onnxruntime_steps(model_path, steps)
    got = [np.load(tmp_path / "out" / f"{k:06d}" / "logits.npy") for k in range(STEPS)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"{k:06d}" for k in range(STEPS)]
    for k in range(STEPS):
        np.testing.assert_allclose(got[k], expected[k], atol=TOL, err_msg=f"step {k}")
    # the state matters: a step run from zeros (no state carried) is far from the threaded one
    fresh, _, _ = onnxruntime_steps(model_path, steps[-1:])
    assert np.abs(fresh[0] - expected[-1]).max() > 50 * TOL
    doc = json.loads(r.stdout)
    seq_doc = doc["sequence"]
    assert seq_doc["steps"] == STEPS and len(seq_doc["step_ms"]) == STEPS and seq_doc["state_carried"]
    assert 0 < seq_doc["median_ms"] <= seq_doc["p90_ms"] <= seq_doc["max_ms"] == max(seq_doc["step_ms"])
    assert doc["per_step"] and doc["state"] == [
        {"input": "h0", "output": "hn"},
        {"input": "frames_in", "output": "frames_out"},
    ]
    assert [o["name"] for o in doc["outputs"]] == ["logits"]
    from tvmgen.reports import results

    [run] = results.read_run(doc, "r.json")
    assert run.label == "stream_gru (per step)" and any("each timed run is one step" in n for n in run.notes)
    assert len(run.samples_ms) == STEPS - 1  # the steps after the first: the report's steady runs


def test_steps_from_one_refilled_array_equal_the_vm(art):
    """An app's loop: one input array refilled each step (HostModel's one-function call once the direct calls
    are recorded, the new held values copied into their buffers), a state set and reset between steps. Every
    step's outputs and the held state equal the Relax VM's, bit for bit."""
    from tvmgen.runtime.runner import HostModel

    direct, vm = HostModel(art), HostModel(art, direct_calls=False)
    x = np.empty((1, 40), np.float32)
    for k, step in enumerate(steps_of(12, seed=4)):
        if k == 6:
            h = np.full((1, 64), 0.25, np.float32)
            direct.set_state("h0", h)
            vm.set_state("h0", h)
        if k == 9:
            direct.reset_state()
            vm.reset_state()
        x[...] = step["x"]
        got, want = direct.run({"x": x}), vm.run(step)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), k
        for name in ("h0", "frames_in"):
            np.testing.assert_array_equal(direct.get_state(name), vm.get_state(name))
    assert direct._fast is not None and direct.executor == "direct calls"
    assert direct._direct.replayed_by == "one native call"  # the held values' buffers among its arguments
    assert direct._direct.copies_state  # and the new values copied into them at its end (tvmgen_copy)


def test_reset_get_and_set_state(art, model_path):
    from tvmgen.core.errors import InputError
    from tvmgen.runtime.runner import HostModel

    steps = steps_of(8, seed=3)
    model = HostModel(art)
    assert model.executor == "direct calls"  # the held values in fixed buffers (HeldState.pin), copied into
    first = model.run(steps[0])[0]
    for s in steps[1:5]:
        model.run(s)
    _, h, frames = onnxruntime_steps(model_path, steps[:5])
    np.testing.assert_allclose(model.get_state("h0"), h, atol=1e-5)
    np.testing.assert_allclose(model.get_state(1), frames, atol=1e-6)  # by index: frames_in is the second pair
    saved = {"h0": model.get_state("h0"), "frames_in": model.get_state("frames_in")}
    after = [model.run(s)[0] for s in steps[5:]]
    expected, _, _ = onnxruntime_steps(model_path, steps[5:], h, frames)
    np.testing.assert_allclose(np.concatenate(after), np.concatenate(expected), atol=TOL)
    model.reset_state()
    np.testing.assert_array_equal(model.run(steps[0])[0], first)  # reset: back to step 0
    for name, value in saved.items():
        model.set_state(name, value)
    again = [model.run(s)[0] for s in steps[5:]]
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate(after))  # restored: the same run
    vm = HostModel(art, direct_calls=False)  # the Relax VM every step: the same values, bit for bit
    for name, value in saved.items():
        vm.set_state(name, value)
    np.testing.assert_array_equal(np.concatenate([vm.run(s)[0] for s in steps[5:]]), np.concatenate(after))
    np.testing.assert_array_equal(vm.get_state("h0"), model.get_state("h0"))
    with pytest.raises(InputError, match=r"state 'h0' is float32\[1, 64\].*float32\[1, 32\]"):
        model.set_state("h0", np.zeros((1, 32), "float32"))
    with pytest.raises(InputError, match="'c0' is not a state of this model"):
        model.get_state("c0")
    with pytest.raises(InputError, match=r"(?s)h0 is a state input.*set_state"):
        model.run({"x": steps[0]["x"], "h0": saved["h0"]})


def test_check_runs_a_sequence_with_the_state_carried(art, tvmgen, tmp_path):
    r = tvmgen("run", art, "--check", "--repeat", "2")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("logits vs onnxruntime"))
    assert f"{STEPS} steps in order from the initial state, state carried" in line
    assert float(line.split("max abs error ")[1].split()[0]) <= TOL


def test_compile_check_prints_the_sequence_check(model_path, tvmgen, tmp_path):
    out = tmp_path / "a"
    r = tvmgen("compile", model_path, *(f"--state={p}" for p in PAIRS), "--check", "-o", out)
    assert r.returncode == 0, r.stderr
    assert f"Checking {STEPS} steps in order against onnxruntime" in r.stderr
    assert f"checked {STEPS} steps in order, state carried (h0 -> hn, frames_in -> frames_out)" in r.stderr
    assert "ok logits: max abs error" in r.stderr and "FAIL" not in r.stderr
    assert "state h0 -> hn (1x64 float32): held by the runtime" in r.stderr


def test_obvious_pairs_are_proposed_not_applied(model_path, tvmgen, tmp_path):
    from tvmgen.core import artifact

    r = tvmgen("compile", model_path, "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert "this model looks streaming" in text and "add --state frames_in=frames_out --state h0=hn" in text
    assert "Not applied" in text
    m = artifact.load(tmp_path / "a")
    assert m.state == [] and [s.name for s in m.own_inputs] == ["x", "frames_in", "h0"]
    assert "state" not in json.loads((tmp_path / "a" / "manifest.json").read_text())


def test_proposals_follow_names_shapes_and_dtypes():
    from tvmgen.core.model import ImportedModel, StateSpec, TensorSpec
    from tvmgen.frontends import state_pairs

    def model(inputs, outputs):
        from tvm import relax

        bb = relax.BlockBuilder()
        params = [relax.Var(n, relax.TensorType(s, d)) for n, s, d in inputs]
        with bb.function("main", params):
            outs = [bb.emit(relax.op.zeros(relax.ShapeExpr(s), d)) for _, s, d in outputs]
            bb.emit_func_output(relax.Tuple(outs))
        return ImportedModel(
            mod=bb.get(),
            params=[],
            inputs=[TensorSpec(n, s, d) for n, s, d in inputs],
            output_names=[n for n, _, _ in outputs],
            format="onnx",
            reference_name="none",
            reference=lambda x: [],
        )

    m = model(
        [
            ("x", (1, 8), "float32"),
            ("state", (2, 1, 16), "float32"),
            ("c0", (1, 4), "float32"),
            ("cache_in", (3,), "int32"),
        ],
        [
            ("y", (1, 8), "float32"),
            ("stateN", (2, 1, 16), "float32"),
            ("cn", (1, 5), "float32"),
            ("cache_out", (3,), "int32"),
        ],
    )
    proposed = [(p.input, p.output) for p in state_pairs.propose(m)]
    assert proposed == [("state", "stateN"), ("cache_in", "cache_out")]  # c0 -> cn differ in shape: not obvious
    m.state = [StateSpec("state", "stateN", (2, 1, 16), "float32")]
    assert [(p.input, p.output) for p in state_pairs.propose(m)] == [("cache_in", "cache_out")]


@pytest.mark.parametrize(
    "flag, message",
    [
        ("h1=hn", r"--state h1=hn: the model has no input 'h1'"),
        ("hn=h0", r"no input 'hn' \('hn' is an output: write --state INPUT=OUTPUT\)"),
        ("h0=logits", r"input h0:1x64:float32 and output logits:1x12:float32 differ in shape \(1x64 vs 1x12\)"),
        ("h0", r"cannot read --state 'h0'"),
    ],
)
def test_bad_state_pairs_are_refused(flag, message, model_path, tvmgen_inprocess, tmp_path):
    import re

    r = tvmgen_inprocess("compile", model_path, "--state", flag, "-o", tmp_path / "a")
    assert r.returncode == 2, r.output
    assert re.search(message, " ".join(r.output.split())), r.output
    if flag != "h0":  # the model's tensors are listed in the fix
        assert "the model's inputs: x:1x40:float32, frames_in:1x40x3:float32, h0:1x64:float32" in r.output
    assert not (tmp_path / "a").exists()


def test_const_on_a_state_input_is_refused(model_path, tvmgen_inprocess, tmp_path):
    """--const binds an input for good; a state input is the runtime's to feed, run after run: refused, whether
    the pair comes from --state (ONNX binds --const before the import) or from the import (TFLite variables)."""
    from tvmgen.core.errors import InputError
    from tvmgen.core.model import ImportedModel, StateSpec, TensorSpec
    from tvmgen.frontends.base import bind_inputs

    r = tvmgen_inprocess(
        "compile", model_path, *(f"--state={p}" for p in PAIRS), "--const", "h0=0", "-o", tmp_path / "a"
    )
    assert r.returncode == 2, r.output
    text = " ".join(r.output.split())
    assert "--const names the state input h0 (next value from hn)" in text and "leave it out of --const" in text
    assert not (tmp_path / "a").exists()

    ring = StateSpec("state:ring", "next_state:ring", (1, 24, 40), "int8")
    imported = ImportedModel(
        mod=None,  # refused before the module is looked at
        params=[],
        inputs=[TensorSpec("features", (1, 3, 40), "int8"), TensorSpec(ring.input, ring.shape, ring.dtype)],
        output_names=["score", ring.output],
        format="tflite",
        reference_name="litert",
        reference=lambda x: [],
        state=[ring],
    )
    with pytest.raises(
        InputError, match=r"--const names the state input state:ring \(next value from next_state:ring\)"
    ):
        bind_inputs(imported, {"state:ring": "0"})


@pytest.mark.parametrize("broken", ["gap", "missing input", "state input"])
def test_bad_sequence_directories_are_refused_before_any_run(broken, art, tvmgen_inprocess, tmp_path):
    seq = write_sequence(tmp_path / "seq", steps_of(5))
    if broken == "gap":
        (seq / "000002").rename(seq / "000009")
        message = f"{seq} has no step 000002"
    elif broken == "missing input":
        (seq / "000003" / "x.npy").unlink()
        message = "step 000003 has no x.npy (input 'x')"
    else:
        np.save(seq / "000001" / "h0.npy", np.zeros((1, 64), "float32"))
        message = "gives the state input 'h0'"
    r = tvmgen_inprocess("run", art, "--sequence", seq, "-o", tmp_path / "out")
    assert r.returncode == 2, r.output
    assert message in " ".join(r.output.split()), r.output
    assert "Running" not in r.output and not (tmp_path / "out").exists()


def test_zoo_checks_the_streaming_entry_over_a_sequence(model_path, compiled, tmp_path):
    import zoo
    import zoo_state_pairs

    def shared_build(path, flags, platform, device):
        return compiled(path, platform, device, name="stream_gru", state=zoo_state_pairs.state_pairs(flags))

    row = zoo.run_one("stream_gru", ["host"], tmp_path, runs=1, runtimes={}, compile=shared_build)
    cell = row["targets"]["host"]
    assert cell["status"] == "ok", cell
    assert cell["max_error"] <= cell["tolerance"] < cell["input_sensitivity"] / 10


@pytest.mark.slow
def test_bench_times_steps_and_checks_a_sequence_carried_on_the_device(art, tmp_path):
    """`tvmgen bench` on tvmgen's host device server over RPC: timed per step, then steps in order with the
    state passed from step to step on the device, every step compared with onnxruntime threaded alike."""
    from conftest import require_tool
    from helpers import bench_on_a_gpu_device

    require_tool("cmake")
    res = bench_on_a_gpu_device(art, tmp_path, ports=(20600, 20690))
    assert res["per_step"] and res["warm_ms"]["count"] == 2
    seq = res["sequence"]
    assert seq["steps"] == 2 and seq["state_carried"] and len(seq["step_ms"]) == 2 and seq["median_ms"] > 0
    assert res["reference"].startswith("onnxruntime") and "2 steps in order from the initial state" in res["reference"]
    [row] = res["check"]
    assert row["name"] == "logits" and row["steps"] == 2 and row["max_abs"] <= TOL and not row["beyond"]


@pytest.mark.slow
def test_aarch64_check_runs_the_sequence_under_qemu(model_path, tvmgen, tmp_path):
    """--check of a linux-aarch64 build: the artifact's own code runs the 20 steps in one `tvmgen-run
    --sequence` under qemu-aarch64, the state held by the C++ runtime."""
    from conftest import require_tool

    require_tool("qemu-aarch64")
    r = tvmgen(
        "compile", model_path, "--platform", "linux-aarch64", *(f"--state={p}" for p in PAIRS), "--check",
        "-o", tmp_path / "a", timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "checking the linux-aarch64 build under qemu-aarch64" in r.stderr
    assert f"checked {STEPS} steps in order, state carried (h0 -> hn, frames_in -> frames_out)" in r.stderr
    assert "ok logits: max abs error" in r.stderr and "FAIL" not in r.stderr


def test_initial_values_are_artifact_files_the_runtime_starts_from(model_path, tmp_path):
    """A state with an initial value (as a TFLite variable's initializer gives): written to state/<i>.npy,
    hashed in the manifest, and where the runner starts and resets to."""
    import dataclasses

    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget
    from tvmgen.core import artifact
    from tvmgen.core.errors import InputError
    from tvmgen.runtime.runner import HostModel

    loaded = pipeline.load_model(model_path, tmp_path, state=PAIRS)
    h_init = np.random.default_rng(5).uniform(-1, 1, (1, 64)).astype("float32")
    loaded.imported.state[0] = dataclasses.replace(loaded.imported.state[0], initial=h_init)
    out = tmp_path / "a"
    m = pipeline.compile_model(loaded, BuildTarget(PLATFORMS["host"], "cpu"), out)
    assert [s["initial"] for s in m.state] == ["state/0.npy", None]
    assert "state/0.npy" in m.files and artifact.load(out).state == m.state
    np.testing.assert_array_equal(np.load(out / "state" / "0.npy"), h_init)
    model = HostModel(out)
    np.testing.assert_array_equal(model.get_state("h0"), h_init)
    steps = steps_of(3, seed=9)
    got = [model.run(s)[0] for s in steps]
    expected, _, _ = onnxruntime_steps(model_path, steps, h=h_init)
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(expected), atol=TOL)
    model.reset_state()
    np.testing.assert_array_equal(model.get_state("h0"), h_init)
    np.testing.assert_array_equal(model.get_state("frames_in"), np.zeros((1, 40, 3), "float32"))
    np.save(out / "state" / "0.npy", np.zeros((1, 64), "float32"))  # changed after the compile: refused
    with pytest.raises(InputError, match=r"state/0\.npy does not match the sha256"):
        HostModel(out)


def test_embed_readme_shows_the_callers_tensors_not_the_state(art):
    """The bundle README's snippets set the model's own first input: the state input is the runtime's."""
    from tvmgen.core import artifact
    from tvmgen.runtime import embed

    manifest = artifact.load(art)
    text = embed.readme(manifest, "host", "x86_64")
    own, held = manifest.own_inputs[0].name, manifest.state[0]["input"]
    assert f'SetInput("{own}"' in text and f'setInput("{own}"' in text
    assert f'SetInput("{held}"' not in text and f"state held by the runtime between runs: {held}" in text
