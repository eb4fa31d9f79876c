"""The Android app project (templates/android_deploy, templates/android_rpc): its context, the
runtime sources and the artifacts it ships."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen import __version__
from tvmgen.android.downloads import AGP_VERSION, COMPILE_SDK, GRADLE_VERSION, NDK_VERSION
from tvmgen.apps import templates
from tvmgen.core import artifact, resources
from tvmgen.core.errors import InputError

PACKAGE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
# In a packaged artifact's asset directory: the name of its model library among the app's native libraries.
LIBRARY_NAME_FILE = "library.txt"
# What every packaged model library's name starts with (the Gradle files keep these unstripped: see below).
MODEL_LIBRARY_PREFIX = "libtvmgen_model_"


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
    devices: list[str],
    abis: list[str],
    tvm_source_dir: str = "",
    rpc_mode: str = "proxy",
    rpc_address: str = "127.0.0.1",
    rpc_port: int = 9090,
    rpc_key: str = "android",
) -> dict:
    """Everything the Android templates use: the only place their values are decided. ``devices``: the
    devices the app ships models for, the one it runs on first, then its fallback (platforms.app_devices)."""
    check_package(package)
    return {
        "kind": kind,
        "package": package,
        "package_path": package.replace(".", "/"),
        "app_name": app_name,
        "model_name": model_name,
        "device": devices[0],
        "model_devices": list(devices),
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
        "model_library_prefix": MODEL_LIBRARY_PREFIX,
        # the RPC app's defaults (what `tvmgen rpc-app` was given)
        "default_mode": rpc_mode,
        "default_address": rpc_address,
        "default_port": rpc_port,
        "default_key": rpc_key,
    }


@dataclass
class PackagedModel:
    """An artifact as an Android app or library ships it. Its linked model library becomes one of the app's
    native libraries (``jni/<abi>/`` of an AAR, ``lib/<abi>/`` of the APK), which Android's linker maps in place
    from the uncompressed, 16 KB-aligned APK entry: no copy in memory or on disk. Everything else (the manifest,
    the weights) goes to the assets, with LIBRARY_NAME_FILE naming the library (org.tvmgen.ArtifactData's
    readPackaged). An artifact with no linked library (--objects-only) ships whole in the assets."""

    abi: str
    assets: dict[str, Path] = field(default_factory=dict)  # name in the asset directory -> file
    library: Path | None = None  # the artifact's model.so
    library_name: str = ""  # its name among the native libraries

    def write(self, assets: Path, native_libraries: Path) -> None:
        """Into a directory of assets (its files) and one of native libraries (``<abi>/<library_name>``)."""
        for name, f in self.assets.items():
            (assets / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, assets / name)
        if self.library is not None:
            (assets / LIBRARY_NAME_FILE).write_text(self.library_name + "\n")
            (native_libraries / self.abi).mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.library, native_libraries / self.abi / self.library_name)


def model_library_name(manifest: artifact.Manifest) -> str:
    """``libtvmgen_model_<model>_<device>_<sha256[:12]>.so``: a library name (``lib*.so``, what APK packaging
    installs) of the model and device, with the start of the manifest's sha256 of the library, so that two
    models or builds never share a name among an app's native libraries (AGP would keep only one of them)."""
    sha = manifest.files[manifest.export["library"]]["sha256"]
    slug = re.sub(r"[^a-z0-9]+", "_", f"{manifest.model.get('name') or 'model'}_{manifest.device}".lower())
    return f"{MODEL_LIBRARY_PREFIX}{slug.strip('_')}_{sha[:12]}.so"


def package_model(directory: Path) -> PackagedModel:
    """Splits an artifact directory into native library and assets, after checking every file against the
    manifest's sha256: the library ships byte for byte, so the manifest's record of it stays true."""
    directory = Path(directory)
    m = artifact.load(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    assets = {f.relative_to(directory).as_posix(): f for f in files}
    if m.export["kind"] != "shared":
        return PackagedModel(m.abi, assets)
    library = assets.pop(m.export["library"])
    return PackagedModel(m.abi, assets, library, model_library_name(m))


def create_android_project(kind: str, out_dir: Path, context: dict, artifacts: dict[str, Path]) -> None:
    """Render templates/android_<kind> into ``out_dir``, with the runtime sources and the artifacts.

    ``artifacts`` maps a device name to an artifact directory, shipped as assets/model-<device>/ with its model
    library in jniLibs/<abi>/ (PackagedModel), which Gradle packages into the APK's lib/<abi>/.
    """
    templates.render(f"android_{kind}", out_dir, context)
    shutil.copytree(
        resources.jni_dir(), out_dir / "tvmgen-jni", ignore=shutil.ignore_patterns("__pycache__", "__init__.py")
    )
    main = out_dir / "app" / "src" / "main"
    for device, directory in artifacts.items():
        package_model(directory).write(main / "assets" / f"model-{device}", main / "jniLibs")
