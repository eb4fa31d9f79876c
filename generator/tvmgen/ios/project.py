"""The iOS Xcode project (templates/ios_rpc): its context, and the project file's objects.

Why a rendered `project.pbxproj` and not a project spec (XcodeGen, Tuist): the spec needs one
more tool on the Mac before Xcode opens anything, and its output depends on that tool's version.
A rendered project opens as is, and its object IDs are derived here from stable names (24 hex
digits of a SHA-1), never random: the same inputs always give the same bytes, so a regenerated
project diffs cleanly.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.core import resources
from tvmgen.core.errors import InputError

TARGET = "TvmgenApp"
DEPLOYMENT_TARGET = "15.0"
BUNDLE_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(\.[A-Za-z0-9][A-Za-z0-9-]*)+$")
TEAM_ID_RE = re.compile(r"^[A-Z0-9]{10}$")
MODES = ("standalone", "proxy", "tracker")

# What the app compiles: its own sources, and the runtime and server from the project's copy of jni/.
APP_SOURCES = (
    "TvmgenApp/main.mm",
    "TvmgenApp/AppDelegate.mm",
    "TvmgenApp/ViewController.mm",
    "TvmgenApp/TvmgenBridge.mm",
    "TvmgenApp/Bridge/app_core.cc",
)
APP_HEADERS = (
    "TvmgenApp/AppDelegate.h",
    "TvmgenApp/ViewController.h",
    "TvmgenApp/TvmgenBridge.h",
    "TvmgenApp/Bridge/app_core.h",
)
JNI_SOURCES = ("tvmgen-jni/src/runtime.cc", "tvmgen-jni/src/rpc_server.cc")
MODEL_ARCHIVE = "Models/libmodel.a"
MODEL_RESOURCE = "Models/model"  # the artifact's manifest, a folder in the app bundle
FILE_TYPES = {
    ".mm": "sourcecode.cpp.objcpp",
    ".cc": "sourcecode.cpp.cpp",
    ".h": "sourcecode.c.h",
    ".a": "archive.ar",
    ".plist": "text.plist.xml",
    ".sh": "text.script.sh",
    ".md": "net.daringfireball.markdown",
}


def check_bundle_id(bundle_id: str) -> None:
    if not BUNDLE_ID_RE.match(bundle_id):
        raise InputError(
            f"{bundle_id!r} is not a valid iOS bundle identifier",
            "use dotted words of letters, digits and '-', e.g. org.example.mobilenet",
        )


def check_team_id(team_id: str) -> None:
    if not TEAM_ID_RE.match(team_id):
        raise InputError(
            f"{team_id!r} is not an Apple developer team id (10 upper-case letters and digits)",
            "find it in Xcode > Settings > Accounts, or at developer.apple.com > Membership",
        )


def object_id(name: str) -> str:
    """A project-file object ID from a stable name: 24 upper-case hex digits, the same on every run."""
    return hashlib.sha1(f"tvmgen:{name}".encode()).hexdigest()[:24].upper()


def pbx_string(value) -> str:
    """A value in the project file's (OpenStep plist) syntax: bare when safe, quoted otherwise."""
    text = str(value)
    if text and re.fullmatch(r"[A-Za-z0-9_$/:.\-]+", text) and "//" not in text and not text.startswith("-"):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class FileRef:
    path: str  # relative to the project root
    kind: str  # source | header | archive | folder | plist | script | doc

    @property
    def id(self) -> str:
        return object_id(f"file:{self.path}")

    @property
    def build_id(self) -> str:
        return object_id(f"build:{self.path}")

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def file_type(self) -> str:
        return "folder" if self.kind == "folder" else FILE_TYPES[Path(self.path).suffix]


def _group(name: str, files: list[FileRef], path: str | None = None) -> dict:
    return {"id": object_id(f"group:{name}"), "name": name, "path": path, "children": [f.id for f in files]}


