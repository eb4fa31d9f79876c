"""The GPU's cold start (issue 32): a model's OpenCL kernels merged into few programs, prepared before its first run.

libtvmgen_opencl on PoCL (skipped without an OpenCL platform, failed under CI=true): merged programs (up to 8
kernels each by default) give the outputs of one program per kernel (TVMGEN_OPENCL_KERNELS_PER_PROGRAM=1, the
former build); `tvmgen-run
--prepare` (Model::Prepare) builds every kernel before the first run, which then builds or waits for nothing
(the runtime's counters, not timings); the next process loads the program from the kernel cache; the Java API's
Model.prepare() does the same over JNI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import run_native, save_onnx, single_op_models
from tvmgen.core.model import random_inputs

pytestmark = pytest.mark.slow

STATS = re.compile(r"tvmgen-opencl: cache (\{.*\})")


@pytest.fixture(scope="module")
def arts(tmp_path_factory, compiled) -> dict:
    """(name, flavour) -> artifact: two single-op models of several kernels, each also for the CPU (the
    reference). The same files and options as test_opencl.py's, so conftest's ``compiled`` builds them once."""
    d = tmp_path_factory.mktemp("prepare-arts")
    out = {}
    for name, flavour in (("two_outputs", "opencl"), ("conv3x3", "adreno")):
        path = save_onnx(single_op_models()[name], d / f"{name}.onnx")
        out[(name, "cpu")] = compiled(path, "host", "cpu", name=name)
        family = {"gpu_family": "adreno"} if flavour == "adreno" else {}
        out[(name, flavour)] = compiled(path, "host", "opencl", name=name, **family)
    return out


def kernel_count(art: Path) -> int:
    """The OpenCL kernels in the artifact's library (TVM marks each with a "// Function: NAME" line)."""
    return (art / "model.so").read_bytes().count(b"// Function: ")


def run(runtime, art, tmp_path, inputs, cache: Path, tag: str, *extra, env=None):
    """tvmgen-run (new process, TVMGEN_OPENCL_LOG=1) with the kernel cache ``cache``: (outputs, cache counters or
    None, timings JSON)."""
    timings = tmp_path / f"{tag}.json"
    full_env = {"TVMGEN_OPENCL_LOG": "1", "TVMGEN_OPENCL_CACHE_DIR": str(cache), **(env or {})}
    proc, outs = run_native(runtime, art, inputs, tmp_path, *extra, "--timings", str(timings), env=full_env, tag=tag)
    assert proc.returncode == 0, proc.stderr
    m = STATS.search(proc.stderr)  # none when libtvmgen_opencl is not loaded (a CPU model)
    return outs, json.loads(m.group(1)) if m else None, json.loads(timings.read_text())


def cpu_reference(runtime, arts, name, tmp_path, inputs):
    proc, want = run_native(runtime, arts[(name, "cpu")], inputs, tmp_path, tag="cpu")
    assert proc.returncode == 0, proc.stderr
    return want


def inputs_of(art: Path) -> dict:
    from tvmgen.core import artifact

    return random_inputs(artifact.load(art).inputs, seed=11)


def test_prepare_builds_every_kernel_before_the_first_run(ocl_runtime, opencl_lib, arts, tmp_path):
    art = arts[("two_outputs", "opencl")]
    n = kernel_count(art)
    assert n >= 2
    inputs = inputs_of(art)
    want = cpu_reference(ocl_runtime, arts, "two_outputs", tmp_path, inputs)
    cache = tmp_path / "cache"
    got, stats, t = run(ocl_runtime, art, tmp_path, inputs, cache, "cold", "--prepare")
    assert t["prepare"] == {"programs": 1, "kernels": n, "built": 1, "cached": 0, "ms": t["prepare"]["ms"]}, t
    # every build happened in Prepare: the first run found each program ready
    assert stats["source_builds"] == 1 and stats["launch_waits"] == 0 and stats["writes"] == 1, stats
    assert len(list(cache.glob("*.clbin"))) == 1  # one cached binary for the whole model
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)
    # the next process: the program from the kernel cache, nothing compiled
    again, stats, t = run(ocl_runtime, art, tmp_path, inputs, cache, "warm", "--prepare")
    assert t["prepare"]["built"] == 0 and t["prepare"]["cached"] == 1, t
    assert stats["hits"] == 1 and stats["misses"] == 0 and stats["source_builds"] == 0, stats
    assert stats["launch_waits"] == 0, stats
    for g, w in zip(again, got):
        np.testing.assert_array_equal(g, w)
    # a CPU model has nothing to prepare
    _, _, t = run(ocl_runtime, arts[("two_outputs", "cpu")], tmp_path, inputs, cache, "cpu-prepared", "--prepare")
    assert t["prepare"] == {"programs": 0, "kernels": 0, "built": 0, "cached": 0, "ms": t["prepare"]["ms"]}, t


