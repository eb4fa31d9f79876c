"""tvmgen embed: the bundle an existing app adds (host: the runtime's libraries and tools, a CMake package a
separate project finds and links, the Java API from the bundle alone; android: the sources and the NDK
build command), and its refusals. A module of its own beside test_runtime.py, so that the suite's workers
can run the two side by side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import require_tool
from tvmgen.runtime.runner import HostModel

# the host bundle copies the session's runtime build, and builds and runs a CMake project against it
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mobilenet_host(builtin_onnx, compiled):
    """The built-in model compiled for the host (the session's shared build, conftest's ``compiled``)."""
    return compiled(builtin_onnx, "host", "cpu", name="mobilenet")


def cli(*args, cwd):
    import sys

    return subprocess.run(
        [sys.executable, "-m", "tvmgen", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, TVMGEN_LOG_DIR=str(cwd / "logs")),
    )


def test_embed_host_bundle_links_into_a_cmake_project(mobilenet_host, tmp_path):
    require_tool("cmake")
    bundle = tmp_path / "bundle"
    r = cli("embed", mobilenet_host, "--platform", "host", "-o", bundle, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for f in (
        "artifact/manifest.json",
        "lib/libtvmgen_runtime.so",
        "lib/libtvm_runtime.so",
        "bin/tvmgen-run",
        "include/tvmgen/runtime.h",
        "cmake/tvmgenConfig.cmake",
        "README.md",
    ):
        assert (bundle / f).is_file(), f
    readme = (bundle / "README.md").read_text()
    assert "find_package(tvmgen CONFIG REQUIRED PATHS <bundle>/cmake)" in readme and "input:1x3x224x224" in readme
    if shutil.which("javac"):  # the Java API from the bundle alone: its jar and its JNI libraries
        assert (bundle / "lib" / "libtvmgen_jni.so").is_file() and (bundle / "java" / "tvmgen.jar").is_file()
        java = subprocess.run(
            [
                "java",
                f"-Dtvmgen.library.path={bundle / 'lib'}",
                "-jar",
                bundle / "java" / "tvmgen.jar",
                bundle / "artifact",
                "--repeat",
                "2",
            ],
            capture_output=True,
            text=True,
        )
        assert java.returncode == 0, java.stderr
        assert '"runs": 3' in java.stdout or '"runs":3' in java.stdout.replace(" ", "")
    # an existing app: a CMake project that finds the package and runs the model
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(app CXX)\nset(CMAKE_CXX_STANDARD 17)\n"
        "find_package(tvmgen CONFIG REQUIRED)\nadd_executable(app main.cc)\n"
        "target_link_libraries(app PRIVATE tvmgen::runtime)\n"
    )
    (app / "main.cc").write_text(
        "#include <tvmgen/runtime.h>\n#include <cstdio>\n#include <vector>\n"
        "int main(int, char** argv) {\n  auto m = tvmgen::Model::Load(argv[1]);\n"
        "  std::vector<float> x(m->inputs()[0].nbytes / 4, 0.5f), y(m->outputs()[0].nbytes / 4);\n"
        '  m->SetInput("input", x.data(), x.size() * 4);\n  m->Run();\n  m->GetOutput(0, y.data(), y.size() * 4);\n'
        '  for (float v : y) std::printf("%.9g\\n", v);\n}\n'
    )
    subprocess.run(
        ["cmake", "-S", app, "-B", app / "b", f"-Dtvmgen_DIR={bundle / 'cmake'}"], check=True, capture_output=True
    )
    subprocess.run(["cmake", "--build", app / "b"], check=True, capture_output=True)
    out = subprocess.run([app / "b" / "app", bundle / "artifact"], capture_output=True, text=True, check=True)
    got = np.array([float(v) for v in out.stdout.split()], np.float32)
    want = HostModel(mobilenet_host).run({"input": np.full((1, 3, 224, 224), 0.5, np.float32)})[0]
    np.testing.assert_allclose(got, want.reshape(-1), atol=1e-6)


def test_embed_android_bundle_from_a_model(tmp_path):
    from tvmgen.frontends.builtin import materialize

    model = materialize("builtin:mobilenet", tmp_path)
    env_clear = dict.fromkeys(("TVM_NDK_CC", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "ANDROID_HOME"), "")
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "tvmgen", "embed", str(model), "--platform", "android-arm64", "-o", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **env_clear, "TVMGEN_LOG_DIR": str(tmp_path / "logs")},
    )
    assert r.returncode == 0, r.stderr
    b = tmp_path / "b"
    manifest = json.loads((b / "artifact" / "manifest.json").read_text())
    assert manifest["platform"] == "android-arm64" and manifest["export"]["kind"] == "objects"
    assert (b / "jni" / "CMakeLists.txt").is_file() and (b / "jni" / "src" / "runtime.cc").is_file()
    readme = (b / "README.md").read_text()
    assert "-DANDROID_ABI=arm64-v8a -DANDROID_PLATFORM=android-24 -DTVM_SOURCE_DIR=" in readme
    assert "externalNativeBuild" in readme
    assert "add_subdirectory(${_tvmgen_root}/jni" in (b / "cmake" / "tvmgenConfig.cmake").read_text()
    assert not (b / "lib").exists()  # nothing built for Android here


def test_embed_refuses_mismatched_artifact(mobilenet_host, tmp_path):
    r = cli("embed", mobilenet_host, "--platform", "linux-aarch64", "-o", tmp_path / "b", cwd=tmp_path)
    assert r.returncode == 2 and "compiled for host, the bundle is for linux-aarch64" in r.stderr
    assert not (tmp_path / "b").exists()
