"""The Android app templates: rendered projects checked by parsing what they hold, and their
native part built on the host with CMake against the host runtime."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import require_tool, save_onnx, single_op_models
from tvmgen import apps, frontends
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.platforms import PLATFORMS
from tvmgen.errors import InputError

ANDROID = "{http://schemas.android.com/apk/res/android}"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    d = tmp_path_factory.mktemp("app-art")
    imported = frontends.load(save_onnx(single_op_models()["softmax"], d / "m.onnx"), [])
    out = {}
    for device in ("opencl", "cpu"):
        out[device] = d / device
        compile_to_artifact(imported, BuildOptions(PLATFORMS["android-arm64"], device, objects_only=True),
                            out[device], True, {"name": "m"})
    return out


def render(tmp_path, artifacts, device="opencl", package="org.example.mobilenet"):
    ctx = apps.android_context("deploy", package, "MobileNet QA", "mobilenet", device, ["arm64-v8a"])
    out = tmp_path / "app"
    apps.create_android_project("deploy", out, ctx, {d: artifacts[d] for d in ctx["model_devices"]})
    return out


def test_deploy_project_files(tmp_path, artifacts):
    out = render(tmp_path, artifacts)
    manifest = ET.parse(out / "app/src/main/AndroidManifest.xml").getroot()
    app = manifest.find("application")
    lib = app.find("uses-native-library")
    assert lib.get(f"{ANDROID}name") == "libOpenCL.so" and lib.get(f"{ANDROID}required") == "false"
    activity = app.find("activity")
    assert activity.get(f"{ANDROID}name") == ".MainActivity" and activity.get(f"{ANDROID}exported") == "true"
    assert activity.find("intent-filter/action").get(f"{ANDROID}name") == "android.intent.action.MAIN"

    gradle = (out / "app/build.gradle").read_text()
    assert "namespace 'org.example.mobilenet'" in gradle and "applicationId 'org.example.mobilenet'" in gradle
    assert re.search(r"compileSdk 34\b", gradle) and "minSdk 24" in gradle and "targetSdk 34" in gradle
    assert "abiFilters 'arm64-v8a'" in gradle and "path 'src/main/cpp/CMakeLists.txt'" in gradle
    assert "targets 'tvmgen_jni', 'tvmgen_jni_bridge', 'tvmgen_opencl'" in gradle  # the OpenCL backend ships
    assert "main.java.srcDirs += '../tvmgen-jni/java'" in gradle
    assert "id 'com.android.application' version '8.5.2'" in (out / "build.gradle").read_text()
    assert 'rootProject.name = "MobileNet QA"' in (out / "settings.gradle").read_text()
    assert "gradle-8.7-bin.zip" in (out / "gradle/wrapper/gradle-wrapper.properties").read_text()
    strings = ET.parse(out / "app/src/main/res/values/strings.xml").getroot()
    assert strings.find("string[@name='app_name']").text == "MobileNet QA"

    java = out / "app/src/main/java/org/example/mobilenet/MainActivity.java"
    src = java.read_text()
    assert src.startswith("package org.example.mobilenet;")
    assert 'MODELS = { "model-opencl", "model-cpu" }' in src  # OpenCL first, CPU fallback
    # the CMake wiring reaches the runtime copied into the project
    cmake = (out / "app/src/main/cpp/CMakeLists.txt").read_text()
    rel = re.search(r"add_subdirectory\(\$\{CMAKE_CURRENT_SOURCE_DIR\}/([^ ]+) ", cmake).group(1)
    assert ((out / "app/src/main/cpp" / rel).resolve() / "CMakeLists.txt").is_file()
    assert (out / "tvmgen-jni/java/org/tvmgen/Model.java").is_file()
    for device in ("opencl", "cpu"):
        assert (out / f"app/src/main/assets/model-{device}/manifest.json").is_file()
    assert not list(out.rglob("*.jinja"))


def test_cpu_project_has_no_opencl_entry(tmp_path, artifacts):
    out = render(tmp_path, artifacts, device="cpu")
    app = ET.parse(out / "app/src/main/AndroidManifest.xml").getroot().find("application")
    assert app.find("uses-native-library") is None
    assert "'tvmgen_opencl'" not in (out / "app/build.gradle").read_text()
    assert 'MODELS = { "model-cpu" }' in (out / "app/src/main/java/org/example/mobilenet/MainActivity.java").read_text()
    assert not (out / "app/src/main/assets/model-opencl").exists()


def test_nnapi_project_declares_nnapi_and_falls_back(tmp_path, artifacts):
    """--device nnapi: NNAPI first (TVM's NNAPI runtime built in), the CPU artifact as fallback, and
    the reason shown on screen when NNAPI cannot run (API < 27, the runtime libraries missing)."""
    ctx = apps.android_context("deploy", "org.example.nn", "NN", "mobilenet", "nnapi", ["arm64-v8a"])
    assert ctx["model_devices"] == ["nnapi", "cpu"]
    out = tmp_path / "nn"
    # the rendering does not look inside the artifacts: the CPU one stands in for the NNAPI one here
    apps.create_android_project("deploy", out, ctx, {"nnapi": artifacts["cpu"], "cpu": artifacts["cpu"]})
    manifest_text = (out / "app/src/main/AndroidManifest.xml").read_text()
    app = ET.fromstring(manifest_text).find("application")
    # libneuralnetworks.so is an NDK public library: no uses-native-library entry (that is for vendor libraries)
    assert app.find("uses-native-library") is None
    assert "libneuralnetworks.so is an NDK public library" in manifest_text
    gradle = (out / "app/build.gradle").read_text()
    assert "'-DTVMGEN_NNAPI=ON'" in gradle and "'tvm_runtime_extra'" in gradle and "'tvmgen_opencl'" not in gradle
    assert "minSdk 24" in gradle  # older phones install it and run on the CPU
    src = (out / "app/src/main/java/org/example/nn/MainActivity.java").read_text()
    assert 'MODELS = { "model-nnapi", "model-cpu" }' in src
    assert 'asset.equals("model-nnapi") ? nnapiMissing() : null' in src
    assert "android.os.Build.VERSION.SDK_INT" in src and "if (api < 27) return \"NNAPI needs Android 8.1 (API 27)" in src
    assert 'System.loadLibrary("tvm_runtime_extra")' in src and "catch (UnsatisfiedLinkError e)" in src
    assert 'show("Falling back to the CPU: " + fallbackReason)' in src  # on screen, and in the results JSON
    assert src.count("{") == src.count("}")
    # and none of it for a CPU app
    cpu = render(tmp_path / "cpu", artifacts, device="cpu")
    for f in ("app/src/main/AndroidManifest.xml", "app/build.gradle",
              "app/src/main/java/org/example/mobilenet/MainActivity.java"):
        text = (cpu / f).read_text()
        assert "nnapi" not in text.lower() and "neuralnetworks" not in text and "tvm_runtime_extra" not in text


def test_rendering_is_strict_and_deterministic(tmp_path, artifacts):
    with pytest.raises(InputError, match="not a valid Android application id"):
        apps.android_context("deploy", "Not-A-Package", "x", "m", "cpu", ["arm64-v8a"])
    a, b = render(tmp_path / "a", artifacts), render(tmp_path / "b", artifacts)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files if "manifest.json" not in str(f))
    ctx = apps.android_context("deploy", "org.x.y", "x", "m", "cpu", ["arm64-v8a"])
    del ctx["min_sdk"]
    with pytest.raises(Exception, match="min_sdk"):
        apps.render("android_deploy", tmp_path / "c", ctx)


def test_app_native_part_builds_on_the_host(tmp_path, artifacts):
    """The app's CMake (the same file Gradle's externalNativeBuild calls) against the host runtime."""
    require_tool("cmake")
    out = render(tmp_path, artifacts)
    import tvm

    site = Path(tvm.__file__).resolve().parent.parent
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", out / "app/src/main/cpp", "-B", build, f"-DTVMGEN_TVM_PREBUILT={site}",
                    "-DTVMGEN_BUILD_TOOLS=OFF"], check=True, capture_output=True)
    r = subprocess.run(["cmake", "--build", build, "-j2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    built = {p.name for p in build.rglob("*.so")}
    assert {"libtvmgen_runtime.so", "libtvmgen_opencl.so"} <= built
    if shutil.which("javac"):
        assert {"libtvmgen_jni.so", "libtvmgen_jni_bridge.so"} <= built


def render_rpc(tmp_path, package="org.tvmgen.rpc"):
    ctx = apps.android_context("rpc", package, "tvmgen RPC", "-", "cpu", ["arm64-v8a", "armeabi-v7a"],
                               rpc_mode="proxy", rpc_port=9191, rpc_key="pixel")
    out = tmp_path / "rpc"
    apps.create_android_project("rpc", out, ctx, {})
    return out


def test_rpc_project_files(tmp_path):
    out = render_rpc(tmp_path)
    manifest = ET.parse(out / "app/src/main/AndroidManifest.xml").getroot()
    perms = {p.get(f"{ANDROID}name") for p in manifest.findall("uses-permission")}
    assert "android.permission.INTERNET" in perms
    app = manifest.find("application")
    assert app.find("service").get(f"{ANDROID}name") == ".RpcService"
    assert app.get(f"{ANDROID}extractNativeLibs") == "true"  # the server executable runs from the lib dir
    assert app.find("uses-native-library").get(f"{ANDROID}name") == "libOpenCL.so"
    gradle = (out / "app/build.gradle").read_text()
    assert "namespace 'org.tvmgen.rpc'" in gradle and "targets 'tvmgen_rpc_server_exe'" in gradle
    assert "abiFilters 'arm64-v8a', 'armeabi-v7a'" in gradle and "useLegacyPackaging true" in gradle
    java = (out / "app/src/main/java/org/tvmgen/rpc/RpcActivity.java").read_text()
    assert '"9191"' in java and '"pixel"' in java and '"proxy".equals("proxy")' in java
    service = (out / "app/src/main/java/org/tvmgen/rpc/RpcService.java").read_text()
    assert "libtvmgen_rpc_server.so" in service and "backoffMs * 2, 10000" in service
    assert "TVMGEN_OPENCL_CACHE_DIR" in service and "'tvmgen_opencl'" in gradle
    assert "adb reverse tcp:9191 tcp:9191" in (out / "README.md").read_text()


def test_rpc_app_native_part_builds_and_runs_on_the_host(tmp_path):
    """The server executable the RPC app packages, built from the app's own CMake, answers --info."""
    require_tool("cmake")
    out = render_rpc(tmp_path)
    import tvm

    site = Path(tvm.__file__).resolve().parent.parent
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", out / "app/src/main/cpp", "-B", build, f"-DTVMGEN_TVM_PREBUILT={site}",
                    "-DTVMGEN_BUILD_JNI=OFF"], check=True, capture_output=True)
    r = subprocess.run(["cmake", "--build", build, "--target", "tvmgen_rpc_server_exe", "-j2"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    exe = build / "libtvmgen_rpc_server.so"
    info = subprocess.run([exe, "--info"], capture_output=True, text=True, check=True)
    import json

    assert json.loads(info.stdout)["arch"] == "x86_64"


# --------------------------------------------------------------------------- tvmgen app / rpc-app

NO_ANDROID = {k: "" for k in ("ANDROID_HOME", "ANDROID_SDK_ROOT", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "TVM_NDK_CC",
                              "TVM_SOURCE_DIR")}


def test_app_renders_and_says_what_is_missing(tvmgen, tmp_path):
    r = tvmgen("app", "--model", "builtin:mobilenet", "--device", "opencl", "--package", "org.qa.mobilenet",
               "-o", tmp_path / "proj", extra_env=NO_ANDROID)
    assert r.returncode == 0, r.stderr
    proj = tmp_path / "proj"
    assert "the project is rendered but no APK was built" in r.stderr and "TVM_SOURCE_DIR is not set" in r.stderr
    assert "Android NDK" in r.stderr and "to finish:" in r.stderr
    import json

    for dev in ("opencl", "cpu"):
        m = json.loads((proj / f"app/src/main/assets/model-{dev}/manifest.json").read_text())
        assert m["platform"] == "android-arm64" and m["device"] == dev
    assert "applicationId 'org.qa.mobilenet'" in (proj / "app/build.gradle").read_text()
    # asked to install, but no APK can be built here: a clear failure, the project kept
    r = tvmgen("app", "--model", "builtin:mobilenet", "-o", tmp_path / "proj2", "--install", extra_env=NO_ANDROID)
    assert r.returncode == 3 and "cannot install or run" in r.stderr and (tmp_path / "proj2/app").is_dir()
    r = tvmgen("app", "--model", "builtin:mobilenet", "-o", tmp_path / "proj", extra_env=NO_ANDROID)
    assert r.returncode == 2 and "already exists" in r.stderr
    r = tvmgen("app", "--model", "builtin:mobilenet", "--package", "Bad Id", "-o", tmp_path / "p3")
    assert r.returncode == 2 and "not a valid Android application id" in r.stderr and not (tmp_path / "p3").exists()
    r = tvmgen("app", "--model", "builtin:mobilenet", "--release", "-o", tmp_path / "p4")
    assert r.returncode == 2 and "--release needs --keystore" in r.stderr


def test_rpc_app_usb_mode(tvmgen, tmp_path):
    r = tvmgen("rpc-app", "--usb", "--port", "9191", "--key", "pixel", "-o", tmp_path / "rpc", extra_env=NO_ANDROID)
    assert r.returncode == 0, r.stderr
    java = (tmp_path / "rpc/app/src/main/java/org/tvmgen/rpc/RpcActivity.java").read_text()
    assert '"127.0.0.1"' in java and '"9191"' in java and '"proxy".equals("proxy")' in java
    assert "adb reverse tcp:9191 tcp:9191" in r.stderr


@pytest.mark.skipif(not all(os.environ.get(v) for v in ("ANDROID_HOME", "ANDROID_NDK_HOME", "TVM_SOURCE_DIR",
                                                        "TVMGEN_TEST_SERIAL")),
                    reason="needs a real Android SDK, NDK, TVM source tree and phone: set ANDROID_HOME, "
                           "ANDROID_NDK_HOME, TVM_SOURCE_DIR and TVMGEN_TEST_SERIAL")
def test_real_gradle_build_and_phone_run(tvmgen, tmp_path):
    r = tvmgen("app", "--model", "builtin:mobilenet", "--install", "--run", "--serial", os.environ["TVMGEN_TEST_SERIAL"],
               "-o", tmp_path / "proj", timeout=3600)
    assert r.returncode == 0, r.stderr
    import json

    results = json.loads(r.stdout)
    assert results["device"] == "cpu" and results["median_run_ms"] > 0 and len(results["outputs"][0]["top5"]) == 5