@pytest.mark.parametrize("name,flavour", [("two_outputs", "opencl"), ("conv3x3", "adreno")])
def test_merged_program_matches_one_per_kernel(ocl_runtime, opencl_lib, arts, tmp_path, name, flavour):
    """The merged source (each kernel's helpers once: the texture build's image macros too) computes what the
    kernels built one by one compute."""
    art = arts[(name, flavour)]
    n = kernel_count(art)
    inputs = inputs_of(art)
    want = cpu_reference(ocl_runtime, arts, name, tmp_path, inputs)
    one, _, t1 = run(ocl_runtime, art, tmp_path, inputs, tmp_path / "one", "one", "--prepare")
    assert t1["prepare"]["programs"] == 1 and t1["prepare"]["kernels"] == n, t1
    each, _, tn = run(
        ocl_runtime,
        art,
        tmp_path,
        inputs,
        tmp_path / "each",
        "each",
        "--prepare",
        env={"TVMGEN_OPENCL_KERNELS_PER_PROGRAM": "1"},
    )
    assert tn["prepare"]["programs"] == n and tn["prepare"]["kernels"] == n, tn
    for a, b, w in zip(one, each, want):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, w, atol=1e-4, rtol=0)


def test_java_prepare(java_build, ocl_runtime, opencl_lib, arts, tmp_path):
    """Model.prepare() over JNI (tests/java/PrepareCheck.java): the OpenCL model's kernels built before its first
    run, the stats kept for a second call, nothing to do on the CPU; the next JVM reads the kernel cache."""
    import shutil

    from tvmgen.runtime.runner import HostModel

    art, cpu = arts[("two_outputs", "opencl")], arts[("two_outputs", "cpu")]
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "TVMGEN_OPENCL_LOG": "1",
        "TVMGEN_OPENCL_CACHE_DIR": str(cache),
        # PoCL's LLVM installs signal handlers in the JVM's process: chained through the JDK's libjsig, as the
        # JVM asks ("Consider using jsig library"), or -Xcheck:jni reports them
        "LD_PRELOAD": str(Path(shutil.which("java") or "java").resolve().parent.parent / "lib" / "libjsig.so"),
        # libtvmgen_opencl: the JNI build has none of its own
        "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(ocl_runtime / "lib"), os.environ.get("LD_LIBRARY_PATH")])),
    }

    def check(tag):
        out = tmp_path / f"{tag}.bin"
        cmd = ["java", "-Xcheck:jni", f"-Djava.library.path={java_build['dir']}", "-cp", java_build["classpath"]]
        p = subprocess.run(
            [*cmd, "PrepareCheck", str(art), str(cpu), str(out)], capture_output=True, text=True, env=env, timeout=300
        )
        assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
        assert "warning" not in (p.stdout + p.stderr).lower(), f"-Xcheck:jni complained:\n{p.stdout}\n{p.stderr}"
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("prepared ")]
        assert lines, f"{p.stdout}\n{p.stderr}"
        prepared = json.loads(lines[0][len("prepared ") :])
        return prepared, json.loads(STATS.search(p.stderr).group(1)), np.fromfile(out, "<f4")

    prepared, stats, got = check("cold")
    n = kernel_count(art)
    assert prepared["programs"] == 1 and prepared["kernels"] == n and prepared["built"] == 1, prepared
    assert stats["launch_waits"] == 0 and stats["source_builds"] == 1, stats
    model = HostModel(cpu)  # PrepareCheck's inputs: sin(0.37 i) in each
    x = {
        i.name: np.sin(np.arange(int(np.prod(i.shape))) * 0.37).astype(np.float32).reshape(i.shape)
        for i in model.manifest.inputs
    }
    np.testing.assert_allclose(got, np.asarray(model.run(x)[0]).ravel(), atol=1e-4, rtol=0)
    prepared, stats, _ = check("warm")
    assert prepared["built"] == 0 and prepared["cached"] == 1 and stats["hits"] == 1, (prepared, stats)
