"""The JNI bridge's low level on a desktop JVM: libtvm_ffi loaded under the JVM without taking its signal
handlers (libtvmgen_jni_sigguard, tests/java/SignalCheck.java), and the low-level Java API (Module / Function /
NDArray, tests/java/FfiCheck.java) running the VM by hand against the Python Relax VM, with its errors.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, unavailable

pytest.register_assert_rewrite("java_support")  # its asserts report as the tests' do
from java_support import (
    ATOL,
    ILLEGAL_ARG,
    TVMGEN_EXC,
    assert_no_jni_warnings,
    java,
    java_artifacts,
    make_inputs,
    run,
    two_in_two_out,
)
from java_support import assert_closed as _assert_closed

# every test needs the Java API built with CMake and javac: all slow
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, builtin_onnx, compiled) -> dict[str, Path]:
    """name -> artifact directory, compiled for host/cpu through tvmgen's Python API (once per session,
    conftest's ``compiled``)."""
    return java_artifacts(tmp_path_factory, builtin_onnx, compiled)


# ----------------------------------------------------------------------------- libtvm_ffi under the JVM


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
