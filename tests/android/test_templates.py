"""The Android app templates: rendered projects checked by parsing what they hold, and their
native part built on the host with CMake against the host runtime."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TESTS, require_tool, save_onnx, single_op_models
from helpers import cmake_build, cmake_configure
from tvmgen import frontends
from tvmgen.android import downloads
from tvmgen.android import project as android_project
from tvmgen.apps import templates
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS, app_devices
from tvmgen.core.errors import InputError
from tvmgen.reports import agreement

ANDROID = "{http://schemas.android.com/apk/res/android}"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    d = tmp_path_factory.mktemp("app-art")
    imported = frontends.load(save_onnx(single_op_models()["softmax"], d / "m.onnx"), [])
    out = {}
    for device in ("opencl", "cpu"):
        out[device] = d / device
        compile_to_artifact(
            imported,
            BuildOptions(PLATFORMS["android-arm64"], device, objects_only=True),
            out[device],
            True,
            {"name": "m"},
        )
    return out


def render(tmp_path, artifacts, device="opencl", package="org.example.mobilenet"):
    ctx = android_project.android_context(
        "deploy", package, "MobileNet QA", "mobilenet", app_devices(device), ["arm64-v8a"]
    )
    out = tmp_path / "app"
    android_project.create_android_project("deploy", out, ctx, {d: artifacts[d] for d in ctx["model_devices"]})
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


@pytest.fixture(scope="module")
def host_app(tmp_path_factory, artifacts):
    """An OpenCL deploy project whose CPU fallback asset is a host (x86_64/aarch64) artifact, its native
    part built on the host with the app's CMake (the same file Gradle's externalNativeBuild calls)."""
    require_tool("cmake")

    d = tmp_path_factory.mktemp("host-app")
    imported = frontends.load(save_onnx(single_op_models()["softmax"], d / "m.onnx"), [])
    model = {"name": "m", "source": str(d / "m.onnx")}  # the source lets the host run its reference
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), d / "host-cpu", True, model)
    out = render(d, {"opencl": artifacts["opencl"], "cpu": d / "host-cpu"})
    build = cmake_configure(out / "app/src/main/cpp", d / "build", "-DTVMGEN_BUILD_TOOLS=OFF")
    cmake_build(build)
    return {"project": out, "build": build, "host_artifact": d / "host-cpu"}


def test_model_library_packaged_as_native_library(host_app):
    """A linked artifact ships its library as one of the app's native libraries (jniLibs/<abi>/, the APK's
    lib/<abi>/), byte for byte what its manifest's sha256 describes, named in its assets; the rest stays there."""
    main = host_app["project"] / "app/src/main"
    manifest = json.loads((main / "assets/model-cpu/manifest.json").read_text())
    sha = manifest["files"]["model.so"]["sha256"]
    name = (main / "assets/model-cpu/library.txt").read_text()
    assert name == f"libtvmgen_model_m_cpu_{sha[:12]}.so\n"
    (lib,) = (main / "jniLibs").rglob("*.so")
    assert lib.relative_to(main / "jniLibs").as_posix() == f"{manifest['abi']}/{name.strip()}"
    assert hashlib.sha256(lib.read_bytes()).hexdigest() == sha
    shipped = {p.name for p in (main / "assets/model-cpu").iterdir()}
    assert shipped == {p.name for p in host_app["host_artifact"].iterdir()} - {"model.so"} | {"library.txt"}
    # the OpenCL artifact has objects only (no NDK here): linked by the app's CMake, nothing in jniLibs/ for it
    assert not (main / "assets/model-opencl/model.tar").exists() and (main / "cpp/models/model-opencl").is_dir()
    # an artifact whose library changed after compiling is refused, not packaged
    changed = host_app["project"].parent / "changed"
    shutil.copytree(host_app["host_artifact"], changed)
    with open(changed / "model.so", "ab") as f:
        f.write(b"\0")
    with pytest.raises(InputError, match="does not match the sha256"):
        android_project.package_model(changed)


