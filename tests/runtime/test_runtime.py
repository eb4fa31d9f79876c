"""The C++ device runtime and tvmgen-run: host, aarch64 under qemu, bad input, embed bundles."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import QEMU_AARCH64, branching_model, run_native, save_onnx, single_op_models
from tvmgen import frontends
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.core.model import random_inputs
from tvmgen.runtime.runner import HostModel

# every test runs whole compiled models or the CMake-built runtime (qemu, embed): all slow
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory, builtin_onnx, compiled):
    """Artifacts: the built-in model, with separate params, and a 2-in/2-out model; host and aarch64
    (compiled once per session, conftest's ``compiled``). The runtimes are conftest's ``host_runtime`` and
    ``aarch64_runtime`` (one CMake build per platform, shared by every module)."""
    d = tmp_path_factory.mktemp("rt")
    models = {"mobilenet": builtin_onnx}
    for name in ("two_outputs", "matmul"):
        models[name] = save_onnx(single_op_models()[name], d / f"{name}.onnx")
    arts = {}
    for name, path in models.items():
        for plat in ("host", "linux-aarch64"):
            if plat == "linux-aarch64" and not shutil.which("aarch64-linux-gnu-g++"):
                continue
            arts[(name, plat)] = compiled(path, plat, "cpu", name=name)
        if name == "mobilenet":
            arts[("mobilenet-params", "host")] = compiled(path, "host", "cpu", name=name, separate_params=True)
    return arts


def run_tool(prefix: Path, artifact: Path, tmp_path: Path, inputs: dict, qemu=False, extra=()):
    """Run tvmgen-run with .npy inputs; returns (returncode, outputs by name, timings, stderr)."""
    launcher = QEMU_AARCH64 if qemu else ()
    timings = ["--timings", str(tmp_path / "t.json")]
    proc, outs = run_native(
        prefix, artifact, inputs, tmp_path, *timings, *extra, launcher=launcher, tag="outputs", repeat=None
    )
    if proc.returncode != 0:
        return proc.returncode, None, None, proc.stderr
    return 0, outs, json.loads((tmp_path / "t.json").read_text()), proc.stderr


@pytest.mark.parametrize("name", ["mobilenet", "mobilenet-params", "two_outputs", "matmul"])
def test_host_runner_matches_python_vm(host_runtime, built, tmp_path, name):
    art = built[(name, "host")]
    model = HostModel(art)
    inputs = random_inputs(model.manifest.inputs, seed=11)
    want = model.run(inputs)
    rc, got, timings, err = run_tool(host_runtime, art, tmp_path, inputs, extra=["--repeat", "3"])
    assert rc == 0, err
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
    assert timings["device"] == "cpu" and timings["arch"] == "x86_64"
    assert timings["runs"] == 3 and timings["run_ms"]["median"] > 0 and timings["load_ms"] > 0
    assert timings["executor"] == "direct calls"
    for key in ("init_ms", "first_run_ms", "copy_in_ms", "copy_out_ms"):
        assert key in timings
    assert "median of 3" in err


def test_direct_calls_equal_the_vm(host_runtime, built, tmp_path):
    """On the CPU, main runs as its kernel calls recorded on the first run and made again (direct_calls.h):
    after 3 runs (1 recorded, 2 replayed) every model's outputs equal those of the Relax VM (--vm) bit for
    bit, and the timings say which ran."""
    for name in ("mobilenet", "mobilenet-params", "two_outputs", "matmul"):
        art = built[(name, "host")]
        inputs = random_inputs(HostModel(art).manifest.inputs, seed=3)
        runs = {}
        for flags in ((), ("--vm",)):
            work = tmp_path / f"{name}{len(flags)}"
            work.mkdir()
            rc, got, timings, err = run_tool(host_runtime, art, work, inputs, extra=["--repeat", "3", *flags])
            assert rc == 0, err
            runs[flags] = (got, timings["executor"], err)
        (direct, executor, err), (vm, vm_executor, vm_err) = runs[()], runs[("--vm",)]
        assert executor == "direct calls" and "main ran on" not in err, (name, executor)
        assert vm_executor == "relax vm: direct calls are turned off (LoadOptions::direct_calls)", vm_executor
        assert "main ran on the relax vm: direct calls are turned off" in vm_err
        for d, v in zip(direct, vm, strict=True):
            assert d.dtype == v.dtype and np.array_equal(d, v), name


def test_a_branching_main_runs_on_the_vm_and_says_why(host_runtime, compiled, tmp_path):
    """A main whose calls depend on the data (an If) is not recorded: it runs on the VM, both branches give the
    right values run after run, and tvmgen-run says why the VM ran."""
    art = compiled(branching_model(tmp_path / "branching.onnx"), "host", "cpu")
    for k, x in enumerate(([[1, 2, 3, -1]], [[-1, -2, 3, -1]])):
        x = np.array(x, np.float32)
        (tmp_path / str(k)).mkdir()
        rc, got, timings, err = run_tool(host_runtime, art, tmp_path / str(k), {"x": x}, extra=["--repeat", "3"])
        assert rc == 0, err
        np.testing.assert_array_equal(got[0], x + 1 if x.sum() > 0 else x - 1)
        assert timings["executor"] == "relax vm: main branches (If): its calls can differ from run to run"
        assert "main ran on the relax vm: main branches (If)" in err


@pytest.mark.parametrize("name", ["mobilenet-params", "two_outputs"])
def test_host_runner_from_memory(host_runtime, built, tmp_path, name):
    """tvmgen-run --from-memory: the artifact's files read into memory and loaded through tvmgen::ArtifactData
    (the library through memfd_create, the weights from bytes) give the Python VM's outputs, on the thread
    launcher the directory's load finds (tvmgen's own, found in the library loaded from /proc/self/fd/N,
    where the model has parallel loops: MobileNet's; two_outputs' 10-element kernels have none)."""
    art = built[(name, "host")]
    model = HostModel(art)
    inputs = random_inputs(model.manifest.inputs, seed=5)
    rc, got, timings, err = run_tool(host_runtime, art, tmp_path, inputs, extra=["--repeat", "2", "--from-memory"])
    assert rc == 0, err
    for g, w in zip(got, model.run(inputs), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
    (tmp_path / "dir").mkdir()
    rc, _, from_dir, dir_err = run_tool(host_runtime, art, tmp_path / "dir", inputs, extra=["--repeat", "1"])
    assert rc == 0, dir_err
    assert timings["thread_pool"] == from_dir["thread_pool"] and timings["runs"] == 2
    if name == "mobilenet-params":
        assert timings["thread_pool"] == "tvmgen"
    assert f"{art} (read into memory) on cpu" in err


def test_host_runner_raw_input_and_threads(host_runtime, built, tmp_path):
    art = built[("matmul", "host")]
    a = np.arange(2 * 8 * 16, dtype=np.float32).reshape(2, 8, 16) / 100
    b = np.ones((2, 16, 4), np.float32)
    a.tofile(tmp_path / "a.bin")
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "o" / "run1"  # -o creates a directory that does not exist yet
    proc = subprocess.run(
        [
            str(host_runtime / "bin" / "tvmgen-run"),
            str(art),
            "-i",
            str(tmp_path / "a.bin"),
            "-i",
            f"b={tmp_path / 'b.npy'}",
            "-o",
            str(out),
            "--threads",
            "1",
            "--affinity",
            "big",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(out / "y.npy"), a @ b, rtol=1e-5)


def test_host_runner_paces_its_runs(host_runtime, compiled, tmp_path):
    """tvmgen-run --pace-ms: a sleep before each timed run (as between camera frames), reported in the JSON."""
    import time

    art = compiled(save_onnx(single_op_models()["two_outputs"], tmp_path / "two_outputs.onnx"), name="two_outputs")
    inputs = random_inputs(HostModel(art).manifest.inputs, seed=3)
    t0 = time.perf_counter()
    rc, _, timings, err = run_tool(host_runtime, art, tmp_path, inputs, extra=["--repeat", "3", "--pace-ms", "20"])
    assert rc == 0, err
    assert time.perf_counter() - t0 >= 3 * 0.020  # slept before each of the 3 timed runs (a lower bound only)
    assert timings["pace_ms"] == 20 and timings["runs"] == 3
    assert "median of 3, 20 ms apart" in err
    rc, _, timings, _ = run_tool(host_runtime, art, tmp_path, inputs, extra=["--repeat", "2"])
    assert rc == 0 and timings["pace_ms"] == 0


@pytest.mark.parametrize("name", ["mobilenet", "two_outputs"])
def test_aarch64_runner_under_qemu_matches_host(aarch64_runtime, built, tmp_path, name):
    art = built[(name, "linux-aarch64")]
    host = HostModel(built[(name, "host")])
    inputs = random_inputs(host.manifest.inputs, seed=5)
    want = host.run(inputs)
    rc, got, timings, err = run_tool(
        aarch64_runtime, art, tmp_path, inputs, qemu=True, extra=["--repeat", "1", "--warmup", "0"]
    )
    assert rc == 0, err
    assert timings["arch"] == "aarch64"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


def test_aarch64_binaries_are_aarch64(aarch64_runtime):
    from tvmgen.core import binfmt

    for f in [aarch64_runtime / "bin" / "tvmgen-run", *(aarch64_runtime / "lib").glob("*.so")]:
        assert binfmt.describe_file(f) == ("elf", "aarch64"), f


# --------------------------------------------------------------------------- bad input


def tool_error(prefix, artifact, *args):
    proc = subprocess.run(
        [str(prefix / "bin" / "tvmgen-run"), str(artifact), *map(str, args)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    return proc.stderr


def test_wrong_input_size_and_name(host_runtime, built, tmp_path):
    art = built[("mobilenet", "host")]
    (tmp_path / "small.bin").write_bytes(b"\0" * 100)
    err = tool_error(host_runtime, art, "-i", tmp_path / "small.bin")
    assert 'input "input" (float32) takes 602112 bytes, 100 were given' in err
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 10, 10), np.float32))
    err = tool_error(host_runtime, art, "-i", tmp_path / "x.npy")
    assert "has shape 1x3x10x10, the model expects 1x3x224x224" in err
    np.save(tmp_path / "x64.npy", np.zeros((1, 3, 224, 224), np.float64))
    assert "holds float64, the model expects float32" in tool_error(host_runtime, art, "-i", tmp_path / "x64.npy")
    err = tool_error(host_runtime, art, "-i", f"images={tmp_path / 'x.npy'}")
    assert 'unknown input name "images"; this model\'s inputs are: input' in err


def test_missing_and_corrupt_artifact_files(host_runtime, built, tmp_path):
    art = tmp_path / "art"
    shutil.copytree(built[("mobilenet", "host")], art)
    assert "cannot open the artifact manifest" in tool_error(host_runtime, tmp_path / "nowhere")
    (art / "model.so").unlink()
    assert "cannot read the model library" in tool_error(host_runtime, art)
    (art / "manifest.json").write_text("{ broken")
    assert "manifest.json in" in tool_error(host_runtime, art) and "corrupt" in tool_error(host_runtime, art)
    shutil.rmtree(art)
    shutil.copytree(built[("mobilenet-params", "host")], art)
    (art / "model.params").write_bytes(b"not params")
    assert "cannot read the weights in" in tool_error(host_runtime, art)


def test_manifest_for_another_platform(host_runtime, built):
    err = tool_error(host_runtime, built[("mobilenet", "linux-aarch64")])
    assert "compiled for linux-aarch64 (aarch64), this device is x86_64" in err


def test_library_for_the_wrong_architecture(host_runtime, built, tmp_path):
    art = tmp_path / "art"
    shutil.copytree(built[("mobilenet", "host")], art)
    shutil.copy(built[("mobilenet", "linux-aarch64")] / "model.so", art / "model.so")
    err = tool_error(host_runtime, art)
    assert "is built for aarch64, this device is x86_64" in err
    assert "cannot open shared object" not in err


def test_object_archive_is_refused(host_runtime, built, tmp_path):
    imported = frontends.load(save_onnx(single_op_models()["softmax"], tmp_path / "s.onnx"), [])
    out = tmp_path / "objs"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu", objects_only=True), out, True, {"name": "s"})
    assert "not a shared library: link it first" in tool_error(host_runtime, out)


def test_usage_errors(host_runtime):
    tool = str(host_runtime / "bin" / "tvmgen-run")
    for args, phrase in [
        ([], "no artifact directory given"),
        (["a", "--repeat", "x"], "--repeat takes a number"),
        (["a", "--affinity", "fast"], "--affinity takes big, little or any"),
        (["a", "--pace-ms", "x"], "--pace-ms takes a number"),
        (["a", "--pace-ms", "-1"], "--pace-ms must be between 0 and 60000"),
        (["a", "--bogus"], "unknown option --bogus"),
    ]:
        proc = subprocess.run([tool, *args], capture_output=True, text=True)
        assert proc.returncode == 2 and phrase in proc.stderr and "usage:" in proc.stderr
