"""`tvmgen aar`: the AAR's layout (each model's library among the native libraries, loaded in place), manifest,
consumer rules and classes.jar (Java 8 bytecode, compiled against by javac here and run on the host JVM with the
host JNI library), its libraries checked for the ABI, for Android (bionic) and for 16 KB pages; a model compiled
to objects linked from the AAR by an app's CMake (the lines the docs give), with the aarch64 cross g++ standing in
for the NDK, and run under qemu.

The Android runtime libraries need the NDK, which is not here: the packaging is exercised with the
linux-aarch64 build of the same sources (real aarch64 ELF files linked here, passed with
require_android=False, the one test-only switch), and the CLI's refusal of those glibc libraries is
checked. With TVMGEN_TEST_NDK=1 and TVMGEN_TEST_AAR_NATIVE=<the NDK build's lib dir>, the real
libraries are packaged through the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, require_tool, save_onnx, single_op_models
from helpers import cmake_configure
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

    build = cmake_configure(
        REPO / "jni", tmp_path_factory.mktemp("aar-jni"), "-DTVMGEN_MAX_PAGE_SIZE=16384", aarch64=True
    )
    # the bridge links the runtime library: the session's build of it stands in for this tree's
    shutil.copy(aarch64_runtime / "lib" / "libtvmgen_runtime.so", build / "libtvmgen_runtime.so")
    for target in ("tvmgen_jni", "tvmgen_jni_bridge"):
        subprocess.run(["make", "-C", build, "-j2", f"{target}/fast"], check=True, capture_output=True)
    lib = tmp_path_factory.mktemp("aar-native")
    for f in (*(aarch64_runtime / "lib").glob("*.so"), build / "libtvmgen_jni.so", build / "libtvmgen_jni_bridge.so"):
        shutil.copy(f, lib / f.name)
    return lib


@pytest.fixture(scope="module")
def softmax_aar(android_artifact, aarch64_native, tmp_path_factory) -> aar.Aar:
    return aar.build_aar(
        [android_artifact],
        {"arm64-v8a": aarch64_native},
        tmp_path_factory.mktemp("aar") / "softmax.aar",
        "org.example.softmax",
        require_android=False,
    )


def test_aar_layout(softmax_aar, android_artifact, aarch64_native, tmp_path):
    out = softmax_aar
    names = set(out.entries)
    assert {"AndroidManifest.xml", "classes.jar", "proguard.txt", "R.txt"} <= names
    assert {f"jni/arm64-v8a/{n}" for n in aar.RUNTIME_LIBRARIES} <= names
    assert "jni/arm64-v8a/libtvmgen_opencl.so" not in names  # a CPU model ships no OpenCL backend
    assert out.models == ["softmax-cpu"] and out.abis == ["arm64-v8a"]
    # the model's library is one of the native libraries (loaded in place from the APK), named after the model,
    # the device and the manifest's sha256 of it, and byte for byte the library that sha256 describes; the
    # assets keep the rest of the artifact and name the library
    sha = json.loads((android_artifact / "manifest.json").read_text())["files"]["model.so"]["sha256"]
    library = f"libtvmgen_model_softmax_cpu_{sha[:12]}.so"
    assert out.libraries == {"softmax-cpu": library}
    assets = {n.removeprefix("assets/tvmgen/softmax-cpu/") for n in names if n.startswith("assets/")}
    assert assets == {p.name for p in android_artifact.iterdir()} - {"model.so"} | {"library.txt"}
    assert f"jni/arm64-v8a/{library}" in names

    with zipfile.ZipFile(out.path) as z:
        manifest = ET.fromstring(z.read("AndroidManifest.xml"))
        rules = z.read("proguard.txt").decode()
        (tmp_path / "classes.jar").write_bytes(z.read("classes.jar"))
        shipped = z.read(f"jni/arm64-v8a/{library}")
        assert z.read("assets/tvmgen/softmax-cpu/library.txt") == f"{library}\n".encode()
        assert z.read("assets/tvmgen/softmax-cpu/manifest.json") == (android_artifact / "manifest.json").read_bytes()
    assert shipped == (android_artifact / "model.so").read_bytes() and hashlib.sha256(shipped).hexdigest() == sha
    assert manifest.get("package") == "org.example.softmax"
    sdk = manifest.find("uses-sdk")
    assert sdk.get(f"{ANDROID}minSdkVersion") == "24" and sdk.get(f"{ANDROID}targetSdkVersion") == "35"
    assert manifest.find("application/uses-native-library") is None
    assert "-keep class org.tvmgen.** { *; }" in rules and "native <methods>;" in rules

    # every library in it (the runtime's and the model's) is 16 KB-ready, as `tvmgen inspect x.aar` says
    assert out.pages and all(r.ok for r in out.pages), [r.summary() for r in out.pages if not r.ok]
    assert {r.name for r in out.pages} >= {"jni/arm64-v8a/libtvmgen_jni_bridge.so", f"jni/arm64-v8a/{library}"}

    # classes.jar: Java 8 class files (major 52) holding the API, Android's class (android.jar) left out;
    # an app compiles against it
    with zipfile.ZipFile(tmp_path / "classes.jar") as jar:
        classes = {n: jar.read(n) for n in jar.namelist() if n.endswith(".class")}
    assert {"org/tvmgen/Model.class", "org/tvmgen/ArtifactData.class", "org/tvmgen/TvmgenException.class"} <= set(
        classes
    )
    assert "org/tvmgen/AndroidAssets.class" not in classes
    assert {n: int.from_bytes(c[6:8], "big") for n, c in classes.items()} == dict.fromkeys(classes, 52)
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


# What an app does with the AAR, in plain Java 8 (the AAR's classes.jar holds no android.jar class): a packaged
# artifact's manifest and weights read from its asset directory, its library found by name among the native
# libraries; one run through runAsyncAndRead. args: ASSET_DIR INPUT.bin OUTPUT.bin (little-endian float32).
AAR_APP = """\
import java.io.File;
import java.io.FileInputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import org.tvmgen.ArtifactData;
import org.tvmgen.Model;

