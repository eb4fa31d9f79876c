"""`tvmgen aar`: the AAR's layout, manifest, consumer rules and classes.jar (compiled against by javac here),
its libraries checked for the ABI, for Android (bionic) and for 16 KB pages.

The Android runtime libraries need the NDK, which is not here: the packaging is exercised with the
linux-aarch64 build of the same sources (real aarch64 ELF files linked here, passed with
require_android=False, the one test-only switch), and the CLI's refusal of those glibc libraries is
checked. With TVMGEN_TEST_NDK=1 and TVMGEN_TEST_AAR_NATIVE=<the NDK build's lib dir>, the real
libraries are packaged through the CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, require_tool, save_onnx, single_op_models
from tvmgen.android import aar
from tvmgen.core import binfmt
from tvmgen.core.errors import InputError

pytestmark = pytest.mark.slow  # links the JNI bridge for aarch64 (about a minute on 2 cores)

ANDROID = "{http://schemas.android.com/apk/res/android}"


@pytest.fixture(scope="module")
def android_artifact(tmp_path_factory, compiled) -> Path:
    """A softmax model compiled for android-arm64, linked through the NDK's layout with Debian's aarch64 g++."""
    require_tool("aarch64-linux-gnu-g++")
    d = tmp_path_factory.mktemp("aar-model")
    cc = d / "aarch64-linux-android24-clang++"
    cc.write_text(f'#!/bin/sh\nexec {shutil.which("aarch64-linux-gnu-g++")} -Wl,-z,max-page-size=4096 "$@"\n')
    cc.chmod(0o755)
    old = os.environ.get("TVM_NDK_CC")
    os.environ["TVM_NDK_CC"] = str(cc)
    try:
        return compiled(
            save_onnx(single_op_models()["softmax"], d / "softmax.onnx"), "android-arm64", "cpu", name="softmax"
        )
    finally:
        if old is None:
            del os.environ["TVM_NDK_CC"]
        else:
            os.environ["TVM_NDK_CC"] = old


@pytest.fixture(scope="module")
def aarch64_native(tmp_path_factory, aarch64_runtime) -> Path:
    """The runtime libraries for arm64-v8a as linux-aarch64 builds: the session's runtime build plus the JNI
    loader and bridge linked here from jni/'s CMake (for 16 KB pages, as on Android)."""
    from tvmgen.runtime import runtime_build

    build = tmp_path_factory.mktemp("aar-jni")
    subprocess.run(
        [
            "cmake",
            "-S",
            REPO / "jni",
            "-B",
            build,
            "-G",
            "Unix Makefiles",
            f"-DTVMGEN_TVM_PREBUILT={runtime_build.tvm_prebuilt('linux-aarch64')}",
            f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'jni' / 'cmake' / 'aarch64-linux-gnu.cmake'}",
            f"-DTVMGEN_JNI_INCLUDE_DIRS={';'.join(map(str, runtime_build.host_jni_include_dirs()))}",
            "-DTVMGEN_MAX_PAGE_SIZE=16384",
        ],
        check=True,
        capture_output=True,
    )
    # the bridge links the runtime library: the session's build of it stands in for this tree's
    shutil.copy(aarch64_runtime / "lib" / "libtvmgen_runtime.so", build / "libtvmgen_runtime.so")
    for target in ("tvmgen_jni", "tvmgen_jni_bridge"):
        subprocess.run(["make", "-C", build, "-j2", f"{target}/fast"], check=True, capture_output=True)
    lib = tmp_path_factory.mktemp("aar-native")
    for f in (*(aarch64_runtime / "lib").glob("*.so"), build / "libtvmgen_jni.so", build / "libtvmgen_jni_bridge.so"):
        shutil.copy(f, lib / f.name)
    return lib


