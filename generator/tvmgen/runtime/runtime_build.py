"""Build the device runtime in jni/ (libtvmgen_runtime, tvmgen-run, the JNI bridge) with CMake.

The TVM runtime it links comes from the apache-tvm wheels: the installed one for the host,
the aarch64 wheel (fetched with pip into the user cache, once) for linux-aarch64. For an
Android ABI it is built from a TVM source tree with the NDK's CMake toolchain, with the
arguments the apps' Gradle builds pass (``android_configure_args``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

from tvmgen.compiler.targets.platforms import get_platform
from tvmgen.core import artifact, resources, toolchains
from tvmgen.core.errors import InputError, ToolMissingError, TvmgenError
from tvmgen.core.log import step

BUILDABLE = ("host", "linux-aarch64")  # against the apache-tvm wheels; Android ABIs against a TVM source tree
# Where an NDK (r19 and newer) keeps its CMake toolchain file.
ANDROID_TOOLCHAIN_FILE = Path("build") / "cmake" / "android.toolchain.cmake"
NDK_FIX = (
    "tvmgen doctor --install (downloads the NDK into tvmgen's Android SDK), "
    "or set ANDROID_NDK_HOME to an unpacked Android NDK (r25 or newer)"
)
# What a runtime needs from the wheels: the runtime libraries and the tvm-ffi headers.
WHEEL_MEMBERS = ("tvm/lib/libtvm_runtime.so", "tvm/lib/libtvm_runtime_cuda.so", "tvm_ffi/lib/libtvm_ffi.so")
WHEEL_TREES = ("tvm_ffi/include/",)


def tvm_prebuilt(platform: str) -> Path:
    """A directory holding tvm/lib and tvm_ffi/{include,lib} for ``platform``."""
    if platform == "host":
        import tvm
        import tvm_ffi

        root = Path(tvm.__file__).resolve().parent.parent
        if Path(tvm_ffi.__file__).resolve().parent.parent != root:
            raise TvmgenError(
                f"tvm and tvm_ffi are installed in different places ({root}, {tvm_ffi.__file__})",
                "install apache-tvm and apache-tvm-ffi into the same environment",
            )
        return root
    if platform == "linux-aarch64":
        return _aarch64_wheels()
    raise InputError(
        f"no prebuilt TVM runtime for {platform}: the apache-tvm wheels serve {', '.join(BUILDABLE)}",
        "for an Android ABI, `tvmgen runtime build --platform android-arm64` builds the TVM runtime from source",
    )


def _aarch64_wheels() -> Path:
    tvm_v, ffi_v = version("apache-tvm"), version("apache-tvm-ffi")
    dest = resources.cache_dir() / "prebuilt" / f"linux-aarch64-tvm{tvm_v}-ffi{ffi_v}"
    if (dest / "tvm" / "lib" / "libtvm_runtime.so").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp_name:
        tmp = Path(tmp_name)
        with step(f"Fetching the aarch64 TVM runtime (apache-tvm {tvm_v}, apache-tvm-ffi {ffi_v}) with pip"):
            toolchains.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "--platform",
                    "manylinux_2_28_aarch64",
                    "--python-version",
                    "3.11",
                    "-d",
                    str(tmp / "whl"),
                    f"apache-tvm=={tvm_v}",
                    f"apache-tvm-ffi=={ffi_v}",
                ]
            )
        out = tmp / "tree"
        for whl in (tmp / "whl").glob("*.whl"):
            with zipfile.ZipFile(whl) as z:
                for name in z.namelist():
                    if name in WHEEL_MEMBERS or name.startswith(WHEEL_TREES):
                        z.extract(name, out)
        if not (out / "tvm" / "lib" / "libtvm_runtime.so").is_file():
            raise TvmgenError("the downloaded aarch64 apache-tvm wheel has no tvm/lib/libtvm_runtime.so")
        if dest.exists():  # another process finished first
            return dest
        out.rename(dest)
    return dest


def host_jni_include_dirs() -> list[Path]:
    """include/ and include/linux of the JDK whose javac is on PATH (empty when there is none)."""
    javac = toolchains.which("javac")
    if javac is None:
        return []
    home = javac.resolve().parent.parent
    dirs = [home / "include", home / "include" / "linux"]
    return dirs if (dirs[0] / "jni.h").is_file() else []


def is_android(platform: str) -> bool:
    """Whether ``platform`` is an Android ABI (its runtime built with the NDK against a TVM source tree)."""
    return get_platform(platform).exporter == "ndk"


def ndk_toolchain_file(abi: str) -> Path:
    """The CMake toolchain file of the NDK that `tvmgen compile`, `tvmgen app` and `tvmgen doctor` find
    (toolchains.AndroidNdk: TVM_NDK_CC, ANDROID_NDK_HOME, ANDROID_NDK_ROOT, the SDK's ndk/<version>)."""
    ndk = toolchains.AndroidNdk(abi)
    try:
        clang = ndk.verify()
    except ToolMissingError as e:
        if os.environ.get("TVM_NDK_CC") or ndk.ndk_root() is not None:
            raise  # an NDK is named or found but unusable: its own cause and fix
        raise ToolMissingError(
            f"{e.message}; the Android runtime is built with the NDK's CMake toolchain", NDK_FIX
        ) from None
    # the NDK that holds the compiler (<ndk>/toolchains/llvm/prebuilt/<host>/bin/), else the NDK root found
    roots = list(clang.parents[5:6])
    for root in roots:
        if (root / ANDROID_TOOLCHAIN_FILE).is_file():
            return root / ANDROID_TOOLCHAIN_FILE
    found = ndk.ndk_root()
    if found is not None and (found / ANDROID_TOOLCHAIN_FILE).is_file():
        return found / ANDROID_TOOLCHAIN_FILE
    where = ", ".join(str(r) for r in dict.fromkeys([*roots, *([found] if found else [])]))
    raise ToolMissingError(f"no {ANDROID_TOOLCHAIN_FILE} in the Android NDK ({where})", NDK_FIX)


def android_configure_args(platform: str, toolchain_file: Path, tvm_source: Path, jni: bool = True) -> list[str]:
    """The CMake configure arguments of the runtime for an Android ABI: the NDK's toolchain, the platform's ABI,
    the apps' minSdk, and what the apps' Gradle builds pass (templates/android_*/app/build.gradle.jinja)."""
    p = get_platform(platform)
    if p.exporter != "ndk":
        raise InputError(f"{platform} is not an Android platform", "use one of the android-* platforms")
    return [
        f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file}",
        f"-DANDROID_ABI={p.abi}",
        f"-DANDROID_PLATFORM=android-{toolchains.ANDROID_MIN_API}",
        # NDK r27's lld aligns to 4 KB unless asked; jni/CMakeLists.txt also links with -z max-page-size=16384
        "-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON",
        f"-DTVM_SOURCE_DIR={tvm_source}",
        f"-DTVMGEN_BUILD_JNI={'ON' if jni else 'OFF'}",
    ]


