"""ONNX normalization before TVM's importer (generator/tvmgen/frontends/onnx_normalize.py): opsets
upgraded, shape subgraphs folded to a fixed point, and an importer failure named down to its node.
The models that needed it end to end (GRU scorers at opsets 9 and 11) are zoo entries: test_zoo.py
runs them on the host and under qemu, test_opencl_zoo.py on PoCL."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from tvmgen.frontends import onnx_normalize


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _initializer(model, name) -> np.ndarray:
    return next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name)


def test_shape_chains_fold_without_onnxslim():
    """What onnxslim can leave: a Reshape target computed Shape -> Gather -> Unsqueeze -> Concat, and a
    state made by ConstantOfShape from the batch size. tvmgen's own round folds both (onnxslim is not
    run here), and nothing that depends on the input's values."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Concat", ["b1", "hidden"], ["state_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["state_shape"], ["state"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    consts = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array([16], np.int64), "hidden"),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, None),
        ],
        consts,
    )
    folded, count = onnx_normalize.fold_constants(model)
    assert count == 6, _ops(folded)
    assert _ops(folded) == ["Reshape", "Relu"]
    assert _initializer(folded, "target").tolist() == [3, -1]
    state = _initializer(folded, "state")
    assert state.shape == (3, 16) and not state.any()
    # a second round finds nothing more: the fixed point
    assert onnx_normalize.fold_constants(folded)[1] == 0


def test_folding_keeps_what_depends_on_input_values_and_quantized_weights():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),  # x's shape is not fixed: stays
        helper.make_node("Add", ["x", "one"], ["y0"]),  # depends on x's values: stays
        helper.make_node("DequantizeLinear", ["w_q", "scale"], ["w"]),  # int8 weights stay int8
        helper.make_node("Add", ["y0", "w"], ["y"]),
    ]
    consts = [
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.arange(4, dtype=np.int8), "w_q"),
        numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        consts,
    )
    folded, count = onnx_normalize.fold_constants(model)
    assert count == 0 and _ops(folded) == ["Shape", "Add", "DequantizeLinear", "Add"]


def test_old_opsets_are_upgraded_and_a_converter_failure_names_the_operator():
    slice9 = onnx_model(
        [helper.make_node("Slice", ["h0"], ["y"], starts=[0], ends=[2], axes=[0])],
        [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [4, 1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opset=9,
    )
    notes: list[str] = []
    upgraded = onnx_normalize.upgrade_opset(slice9, notes)
    assert onnx_normalize.opset_of(upgraded) == onnx_normalize.TARGET_OPSET
    assert notes == [f"opset 9 upgraded to {onnx_normalize.TARGET_OPSET} (onnx's version converter)"]
    (node,) = [n for n in upgraded.graph.node if n.op_type == "Slice"]
    assert len(node.input) >= 3 and not node.attribute  # starts/ends/axes became inputs: the form TVM reads

    pad1 = onnx_model(
        [helper.make_node("Pad", ["x"], ["y"], paddings=[1, 1, 1, 1])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opset=1,
    )
    notes = []
    assert onnx_normalize.upgrade_opset(pad1, notes) is pad1
    assert len(notes) == 1 and "opset 1 kept" in notes[0] and "at operator Pad" in notes[0], notes


def test_importer_failure_names_the_node_its_inputs_and_which_is_not_constant(tvmgen, tmp_path):
    """A reduction whose axes are a graph input: TVM's importer accepts only constant axes. The error
    names the operator, its index and name, each input's dtype and shape and where it comes from, and
    offers --const for the small integer input; exit 2, nothing written."""
    model = onnx_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="act"),
            helper.make_node("ReduceSum", ["r", "axes"], ["y"], name="pool", keepdims=0),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opset=17,
    )
    path = save_onnx(model, tmp_path / "axes_input.onnx")
    r = tvmgen("compile", path, "-o", tmp_path / "out")
    assert r.returncode == 2, r.output
    assert "at operator ReduceSum #1 'pool'" in r.stderr, r.stderr
    assert "r float32[2x3] computed in the graph" in r.stderr and "axes int64[1] graph input" in r.stderr, r.stderr
    assert "Error converting operator" not in r.output  # TVM's own half-line is not passed on
    assert "axes is a small integer graph input" in r.stderr and "--const axes=VALUE" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
    # the fix it offers works: bound, the axes fold and the model compiles to the reference's answer
    r = tvmgen("compile", path, "--const", "axes=1", "--check", "-o", tmp_path / "out")
    assert r.returncode == 0, r.output
    assert "ok y: max abs error" in r.stderr, r.stderr


def test_an_input_left_unread_by_folding_stays_an_input():
    """A graph that computes only from an input's shape folds to a constant; the input must stay (the
    artifact takes it, TVM makes one parameter per graph input): without it the constant became the
    first parameter and the model returned its input (ONNX's Shape and Size node tests)."""
    from tvmgen.core.model import TensorSpec

    model = onnx_model(
        [helper.make_node("Shape", ["x"], ["s"], start=1), helper.make_node("Size", ["x"], ["n"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 5])],
        [
            helper.make_tensor_value_info("s", TensorProto.INT64, None),
            helper.make_tensor_value_info("n", TensorProto.INT64, None),
        ],
    )
    normalized = onnx_normalize.normalize(model, [TensorSpec("x", (3, 4, 5), "float32")], [])
    assert [vi.name for vi in normalized.graph.input] == ["x"]
    assert [d.dim_value for d in normalized.graph.input[0].type.tensor_type.shape.dim] == [3, 4, 5]
    assert not normalized.graph.node
    assert _initializer(normalized, "s").tolist() == [4, 5] and int(_initializer(normalized, "n")) == 60


def test_an_empty_dimension_is_named_as_such_not_as_dynamic():
    import pytest

    from tvmgen.core.errors import InputError
    from tvmgen.frontends.base import InputOverride, resolve_inputs

    with pytest.raises(InputError, match=r"input 'x' has an empty dimension \(3x0\)") as e:
        resolve_inputs([("x", [3, None], "float32")], [InputOverride("x", (3, 0), None)])
    assert "dynamic" not in str(e.value)
