"""The Android app templates rendered: the deploy app's project checked by parsing what it holds, and every
rendered app (deploy and RPC) checked for what Android requires and for current, pinned Gradle files."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from templates_support import ANDROID, compile_app_artifacts, render, render_rpc
from tvmgen.android import downloads
from tvmgen.android import project as android_project
from tvmgen.apps import templates
from tvmgen.compiler.targets.platforms import app_devices
from tvmgen.core.errors import InputError


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The softmax model compiled for android-arm64 (objects only), for OpenCL and for the CPU."""
    return compile_app_artifacts(tmp_path_factory.mktemp("app-art"))


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
    assert re.search(r"compileSdk 35\b", gradle) and "minSdk 24" in gradle and "targetSdk 35" in gradle
    assert "abiFilters 'arm64-v8a'" in gradle and "path 'src/main/cpp/CMakeLists.txt'" in gradle
    assert "targets 'tvmgen_jni', 'tvmgen_jni_bridge', 'tvmgen_opencl'" in gradle  # the OpenCL backend ships
    assert "main.java.srcDirs += ['../tvmgen-jni/java', '../tvmgen-jni/java-android']" in gradle
    # 16 KB pages: the NDK told to align every library, and the libraries kept uncompressed (page-aligned by AGP);
    # the models' libraries (src/main/jniLibs) left unstripped, the bytes their manifests' sha256 describe
    assert "'-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON'" in gradle
    jni_libs = re.search(r"packaging \{\s*jniLibs \{(.*?)\n        \}", gradle, re.S).group(1)
    assert "useLegacyPackaging = false" in jni_libs, jni_libs
    assert "keepDebugSymbols += ['**/libtvmgen_model_*.so']" in jni_libs, jni_libs
    assert "packagingOptions" not in gradle  # AGP 8's name for it is packaging
    assert "id 'com.android.application' version '8.6.1'" in (out / "build.gradle").read_text()
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
        # objects only (no NDK here): the objects go to the app's CMake, which links the library library.txt names
        assert not (out / f"app/src/main/assets/model-{device}/model.tar").exists()
        assert (out / f"app/src/main/assets/model-{device}/library.txt").is_file()
        assert list((out / f"app/src/main/cpp/models/model-{device}").glob("*.o"))
    assert not (out / "app/src/main/jniLibs").exists()
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
    ctx = android_project.android_context(
        "deploy", "org.example.nn", "NN", "mobilenet", ["nnapi", "cpu"], ["arm64-v8a"]
    )
    assert ctx["model_devices"] == ["nnapi", "cpu"]
    out = tmp_path / "nn"
    # the rendering does not look inside the artifacts: the CPU one stands in for the NNAPI one here
    android_project.create_android_project("deploy", out, ctx, {"nnapi": artifacts["cpu"], "cpu": artifacts["cpu"]})
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
    assert "android.os.Build.VERSION.SDK_INT" in src and 'if (api < 27) return "NNAPI needs Android 8.1 (API 27)' in src
    assert 'System.loadLibrary("tvm_runtime_extra")' in src and "catch (UnsatisfiedLinkError e)" in src
    assert 'show("Falling back to the CPU: " + fallbackReason)' in src  # on screen, and in the results JSON
    assert src.count("{") == src.count("}")
    # and none of it for a CPU app
    cpu = render(tmp_path / "cpu", artifacts, device="cpu")
    for f in (
        "app/src/main/AndroidManifest.xml",
        "app/build.gradle",
        "app/src/main/java/org/example/mobilenet/MainActivity.java",
    ):
        text = (cpu / f).read_text()
        assert "nnapi" not in text.lower() and "neuralnetworks" not in text and "tvm_runtime_extra" not in text


def test_rendering_is_strict_and_deterministic(tmp_path, artifacts):
    with pytest.raises(InputError, match="not a valid Android application id"):
        android_project.android_context("deploy", "Not-A-Package", "x", "m", ["cpu"], ["arm64-v8a"])
    a, b = render(tmp_path / "a", artifacts), render(tmp_path / "b", artifacts)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files if "manifest.json" not in str(f))
    ctx = android_project.android_context("deploy", "org.x.y", "x", "m", ["cpu"], ["arm64-v8a"])
    del ctx["min_sdk"]
    with pytest.raises(Exception, match="min_sdk"):
        templates.render("android_deploy", tmp_path / "c", ctx)


# --------------------------------------------------------------------------- static checks of the rendered apps
# (what Android Lint would say, which cannot run without the SDK)


def render_all(tmp_path, artifacts) -> dict[str, Path]:
    """The RPC app and the deploy app for each device, rendered."""
    out = {"rpc": render_rpc(tmp_path)}
    for device in ("opencl", "vulkan", "nnapi", "cpu"):
        ctx = android_project.android_context("deploy", "org.example.app", "A", "m", app_devices(device), ["arm64-v8a"])
        out[device] = tmp_path / device
        android_project.create_android_project(
            "deploy", out[device], ctx, dict.fromkeys(ctx["model_devices"], artifacts["cpu"])
        )
    return out


