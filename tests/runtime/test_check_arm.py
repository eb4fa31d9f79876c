"""`compile --check` for Arm builds runs the aarch64 code itself under qemu-aarch64 (linux-aarch64: the
artifact; android-arm64: a linux-aarch64 build with the same CPU target), and says so; without qemu it
checks a host build and says why."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import QEMU_AARCH64, require_tool, run_native, save_onnx
from tvmgen.compiler.targets.platforms import PLATFORMS

QEMU_LINE = "checking the linux-aarch64 build under qemu-aarch64"


def softmax_model():
    """Softmax over rows of 16,384 values: its x86 and NEON kernels sum each row in different orders (four
    vectors of partial sums: 32 or 64 floats on x86, 16 on NEON), so the host build's and the aarch64 build's
    largest errors against onnxruntime differ (AVX2 1.05e-9, NEON 5.82e-10 with seed 0). Short rows no
    longer tell them apart: rows of 1000 sum in 8 partials on both."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16384])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16384])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def model(tmp_path):
    require_tool("qemu-aarch64")
    require_tool("aarch64-linux-gnu-g++")
    return save_onnx(softmax_model(), tmp_path / "small.onnx")


def max_abs_errors(output: str) -> list[float]:
    return [float(v) for v in re.findall(r"max abs error (\S+),", output)]


def aarch64_error_by_hand(model: Path, artifact: Path, work: Path) -> float:
    """The artifact run with the aarch64 tvmgen-run under qemu-aarch64 here, on --check's inputs (seed 0),
    against onnxruntime: the largest absolute error, as --check prints it."""
    import onnxruntime

    from tvmgen.core.model import TensorSpec, random_inputs
    from tvmgen.runtime import runtime_build

    work = Path(tempfile.mkdtemp(prefix="by-hand-", dir=work))
    x = random_inputs([TensorSpec("x", (2, 16384), "float32")], 0)["x"]
    runtime = runtime_build.cached_build("linux-aarch64")
    proc, outputs = run_native(runtime, artifact, {"x": x}, work, "--warmup", "0", launcher=QEMU_AARCH64)
    assert proc.returncode == 0, proc.stderr
    (actual,) = outputs
    expected = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return float(np.max(np.abs(actual.astype(np.float64) - expected)))


def test_linux_aarch64_check_runs_the_artifact_under_qemu(tvmgen, tmp_path, model):
    r = tvmgen("compile", model, "--platform", "linux-aarch64", "--check", "-o", tmp_path / "arm")
    assert r.returncode == 0, r.output
    assert QEMU_LINE in r.output and "the artifact's own code (generic, mattr +neon)" in r.output
    assert "cannot run here" not in r.output and "host/cpu build" not in r.output
    [checked] = max_abs_errors(r.output)

    # The error --check printed is the artifact's own under qemu, not a host build's (which differs)
    by_hand = aarch64_error_by_hand(model, tmp_path / "arm", tmp_path)
    assert checked == float(f"{by_hand:.3g}"), (checked, by_hand)
    host = tvmgen("compile", model, "--check", "-o", tmp_path / "host")
    assert host.returncode == 0 and "checking the artifact itself: the host/cpu build" in host.output, host.output
    [host_error] = max_abs_errors(host.output)
    assert host_error != checked, "the two builds agree here: this model cannot tell which one was checked"

    # an impossible tolerance fails the check on the aarch64 error, leaving nothing behind
    r = tvmgen(
        "compile", model, "--platform", "linux-aarch64", "--check", "--rtol", "0", "--atol", "0", "-o", tmp_path / "out"
    )
    assert r.returncode == 5, r.output
    assert QEMU_LINE in r.output and "outputs differ from onnxruntime" in r.stderr
    assert max_abs_errors(r.output) == [checked]
    assert not (tmp_path / "out").exists()


def test_android_arm64_check_runs_a_linux_build_of_the_same_cpu_target(tvmgen, tmp_path, model):
    gxx = shutil.which("aarch64-linux-gnu-g++")
    ndk = tmp_path / "ndk"
    bindir = ndk / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin"
    bindir.mkdir(parents=True)
    cc = bindir / "aarch64-linux-android24-clang++"  # Debian's aarch64 g++ standing in for the NDK's clang
    cc.write_text(f'#!/bin/sh\nexec {gxx} "$@"\n')
    cc.chmod(0o755)
    env = {"ANDROID_NDK_HOME": str(ndk), "TVM_NDK_CC": "", "ANDROID_NDK_ROOT": "", "ANDROID_HOME": ""}
    r = tvmgen("compile", model, "--platform", "android-arm64", "--check", "-o", tmp_path / "android", extra_env=env)
    assert r.returncode == 0, r.output
    assert "checking a linux-aarch64 build under qemu-aarch64" in r.output, r.output
    assert "same CPU target (generic, mattr +neon" in r.output and "Compiling for linux-aarch64/cpu" in r.output
    assert json.loads((tmp_path / "android" / "manifest.json").read_text())["platform"] == "android-arm64"
    [checked] = max_abs_errors(r.output)
    arm = tvmgen("compile", model, "--platform", "linux-aarch64", "-o", tmp_path / "arm")
    assert arm.returncode == 0, arm.output
    assert checked == float(f"{aarch64_error_by_hand(model, tmp_path / 'arm', tmp_path):.3g}")


