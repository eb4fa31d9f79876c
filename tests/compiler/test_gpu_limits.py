"""GPU schedules within their family's limits (compiler/gpu/limits.py, platforms.GPU_LIMITS): what a kernel
needs of a work-group is measured as TVM lowers it, and a rule's schedule over the limits gives way to the next
rule for that kernel alone, which the compile output says; a kernel no rule fits is an error naming it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import run_native, save_onnx, single_op_models
from tvmgen import frontends
from tvmgen.compiler import gpu
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.gpu import limits
from tvmgen.compiler.targets import platforms
from tvmgen.compiler.targets.platforms import PLATFORMS, GpuLimits, make_target, target_dict


def _target(family):
    return make_target(target_dict(PLATFORMS["host"], "opencl", family))


def _matmul():
    import tvm
    from tvm import te

    # 512 x 512 outputs: enough tiles that dlight's Matmul, not the split reduction (split_k), schedules it
    a = te.placeholder((512, 128), "float32", name="a")
    b = te.placeholder((128, 512), "float32", name="b")
    k = te.reduce_axis((0, 128), "k")
    c = te.compute((512, 512), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    return tvm.IRModule({"mm": te.create_prim_func([a, b, c]).with_attr("global_symbol", "mm")})


def test_needs_are_what_the_generated_opencl_kernel_declares():
    """The desktop family's matmul (dlight's CUDA configuration: 8 x 16 threads, operands staged in local
    memory, rows padded against bank conflicts): the bytes counted equal the __local arrays of the OpenCL
    source TVM generates, and the threads the configuration's."""
    import tvm

    target = _target("desktop")
    rule = gpu.desktop_matmul()
    with target:
        sch = rule.apply(_matmul()["mm"], target, False)
    func = sch.mod["main"].with_attr("global_symbol", "mm")
    need = limits.needs(func)
    src = tvm.tirx.build(tvm.IRModule({"mm": func}), target=target).imports[0].inspect_source()
    declared = [int(n) for n in re.findall(r"__local float \w+\[(\d+)\];", src)]
    assert declared and need.shared_bytes == 4 * sum(declared), (need, declared)
    config = rule.get_configs(target)
    assert need.threads == config.block_size_x * config.block_size_y == 128
    assert need.over(platforms.GPU_LIMITS["desktop"]) == ""


def test_each_launch_of_a_function_is_counted_apart():
    """A scheduled function may hold several launches (the Adreno convolution's two kernels): its threads are the
    most one launch asks for (256 here), not the product of every thread axis in the function (256 x 16)."""
    import tvm
    from tvm import s_tir, te

    a = te.placeholder((64, 64), "float32", name="a")
    b = te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="b")
    c = te.compute((64, 64), lambda i, j: b[i, j] + 1.0, name="c")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, c])}))
    for name, tag, lanes in (("b", "threadIdx.x", 256), ("c", "threadIdx.y", 16)):
        bx, tx = sch.split(sch.fuse(*sch.get_loops(sch.get_sblock(name))), [None, lanes])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, tag)
    need = limits.needs(sch.mod["main"])
    assert need.threads == 256 and need.shared_bytes == 0, need


