"""Every frontend, compiled for the host and checked against its reference runtime."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import dynamic_pad_model, save_onnx, single_op_models
from helpers import assert_close, compile_and_run, run_against_reference
from tvmgen import frontends
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.runtime.runner import HostModel


@pytest.mark.parametrize("name", sorted(single_op_models()))
def test_single_op_onnx_matches_onnxruntime(name, tmp_path):
    path = save_onnx(single_op_models()[name], tmp_path / f"{name}.onnx")
    imported, _, actual, expected = compile_and_run(path, tmp_path)
    assert imported.reference_name.startswith("onnxruntime")
    assert_close(actual, expected)


def test_builtin_mobilenet_matches_onnxruntime(builtin_onnx, compiled):
    """The session's host build of the built-in model (conftest's ``compiled``: other modules use it too)."""
    imported = frontends.load(builtin_onnx, [])
    _, actual, expected = run_against_reference(imported, compiled(builtin_onnx, "host", "cpu", name="mobilenet"))
    assert [s.shape for s in imported.inputs] == [(1, 3, 224, 224)]
    assert actual[0].shape == (1, 1000)
    assert abs(float(actual[0].sum()) - 1.0) < 1e-4  # softmax
    assert_close(actual, expected, atol=1e-5)


def test_dynamic_pad_imports_only_after_simplification(tmp_path):
    from tvm.relax.frontend.onnx import from_onnx

    model = dynamic_pad_model()
    with pytest.raises(Exception, match="Dynamic pads"):  # TVM alone
        from_onnx(model, {"x": [1, 3, 32, 32]})
    path = save_onnx(model, tmp_path / "dynpad.onnx")
    imported, _, actual, expected = compile_and_run(path, tmp_path, overrides=["x:1x3x32x32"])
    assert actual[0].shape == (1, 3, 36, 36)  # 32 + 2 * (32 // 16)
    assert_close(actual, expected, atol=0)


def test_torch_exported_onnx_with_dynamic_batch(torch_onnx, tmp_path):
    # The batch dimension is dynamic and the flatten's shape is computed in the graph.
    with pytest.raises(Exception, match="dynamic dimensions"):
        frontends.load(torch_onnx, [])
    imported, _, actual, expected = compile_and_run(torch_onnx, tmp_path, overrides=["image:2x3x64x64"])
    assert imported.inputs[0].shape == (2, 3, 64, 64)
    assert actual[0].shape == (2, 10)
    assert_close(actual, expected)


def test_separate_params_give_same_outputs(builtin_onnx, tmp_path):
    imported, inputs, actual, expected = compile_and_run(builtin_onnx, tmp_path, separate_params=True)
    lib = tmp_path / "artifact" / "model.so"
    params = tmp_path / "artifact" / "model.params"
    # the weights (4.5 MB) live in model.params, not in the library
    assert params.stat().st_size > 4_000_000
    assert lib.stat().st_size < params.stat().st_size
    assert_close(actual, expected, atol=1e-5)


def test_fp16_tflite_weights_stay_fp16_with_separate_params(tmp_path):
    """A TFLite model with fp16 weights (DEQUANTIZE to fp32): folded into the library they double;
    with --separate-params they go to model.params as fp16 and are cast as the model runs, and the
    outputs still match LiteRT. (TVM's TFLite importer keeps weights as graph constants: before
    tvmgen lifted them, --separate-params wrote a model.params main did not take, and the run failed.)"""
    import tensorflow as tf
    import tvm

    tf.keras.utils.set_random_seed(0)
    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [
            tf.keras.Input((16, 16, 3), batch_size=1),
            layers.Conv2D(32, 3, activation="relu"),
            layers.Conv2D(64, 3, activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(40),
        ]
    )  # weights of 1.7, 36.9 and 5.1 KB in fp16
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_types = [tf.float16]
    path = tmp_path / "cnn_fp16.tflite"
    path.write_bytes(conv.convert())
    folded = tmp_path / "folded"
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), folded, True, {"name": "f"})
    _, inputs, actual, expected = compile_and_run(path, tmp_path, separate_params=True)
    assert_close(actual, expected)
    art = tmp_path / "artifact"
    params = tvm.runtime.load_param_dict((art / "model.params").read_bytes())
    weights = {n: p.numpy() for n, p in params.items()}
    assert weights and all(w.dtype == np.float16 for w in weights.values()), {n: w.dtype for n, w in weights.items()}
    fp16_bytes = sum(w.nbytes for w in weights.values())
    # the library lost the weights it had folded to fp32 (twice the fp16 bytes)
    assert (folded / "model.so").stat().st_size - (art / "model.so").stat().st_size > 1.5 * fp16_bytes
    np.testing.assert_allclose(HostModel(folded).run(inputs)[0], actual[0], rtol=1e-5, atol=1e-6)


def test_pt2_with_separate_params(torch_pt2, tmp_path):
    """PyTorch's importer also leaves the weights as constants: --separate-params lifts them into
    model.params, and the library no longer holds them."""
    import tvm

    _, _, actual, expected = compile_and_run(torch_pt2, tmp_path, separate_params=True)
    assert_close(actual, expected)
    art = tmp_path / "artifact"
    weights = [w.numpy() for w in tvm.runtime.load_param_dict((art / "model.params").read_bytes()).values()]
    assert weights and sum(w.nbytes for w in weights) > 10_000
    largest = max(weights, key=lambda w: w.nbytes)
    assert largest.tobytes() not in (art / "model.so").read_bytes()


def test_tflite_matches_litert(tflite_model, tmp_path):
    imported, _, actual, expected = compile_and_run(tflite_model, tmp_path)
    assert imported.reference_name.startswith("LiteRT")
    assert imported.inputs[0].shape == (1, 32, 32, 3)
    assert_close(actual, expected, atol=1e-5)


def test_tflite_custom_operator_is_named(tflite_custom_op):
    from tvmgen.core.errors import ModelError

    with pytest.raises(ModelError) as e:
        frontends.load(tflite_custom_op, [])
    assert "CUSTOM:" in e.value.message and "custom operators" in e.value.hint


def test_pt2_matches_pytorch(torch_pt2, tmp_path):
    imported, _, actual, expected = compile_and_run(torch_pt2, tmp_path)
    assert imported.reference_name.startswith("PyTorch")
    assert_close(actual, expected)


def test_pb_matches_onnxruntime_and_tensorflow(pb_model, keras_model, tmp_path):
    imported, inputs, actual, expected = compile_and_run(pb_model, tmp_path, overrides=["input:1x32x32x3:float32"])
    assert [s.name for s in imported.inputs] == ["input:0"]
    assert any("detected" in n for n in imported.notes)
    assert_close(actual, expected)
    # and against TensorFlow itself, not only the tf2onnx conversion
    tf_out = keras_model(inputs["input:0"]).numpy()
    np.testing.assert_allclose(actual[0], tf_out, atol=1e-5, rtol=1e-4)


def test_pb_explicit_input_output_names(pb_model, tmp_path):
    imported, *_ = compile_and_run(
        pb_model, tmp_path, overrides=["input:0:1x32x32x3"], input_names=["input"], output_names=["probs"]
    )
    assert imported.output_names == ["probs:0"]


def test_pb_unknown_node_name_is_reported(pb_model):
    from tvmgen.core.errors import ModelError

    with pytest.raises(ModelError, match="no node named nope:0"):
        frontends.load(pb_model, [], input_names=["nope"], output_names=["probs"])


def test_savedmodel_matches_tensorflow(saved_model, keras_model, tmp_path):
    imported, inputs, actual, expected = compile_and_run(saved_model, tmp_path)
    assert imported.format == "savedmodel"
    assert_close(actual, expected)
    np.testing.assert_allclose(actual[0], keras_model(inputs[imported.inputs[0].name]).numpy(), atol=1e-5)


def test_host_runner_inputs_in_place_or_copied_give_the_same_outputs(tmp_path):
    """HostModel.run uses a writable CPU array in place (DLPack; any alignment, see test_inputs)
    and copies a read-only one into a tensor it reuses: every kind of input gives onnxruntime's
    outputs, a reused tensor never serves a stale input, and the caller's array is left untouched."""
    path = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv.onnx")
    imported, _, _, _ = compile_and_run(path, tmp_path)
    model = HostModel(tmp_path / "artifact")
    spec = imported.inputs[0]
    rng = np.random.default_rng(5)

    def aligned(values):
        raw = np.empty(values.size + 16, np.float32)
        start = (-raw.ctypes.data % 64) // 4
        a = raw[start : start + values.size].reshape(values.shape)
        a[...] = values
        return a

    def unaligned(values):
        raw = np.empty(values.size + 16, np.float32)
        start = (-raw.ctypes.data % 64) // 4 + 1  # 4 bytes past a 64-byte boundary
        a = raw[start : start + values.size].reshape(values.shape)
        a[...] = values
        return a

    for make in (aligned, unaligned, aligned, unaligned):  # twice: the reused tensor gets new values
        x = make(rng.standard_normal(spec.shape).astype(np.float32))
        for array in (x, np.array(x, copy=True)):
            before = array.copy()
            if make is unaligned and array is not x:
                array.flags.writeable = False  # read-only: copied too
            (actual,) = model.run({spec.name: array})
            (expected,) = imported.reference({spec.name: before})
            np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)
            np.testing.assert_array_equal(array, before)
    assert (aligned(np.zeros(4, np.float32)).ctypes.data % 64, unaligned(np.zeros(4, np.float32)).ctypes.data % 64) == (
        0,
        4,
    )


def test_pytorch_importer_failure_names_the_node_and_its_inputs(tvmgen, tmp_path):
    """A converter of TVM's that raises (index_put with fewer index tensors than the data's rank): the
    error names the FX node, its operator and its inputs' dtypes and shapes; exit 2, nothing written."""
    import torch

    class AddAtRow(torch.nn.Module):
        def forward(self, x):
            return x.index_put((torch.tensor([0]),), torch.tensor(1.0), accumulate=True)

    path = tmp_path / "index_put.pt2"
    torch.export.save(torch.export.export(AddAtRow(), (torch.randn(2, 3),)), str(path))
    r = tvmgen("compile", path, "-o", tmp_path / "out")
    assert r.returncode == 2, r.output
    assert "at node index_put (index_put.default; inputs: x float32[2x3]" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