def build(platform: str, build_dir: Path, jni: bool = True, tvm_source: Path | None = None) -> Path:
    """Configure, build and install the runtime; returns the install prefix (bin/, lib/, include/).

    Android ABIs need ``tvm_source``, the TVM source tree the app build uses (android.downloads.tvm_source_dir).
    Everything is checked before the build directory is made.
    """
    if is_android(platform) and tvm_source is None:
        raise InputError(
            f"the runtime for {platform} is built from a TVM source tree, and none was given",
            "set TVM_SOURCE_DIR to a TVM source tree (or: tvmgen doctor --install)",
        )
    cmake = toolchains.CMake()
    cmake.verify()
    if is_android(platform):
        assert tvm_source is not None
        args = android_configure_args(platform, ndk_toolchain_file(get_platform(platform).abi), tvm_source, jni)
    else:
        args = [f"-DTVMGEN_TVM_PREBUILT={tvm_prebuilt(platform)}", f"-DTVMGEN_BUILD_JNI={'ON' if jni else 'OFF'}"]
    if platform == "linux-aarch64":
        toolchains.CrossGxxAarch64().verify()
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={resources.jni_dir() / 'cmake' / 'aarch64-linux-gnu.cmake'}")
        jni_headers = host_jni_include_dirs()
        if jni and jni_headers:  # jni.h is the same for every Linux architecture: the host JDK's serves
            args.append(f"-DTVMGEN_JNI_INCLUDE_DIRS={';'.join(map(str, jni_headers))}")
    build_dir = Path(build_dir).absolute()
    prefix = build_dir / "install"
    with step(f"Building the tvmgen runtime for {platform} (cmake)"):
        cmake.run("-S", resources.jni_dir(), "-B", build_dir / "cmake", f"-DCMAKE_INSTALL_PREFIX={prefix}", *args)
        cmake.run("--build", build_dir / "cmake", "-j", str(os.cpu_count() or 2))
        cmake.run("--install", build_dir / "cmake")
    return prefix


def sources_hash() -> str:
    """A hash of jni/'s sources: a cached build is reused only while they are unchanged."""
    import hashlib

    h = hashlib.sha256()
    root = resources.jni_dir()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cached_build(platform: str) -> Path:
    """The runtime for ``platform`` built once per jni/ source version and TVM / tvm-ffi version (the
    headers it compiles against), in the user cache, with the Java API (lib/libtvmgen_jni.so,
    share/java/tvmgen.jar) where CMake finds a JDK: one build serves tvmgen-run, the RPC server, the
    GPU backends, `tvmgen embed` and the Java API."""
    versions = f"tvm{version('apache-tvm')}-ffi{version('apache-tvm-ffi')}"
    build_dir = resources.cache_dir() / "runtime" / f"{platform}-{sources_hash()}-{versions}"
    prefix = build_dir / "install"
    if (prefix / "bin" / "tvmgen-rpc-server").is_file():
        return prefix
    with artifact.exclusive(build_dir.with_name(build_dir.name + ".lock")):  # another process may be building it
        if (prefix / "bin" / "tvmgen-rpc-server").is_file():
            return prefix
        return build(platform, build_dir, jni=True)


def load_backend(device: str, title: str, hint: str | None = None) -> None:
    """Load libtvmgen_<device> (tvmgen's OpenCL or Vulkan backend) into this process, unless TVM has
    ``device_api.<device>`` already: it registers that device API and the loader of its kernels.

    ``$TVMGEN_<DEVICE>_BACKEND`` names the library; otherwise the host runtime build (cached) is used.
    A library that does not load is a TvmgenError naming ``title`` (with ``hint`` as its fix).
    """
    import ctypes

    import tvm

    if tvm.get_global_func(f"device_api.{device}", allow_missing=True) is not None:
        return
    path = os.environ.get(f"TVMGEN_{device.upper()}_BACKEND")
    if not path:
        path = str(cached_build("host") / "lib" / f"libtvmgen_{device}.so")
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise TvmgenError(f"cannot load tvmgen's {title} backend {path}: {e}", hint) from e
