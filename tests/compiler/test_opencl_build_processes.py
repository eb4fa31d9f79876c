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
    # a cold start (no record in the cache that this plan was built) starts its helpers before this process has
    # found the platform and device (NVIDIA: ~0.3 s), as TVMGEN_OPENCL_HELPERS_EARLY=0 does not
    early = err.index("helper processes started before the device was found")
    assert early < err.index("platform and device found"), err
    # the log's timeline: each program's time and when it was ready, from the start of the module's builds
    done_at = [float(t) for t in re.findall(r"program \d+/\d+ \(1 kernels\) .* in [\d.]+ ms \(at ([\d.]+) ms\)", err)]
    assert len(done_at) == n and all(t > 0 for t in done_at), err
    assert len(list(cache.glob("*.clbin"))) == n
    assert list(tmp.iterdir()) == [], "the helpers' temporary directory is left"
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # at most TVMGEN_OPENCL_MAX_PROGRAMS programs (default 12): a heavier model gets larger programs, not more
    capped, stats, prep, err, _ = start(
        ocl_runtime, art, tmp_path, inputs, tmp_path / "c-cap", "cap", {**HELPERS, "TVMGEN_OPENCL_MAX_PROGRAMS": "3"}
    )
    assert n > 3 and prep["programs"] == 3 and prep["kernels"] == n, prep
    assert f"{n} kernels, " in err and "in 3 programs, built by helper processes" in err, err
    for g, w in zip(capped, want):
        np.testing.assert_array_equal(g, w)
    # warm: all from the cache, no helper
    again, stats, prep, err, _ = start(ocl_runtime, art, tmp_path, inputs, cache, "warm", HELPERS)
    assert prep["cached"] == n and stats["helper_builds"] == 0 and stats["source_builds"] == 0, (stats, prep)
    assert "tvmgen-clbuild" not in err and "helper process" not in err, err
    for g, w in zip(again, want):
        np.testing.assert_array_equal(g, w)
    # the record of a built plan, removed: a start with every program cached starts its helpers early, finds
    # nothing missing once it knows the device, stops them and writes the record again
    (marker,) = cache.glob("plan-*.built")
    marker.unlink()
    again, stats, prep, err, _ = start(ocl_runtime, art, tmp_path, inputs, cache, "unmarked", HELPERS)
    assert "helper processes started before the device was found" in err, err
    assert "the helper processes started early were stopped (the programs are in the kernel cache)" in err, err
    assert prep["cached"] == n and stats["helper_builds"] == 0 and stats["source_builds"] == 0, (stats, prep)
    assert marker.is_file()
    for g, w in zip(again, want):
        np.testing.assert_array_equal(g, w)
    late, stats, _, err, _ = start(
        ocl_runtime, art, tmp_path, inputs, tmp_path / "c-late", "late", {**HELPERS, "TVMGEN_OPENCL_HELPERS_EARLY": "0"}
    )
    assert "started before the device" not in err and stats["helper_builds"] >= 1, (stats, err)
    assert err.index("platform and device found") < err.index("helper processes started (at"), err
    for g, w in zip(late, want):
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


def test_helpers_open_the_device_one_after_the_other(ocl_runtime, opencl_lib, tmp_path):
    """tvmgen-clbuild --after FILE opens the device (and builds) only once FILE exists, then creates its
    --ready-file: libtvmgen_opencl chains its helpers so (NVIDIA makes the contexts of processes that open the
    device together all at once). A missing predecessor delays it by at most 3 s."""
    import subprocess
    import time

    exe = ocl_runtime / "bin" / "tvmgen-clbuild"
    src = tmp_path / "p0.cl"
    src.write_text("__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n")
    after, ready, cache = tmp_path / "ready-before", tmp_path / "ready-mine", tmp_path / "cache"
    cmd = [exe, "--cache-dir", cache, "--device", "0", "--options", "", "--after", after, "--ready-file", ready, src]
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)
    assert proc.poll() is None and not ready.exists(), "it opened the device before its predecessor had"
    after.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert ready.is_file() and out.split() == ["ready", "claim", "0", "done", "0"], (out, err)
    assert len(list(cache.glob("*.clbin"))) == 1
    # the predecessor never opens its device (it failed): this one goes on after 3 s
    src.with_suffix(".cl.claim").unlink()
    cmd[cmd.index(after)] = tmp_path / "never"
    t0 = time.monotonic()
    proc = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "done 0" in proc.stdout, proc.stderr
    assert time.monotonic() - t0 >= 2.9
