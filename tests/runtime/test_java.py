"""The JNI bridge and the Java API (jni/java/org/tvmgen) on a desktop JVM.

Builds the host runtime, libtvmgen_jni and tvmgen.jar with CMake, compiles artifacts with tvmgen,
runs them from Java (tests/java/ModelCheck.java and org.tvmgen.RunModel through the high-level
Model) and compares the outputs with the Python Relax VM's (tvmgen.runtime.runner.HostModel).
The low-level Module / Function / NDArray and libtvm_ffi's signal handlers: test_java_ffi.py.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from helpers import assert_kernels_add_up

pytest.register_assert_rewrite("java_support")  # its asserts report as the tests' do
from java_support import ATOL, assert_no_jni_warnings, java, java_artifacts, make_inputs
from java_support import assert_closed as _assert_closed

# every test needs the Java API built with CMake and javac: all slow
pytestmark = pytest.mark.slow

JAVA_SRC = REPO / "tests" / "java"
EXTRA_RUNS = 4  # ModelCheck runs the model 3 times (float[], ByteBuffer, Tensor), then EXTRA_RUNS more
PROFILE_RUNS = 30  # ModelCheck's Model.profile(runs)


# ----------------------------------------------------------------------------- artifacts


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, builtin_onnx, compiled) -> dict[str, Path]:
    """name -> artifact directory, compiled for host/cpu through tvmgen's Python API (once per session,
    conftest's ``compiled``)."""
    return java_artifacts(tmp_path_factory, builtin_onnx, compiled)


@pytest.fixture(scope="module")
def checked(java_build, artifacts, tmp_path_factory):
    """name -> (ModelCheck's output directory, the inputs, the Python VM's outputs); run once per artifact."""
    from tvmgen.runtime.runner import HostModel

    cache = {}

    def get(name: str):
        if name not in cache:
            work = tmp_path_factory.mktemp(f"check-{name}")
            inputs = make_inputs(artifacts[name], seed=len(cache) + 7)
            (work / "in").mkdir()
            for k, v in inputs.items():
                v.astype("<f4").tofile(work / "in" / f"{k}.bin")
            expected = HostModel(artifacts[name]).run(inputs)
            # one thread: the profile is compared with the whole run, and on a shared 2-core machine
            # other load skews a 2-thread run more than the 10% allowed (threads: test_parallel.py)
            saved = os.environ.get("TVM_NUM_THREADS")
            os.environ["TVM_NUM_THREADS"] = "1"
            try:
                p = java(
                    java_build,
                    "ModelCheck",
                    artifacts[name],
                    work / "in",
                    work / "out",
                    EXTRA_RUNS,
                    props={"modelcheck.profile.runs": PROFILE_RUNS},
                )
            finally:
                if saved is None:
                    del os.environ["TVM_NUM_THREADS"]
                else:
                    os.environ["TVM_NUM_THREADS"] = saved
            assert p.returncode == 0, f"ModelCheck failed on {name}:\n{p.stdout}\n{p.stderr}"
            assert_no_jni_warnings(p)
            cache[name] = (work / "out", inputs, expected)
        return cache[name]

    return get


def read_errors(out: Path) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (out / "errors.tsv").read_text().splitlines():
        name, cls, msg = (line.split("\t", 2) + [""])[:3]
        rows[name] = (cls, msg)
    return rows


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", ["mobilenet", "mobilenet_separate_params", "two_in_two_out"])
def test_outputs_match_python_vm(checked, name):
    out, _, expected = checked(name)
    assert len(expected) == (2 if name == "two_in_two_out" else 1)
    for k, ref in enumerate(expected):
        results = {kind: np.fromfile(out / f"{kind}_{k}.bin", "<f4") for kind in ("float", "array", "buffer", "tensor")}
        for kind, got in results.items():
            assert got.size == ref.size, f"{kind} output {k}: {got.size} values, expected {ref.size}"
            np.testing.assert_allclose(
                got.reshape(ref.shape), ref, rtol=0, atol=ATOL, err_msg=f"{name}: output {k} through {kind}"
            )
        # the zero-copy ByteBuffer / Tensor paths give exactly what the float[] path gives
        for kind in ("array", "buffer", "tensor"):
            np.testing.assert_array_equal(results[kind], results["float"], err_msg=f"{kind} vs float[]")


