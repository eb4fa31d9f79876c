"""16 KB pages (Android 15+, required by Google Play): the ELF program-header reader against readelf, the
page size reaching every library the runtime's CMake links, and `tvmgen inspect` on libraries and archives.

Libraries are linked here with Debian's aarch64 cross toolchain (GNU ld). The NDK's own link (lld, whose r27
default is 4 KB) is covered by the gated NDK tests in test_platforms.py (TVMGEN_TEST_NDK=1).
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, require_tool
from helpers import cmake_configure
from tvmgen.core import binfmt


def link(tmp_path: Path, page: int | None, name: str | None = None) -> Path:
    """A small aarch64 shared library linked with ``-z max-page-size=page`` (None: GNU ld's default)."""
    require_tool("aarch64-linux-gnu-g++")
    src = tmp_path / "lib.cc"
    src.write_text('extern "C" int answer() { static int calls; return 42 + calls++; }\n')
    so = tmp_path / (name or f"lib{page or 'default'}.so")
    flags = [f"-Wl,-z,max-page-size={page}"] if page else []
    subprocess.run(["aarch64-linux-gnu-g++", "-shared", "-fPIC", "-O2", *flags, "-o", so, src], check=True)
    return so


def readelf_loads(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(offset, vaddr, filesz, memsz, align) of each LOAD line of ``readelf -lW``."""
    require_tool("readelf")
    out = subprocess.run(["readelf", "-lW", str(path)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            rows.append((int(f[1], 16), int(f[2], 16), int(f[4], 16), int(f[5], 16), int(f[-1], 16)))
    assert rows, out
    return rows


def ours(path: Path) -> list[tuple[int, int, int, int, int]]:
    return [(s.offset, s.vaddr, s.filesz, s.memsz, s.align) for s in binfmt.page_report(path).segments]


@pytest.mark.parametrize("page,expect_ok", [(4096, False), (16384, True), (65536, True), (None, True)])
def test_reader_matches_readelf(tmp_path, page, expect_ok):
    so = link(tmp_path, page)
    report = binfmt.page_report(so)
    assert ours(so) == readelf_loads(so)
    assert report.arch == "aarch64" and report.ok is expect_ok
    if page is not None:
        assert report.min_align == page
    else:
        assert report.min_align == 65536  # GNU ld's aarch64 default: what linux-aarch64 builds get
    if not expect_ok:
        assert "aligned to 4096 bytes (4 KB), need 16384 (16 KB)" in report.problem()


def test_reader_on_32_bit_and_host_libraries(tmp_path):
    """The 32-bit layout (armeabi-v7a's) and another machine's library read the same way as readelf reads them."""
    require_tool("g++")
    src = tmp_path / "a.cc"
    src.write_text('extern "C" int a() { return 1; }\n')
    host = tmp_path / "libhost.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-Wl,-z,max-page-size=16384", "-o", host, src], check=True)
    assert ours(host) == readelf_loads(host) and binfmt.page_report(host).ok
    obj32 = tmp_path / "lib32.so"
    proc = subprocess.run(["g++", "-m32", "-shared", "-fPIC", "-o", obj32, src], capture_output=True)
    if proc.returncode == 0:  # only where a 32-bit libc is installed
        assert ours(obj32) == readelf_loads(obj32) and binfmt.describe_file(obj32)[1] == "x86"
    with pytest.raises(ValueError, match="not an ELF"):
        binfmt.load_segments(b"PK\x03\x04" + bytes(60))


def test_runtime_libraries_built_here_are_16k_ready(aarch64_runtime):
    """Every library of the session's linux-aarch64 runtime build passes the check (GNU ld: 64 KB)."""
    libs = sorted((aarch64_runtime / "lib").glob("*.so"))
    assert {p.name for p in libs} >= {"libtvmgen_runtime.so", "libtvmgen_rpc.so", "libtvmgen_opencl.so"}
    for lib in libs:
        report = binfmt.page_report(lib)
        assert report.ok, report.summary()
        assert ours(lib) == readelf_loads(lib)


def configure(tmp_path: Path, *extra: str) -> Path:
    """jni/ configured for linux-aarch64 (no build): link lines land in CMakeFiles/<target>.dir/link.txt."""

    require_tool("cmake")
    require_tool("aarch64-linux-gnu-g++")
    return cmake_configure(REPO / "jni", tmp_path / "cmake", *extra, aarch64=True)


LIBRARIES = ("tvmgen_runtime", "tvmgen_rpc", "tvmgen_opencl", "tvmgen_jni", "tvmgen_jni_bridge")


@pytest.mark.parametrize("page", ["16384", "4096"])
def test_cmake_links_every_library_with_the_page_size(tmp_path, page):
    """TVMGEN_MAX_PAGE_SIZE (16384 by default on Android) reaches the link of every runtime library, the JNI
    bridge and the OpenCL backend; the JNI loader is then linked for real and read back."""
    build = configure(tmp_path, f"-DTVMGEN_MAX_PAGE_SIZE={page}")
    for target in LIBRARIES:
        link_line = (build / "CMakeFiles" / f"{target}.dir" / "link.txt").read_text()
        assert f"-Wl,-z,max-page-size={page}" in link_line, target
    # the loader (one source file, no TVM dependency) links in a second: the flag takes effect
    subprocess.run(["make", "-C", build, "tvmgen_jni/fast"], check=True, capture_output=True)
    report = binfmt.page_report(build / "libtvmgen_jni.so")
    assert report.min_align == int(page) and report.ok is (page == "16384")


def test_cmake_keeps_the_linker_default_off_android(tmp_path):
    build = configure(tmp_path)
    for target in LIBRARIES:
        assert "max-page-size" not in (build / "CMakeFiles" / f"{target}.dir" / "link.txt").read_text(), target


def test_inspect_library_and_archive(tmp_path, tvmgen_inprocess):
    good, bad = link(tmp_path, 16384), link(tmp_path, 4096)
    r = tvmgen_inprocess("inspect", good)
    assert r.returncode == 0 and re.search(r"lib16384\.so \(aarch64\): p_align 0x4000: 16 KB-ready", r.output)
    r = tvmgen_inprocess("inspect", bad)
    assert r.returncode == 2 and "lib4096.so (aarch64): p_align 0x1000: NOT ready" in r.output
    assert "max-page-size=16384" in r.output  # the fix

    aar = tmp_path / "x.aar"
    with zipfile.ZipFile(aar, "w") as z:  # libraries in an AAR are compressed: only p_align counts
        z.write(good, "jni/arm64-v8a/libgood.so", compress_type=zipfile.ZIP_DEFLATED)
        z.write(bad, "jni/arm64-v8a/libbad.so", compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("AndroidManifest.xml", "<manifest/>")
    r = tvmgen_inprocess("inspect", aar, "--json")
    assert r.returncode == 2
    import json

    rows = {row["name"]: row for row in json.loads(r.stdout[: r.stdout.rindex("}") + 1])["libraries"]}
    assert rows["jni/arm64-v8a/libgood.so"]["ready_16k"] and rows["jni/arm64-v8a/libgood.so"]["compressed"]
    assert (
        rows["jni/arm64-v8a/libbad.so"]["p_align"] == [4096, 4096] and not rows["jni/arm64-v8a/libbad.so"]["ready_16k"]
    )
    r = tvmgen_inprocess("inspect", tmp_path / "lib.cc")
    assert r.returncode == 2 and "is not an ELF library, an APK or an AAR" in r.output