def test_app_native_part_builds_on_the_host(host_app):
    """The app's CMake (the same file Gradle's externalNativeBuild calls) against the host runtime."""
    built = {p.name for p in host_app["build"].rglob("*.so")}
    assert {"libtvmgen_runtime.so", "libtvmgen_opencl.so"} <= built
    if shutil.which("javac"):
        assert {"libtvmgen_jni.so", "libtvmgen_jni_bridge.so"} <= built


# Just enough of the Android API, with its real signatures, for the apps' Java sources to compile against, and
# for the deploy app's MainActivity to run on a desktop JVM (tests/java/android_stubs/README.md).
ANDROID_STUBS = TESTS / "java" / "android_stubs"


def compile_app_java(project: Path, package: str, into: Path) -> Path:
    """javac (Java 8 API) every Java source the rendered app has (its activity, and the RPC app's service),
    with the project's own copy of the Java API (what Gradle's main.java.srcDirs adds) and ANDROID_STUBS;
    returns the classes directory."""
    require_tool("javac")
    sources = [
        *sorted(ANDROID_STUBS.rglob("*.java")),
        *(project / "tvmgen-jni/java/org/tvmgen").glob("*.java"),
        *(project / "tvmgen-jni/java-android").rglob("*.java"),  # Android-only classes, as Gradle's srcDirs
        *sorted((project / "app/src/main/java" / package.replace(".", "/")).glob("*.java")),
    ]
    classes = into / "classes"
    r = subprocess.run(
        ["javac", "--release", "8", "-Xlint:-options", "-encoding", "UTF-8", "-d", classes, *sources],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return classes


def test_app_java_compiles_for_every_device(tmp_path, artifacts):
    """The activity of each variant (OpenCL with CPU fallback, CPU, NNAPI) compiles against the Java API."""
    for device in ("opencl", "cpu", "nnapi"):
        ctx = android_project.android_context("deploy", "org.example.app", "A", "m", app_devices(device), ["arm64-v8a"])
        out = tmp_path / device
        android_project.create_android_project(
            "deploy", out, ctx, dict.fromkeys(ctx["model_devices"], artifacts["cpu"])
        )
        src = (out / "app/src/main/java/org/example/app/MainActivity.java").read_text()
        assert '.putJson("memory", memory.toJson())' in src and 'getBooleanExtra("profile", false)' in src
        compile_app_java(out, "org.example.app", tmp_path / f"{device}-java")
    readme = (out / "README.md").read_text()
    for key in ("after_load_peak_bytes", "overall_peak_bytes", "--ez profile true", "kernels_median_ms"):
        assert key in readme, key


def run_app_on_host(host_app, tmp_path, native_libraries=True, scenario="start", jni=True, **extras) -> dict:
    """The rendered app's MainActivity on this JVM (ANDROID_STUBS), its native part the host build. The
    project's jniLibs/<abi>/ (the APK's lib/<abi>/) is on the dynamic linker's path (LD_LIBRARY_PATH), where
    an app's own native libraries are on Android, unless ``native_libraries`` is False; the JNI library on
    java.library.path unless ``jni`` is False. ``scenario``: the activity's lifecycle (TvmgenHostLauncher)."""
    require_tool("java")
    project = host_app["project"]
    classes = compile_app_java(project, "org.example.mobilenet", tmp_path)
    root = tmp_path / "device"
    shutil.copytree(project / "app/src/main/assets", root / "assets")
    jni_dir = next(host_app["build"].rglob("libtvmgen_jni.so")).parent if jni else tmp_path / "no-jni"
    env = dict(os.environ)
    if native_libraries:
        (abi_dir,) = (project / "app/src/main/jniLibs").iterdir()
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(abi_dir), env.get("LD_LIBRARY_PATH")]))
    props = [f"-Dextra.{k}={str(v).lower()}" for k, v in {"iterations": 3, "exit": True, **extras}.items()]
    r = subprocess.run(
        [
            "java",
            f"-Djava.library.path={jni_dir}",
            *props,
            "-cp",
            classes,
            "android.app.TvmgenHostLauncher",
            root,
            "org.example.mobilenet.MainActivity",
            scenario,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    results = json.loads((root / "external/tvmgen-results.json").read_text())
    return results, r.stdout


def test_app_results_have_memory_and_profile(host_app, tmp_path):
    """tvmgen-results.json from the real activity: the OpenCL (android-arm64) artifact cannot load here,
    so it falls back to the host CPU artifact; memory after load and overall; the profile when asked."""
    results, log = run_app_on_host(host_app, tmp_path / "plain")
    assert "error" not in results, results
    assert results["artifact"] == "model-cpu" and results["device"] == "cpu"
    # manifest from the assets in memory and the library by name from the native libraries (AndroidAssets):
    # nothing copied to the app's files
    files = tmp_path / "plain" / "device" / "files"
    assert not files.exists() or not any(files.iterdir()), sorted(files.rglob("*"))
    assert results["fallback"].startswith("model-opencl could not start: ")
    assert results["iterations"] == 3 and results["timings"]["runs"] == 3 + 2  # + the default warm-up
    mem = results["memory"]
    assert set(mem) == {
        "source",
        "before_load_bytes",
        "after_load_peak_bytes",
        "overall_peak_bytes",
        "rss_bytes",
        "model_after_load_bytes",
        "model_overall_bytes",
    }
    if os.path.exists("/proc/self/status"):
        assert mem["source"] == "/proc/self/status"
        assert mem["before_load_bytes"] > 0 and 0 < mem["after_load_peak_bytes"] <= mem["overall_peak_bytes"]
        assert 0 < mem["rss_bytes"] <= mem["overall_peak_bytes"]
        assert mem["model_overall_bytes"] == mem["overall_peak_bytes"] - mem["before_load_bytes"]
        assert "peak resident memory (VmHWM): after load " in log
    assert results["profile"] is None

    # every timed round (setInput, run, getOutput) one by one, with numpy's percentiles of them
    runs = results["runs_ms"]
    assert len(runs) == len(results["copy_in_runs_ms"]) == len(results["copy_out_runs_ms"]) == 3
    assert all(r > 0 for r in runs) and all(c > 0 for c in results["copy_in_runs_ms"] + results["copy_out_runs_ms"])
    for key, p in (("median_run_ms", 50), ("p90_run_ms", 90), ("p99_run_ms", 99), ("min_run_ms", 0)):
        assert results[key] == pytest.approx(np.percentile(runs, p)), key
    # a warm start: the same artifact loaded again in the process and run once
    warm = results["warm_start"]
    assert warm["runs"] == 1 and warm["first_run_ms"] > 0 and warm["load_ms"] > 0
    # the input the app ran, named so the host makes it again; the output whole
    assert results["inputs"] == [
        {"name": "a", "shape": [3, 10], "dtype": "float32", "fill": "pseudo-random", "seed": 42}
    ]
    (out,) = results["outputs"]
    assert out["name"] == "y" and len(out["values"]) == 30 and out["non_finite"] == 0
    assert np.asarray(out["values"]).reshape(3, 10).sum(axis=1) == pytest.approx([1, 1, 1], abs=1e-5)  # softmax rows
    # the host's reference (onnxruntime on the source model) on the same input agrees with the app's output
    assert agreement.check_app_results(results, host_app["project"] / "app/src/main/assets/model-cpu") is None
    (row,) = results["check"]
    assert row["compared"] == "all 30 values" and row["max_abs"] < 1e-5 and "onnxruntime" in results["reference"]
    # and the app run after a different input would not: the check sees it
    planted = {**results, "inputs": [{**results["inputs"][0], "seed": 7}]}
    assert agreement.check_app_results(planted, host_app["project"] / "app/src/main/assets/model-cpu") is None
    assert planted["check"][0]["max_abs"] > 1e-3

    results, log = run_app_on_host(host_app, tmp_path / "profiled", profile=True)
    assert "error" not in results, results
    p = results["profile"]
    assert p["runs"] == 3 and p["whole_run_ms"] > 0 and p["kernels_median_ms"] > 0
    kernels = [name for name in p["counts"] if not name.startswith(("vm.", "runtime."))]
    assert kernels and any("softmax" in k for k in kernels), p["counts"]
    assert all(p["counts"][k][0] % 3 == 0 for k in kernels)  # every kernel once (or n times) per profiled run
    assert "profile: 3 runs (device clock), whole run " in log
    assert results["timings"]["runs"] == 3 + 2  # profiling leaves the model's own run count alone


def test_app_loads_the_model_library_by_name(host_app, tmp_path):
    """The activity finds the model's library by name only where the app's native libraries are: without
    jniLibs/<abi>/ on the linker's path it has no copy of its own to fall back on, and says which library."""
    name = (host_app["project"] / "app/src/main/assets/model-cpu/library.txt").read_text().strip()
    results, log = run_app_on_host(host_app, tmp_path, native_libraries=False)
    # (the OpenCL artifact could not start first, so the CPU fallback's error is the app's)
    assert results["error"].startswith(f"cannot load the model library {name}: "), results
    assert "cannot open shared object file" in results["error"], results


def render_rpc(tmp_path, package="org.tvmgen.rpc"):
    ctx = android_project.android_context(
        "rpc",
        package,
        "tvmgen RPC",
        "-",
        ["cpu"],
        ["arm64-v8a", "armeabi-v7a"],
        rpc_mode="proxy",
        rpc_port=9191,
        rpc_key="pixel",
    )
    out = tmp_path / "rpc"
    android_project.create_android_project("rpc", out, ctx, {})
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
    assert "abiFilters 'arm64-v8a', 'armeabi-v7a'" in gradle and "useLegacyPackaging = true" in gradle
    # 16 KB pages: the libraries (extracted at install, so their place in the APK does not matter) and the
    # server executable packaged as a .so are all linked for them
    assert "'-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON'" in gradle
    cmake = (out / "app/src/main/cpp/CMakeLists.txt").read_text()
    assert "target_link_options(tvmgen_rpc_server_exe PRIVATE LINKER:-z,max-page-size=${TVMGEN_MAX_PAGE_SIZE})" in cmake
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
    build = cmake_configure(out / "app/src/main/cpp", tmp_path / "build", "-DTVMGEN_BUILD_JNI=OFF")
    cmake_build(build, "tvmgen_rpc_server_exe")
    exe = build / "libtvmgen_rpc_server.so"
    info = subprocess.run([exe, "--info"], capture_output=True, text=True, check=True)
    import json

    assert json.loads(info.stdout)["arch"] == "x86_64"


# --------------------------------------------------------------------------- tvmgen app / rpc-app

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


# Drives the RPC app on this JVM (tests/java/android_stubs): the fields' checks, then the service with a bad
# port and with a server that exits at once (so the service reconnects), then Stop from the notification.
RPC_CHECK = """package org.tvmgen.rpc;

import android.content.Intent;
import android.os.PowerManager;
import java.io.File;
import java.nio.file.Files;

public final class RpcCheck {
  static Intent intent(RpcService s, int port) {
    return new Intent(s, RpcService.class).putExtra("mode", "proxy").putExtra("address", "127.0.0.1")
        .putExtra("port", port).putExtra("key", "pixel").putExtra("listen", "0.0.0.0");
  }

  public static void main(String[] args) throws Exception {
    android.content.Context.setRoot(new File(args[0]));
    System.out.println("port-abc=" + RpcConfig.inputError(true, "127.0.0.1", "abc", "pixel", ""));
    System.out.println("port-70000=" + RpcConfig.inputError(true, "127.0.0.1", "70000", "pixel", ""));
    System.out.println("port-empty=" + RpcConfig.inputError(true, "127.0.0.1", "", "pixel", ""));
    System.out.println("address=" + RpcConfig.inputError(true, "my host", "9191", "pixel", ""));
    System.out.println("key=" + RpcConfig.inputError(true, "127.0.0.1", "9191", "a b", ""));
    System.out.println("listen=" + RpcConfig.inputError(false, "10.0.0.2", "9191", "pixel", ""));
    System.out.println("proxy-ok=" + RpcConfig.inputError(true, "127.0.0.1", " 9191 ", "pixel", null));
    System.out.println("ipv6-ok=" + RpcConfig.inputError(false, "fe80::1", "9191", "pixel", "0.0.0.0"));

    RpcService bad = new RpcService();
    bad.onCreate();
    int r = bad.onStartCommand(intent(bad, 70000), 0, 1);
    System.out.println("bad=" + r + " foreground-first=" + bad.hostForegroundType + " stopped=" + bad.hostStopped
        + " status=" + RpcService.status);

    RpcService s = new RpcService();
    s.onCreate();
    r = s.onStartCommand(intent(s, 9191), 0, 1);
    PowerManager.WakeLock lock = PowerManager.HOST.hostLast;
    System.out.println("good=" + r + " type=" + s.hostForegroundType + " actions=" + s.hostForeground.hostActions
        + " wakelock=" + lock.isHeld());
    File started = new File(args[1]);
    for (int i = 0; i < 300 && !(started.exists() && Files.readAllLines(started.toPath()).size() >= 2
        && RpcService.status.contains("1000 ms")); i++) {
      Thread.sleep(100);
    }
    System.out.println("starts=" + Files.readAllLines(started.toPath()));
    android.app.Notification n = android.app.NotificationManager.HOST.hostLast;
    System.out.println("notification=" + n.hostTitle + " | " + n.hostText + " | " + n.hostActions);
    System.out.println("status=" + RpcService.status);
    r = s.onStartCommand(new Intent(s, RpcService.class).setAction(RpcService.ACTION_STOP), 0, 2);
    s.onDestroy();
    System.out.println("stop=" + r + " stopped=" + s.hostStopped + " wakelock=" + lock.isHeld()
        + " foreground=" + (s.hostForeground != null) + " status=" + RpcService.status);
  }
}
"""


def test_rpc_app_service_on_the_host(tmp_path):
    """The RPC app's Java compiled against the Android stubs and run: a bad port or address is an error (no
    exception), the service goes to the foreground (specialUse) before anything else, holds a wake lock while
    serving, reconnects with a growing backoff when the server exits, and Stop ends it all."""
    require_tool("java")
    out = render_rpc(tmp_path)
    java = out / "app/src/main/java/org/tvmgen/rpc"
    activity = (java / "RpcActivity.java").read_text()
    assert "Integer.parseInt" not in activity  # the port goes through RpcConfig.parsePort
    assert "startForegroundService(s)" in activity and "Manifest.permission.POST_NOTIFICATIONS" in activity
    (java / "RpcCheck.java").write_text(RPC_CHECK)
    classes = compile_app_java(out, "org.tvmgen.rpc", tmp_path / "java")
    libs = tmp_path / "lib"
    libs.mkdir()
    server = libs / "libtvmgen_rpc_server.so"  # a server that records its arguments and exits at once
    server.write_text('#!/bin/sh\necho "$@" >> "$TVMGEN_TEST_STARTS"\nexit 3\n')
    server.chmod(0o755)
    starts = tmp_path / "starts.txt"
    r = subprocess.run(
        [
            "java",
            f"-Dstub.nativeLibraryDir={libs}",
            "-cp",
            classes,
            "org.tvmgen.rpc.RpcCheck",
            tmp_path / "app",
            starts,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TVMGEN_TEST_STARTS": str(starts)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    got = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert got["port-abc"].startswith('the port must be a whole number from 1 to 65535, not "abc"')
    assert got["port-70000"].startswith("the port must be") and got["port-empty"].startswith("the port must be")
    assert got["address"].startswith("the proxy address must be a host name or an IP address")
    assert got["key"].startswith("the key must be letters") and got["listen"].startswith("the listen address")
    assert got["proxy-ok"] == "null" and got["ipv6-ok"] == "null"
    # startForegroundService's promise kept (type specialUse, 0x40000000) even for settings it then refuses
    assert got["bad"].startswith(f"2 foreground-first={0x40000000} stopped=true status=not started: the port"), got
    assert got["good"] == f"3 type={0x40000000} actions=[Stop] wakelock=true"
    work = tmp_path / "app/files/rpc-work"
    launches = got["starts"].strip("[]").split(", ")  # the first start and at least one reconnection
    assert len(launches) >= 2 and set(launches) == {f"--proxy 127.0.0.1:9191 --key pixel --work-dir {work}"}
    assert got["notification"].startswith("proxy 127.0.0.1:9191 | key pixel: server exited with code 3; reconnecting")
    assert got["notification"].endswith(" | [Stop]")
    backoff = re.fullmatch(r"server exited with code 3; reconnecting in (\d+) ms", got["status"])
    assert backoff and int(backoff.group(1)) >= 1000, got  # it grew from 500 ms
    assert got["stop"] == "2 stopped=true wakelock=false foreground=false status=stopped"


def test_app_run_survives_rotation_and_stops_when_closed(host_app, tmp_path):
    """The run belongs to the process, not the screen: a rotation right after the start shows the same run
    (its lines so far, then the rest) and starts no second one, and the activity on screen then is the one that
    finishes; closing the activity for good cancels the run, which still writes results that say so."""
    results, log = run_app_on_host(host_app, tmp_path / "rotate", scenario="rotate")
    assert "error" not in results, results
    logged, screen = log.split("SCREEN:\n", 1)
    assert logged.count("tvmgen: Preparing the kernels ...") == 1, log  # one run, not one per activity
    # the second activity shows the whole run: the lines before it was made, and those after
    assert screen.startswith("Falling back to the CPU: model-opencl could not start: ")
    assert "mobilenet on cpu (model-cpu)\nPreparing the kernels ...\n" in screen
    assert "peak resident memory (VmHWM): after load " in screen

    results, log = run_app_on_host(host_app, tmp_path / "close", scenario="close", iterations=1000000)
    assert results["cancelled"] is True and results["error"] == "cancelled: the app was closed before the run finished"
    assert results["error_type"] == "CancellationException" and results["stage"] in (
        "starting",
        "loading the native library",
        "loading model-opencl",
        "loading model-cpu",
        "preparing the kernels",
        "running",
    )
    assert "runs_ms" not in results and results["model"] == "mobilenet"


def test_app_without_its_native_library_writes_why(host_app, tmp_path):
    """An UnsatisfiedLinkError (the JNI library missing, as when an APK lacks the phone's ABI) is no crash: the
    results file and the screen say which library and why."""
    results, log = run_app_on_host(host_app, tmp_path, jni=False)
    assert results["error_type"] == "UnsatisfiedLinkError" and results["stage"] == "loading the native library"
    assert results["error"].startswith("cannot load tvmgen's native library: ") and "tvmgen_jni" in results["error"]
    assert results["cancelled"] is False and results["fallback"] is None
    assert "Error (loading the native library): cannot load tvmgen's native library: " in log


def _defined_symbols(nm: str, *files: Path, dynamic: bool) -> set[str]:
    """The global symbols ``files`` define (``nm -D`` of a library's dynamic table, ``nm`` of objects)."""
    r = subprocess.run(
        [nm, *(["-D"] if dynamic else []), "--defined-only", "--extern-only", *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.split()[-1] for line in r.stdout.splitlines() if len(line.split()) == 3}


def test_objects_model_is_linked_by_the_app_cmake(tmp_path, artifacts):
    """A model compiled to objects only (no NDK where `tvmgen app` ran) is linked by the app's own CMake into
    the library its assets name: the objects and the launcher's source in src/main/cpp/models/, a target per
    model in Gradle's list, tvmgen's own link options. Built here with the linux-aarch64 cross toolchain standing
    in for the NDK: an aarch64 shared library, 16 KB pages, defining every symbol the objects define."""
    import tarfile

    from tvmgen.compiler.targets import export
    from tvmgen.core import binfmt, toolchains

    out = render(tmp_path, artifacts)
    main = out / "app/src/main"
    gradle = (out / "app/build.gradle").read_text()
    cmake = (main / "cpp/CMakeLists.txt").read_text()
    assert f"set(TVMGEN_MODEL_COMPILE_FLAGS {' '.join(export.POOL_FLAGS)})" in cmake
    assert f"-static-libstdc++ {' '.join(toolchains.ANDROID_LINK_FLAGS)}" in cmake
    names = {}
    for device in ("opencl", "cpu"):
        assets = main / f"assets/model-{device}"
        names[device] = (assets / "library.txt").read_text().strip()
        original = json.loads((artifacts[device] / "manifest.json").read_text())
        assert names[device] == android_project.model_library_name(android_project.artifact.load(artifacts[device]))
        target = names[device].removeprefix("lib").removesuffix(".so")
        assert f", '{target}'" in gradle and f"tvmgen_model_library({target} arm64-v8a aarch64 " in cmake
        # the assets describe the library the app links, which the runtime loads (it refuses an archive)
        shipped = json.loads((assets / "manifest.json").read_text())
        assert shipped["export"]["kind"] == "shared" and "model.tar" not in shipped["files"]
        assert {k: v for k, v in shipped.items() if k not in ("export", "files")} == {
            k: v for k, v in original.items() if k not in ("export", "files")
        }
        with tarfile.open(artifacts[device] / "model.tar") as t:
            members = sorted(m.name for m in t.getmembers() if m.isfile())
        assert export.parallel_pool_source().name in members
        assert sorted(p.name for p in (main / f"cpp/models/model-{device}").iterdir()) == members
    assert names["opencl"] != names["cpu"]

    for tool in ("cmake", "aarch64-linux-gnu-g++", "aarch64-linux-gnu-nm", "aarch64-linux-gnu-objdump"):
        require_tool(tool)
    build = tmp_path / "build"
    toolchain = REPO / "jni/cmake/aarch64-linux-gnu.cmake"
    r = subprocess.run(
        [
            "cmake",
            "-S",
            main / "cpp",
            "-B",
            build,
            "-G",
            "Unix Makefiles",
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
            "-DTVMGEN_MODELS_ONLY=ON",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cmake_build(build)
    for device, name in names.items():
        lib = build / name
        assert lib.is_file(), sorted(p.name for p in build.iterdir())
        assert binfmt.describe_file(lib) == ("elf", "aarch64")
        report = binfmt.page_report(lib)
        assert report.ok and report.min_align >= binfmt.ANDROID_PAGE_SIZE, report.summary()
        objects = sorted((main / f"cpp/models/model-{device}").glob("*.o"))
        wanted = _defined_symbols("aarch64-linux-gnu-nm", *objects, dynamic=False)
        exported = _defined_symbols("aarch64-linux-gnu-nm", lib, dynamic=True)
        assert wanted and wanted <= exported, sorted(wanted - exported)
        # the C++ runtime is inside (-static-libstdc++): a phone has no libstdc++ to find
        needed = subprocess.run(["aarch64-linux-gnu-objdump", "-p", lib], capture_output=True, text=True).stdout
        assert "libstdc++" not in needed, needed