def build_settings(team_id: str, bundle_id: str, tvm_source_dir: str) -> dict[str, list | str]:
    """The target's build settings, the same for Debug and Release except the optimisation level."""
    return {
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
        "CLANG_ENABLE_OBJC_ARC": "YES",
        "CODE_SIGN_IDENTITY": "Apple Development",
        "CODE_SIGN_STYLE": "Automatic",
        "DEVELOPMENT_TEAM": team_id,
        "GCC_PREPROCESSOR_DEFINITIONS": ["$(inherited)", "TVM_FFI_BACKTRACE_ON_SEGFAULT=0"],
        "HEADER_SEARCH_PATHS": [
            "$(inherited)",
            "$(PROJECT_DIR)/tvmgen-jni/include",
            "$(PROJECT_DIR)/TvmgenApp/Bridge",
            "$(TVM_SOURCE_DIR)/3rdparty/tvm-ffi/include",
            "$(TVM_SOURCE_DIR)/3rdparty/tvm-ffi/3rdparty/dlpack/include",
        ],
        "INFOPLIST_FILE": "TvmgenApp/Info.plist",
        "IPHONEOS_DEPLOYMENT_TARGET": DEPLOYMENT_TARGET,
        "LD_RUNPATH_SEARCH_PATHS": ["$(inherited)", "@executable_path/Frameworks"],
        # -force_load: the model and TVM register themselves from static initialisers that nothing
        # references, so a plain link would drop them.
        "OTHER_LDFLAGS": [
            "$(inherited)",
            "-force_load",
            f"$(PROJECT_DIR)/{MODEL_ARCHIVE}",
            "-force_load",
            "$(PROJECT_DIR)/build/tvm-ios/libtvm_runtime.a",
            "-force_load",
            "$(PROJECT_DIR)/build/tvm-ios/libtvm_ffi_static.a",
            "-framework",
            "Metal",
            "-framework",
            "Foundation",
            "-framework",
            "UIKit",
        ],
        "PRODUCT_BUNDLE_IDENTIFIER": bundle_id,
        "PRODUCT_NAME": "$(TARGET_NAME)",
        "SDKROOT": "iphoneos",
        "SUPPORTED_PLATFORMS": "iphoneos",
        "TARGETED_DEVICE_FAMILY": "1,2",
        "TVM_SOURCE_DIR": tvm_source_dir,
    }


TVM_CLONE = "git clone --recursive --branch v0.27.0 https://github.com/apache/tvm"


def mac_commands(bundle_id: str, team_id: str, tvm_source_dir: str, port: int) -> list[str]:
    """The commands that build, install and reach the app on a Mac, run in the project directory."""
    team = team_id or "YOUR_TEAM_ID"
    commands = [] if tvm_source_dir else [f"{TVM_CLONE} ~/tvm   # once: the TVM runtime is built from source for iOS"]
    commands += [
        " ".join(
            [
                "xcodebuild",
                "-project",
                "TvmgenApp.xcodeproj",
                "-target",
                TARGET,
                "-configuration",
                "Release",
                "-sdk",
                "iphoneos",
                "-allowProvisioningUpdates",
                f"DEVELOPMENT_TEAM={team}",
                f"TVM_SOURCE_DIR={tvm_source_dir or '$HOME/tvm'}",
                "SYMROOT=$PWD/build",
                "build",
            ]
        ),
        "xcrun devicectl list devices   # the device's identifier",
        f"xcrun devicectl device install app --device DEVICE_ID build/Release-iphoneos/{TARGET}.app",
        f"xcrun devicectl device process launch --device DEVICE_ID {bundle_id}",
        f"iproxy {port} {port}   # USB (brew install libimobiledevice): the Mac's 127.0.0.1:{port} reaches the app",
    ]
    return commands


