"""`tvmgen compile --device opencl|vulkan --check` runs the artifact's own GPU code through the host
tvmgen-run where this machine has a device of that API (PoCL, lavapipe, a vendor's driver), and checks a
host/cpu build only where none is, saying what is missing for that device.

Needs PoCL and lavapipe (scripts/bootstrap.sh installs both); without them the tests are skipped (failed
under CI=true).
"""

from __future__ import annotations

import pytest

from conftest import onnx_model, opencl_info, save_onnx, single_op_models, unavailable

# every test compiles a model with --check through the CLI
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """Two convolutions, and a streaming model (a state pair h -> hn) of a few elementwise ops."""
    from onnx import TensorProto, helper

    d = tmp_path_factory.mktemp("check-gpu")

    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 64])

    stream = onnx_model(
        [
            helper.make_node("Add", ["x", "h"], ["s"]),
            helper.make_node("Tanh", ["s"], ["hn"]),
            helper.make_node("Relu", ["hn"], ["y"]),
        ],
        [vi("x"), vi("h")],
        [vi("y"), vi("hn")],
    )
    return {
        "conv": save_onnx(single_op_models()["conv3x3"], d / "conv.onnx"),
        "depthwise": save_onnx(single_op_models()["conv_depthwise"], d / "depthwise.onnx"),
        "stream": save_onnx(stream, d / "stream.onnx"),
    }


@pytest.fixture(scope="module")
def vulkan_device() -> str:
    """The Vulkan device --check finds here (its own probe), after the compile-time tools."""
    from tvmgen.compiler.targets.platforms import get_device
    from tvmgen.core import toolchains
    from tvmgen.runtime import check

    for tool, package in (("glslangValidator", "glslang-tools"), ("spirv-val", "spirv-tools")):
        if toolchains.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install {package}; scripts/bootstrap.sh)")
    runner, found, why = check.gpu_runner(get_device("vulkan"))
    if runner is None:
        unavailable(why)
    return found


def test_opencl_check_runs_the_artifact_itself(tvmgen, models, opencl_lib, tmp_path):
    device = opencl_info(opencl_lib)["devices"][0]["name"]
    r = tvmgen("compile", models["conv"], "--device", "opencl", "--check", "-o", tmp_path / "out")
    assert r.returncode == 0, r.output
    assert f"checking the artifact itself: the host/opencl build on {device} (" in r.output, r.output
    assert "ok y:" in r.output and "host/cpu build" not in r.output, r.output