public class AarApp {
  public static void main(String[] args) throws Exception {
    final File assets = new File(args[0]);
    ArtifactData data = ArtifactData.readPackaged(args[0], name -> new FileInputStream(new File(assets, name)));
    float[] x = new float[(int) new File(args[1]).length() / 4];
    ByteBuffer.wrap(Files.readAllBytes(new File(args[1]).toPath())).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(x);
    try (Model model = Model.load(data, 1, Model.AFFINITY_ANY)) {
      model.setInput(0, x);
      float[] y = model.runAsyncAndRead(m -> m.getOutputFloats(0)).get();
      ByteBuffer out = ByteBuffer.allocate(4 * y.length).order(ByteOrder.LITTLE_ENDIAN);
      out.asFloatBuffer().put(y);
      Files.write(new File(args[2]).toPath(), out.array());
      System.out.println("ran " + data + " on " + model.device());
    }
  }
}
"""


def test_classes_jar_runs_a_packaged_model_on_the_host(softmax_aar, java_build, compiled, tmp_path):
    """The AAR's classes.jar (Java 8 bytecode) on this JVM with the host's JNI library: a host artifact packaged
    as the AAR packages its models (the library among the native libraries, on the linker's path here as the
    APK's lib/<abi>/ is on Android; the manifest and --separate-params weights in the assets) loads by name
    and gives the Python VM's and onnxruntime's outputs."""
    import onnxruntime as ort

    from tvmgen.android import project
    from tvmgen.runtime.runner import HostModel

    with zipfile.ZipFile(softmax_aar.path) as z:
        (tmp_path / "classes.jar").write_bytes(z.read("classes.jar"))
    onnx_path = save_onnx(single_op_models()["gemm"], tmp_path / "gemm.onnx")
    art = compiled(onnx_path, name="gemm", separate_params=True)
    packaged = project.package_model(art)
    packaged.write(tmp_path / "assets" / "gemm-cpu", tmp_path / "lib")
    assert "model.so" not in {p.name for p in (tmp_path / "assets" / "gemm-cpu").iterdir()}
    assert (tmp_path / "assets" / "gemm-cpu" / "model.params").is_file()

    (tmp_path / "AarApp.java").write_text(AAR_APP)
    javac = subprocess.run(
        ["javac", "--release", "8", "-cp", tmp_path / "classes.jar", "-d", tmp_path / "app", tmp_path / "AarApp.java"],
        capture_output=True,
        text=True,
    )
    assert javac.returncode == 0, javac.stderr
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=os.pathsep.join(
            filter(None, [str(tmp_path / "lib" / packaged.abi), os.environ.get("LD_LIBRARY_PATH")])
        ),
    )
    r = subprocess.run(
        [
            "java",
            "-Xcheck:jni",
            f"-Djava.library.path={java_build['dir']}",
            "-cp",
            os.pathsep.join([str(tmp_path / "classes.jar"), str(tmp_path / "app")]),
            "AarApp",
            tmp_path / "assets" / "gemm-cpu",
            tmp_path / "x.bin",
            tmp_path / "y.bin",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in (r.stdout + r.stderr).lower(), r.stdout + r.stderr  # -Xcheck:jni
    assert f"ran ArtifactData({tmp_path / 'assets' / 'gemm-cpu'}: model.so, model.params) on cpu" in r.stdout
    got = np.fromfile(tmp_path / "y.bin", "<f4").reshape(4, 32)
    (vm,) = HostModel(art).run({"a": x})
    (reference,) = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"a": x})
    np.testing.assert_allclose(got, vm, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


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
    assert "`tvmgen runtime build --platform android-arm64`" in e.value.hint
    assert binfmt.page_report(aarch64_native / "libtvmgen_jni.so").min_align == 16384


@pytest.fixture(scope="module")
def objects_artifact(tmp_path_factory, compiled) -> Path:
    """A Gemm model compiled for android-arm64 to objects only (no NDK used): model.tar, not model.so."""
    d = tmp_path_factory.mktemp("aar-objects")
    return compiled(
        save_onnx(single_op_models()["gemm"], d / "gemm.onnx"), "android-arm64", "cpu", name="gemm", objects_only=True
    )


def consumer_cmake_lines() -> str:
    """The lines docs/commands/aar.md tells an app to add to its CMakeLists.txt for a model compiled to objects:
    the test builds exactly those."""
    doc = (REPO / "docs" / "commands" / "aar.md").read_text()
    block = doc[doc.index("```cmake\n# app/src/main/cpp/CMakeLists.txt") + len("```cmake\n") :]
    return block[: block.index("```")]


def defined_symbols(*files: Path, dynamic: bool) -> set[str]:
    r = subprocess.run(
        ["aarch64-linux-gnu-nm", *(["-D"] if dynamic else []), "--defined-only", "--extern-only", *files],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.split()[-1] for line in r.stdout.splitlines() if len(line.split()) == 3}


def test_objects_artifact_is_linked_by_the_consuming_app_cmake(
    objects_artifact, android_artifact, aarch64_native, aarch64_runtime, tmp_path
):
    """An AAR holding a model compiled to objects (beside one linked by tvmgen): the objects, the launcher's source
    and tvmgen-model.cmake in tvmgen/, the assets naming the library the app's CMake links. An app laid out as
    Android Studio lays it out, with the CMake lines docs/commands/aar.md gives, extracts them from the AAR and links
    the library with the linux-aarch64 cross toolchain standing in for the NDK: an aarch64 library of the name
    library.txt gives, 16 KB pages, exporting every symbol the objects define, no libstdc++ needed; loaded under
    qemu-aarch64 by the aarch64 runtime, it gives onnxruntime's outputs."""
    import tarfile

    import onnxruntime as ort

    from conftest import QEMU_AARCH64, run_native
    from tvmgen.android import project
    from tvmgen.compiler.targets import export
    from tvmgen.core import artifact

    for tool in ("cmake", "aarch64-linux-gnu-g++", "aarch64-linux-gnu-nm", "aarch64-linux-gnu-objdump"):
        require_tool(tool)
    app = tmp_path / "app"
    built = aar.build_aar(
        [android_artifact, objects_artifact],
        {"arm64-v8a": aarch64_native},
        app / "libs" / "model.aar",
        "org.example.gemm",
        require_android=False,
    )
    library = project.model_library_name(artifact.load(objects_artifact))
    target = library.removeprefix("lib").removesuffix(".so")
    assert built.models == ["softmax-cpu", "gemm-cpu"] and built.linked_by_app == {"gemm-cpu": target}
    assert built.libraries["gemm-cpu"] == library
    with tarfile.open(objects_artifact / "model.tar") as t:
        members = sorted(m.name for m in t.getmembers() if m.isfile())
    assert export.parallel_pool_source().name in members and any(n.endswith(".o") for n in members)
    names = set(built.entries)
    # the objects model: its objects and sources for the app's CMake, none of its libraries among jni/, the
    # linked one's library there as before; the runtime libraries for both
    assert {n for n in names if n.startswith("tvmgen/")} == {
        aar.CMAKE_FILE,
        "tvmgen/model_library.cmake",
        *(f"tvmgen/models/gemm-cpu/{m}" for m in members),
    }
    assert f"jni/arm64-v8a/{library}" not in names and f"jni/arm64-v8a/{built.libraries['softmax-cpu']}" in names
    assert {f"jni/arm64-v8a/{n}" for n in aar.RUNTIME_LIBRARIES} <= names
    with zipfile.ZipFile(built.path) as z:
        assert z.read("assets/tvmgen/gemm-cpu/library.txt") == f"{library}\n".encode()
        shipped = json.loads(z.read("assets/tvmgen/gemm-cpu/manifest.json"))
        assert z.read("tvmgen/model_library.cmake") == project.model_library_cmake().read_bytes()
    assert "assets/tvmgen/gemm-cpu/model.tar" not in names
    assert shipped["export"]["kind"] == "shared" and "model.tar" not in shipped["files"]

    cpp = app / "src" / "main" / "cpp"
    cpp.mkdir(parents=True)
    (cpp / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.22.1)\nproject(consumer LANGUAGES CXX)\n" + consumer_cmake_lines()
    )
    build = tmp_path / "build"
    toolchain = REPO / "jni" / "cmake" / "aarch64-linux-gnu.cmake"
    r = subprocess.run(
        ["cmake", "-S", cpp, "-B", build, "-G", "Unix Makefiles", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run(["cmake", "--build", build, "-j2", "--target", target], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lib = build / library
    assert lib.is_file(), sorted(p.name for p in build.iterdir())
    assert binfmt.describe_file(lib) == ("elf", "aarch64")
    report = binfmt.page_report(lib)
    assert report.ok and report.min_align >= binfmt.ANDROID_PAGE_SIZE, report.summary()
    objects = sorted((build / "tvmgen-aar" / "tvmgen" / "models" / "gemm-cpu").glob("*.o"))
    wanted = defined_symbols(*objects, dynamic=False)
    exported = defined_symbols(lib, dynamic=True)
    assert wanted and wanted <= exported, sorted(wanted - exported)
    needed = subprocess.run(["aarch64-linux-gnu-objdump", "-p", lib], capture_output=True, text=True).stdout
    assert "libstdc++" not in needed, needed
    # a new AAR (its entries with the same fixed times) is extracted again and the library linked again from it
    linked_at = lib.stat().st_mtime_ns
    time.sleep(1)
    built.path.touch()
    r = subprocess.run(["cmake", "--build", build, "--target", target], capture_output=True, text=True)
    assert r.returncode == 0 and lib.stat().st_mtime_ns > linked_at, r.stdout[-3000:] + r.stderr[-3000:]

    # the library with the assets beside it, as the runtime sees an artifact: run under qemu
    loaded = tmp_path / "loaded"
    with zipfile.ZipFile(built.path) as z:
        for n in names:
            if n.startswith("assets/tvmgen/gemm-cpu/"):
                (loaded / n.removeprefix("assets/tvmgen/gemm-cpu/")).parent.mkdir(parents=True, exist_ok=True)
                (loaded / n.removeprefix("assets/tvmgen/gemm-cpu/")).write_bytes(z.read(n))
    shutil.copy(lib, loaded / shipped["export"]["library"])
    x = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    proc, outputs = run_native(aarch64_runtime, loaded, {"a": x}, tmp_path, launcher=QEMU_AARCH64)
    assert outputs is not None, proc.stderr
    onnx_path = save_onnx(single_op_models()["gemm"], tmp_path / "gemm.onnx")
    (reference,) = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"a": x})
    np.testing.assert_allclose(outputs[0], reference, rtol=1e-4, atol=1e-4)


def test_aar_command_names_what_the_app_links(
    objects_artifact, aarch64_native, tmp_path, tvmgen_inprocess, monkeypatch
):
    """`tvmgen aar` says which library the app's CMake links and from which file (its Linux runtime libraries let
    through as the Python API's test-only switch does)."""
    import functools

    from tvmgen.android import project
    from tvmgen.core import artifact

    monkeypatch.setattr(aar, "build_aar", functools.partial(aar.build_aar, require_android=False))
    r = tvmgen_inprocess("aar", objects_artifact, "--native", f"arm64-v8a={aarch64_native}", "-o", tmp_path / "g.aar")
    assert r.returncode == 0, r.stderr
    library = project.model_library_name(artifact.load(objects_artifact))
    assert f"assets/tvmgen/gemm-cpu/ (load: ArtifactData.readPackaged), its library {library}" in r.output
    target = library.removeprefix("lib").removesuffix(".so")
    assert f"linked by the app's CMake: include tvmgen/tvmgen-model.cmake from the AAR (target {target})" in r.output


def test_objects_artifact_needs_the_runtime_for_its_abi(objects_artifact, aarch64_native, tmp_path):
    """The model's calls into TVM resolve in the AAR's runtime libraries: an AAR without them for the artifact's
    ABI is refused, naming the option, and nothing is written."""
    with pytest.raises(InputError, match=r"built for arm64-v8a, and no --native arm64-v8a=DIR was given"):
        aar.build_aar(
            [objects_artifact], {"x86_64": aarch64_native}, tmp_path / "o.aar", "org.example.m", require_android=False
        )
    assert not (tmp_path / "o.aar").exists()


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
