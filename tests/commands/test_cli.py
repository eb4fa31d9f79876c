"""The CLI as a user runs it: real subprocesses, real exit codes, what gets printed and written.

Argument and error paths that do no TVM work run tvmgen.cli's main() in this process (conftest's
``tvmgen_inprocess``: click's CliRunner, the same exit codes and output); the rest run ``python -m tvmgen``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import onnx_model, save_onnx, single_op_models

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def leftovers(directory: Path) -> list[str]:
    """Anything a failed compile could have left: the output or its temporary siblings."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith((".out", "out")))


def assert_clean_failure(result, code: int, *phrases: str, where: Path | None = None):
    assert result.returncode == code, result.output
    for phrase in phrases:
        assert phrase in result.stderr, f"{phrase!r} not in:\n{result.stderr}"
    assert "fix:" in result.stderr
    assert "Traceback" not in result.stderr
    log_line = [ln for ln in result.stderr.splitlines() if "log:" in ln]
    assert log_line and Path(log_line[0].split("log:", 1)[1].strip()).is_file()
    if where is not None:
        assert leftovers(where) == []


def test_version_and_help(tvmgen_inprocess):
    from tvmgen import __version__

    r = tvmgen_inprocess("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"tvmgen {__version__}"
    r = tvmgen_inprocess("compile", "--help")
    assert r.returncode == 0
    for flag in ("--platform", "--device", "--input", "--check", "--separate-params", "--objects-only", "--force"):
        assert flag in r.stdout
    assert "android-arm64" in r.stdout and "builtin:mobilenet" in r.stdout


@pytest.mark.slow
def test_compile_builtin_check_inspect_run(tvmgen, tmp_path):
    r = tvmgen("compile", "builtin:mobilenet", "--check")
    assert r.returncode == 0, r.output
    art = tmp_path / "out" / "mobilenet-host-cpu"
    assert "ok probs: max abs error" in r.stderr
    # progress output for each long step
    for stepname in (
        "Importing builtin:mobilenet",
        "Compiling for host/cpu",
        "Exporting the library",
        "Checking against onnxruntime",
    ):
        assert stepname in r.stderr
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["schema_version"] == 1
    assert manifest["inputs"] == [{"name": "input", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert manifest["outputs"] == [{"name": "probs", "shape": [1, 1000], "dtype": "float32"}]
    assert manifest["platform"] == "host" and manifest["device"] == "cpu"
    assert manifest["target"]["kind"] == "llvm" and manifest["target"]["mcpu"]
    assert manifest["export"] == {"kind": "shared", "library": "model.so", "system_lib": False, "finish_command": None}
    assert manifest["vm"]["devices"] == [{"name": "cpu", "dl_device_type": 1, "id": 0, "alloc_type": 2}]
    assert manifest["versions"]["tvm"] == "0.27.0.post1"
    import hashlib

    lib = (art / "model.so").read_bytes()
    assert manifest["files"]["model.so"] == {"sha256": hashlib.sha256(lib).hexdigest(), "bytes": len(lib)}
    assert len(manifest["model"]["sha256"]) == 64

    r = tvmgen("inspect", art)
    assert r.returncode == 0
    assert "input:1x3x224x224:float32" in r.stdout and "probs:1x1000:float32" in r.stdout
    r = tvmgen("inspect", art, "--json")
    shown = json.loads(r.stdout)
    assert {k: v for k, v in shown.items() if k in manifest} == manifest  # the manifest, plus the memory figures
    assert shown["memory"]["weights_bytes"] > 0 and shown["memory"]["planned_workspace_bytes"] > 0

    # run with a given input; outputs written as .npy and equal to onnxruntime's
    import onnxruntime as ort

    from tvmgen.frontends.builtin import mobilenet_onnx

    x = np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = tvmgen("run", art, "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "res", "--repeat", "3")
    assert r.returncode == 0, r.output
    assert "median of 3 runs" in r.stderr and "probs: shape (1, 1000)" in r.stdout
    got = np.load(tmp_path / "res" / "probs.npy")
    want = ort.InferenceSession(mobilenet_onnx().SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    r = tvmgen("run", art, "--json", "--repeat", "2", "--threads", "1")
    summary = json.loads(r.stdout)
    assert summary["threads"] == 1
    assert summary["timings"]["runs"] == 2 and summary["timings"]["median_ms"] > 0
    assert len(summary["outputs"][0]["top5"]) == 5


@pytest.mark.slow
def test_run_rejects_wrong_shape_and_unknown_name(tvmgen_inprocess, tmp_path, compiled, builtin_onnx):
    art = compiled(builtin_onnx)  # the session's build: run refuses before running anything
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 10, 10), np.float32))
    r = tvmgen_inprocess("run", art, "--input", tmp_path / "bad.npy")
    assert r.returncode == 2 and "has shape (1, 3, 10, 10), the model expects (1, 3, 224, 224)" in r.stderr
    r = tvmgen_inprocess("run", art, "--input", f"nope={tmp_path / 'bad.npy'}")
    assert r.returncode == 2 and "unknown input name(s) nope" in r.stderr and "input:1x3x224x224" in r.stderr


def test_run_detects_tampered_artifact(tvmgen_inprocess, tmp_path, compiled, builtin_onnx):
    art = tmp_path / "a"
    shutil.copytree(compiled(builtin_onnx), art)  # a copy of the session's build, then tampered with
    with open(art / "model.so", "r+b") as f:
        f.seek(1000)
        f.write(b"\0garbage")
    r = tvmgen_inprocess("run", art)
    assert r.returncode == 2 and "does not match the sha256" in r.stderr


def test_check_failure_leaves_no_artifact(tvmgen, tmp_path):
    # builtin:tiny ends in a softmax that differs from onnxruntime's in the last bits (3e-8): zero tolerance fails
    r = tvmgen("compile", "builtin:tiny", "--check", "--atol", "0", "--rtol", "0", "-o", tmp_path / "out")
    assert_clean_failure(r, 5, "outputs differ from onnxruntime", "no artifact was written", where=tmp_path)


def test_force_replaces_and_refuses_without(tvmgen, tmp_path):
    model = save_onnx(single_op_models()["softmax"], tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert tvmgen("compile", model, "-o", out).returncode == 0
    first = (out / "manifest.json").read_text()
    r = tvmgen("compile", model, "-o", out)
    assert r.returncode == 2 and "already exists" in r.stderr and "--force" in r.stderr
    assert (out / "manifest.json").read_text() == first
    r = tvmgen("compile", model, "-o", out, "--force")
    assert r.returncode == 0
    assert json.loads((out / "manifest.json").read_text())["created"]
    assert leftovers(tmp_path) == ["out"]


# --------------------------------------------------------------------------- bad input


def test_missing_file(tvmgen_inprocess, tmp_path):
    r = tvmgen_inprocess("compile", tmp_path / "nope.onnx", "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "does not exist", where=tmp_path)


def test_unknown_extension(tvmgen_inprocess, tmp_path):
    (tmp_path / "model.caffemodel").write_bytes(b"xx")
    r = tvmgen_inprocess("compile", tmp_path / "model.caffemodel", "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "unknown extension .caffemodel", ".onnx, .tflite, .pt2", where=tmp_path)


def test_truncated_onnx(tvmgen, tmp_path, builtin_onnx):
    data = builtin_onnx.read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 3])
    r = tvmgen("compile", tmp_path / "cut.onnx", "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "not a readable ONNX model", "truncated", where=tmp_path)


def test_truncated_tflite(tvmgen, tmp_path, tflite_model):
    data = tflite_model.read_bytes()
    (tmp_path / "cut.tflite").write_bytes(data[: len(data) // 2])
    r = tvmgen("compile", tmp_path / "cut.tflite", "-o", tmp_path / "out")
    assert r.returncode == 2, r.output
    assert "corrupt" in r.stderr and leftovers(tmp_path) == []


def test_garbage_tflite_and_pb_and_pt2(tvmgen, tmp_path):
    for name in ("junk.tflite", "junk.pb", "junk.pt2"):
        (tmp_path / name).write_bytes(b"\x08\x01this is not a model at all" * 10)
        r = tvmgen("compile", tmp_path / name, "-o", tmp_path / "out")
        assert r.returncode == 2, r.output
        assert "fix:" in r.stderr and "Traceback" not in r.stderr
        assert leftovers(tmp_path) == []


def test_unsupported_onnx_operator_names_op_and_node(tvmgen, tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("FancyActivation", ["x"], ["y"], name="block3/fancy", domain="com.example")
    model = onnx_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    r = tvmgen("compile", save_onnx(model, tmp_path / "m.onnx"), "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "unsupported operator", "com.example.FancyActivation", "block3/fancy", where=tmp_path)


def test_check_says_when_onnxruntime_cannot_load_the_model(tvmgen, tmp_path):
    """A model TVM imports but onnxruntime rejects (opset 17 ReduceMean given its axes as an input, as
    opset 18 writes it): --check names the reference's refusal, exit 5, nothing written."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    model = onnx_model(
        [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [axes],
    )
    r = tvmgen("compile", save_onnx(model, tmp_path / "m.onnx"), "--check", "-o", tmp_path / "out")
    assert_clean_failure(
        r,
        5,
        "onnxruntime, the reference --check compares with, cannot load this model",
        "INVALID_GRAPH",
        where=tmp_path,
    )
    assert "internal error" not in r.stderr


def test_tflite_custom_operator(tvmgen, tmp_path, tflite_custom_op):
    r = tvmgen("compile", tflite_custom_op, "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "unsupported TFLite operator", "CUSTOM:", where=tmp_path)


@pytest.mark.slow
def test_dynamic_dims_need_input_flag(tvmgen, tmp_path, torch_onnx):
    r = tvmgen("compile", torch_onnx, "-o", tmp_path / "out")
    assert_clean_failure(
        r, 2, "input 'image' has dynamic dimensions (?x3x64x64)", "--input image:Nx3x64x64:float32", where=tmp_path
    )
    r = tvmgen("compile", torch_onnx, "--input", "image:1x3x64x64", "-o", tmp_path / "out", "--check")
    assert r.returncode == 0, r.output


@pytest.mark.slow
def test_pb_dynamic_batch_then_fixed(tvmgen, tmp_path, pb_model):
    r = tvmgen("compile", pb_model, "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "'input:0' has dynamic dimensions", "--input input:0:Nx32x32x3", where=tmp_path)
    r = tvmgen("compile", "--model", pb_model, "--input", "input:1x32x32x3", "-o", tmp_path / "out", "--check")
    assert r.returncode == 0, r.output
    assert "graph inputs: input:0; outputs: Identity:0 (detected" in r.stderr
    assert "onnxruntime" in r.stderr and "tf2onnx" in r.stderr


def test_input_flag_errors(tvmgen_inprocess, tmp_path):
    model = save_onnx(single_op_models()["softmax"], tmp_path / "m.onnx")
    r = tvmgen_inprocess("compile", model, "--input", "a:3by10", "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "cannot read --input 'a:3by10'", "NAME:SHAPE[:DTYPE]", where=tmp_path)
    r = tvmgen_inprocess("compile", model, "--input", "b:3x10", "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "not among the model's inputs", "the model's inputs are: a", where=tmp_path)
    r = tvmgen_inprocess("compile", model, "--input", "a:3x10x1", "-o", tmp_path / "out")
    assert_clean_failure(r, 2, "rank 2", where=tmp_path)


@pytest.mark.parametrize(
    "platform,device,phrase",
    [
        ("ios-arm64", "opencl", "device 'opencl' is not available on platform 'ios-arm64'"),
        ("android-arm64", "metal", "device 'metal' is not available on platform 'android-arm64'"),
        ("windows-x64", "cpu", "unknown platform 'windows-x64'"),
        ("host", "nnapi", "device 'nnapi' is not available on platform 'host'"),
    ],
)
def test_invalid_platform_device(tvmgen_inprocess, tmp_path, platform, device, phrase):
    r = tvmgen_inprocess("compile", "builtin:mobilenet", "--platform", platform, "--device", device)
    assert_clean_failure(r, 2, phrase, where=tmp_path)
    if "available" in phrase:
        assert "host/cpu" in r.stderr and "android-arm64/opencl" in r.stderr and "ios-arm64/metal" in r.stderr


def test_missing_cross_compiler(tvmgen_inprocess, tmp_path):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    r = tvmgen_inprocess("compile", "builtin:mobilenet", "--platform", "linux-aarch64", extra_env={"PATH": str(empty)})
    assert_clean_failure(
        r, 3, "aarch64-linux-gnu-g++ not found", "apt-get install g++-aarch64-linux-gnu", where=tmp_path
    )
    assert "Compiling" not in r.stderr  # found missing before any compiling started
    r = tvmgen_inprocess(
        "compile",
        "builtin:mobilenet",
        "--platform",
        "linux-aarch64",
        extra_env={"TVMGEN_AARCH64_CXX": str(tmp_path / "no-such-g++")},
    )
    assert_clean_failure(r, 3, "TVMGEN_AARCH64_CXX", "is not an executable file", where=tmp_path)


def test_missing_ndk(tvmgen_inprocess, tmp_path):
    env = dict.fromkeys(("TVM_NDK_CC", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "ANDROID_HOME", "ANDROID_SDK_ROOT"), "")
    r = tvmgen_inprocess("compile", "builtin:mobilenet", "--platform", "android-arm64", extra_env=env)
    assert_clean_failure(
        r,
        3,
        "Android NDK not found",
        "TVM_NDK_CC, ANDROID_NDK_HOME, ANDROID_NDK_ROOT, ANDROID_HOME",
        "--objects-only",
        where=tmp_path,
    )
    r = tvmgen_inprocess(
        "compile",
        "builtin:mobilenet",
        "--platform",
        "android-arm64",
        extra_env={**env, "ANDROID_NDK_HOME": str(tmp_path / "ndk-missing")},
    )
    assert_clean_failure(r, 3, "ANDROID_NDK_HOME=", "is not a directory", where=tmp_path)


def test_no_model_and_inspect_non_artifact(tvmgen_inprocess, tmp_path):
    r = tvmgen_inprocess("compile")
    assert r.returncode == 2 and "no model given" in r.stderr
    r = tvmgen_inprocess("inspect", tmp_path)
    assert r.returncode == 2 and "not a tvmgen artifact directory" in r.stderr
    r = tvmgen_inprocess("compile", "builtin:resnet")
    assert r.returncode == 2 and "builtin:mobilenet" in r.stderr


def test_verbose_flags_and_log_file(tvmgen, tmp_path):
    model = save_onnx(single_op_models()["softmax"], tmp_path / "m.onnx")
    r = tvmgen("-vv", "compile", model, "-o", tmp_path / "out")
    assert r.returncode == 0
    assert "DEBUG: tvmgen compile: argv=" in r.stderr
    logs = list((tmp_path / "logs").glob("*-compile-*.log"))
    assert len(logs) == 1 and "Compiling for host/cpu" in logs[0].read_text()