def test_names_that_are_not_identifiers_build_opencl_kernels(tvmgen, opencl_lib, tmp_path):
    """An input named like a TensorFlow tensor (``in/put:0``) and a weight named like an exported graph's
    (``/head/MatMul_output_0_weight``, a parameter with --separate-params) read directly by kernels: their
    argument names in the OpenCL C source were those names as they are (PoCL: "expected ')'"). The
    artifact builds, matches onnxruntime on PoCL and keeps the model's input name."""
    import json

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "/head/MatMul_output_0_weight")
    bias = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "head.bias")
    model = onnx_model(
        [helper.make_node("Gemm", ["in/put:0", weight.name, bias.name], ["y"], transB=1)],
        [helper.make_tensor_value_info("in/put:0", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [weight, bias],
    )
    path = save_onnx(model, tmp_path / "names.onnx")
    out = tmp_path / "out"
    r = tvmgen("compile", path, "--device", "opencl", "--separate-params", "--check", "-o", out)
    assert r.returncode == 0, r.output
    assert "checking the artifact itself: the host/opencl build on" in r.output and "ok y:" in r.output, r.output
    assert [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]] == ["in/put:0"]


def test_opencl_check_of_a_streaming_model_runs_a_sequence(tvmgen, models, opencl_lib, tmp_path):
    """A stateful model's steps go through one `tvmgen-run --sequence` on the device, the state carried."""
    r = tvmgen("compile", models["stream"], "--state", "h=hn", "--device", "opencl", "--check", "-o", tmp_path / "out")
    assert r.returncode == 0, r.output
    assert "checking the artifact itself: the host/opencl build on" in r.output, r.output
    assert "steps in order" in r.output and "ok y:" in r.output, r.output


def test_opencl_check_without_a_platform_checks_a_host_build(tvmgen, models, opencl_lib, tmp_path):
    """The OpenCL library named by TVMGEN_OPENCL_LIBRARY is missing: the host/cpu build is checked, and the
    reason names the library tried and what to install."""
    r = tvmgen(
        "compile",
        models["depthwise"],
        "--device",
        "opencl",
        "--check",
        "-o",
        tmp_path / "out",
        extra_env={"TVMGEN_OPENCL_LIBRARY": "/nonexistent"},
    )
    assert r.returncode == 0, r.output
    out = " ".join(r.output.split())  # rich wraps long lines
    assert "host/opencl (" in out and "cannot run here; checking a host/cpu build of the same model" in out, out
    assert "why: no OpenCL platform found (no OpenCL library could be loaded; tried: /nonexistent" in out, out
    assert "install pocl-opencl-icd or set TVMGEN_OPENCL_LIBRARY" in out and "ok y:" in out, out
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_vulkan_check_runs_the_artifact_itself(tvmgen, models, vulkan_device, tmp_path):
    r = tvmgen("compile", models["conv"], "--device", "vulkan", "--check", "-o", tmp_path / "out")
    assert r.returncode == 0, r.output
    assert f"checking the artifact itself: the host/vulkan build on {vulkan_device}" in r.output, r.output
    assert "ok y:" in r.output and "host/cpu build" not in r.output, r.output


def test_vulkan_without_a_driver_says_so(vulkan_device, monkeypatch):
    """No Vulkan driver (the loader pointed at a missing one): the reason names Vulkan and lavapipe's package."""
    from tvmgen.compiler.targets.platforms import get_device
    from tvmgen.runtime import check

    monkeypatch.setenv("VK_ICD_FILENAMES", "/nonexistent.json")
    monkeypatch.setenv("VK_DRIVER_FILES", "/nonexistent.json")
    runner, _, why = check.gpu_runner(get_device("vulkan"))
    assert runner is None
    assert why.startswith("no Vulkan driver found (") and "install mesa-vulkan-drivers for lavapipe" in why, why


@pytest.mark.parametrize(
    "pair,words",
    [
        ("android-arm64/opencl", ("OpenCL kernels", "Android NDK's C library", "qemu-aarch64 cannot run")),
        ("android-arm64/vulkan", ("Vulkan kernels", "Android NDK's C library", "qemu-aarch64 cannot run")),
        ("android-x86_64/vulkan", ("Vulkan kernels", "x86_64 code links with the Android NDK's C library")),
        ("linux-aarch64/vulkan", ("Vulkan kernels", "has no GPU")),
        ("ios-arm64/metal", ("Metal kernels", "iOS static library")),
    ],
)
def test_builds_for_other_machines_name_their_device(pair, words):
    """The reasons --check prints for GPU builds it cannot run here name that build's device and platform."""
    from tvmgen.compiler.targets.platforms import PLATFORMS, get_device
    from tvmgen.runtime import check

    platform, device = pair.split("/")
    why = check._not_here(PLATFORMS[platform], get_device(device))
    assert all(w in why for w in words), why
    other = {"opencl": "Vulkan", "vulkan": "OpenCL", "metal": "Vulkan"}[device]
    assert other not in why, why


def test_a_hanging_device_listing_is_stopped(ocl_runtime, monkeypatch):
    """The device listing that hangs is stopped and reported, never waited on."""
    from tvmgen.compiler.targets.platforms import get_device
    from tvmgen.runtime import check

    monkeypatch.setattr(check, "_LISTING", "import time; time.sleep(30)")
    monkeypatch.setattr(check, "LISTING_TIMEOUT_S", 1)
    runner, _, why = check.gpu_runner(get_device("opencl"))
    assert runner is None and "did not finish within 1 s" in why, why
