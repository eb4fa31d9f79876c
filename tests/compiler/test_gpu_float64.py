"""float64 inside a float32 model on the GPU (compiler/gpu/float64.py): computed in float32 there, said in the
compile output; the CPU keeps float64; a model that takes or returns float64 is left as it is."""

from __future__ import annotations

import numpy as np
import pytest


def _double_inside(path):
    """y = float(double(x) * 0.5 + c), c a float64 constant: what a trace of ``arange(n) + 0.5`` leaves."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = numpy_helper.from_array(np.arange(16, dtype=np.float64).reshape(1, 16) / 7, "c")
    half = numpy_helper.from_array(np.array(0.5, np.float64), "half")
    nodes = [
        helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["xd", "half"], ["m"]),
        helper.make_node("Add", ["m", "c"], ["a"]),
        helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "double_inside",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [c, half],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("device", ["vulkan", "opencl", "cpu"])
def test_float64_inside_a_model_is_computed_in_float32_on_the_gpu(device, tvmgen_inprocess, tmp_path):
    """On Vulkan (whose code generator has no float64) and OpenCL (phones lack cl_khr_fp64) the model builds, its
    own GPU code runs on lavapipe / PoCL through --check and matches onnxruntime, and the compile output says what
    was computed in float32; the CPU build keeps float64 (onnxruntime's values exactly)."""
    path = _double_inside(tmp_path / "double_inside.onnx")
    r = tvmgen_inprocess("compile", path, "--device", device, "--check", "-o", tmp_path / "out")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    said = "3 float64 constant(s) and cast(s) inside the model computed in float32 on the GPU"
    if device == "cpu":
        assert said not in text and "ok y: max abs error 0," in text, text
        return
    assert said in text, text
    assert f"checking the artifact itself: the host/{device} build on" in text, text
    assert "ok y: max abs error" in text


def test_float64_inputs_or_outputs_are_left_alone():
    """demote changes nothing in a function that takes or returns float64 (its outputs are the model's)."""
    import tvm
    from tvm import relax

    from tvmgen.compiler.gpu import float64

    x = relax.Var("x", relax.TensorType([4], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        d = bb.emit(relax.op.astype(x, "float64"))
        y = bb.emit(relax.op.add(d, relax.const(np.ones(4), "float64")))
        bb.emit_func_output(y)
    mod = bb.get()
    out, count = float64.demote(mod)
    assert count == 0 and out is mod
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        d = bb.emit(relax.op.astype(x, "float64"))
        y = bb.emit(relax.op.astype(relax.op.add(d, relax.const(np.ones(4), "float64")), "float32"))
        bb.emit_func_output(y)
    out, count = float64.demote(bb.get())
    assert count == 2 and "float64" not in out["main"].script()  # the cast and the constant
    assert isinstance(out, tvm.IRModule)
