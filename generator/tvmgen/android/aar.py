"""A model-specific Android library (AAR): what an existing app adds as one Gradle dependency.

Layout (the AAR format Android's Gradle plugin reads):

    AndroidManifest.xml      the library's package, minSdk, the optional OpenCL library entry
    classes.jar              tvmgen's Java API (org.tvmgen), compiled here by javac for Java 8 bytecode
    jni/<abi>/*.so           the tvmgen runtime, JNI bridge, TVM runtime (+ OpenCL backend) for each ABI, and
                             each linked model's library (libtvmgen_model_<model>_<device>_<sha>.so), loaded in place
    assets/tvmgen/<model>/   the rest of the artifact (manifest.json, model.params) and library.txt naming its library
    tvmgen/                  only for models compiled to objects (no NDK where tvmgen ran): their objects and
                             sources (models/<model>/), and tvmgen-model.cmake, which the consuming app's CMake
                             include()s to link each into the library its library.txt names, with the app's NDK
    proguard.txt             consumer R8/ProGuard rules: the JNI bridge finds org.tvmgen's classes by name
    R.txt                    empty: the library has no resources

No Gradle is needed to write it. The native libraries must be Android builds (the NDK, bionic): the
ones built here for linux-aarch64 link glibc and would not load on a phone, so they are refused.

Objects are no Prefab package: Prefab describes prebuilt libraries (at most one per module and ABI), and a
model's objects still need linking, with its parallel launcher compiled from source. So the AAR carries them with
a CMake file; Android's Gradle plugin ignores the tvmgen/ folder, and the app's CMake extracts it from the AAR.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.android import tools
from tvmgen.android.project import (
    PackagedModel,
    check_package,
    model_library_cmake,
    model_link_context,
    package_model,
)
from tvmgen.apps import templates
from tvmgen.compiler.targets.platforms import PLATFORMS, get_device
from tvmgen.core import artifact, binfmt, resources, toolchains
from tvmgen.core.errors import InputError
from tvmgen.core.log import step

# The ELF machine each ABI's libraries are built for.
ABI_ARCH = {"arm64-v8a": "aarch64", "armeabi-v7a": "arm", "x86_64": "x86_64"}
# The --platform whose runtime build (`tvmgen runtime build`) gives each ABI's libraries.
ABI_PLATFORM = {p.abi: p.name for p in PLATFORMS.values() if p.exporter == "ndk"}
# What Model.load needs at run time, besides the model library itself.
RUNTIME_LIBRARIES = (
    "libtvmgen_jni.so",
    "libtvmgen_jni_bridge.so",
    "libtvmgen_runtime.so",
    "libtvm_runtime.so",
    "libtvm_ffi.so",
)
OPTIONAL_LIBRARIES = ("libc++_shared.so",)  # when the NDK build used the shared C++ runtime
ZIP_TIME = (2025, 1, 1, 0, 0, 0)  # fixed entry times: the same inputs give the same bytes
# The AAR's folder of models compiled to objects, for the consuming app's CMake: the file it include()s, and
# where each model's objects and sources are (models/<asset folder>/)
CMAKE_DIR = "tvmgen"
CMAKE_FILE = f"{CMAKE_DIR}/tvmgen-model.cmake"

PROGUARD_RULES = """\
# tvmgen (consumer rules, applied to the app that uses this library): the JNI bridge looks up
# org.tvmgen's classes, fields and methods by name (RegisterNatives, exceptions it throws, the
# objects it creates), so R8 must neither rename nor remove them.
-keep class org.tvmgen.** { *; }
-keepclasseswithmembernames,includedescriptorclasses class * {
    native <methods>;
}
"""


@dataclass
class Aar:
    path: Path
    abis: list[str]
    models: list[str]  # asset folders, assets/tvmgen/<name>
    libraries: dict[str, str] = field(default_factory=dict)  # asset folder -> its model library, jni/<abi>/<name>
    # asset folder -> the CMake target (lib<target>.so is its library) of each model the app's CMake links
    linked_by_app: dict[str, str] = field(default_factory=dict)
    entries: list[str] = field(default_factory=list)
    pages: list[binfmt.PageReport] = field(default_factory=list)


def manifest_xml(package: str, opencl: bool) -> str:
    from tvmgen.android.downloads import COMPILE_SDK

    uses = (
        '\n        <uses-native-library android:name="libOpenCL.so" android:required="false" />\n    ' if opencl else ""
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<manifest xmlns:android="http://schemas.android.com/apk/res/android" package="{package}">\n'
        f'    <uses-sdk android:minSdkVersion="{toolchains.ANDROID_MIN_API}" '
        f'android:targetSdkVersion="{COMPILE_SDK}" />\n'
        f"    <application>{uses}</application>\n"
        "</manifest>\n"
    )


def compile_classes_jar(out: Path) -> Path:
    """org.tvmgen's sources compiled with --release 8 (Java 8 bytecode and API: every Android version)."""
    jdk = tools.Jdk().verify()
    sources = sorted((resources.jni_dir() / "java" / "org" / "tvmgen").glob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp)
        toolchains.run(
            [jdk / "bin" / "javac", "--release", "8", "-Xlint:-options", "-encoding", "UTF-8", "-d", classes, *sources]
        )
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", ZIP_TIME), "Manifest-Version: 1.0\r\n\r\n")
            for f in sorted(classes.rglob("*.class")):
                jar.writestr(zipfile.ZipInfo(f.relative_to(classes).as_posix(), ZIP_TIME), f.read_bytes())
    return out