def context(
    kind: str,
    bundle_id: str,
    app_name: str,
    model_name: str,
    device: str,
    team_id: str = "",
    tvm_source_dir: str = "",
    mode: str = "standalone",
    address: str = "0.0.0.0",
    port: int = 9090,
    key: str = "iphone",
) -> dict:
    """Everything templates/ios_rpc uses: the only place its values are decided."""
    from tvmgen import __version__

    check_bundle_id(bundle_id)
    if team_id:
        check_team_id(team_id)
    if mode not in MODES:
        raise InputError(f"unknown server mode {mode!r}", f"use one of: {', '.join(MODES)}")
    if device not in PLATFORMS["ios-arm64"].devices:
        raise InputError(
            f"device {device!r} is not available on iOS",
            f"use --device {' or --device '.join(PLATFORMS['ios-arm64'].devices)}",
        )
    sources = [FileRef(p, "source") for p in APP_SOURCES]
    headers = [FileRef(p, "header") for p in APP_HEADERS]
    jni = [FileRef(p, "source") for p in JNI_SOURCES]
    archive = FileRef(MODEL_ARCHIVE, "archive")
    model_dir = FileRef(MODEL_RESOURCE, "folder")
    plist = FileRef("TvmgenApp/Info.plist", "plist")
    script = FileRef("scripts/build_tvm_runtime.sh", "script")
    readme = FileRef("README.md", "doc")
    product = {"id": object_id("product"), "name": f"{TARGET}.app"}
    groups = [
        _group(TARGET, [*sources, *headers, plist]),
        _group("tvmgen-jni", jni),
        _group("Models", [archive, model_dir]),
        _group("scripts", [script]),
        {"id": object_id("group:Products"), "name": "Products", "path": None, "children": [product["id"]]},
    ]
    main_group = {"id": object_id("group:main"), "children": [readme.id, *(g["id"] for g in groups)]}
    settings = build_settings(team_id, bundle_id, tvm_source_dir)
    return {
        "kind": kind,
        "target": TARGET,
        "bundle_id": bundle_id,
        "app_name": app_name,
        "model_name": model_name,
        "device": device,
        "team_id": team_id,
        "tvm_source_dir": tvm_source_dir,
        "tvmgen_version": __version__,
        "deployment_target": DEPLOYMENT_TARGET,
        "default_mode": mode,
        "default_address": address,
        "default_port": port,
        "default_key": key,
        "modes": list(MODES),
        "mac_commands": mac_commands(bundle_id, team_id, tvm_source_dir, port),
        # the project file
        "files": [readme, *sources, *headers, plist, *jni, archive, model_dir, script],
        "compiled": [*sources, *jni],
        "resources": [model_dir],
        "groups": groups,
        "main_group": main_group,
        "product": product,
        "settings": settings,
        "ids": {
            name: object_id(name)
            for name in (
                "project",
                "target",
                "phase:sources",
                "phase:resources",
                "phase:frameworks",
                "phase:tvm-runtime",
                "configs:project",
                "configs:target",
                "config:project:Debug",
                "config:project:Release",
                "config:target:Debug",
                "config:target:Release",
            )
        },
    }


def create_project(out_dir: Path, ctx: dict, artifact_dir: Path) -> list[str]:
    """Render templates/ios_rpc into ``out_dir`` with the runtime sources and the model linked in.

    Returns the symbols the model archive indexes.
    """
    from tvmgen.apps import templates
    from tvmgen.ios import archive

    templates.render("ios_rpc", out_dir, ctx, filters={"pbx": pbx_string})
    shutil.copytree(
        resources.jni_dir(), out_dir / "tvmgen-jni", ignore=shutil.ignore_patterns("__pycache__", "__init__.py")
    )
    models = out_dir / "Models"
    (models / "model").mkdir(parents=True)
    for f in sorted(
        artifact_dir.iterdir()
    ):  # the manifest (weights, a streaming model's state/): what the runtime reads
        if f.is_file() and f.name not in ("model.tar", "libmodel.a"):
            shutil.copyfile(f, models / "model" / f.name)
        elif f.is_dir():
            shutil.copytree(f, models / "model" / f.name)
    if (artifact_dir / "libmodel.a").is_file():  # made by xcrun libtool on a Mac
        shutil.copyfile(artifact_dir / "libmodel.a", models / "libmodel.a")
        return archive.archive_symbols(models / "libmodel.a")
    return archive.write_static_library(archive.objects_from_tar(artifact_dir / "model.tar"), models / "libmodel.a")
