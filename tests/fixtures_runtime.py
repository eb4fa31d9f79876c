"""The device runtime and compiled artifacts the tests share: the runtime built once per session and
platform (host, linux-aarch64, OpenCL; the Java API over it), artifacts compiled once per session, tvmgen-run
on them, and skipping when a tool is missing. Registered by conftest.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


def unavailable(reason: str) -> None:
    """A tool a test needs is missing: skip with the reason printed; under CI=true fail instead,
    since scripts/bootstrap.sh installs every tool the tests use."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: scripts/bootstrap.sh should have installed it)")
    print(f"skipping: {reason}", file=sys.stderr)
    pytest.skip(reason)


def opencl_info(lib: Path) -> dict:
    """`tvmgen.opencl.info()` of the libtvmgen_opencl at ``lib`` (platform, devices with their fp16 and
    image support), read in a separate process; skips (fails under CI=true) when no OpenCL device is found."""
    import json

    code = (
        "import ctypes, sys, tvm; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); "
        "print(tvm.get_global_func('tvmgen.opencl.info')())"
    )
    from helpers import python_c  # here: helpers imports conftest, which imports this module

    proc = subprocess.run([*python_c(code), str(lib)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if not info["available"]:
        unavailable(
            f"no OpenCL platform here ({info.get('error', 'unknown')}); install PoCL: apt-get install pocl-opencl-icd"
        )
    return info


@pytest.fixture(scope="session")
def host_runtime() -> Path:
    """The host runtime (tvmgen-run, tvmgen-rpc-server, libtvmgen_runtime, libtvmgen_opencl) built from jni/
    with CMake once (runtime_build.cached_build: rebuilt when jni/'s sources or TVM's version change), shared
    by every module. Tests about building into a fresh directory build their own."""
    from tvmgen.runtime import runtime_build

    require_tool("cmake")
    return runtime_build.cached_build("host")


@pytest.fixture(scope="session")
def aarch64_runtime() -> Path:
    """The linux-aarch64 runtime (cross-compiled, run under qemu), built once like ``host_runtime``."""
    from tvmgen.runtime import runtime_build

    for tool in ("cmake", "aarch64-linux-gnu-g++", "qemu-aarch64"):
        require_tool(tool)
    return runtime_build.cached_build("linux-aarch64")


@pytest.fixture(scope="session")
def ocl_runtime(host_runtime) -> Path:
    """The host runtime, with its libtvmgen_opencl (the session's one build, see ``host_runtime``)."""
    assert (host_runtime / "lib" / "libtvmgen_opencl.so").is_file()
    return host_runtime


@pytest.fixture(scope="session")
def opencl_lib(ocl_runtime) -> Path:
    """libtvmgen_opencl, after checking (in a separate process) that it finds an OpenCL device."""
    lib = ocl_runtime / "lib" / "libtvmgen_opencl.so"
    opencl_info(lib)
    return lib


def _run_captured(cmd, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def java_build(tmp_path_factory, host_runtime) -> dict:
    """libtvmgen_jni.so + tvmgen.jar of the session's host runtime build (``host_runtime``: it has the Java
    API where CMake finds a JDK), and tests/java compiled against the jar once per run (pytest-xdist workers
    take turns, as ``compiled`` does); shared by the Java API's tests and the AAR's host run."""
    import platform
    import shutil

    from tvmgen.core.artifact import exclusive

    for tool in ("cmake", "javac", "java"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed: cannot build and test the Java API")
    lib_dir = host_runtime / "lib"
    lib, jar = lib_dir / "libtvmgen_jni.so", host_runtime / "share" / "java" / "tvmgen.jar"
    if not (lib.is_file() and jar.is_file()):
        unavailable(f"the host runtime build {host_runtime} has no Java API: CMake found no JDK (set JAVA_HOME)")
    base = tmp_path_factory.getbasetemp()
    classes = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "java-test-classes"
    with exclusive(classes.with_name("java-test-classes.lock")):
        if not (classes / "ModelCheck.class").is_file():  # not compiled by another worker of this run
            c = _run_captured(
                ["javac", "-cp", jar, "-d", classes, *sorted((Path(__file__).resolve().parent / "java").glob("*.java"))]
            )
            assert c.returncode == 0, f"javac failed:\n{c.stdout}\n{c.stderr}"
    assert (lib_dir / "libtvmgen_jni_bridge.so").is_file(), sorted(p.name for p in lib_dir.iterdir())
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64"):
        assert (lib_dir / "libtvmgen_jni_sigguard.so").is_file(), sorted(p.name for p in lib_dir.iterdir())
    return {"prefix": host_runtime, "dir": lib_dir, "lib": lib, "jar": jar, "classpath": f"{jar}{os.pathsep}{classes}"}


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """``compiled(model_path, platform="host", device="cpu", name=None, consts=None, inputs=None, state=None,
    **BuildOptions fields)`` (``consts``: --const values, name -> text; ``inputs``: --input values; ``state``:
    --state IN=OUT values): the artifact
    directory of the model compiled through tvmgen's one seam, ``pipeline.compile_model`` (manifest name
    ``name``, default the file's stem; its source, format and sha256 recorded as `tvmgen compile` records
    them, so --check and bench find the reference), once per session for each (sha256 of the model's bytes, options). Shared: a test that changes an
    artifact copies it first. Tests about compiling itself (its output, its errors) still compile."""
    from tvmgen.core.artifact import exclusive

    # One cache for the whole run: with pytest-xdist each worker has its own basetemp below the run's, and
    # the workers share the run's folder, taking turns (a lock per key) so a model is compiled once per run.
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "compiled"
    done: dict[str, Path] = {}

    def compile_once(
        model_path, platform="host", device="cpu", name=None, consts=None, inputs=None, state=None, **options
    ) -> Path:
        from tvmgen.compiler import pipeline
        from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget

        model_path = Path(model_path)
        plat = PLATFORMS[platform] if isinstance(platform, str) else platform
        name = name or model_path.stem
        digest = pipeline.model_digest
        fields = {k: digest(v) if isinstance(v, Path) else repr(v) for k, v in sorted(options.items())}
        key_text = json.dumps([digest(model_path), plat.name, device, name, consts or {}, inputs, fields])
        key_text += json.dumps(state) if state else ""  # --state pairs: the key of a model without them is unchanged
        key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
        if key not in done:
            out = root / key / name
            with exclusive(root / f"{key}.lock"):
                if not (out / "manifest.json").is_file():  # not compiled by another worker of this run
                    loaded = pipeline.load_model(model_path, root, inputs or (), consts=consts, state=state or ())
                    target = BuildTarget(plat, device, options.pop("gpu_family", "generic"))
                    pipeline.compile_model(loaded, target, out, info={"name": name}, **options)
            done[key] = out
        return done[key]

    return compile_once


def require_tool(name: str) -> None:
    import shutil

    if not shutil.which(name):
        unavailable(f"{name} is not installed (run scripts/bootstrap.sh)")


QEMU_AARCH64 = ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")  # runs the linux-aarch64 runtime here


def run_native(
    runtime: Path,
    artifact: Path,
    inputs: dict,
    tmp_path: Path,
    *extra: str,
    launcher: tuple | list = (),
    env: dict | None = None,
    tag: str = "out",
    repeat: int | None = 1,
):
    """tvmgen-run from ``runtime`` (an install prefix) on ``artifact`` with ``inputs`` (name -> array, saved
    as .npy), under ``launcher`` (e.g. QEMU_AARCH64) if given. Returns (the finished process, the outputs in
    the manifest's order, or None when it failed). ``repeat`` None: tvmgen-run's default."""
    from tvmgen.runtime.runner import output_file_name

    args = []
    for name, arr in inputs.items():
        p = tmp_path / f"in-{tag}-{name}.npy"
        np.save(p, arr)
        args += ["--input", f"{name}={p}"]
    outdir = tmp_path / tag
    outdir.mkdir(exist_ok=True)
    cmd = [*launcher, str(runtime / "bin" / "tvmgen-run"), str(artifact), *args, "-o", str(outdir)]
    cmd += [*(["--repeat", str(repeat)] if repeat else []), *extra]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env=None if env is None else {**os.environ, **env}
    )
    if proc.returncode != 0:
        return proc, None
    manifest = json.loads((Path(artifact) / "manifest.json").read_text())
    return proc, [np.load(outdir / output_file_name(o["name"])) for o in manifest["outputs"]]
