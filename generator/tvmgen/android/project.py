"""The Android app project (templates/android_deploy, templates/android_rpc): its context, the
runtime sources and the artifacts it ships."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen import __version__
from tvmgen.android.downloads import AGP_VERSION, COMPILE_SDK, GRADLE_VERSION, NDK_VERSION
from tvmgen.apps import templates
from tvmgen.compiler.targets import export
from tvmgen.core import artifact, resources, toolchains
from tvmgen.core.errors import InputError

PACKAGE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
# In a packaged artifact's asset directory: the name of its model library among the app's native libraries.
LIBRARY_NAME_FILE = "library.txt"
# What every packaged model library's name starts with (the Gradle files keep these unstripped: see below).
MODEL_LIBRARY_PREFIX = "libtvmgen_model_"
# Where the deploy app's CMake finds the objects of the models it links itself (under app/src/main/cpp/).
MODEL_OBJECTS_DIR = "models"
# The options tvmgen's own link of an Android model library uses (export.py), for the app's CMake to link
# an object archive the same way: the parallel launcher compiled with its flags, the C++ runtime inside
# the library, 16 KB pages.
MODEL_COMPILE_FLAGS = export.POOL_FLAGS
MODEL_LINK_FLAGS = ["-static-libstdc++", *toolchains.ANDROID_LINK_FLAGS]


def check_package(package: str) -> None:
    if not PACKAGE_RE.match(package):
        raise InputError(
            f"{package!r} is not a valid Android application id",
            "use lower-case dotted words, e.g. org.example.mobilenet",
        )


def model_link_context(libraries: list[dict]) -> dict:
    """What a template's CMake needs to link models from their objects: ``libraries``, each a
    PackagedModel.cmake_library, and tvmgen's link options (the deploy app's CMake, an AAR's tvmgen-model.cmake)."""
    return {
        "model_libraries": libraries,
        "model_compile_flags": MODEL_COMPILE_FLAGS,
        "model_link_flags": MODEL_LINK_FLAGS,
    }


def model_library_cmake() -> Path:
    """The CMake file defining tvmgen_model_library, the link of a model from its objects: beside the deploy app's
    CMakeLists.txt, and copied into an AAR beside its tvmgen-model.cmake."""
    return resources.templates_dir() / "android_deploy" / "app" / "src" / "main" / "cpp" / "model_library.cmake"


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
        # the models the app's CMake links from their objects (create_android_project fills them in)
        **model_link_context([]),
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
    readPackaged). An artifact with no linked library (--objects-only) ships its object archive's contents as
    sources of the app (``objects``), which the app's CMake links into a library of that same name; its assets
    get a manifest describing that library instead of the archive (the runtime loads shared libraries only)."""

    abi: str
    assets: dict[str, Path] = field(default_factory=dict)  # name in the asset directory -> file
    library: Path | None = None  # the artifact's model.so
    library_name: str = ""  # its name among the native libraries
    objects: Path | None = None  # the artifact's model.tar, for the app's CMake to link
    manifest: dict | None = None  # what the assets get as manifest.json instead of the artifact's

    def write(self, assets: Path, native_libraries: Path, objects: Path | None = None) -> None:
        """Into a directory of assets (its files), one of native libraries (``<abi>/<library_name>``) and,
        for an object archive, one its contents are extracted into (``objects``)."""
        for name, source in self.shipped_assets().items():
            (assets / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, Path):
                shutil.copy2(source, assets / name)
            else:
                (assets / name).write_text(source)
        if self.library is not None:
            (native_libraries / self.abi).mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.library, native_libraries / self.abi / self.library_name)
        if self.objects is not None:
            if objects is None:
                raise InputError(
                    f"{self.objects} holds objects, not a linked library: only an app's CMake can link it",
                    "compile the model with the Android NDK present (no --objects-only)",
                )
            objects.mkdir(parents=True, exist_ok=True)
            with tarfile.open(self.objects) as t:
                t.extractall(objects, filter="data")

    def shipped_assets(self) -> dict[str, Path | str]:
        """The asset directory as it ships, name -> the artifact's file or the text that takes its place: the
        artifact's files, the manifest describing the library an app links (objects), LIBRARY_NAME_FILE."""
        shipped: dict[str, Path | str] = dict(self.assets)
        if self.manifest is not None:
            shipped[artifact.MANIFEST] = json.dumps(self.manifest, indent=2) + "\n"
        if self.library_name:
            shipped[LIBRARY_NAME_FILE] = self.library_name + "\n"
        return shipped

    def object_files(self) -> dict[str, bytes]:
        """The object archive's files (the objects and the launcher's source), name -> bytes."""
        assert self.objects is not None
        with tarfile.open(self.objects) as t:
            return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}  # type: ignore[union-attr]

    def cmake_library(self, directory: str) -> dict:
        """What the app's CMake needs to link the objects extracted into ``directory`` (relative to its
        CMakeLists.txt): the target (its output is ``library_name``), the ABI and architecture, the objects and
        the sources."""
        assert self.objects is not None and self.manifest is not None
        with tarfile.open(self.objects) as t:
            names = sorted(m.name for m in t.getmembers() if m.isfile())
        return {
            "target": self.library_name.removeprefix("lib").removesuffix(".so"),
            "abi": self.abi,
            "arch": self.manifest["arch"],
            "dir": directory,
            "objects": [n for n in names if n.endswith(".o")],
            "sources": [n for n in names if n.endswith((".cc", ".c", ".cpp"))],
        }


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
    if m.export["kind"] == "objects" and m.platform.startswith("android-"):
        # linked by the app's CMake into the library a linked model would be, under the same kind of name
        objects = assets.pop(m.export["library"])
        manifest = m.to_json()
        manifest["export"] = {"kind": "shared", "library": "model.so", "linked_by": "the app's CMake"}
        manifest["files"] = {k: v for k, v in m.files.items() if k != m.export["library"]}
        return PackagedModel(m.abi, assets, library_name=model_library_name(m), objects=objects, manifest=manifest)
    if m.export["kind"] != "shared":
        return PackagedModel(m.abi, assets)
    library = assets.pop(m.export["library"])
    return PackagedModel(m.abi, assets, library, model_library_name(m))


def create_android_project(kind: str, out_dir: Path, context: dict, artifacts: dict[str, Path]) -> None:
    """Render templates/android_<kind> into ``out_dir``, with the runtime sources and the artifacts.

    ``artifacts`` maps a device name to an artifact directory, shipped as assets/model-<device>/ with its model
    library in jniLibs/<abi>/ (PackagedModel), which Gradle packages into the APK's lib/<abi>/; an object
    archive's contents go to app/src/main/cpp/models/model-<device>/ instead, and the app's CMake links them
    into that library (Gradle's externalNativeBuild, with the NDK, packages it the same way).
    """
    packaged = {device: package_model(directory) for device, directory in artifacts.items()}
    linked_here = {device: f"{MODEL_OBJECTS_DIR}/model-{device}" for device, p in packaged.items() if p.objects}
    libraries = [packaged[device].cmake_library(d) for device, d in linked_here.items()]
    templates.render(f"android_{kind}", out_dir, {**context, "model_libraries": libraries})
    shutil.copytree(
        resources.jni_dir(), out_dir / "tvmgen-jni", ignore=shutil.ignore_patterns("__pycache__", "__init__.py")
    )
    main = out_dir / "app" / "src" / "main"
    for device, p in packaged.items():
        objects = main / "cpp" / linked_here[device] if device in linked_here else None
        p.write(main / "assets" / f"model-{device}", main / "jniLibs", objects)
