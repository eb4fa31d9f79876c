"""Turn a TVM executable into files on disk, with the toolchain each platform needs."""

from __future__ import annotations

import hashlib
import os
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tvmgen.compiler import vulkan
from tvmgen.compiler.targets.platforms import Platform
from tvmgen.core import resources, toolchains

# tvmgen's parallel launcher (jni/src/parallel/parallel_pool.cc), compiled into every model library
# linked here; tvmgen's runtimes switch the library to it after loading it (runner.HostModel, Model::Load).
POOL_FLAGS = ["-O2", "-std=c++17", "-fvisibility=hidden", "-fno-exceptions", "-fno-rtti"]


def parallel_pool_source() -> Path:
    return resources.jni_dir() / "src" / "parallel" / "parallel_pool.cc"


def parallel_pool_object(compiler: Path, flags: list[str]) -> Path:
    """The launcher compiled by ``compiler`` with ``flags``, once per (source, compiler, flags) in tvmgen's cache
    (``launcher/``): each model link takes the object instead of compiling the source again (about half a
    second of a small model's export). Written under a temporary name and renamed, so concurrent compiles
    share one entry. Without a writable cache, the source itself (the link compiles it)."""
    source = parallel_pool_source()
    real = Path(compiler).resolve()
    st = real.stat()
    key = hashlib.sha256(
        "\0".join([source.read_text(), str(real), str(st.st_size), str(st.st_mtime_ns), *flags]).encode()
    ).hexdigest()[:24]
    cached = resources.cache_dir() / "launcher" / f"parallel_pool-{key}.o"
    if cached.is_file():
        return cached
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{cached.stem}-", suffix=".o", dir=cached.parent)
    except OSError:  # no writable cache: the link compiles the source, as a library without a cache would
        return source
    os.close(fd)
    try:
        toolchains.run([str(compiler), "-c", "-fPIC", *flags, "-o", tmp, str(source)])
        os.replace(tmp, cached)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return cached


@dataclass
class Exported:
    kind: str  # shared | objects | static
    library: str  # file name inside the artifact directory
    finish_command: str | None = None  # what turns an object archive into a library elsewhere


def linker(platform: Platform, objects_only: bool) -> Path | None:
    """The compiler that links the library, found before any compiling starts (None: no linking here)."""
    if platform.exporter == "xcode" or objects_only:
        return None
    return {
        "host": lambda: toolchains.HostCxx(),
        "aarch64-linux-gnu": lambda: toolchains.CrossGxxAarch64(),
        "ndk": lambda: toolchains.AndroidNdk(platform.abi),
    }[platform.exporter]().verify()


def export(ex, platform: Platform, directory: Path, objects_only: bool) -> Exported:
    """Write the model library for ``platform`` into ``directory``."""
    import tvm.support.cc as cc

    if platform.exporter == "xcode":
        return _export_ios(ex, directory)
    if objects_only:  # the archive carries the launcher's source; the link command compiles it
        ex.export_library(
            str(directory / "model.tar"), addons=[str(parallel_pool_source())], **vulkan.export_options(ex)
        )
        return Exported("objects", "model.tar", _link_command(platform))
    compiler = linker(platform, objects_only)
    assert compiler is not None  # every exporter but Xcode's links here
    options = POOL_FLAGS + (["-static-libstdc++", *toolchains.ANDROID_LINK_FLAGS] if platform.exporter == "ndk" else [])
    ex.export_library(
        str(directory / "model.so"),
        fcompile=cc.cross_compiler(str(compiler), options=options),
        addons=[str(parallel_pool_object(compiler, POOL_FLAGS))],
        **vulkan.export_options(ex),
    )
    return Exported("shared", "model.so")


def _link_command(platform: Platform) -> str:
    clang = f"{toolchains.ANDROID_CLANG_PREFIX.get(platform.abi, 'CXX')}{toolchains.ANDROID_MIN_API}-clang++"
    return (
        f"mkdir objs && tar -xf model.tar -C objs && {clang} -shared -fPIC {' '.join(POOL_FLAGS)} "
        f"-static-libstdc++ {' '.join(toolchains.ANDROID_LINK_FLAGS)} "
        f"-o model.so objs/*.o objs/{parallel_pool_source().name}"
    )


def _export_ios(ex, directory: Path) -> Exported:
    """A system-lib static library: objects always; the .a itself only where Xcode exists."""
    tar_path = directory / "model.tar"
    ex.export_library(str(tar_path))
    finish = "mkdir objs && tar -xf model.tar -C objs && xcrun libtool -static -o libmodel.a objs/*.o"
    xcode = toolchains.Xcode()
    if not xcode.available():
        return Exported("objects", "model.tar", finish)
    objs = directory / ".objs"
    objs.mkdir()
    with tarfile.open(tar_path) as t:
        t.extractall(objs, filter="data")
    toolchains.run(
        [
            str(xcode.verify()),
            "libtool",
            "-static",
            "-o",
            str(directory / "libmodel.a"),
            *sorted(map(str, objs.glob("*.o"))),
        ]
    )
    for p in objs.iterdir():
        p.unlink()
    objs.rmdir()
    tar_path.unlink()
    return Exported("static", "libmodel.a", None)


def quote(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
