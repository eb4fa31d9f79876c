"""The JNI bridge and the Java API (jni/java/org/tvmgen) on a desktop JVM.

Builds the host runtime, libtvmgen_jni and tvmgen.jar with CMake, compiles artifacts with tvmgen,
runs them from Java (tests/java/ModelCheck.java and org.tvmgen.RunModel through the high-level
Model; tests/java/FfiCheck.java through the low-level Module / Function / NDArray) and compares
the outputs with the Python Relax VM's (tvmgen.runtime.runner.HostModel).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, onnx_model, unavailable
from helpers import assert_kernels_add_up

# every test needs the Java API built with CMake and javac: all slow
pytestmark = pytest.mark.slow

JAVA_SRC = REPO / "tests" / "java"
EXTRA_RUNS = 4  # ModelCheck runs the model 3 times (float[], ByteBuffer, Tensor), then EXTRA_RUNS more
ATOL = 1e-5
PROFILE_RUNS = 30  # ModelCheck's Model.profile(runs)


def run(cmd, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


# ----------------------------------------------------------------------------- build (conftest.java_build)


def assert_no_jni_warnings(p: subprocess.CompletedProcess) -> None:
    """-Xcheck:jni reports JNI misuse, and signal handlers replaced behind the JVM's back, as warnings.

    Its signal check samples the handlers every 10 ms, so it would also catch libtvm_ffi's SIGSEGV
    handler while its constructor had it installed; libtvmgen_jni_sigguard keeps it from ever being
    installed (test_sigguard_keeps_the_installed_handler), so no run is retried."""
    assert "warning" not in (p.stdout + p.stderr).lower(), f"-Xcheck:jni complained:\n{p.stdout}\n{p.stderr}"


def java(build: dict, *args, props=None, library_path=True, timeout=120) -> subprocess.CompletedProcess:
    cmd = ["java", "-Xcheck:jni"]
    if library_path:
        cmd.append(f"-Djava.library.path={build['dir']}")
    cmd += [f"-D{k}={v}" for k, v in (props or {}).items()]
    cmd += ["-cp", build["classpath"], *args]
    return run(cmd, timeout=timeout)


# ----------------------------------------------------------------------------- artifacts


def two_in_two_out():
    """Two inputs, two outputs of different shapes: y = a @ b, z = sigmoid(a)."""
    from onnx import TensorProto, helper

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    return onnx_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("Sigmoid", ["a"], ["z"])],
        [vi("a", [2, 8, 16]), vi("b", [2, 16, 4])],
        [vi("y", [2, 8, 4]), vi("z", [2, 8, 16])],
    )


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, builtin_onnx, compiled) -> dict[str, Path]:
    """name -> artifact directory, compiled for host/cpu through tvmgen's Python API (once per session,
    conftest's ``compiled``)."""
    import onnx

    root = tmp_path_factory.mktemp("java-artifacts")
    two_path = root / "two_in_two_out.onnx"
    onnx.save(two_in_two_out(), str(two_path))
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo

    out = {
        "mobilenet": compiled(builtin_onnx, "host", "cpu", name="mobilenet"),
        "mobilenet_separate_params": compiled(builtin_onnx, "host", "cpu", name="mobilenet", separate_params=True),
        "two_in_two_out": compiled(two_path, "host", "cpu", name="two_in_two_out"),
        "vad_scalar": compiled(zoo.build("vad_scalar", root)[0], "host", "cpu", name="vad_scalar"),
    }
    assert (out["mobilenet_separate_params"] / "model.params").is_file()
    assert not (out["mobilenet"] / "model.params").exists()
    return out


def make_inputs(directory: Path, seed: int) -> dict[str, np.ndarray]:
    from tvmgen.core import artifact

    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in artifact.load(directory).inputs}


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
    # the kernels of a profiled run are the run: within 10% (fastest runs, see the helper)
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


def test_jvm_signal_handlers_survive_the_tvm_runtime(java_build, artifacts):
    """libtvm_ffi installs a SIGSEGV crash handler when loaded; HotSpot needs SIGSEGV for null checks
    and safepoints in compiled code. libtvmgen_jni loads libtvm_ffi through libtvmgen_jni_sigguard,
    which keeps that handler from being installed, and puts back any JVM handler that changed after
    loading the bridge: without that, this program dies with "Segfault encountered"."""
    for flags in ([], ["-Xcheck:jni"]):
        cmd = [
            "java",
            *flags,
            f"-Djava.library.path={java_build['dir']}",
            "-cp",
            java_build["classpath"],
            "SignalCheck",
            artifacts["two_in_two_out"],
        ]
        p = run(cmd, timeout=120)
        assert p.returncode == 0 and "SignalCheck: ok, 3000 NullPointerExceptions" in p.stdout, p.stdout + p.stderr
        assert "Segfault" not in p.stderr and "handler modified" not in p.stdout + p.stderr, p.stdout + p.stderr


