"""libtvmgen_vulkan's own work on Mesa's lavapipe: barriers only between dependent dispatches and
descriptor sets reused across runs, the pipeline cache across processes, tvmgen-run --prepare and
--profile (Vulkan timestamps), and benchmarks/gpu.py's report of its Vulkan rows.

Needs glslang-tools and spirv-tools to compile and validate, and the Vulkan loader with a driver to run
(libvulkan1, mesa-vulkan-drivers; the runtime build needs libvulkan-dev): all installed by
scripts/bootstrap.sh. Without them the tests are skipped (failed under CI=true).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import run_native
from vulkan_support import kernels_of, module_fixtures
from vulkan_support import vk_commands as _vk_commands

# whole models compiled for Vulkan and the host runtime built with CMake
pytestmark = pytest.mark.slow


tools, arts, runtime = module_fixtures()


def _branches_model(path):
    """An ONNX model with two independent convolutions of one input (two outputs), then one that reads
    both: the runtime needs no barrier between the first two dispatches, one before the third."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(1)

    def weight(name, shape):
        return h.make_tensor(name, T.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel().tolist())

    nodes = [
        h.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        h.make_node("Conv", ["x", "w2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        h.make_node("Concat", ["a", "b"], ["ab"], axis=1),
        h.make_node("Conv", ["ab", "w3"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = h.make_graph(
        nodes,
        "branches",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 16, 16])],
        [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in (("a", [1, 8, 16, 16]), ("b", [1, 8, 16, 16]))]
        + [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 16, 16])],
        initializer=[weight("w1", [8, 4, 3, 3]), weight("w2", [8, 4, 3, 3]), weight("w3", [4, 16, 1, 1])],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


def test_barriers_only_between_dependent_dispatches(tools, runtime, compiled, tmp_path):
    """A barrier only before a dispatch that reads or writes what an earlier one since the last barrier
    wrote (or writes what it read); descriptor sets written once per kernel and buffers, reused by later
    runs. The outputs equal those with a barrier before every dispatch and no reuse (the former runtime,
    TVMGEN_VULKAN_BARRIERS=all, TVMGEN_VULKAN_SET_CACHE=0) and match the CPU build."""
    model = _branches_model(tmp_path / "branches.onnx")
    arts = {d: compiled(model, "host", d, name="branches") for d in ("cpu", "vulkan")}
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype(np.float32)}
    # every run recorded by the VM's launches (recorded runs would replay runs 4-11 without any)
    log = {"TVMGEN_VULKAN_LOG": "1", "TVMGEN_VULKAN_REPLAY": "0"}
    proc, got = run_native(runtime, arts["vulkan"], inputs, tmp_path, env=log, tag="vk", repeat=10)
    assert got is not None, proc.stderr[-2000:]
    new = _vk_commands(proc.stderr)
    old_env = {**log, "TVMGEN_VULKAN_BARRIERS": "all", "TVMGEN_VULKAN_SET_CACHE": "0"}
    proc, old = run_native(runtime, arts["vulkan"], inputs, tmp_path, env=old_env, tag="vk-old", repeat=10)
    assert old is not None, proc.stderr[-2000:]
    before = _vk_commands(proc.stderr)
    _, want = run_native(runtime, arts["cpu"], inputs, tmp_path, tag="cpu")
    for g, o, w in zip(got, old, want):
        np.testing.assert_array_equal(g, o)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    print(f"commands: {new}; with a barrier before every dispatch: {before}", file=sys.stderr)
    assert new["dispatches"] == before["dispatches"] > 0
    assert before["barriers"] >= before["dispatches"]
    assert new["barriers"] < before["barriers"]  # the second convolution needs none
    # the first runs write descriptor sets (the VM's pooled buffers change places for a few runs), the
    # later ones reuse them: of 11 runs (a warm-up and 10 timed), most write none
    assert before["descriptor_sets_written"] == before["dispatches"] and before["descriptor_sets_reused"] == 0
    assert new["descriptor_sets_written"] + new["descriptor_sets_reused"] == new["dispatches"]
    assert new["descriptor_sets_reused"] > 2 * new["descriptor_sets_written"]
    # where the host's time went (microseconds over the process): recording the dispatches, submitting
    # them, waiting for the device when results were needed (at least once a run), resetting after it
    host = new["host_us"]
    assert set(host) == {"recording", "submitting", "waiting", "resetting", "waits"}, host
    assert host["waits"] >= 11 and host["recording"] > 0 and min(host.values()) >= 0


def _vk_stats(stderr: str) -> dict:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("tvmgen-vulkan: cache {"))
    return json.loads(line.removeprefix("tvmgen-vulkan: cache "))


