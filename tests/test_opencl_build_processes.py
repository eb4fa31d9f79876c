"""The GPU's cold start (issue 32): a cold start's OpenCL programs built by helper processes (tvmgen-clbuild).

Where the driver builds one program at a time per process (NVIDIA), libtvmgen_opencl starts helper processes
that build the programs missing from the kernel cache and store them there; the model's process loads them as
cache hits. PoCL builds in parallel anyway, so these tests force the path on (TVMGEN_OPENCL_BUILD_PROCESSES=2,
tiny programs with TVMGEN_OPENCL_GROUP_KB=1) and check, with the runtime's counters: helpers built programs,
the process loaded them from the cache, the outputs equal the in-process build's, a warm start starts no
helper, a helper that fails or cannot start is said (one line) and its program built in-process, a disabled
cache uses a private directory that is removed afterwards. Skipped without an OpenCL platform (failed under
CI=true).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import run_native, save_onnx, single_op_models
from tvmgen.core.model import random_inputs

pytestmark = pytest.mark.slow

STATS = re.compile(r"tvmgen-opencl: cache (\{.*\})")
HELPERS = {"TVMGEN_OPENCL_BUILD_PROCESSES": "2", "TVMGEN_OPENCL_GROUP_KB": "1"}


@pytest.fixture(scope="module")
def art(tmp_path_factory, compiled) -> Path:
    """conv3x3 for the adreno family (texture layouts: several kernels); the same as test_opencl.py's."""
    d = tmp_path_factory.mktemp("helper-arts")
    path = save_onnx(single_op_models()["conv3x3"], d / "conv3x3.onnx")
    return compiled(path, "host", "opencl", name="conv3x3", gpu_family="adreno")


def start(runtime, art, tmp_path, inputs, cache: Path | str, tag: str, env: dict):
    """tvmgen-run --prepare in a new process (TVMGEN_OPENCL_LOG=1, TMPDIR of its own): (outputs, cache counters,
    prepare JSON, stderr, TMPDIR)."""
    tmp = tmp_path / f"tmp-{tag}"
    tmp.mkdir()
    timings = tmp_path / f"{tag}.json"
    full = {"TVMGEN_OPENCL_LOG": "1", "TVMGEN_OPENCL_CACHE_DIR": str(cache), "TMPDIR": str(tmp), **env}
    proc, outs = run_native(runtime, art, inputs, tmp_path, "--prepare", "--timings", str(timings), env=full, tag=tag)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(STATS.findall(proc.stderr)[-1])
    return outs, stats, json.loads(timings.read_text())["prepare"], proc.stderr, tmp


def test_helpers_build_the_cold_programs(ocl_runtime, opencl_lib, art, tmp_path):
    inputs = random_inputs(__import__("tvmgen.core.artifact", fromlist=["load"]).load(art).inputs, seed=5)
    n = (art / "model.so").read_bytes().count(b"// Function: ")
    assert n >= 3, n
    want, stats, prep, _, _ = start(
        ocl_runtime, art, tmp_path, inputs, tmp_path / "c0", "inproc", {"TVMGEN_OPENCL_BUILD_PROCESSES": "0"}
    )
    assert stats["helper_builds"] == 0, stats
    # cold: every program but the first (this process's while the helpers start) can be a helper's
    cache = tmp_path / "cache"
    got, stats, prep, err, tmp = start(ocl_runtime, art, tmp_path, inputs, cache, "cold", HELPERS)
    assert prep["programs"] == n and prep["kernels"] == n and prep["built"] == n, prep  # one kernel per program
    assert stats["helper_builds"] >= 1, (stats, err)
    assert stats["hits"] == stats["helper_builds"] and stats["source_builds"] == n - stats["helper_builds"], stats
    assert "built by a helper process, loaded from the cache" in err, err
    assert len(list(cache.glob("*.clbin"))) == n
    assert list(tmp.iterdir()) == [], "the helpers' temporary directory is left"
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # warm: all from the cache, no helper
    again, stats, prep, err, _ = start(ocl_runtime, art, tmp_path, inputs, cache, "warm", HELPERS)
    assert prep["cached"] == n and stats["helper_builds"] == 0 and stats["source_builds"] == 0, (stats, prep)
    assert "tvmgen-clbuild" not in err and "helper process" not in err, err
    for g, w in zip(again, want):
        np.testing.assert_array_equal(g, w)
    # the kernel cache off: the helpers write into a private directory, removed afterwards
    off, stats, prep, _, tmp = start(ocl_runtime, art, tmp_path, inputs, "", "off", HELPERS)
    assert stats["dir"] == "" and stats["helper_builds"] >= 1 and stats["writes"] == 0, stats
    assert list(tmp.iterdir()) == []
    for g, w in zip(off, want):
        np.testing.assert_array_equal(g, w)


def test_a_failing_or_missing_helper_is_said(ocl_runtime, opencl_lib, art, tmp_path):
    inputs = random_inputs(__import__("tvmgen.core.artifact", fromlist=["load"]).load(art).inputs, seed=5)
    want, *_ = start(
        ocl_runtime, art, tmp_path, inputs, tmp_path / "c0", "inproc", {"TVMGEN_OPENCL_BUILD_PROCESSES": "0"}
    )
    # a helper that claims the last program, then fails: that program is built here, and said
    bad = tmp_path / "bad-helper"
    bad.write_text(
        "#!/bin/sh\n"
        'for a; do last=$a; done\n: > "$last.claim"\necho ready\n'
        'echo "claim $(($# - 8))"\necho "bad-helper: failing on purpose" >&2\nexit 3\n'
    )
    bad.chmod(0o755)
    env = {**HELPERS, "TVMGEN_OPENCL_BUILD_PROCESSES": "1", "TVMGEN_OPENCL_CLBUILD": str(bad)}
    got, stats, prep, err, _ = start(ocl_runtime, art, tmp_path, inputs, tmp_path / "c1", "bad", env)
    assert re.search(
        r"the helper process \S*bad-helper for program \d+/\d+ \(1 kernels\) failed \(exit status 3\): "
        r"built it in this process",
        err,
    ), err
    assert stats["helper_builds"] == 0 and prep["built"] == prep["programs"], (stats, prep)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # no helper executable: said once, every program built here
    env = {**HELPERS, "TVMGEN_OPENCL_CLBUILD": str(tmp_path / "no-such-clbuild")}
    got, stats, prep, err, _ = start(ocl_runtime, art, tmp_path, inputs, tmp_path / "c2", "missing", env)
    assert err.count("cannot start") == 1 and "building every program in this process" in err, err
    assert stats["helper_builds"] == 0 and stats["source_builds"] == prep["programs"], (stats, prep)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