def check_native(abi: str, directory: Path, opencl: bool, require_android: bool, vulkan: bool = False) -> list[Path]:
    """The libraries of one ABI, checked: present, built for the ABI's machine, for Android, 16 KB pages."""
    if abi not in ABI_ARCH:
        raise InputError(f"unknown ABI {abi!r}", f"use one of {', '.join(ABI_ARCH)}")
    wanted = [
        *RUNTIME_LIBRARIES,
        *(["libtvmgen_opencl.so"] if opencl else []),
        *(["libtvmgen_vulkan.so"] if vulkan else []),
    ]
    missing = [n for n in wanted if not (directory / n).is_file()]
    build = f"tvmgen runtime build --platform {ABI_PLATFORM[abi]}"  # the NDK build of the runtime for this ABI
    if missing:
        raise InputError(
            f"{directory} lacks {', '.join(missing)} (the {abi} runtime libraries the AAR ships)",
            f"build the runtime for Android with the NDK: `{build}`, then pass --native {abi}=<the prefix it prints>/lib",
        )
    libs = [directory / n for n in wanted] + [directory / n for n in OPTIONAL_LIBRARIES if (directory / n).is_file()]
    for lib in libs:
        arch = binfmt.describe_file(lib)[1]
        if arch != ABI_ARCH[abi]:
            raise InputError(f"{lib} is built for {arch}, not {abi} ({ABI_ARCH[abi]})", f"pass the {abi} build")
        if require_android and b"GLIBC_2." in lib.read_bytes():
            raise InputError(
                f"{lib} is linked against glibc (a Linux build, e.g. `tvmgen runtime build --platform linux-aarch64`): "
                "it does not load on Android, whose C library is bionic",
                f"pass the runtime built with the Android NDK: `{build}`",
            )
        report = binfmt.page_report(lib)
        if ABI_ARCH[abi] in ("aarch64", "x86_64") and not report.ok:
            raise InputError(
                f"{report.summary()}: Android 15's 16 KB pages (and Google Play) need 16 KB",
                "rebuild it with -Wl,-z,max-page-size=16384 (tvmgen's CMake does on Android; NDK r27: "
                "-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON)",
            )
    return libs