def test_stand_in_keeps_the_cpu_target():
    from tvmgen.runtime.check import linux_stand_in

    android = PLATFORMS["android-arm64"].with_cpu("cortex-a76").with_features(["+dotprod", "+fullfp16"])
    stand_in = linux_stand_in(android)
    assert stand_in.name == "linux-aarch64" and stand_in.exporter == "aarch64-linux-gnu"
    want = {**android.cpu_target(), "mtriple": "aarch64-linux-gnu"}
    assert stand_in.cpu_target() == want
    assert want["mcpu"] == "cortex-a76" and want["mattr"] == ["+neon", "+dotprod", "+fullfp16"]


def path_without(tmp_path: Path, *hidden: str) -> str:
    """A PATH with everything the current one has but ``hidden`` (symlinks in one directory)."""
    farm = tmp_path / "bin"
    farm.mkdir()
    for d in reversed(os.environ["PATH"].split(os.pathsep)):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            if entry.name not in hidden and os.access(entry.path, os.X_OK) and not entry.is_dir():
                link = farm / entry.name
                link.unlink(missing_ok=True)  # earlier PATH entries win, as they do on PATH
                link.symlink_to(entry.path)
    return str(farm)


def test_without_qemu_a_host_build_is_checked_and_the_output_says_why(tvmgen, tmp_path, model):
    path = path_without(tmp_path, "qemu-aarch64")
    assert shutil.which("qemu-aarch64", path=path) is None and shutil.which("aarch64-linux-gnu-g++", path=path)
    r = tvmgen(
        "compile", model, "--platform", "linux-aarch64", "--check", "-o", tmp_path / "arm", extra_env={"PATH": path}
    )
    assert r.returncode == 0, r.output
    assert QEMU_LINE not in r.output
    assert "linux-aarch64/cpu (generic) cannot run here; checking a host/cpu build of the same model" in r.output
    assert "qemu-aarch64 is not on PATH; install Debian's qemu-user (apt-get install qemu-user)" in r.output
    [checked] = max_abs_errors(r.output)
    host = tvmgen("compile", model, "--check", "-o", tmp_path / "host")
    assert max_abs_errors(host.output) == [checked]  # the host build's error, not the aarch64 one
    assert checked != float(f"{aarch64_error_by_hand(model, tmp_path / 'arm', tmp_path):.3g}")


def test_a_failing_aarch64_run_fails_the_check(tvmgen, tmp_path, model):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "qemu-aarch64").write_text('#!/bin/sh\necho "error: emulated crash" >&2\nexit 3\n')
    (fake / "qemu-aarch64").chmod(0o755)
    r = tvmgen(
        "compile",
        model,
        "--platform",
        "linux-aarch64",
        "--check",
        "-o",
        tmp_path / "out",
        extra_env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
    )
    assert r.returncode == 5, r.output
    assert "the aarch64 code failed under qemu-aarch64 (exit 3): error: emulated crash" in r.stderr
    assert "fix: compile without --check" in r.stderr and not (tmp_path / "out").exists()


def test_other_platforms_say_what_was_checked(tvmgen, tmp_path, model):
    r = tvmgen("compile", model, "--platform", "ios-arm64", "--check", "-o", tmp_path / "ios")
    # ios-arm64 builds here too: tvmgen writes the static library's archive itself (ios/archive.py)
    assert r.returncode == 0, r.output
    assert "ios-arm64/cpu (generic) cannot run here; checking a host/cpu build" in r.output
    assert "an iOS static library runs only inside an app on an Apple device" in r.output


def test_stand_in_takes_the_tuning_records_of_the_android_target(tmp_path):
    from tvmgen.compiler.targets import database
    from tvmgen.compiler.targets.platforms import make_target, target_dict
    from tvmgen.runtime.check import _stand_in_database, linux_stand_in

    android = PLATFORMS["android-arm64"].with_features(["+dotprod"])
    stand_in = linux_stand_in(android)
    records = tmp_path / "db" / database.target_name(make_target(target_dict(android, "cpu")))
    records.mkdir(parents=True)
    (records / "database_tuning_record.json").write_text('["a record"]\n')
    copy = _stand_in_database(tmp_path / "db", android, stand_in, tmp_path / "scratch")
    assert database.targets_in(copy) == ["llvm-mattr=+neon,+dotprod-mtriple=aarch64-linux-gnu"]
    assert database.has_records(copy, make_target(target_dict(stand_in, "cpu")))
    assert (copy / database.targets_in(copy)[0] / "database_tuning_record.json").read_text() == '["a record"]\n'
    assert _stand_in_database(None, android, stand_in, tmp_path / "s2") is None
