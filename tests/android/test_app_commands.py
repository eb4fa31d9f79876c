"""`tvmgen app` and `tvmgen rpc-app` on the command line: projects rendered without the Android tools (and
what is missing said), bad options refused, and the real Gradle build run on a phone where one is set up."""

from __future__ import annotations

import os
import re

import pytest

NO_ANDROID = dict.fromkeys(
    ("ANDROID_HOME", "ANDROID_SDK_ROOT", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "TVM_NDK_CC", "TVM_SOURCE_DIR"), ""
)


def test_app_renders_and_says_what_is_missing(tvmgen, tmp_path):
    r = tvmgen(
        "app",
        "--model",
        "builtin:tiny",
        "--device",
        "opencl",
        "--package",
        "org.qa.tiny",
        "-o",
        tmp_path / "proj",
        extra_env=NO_ANDROID,
    )
    assert r.returncode == 0, r.stderr
    proj = tmp_path / "proj"
    assert "the project is rendered but no APK was built" in r.stderr and "TVM_SOURCE_DIR is not set" in r.stderr
    assert "Android NDK" in r.stderr and "to finish:" in r.stderr
    import json

    for dev in ("opencl", "cpu"):
        m = json.loads((proj / f"app/src/main/assets/model-{dev}/manifest.json").read_text())
        assert m["platform"] == "android-arm64" and m["device"] == dev
    assert "applicationId 'org.qa.tiny'" in (proj / "app/build.gradle").read_text()
    # asked to install, but no APK can be built here: a clear failure, the project kept
    r = tvmgen("app", "--model", "builtin:tiny", "-o", tmp_path / "proj2", "--install", extra_env=NO_ANDROID)
    assert r.returncode == 3 and "cannot install or run" in r.stderr and (tmp_path / "proj2/app").is_dir()
    r = tvmgen("app", "--model", "builtin:tiny", "-o", tmp_path / "proj", extra_env=NO_ANDROID)
    assert r.returncode == 2 and "already exists" in r.stderr
    r = tvmgen("app", "--model", "builtin:tiny", "--package", "Bad Id", "-o", tmp_path / "p3")
    assert r.returncode == 2 and "not a valid Android application id" in r.stderr and not (tmp_path / "p3").exists()
    r = tvmgen("app", "--model", "builtin:tiny", "--release", "-o", tmp_path / "p4")
    assert r.returncode == 2 and "--release needs --keystore" in r.stderr


def test_rpc_app_usb_mode(tvmgen, tmp_path):
    r = tvmgen("rpc-app", "--usb", "--port", "9191", "--key", "pixel", "-o", tmp_path / "rpc", extra_env=NO_ANDROID)
    assert r.returncode == 0, r.stderr
    java = (tmp_path / "rpc/app/src/main/java/org/tvmgen/rpc/RpcActivity.java").read_text()
    assert '"127.0.0.1"' in java and '"9191"' in java and '"proxy".equals("proxy")' in java
    assert "adb reverse tcp:9191 tcp:9191" in r.stderr


@pytest.mark.skipif(
    not all(os.environ.get(v) for v in ("ANDROID_HOME", "ANDROID_NDK_HOME", "TVM_SOURCE_DIR", "TVMGEN_TEST_SERIAL")),
    reason="needs a real Android SDK, NDK, TVM source tree and phone (with Vulkan for [vulkan]): set ANDROID_HOME, "
    "ANDROID_NDK_HOME, TVM_SOURCE_DIR and TVMGEN_TEST_SERIAL",
)
@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_real_gradle_build_and_phone_run(tvmgen, tmp_path, device):
    """The deploy app built by Gradle with the NDK, installed and run on a phone. On Vulkan (issue 36) the model
    ran on Vulkan, not the CPU fallback, and the APK ships the Vulkan backend: what the rendering tests
    (test_vulkan.py::test_android_app_renders_for_vulkan) cannot show."""
    r = tvmgen(
        "app",
        "--model",
        "builtin:mobilenet",
        *(["--device", device] if device != "cpu" else []),
        "--install",
        "--run",
        "--serial",
        os.environ["TVMGEN_TEST_SERIAL"],
        "-o",
        tmp_path / "proj",
        timeout=3600,
    )
    assert r.returncode == 0, r.stderr
    import json

    results = json.loads(r.stdout)
    assert results["device"] == device and results["median_run_ms"] > 0 and len(results["outputs"][0]["top5"]) == 5
    # each model build's library is a native library of the APK, stored uncompressed (loaded in place; the app
    # checked its 16 KB alignment before signing), and no copy of it is among the assets
    import zipfile

    (apk,) = (tmp_path / "proj" / "apk").glob("*.apk")
    with zipfile.ZipFile(apk) as z:
        for build in dict.fromkeys([device, "cpu"]):  # a Vulkan app carries the CPU build as its fallback
            pattern = rf"lib/arm64-v8a/libtvmgen_model_mobilenet_{build}_[0-9a-f]{{12}}\.so"
            (lib,) = [i for i in z.infolist() if re.fullmatch(pattern, i.filename)]
            assert lib.compress_type == zipfile.ZIP_STORED
        if device == "vulkan":
            assert z.getinfo("lib/arm64-v8a/libtvmgen_vulkan.so").compress_type == zipfile.ZIP_STORED
        assert not [n for n in z.namelist() if n.startswith("assets/") and n.endswith(".so")]
