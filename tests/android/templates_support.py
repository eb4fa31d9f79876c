"""What the Android app template tests share: the model artifacts the deploy app is rendered with, the
deploy and RPC projects rendered, and the apps' Java compiled against the Android stubs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import TESTS, require_tool, save_onnx, single_op_models
from tvmgen import frontends
from tvmgen.android import project as android_project
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS, app_devices

ANDROID = "{http://schemas.android.com/apk/res/android}"


def compile_app_artifacts(d: Path) -> dict[str, Path]:
    """The softmax model compiled into ``d`` for android-arm64, objects only (no NDK here), for OpenCL and
    for the CPU: what the test modules' ``artifacts`` fixtures return."""
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