def test_aar_layout(android_artifact, aarch64_native, tmp_path):
    out = aar.build_aar(
        [android_artifact],
        {"arm64-v8a": aarch64_native},
        tmp_path / "softmax.aar",
        "org.example.softmax",
        require_android=False,
    )
    names = set(out.entries)
    assert {"AndroidManifest.xml", "classes.jar", "proguard.txt", "R.txt"} <= names
    assert {f"jni/arm64-v8a/{n}" for n in aar.RUNTIME_LIBRARIES} <= names
    assert "jni/arm64-v8a/libtvmgen_opencl.so" not in names  # a CPU model ships no OpenCL backend
    assert {"assets/tvmgen/softmax-cpu/manifest.json", "assets/tvmgen/softmax-cpu/model.so"} <= names
    assert out.models == ["softmax-cpu"] and out.abis == ["arm64-v8a"]

    with zipfile.ZipFile(out.path) as z:
        manifest = ET.fromstring(z.read("AndroidManifest.xml"))
        rules = z.read("proguard.txt").decode()
        (tmp_path / "classes.jar").write_bytes(z.read("classes.jar"))
        assert z.read("assets/tvmgen/softmax-cpu/model.so") == (android_artifact / "model.so").read_bytes()
    assert manifest.get("package") == "org.example.softmax"
    sdk = manifest.find("uses-sdk")
    assert sdk.get(f"{ANDROID}minSdkVersion") == "24" and sdk.get(f"{ANDROID}targetSdkVersion") == "35"
    assert manifest.find("application/uses-native-library") is None
    assert "-keep class org.tvmgen.** { *; }" in rules and "native <methods>;" in rules

    # every library in it (the runtime's and the model's) is 16 KB-ready, as `tvmgen inspect x.aar` says
    assert out.pages and all(r.ok for r in out.pages), [r.summary() for r in out.pages if not r.ok]
    assert {r.name for r in out.pages} >= {
        "jni/arm64-v8a/libtvmgen_jni_bridge.so",
        "assets/tvmgen/softmax-cpu/model.so",
    }

    # classes.jar: Java 8 class files (major 52) holding the API; an app compiles against it
    with zipfile.ZipFile(tmp_path / "classes.jar") as jar:
        classes = set(jar.namelist())
        model_class = jar.read("org/tvmgen/Model.class")
    assert {"org/tvmgen/Model.class", "org/tvmgen/NativeLib.class", "org/tvmgen/TvmgenException.class"} <= classes
    assert int.from_bytes(model_class[6:8], "big") == 52
    app = tmp_path / "App.java"
    app.write_text(
        "import org.tvmgen.Model;\n"
        "public class App { static java.util.concurrent.CompletableFuture<float[]> go(String dir) {\n"
        "  Model m = Model.load(dir, 2, Model.AFFINITY_BIG); return m.runAsyncAndRead(x -> x.getOutputFloats(0)); } }\n"
    )
    javac = subprocess.run(
        ["javac", "--release", "8", "-Xlint:-options", "-cp", tmp_path / "classes.jar", "-d", tmp_path / "app", app],
        capture_output=True,
        text=True,
    )
    assert javac.returncode == 0, javac.stderr

    again = aar.build_aar(
        [android_artifact],
        {"arm64-v8a": aarch64_native},
        tmp_path / "again.aar",
        "org.example.softmax",
        require_android=False,
    )
    assert again.path.read_bytes() == out.path.read_bytes()  # deterministic


def test_aar_refuses_linux_libraries_and_4k_pages(android_artifact, aarch64_native, tmp_path, tvmgen):
    r = tvmgen("aar", android_artifact, "--native", f"arm64-v8a={aarch64_native}", "-o", tmp_path / "x.aar")
    assert r.returncode == 2 and "is linked against glibc" in r.stderr and "bionic" in r.stderr, r.stderr
    assert not (tmp_path / "x.aar").exists()

    four_k = tmp_path / "4k"
    shutil.copytree(aarch64_native, four_k)
    src = tmp_path / "a.cc"
    src.write_text('extern "C" int a() { return 1; }\n')
    subprocess.run(
        ["aarch64-linux-gnu-g++", "-shared", "-fPIC", "-Wl,-z,max-page-size=4096", "-o", four_k / "libtvm_ffi.so", src],
        check=True,
    )
    with pytest.raises(InputError, match=r"libtvm_ffi.so \(aarch64\): p_align 0x1000.*need 16 KB"):
        aar.build_aar(
            [android_artifact], {"arm64-v8a": four_k}, tmp_path / "y.aar", "org.example.softmax", require_android=False
        )
    with pytest.raises(InputError, match="built for aarch64, not x86_64"):
        aar.build_aar(
            [android_artifact],
            {"arm64-v8a": aarch64_native, "x86_64": aarch64_native},
            tmp_path / "z.aar",
            "org.example.softmax",
            require_android=False,
        )
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"lacks libtvmgen_jni\.so") as e:
        aar.build_aar([android_artifact], {"arm64-v8a": tmp_path / "empty"}, tmp_path / "w.aar", "org.example.softmax")
    assert "ANDROID_ABI=arm64-v8a" in e.value.hint
    assert binfmt.page_report(aarch64_native / "libtvmgen_jni.so").min_align == 16384


@pytest.mark.skipif(
    os.environ.get("TVMGEN_TEST_NDK") != "1" or not os.environ.get("TVMGEN_TEST_AAR_NATIVE"),
    reason="set TVMGEN_TEST_NDK=1 and TVMGEN_TEST_AAR_NATIVE to the arm64-v8a lib dir of the NDK runtime build",
)
def test_real_android_libraries(android_artifact, tmp_path, tvmgen):
    r = tvmgen(
        "aar",
        android_artifact,
        "--native",
        f"arm64-v8a={os.environ['TVMGEN_TEST_AAR_NATIVE']}",
        "-o",
        tmp_path / "m.aar",
    )
    assert r.returncode == 0, r.stderr
    assert all(rep.ok for rep in binfmt.archive_page_reports(tmp_path / "m.aar"))