def test_manifests_declare_what_android_requires(tmp_path, artifacts):
    """Every component with an intent filter says whether it is exported (required from API 31); every
    foreground service has a type, the permission for that type and, for specialUse, the property saying why."""
    for name, project in render_all(tmp_path, artifacts).items():
        manifest = ET.parse(project / "app/src/main/AndroidManifest.xml").getroot()
        perms = {p.get(f"{ANDROID}name") for p in manifest.findall("uses-permission")}
        app = manifest.find("application")
        components = [c for tag in ("activity", "service", "receiver", "provider") for c in app.findall(tag)]
        assert components, name
        for c in components:
            if c.find("intent-filter") is not None:
                assert c.get(f"{ANDROID}exported") in ("true", "false"), (name, c.get(f"{ANDROID}name"))
        for service in app.findall("service"):
            types = service.get(f"{ANDROID}foregroundServiceType")
            assert types, (name, "a service started with startForegroundService needs its type")
            assert "android.permission.FOREGROUND_SERVICE" in perms, name
            for t in types.split("|"):
                snake = re.sub(r"(?<!^)([A-Z])", r"_\1", t).upper()
                assert f"android.permission.FOREGROUND_SERVICE_{snake}" in perms, (name, t)
            if "specialUse" in types.split("|"):
                (prop,) = service.findall("property")
                assert prop.get(f"{ANDROID}name") == "android.app.PROPERTY_SPECIAL_USE_FGS_SUBTYPE"
                assert len(prop.get(f"{ANDROID}value")) > 20  # the reason, for Google Play's review
        if name == "rpc":
            (service,) = app.findall("service")
            assert service.get(f"{ANDROID}foregroundServiceType") == "specialUse"
            assert service.get(f"{ANDROID}exported") == "false"
            assert {
                "android.permission.INTERNET",
                "android.permission.FOREGROUND_SERVICE",
                "android.permission.FOREGROUND_SERVICE_SPECIAL_USE",
                "android.permission.POST_NOTIFICATIONS",
                "android.permission.WAKE_LOCK",
            } <= perms
            # `am start` again while the screen is up reaches the same activity (onNewIntent)
            assert app.find("activity").get(f"{ANDROID}launchMode") == "singleTop"
        else:
            # the deploy app runs in its activity: no service, and no permission it does not use
            assert app.find("service") is None and not perms, (name, perms)


# Gradle and AGP names removed or deprecated in AGP 8 (their replacements: packaging, compileSdk, minSdk,
# targetSdk, lint, androidResources; implementation instead of compile; jcenter is read-only)
DEPRECATED_GRADLE = (
    "packagingOptions",
    "compileSdkVersion",
    "minSdkVersion",
    "targetSdkVersion",
    "lintOptions",
    "aaptOptions",
    "dexOptions",
    "buildToolsVersion",
    "useProguard",
    "jcenter",
    "android.enableJetifier",
)


def test_gradle_files_are_current_and_pinned(tmp_path, artifacts):
    """No deprecated Gradle DSL; the AGP, compileSdk, targetSdk, NDK, CMake and Gradle versions rendered are
    the ones tvmgen pins (tvmgen.android.project, from which `tvmgen doctor --install` downloads them)."""
    for name, project in render_all(tmp_path, artifacts).items():
        files = [*project.glob("*.gradle"), project / "app/build.gradle", project / "gradle.properties"]
        for f in files:
            text = f.read_text()
            for word in DEPRECATED_GRADLE:
                assert not re.search(rf"\b{re.escape(word)}\b", text), (name, f.name, word)
            assert not re.search(r"^\s*compile\s", text, re.M), (name, f.name)
        app = (project / "app/build.gradle").read_text()
        assert re.search(r"^\s*packaging \{", app, re.M), name
        assert int(re.search(r"^\s*compileSdk (\d+)$", app, re.M).group(1)) == android_project.COMPILE_SDK
        assert int(re.search(r"^\s*targetSdk (\d+)$", app, re.M).group(1)) == android_project.COMPILE_SDK
        assert re.search(r"^\s*ndkVersion '([^']+)'$", app, re.M).group(1) == android_project.NDK_VERSION
        assert re.search(r"^\s*version '([^']+)'$", app, re.M).group(1) == downloads.CMAKE_VERSION
        root = (project / "build.gradle").read_text()
        agp = re.search(r"id 'com\.android\.application' version '([^']+)'", root).group(1)
        assert agp == android_project.AGP_VERSION, name
        wrapper = (project / "gradle/wrapper/gradle-wrapper.properties").read_text()
        assert re.search(r"gradle-([0-9.]+)-bin\.zip", wrapper).group(1) == android_project.GRADLE_VERSION