def test_model_description(checked):
    out, _, _ = checked("two_in_two_out")
    lines = [ln.split("\t") for ln in (out / "info.txt").read_text().splitlines()]
    assert lines[0] == ["device", "cpu", "1"]
    assert lines[1][0] == "arch" and lines[1][1] in ("x86_64", "aarch64")
    assert lines[2:] == [
        ["input", "a", "float32", "2x8x16", str(2 * 8 * 16 * 4)],
        ["input", "b", "float32", "2x16x4", str(2 * 16 * 4 * 4)],
        ["output", "y", "float32", "2x8x4", str(2 * 8 * 4 * 4)],
        ["output", "z", "float32", "2x8x16", str(2 * 8 * 16 * 4)],
    ]


def test_errors_become_java_exceptions(checked):
    out, _, _ = checked("mobilenet")
    errors = read_errors(out)
    tvmgen_exc = "org.tvmgen.TvmgenException"

    for check in ("wrong_size", "wrong_size_by_name", "wrong_size_buffer"):
        cls, msg = errors[check]
        assert cls == tvmgen_exc and "takes 602112 bytes" in msg, (check, cls, msg)
    assert "602108 were given" in errors["wrong_size"][1]
    cls, msg = errors["unknown_name"]
    assert cls == tvmgen_exc and "no_such_input" in msg and "inputs are: input" in msg, msg
    assert errors["bad_input_index"][0] == tvmgen_exc and "out of range" in errors["bad_input_index"][1]
    assert errors["heap_buffer"][0] == "java.lang.IllegalArgumentException" and "direct" in errors["heap_buffer"][1]
    assert (
        errors["wrong_order"][0] == "java.lang.IllegalArgumentException"
        and "native byte order" in errors["wrong_order"][1]
    )
    assert errors["bad_output_index"][0] == tvmgen_exc
    for check in ("output_too_small", "output_buffer_too_small"):
        assert errors[check] == (tvmgen_exc, 'output "probs" (float32) holds 4000 bytes, the buffer has 4'), check
    assert errors["unknown_output_name"][0] == tvmgen_exc and "outputs are: probs" in errors["unknown_output_name"][1]
    assert errors["load_missing"][0] == tvmgen_exc and "manifest.json" in errors["load_missing"][1]
    assert errors["bad_threads"][0] == tvmgen_exc and "thread count" in errors["bad_threads"][1]
    assert errors["output_before_run"] == (tvmgen_exc, "no outputs yet: call Run first")
    assert errors["run_without_inputs"][0] == tvmgen_exc and "was never set" in errors["run_without_inputs"][1]
    cls, msg = errors["profile_without_inputs"]
    assert cls == tvmgen_exc and 'input "input" was never set' in msg, (cls, msg)
    assert errors["profile_zero_runs"] == (
        "java.lang.IllegalArgumentException",
        "profile: runs must be at least 1, got 0",
    )
    assert errors["still_works"] == ("none", ""), "the model stopped working after failed calls"

    _assert_closed(
        errors,
        "closed_run",
        "closed_set_input",
        "closed_get_output",
        "closed_inputs",
        "closed_timings",
        "closed_profile",
        "closed_memory",
    )
    assert errors["closed_is_closed"] == ("none", "")