def build_aar(
    artifacts: list[Path], native: dict[str, Path], out: Path, package: str, require_android: bool = True
) -> Aar:
    """Write the AAR. ``artifacts``: Android artifact directories (one per device or model), shipped under
    assets/tvmgen/<model>-<device>/ with their model libraries in jni/<abi>/ (PackagedModel), or, compiled to
    objects, with their objects for the app's CMake in tvmgen/ (objects_for_cmake); ``native``: ABI -> a directory
    holding that ABI's runtime libraries, which every model needs (its calls into TVM's runtime resolve there).
    ``require_android=False`` only lets tests package Linux builds of the libraries."""
    check_package(package)
    if not artifacts:
        raise InputError(
            "no artifact directory given", "pass the directory `tvmgen compile --platform android-arm64` wrote"
        )
    if not native:
        raise InputError(
            "no native libraries given (--native ABI=DIR)",
            "build the runtime for Android with the NDK (jni/CMakeLists.txt, build (c)) and pass --native arm64-v8a=DIR",
        )
    models: dict[str, PackagedModel] = {}
    opencl = vulkan = False
    for d in artifacts:
        m = artifact.load(d)
        if not m.platform.startswith("android-"):
            raise InputError(
                f"{d} is compiled for {m.platform}, not Android",
                "compile it with --platform android-arm64 (or another android-*)",
            )
        if m.abi not in native:
            raise InputError(
                f"{d} is built for {m.abi}, and no --native {m.abi}=DIR was given", f"pass --native {m.abi}=DIR"
            )
        if m.export["kind"] == "shared" and m.platform != "android-armv7":
            report = binfmt.page_report(d / m.export["library"])
            if not report.ok:
                raise InputError(
                    f"{d}: {report.summary()}", "compile it again with this tvmgen (it links for 16 KB pages)"
                )
        backend = get_device(m.device).backend
        opencl |= backend == "opencl"
        vulkan |= backend == "vulkan"
        name = f"{m.model.get('name', d.name)}-{m.device}"
        if name in models:
            raise InputError(
                f"two artifacts would both be assets/tvmgen/{name}", "pass one artifact per model and device"
            )
        models[name] = package_model(d)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    libs = {
        abi: check_native(abi, Path(directory), opencl, require_android, vulkan) for abi, directory in native.items()
    }
    with step(f"Writing {out.name} ({', '.join(native)}; {', '.join(models)})"), tempfile.TemporaryDirectory() as tmp:
        jar = compile_classes_jar(Path(tmp) / "classes.jar")
        partial = Path(tmp) / out.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:

            def add(name: str, data: bytes | str) -> None:
                z.writestr(zipfile.ZipInfo(name, ZIP_TIME), data, compress_type=zipfile.ZIP_DEFLATED)

            add("AndroidManifest.xml", manifest_xml(package, opencl))
            add("classes.jar", jar.read_bytes())
            add("proguard.txt", PROGUARD_RULES)
            add("R.txt", "")
            for abi, files in libs.items():
                for lib in files:
                    add(f"jni/{abi}/{lib.name}", lib.read_bytes())
            for name, packaged in models.items():
                if packaged.library is not None:
                    add(f"jni/{packaged.abi}/{packaged.library_name}", packaged.library.read_bytes())
                for file_name, source in packaged.shipped_assets().items():
                    add(
                        f"assets/tvmgen/{name}/{file_name}", source.read_bytes() if isinstance(source, Path) else source
                    )
            for file_name, data in objects_for_cmake(models, Path(tmp) / "cmake").items():
                add(file_name, data)
        shutil.move(str(partial), out)
    with zipfile.ZipFile(out) as z:
        entries = z.namelist()
    libraries = {name: packaged.library_name for name, packaged in models.items()}
    linked_by_app = {
        name: p.library_name.removeprefix("lib").removesuffix(".so") for name, p in models.items() if p.objects
    }
    return Aar(out, list(native), list(models), libraries, linked_by_app, entries, binfmt.archive_page_reports(out))


def objects_for_cmake(models: dict[str, PackagedModel], work: Path) -> dict[str, bytes]:
    """The AAR's tvmgen/ folder (entry name -> bytes) for the models compiled to objects, none if there are none:
    each one's objects and sources in models/<asset folder>/, and tvmgen-model.cmake (templates/android_aar), which
    links them as the deploy app's CMake does (the same function, model_library.cmake, and options)."""
    linked = {name: p for name, p in models.items() if p.objects is not None}
    if not linked:
        return {}
    entries = {
        f"{CMAKE_DIR}/models/{name}/{file_name}": data
        for name, p in linked.items()
        for file_name, data in sorted(p.object_files().items())
    }
    libraries = [p.cmake_library(f"models/{name}") for name, p in linked.items()]
    for f in templates.render("android_aar", work, model_link_context(libraries)):
        entries[f.relative_to(work).as_posix()] = f.read_bytes()
    entries[f"{CMAKE_DIR}/{model_library_cmake().name}"] = model_library_cmake().read_bytes()
    return entries