def test_pipeline_cache_persists_across_processes(arts, runtime, tmp_path):
    """The first process builds every pipeline and writes the cache; the next loads it; a corrupt entry is
    deleted and rebuilt, the outputs unchanged."""
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs

    art = arts[("tiny", "vulkan")]
    n = len(kernels_of(art))
    cache = tmp_path / "vk-cache"
    env = {"TVMGEN_VULKAN_CACHE_DIR": str(cache), "TVMGEN_VULKAN_LOG": "1"}
    inputs = random_inputs(artifact.load(art).inputs, seed=0)
    proc, first = run_native(runtime, art, inputs, tmp_path, env=env, tag="cold")
    assert first is not None, proc.stderr[-2000:]
    cold = _vk_stats(proc.stderr)
    assert (cold["misses"], cold["hits"], cold["source_builds"], cold["writes"]) == (1, 0, n, 1), cold
    entries = list(cache.glob("*.vkpc"))
    assert len(entries) == 1
    proc, second = run_native(runtime, art, inputs, tmp_path, env=env, tag="warm")
    warm = _vk_stats(proc.stderr)
    assert (warm["hits"], warm["pipelines_cached"], warm["source_builds"], warm["writes"]) == (1, n, 0, 0), warm
    data = bytearray(entries[0].read_bytes())
    data[-5] ^= 0xFF  # the checksum no longer matches
    entries[0].write_bytes(bytes(data))
    proc, third = run_native(runtime, art, inputs, tmp_path, env=env, tag="corrupt")
    again = _vk_stats(proc.stderr)
    assert "is unusable (checksum mismatch): rebuilt" in proc.stderr
    assert (again["corrupt"], again["misses"], again["source_builds"], again["writes"]) == (1, 1, n, 1), again
    for a, b, c in zip(first, second, third):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_prepare_creates_every_pipeline_before_the_first_run(arts, runtime, tmp_path):
    """tvmgen-run --prepare (Model::Prepare) on Vulkan: every pipeline created, built without a cache entry
    and from it in the next process."""
    art = arts[("tiny", "vulkan")]
    n = len(kernels_of(art))
    env = {"TVMGEN_VULKAN_CACHE_DIR": str(tmp_path / "vk-cache")}
    seen = []
    for tag in ("cold", "warm"):
        timings = tmp_path / f"{tag}.json"
        proc, got = run_native(runtime, art, {}, tmp_path, "--prepare", "--timings", str(timings), env=env, tag=tag)
        assert got is not None, proc.stderr[-2000:]
        seen.append(json.loads(timings.read_text())["prepare"])
    assert [(p["kernels"], p["built"], p["cached"]) for p in seen] == [(n, n, 0), (n, 0, n)], seen


def test_profile_times_kernels_with_timestamps(arts, runtime, tmp_path):
    """tvmgen-run --profile on Vulkan: every kernel's time from the device's timestamp queries."""
    art = arts[("tiny", "vulkan")]
    out = tmp_path / "profile.json"
    proc, got = run_native(runtime, art, {}, tmp_path, "--profile", str(out), repeat=2)
    assert got is not None, proc.stderr[-2000:]
    p = json.loads(out.read_text())["profile"]
    assert p["clock"] == "device (Vulkan timestamps)"
    names = {k["name"] for k in kernels_of(art)}
    launched = p["vulkan_kernels"]
    assert set(launched) <= names and len(launched) >= len(names) - 1, (sorted(launched), sorted(names))
    assert all(c[0] == 2 and c[1] > 0 for c in launched.values()), launched
    assert sum(c[1] for c in p["counts"].values()) == sum(c[1] for c in launched.values())


def test_gpu_bench_vulkan_rows():
    """benchmarks/gpu.py --vulkan: vulkan rows, pipelines built / cached in the kernels column, the Vulkan
    device in the header and the vulkan / opencl and vulkan / cuda ratios below the table, and the steady
    run with recorded runs against the VM every run."""
    import argparse

    from helpers import load_benchmark

    gpu = load_benchmark("gpu")
    args = argparse.Namespace(
        precision="fp32", gpu_family="generic", cuda=True, vulkan=True, no_cpu=True, repeat=1, runs=1
    )
    assert [v["id"] for v in gpu.variants(args)] == ["opencl", "cuda", "vulkan"]

    def start(ms, cache=None, device=None):
        t = {"first_run_ms": ms, "init_ms": 1.0, "cache": cache}
        return {**t, "vulkan_device": device} if device else t

    def row(vid, steady, cold, warm):
        timing = {"median": steady}
        return {
            "model": "m",
            "id": vid,
            "device": vid,
            "family": None,
            "precision": "fp32",
            "cold": [cold],
            "warm": [warm],
            "steady": {"run_ms": timing, "copy_in_ms": timing, "copy_out_ms": timing},
            "max_abs_error": 1e-8,
        }

    vk_cold = {"hits": 0, "misses": 1, "source_builds": 33, "pipelines_cached": 0}
    vk_warm = {"hits": 1, "misses": 0, "source_builds": 0, "pipelines_cached": 33}
    device = "device NVIDIA H200 (Vulkan 1.4.312, driver 1), loader libvulkan.so.1"
    results = [
        row("opencl", 0.4, start(2000.0, {"hits": 0, "misses": 5, "source_builds": 5}), start(1.0, {"hits": 5})),
        row("cuda", 0.8, start(1.5), start(1.4)),
        row("vulkan", 0.44, start(250.0, vk_cold, device), start(5.0, vk_warm, device)),
    ]
    # the vulkan row's steady runs replayed (recorded runs), and the same without them
    results[2]["steady"]["vulkan_commands"] = {"recorded_runs": {"captured": 1, "replays": 8, "last_failure": ""}}
    results[2]["steady_vm"] = {"run_ms": {"median": 0.55}}
    text = gpu.report({"models": [{"name": "m"}], "created": "now"}, results, args)
    assert (
        "m fp32: vulkan steady 0.440 ms (8 runs replayed); the VM every run (TVMGEN_VULKAN_REPLAY=0) 0.550 ms: " in text
    )
    assert "recorded / VM = 0.80x" in text
    assert f"Vulkan: {device}" in text
    vk_line = next(ln for ln in text.splitlines() if ln.startswith("m ") and " vulkan " in ln)
    assert "33 / 33" in vk_line and "50.0x" in vk_line, vk_line
    assert "m fp32: vulkan / opencl steady = 1.10x" in text and "m fp32: vulkan / cuda steady = 0.55x" in text
