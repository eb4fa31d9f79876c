"""`tvmgen aar`: the AAR's layout (each model's library among the native libraries, loaded in place), manifest,
consumer rules and classes.jar (Java 8 bytecode, compiled against by javac here and run on the host JVM with the
host JNI library), its libraries checked for the ABI, for Android (bionic) and for 16 KB pages.

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
    assert "ANDROID_ABI=arm64-v8a" in e.value.hint
    assert binfmt.page_report(aarch64_native / "libtvmgen_jni.so").min_align == 16384


def test_an_objects_artifact_is_sent_to_compile_again_not_in_a_loop(android_artifact, aarch64_native, tmp_path):
    """Linking an objects artifact by hand leaves its manifest at "objects", so the same refusal would come
    back: the fix is to compile it again with the NDK, and that command parses."""
    import json

    import click

    from tvmgen.cli import cli

    objects = tmp_path / "objects"
    shutil.copytree(android_artifact, objects)
    manifest = json.loads((objects / "manifest.json").read_text())
    manifest["export"].update(kind="objects", library="model.tar")
    (objects / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"holds model.tar \(objects\), not a linked model.so") as e:
        aar.build_aar(
            [objects], {"arm64-v8a": aarch64_native}, tmp_path / "o.aar", "org.example.m", require_android=False
        )
    fix = e.value.hint
    assert "tvmgen doctor --install" in fix and "link it" not in fix
    command = fix[fix.index("tvmgen compile") :].split()
    assert command[command.index("--platform") + 1] == "android-arm64"
    with click.Context(cli) as ctx:
        compile_cmd = cli.get_command(ctx, "compile")
        compile_cmd.make_context("compile", command[2:])  # every option it names exists


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