def test_a_schedule_over_the_limits_gives_way_to_the_next_rule(monkeypatch):
    """With a generic OpenCL family of 1 KB of local memory, dlight's matmul (2 KB) is passed over for that
    kernel: a later rule schedules it within the limit, and the compile output says what it needed. With
    fewer threads than any rule uses, the kernel is a CompileError naming it and the limit."""
    from tvm.s_tir import dlight as dl

    monkeypatch.setitem(platforms.GPU_LIMITS, "generic", GpuLimits("generic OpenCL", 1024, 256))
    target = _target("generic")
    report: dict = {}
    with target:
        out = gpu.apply_rules(*gpu.default_rules(target), report=report)(_matmul())
    assert out["mm"].attrs["tirx.is_scheduled"]
    (failure,) = [f for f in report["rule_failures"] if f["rule"] == "Matmul"]
    assert failure["error"] == (
        "over the GPU family's limits: 2 KB of shared memory per work-group, the generic OpenCL limit is 1 KB"
    )
    assert report["work_groups"]["mm"].shared_bytes <= 1024
    (line,) = [ln for ln in gpu.rule_failures_summary(report["rule_failures"]) if "Matmul" in ln]
    assert line.startswith("dlight's Matmul schedule of mm is over the GPU family's limits: 2 KB") and (
        f"scheduled by {failure['scheduled_by']} instead" in line
    )
    record = gpu.work_groups_record(report["work_groups"], target)
    assert record["shared_bytes"] <= 1024 and record["limits"] == {
        "family": "generic OpenCL",
        "shared_bytes": 1024,
        "threads": 256,
    }
    assert gpu.work_groups_summary(record).endswith("; the generic OpenCL limits: 1 KB, 256 threads")
    monkeypatch.setitem(platforms.GPU_LIMITS, "generic", GpuLimits("generic OpenCL", 1024, 16))
    with target, pytest.raises(Exception, match=r"no GPU schedule for kernel mm: .*threads per work-group, the "):
        gpu.apply_rules(dl.gpu.Matmul(), dl.gpu.Fallback())(_matmul())


def test_a_kernel_moved_to_the_next_rule_runs_on_pocl(ocl_runtime, opencl_lib, tmp_path, monkeypatch, capsys):
    """End to end: a convolution whose tiled schedule is over a (shrunk) family limit builds with the next rule,
    the compile output names it, and the artifact matches onnxruntime on PoCL."""
    import onnxruntime as ort

    monkeypatch.setitem(platforms.GPU_LIMITS, "generic", GpuLimits("generic OpenCL", 1024, 256))
    path = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv3x3.onnx")
    art = tmp_path / "conv"
    compile_to_artifact(
        frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", "generic"), art, True, {"name": "c"}
    )
    said = capsys.readouterr()
    text = said.out + said.err
    assert "schedule of fused_conv2d" in text and "over the GPU family's limits" in text, text
    assert "the generic OpenCL limits: 1 KB, 256 threads" in text
    import json

    kept = json.loads((art / "kernels.json").read_text())["work_groups"]  # what benchmarks/gpu.py prints
    assert kept["shared_bytes"] <= 1024 and kept["limits"]["shared_bytes"] == 1024, kept
    x = np.random.default_rng(4).standard_normal((1, 8, 16, 16)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], want, atol=1e-4, rtol=1e-4)


def test_the_runtime_names_a_kernel_whose_work_group_the_device_cannot_run(ocl_runtime, opencl_lib, compiled, tmp_path):
    """libtvmgen_opencl checks each kernel's work-group against what the device runs it with
    (CL_KERNEL_WORK_GROUP_SIZE) before its first launch: a PoCL device limited to 16 threads a work-group
    (POCL_MAX_WORK_GROUP_SIZE) refuses the generic family's 64-thread convolution with an error naming the
    kernel, what it needs and the fix, through tvmgen-run and through tvmgen run (exit 2); unlimited, it runs."""
    import subprocess
    import sys

    path = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv3x3.onnx")
    art = compiled(path, "host", "opencl", name="conv3x3")
    x = np.random.default_rng(6).standard_normal((1, 8, 16, 16)).astype("float32")
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, env={"POCL_MAX_WORK_GROUP_SIZE": "16"})
    assert proc.returncode != 0 and outs is None
    said = re.search(r"OpenCL kernel (\w+) cannot run on .*: it needs work-groups of (\d+) threads", proc.stderr)
    assert said and "conv2d" in said.group(1) and int(said.group(2)) > 16, proc.stderr[-2000:]
    assert "the device runs it with at most 16" in proc.stderr and "--gpu-family" in proc.stderr
    env = {**__import__("os").environ, "POCL_MAX_WORK_GROUP_SIZE": "16", "TVMGEN_OPENCL_BACKEND": str(opencl_lib)}
    r = subprocess.run(
        [sys.executable, "-m", "tvmgen", "run", str(art), "--repeat", "1"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 2 and "error: OpenCL kernel" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "fix: compile for this device's GPU family" in r.stdout + r.stderr
    proc, outs = run_native(ocl_runtime, art, {"x": x}, tmp_path, tag="unlimited")
    assert proc.returncode == 0, proc.stderr
