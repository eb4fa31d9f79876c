"""What the Java API's test modules (test_java.py, test_java_ffi.py) share: running a class of tests/java on
the JVM with -Xcheck:jni (and failing on its warnings), the artifacts they compile, their inputs, and the
exceptions the Java API throws."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import REPO, onnx_model

ATOL = 1e-5


def run(cmd, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def assert_no_jni_warnings(p: subprocess.CompletedProcess) -> None:
    """-Xcheck:jni reports JNI misuse, and signal handlers replaced behind the JVM's back, as warnings.

    Its signal check samples the handlers every 10 ms, so it would also catch libtvm_ffi's SIGSEGV
    handler while its constructor had it installed; libtvmgen_jni_sigguard keeps it from ever being
    installed (test_java_ffi.py::test_sigguard_keeps_the_installed_handler), so no run is retried."""
    assert "warning" not in (p.stdout + p.stderr).lower(), f"-Xcheck:jni complained:\n{p.stdout}\n{p.stderr}"


def java(build: dict, *args, props=None, library_path=True, timeout=120) -> subprocess.CompletedProcess:
    cmd = ["java", "-Xcheck:jni"]
    if library_path:
        cmd.append(f"-Djava.library.path={build['dir']}")
    cmd += [f"-D{k}={v}" for k, v in (props or {}).items()]
    cmd += ["-cp", build["classpath"], *args]
    return run(cmd, timeout=timeout)


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


def java_artifacts(tmp_path_factory, builtin_onnx, compiled) -> dict[str, Path]:
    """The ``artifacts`` fixture's work: name -> artifact directory, compiled for host/cpu through tvmgen's
    Python API (once per session, conftest's ``compiled``)."""
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


TVMGEN_EXC, ILLEGAL_STATE, ILLEGAL_ARG = (
    "org.tvmgen.TvmgenException",
    "java.lang.IllegalStateException",
    "java.lang.IllegalArgumentException",
)


def assert_closed(results: dict, *checks: str) -> None:
    """Each of ``checks`` (a call on a closed object) threw IllegalStateException saying it is closed."""
    for check in checks:
        cls, msg = results[check]
        assert cls == ILLEGAL_STATE and "is closed" in msg, (check, cls, msg)
