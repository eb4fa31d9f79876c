"""The slow-kernel guard (reports/slow_kernels.py): which kernels it flags, from profiles built here
from recorded counts (no timing is asserted), and a real profile of the built-in model run through
it by `tvmgen run --profile` and `compile --check`'s guard (whatever this machine's timings flag)."""

from __future__ import annotations

import json

import pytest

from tvmgen.reports import slow_kernels
from tvmgen.reports.machine_peaks import Peaks
from tvmgen.reports.profile import Profile, guard_host_model

RUNS = 10


def kernel(name, kind, gflops, ms, ops=None, weight_bytes=0):
    """A kernels.json entry and its profile counts: ``ms`` per run at ``gflops`` (one call a run)."""
    flops = gflops * 1e9 * ms / 1e3
    entry = {"name": name, "ops": ops or [kind], "kind": kind, "flops": flops, "calls": 1}
    const = [{"kernel": name, "arg": 1, "shape": [weight_bytes // 4], "dtype": "float32", "bytes": weight_bytes}]
    return entry, (const if weight_bytes else []), [RUNS, int(ms * 1e6 * RUNS)]


def profile(*kernels, medians_ms=None, device="cpu", clock="host", whole_run_ms=None):
    table = {"kernels": [k[0] for k in kernels], "constants": [c for k in kernels for c in k[1]]}
    counts = {k[0]["name"]: k[2] for k in kernels}
    whole = whole_run_ms or sum(c[1] for c in counts.values()) / 1e6 / RUNS
    medians = {n: ms * 1e6 for n, ms in (medians_ms or {}).items()}
    return Profile.from_counts(counts, RUNS, whole, table, device, clock, medians_ns=medians or None)


def flagged(p):
    return {k.name: k for k in p.slow_kernels()}


def test_a_convolution_far_below_the_others_is_flagged_with_its_cause():
    # issue 37's byte classifier: the unit-axis convolution outside the NHWC schedules beside scheduled ones
    p = profile(
        kernel("fused_conv2d_add_relu", "conv2d", 150.0, 0.4),
        kernel("fused_conv2d1_add1", "conv2d", 120.0, 0.3),
        kernel("fused_conv2d2_add2", "conv2d", 7.9, 5.0),
        kernel("fused_add3_relu1", "elementwise", 0.2, 0.5, ["add", "relu"]),
    )
    slow = flagged(p)
    assert set(slow) == {"fused_conv2d2_add2"}
    k = slow["fused_conv2d2_add2"]
    assert (k.reason, k.kind_best_name) == ("ratio", "fused_conv2d_add_relu")
    assert k.gflops == pytest.approx(7.9) and k.kind_best == pytest.approx(150.0)
    line = k.line()
    for text in ("fused_conv2d2_add2", "7.9 GFLOP/s", "19x below", "150.0 GFLOP/s", "NHWC", "--profile --json"):
        assert text in line, (text, line)
    assert "slow kernel fused_conv2d2_add2" in p.table()
    out = json.loads(json.dumps(p.to_json()))["slow_kernels"]
    assert [(s["name"], s["reason"]) for s in out] == [("fused_conv2d2_add2", "ratio")]


def test_a_libm_epilogue_is_named_as_the_likely_cause():
    # the text recognizer's convolutions with an Erf GELU computed per element
    ops = ["conv2d", "add", "multiply", "erf", "add", "multiply", "multiply"]
    p = profile(
        kernel("fused_conv2d_add_multiply_erf", "conv2d", 0.3, 2.0, ops),
        kernel("fused_conv2d1_add1", "conv2d", 150.0, 0.5),
    )
    k = flagged(p)["fused_conv2d_add_multiply_erf"]
    assert "its erf computed by a libm call per element" in k.line()


def test_small_noisy_memory_bound_and_elementwise_kernels_are_not_flagged():
    p = profile(
        kernel("fused_conv2d_add", "conv2d", 150.0, 1.0),
        kernel("fused_conv2d1", "conv2d", 3.0, 0.01),  # 10 us: call overhead, never flagged
        kernel("fused_conv2d2", "conv2d", 100.0, 0.5),  # one run 40x slower: its mean drops, its median not
        # a matrix-vector product at memory speed: 0.5 FLOP per weight byte, 17.8 GFLOP/s
        kernel("fused_matmul_add", "matmul", 17.8, 1.6, weight_bytes=int(17.8e9 * 1.6e-3 / 0.5)),
        kernel("fused_matmul1_add1", "matmul", 160.0, 0.5),
        kernel("fused_erf_multiply", "elementwise", 0.3, 2.0, ["erf", "multiply"]),  # no GFLOP/s comparison
        medians_ms={"fused_conv2d2": 0.5},
    )
    conv2 = next(r for r in p.rows if r["name"] == "fused_conv2d2")
    p.rows[p.rows.index(conv2)] = {**conv2, "total_ms": conv2["total_ms"] * 40}  # the mean an outlier gives
    assert flagged(p) == {}


def test_a_lone_matmul_is_held_to_the_convolutions():
    # a CTC recognizer's classifier, the model's one matmul, as scalar code beside tiled convolutions
    p = profile(
        kernel("fused_conv2d_add_relu", "conv2d", 206.0, 0.1),
        kernel("fused_conv2d1_add1_relu1", "conv2d", 196.0, 0.06),
        kernel("fused_matmul_add3", "matmul", 7.2, 8.8, weight_bytes=120 * 6625 * 4),
        kernel("softmax", "other", 129.0, 0.3),
    )
    k = flagged(p)["fused_matmul_add3"]
    assert (k.reason, k.kind_best_name, k.kind_best_kind) == ("ratio", "fused_conv2d_add_relu", "conv2d")
    assert "29x below the 206.0 GFLOP/s of fused_conv2d_add_relu (a conv2d: no other matmul here" in k.line()
    assert json.loads(json.dumps(p.to_json()))["slow_kernels"][0]["kind_best_kind"] == "conv2d"
    # with another matmul it is held to that one only; a memory-bound matmul is never the yardstick
    with_peer = profile(
        kernel("fused_conv2d_add_relu", "conv2d", 206.0, 0.1),
        kernel("fused_matmul_add3", "matmul", 30.0, 2.0),
        kernel("fused_matmul1", "matmul", 60.0, 1.0),
    )
    assert flagged(with_peer) == {}
    lone_conv = profile(
        kernel("fused_conv2d", "conv2d", 10.0, 2.0),
        kernel("fused_matmul", "matmul", 17.8, 1.6, weight_bytes=int(17.8e9 * 1.6e-3 / 0.5)),
    )
    assert flagged(lone_conv) == {}


def test_the_floor_flags_a_kernel_with_nothing_to_compare_with():
    p = profile(kernel("fused_conv2d_add", "conv2d", 0.9, 3.0), kernel("fused_add", "elementwise", 1.0, 0.1))
    k = flagged(p)["fused_conv2d_add"]
    assert (k.reason, k.kind_best) == ("floor", None)
    assert "below the 2 GFLOP/s floor for a conv2d kernel" in k.line()
    # a matrix-vector product is held to its floor even though it is memory-bound
    mv = kernel("fused_matmul", "matmul", 0.5, 3.0, weight_bytes=10_000_000)
    assert flagged(profile(mv))["fused_matmul"].reason == "floor"


def test_a_kernel_under_its_share_of_the_run_is_not_flagged():
    p = profile(
        kernel("fused_conv2d", "conv2d", 150.0, 10.0),
        kernel("fused_conv2d1", "conv2d", 5.0, 0.1),
        whole_run_ms=100.0,  # 0.1 ms of 100: under MIN_SHARE
    )
    assert flagged(p) == {}


def test_a_gpu_profile_timed_from_the_host_is_not_judged():
    p = profile(
        kernel("fused_conv2d", "conv2d", 150.0, 1.0),
        kernel("fused_conv2d1", "conv2d", 1.0, 3.0),
        device="opencl",
        clock="device host",
    )
    assert p.slow_kernels() == [] and p.to_json()["slow_kernels"] == []
    events = profile(
        kernel("fused_conv2d", "conv2d", 150.0, 1.0),
        kernel("fused_conv2d1", "conv2d", 1.0, 3.0),
        device="opencl",
        clock="device events",
    )
    assert set(flagged(events)) == {"fused_conv2d1"}


PEAKS = Peaks(gflops=100.0, read_gbs=20.0, threads=1, how="recorded")


def test_a_model_whose_every_product_is_slow_is_held_to_the_machine():
    # every convolution left out of the schedules (a layout fallback): within 2x of each other, so the model's
    # own kernels see nothing; this machine's probe product at 100 GFLOP/s does
    kernels = (
        kernel("fused_conv2d_add", "conv2d", 6.0, 2.0),
        kernel("fused_conv2d1_add1", "conv2d", 4.0, 1.5),
        kernel("fused_conv2d2_add2", "conv2d", 30.0, 0.5),  # 3.3x below the probe: not flagged
        kernel("fused_matmul_add3", "matmul", 10.0, 1.0, weight_bytes=40_000),  # compute-bound: 250 FLOP a byte
    )
    assert flagged(profile(*kernels)) == {}
    p = profile(*kernels)
    p.peaks = PEAKS.to_json()
    slow = flagged(p)
    assert set(slow) == {"fused_conv2d_add", "fused_conv2d1_add1", "fused_matmul_add3"}
    assert {k.reason for k in slow.values()} == {"peak"} and all(k.peak == 100.0 for k in slow.values())
    line = slow["fused_conv2d1_add1"].line()
    for text in ("4.0 GFLOP/s", "25x below the 100.0 GFLOP/s this machine's probe product reaches", "NHWC"):
        assert text in line, (text, line)
    doc = json.loads(json.dumps(p.to_json()))
    assert doc["machine_peaks"] == PEAKS.to_json()
    assert {s["name"]: s["reason"] for s in doc["slow_kernels"]} == dict.fromkeys(slow, "peak")
    again = Profile.from_json(doc)  # a saved profile is judged the same way
    assert set(flagged(again)) == set(slow)
    assert "a product compiled by tvmgen reaches 100.0 GFLOP/s on 1 thread(s); one core reads 20.0 GB/s" in p.table()


def test_a_devices_peak_is_named_as_the_devices():
    """`compile --remedy-key`: the probe product timed on the device over RPC is the yardstick, and the line
    says whose peak it is; no bandwidth was measured there, so none is claimed."""
    p = profile(kernel("fused_conv2d_add", "conv2d", 4.0, 1.5), kernel("fused_conv2d1_add1", "conv2d", 5.0, 1.0))
    assert flagged(p) == {}
    p.peaks = Peaks(gflops=100.0, read_gbs=0.0, threads=4, how="on the device", device="phone").to_json()
    slow = flagged(p)
    assert set(slow) == {"fused_conv2d_add", "fused_conv2d1_add1"}
    line = slow["fused_conv2d_add"].line()
    assert "25x below the 100.0 GFLOP/s tvmgen's probe product reaches on device 'phone' with the same threads" in line
    table = p.table()
    assert (
        "device 'phone' (the slow-kernel guard's yardstick): a product compiled by tvmgen reaches 100.0 GFLOP/s on 4 thread(s)"
        in table
    )
    assert "GB/s" not in table.split("yardstick")[1].splitlines()[0]


def test_a_head_streaming_its_weights_is_held_to_the_bandwidth():
    # a classifier head over one row: 0.5 FLOP a byte of its 64 MB of weights, so no GFLOP/s yardstick fits it;
    # at 20 ms it reads 3.2 GB/s against the machine's 20 (6x: not flagged), at 30 ms 2.1 GB/s (9x: flagged);
    # both above the matmul floor (1.6 and 1.1 GFLOP/s)
    for ms, expected in ((20.0, set()), (30.0, {"fused_matmul_add"})):
        head = kernel("fused_matmul_add", "matmul", 32e6 / (ms * 1e6), ms, weight_bytes=64_000_000)
        p = profile(head, kernel("fused_conv2d", "conv2d", 150.0, 0.5))
        assert flagged(p) == {}  # above the matmul floor, and memory-bound: not compared with the convolution
        p.peaks = PEAKS.to_json()
        slow = flagged(p)
        assert set(slow) == expected, ms
    k = slow["fused_matmul_add"]
    assert k.reason == "bandwidth" and k.gbs == pytest.approx(64 / 30) and k.peak == 20.0
    assert "its weights read at 2.1 GB/s, 9x below this machine's 20.0 GB/s (one core)" in k.line()


def test_a_real_profile_runs_through_the_guard(compiled, builtin_onnx, tvmgen_inprocess):
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    art = compiled(builtin_onnx)
    r = tvmgen_inprocess("run", art, "--profile", "--repeat", "3", "--threads", "1", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    p = json.loads(r.stdout[r.stdout.index("{") :])["profile"]
    assert isinstance(p["slow_kernels"], list)  # whatever this machine's timings flag
    assert all(r["median_ms"] > 0 for r in p["kernels"] if r["kind"] != "vm")
    for s in p["slow_kernels"]:
        assert s["name"] in {r["name"] for r in p["kernels"]} and s["reason"] in ("ratio", "floor", "peak", "bandwidth")
    # this machine's peaks, measured in the same process on the profile's one thread
    peaks = p["machine_peaks"]
    assert peaks["threads"] == 1 and peaks["gflops"] > 0 and peaks["read_gbs"] > 0 and "64x512x512" in peaks["how"]

    model = HostModel(art, threads=1)
    inputs = random_inputs(model.manifest.inputs, 0)
    model.run(inputs)
    slow = guard_host_model(model, inputs, art)  # what compile --check runs after the comparison
    assert all(isinstance(k, slow_kernels.SlowKernel) for k in slow)
