"""The deploy app built and run off the phone: its native part built with the app's own CMake (against the
host runtime, and a model's objects with the aarch64 cross toolchain standing in for the NDK), its Java
compiled against the Android stubs and its activity run on this JVM."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, require_tool, save_onnx, single_op_models
from helpers import cmake_build, cmake_configure
from templates_support import compile_app_artifacts, compile_app_java, render
from tvmgen import frontends
from tvmgen.android import project as android_project
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS, app_devices
from tvmgen.core.errors import InputError
from tvmgen.reports import agreement


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The softmax model compiled for android-arm64 (objects only), for OpenCL and for the CPU."""
    return compile_app_artifacts(tmp_path_factory.mktemp("app-art"))


@pytest.fixture(scope="module")
def host_app(tmp_path_factory, artifacts):
    """An OpenCL deploy project whose CPU fallback asset is a host (x86_64/aarch64) artifact, its native
    part built on the host with the app's CMake (the same file Gradle's externalNativeBuild calls)."""
    require_tool("cmake")

    d = tmp_path_factory.mktemp("host-app")
    imported = frontends.load(save_onnx(single_op_models()["softmax"], d / "m.onnx"), [])
    model = {"name": "m", "source": str(d / "m.onnx")}  # the source lets the host run its reference
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), d / "host-cpu", True, model)
    out = render(d, {"opencl": artifacts["opencl"], "cpu": d / "host-cpu"})
    build = cmake_configure(out / "app/src/main/cpp", d / "build", "-DTVMGEN_BUILD_TOOLS=OFF")
    cmake_build(build)
    return {"project": out, "build": build, "host_artifact": d / "host-cpu"}


def test_model_library_packaged_as_native_library(host_app):
    """A linked artifact ships its library as one of the app's native libraries (jniLibs/<abi>/, the APK's
    lib/<abi>/), byte for byte what its manifest's sha256 describes, named in its assets; the rest stays there."""
    main = host_app["project"] / "app/src/main"
    manifest = json.loads((main / "assets/model-cpu/manifest.json").read_text())
    sha = manifest["files"]["model.so"]["sha256"]
    name = (main / "assets/model-cpu/library.txt").read_text()
    assert name == f"libtvmgen_model_m_cpu_{sha[:12]}.so\n"
    (lib,) = (main / "jniLibs").rglob("*.so")
    assert lib.relative_to(main / "jniLibs").as_posix() == f"{manifest['abi']}/{name.strip()}"
    assert hashlib.sha256(lib.read_bytes()).hexdigest() == sha
    shipped = {p.name for p in (main / "assets/model-cpu").iterdir()}
    assert shipped == {p.name for p in host_app["host_artifact"].iterdir()} - {"model.so"} | {"library.txt"}
    # the OpenCL artifact has objects only (no NDK here): linked by the app's CMake, nothing in jniLibs/ for it
    assert not (main / "assets/model-opencl/model.tar").exists() and (main / "cpp/models/model-opencl").is_dir()
    # an artifact whose library changed after compiling is refused, not packaged
    changed = host_app["project"].parent / "changed"
    shutil.copytree(host_app["host_artifact"], changed)
    with open(changed / "model.so", "ab") as f:
        f.write(b"\0")
    with pytest.raises(InputError, match="does not match the sha256"):
        android_project.package_model(changed)


def test_app_native_part_builds_on_the_host(host_app):
    """The app's CMake (the same file Gradle's externalNativeBuild calls) against the host runtime."""
    built = {p.name for p in host_app["build"].rglob("*.so")}
    assert {"libtvmgen_runtime.so", "libtvmgen_opencl.so"} <= built
    if shutil.which("javac"):
        assert {"libtvmgen_jni.so", "libtvmgen_jni_bridge.so"} <= built


def test_app_java_compiles_for_every_device(tmp_path, artifacts):
    """The activity of each variant (OpenCL with CPU fallback, CPU, NNAPI) compiles against the Java API."""
    for device in ("opencl", "cpu", "nnapi"):
        ctx = android_project.android_context("deploy", "org.example.app", "A", "m", app_devices(device), ["arm64-v8a"])
        out = tmp_path / device
        android_project.create_android_project(
            "deploy", out, ctx, dict.fromkeys(ctx["model_devices"], artifacts["cpu"])
        )
        src = (out / "app/src/main/java/org/example/app/MainActivity.java").read_text()
        assert '.putJson("memory", memory.toJson())' in src and 'getBooleanExtra("profile", false)' in src
        compile_app_java(out, "org.example.app", tmp_path / f"{device}-java")
    readme = (out / "README.md").read_text()
    for key in ("after_load_peak_bytes", "overall_peak_bytes", "--ez profile true", "kernels_median_ms"):
        assert key in readme, key


