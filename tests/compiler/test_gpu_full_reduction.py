"""A reduction of a whole tensor to one value on the GPU (compiler.gpu.full_reduction): one work-group, not a
kernel launch per element; and a schedule that launches a kernel from loops on the host is no schedule
(compiler.gpu.apply_rules)."""

from __future__ import annotations

import re

import numpy as np

from conftest import run_native, save_onnx
from tvmgen import frontends
from tvmgen.compiler import gpu
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.gpu import full_reduction
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target, target_dict


def _mean_to_one_value():
    """A 0-d mean over 16 x 1 x 32 values with its division, as TVM legalises relax.mean."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Mean:
        @R.function
        def main(x: R.Tensor((16, 1, 32), "float32")):  # noqa: N805
            with R.dataflow():
                y = R.mean(x)
                R.output(y)
            return y

    mod = relax.transform.LegalizeOps()(Mean)
    return next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def test_a_schedule_that_launches_a_kernel_per_host_loop_iteration_is_passed_over():
    """dlight's GeneralReduction binds a 0-d mean's work-group inside its reduction loops, which stay in host
    code: 512 launches a run. apply_rules refuses that schedule, names why, and takes the next rule's."""
    import tvm
    from tvm.s_tir import dlight as dl

    target = make_target({"kind": "cuda", "arch": "sm_90"})  # no FullReduction rule: TVM's own rules only
    report: dict = {}
    with target:
        out = gpu.apply_rules(dl.gpu.GeneralReduction(), dl.gpu.Fallback(), report=report)(
            tvm.IRModule({"mean": _mean_to_one_value()})
        )
    (failure,) = report["rule_failures"]
    assert failure["rule"] == "GeneralReduction" and failure["scheduled_by"] == "Fallback"
    assert failure["error"] == "launches x_red from loops on the host (a kernel launch per iteration)"
    script = out["mean"].script()
    assert script.index("T.thread_binding") < script.index("T.grid(T.int64(16), T.int64(32))")


def test_a_full_reduction_is_one_work_group_with_the_epilogue_in_it():
    import tvm

    target = make_target(target_dict(PLATFORMS["host"], "opencl", "generic"))
    sch = full_reduction.schedule(_mean_to_one_value())
    assert sch is not None
    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "mean")})
    src = tvm.tirx.build(mod, target=target).imports[0].inspect_source()
    kernels = [ln for ln in src.splitlines() if ln.startswith("__kernel void") and ln.endswith("{")]
    # one kernel, its arguments the two buffers (no loop index passed from the host), a tree over 256 threads
    assert len(kernels) == 1 and " int " not in kernels[0], kernels
    assert "red_buf0_ptr[256]" in src and "/ 5.120000e+02f" in src
    # not a full reduction: rows of a softmax-like sum keep dlight's rules
    rows = tvm.te.placeholder((8, 100), "float32", "rows")
    k = tvm.te.reduce_axis((0, 100), "k")
    per_row = tvm.te.compute((8,), lambda i: tvm.te.sum(rows[i, k], axis=k), name="per_row")
    assert full_reduction.schedule(tvm.te.create_prim_func([rows, per_row])) is None


def _reductions_model(path):
    """Reductions of few outputs: mean and sum of a 4 x 8 x 16 tensor to 0-d values, the max of 1,000 values
    (not a multiple of the work-group's 256 threads) kept as a 1 x 1 tensor, a mean over 998 frames of 16
    channels (dlight's Reduction put all 16 in one work-group), and a max over 512 positions of 128 channels
    behind a squeeze (no dlight reduction rule took it: Fallback's thread per output)."""
    from onnx import TensorProto, helper

    def tensor(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    inputs = [
        tensor("x", [4, 8, 16]),
        tensor("v", [10, 100]),
        tensor("frames", [1, 998, 16]),
        tensor("c", [1, 128, 1, 512]),
    ]
    outs = [
        tensor("mean", []),
        tensor("sum", []),
        tensor("max", [1, 1]),
        tensor("over_frames", [1, 16]),
        tensor("pooled", [1, 128]),
    ]
    axis2 = helper.make_tensor("axis2", TensorProto.INT64, [1], [2])
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=0),
        helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
        helper.make_node("ReduceMax", ["v"], ["max"], keepdims=1),
        helper.make_node("ReduceMean", ["frames"], ["over_frames"], axes=[1], keepdims=0),
        helper.make_node("Squeeze", ["c", "axis2"], ["squeezed"]),
        helper.make_node("ReduceMax", ["squeezed"], ["pooled"], axes=[2], keepdims=0),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "full", inputs, outs, [axis2]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    return save_onnx(model, path)


def test_few_output_reductions_on_pocl_match_onnxruntime(ocl_runtime, opencl_lib, tmp_path):
    """Each reduction a kernel of its own whose work-groups reduce through local memory (a work-group per
    output), no index passed from host loops; every output as onnxruntime's."""
    import onnxruntime as ort

    path = _reductions_model(tmp_path / "full.onnx")
    art = tmp_path / "art"
    compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl"), art, True, {"name": "r"})
    library = (art / "model.so").read_bytes().decode("latin-1")
    # each kernel's definition: its signature and body, up to the next kernel's declarations
    bodies = dict(
        re.findall(r"(__kernel void \w+\([^)]*\)) \{(.*?)(?=\n__kernel void|\n// Function|\Z)", library, re.S)
    )
    assert len(bodies) == 5 and not any(" int " in s for s in bodies), list(bodies)
    assert all("red_buf0" in body for body in bodies.values()), bodies
    # a work-group per output (dlight's Reduction rule had a 16 x 16 one for the 16 means over 998 frames)
    assert not any("get_local_id(1)" in body for body in bodies.values()), bodies
    # each output stored once, by its group's first thread: a store every thread makes lands at that thread's
    # offset, over other groups' outputs and past the tensor's end (PoCL, running the groups one after another,
    # still ends with the right values; NVIDIA's parallel groups did not)
    for signature, body in bodies.items():
        params = set(re.findall(r"(\w+_ptr)\b", signature))
        lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
        stores = [i for i, ln in enumerate(lines) if re.match(r"(\w+_ptr)\[", ln) and ln.split("[")[0] in params]
        assert stores, signature
        for i in stores:
            assert lines[i - 1] == "if ((convert_int(get_local_id(0))) < 1) {", (signature, lines[i - 1 : i + 1])
    rng = np.random.default_rng(5)
    inputs = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype("float32")
        for i in __import__("onnx").load(str(path)).graph.input
    }
    want = ort.InferenceSession(str(path)).run(None, inputs)
    proc, outs = run_native(ocl_runtime, art, inputs, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert outs[2].shape == (1, 1) and outs[2][0, 0] == inputs["v"].max()