def test_timings(checked):
    out, _, _ = checked("mobilenet")
    t = json.loads((out / "timings.json").read_text())
    runs = int((out / "runs.txt").read_text())
    assert runs == 3 + EXTRA_RUNS
    assert t["runs"] == runs
    assert set(t) == {"load_ms", "init_ms", "first_run_ms", "copy_in_ms", "run_ms", "copy_out_ms", "runs"}
    assert t["run_ms"] > 0 and t["first_run_ms"] > 0 and t["load_ms"] > 0
    assert all(t[k] >= 0 for k in t)
    assert f"({runs} runs)" in (out / "timings.txt").read_text()


def test_profile_names_the_models_kernels(checked, artifacts):
    """Model.profile(20): the runtime's JSON, parsed by org.tvmgen.Profile; its kernels are those the
    artifact's kernels.json records, called as often as it says, and add up to the whole run."""
    from tvmgen.core import kernel_table

    out, _, _ = checked("mobilenet")
    raw = json.loads((out / "profile.json").read_text())
    assert raw["runs"] == PROFILE_RUNS and raw["clock"] == "device"
    rows = [ln.split("\t") for ln in (out / "profile.tsv").read_text().splitlines()]
    # Profile.entries(): every function the VM called, as the runtime counted them, slowest first
    assert {r[0]: int(r[1]) for r in rows} == {name: c[0] for name, c in raw["counts"].items()}
    for name, _calls, total_ms, builtin in rows:
        assert abs(float(total_ms) - raw["counts"][name][1] / 1e6) < 1e-9
        assert builtin == ("true" if name.startswith(("vm.", "runtime.")) else "false"), name
    totals = [float(r[2]) for r in rows]
    assert totals == sorted(totals, reverse=True)

    table = kernel_table.load(artifacts["mobilenet"])
    expected = {k["name"]: k["calls"] for k in table["kernels"] if k["calls"]}
    got = {r[0]: int(r[1]) for r in rows if r[3] == "false"}
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    assert got == {name: calls * PROFILE_RUNS for name, calls in expected.items()}
    kinds = {k["kind"] for k in table["kernels"] if k["name"] in got}
    assert {"conv2d", "depthwise"} <= kinds, kinds
    # the kernels of a profiled run are the run (within 15-20%: see the helper)
    assert_kernels_add_up(raw)
    text = (out / "profile.txt").read_text()
    assert text.startswith(f"profile: {PROFILE_RUNS} runs (device clock), whole run ") and rows[0][0] in text
    # profiling runs the VM directly: the model's own run count is unchanged
    assert (out / "runs_after_profile.txt").read_text() == (out / "runs.txt").read_text()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux/Android's")
def test_memory_is_what_the_os_reports(checked, artifacts):
    """Model.memory(): the JVM's own VmHWM, read by Java from /proc/self/status around the call, brackets
    the overall peak; the after-load peak precedes it and covers the weights."""
    from tvmgen.core import artifact
    from tvmgen.reports import memory

    out, _, _ = checked("mobilenet")
    m = json.loads((out / "memory.json").read_text())
    hwm_before, hwm_after = (int(v) for v in (out / "proc_hwm.txt").read_text().split("\t"))
    assert m["source"] == "/proc/self/status"
    assert 0 < hwm_before <= m["overall_peak_bytes"] <= hwm_after, (hwm_before, m, hwm_after)
    assert hwm_after - hwm_before < 8 * 2**20  # the two readings are of the same moment, give or take
    assert m["before_load_bytes"] > 0 and 0 < m["rss_bytes"] <= m["overall_peak_bytes"]
    assert 0 < m["after_load_peak_bytes"] <= m["overall_peak_bytes"]
    assert m["model_after_load_bytes"] == m["after_load_peak_bytes"] - m["before_load_bytes"]
    assert m["model_overall_bytes"] == m["overall_peak_bytes"] - m["before_load_bytes"]
    art = artifacts["mobilenet"]
    weights = memory.footprint(art, artifact.load(art))["weights_bytes"]
    assert weights > 2**20 and m["model_after_load_bytes"] >= weights, (m, weights)  # resident once loaded
    mb = 2**20
    assert (
        (out / "memory.txt")
        .read_text()
        .startswith(
            f"peak resident memory (VmHWM): after load {m['after_load_peak_bytes'] / mb:.1f} MB, "
            f"overall {m['overall_peak_bytes'] / mb:.1f} MB"
        )
    )


