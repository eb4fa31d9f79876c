"""Model inputs read in place at any alignment (compiler.inputs, HostModel.device_inputs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import onnx_model, save_onnx
from tvmgen.compiler.cpu.inputs import TVM_ALIGNMENT, input_uses, relax_input_alignment
from tvmgen.runtime.runner import HostModel


def three_input_model():
    """x: a convolution's input; a: reshaped (a view: two kernels read it), then added to b and
    squared; b also feeds a third kernel."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    F = TensorProto.FLOAT
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([4, 16], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Reshape", ["a", "shape"], ["a2"]),
        helper.make_node("Add", ["a2", "b"], ["s"]),
        helper.make_node("MatMul", ["s", "m"], ["z"]),
        helper.make_node("Sigmoid", ["b"], ["t"]),
        helper.make_node("Mul", ["a2", "a2"], ["q"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", F, [1, 3, 17, 17]),
        helper.make_tensor_value_info("a", F, [1, 64]),
        helper.make_tensor_value_info("b", F, [4, 16]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", F, None),
        helper.make_tensor_value_info("z", F, None),
        helper.make_tensor_value_info("t", F, None),
        helper.make_tensor_value_info("q", F, None),
    ]
    return onnx_model(nodes, inputs, outputs, [w, m, shape])


def at_offset(values: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``values`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    raw = np.empty(values.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data % 64) + offset
    a = raw[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    a[...] = values
    return a


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    tmp = tmp_path_factory.mktemp("inputs")
    path = save_onnx(three_input_model(), tmp / "three.onnx")
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp / "artifact", True, {"name": "three"})
    return imported, tmp / "artifact"


def test_kernels_reading_inputs_drop_the_64_byte_promise_and_no_other_does(compiled):
    """After the pass, exactly the kernel arguments that receive a model input (or a view of
    one: the reshape becomes a view) are declared 4-byte aligned; every other argument keeps 64."""
    import tvm
    from tvm import relax

    from tvmgen.compiler import cpu
    from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

    imported, _ = compiled
    mod = relax.transform.BindParams("main", dict(zip(imported.mod["main"].params[3:], imported.params)))(imported.mod)
    target = make_target(PLATFORMS["host"].cpu_target())
    report: dict = {}
    with target:
        mod = tvm.transform.Sequential(
            cpu.prepare_passes(target) + cpu.schedule_passes(target) + [relax.transform.RewriteDataflowReshape()]
        )(mod)
        reads, unsafe = input_uses(mod["main"], 3)
        mod = relax_input_alignment(mod, report)
    assert report["input_alignment"] == [4, 4, 4] and not unsafe
    read = {(gv.name_hint, k): used for (gv, k), used in reads.items()}
    assert set().union(*read.values()) == {0, 1, 2}, read  # every input is read by some kernel
    assert any(used == {1} for used in read.values()), read  # a, through its reshape
    checked = 0
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            for k, p in enumerate(func.params):
                expected = 4 if (gv.name_hint, k) in read else TVM_ALIGNMENT
                assert int(p.data_alignment) == expected, (gv.name_hint, k)
                checked += 1
    assert checked > len(read)


def test_unaligned_inputs_are_read_in_place_and_match_onnxruntime(compiled):
    imported, artifact = compiled
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["vm"]["input_alignment"] == [4, 4, 4]
    model = HostModel(artifact)
    rng = np.random.default_rng(4)
    values = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in imported.inputs}
    expected = imported.reference(values)
    for offset in (4, 8, 20, 0):
        inputs = {n: at_offset(v, offset) for n, v in values.items()}
        arrays = model.check_inputs(inputs)
        tensors = model.device_inputs(arrays)
        # the kernels get the caller's memory itself, as onnxruntime does
        assert [np.from_dlpack(t).ctypes.data for t in tensors] == [a.ctypes.data for a in arrays]
        for actual, exp in zip(model.run(inputs), expected):
            np.testing.assert_allclose(actual, exp, atol=1e-4, rtol=1e-4)
        assert all(np.array_equal(inputs[n], v) for n, v in values.items())  # inputs left untouched


def test_artifacts_without_the_field_copy_unaligned_inputs(compiled, tmp_path):
    """An artifact from before (no input_alignment) promised 64 bytes: its unaligned inputs are copied."""
    import shutil

    imported, artifact = compiled
    old = shutil.copytree(artifact, tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["vm"]["input_alignment"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    model = HostModel(old)
    x = at_offset(np.ones((1, 3, 17, 17), np.float32), 4)
    arrays = model.check_inputs({"x": x, "a": np.zeros((1, 64), np.float32), "b": np.zeros((4, 16), np.float32)})
    assert np.from_dlpack(model.device_inputs(arrays)[0]).ctypes.data != x.ctypes.data


def test_an_input_written_in_place_keeps_the_promise():
    """An input some kernel writes in place, or passes anywhere but a kernel argument, keeps 64:
    the runner then copies it, and the caller's array is never written."""
    import tvm
    from tvm import relax, te, topi

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8,), "float32"))
    y = relax.Var("y", relax.TensorType((8,), "float32"))
    with bb.function("main", [x, y], attrs={"num_input": 2}):
        with bb.dataflow():
            a = te.placeholder((8,), "float32", "a")
            gv = bb.add_func(te.create_prim_func([a, topi.add(a, 1.0)]), "add_one")
            out = bb.emit(relax.call_tir(gv, relax.Tuple([y]), relax.TensorType((8,), "float32")))
            inplace = bb.emit(relax.call_tir_inplace(gv, relax.Tuple([x]), 0, relax.TensorType((8,), "float32")))
            both = bb.emit_output(relax.Tuple([out, inplace]))
        bb.emit_func_output(both)
    mod = bb.get()
    reads, unsafe = input_uses(mod["main"], 2)
    assert unsafe == {0}
    report: dict = {}
    with tvm.target.Target("llvm"):
        mod = relax_input_alignment(mod, report)
    assert report["input_alignment"] == [TVM_ALIGNMENT, 4]


def test_outputs_are_copies_the_next_run_leaves_alone_and_wrong_inputs_are_refused(compiled):
    """Each run's outputs are numpy arrays of their own (copied out through DLPack): a second run
    with other inputs leaves the first run's arrays as they were. The checks made once per model
    still refuse a wrong shape, a wrong dtype and an unknown name, each with its cause."""
    from tvmgen.core.errors import InputError

    imported, artifact = compiled
    model = HostModel(artifact)
    rng = np.random.default_rng(7)
    first_in = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in imported.inputs}
    second_in = {n: v + 1 for n, v in first_in.items()}
    first = model.run(first_in)
    kept = [a.copy() for a in first]
    second = model.run(second_in)
    for a, k, b, exp in zip(first, kept, second, imported.reference(second_in)):
        np.testing.assert_array_equal(a, k)  # not overwritten by the second run
        np.testing.assert_allclose(b, exp, atol=1e-4, rtol=1e-4)
        assert not np.shares_memory(a, b)
    x = first_in["x"]
    for bad, cause in [
        ({**first_in, "x": x[:, :, :16]}, "has shape"),
        ({**first_in, "x": x.astype(np.float64)}, "has dtype"),
        ({**first_in, "extra": x}, "unknown input name"),
    ]:
        with pytest.raises(InputError, match=cause):
            model.run(bad)


def test_wide_and_unsigned_dtypes_run_in_python_and_tvmgen_run(host_runtime, tmp_path):
    """float64, uint16, uint32 and uint64 inputs and outputs (ONNX models compute in them: the ONNX node
    tests have 54 such cases) compile and give onnxruntime's answer, through the Python runner and
    through tvmgen-run's .npy files."""
    from onnx import TensorProto, helper

    from conftest import onnx_model, run_native, save_onnx
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.core.model import random_inputs
    from tvmgen.frontends.onnx import onnxruntime_reference
    from tvmgen.runtime.runner import HostModel

    types = {"float64": TensorProto.DOUBLE, "uint16": TensorProto.UINT16}
    types |= {"uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64}
    nodes, inputs, outputs = [], [], []
    for name, t in types.items():
        nodes += [
            helper.make_node("Add", [name, name], [f"{name}_2x"]),
            helper.make_node("Mul", [f"{name}_2x", name], [f"{name}_y"]),
        ]
        inputs.append(helper.make_tensor_value_info(name, t, [2, 3]))
        outputs.append(helper.make_tensor_value_info(f"{name}_y", t, [2, 3]))
    model = onnx_model(nodes, inputs, outputs)
    path = save_onnx(model, tmp_path / "dtypes.onnx")
    art = tmp_path / "art"
    compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "cpu"), art, True, {"name": "dtypes"})
    host = HostModel(art)
    assert [s.dtype for s in host.manifest.inputs] == list(types)
    values = random_inputs(host.manifest.inputs, seed=3)
    values["float64"] = values["float64"] + 1e-12  # below float32's resolution: a float32 path would lose it
    expected = onnxruntime_reference(model.SerializeToString())(values)
    for got, want in zip(host.run(values), expected, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
    proc, native = run_native(host_runtime, art, values, tmp_path)
    assert native is not None, proc.stderr
    for got, want in zip(native, expected, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