def run_app_on_host(host_app, tmp_path, native_libraries=True, scenario="start", jni=True, **extras) -> dict:
    """The rendered app's MainActivity on this JVM (ANDROID_STUBS), its native part the host build. The
    project's jniLibs/<abi>/ (the APK's lib/<abi>/) is on the dynamic linker's path (LD_LIBRARY_PATH), where
    an app's own native libraries are on Android, unless ``native_libraries`` is False; the JNI library on
    java.library.path unless ``jni`` is False. ``scenario``: the activity's lifecycle (TvmgenHostLauncher)."""
    require_tool("java")
    project = host_app["project"]
    classes = compile_app_java(project, "org.example.mobilenet", tmp_path)
    root = tmp_path / "device"
    shutil.copytree(project / "app/src/main/assets", root / "assets")
    jni_dir = next(host_app["build"].rglob("libtvmgen_jni.so")).parent if jni else tmp_path / "no-jni"
    env = dict(os.environ)
    if native_libraries:
        (abi_dir,) = (project / "app/src/main/jniLibs").iterdir()
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(abi_dir), env.get("LD_LIBRARY_PATH")]))
    props = [f"-Dextra.{k}={str(v).lower()}" for k, v in {"iterations": 3, "exit": True, **extras}.items()]
    r = subprocess.run(
        [
            "java",
            f"-Djava.library.path={jni_dir}",
            *props,
            "-cp",
            classes,
            "android.app.TvmgenHostLauncher",
            root,
            "org.example.mobilenet.MainActivity",
            scenario,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    results = json.loads((root / "external/tvmgen-results.json").read_text())
    return results, r.stdout


def test_app_results_have_memory_and_profile(host_app, tmp_path):
    """tvmgen-results.json from the real activity: the OpenCL (android-arm64) artifact cannot load here,
    so it falls back to the host CPU artifact; memory after load and overall; the profile when asked."""
    results, log = run_app_on_host(host_app, tmp_path / "plain")
    assert "error" not in results, results
    assert results["artifact"] == "model-cpu" and results["device"] == "cpu"
    # manifest from the assets in memory and the library by name from the native libraries (AndroidAssets):
    # nothing copied to the app's files
    files = tmp_path / "plain" / "device" / "files"
    assert not files.exists() or not any(files.iterdir()), sorted(files.rglob("*"))
    assert results["fallback"].startswith("model-opencl could not start: ")
    assert results["iterations"] == 3 and results["timings"]["runs"] == 3 + 2  # + the default warm-up
    mem = results["memory"]
    assert set(mem) == {
        "source",
        "before_load_bytes",
        "after_load_peak_bytes",
        "overall_peak_bytes",
        "rss_bytes",
        "model_after_load_bytes",
        "model_overall_bytes",
    }
    if os.path.exists("/proc/self/status"):
        assert mem["source"] == "/proc/self/status"
        assert mem["before_load_bytes"] > 0 and 0 < mem["after_load_peak_bytes"] <= mem["overall_peak_bytes"]
        assert 0 < mem["rss_bytes"] <= mem["overall_peak_bytes"]
        assert mem["model_overall_bytes"] == mem["overall_peak_bytes"] - mem["before_load_bytes"]
        assert "peak resident memory (VmHWM): after load " in log
    assert results["profile"] is None

    # every timed round (setInput, run, getOutput) one by one, with numpy's percentiles of them
    runs = results["runs_ms"]
    assert len(runs) == len(results["copy_in_runs_ms"]) == len(results["copy_out_runs_ms"]) == 3
    assert all(r > 0 for r in runs) and all(c > 0 for c in results["copy_in_runs_ms"] + results["copy_out_runs_ms"])
    for key, p in (("median_run_ms", 50), ("p90_run_ms", 90), ("p99_run_ms", 99), ("min_run_ms", 0)):
        assert results[key] == pytest.approx(np.percentile(runs, p)), key
    # a warm start: the same artifact loaded again in the process and run once
    warm = results["warm_start"]
    assert warm["runs"] == 1 and warm["first_run_ms"] > 0 and warm["load_ms"] > 0
    # the input the app ran, named so the host makes it again; the output whole
    assert results["inputs"] == [
        {"name": "a", "shape": [3, 10], "dtype": "float32", "fill": "pseudo-random", "seed": 42}
    ]
    (out,) = results["outputs"]
    assert out["name"] == "y" and len(out["values"]) == 30 and out["non_finite"] == 0
    assert np.asarray(out["values"]).reshape(3, 10).sum(axis=1) == pytest.approx([1, 1, 1], abs=1e-5)  # softmax rows
    # the host's reference (onnxruntime on the source model) on the same input agrees with the app's output
    assert agreement.check_app_results(results, host_app["project"] / "app/src/main/assets/model-cpu") is None
    (row,) = results["check"]
    assert row["compared"] == "all 30 values" and row["max_abs"] < 1e-5 and "onnxruntime" in results["reference"]
    # and the app run after a different input would not: the check sees it
    planted = {**results, "inputs": [{**results["inputs"][0], "seed": 7}]}
    assert agreement.check_app_results(planted, host_app["project"] / "app/src/main/assets/model-cpu") is None
    assert planted["check"][0]["max_abs"] > 1e-3

    results, log = run_app_on_host(host_app, tmp_path / "profiled", profile=True)
    assert "error" not in results, results
    p = results["profile"]
    assert p["runs"] == 3 and p["whole_run_ms"] > 0 and p["kernels_median_ms"] > 0
    kernels = [name for name in p["counts"] if not name.startswith(("vm.", "runtime."))]
    assert kernels and any("softmax" in k for k in kernels), p["counts"]
    assert all(p["counts"][k][0] % 3 == 0 for k in kernels)  # every kernel once (or n times) per profiled run
    assert "profile: 3 runs (device clock), whole run " in log
    assert results["timings"]["runs"] == 3 + 2  # profiling leaves the model's own run count alone


def test_app_loads_the_model_library_by_name(host_app, tmp_path):
    """The activity finds the model's library by name only where the app's native libraries are: without
    jniLibs/<abi>/ on the linker's path it has no copy of its own to fall back on, and says which library."""
    name = (host_app["project"] / "app/src/main/assets/model-cpu/library.txt").read_text().strip()
    results, log = run_app_on_host(host_app, tmp_path, native_libraries=False)
    # (the OpenCL artifact could not start first, so the CPU fallback's error is the app's)
    assert results["error"].startswith(f"cannot load the model library {name}: "), results
    assert "cannot open shared object file" in results["error"], results


def test_app_run_survives_rotation_and_stops_when_closed(host_app, tmp_path):
    """The run belongs to the process, not the screen: a rotation right after the start shows the same run
    (its lines so far, then the rest) and starts no second one, and the activity on screen then is the one that
    finishes; closing the activity for good cancels the run, which still writes results that say so."""
    results, log = run_app_on_host(host_app, tmp_path / "rotate", scenario="rotate")
    assert "error" not in results, results
    logged, screen = log.split("SCREEN:\n", 1)
    assert logged.count("tvmgen: Preparing the kernels ...") == 1, log  # one run, not one per activity
    # the second activity shows the whole run: the lines before it was made, and those after
    assert screen.startswith("Falling back to the CPU: model-opencl could not start: ")
    assert "mobilenet on cpu (model-cpu)\nPreparing the kernels ...\n" in screen
    assert "peak resident memory (VmHWM): after load " in screen

    results, log = run_app_on_host(host_app, tmp_path / "close", scenario="close", iterations=1000000)
    assert results["cancelled"] is True and results["error"] == "cancelled: the app was closed before the run finished"
    assert results["error_type"] == "CancellationException" and results["stage"] in (
        "starting",
        "loading the native library",
        "loading model-opencl",
        "loading model-cpu",
        "preparing the kernels",
        "running",
    )
    assert "runs_ms" not in results and results["model"] == "mobilenet"


def test_app_without_its_native_library_writes_why(host_app, tmp_path):
    """An UnsatisfiedLinkError (the JNI library missing, as when an APK lacks the phone's ABI) is no crash: the
    results file and the screen say which library and why."""
    results, log = run_app_on_host(host_app, tmp_path, jni=False)
    assert results["error_type"] == "UnsatisfiedLinkError" and results["stage"] == "loading the native library"
    assert results["error"].startswith("cannot load tvmgen's native library: ") and "tvmgen_jni" in results["error"]
    assert results["cancelled"] is False and results["fallback"] is None
    assert "Error (loading the native library): cannot load tvmgen's native library: " in log


def _defined_symbols(nm: str, *files: Path, dynamic: bool) -> set[str]:
    """The global symbols ``files`` define (``nm -D`` of a library's dynamic table, ``nm`` of objects)."""
    r = subprocess.run(
        [nm, *(["-D"] if dynamic else []), "--defined-only", "--extern-only", *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.split()[-1] for line in r.stdout.splitlines() if len(line.split()) == 3}


def test_objects_model_is_linked_by_the_app_cmake(tmp_path, artifacts):
    """A model compiled to objects only (no NDK where `tvmgen app` ran) is linked by the app's own CMake into
    the library its assets name: the objects and the launcher's source in src/main/cpp/models/, a target per
    model in Gradle's list, tvmgen's own link options. Built here with the linux-aarch64 cross toolchain standing
    in for the NDK: an aarch64 shared library, 16 KB pages, defining every symbol the objects define."""
    import tarfile

    from tvmgen.compiler.targets import export
    from tvmgen.core import binfmt, toolchains

    out = render(tmp_path, artifacts)
    main = out / "app/src/main"
    gradle = (out / "app/build.gradle").read_text()
    cmake = (main / "cpp/CMakeLists.txt").read_text()
    assert f"set(TVMGEN_MODEL_COMPILE_FLAGS {' '.join(export.POOL_FLAGS)})" in cmake
    assert f"-static-libstdc++ {' '.join(toolchains.ANDROID_LINK_FLAGS)}" in cmake
    names = {}
    for device in ("opencl", "cpu"):
        assets = main / f"assets/model-{device}"
        names[device] = (assets / "library.txt").read_text().strip()
        original = json.loads((artifacts[device] / "manifest.json").read_text())
        assert names[device] == android_project.model_library_name(android_project.artifact.load(artifacts[device]))
        target = names[device].removeprefix("lib").removesuffix(".so")
        assert f", '{target}'" in gradle and f"tvmgen_model_library({target} arm64-v8a aarch64 " in cmake
        # the assets describe the library the app links, which the runtime loads (it refuses an archive)
        shipped = json.loads((assets / "manifest.json").read_text())
        assert shipped["export"]["kind"] == "shared" and "model.tar" not in shipped["files"]
        assert {k: v for k, v in shipped.items() if k not in ("export", "files")} == {
            k: v for k, v in original.items() if k not in ("export", "files")
        }
        with tarfile.open(artifacts[device] / "model.tar") as t:
            members = sorted(m.name for m in t.getmembers() if m.isfile())
        assert export.parallel_pool_source().name in members
        assert sorted(p.name for p in (main / f"cpp/models/model-{device}").iterdir()) == members
    assert names["opencl"] != names["cpu"]

    for tool in ("cmake", "aarch64-linux-gnu-g++", "aarch64-linux-gnu-nm", "aarch64-linux-gnu-objdump"):
        require_tool(tool)
    build = tmp_path / "build"
    toolchain = REPO / "jni/cmake/aarch64-linux-gnu.cmake"
    r = subprocess.run(
        [
            "cmake",
            "-S",
            main / "cpp",
            "-B",
            build,
            "-G",
            "Unix Makefiles",
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
            "-DTVMGEN_MODELS_ONLY=ON",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cmake_build(build)
    for device, name in names.items():
        lib = build / name
        assert lib.is_file(), sorted(p.name for p in build.iterdir())
        assert binfmt.describe_file(lib) == ("elf", "aarch64")
        report = binfmt.page_report(lib)
        assert report.ok and report.min_align >= binfmt.ANDROID_PAGE_SIZE, report.summary()
        objects = sorted((main / f"cpp/models/model-{device}").glob("*.o"))
        wanted = _defined_symbols("aarch64-linux-gnu-nm", *objects, dynamic=False)
        exported = _defined_symbols("aarch64-linux-gnu-nm", lib, dynamic=True)
        assert wanted and wanted <= exported, sorted(wanted - exported)
        # the C++ runtime is inside (-static-libstdc++): a phone has no libstdc++ to find
        needed = subprocess.run(["aarch64-linux-gnu-objdump", "-p", lib], capture_output=True, text=True).stdout
        assert "libstdc++" not in needed, needed