def test_run_model_cli(java_build, artifacts, tmp_path):
    """org.tvmgen.RunModel with raw .bin inputs, the library named by -Dtvmgen.library.path only."""
    from tvmgen.runtime.runner import HostModel

    art = artifacts["two_in_two_out"]
    inputs = make_inputs(art, seed=3)
    for k, v in inputs.items():
        v.astype("<f4").tofile(tmp_path / f"{k}.bin")
    p = java(
        java_build,
        "org.tvmgen.RunModel",
        art,
        "--input",
        f"b={tmp_path / 'b.bin'}",  # -o creates out/
        "--input",
        f"a={tmp_path / 'a.bin'}",
        "--repeat",
        "3",
        "--warmup",
        "1",
        "-o",
        tmp_path / "out",
        "--profile",
        tmp_path / "profile.json",
        props={"tvmgen.library.path": java_build["lib"]},
        library_path=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert_no_jni_warnings(p)
    expected = HostModel(art).run(inputs)
    for name, ref in zip(["y", "z"], expected):
        got = np.fromfile(tmp_path / "out" / f"{name}.bin", "<f4").reshape(ref.shape)
        np.testing.assert_allclose(got, ref, rtol=0, atol=ATOL)
    lines = p.stdout.strip().splitlines()
    assert lines[0].startswith("output y: float32[2, 8, 4]: min "), lines
    summary = json.loads(lines[-1])
    assert summary["device"] == "cpu" and summary["repeat"] == 3 and summary["warmup"] == 1
    assert summary["timings"]["runs"] == 4 and summary["median_run_ms"] > 0
    mem = summary["memory"]  # tvmgen-run's keys
    assert 0 < mem["after_load_peak_bytes"] <= mem["overall_peak_bytes"] and mem["before_load_bytes"] > 0
    profile = json.loads((tmp_path / "profile.json").read_text())  # tvmgen-run --profile's layout
    assert profile["device"] == "cpu" and profile["profile"]["runs"] == 3
    assert any(not k.startswith("vm.") and "matmul" in k for k in profile["profile"]["counts"]), profile
    assert "RunModel: profile: 3 runs (device clock)" in p.stderr and "peak resident memory (VmHWM)" in p.stderr


def test_run_model_scalar_input_and_output(java_build, artifacts, tmp_path):
    """A 0-d int64 input (an If's condition and a scale) and a 0-d output through the Java API
    (RunModel: Model.setInput / getOutput with ByteBuffers), down both branches."""
    from tvmgen.runtime.runner import HostModel

    art = artifacts["vad_scalar"]
    x = np.random.default_rng(5).standard_normal((16, 1, 64)).astype("<f4")
    x.tofile(tmp_path / "x.bin")
    for sr in (16000, 8000):
        np.array(sr, "<i8").tofile(tmp_path / "sr.bin")
        p = java(
            java_build,
            "org.tvmgen.RunModel",
            art,
            "--input",
            f"x={tmp_path / 'x.bin'}",
            "--input",
            f"sr={tmp_path / 'sr.bin'}",
            "--repeat",
            "1",
            "-o",
            tmp_path / f"out{sr}",
        )
        assert p.returncode == 0, p.stdout + p.stderr
        y, mean = HostModel(art).run({"x": x, "sr": np.array(sr, np.int64)})
        assert mean.shape == ()
        np.testing.assert_allclose(
            np.fromfile(tmp_path / f"out{sr}" / "y.bin", "<f4").reshape(y.shape), y, rtol=0, atol=ATOL
        )
        got = np.fromfile(tmp_path / f"out{sr}" / "mean.bin", "<f4")
        assert got.shape == (1,) and abs(float(got[0]) - float(mean)) <= ATOL
        assert "output mean: float32[]: " in p.stdout, p.stdout


def test_run_model_pseudo_random_and_library_dir(java_build, artifacts, tmp_path):
    """No input files: tvmgen-run's pseudo-random inputs; --lib names the library's directory."""
    p = java(
        java_build,
        "org.tvmgen.RunModel",
        artifacts["mobilenet"],
        "--repeat",
        "1",
        "--lib",
        java_build["dir"],
        "-o",
        tmp_path,
        library_path=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert 'input "input" not given: using pseudo-random values' in p.stderr
    probs = np.fromfile(tmp_path / "probs.bin", "<f4")
    assert probs.shape == (1000,) and abs(float(probs.sum()) - 1.0) < 1e-3  # a softmax


def test_run_model_errors(java_build, artifacts, tmp_path):
    bad = tmp_path / "short.bin"
    np.zeros(10, "<f4").tofile(bad)
    p = java(java_build, "org.tvmgen.RunModel", artifacts["mobilenet"], "--input", bad)
    assert p.returncode == 1 and "takes 602112 bytes" in p.stderr, p.stderr
    p = java(java_build, "org.tvmgen.RunModel", artifacts["mobilenet"], "--input", f"nope={bad}")
    assert p.returncode == 1 and 'unknown input name "nope"' in p.stderr, p.stderr
    p = java(java_build, "org.tvmgen.RunModel", "--bogus")
    assert p.returncode == 2 and "unknown option --bogus" in p.stderr


def test_missing_native_library_is_explained(java_build, artifacts):
    p = java(java_build, "org.tvmgen.RunModel", artifacts["mobilenet"], library_path=False)
    assert p.returncode != 0
    assert "cannot load the tvmgen JNI library" in p.stderr and "tvmgen.library.path" in p.stderr, p.stderr


def test_run_async(java_build, artifacts):
    """Model.runAsync / runAsyncAndRead over the real JNI bridge (tests/java/AsyncCheck.java): the model's own
    thread, the same outputs as run(), queued runs in order, errors through the future, close() with runs queued."""
    p = java(java_build, "AsyncCheck", str(artifacts["mobilenet"]))
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    assert_no_jni_warnings(p)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("ok ")]
    assert len(lines) == 8, p.stdout
    assert "runAsync ran on tvmgen-run-" in p.stdout and "8 queued runs ran one after another" in p.stdout


def test_load_from_memory(java_build, artifacts, tmp_path, monkeypatch):
    """Model.load(ArtifactData) over the real JNI bridge (tests/java/MemoryCheck.java): artifacts read into memory
    (the library through memfd_create, the weights as byte[] and as a direct buffer at an offset, wiped after the
    load) run as their directories do; artifacts from memory one after another and at once; a library found by
    name (how an Android app's packaged library loads in place); the errors for missing or extra parts."""
    from tvmgen.runtime.runner import HostModel

    named = tmp_path / "libs"
    named.mkdir()
    shutil.copy(artifacts["mobilenet"] / "model.so", named / "libtvmgen_model_test.so")
    monkeypatch.setenv(
        "LD_LIBRARY_PATH", os.pathsep.join(filter(None, [str(named), os.environ.get("LD_LIBRARY_PATH")]))
    )
    sep, inline, other = (artifacts[k] for k in ("mobilenet_separate_params", "mobilenet", "two_in_two_out"))
    p = java(java_build, "MemoryCheck", tmp_path, sep, inline, other, "libtvmgen_model_test.so")
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    assert_no_jni_warnings(p)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("ok ")]
    assert len(lines) == 18, p.stdout
    assert "ok a library found by name: the directory's outputs" in lines
    # the from-memory output against the Python VM on the same input
    x = np.fromfile(tmp_path / "input.bin", "<f4").reshape(1, 3, 224, 224)
    (expected,) = HostModel(sep).run({"input": x})
    got = np.fromfile(tmp_path / "output.bin", "<f4")
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=0, atol=ATOL)
