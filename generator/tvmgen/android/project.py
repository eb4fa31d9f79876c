"""The Android app project (templates/android_deploy, templates/android_rpc): its context, the
runtime sources and the artifacts it ships."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tvmgen import __version__
from tvmgen.android.downloads import AGP_VERSION, COMPILE_SDK, GRADLE_VERSION, NDK_VERSION
from tvmgen.apps import templates
from tvmgen.core import resources
from tvmgen.core.errors import InputError

PACKAGE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def check_package(package: str) -> None:
    if not PACKAGE_RE.match(package):
        raise InputError(
            f"{package!r} is not a valid Android application id",
            "use lower-case dotted words, e.g. org.example.mobilenet",
        )


def android_context(
    kind: str,
    package: str,
    app_name: str,
    model_name: str,
    device: str,
    abis: list[str],
    tvm_source_dir: str = "",
    rpc_mode: str = "proxy",
    rpc_address: str = "127.0.0.1",
    rpc_port: int = 9090,
    rpc_key: str = "android",
) -> dict:
    """Everything the Android templates use: the only place their values are decided."""
    check_package(package)
    return {
        "kind": kind,
        "package": package,
        "package_path": package.replace(".", "/"),
        "app_name": app_name,
        "model_name": model_name,
        "device": device,
        "model_devices": [device] + (["cpu"] if device != "cpu" else []),
        "abis": abis,
        "min_sdk": 24,
        "compile_sdk": COMPILE_SDK,
        "target_sdk": COMPILE_SDK,  # what Google Play requires of new apps and updates
        "agp_version": AGP_VERSION,
        "gradle_version": GRADLE_VERSION,
        "ndk_version": NDK_VERSION,
        "version_code": 1,
        "version_name": "1.0",
        "tvm_source_dir": tvm_source_dir,
        "tvmgen_version": __version__,
        # the RPC app's defaults (what `tvmgen rpc-app` was given)
        "default_mode": rpc_mode,
        "default_address": rpc_address,
        "default_port": rpc_port,
        "default_key": rpc_key,
    }


def create_android_project(kind: str, out_dir: Path, context: dict, artifacts: dict[str, Path]) -> None:
    """Render templates/android_<kind> into ``out_dir``, with the runtime sources and the artifacts.

    ``artifacts`` maps a device name to an artifact directory, shipped as assets/model-<device>/.
    """
    templates.render(f"android_{kind}", out_dir, context)
    shutil.copytree(
        resources.jni_dir(), out_dir / "tvmgen-jni", ignore=shutil.ignore_patterns("__pycache__", "__init__.py")
    )
    for device, directory in artifacts.items():
        shutil.copytree(directory, out_dir / "app" / "src" / "main" / "assets" / f"model-{device}")