GUARD_PROBE = r"""
#include <dlfcn.h>
#include <csignal>
#include <cstdio>
static void Installed(int, siginfo_t*, void*) {}
int main(int, char** argv) {
  struct sigaction act = {};
  act.sa_sigaction = Installed;
  act.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &act, nullptr);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) { std::printf("dlopen failed: %s\n", dlerror()); return 1; }
  struct sigaction now;
  sigaction(SIGSEGV, nullptr, &now);
  auto patched = reinterpret_cast<int (*)()>(dlsym(lib, "TvmgenSigguardPatched"));
  std::printf("%s %d\n", now.sa_sigaction == Installed ? "kept" : "replaced", patched ? patched() : -1);
  return 0;
}
"""


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")),
    reason="libtvmgen_jni_sigguard is built for glibc Linux only",
)
def test_sigguard_keeps_the_installed_handler(java_build, tmp_path):
    """Why no JVM run is retried: loaded through libtvmgen_jni_sigguard (as libtvmgen_jni's JNI_OnLoad
    loads it), libtvm_ffi's constructor leaves an installed SIGSEGV handler in place, not even for a
    moment replacing it; loaded directly it replaces it (the wheel's TVM_FFI_BACKTRACE_ON_SEGFAULT)."""
    import tvm_ffi

    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        unavailable("no C++ compiler for the signal guard probe")
    (tmp_path / "probe.cc").write_text(GUARD_PROBE)
    c = run([cxx, "-o", tmp_path / "probe", tmp_path / "probe.cc", "-ldl"])
    assert c.returncode == 0, c.stdout + c.stderr
    ffi = Path(tvm_ffi.__file__).resolve().parent / "lib" / "libtvm_ffi.so"
    direct = run([tmp_path / "probe", ffi])
    assert direct.stdout.split() == ["replaced", "-1"], direct.stdout + direct.stderr
    guarded = run([tmp_path / "probe", java_build["dir"] / "libtvmgen_jni_sigguard.so"])
    kept, patched = (guarded.stdout.split() + ["", ""])[:2]
    assert kept == "kept" and patched.isdigit() and int(patched) >= 1, guarded.stdout + guarded.stderr


# ----------------------------------------------------------------------------- low-level API


def library_of(directory: Path) -> Path:
    manifest = json.loads((directory / "manifest.json").read_text())
    return directory / manifest["export"]["library"]


@pytest.mark.parametrize("name", ["mobilenet", "two_in_two_out"])
def test_low_level_api_runs_the_vm(java_build, artifacts, tmp_path, name):
    """Module.load + vm_load_executable + vm_initialization(1, 0, 2) + main, by hand, with NDArrays."""
    from tvmgen.core import artifact
    from tvmgen.runtime.runner import HostModel

    art = artifacts[name]
    inputs = make_inputs(art, seed=11)
    specs = []
    for spec in artifact.load(art).inputs:  # in main's order
        f = tmp_path / f"{spec.name}.bin"
        inputs[spec.name].astype("<f4").tofile(f)
        specs.append(f"{f}:{'x'.join(str(d) for d in spec.shape)}")
    out = tmp_path / "out"
    p = java(java_build, "FfiCheck", "run", library_of(art), out, *specs)
    assert p.returncode == 0, f"FfiCheck failed on {name}:\n{p.stdout}\n{p.stderr}"
    assert_no_jni_warnings(p)

    expected = HostModel(art).run(inputs)
    info = [ln.split("\t") for ln in (out / "info.txt").read_text().splitlines()]
    assert info[1] == ["vm", "relax.VirtualMachine"], info
    assert info[2] == ["result", "Object[]" if len(expected) > 1 else "org.tvmgen.NDArray"], info
    outputs = [row for row in info if row[0] == "output"]
    assert len(outputs) == len(expected) == len(list(out.glob("float_*.bin")))
    for k, ref in enumerate(expected):
        assert outputs[k] == ["output", "float32", "x".join(str(d) for d in ref.shape), "cpu:0", str(ref.nbytes)]
        got = np.fromfile(out / f"float_{k}.bin", "<f4")
        np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=0, atol=ATOL, err_msg=f"{name}: output {k}")
        np.testing.assert_array_equal(np.fromfile(out / f"buffer_{k}.bin", "<f4"), got, err_msg="copyTo(ByteBuffer)")


