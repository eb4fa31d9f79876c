"""A streaming model's state held by the native runtime (jni/src/state.h): tvmgen-run --sequence on the CPU,
OpenCL (PoCL) and Vulkan (lavapipe), the manifest's "state" list and its errors, and the Java API
(tests/java/StateCheck.java). Every step is compared with onnxruntime, the state threaded through by the test.

The model: y = tanh(x U + h W) V + 0.5 c + 0.25 p with the state pairs h -> h_new = tanh(x U + h W),
c -> c_new = c + x and p -> p_new = x (the state input first, a state output that is the user's own input
tensor); a second one swaps two states and returns one of them as its output (y = a, a_new = b, b_new = a + x).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, onnx_model, save_onnx, unavailable
from helpers import vulkan_device

# every test needs the runtime built with CMake
pytestmark = pytest.mark.slow

N = 8
STEPS = 20
PAIRS = (("h", "h_new"), ("c", "c_new"), ("p", "p_new"))
SWAP_PAIRS = (("a", "a_new"), ("b", "b_new"))


def stream_model():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype(np.float32), name)

    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, N])

    scalars = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("half", 0.5), ("quarter", 0.25))]
    nodes = [
        helper.make_node("MatMul", ["x", "U"], ["xu"]),
        helper.make_node("MatMul", ["h", "W"], ["hw"]),
        helper.make_node("Add", ["xu", "hw"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_new"]),
        helper.make_node("Add", ["c", "x"], ["c_new"]),
        helper.make_node("Identity", ["x"], ["p_new"]),
        helper.make_node("MatMul", ["h_new", "V"], ["hv"]),
        helper.make_node("Mul", ["c", "half"], ["c2"]),
        helper.make_node("Mul", ["p", "quarter"], ["p4"]),
        helper.make_node("Add", ["hv", "c2"], ["y0"]),
        helper.make_node("Add", ["y0", "p4"], ["y"]),
    ]
    return onnx_model(
        nodes,
        [vi("h"), vi("x"), vi("c"), vi("p")],
        [vi("y"), vi("h_new"), vi("c_new"), vi("p_new")],
        [w("U", N, N), w("W", N, N), w("V", N, N), *scalars],
    )


def swap_model():
    from onnx import TensorProto, helper

    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])

    nodes = [
        helper.make_node("Identity", ["a"], ["y"]),
        helper.make_node("Identity", ["b"], ["a_new"]),
        helper.make_node("Add", ["a", "x"], ["b_new"]),
    ]
    return onnx_model(nodes, [vi("x"), vi("a"), vi("b")], [vi("y"), vi("a_new"), vi("b_new")])


def with_state(artifact: Path, dest: Path, pairs, initial: dict | None = None) -> Path:
    """A copy of ``artifact`` (compiled without state) in ``dest`` whose manifest lists ``pairs`` (input, output)
    as its state, with ``initial`` (state input -> array) written to state/K.npy and listed in manifest.files:
    an ONNX model's declared pairs (--state) start at zeros, and the runtime reads any initial value."""
    shutil.copytree(artifact, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    specs = {t["name"]: t for t in manifest["inputs"]}
    state = []
    for k, (inp, out) in enumerate(pairs):
        entry = {"input": inp, "output": out, "shape": specs[inp]["shape"], "dtype": specs[inp]["dtype"]}
        entry["initial"] = None
        if initial and inp in initial:
            rel = f"state/{k}.npy"
            (dest / "state").mkdir(exist_ok=True)
            np.save(dest / rel, initial[inp])
            data = (dest / rel).read_bytes()
            manifest["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            entry["initial"] = rel
        state.append(entry)
    manifest["state"] = state
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dest


def reference(onnx_path: Path, pairs, steps: list[dict], initial: dict | None = None) -> list[list[np.ndarray]]:
    """onnxruntime over ``steps`` (each the model's own inputs), the state fed back by hand: each step's own
    outputs."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    state = {inp: np.zeros(shapes[inp], np.float32) for inp, _ in pairs}
    state.update(initial or {})
    names = [o.name for o in sess.get_outputs()]
    state_out = {out: inp for inp, out in pairs}
    result = []
    for feed in steps:
        outs = dict(zip(names, sess.run(None, {**feed, **state})))
        state = {state_out[o]: outs[o] for o in state_out}
        result.append([v for k, v in outs.items() if k not in state_out])
    return result


def write_sequence(folder: Path, steps: list[dict]) -> Path:
    for k, feed in enumerate(steps):
        (folder / f"{k:06d}").mkdir(parents=True)
        for name, arr in feed.items():
            np.save(folder / f"{k:06d}" / f"{name}.npy", arr)
    return folder


def tvmgen_run(runtime: Path, artifact: Path, *args, env=None) -> subprocess.CompletedProcess:
    cmd = [str(runtime / "bin" / "tvmgen-run"), str(artifact), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def read_steps(out: Path, count: int, name: str = "y") -> list[np.ndarray]:
    return [np.load(out / f"{k:06d}" / f"{name}.npy") for k in range(count)]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("stream-models")
    return {"stream": save_onnx(stream_model(), d / "stream.onnx"), "swap": save_onnx(swap_model(), d / "swap.onnx")}


@pytest.fixture(scope="module")
def steps() -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, N)).astype(np.float32)} for _ in range(STEPS)]


@pytest.fixture(scope="module")
def sequence(tmp_path_factory, steps) -> Path:
    return write_sequence(tmp_path_factory.mktemp("stream-seq") / "seq", steps)


@pytest.fixture(scope="module")
def compile_stateful(tmp_path_factory):
    """``compile_stateful(model_path, device, pairs)``: the model compiled for host with its state pairs declared
    (`tvmgen compile --state IN=OUT`, through the Python API), once per module for each."""
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget

    root = tmp_path_factory.mktemp("stateful")
    done: dict = {}

    def build(model_path: Path, device: str, pairs) -> Path:
        key = (model_path, device)
        if key not in done:
            out = root / f"{model_path.stem}-{device}"
            loaded = pipeline.load_model(model_path, root, state=[f"{i}={o}" for i, o in pairs])
            pipeline.compile_model(loaded, BuildTarget(PLATFORMS["host"], device, "generic"), out)
            done[key] = out
        return done[key]

    return build


@pytest.fixture(scope="module")
def stateful(models, compile_stateful) -> Path:
    """The stream model compiled for host/cpu with its three state pairs."""
    art = compile_stateful(models["stream"], "cpu", PAIRS)
    assert [(s["input"], s["output"]) for s in json.loads((art / "manifest.json").read_text())["state"]] == list(PAIRS)
    return art


def assert_steps_match(got: list[np.ndarray], want: list[list[np.ndarray]], atol=1e-5) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w[0], atol=atol, rtol=1e-5, err_msg=f"step {k:06d}")


def test_sequence_matches_onnxruntime_step_by_step(host_runtime, models, stateful, sequence, steps, tmp_path):
    """tvmgen-run --sequence over 20 steps: every step's output matches onnxruntime with the state threaded
    through, the timings have each step's latency, and one step run alone (a fresh state) differs: the state
    is carried, not zero at every step."""
    want = reference(models["stream"], PAIRS, steps)
    out, timings = tmp_path / "out", tmp_path / "t.json"
    proc = tvmgen_run(host_runtime, stateful, "--sequence", sequence, "-o", out, "--timings", timings)
    assert proc.returncode == 0, proc.stderr
    assert_steps_match(read_steps(out, STEPS), want)
    assert sorted(p.name for p in (out / "000000").iterdir()) == ["y.npy"]  # the state outputs stay inside
    t = json.loads(timings.read_text())
    assert t["state"] == 3 and t["runs"] == STEPS and t["executor"] == "direct calls"
    seq = t["sequence"]
    assert seq["steps"] == STEPS and len(seq["step_ms"]) == STEPS and len(seq["step_run_ms"]) == STEPS
    assert all(0 < run <= ms for run, ms in zip(seq["step_run_ms"], seq["step_ms"]))
    assert seq["median_ms"] <= seq["p90_ms"] <= seq["max_ms"] == max(seq["step_ms"])
    assert "(20 steps x 1 pass)" in proc.stderr

    # step 5's input alone, in a fresh process: the first step of a stream, which step 5 of the sequence is not
    single = tmp_path / "single"
    np.save(tmp_path / "x5.npy", steps[5]["x"])
    proc = tvmgen_run(
        host_runtime, stateful, "-i", f"x={tmp_path / 'x5.npy'}", "-o", single, "--warmup", 0, "--repeat", 1
    )
    assert proc.returncode == 0, proc.stderr
    alone = np.load(single / "y.npy")
    np.testing.assert_allclose(alone, reference(models["stream"], PAIRS, [steps[5]])[0][0], atol=1e-5)
    assert np.abs(alone - want[5][0]).max() > 1e-2
    assert "carries state (3 tensors)" in proc.stderr

    # three passes (each from the initial state) after a warm-up pass: the same outputs
    again = tmp_path / "again"
    proc = tvmgen_run(host_runtime, stateful, "--sequence", sequence, "-o", again, "--warmup", 1, "--repeat", 3)
    assert proc.returncode == 0, proc.stderr
    assert all(np.array_equal(a, b) for a, b in zip(read_steps(again, STEPS), read_steps(out, STEPS)))


def test_initial_state_from_the_artifact(host_runtime, models, compiled, sequence, steps, tmp_path):
    """A non-zero initial value (state/0.npy, listed in manifest.files) is where the sequence starts, loaded from
    the directory and from memory (--from-memory: ArtifactData.state_files)."""
    h0 = np.linspace(-0.9, 0.9, N, dtype=np.float32).reshape(1, N)
    art = with_state(compiled(models["stream"], "host", "cpu", name="stream"), tmp_path / "art", PAIRS, {"h": h0})
    want = reference(models["stream"], PAIRS, steps, initial={"h": h0})
    for extra in ((), ("--from-memory",)):
        out = tmp_path / f"out{len(extra)}"
        proc = tvmgen_run(host_runtime, art, "--sequence", sequence, "-o", out, *extra)
        assert proc.returncode == 0, proc.stderr
        assert_steps_match(read_steps(out, STEPS), want)
    zero = reference(models["stream"], PAIRS, steps[:1])
    assert np.abs(want[0][0] - zero[0][0]).max() > 1e-2  # the initial value matters to step 0

    wrong = with_state(compiled(models["stream"], "host", "cpu", name="stream"), tmp_path / "wrong", PAIRS, {"h": h0})
    np.save(wrong / "state" / "0.npy", h0.astype(np.float64))
    proc = tvmgen_run(host_runtime, wrong, "--sequence", sequence)
    assert proc.returncode == 1
    assert 'initial value of state "h"' in proc.stderr and "float64 [1, 8]" in proc.stderr, proc.stderr


def test_sequence_errors_before_any_run(host_runtime, stateful, steps, tmp_path):
    """A gap in the steps, a step without an input, a state input given as an input, --input with --sequence:
    each a clear error naming the step and the input, before any run and with no output written."""
    gap = write_sequence(tmp_path / "gap", steps[:4])
    (gap / "000002").rename(gap / "000007")
    proc = tvmgen_run(host_runtime, stateful, "--sequence", gap, "-o", tmp_path / "out1")
    assert proc.returncode == 1 and "has no step 000002" in proc.stderr and "000007" in proc.stderr, proc.stderr
    assert not (tmp_path / "out1").exists()

    hole = write_sequence(tmp_path / "hole", steps[:4])
    (hole / "000003" / "x.npy").unlink()
    proc = tvmgen_run(host_runtime, stateful, "--sequence", hole, "-o", tmp_path / "out2")
    assert proc.returncode == 1 and 'step 000003 has no input "x"' in proc.stderr, proc.stderr
    assert not (tmp_path / "out2").exists()

    bad = write_sequence(tmp_path / "bad", [{"x": np.zeros((1, N + 1), np.float32)}])
    proc = tvmgen_run(host_runtime, stateful, "--sequence", bad)
    assert proc.returncode == 1 and 'input "x"' in proc.stderr and "1x9" in proc.stderr, proc.stderr

    proc = tvmgen_run(host_runtime, stateful, "--sequence", tmp_path / "none")
    assert proc.returncode == 1 and "does not exist" in proc.stderr, proc.stderr

    extra = write_sequence(tmp_path / "extra", [{"x": steps[0]["x"], "h": steps[0]["x"]}])
    proc = tvmgen_run(host_runtime, stateful, "--sequence", extra)
    assert proc.returncode == 1 and "step 000000 holds h.npy, a state input" in proc.stderr, proc.stderr
    (extra / "000000" / "h.npy").rename(extra / "000000" / "z.npy")
    proc = tvmgen_run(host_runtime, stateful, "--sequence", extra)
    assert proc.returncode == 1 and "z.npy, which is not an input" in proc.stderr, proc.stderr

    np.save(tmp_path / "h.npy", np.zeros((1, N), np.float32))
    proc = tvmgen_run(host_runtime, stateful, "-i", f"h={tmp_path / 'h.npy'}")
    assert proc.returncode == 1 and '"h" is a state input' in proc.stderr and "SetState" in proc.stderr, proc.stderr

    proc = tvmgen_run(host_runtime, stateful, "--sequence", gap, "-i", f"x={tmp_path / 'h.npy'}")
    assert proc.returncode == 2 and "leave out --input" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s: s[0].update(input="q"), 'state[0].input "q" is not one of the model\'s inputs (h, x, c, p)'),
        (lambda s: s[1].update(input="h"), "state[1] (h -> c_new) reuses a tensor of an earlier state pair"),
        (lambda s: s[2].update(shape=[1, 9]), 'state[2] says float32 [1, 9], the model\'s "p" is float32 [1, 8]'),
    ],
    ids=["unknown-input", "reused-tensor", "other-shape"],
)
def test_manifest_state_errors(host_runtime, stateful, tmp_path, edit, message):
    """A manifest whose state list does not fit the model: a load error naming the entry and the tensor."""
    art = tmp_path / "art"
    shutil.copytree(stateful, art)
    manifest = json.loads((art / "manifest.json").read_text())
    edit(manifest["state"])
    (art / "manifest.json").write_text(json.dumps(manifest))
    proc = tvmgen_run(host_runtime, art, "--repeat", 1)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr


def test_state_that_is_an_output_or_another_state(host_runtime, models, compile_stateful, tmp_path):
    """y = a (the old state is the user's output), a_new = b, b_new = a + x: the runtime takes the results as
    they are (no copy into a tensor someone still reads). The state is then no buffer held for good, so the
    calls recorded on the first step stop there: the VM runs the rest, and the timings say why."""
    rng = np.random.default_rng(5)
    steps = [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(12)]
    art = compile_stateful(models["swap"], "cpu", SWAP_PAIRS)
    seq = write_sequence(tmp_path / "seq", steps)
    timings = tmp_path / "t.json"
    proc = tvmgen_run(host_runtime, art, "--sequence", seq, "-o", tmp_path / "out", "--repeat", 2, "--timings", timings)
    assert proc.returncode == 0, proc.stderr
    assert_steps_match(read_steps(tmp_path / "out", len(steps)), reference(models["swap"], SWAP_PAIRS, steps), 0)
    assert json.loads(timings.read_text())["executor"].startswith("relax vm: a state buffer is also one of the outputs")


def test_sequence_on_opencl(ocl_runtime, opencl_lib, models, compile_stateful, sequence, steps, tmp_path):
    """The same sequence on OpenCL (PoCL), as direct calls: the state stays in the device buffers the recorded
    calls read, each step's new state copied into them on the device; a model whose output is its old state
    runs on the VM from its second run, and matches too."""
    art = compile_stateful(models["stream"], "opencl", PAIRS)
    env = {"TVMGEN_OPENCL_CACHE_DIR": str(tmp_path / "cache")}
    timings = tmp_path / "t.json"
    proc = tvmgen_run(ocl_runtime, art, "--sequence", sequence, "-o", tmp_path / "out", "--timings", timings, env=env)
    assert proc.returncode == 0, proc.stderr
    assert_steps_match(read_steps(tmp_path / "out", STEPS), reference(models["stream"], PAIRS, steps))
    assert json.loads(timings.read_text())["executor"] == "direct calls"

    rng = np.random.default_rng(5)
    swap_steps = [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(8)]
    art = compile_stateful(models["swap"], "opencl", SWAP_PAIRS)
    seq = write_sequence(tmp_path / "seq", swap_steps)
    proc = tvmgen_run(ocl_runtime, art, "--sequence", seq, "-o", tmp_path / "swap-out", "--timings", timings, env=env)
    assert proc.returncode == 0, proc.stderr
    got = read_steps(tmp_path / "swap-out", len(swap_steps))
    assert_steps_match(got, reference(models["swap"], SWAP_PAIRS, swap_steps), 0)
    assert json.loads(timings.read_text())["executor"].startswith("relax vm: a state buffer is also one of the outputs")


def vulkan_runtime(host_runtime: Path) -> Path:
    """The host runtime, where libtvmgen_vulkan finds a Vulkan device and the GLSL tools are installed."""
    for tool, package in (("glslangValidator", "glslang-tools"), ("spirv-val", "spirv-tools")):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install {package}; scripts/bootstrap.sh)")
    vulkan_device(host_runtime)
    return host_runtime


def test_sequence_on_vulkan(host_runtime, models, compile_stateful, sequence, steps, tmp_path):
    """On Vulkan (lavapipe) the runs are recorded and replayed: the state buffers stay the ones the replay reads,
    each step's new state copied into them on the device; a model whose output is its old state is not
    recorded and still matches."""
    runtime = vulkan_runtime(host_runtime)
    log = {"TVMGEN_VULKAN_LOG": "1", "TVMGEN_VULKAN_CACHE_DIR": str(tmp_path / "cache")}
    art = compile_stateful(models["stream"], "vulkan", PAIRS)
    timings = tmp_path / "t.json"
    args = ("--sequence", sequence, "-o", tmp_path / "out", "--repeat", 2, "--timings", timings)
    proc = tvmgen_run(runtime, art, *args, env=log)
    assert proc.returncode == 0, proc.stderr
    assert_steps_match(read_steps(tmp_path / "out", STEPS), reference(models["stream"], PAIRS, steps))
    runs = json.loads(proc.stderr.split("tvmgen-vulkan: commands ")[1].splitlines()[0])["recorded_runs"]
    assert runs["captured"] >= 1 and runs["replays"] >= STEPS, runs
    # the run recorded for replay is itself made of direct calls (no VM around the recording either)
    assert json.loads(timings.read_text())["executor"] == "direct calls"
    # one input run 6 times (runs 3-6 replayed): the output buffer tvmgen-run binds holds the 6th step's output
    np.save(tmp_path / "x5.npy", steps[5]["x"])
    args = ("-i", f"x={tmp_path / 'x5.npy'}", "-o", tmp_path / "six", "--warmup", 0, "--repeat", 6)
    proc = tvmgen_run(runtime, art, *args, env=log)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr.split("tvmgen-vulkan: commands ")[1].splitlines()[0])["recorded_runs"]["replays"] >= 3
    six = reference(models["stream"], PAIRS, [steps[5]] * 6)
    np.testing.assert_allclose(np.load(tmp_path / "six" / "y.npy"), six[-1][0], atol=1e-5, rtol=1e-5)

    rng = np.random.default_rng(5)
    swap_steps = [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(8)]
    art = compile_stateful(models["swap"], "vulkan", SWAP_PAIRS)
    seq = write_sequence(tmp_path / "seq", swap_steps)
    proc = tvmgen_run(runtime, art, "--sequence", seq, "-o", tmp_path / "swap-out", "--repeat", 2, env=log)
    assert proc.returncode == 0, proc.stderr
    got = read_steps(tmp_path / "swap-out", len(swap_steps))
    assert_steps_match(got, reference(models["swap"], SWAP_PAIRS, swap_steps), 0)


def test_java_state(java_build, models, compiled, stateful, steps, tmp_path):
    """The Java API (tests/java/StateCheck.java): the sequence matches onnxruntime; resetState, getState /
    setState, saveState / restoreState; the errors name the tensor; runAsync keeps the order of the calls; the
    initial value from state/0.npy, from a directory and from memory; a stateless model has no state."""
    h0 = np.linspace(-0.9, 0.9, N, dtype=np.float32).reshape(1, N)
    plain = compiled(models["stream"], "host", "cpu", name="stream")
    initial = with_state(plain, tmp_path / "initial", PAIRS, {"h": h0})
    work = tmp_path / "work"
    (work / "in").mkdir(parents=True)
    (work / "want").mkdir()
    for k, (feed, want) in enumerate(zip(steps, reference(models["stream"], PAIRS, steps), strict=True)):
        feed["x"].astype("<f4").tofile(work / "in" / f"{k:06d}.bin")
        want[0].astype("<f4").tofile(work / "want" / f"{k:06d}.bin")
    h0.astype("<f4").tofile(work / "h0.bin")
    cmd = ["java", "-Xcheck:jni", f"-Djava.library.path={java_build['dir']}", "-cp", java_build["classpath"]]
    proc = subprocess.run(
        [*cmd, "StateCheck", str(stateful), str(initial), str(plain), str(work)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ok ")]
    assert len(lines) == 22, proc.stdout
    assert "warning" not in (proc.stdout + proc.stderr).lower(), f"-Xcheck:jni complained:\n{proc.stderr}"
    assert "runAsync calls give the sequential runs' outputs and state, in order" in proc.stdout