@pytest.fixture(scope="module")
def aarch64_library(tmp_path_factory) -> Path:
    """An aarch64 model library, compiled through the command line."""
    import onnx

    root = tmp_path_factory.mktemp("aarch64")
    onnx.save(two_in_two_out(), str(root / "m.onnx"))
    p = run(
        [sys.executable, "-m", "tvmgen", "compile", root / "m.onnx", "--platform", "linux-aarch64", "-o", root / "art"],
        timeout=600,
        cwd=REPO,
    )
    if p.returncode != 0 and "toolchain" in (p.stdout + p.stderr).lower():
        unavailable(f"cannot cross-compile for linux-aarch64 here:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    lib = library_of(root / "art")
    assert lib.read_bytes()[:4] == b"\x7fELF"
    return lib


@pytest.fixture(scope="module")
def ffi_checks(java_build, artifacts, aarch64_library, tmp_path_factory) -> dict[str, tuple[str, str]]:
    """FfiCheck's error cases and conversions: check -> (exception class or "none", message or value)."""
    out = tmp_path_factory.mktemp("ffi-checks")
    p = java(java_build, "FfiCheck", "checks", library_of(artifacts["two_in_two_out"]), aarch64_library, out)
    assert p.returncode == 0, f"FfiCheck checks failed:\n{p.stdout}\n{p.stderr}"
    assert_no_jni_warnings(p)
    rows = {}
    for line in (out / "results.tsv").read_text(encoding="utf-8").splitlines():
        name, cls, msg = (line.split("\t", 2) + [""])[:3]
        rows[name] = (cls, msg)
    return rows


TVMGEN_EXC, ILLEGAL_STATE, ILLEGAL_ARG = (
    "org.tvmgen.TvmgenException",
    "java.lang.IllegalStateException",
    "java.lang.IllegalArgumentException",
)


def test_function_get_global_and_conversions(ffi_checks):
    cls, msg = ffi_checks["num_threads"]
    kind, value, again = msg.split()
    assert cls == "none" and kind == "java.lang.Long" and int(value) > 0 and again == value, msg
    assert ffi_checks["string_roundtrip"] == ("none", "h\u00e9llo \u2713 \U0001f600")
    assert ffi_checks["shape_result"] == ("none", "2x3x4")
    assert ffi_checks["array_result"] == (
        "none",
        "Long=7 Double=2.5 String=s Boolean=true null long[]=5x6 NDArray=NDArray(float32[2, 3], cpu:0) "
        "Function=Function(returned by ffi.Array) Module=relax.VMExecutable",
    )
    cls, msg = ffi_checks["unsupported_result"]
    assert cls == TVMGEN_EXC and "returned a ffi.Map" in msg, msg
    assert ffi_checks["call_void_unsupported_result"] == ("none", "ok")
    cls, msg = ffi_checks["unsupported_argument"]
    assert cls == ILLEGAL_ARG and "java.lang.Object" in msg, msg
    cls, msg = ffi_checks["call_error"]
    assert cls == TVMGEN_EXC and msg.startswith("TypeError: ") and "TVMTensorAllocWithScope" in msg, msg


def test_unknown_functions_and_foreign_libraries(ffi_checks):
    cls, msg = ffi_checks["unknown_global"]
    assert cls == TVMGEN_EXC and '"tvmgen.no_such_function"' in msg, msg
    for check in ("unknown_module_function", "unknown_module_function_imports"):
        cls, msg = ffi_checks[check]
        assert cls == TVMGEN_EXC and 'has no function "no_such_function"' in msg, (check, msg)
    cls, msg = ffi_checks["foreign_library"]
    assert cls == TVMGEN_EXC and "built for aarch64" in msg and "this device is x86_64" in msg, msg
    cls, msg = ffi_checks["missing_library"]
    assert cls == TVMGEN_EXC and "cannot read the library" in msg and "missing.so" in msg, msg


def test_ndarray(ffi_checks):
    assert ffi_checks["ndarray_roundtrip"] == (
        "none",
        "NDArray(float32[2, 3], cpu:0) 2x3 float32 cpu 1 0 24 6 [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] "
        "[6.0, 5.0, 4.0, 3.0, 2.0, 1.0]",
    )
    assert ffi_checks["ndarray_int64"] == ("none", f"[-1, {1 << 40}, 7]")
    assert ffi_checks["ndarray_wrong_size"] == (TVMGEN_EXC, "the NDArray (float32) takes 24 bytes, the source has 20")
    assert ffi_checks["ndarray_wrong_size_out"] == (
        TVMGEN_EXC,
        "the NDArray (float32) holds 24 bytes, the destination has 8",
    )
    cls, msg = ffi_checks["ndarray_wrong_dtype"]
    assert cls == TVMGEN_EXC and "is int64" in msg, msg
    cls, msg = ffi_checks["ndarray_heap_buffer"]
    assert cls == ILLEGAL_ARG and "direct" in msg, msg
    cls, msg = ffi_checks["ndarray_bad_dtype"]
    assert cls == TVMGEN_EXC and '"floaty13"' in msg, msg


def _assert_closed(results: dict, *checks: str) -> None:
    """Each of ``checks`` (a call on a closed object) threw IllegalStateException saying it is closed."""
    for check in checks:
        cls, msg = results[check]
        assert cls == ILLEGAL_STATE and "is closed" in msg, (check, cls, msg)


def test_low_level_use_after_close(ffi_checks):
    _assert_closed(
        ffi_checks,
        "closed_ndarray_copy",
        "closed_ndarray_shape",
        "closed_ndarray_argument",
        "closed_function_call",
        "closed_module_get_function",
        "closed_module_kind",
    )
    cls, msg = ffi_checks["closed_is_closed"]
    assert cls == "none" and msg.startswith("true true true ") and msg.count("closed)") == 3, msg
    # a function keeps its module's library alive after the Module object is closed
    assert ffi_checks["function_outlives_module"] == ("none", "relax.VirtualMachine")


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
