"""Issue 47, TFLite: import by mechanism. Operands computed from constants and shapes are folded with
LiteRT before TVM's importer sees them; EXPAND_DIMS converts; a dynamic batch is taken at its stored
size; a failure names the operator and the operand that was not constant; where TVM's TFLite importer
still fails, tf2onnx and the ONNX path import the model, checked against LiteRT on the original."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def _convert(fn, path: Path) -> Path:
    import tensorflow as tf

    path.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn).convert())
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tflite_computed_slice", "tflite_dynamic_batch"])
def test_zoo_model_compiles_and_matches_litert(name, tmp_path, compiled):
    import zoo

    def shared_build(path, flags, platform, device):  # the session's build
        assert not flags
        return compiled(path, platform, device, name=name)

    row = zoo.run_one(name, ["host"], tmp_path, runs=1, runtimes={}, compile=shared_build)
    cell = row["targets"]["host"]
    assert cell["status"] == "ok", cell
    assert cell["max_error"] <= cell["tolerance"]


def test_computed_operands_are_folded_and_the_model_reshaped_at_the_input_shapes(tmp_path):
    """The zoo's computed slice at batch 3: SHAPE, STRIDED_SLICE, FLOOR_DIV and PACK are gone, their
    results are constants (the RESHAPE target and the slice bounds), every tensor has its batch-3 shape."""
    from ai_edge_litert import schema_py_generated as fb

    import zoo
    import zoo_tflite
    from tvmgen.frontends.tflite_fold import fold

    path = zoo.build("tflite_computed_slice", tmp_path)[0]
    before = {name for name, _, _ in zoo_tflite.tflite_operators(path.read_bytes())}
    result = fold(path.read_bytes(), [(3, 64, 8)], ["float32"])
    after = zoo_tflite.tflite_operators(result.model_bytes)
    assert {"SHAPE", "FLOOR_DIV", "PACK"} <= before and not {"SHAPE", "FLOOR_DIV", "PACK"} & {n for n, _, _ in after}
    assert [n for n, _, _ in after].count("STRIDED_SLICE") == 2 and "EXPAND_DIMS" in {n for n, _, _ in after}
    sub = fb.Model.GetRootAsModel(result.model_bytes, 0).Subgraphs(0)
    values = {}
    for t in result.folded:
        tensor = sub.Tensors(t)
        buf = fb.Model.GetRootAsModel(result.model_bytes, 0).Buffers(tensor.Buffer())
        values[tensor.Name().decode()] = np.frombuffer(buf.DataAsNumpy().tobytes(), np.int32).tolist()
    # the tokens' RESHAPE target [batch, -1, 32]; the bound between the halves: [0, n = 32 // 2] (begin
    # of one STRIDED_SLICE, end of the other: the batch axis is masked)
    assert sorted(values.values()) == [[0, 16], [3, -1, 32]], values
    shapes = {sub.Tensors(i).Name().decode(): list(sub.Tensors(i).ShapeAsNumpy()) for i in range(sub.TensorsLength())}
    assert shapes["x"] == [3, 64, 8] and shapes["Identity"] == [3, 16, 32, 4]
    assert "folded 2 computed operand(s) to constants with LiteRT at the input shape(s) 3x64x8" in result.notes[0]


def _fp16_dense(path: Path) -> Path:
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((16,), batch_size=1), tf.keras.layers.Dense(32)])
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_types = [tf.float16]
    path.write_bytes(conv.convert())
    return path


def test_folding_leaves_a_model_with_nothing_to_fold_byte_identical(tflite_model, tmp_path, monkeypatch):
    """Fixed shapes and nothing computed from constants (fp16 weights through DEQUANTIZE are never
    folded): the same bytes, and LiteRT never runs."""
    from tvmgen.frontends import tflite_fold

    def no_run(*_):
        raise AssertionError("LiteRT ran")

    monkeypatch.setattr(tflite_fold, "_run_litert", no_run)
    for path in (tflite_model, _fp16_dense(tmp_path / "fp16.tflite")):
        buf = path.read_bytes()
        graph = tflite_fold.Graph(buf)
        shapes = [graph.shapes[t] for t in graph.inputs]
        result = tflite_fold.fold(buf, shapes, ["float32"] * len(shapes))
        assert result.model_bytes is buf and not result.notes and not result.folded
    assert "DEQUANTIZE" in {name for name, _, _ in graph.ops}


def _litert(path: Path, inputs: dict) -> list:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], inputs[d["name"]])
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def _expand_dims_model(axis: int) -> bytes:
    """x [2, 3] -> EXPAND_DIMS(x, axis) -> ADD 1.0, built with the flatbuffer object API."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    out_shape = list(np.expand_dims(np.zeros((2, 3)), axis).shape)
    model, sub = fb.ModelT(), fb.SubGraphT()
    model.version, model.buffers, sub.tensors, sub.operators, model.operatorCodes = 3, [fb.BufferT()], [], [], []

    def tensor(name, shape, dtype=fb.TensorType.FLOAT32, value=None):
        t = fb.TensorT()
        t.name, t.shape, t.type, t.buffer = name, shape, dtype, 0
        if value is not None:
            b = fb.BufferT()
            b.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
            model.buffers.append(b)
            t.buffer = len(model.buffers) - 1
        sub.tensors.append(t)
        return len(sub.tensors) - 1

    x = tensor("x", [2, 3])
    a = tensor("axis", [], fb.TensorType.INT32, np.array(axis, np.int32))
    e = tensor("expanded", out_shape)
    one = tensor("one", [], value=np.array(1.0, np.float32))
    y = tensor("y", out_shape)
    for code, ins, outs in ((fb.BuiltinOperator.EXPAND_DIMS, [x, a], [e]), (fb.BuiltinOperator.ADD, [e, one], [y])):
        c = fb.OperatorCodeT()
        c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
        model.operatorCodes.append(c)
        op = fb.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = len(model.operatorCodes) - 1, ins, outs
        sub.operators.append(op)
    sub.inputs, sub.outputs, model.subgraphs = [x], [y], [sub]
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.mark.parametrize("axis", [0, 2, -1, -3])
def test_expand_dims_with_any_axis_matches_litert(axis, tmp_path, compiled):
    """TVM's EXPAND_DIMS converter called expand_dims with three arguments; tvmgen's takes the axis,
    negative counting from the end of the output."""
    from tvmgen.runtime.runner import HostModel

    path = tmp_path / f"expand{axis}.tflite"
    path.write_bytes(_expand_dims_model(axis))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (expected,) = _litert(path, {"x": x})
    (actual,) = HostModel(compiled(path)).run({"x": x})
    assert actual.shape == expected.shape == np.expand_dims(x, axis).shape
    np.testing.assert_array_equal(actual, expected)


def _slice_from_input(path: Path) -> Path:
    """SLICE whose begin is packed from an int input: computed from a value, not foldable."""
    import tensorflow as tf

    @tf.function(
        input_signature=[tf.TensorSpec([1, 16], tf.float32, name="x"), tf.TensorSpec([], tf.int32, name="start")]
    )
    def f(x, start):
        return tf.slice(x, tf.stack([0, start]), [1, 4])

    return _convert(f, path)


@pytest.mark.slow
def test_an_operand_computed_from_an_input_value_is_named(tvmgen, tmp_path):
    """TVM's SLICE converter reads begin as a constant; begin depends on the input `start`: the error names
    the operator (type, index, output), its operands (shapes, dtypes) and which one is not constant and
    why; exit 2, nothing written. (tf2onnx's route imports it, with an output of unknown shape: refused.)"""
    path = _slice_from_input(tmp_path / "slice.tflite")
    r = tvmgen("compile", path, "-o", tmp_path / "out")
    assert r.returncode == 2, r.output
    err = " ".join(r.stderr.split())  # the console wraps long lines
    assert "TVM's TFLite importer failed on operator #1 SLICE (output 'Identity')" in err, err
    assert "reads operand 1 ('stack') as a constant, but it is computed by #0 PACK at run time" in err
    assert "from the value of the model's input(s) 'start'" in err
    assert "operands: 0: 'x' 1x16 float32 (a model input); 1: 'stack' 2 int32 (NOT constant" in err
    assert "2: 'Slice/size' 2 int32 (constant)" in err
    assert "fix:" in err and "tvmgen also tried tf2onnx" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_dynamic_batch_is_taken_at_the_stored_size_and_input_chooses_another(tvmgen, tmp_path):
    import zoo
    from tvmgen.core import artifact

    path = zoo.build("tflite_dynamic_batch", tmp_path)[0]
    name = "serving_default_samples:0"
    r = tvmgen("compile", path, "-o", tmp_path / "one")
    assert r.returncode == 0, r.output
    note = f"input '{name}' has dynamic dimensions (?x16000): taken at the stored size 1x16000, as LiteRT runs it"
    out = " ".join(r.output.split())  # the console wraps long lines
    assert note in out and f"(another size: --input {name}:Nx16000)" in out
    assert artifact.load(tmp_path / "one").inputs[0].shape == (1, 16000)
    path = zoo.build("tflite_computed_slice", tmp_path)[0]
    r = tvmgen("compile", path, "--input", "x:3x64x8", "--check", "-o", tmp_path / "three")
    assert r.returncode == 0, r.output
    assert "dynamic dimensions" not in r.output and "at the input shape(s) 3x64x8" in " ".join(r.output.split())
    assert "ok Identity: max abs error" in r.output and "FAIL" not in r.output
    manifest = artifact.load(tmp_path / "three")
    assert manifest.inputs[0].shape == (3, 64, 8) and manifest.outputs[0].shape == (3, 16, 32, 4)


def test_a_dynamic_dimension_without_a_stored_size_is_still_refused(tmp_path):
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    import zoo
    from tvmgen import frontends
    from tvmgen.core.errors import InputError

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(zoo.build("tflite_dynamic_batch", tmp_path)[0].read_bytes()))
    sub = model.subgraphs[0]
    sub.tensors[sub.inputs[0]].shape = [0, 16000]
    b = flatbuffers.Builder(1 << 16)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    path = tmp_path / "no_size.tflite"
    path.write_bytes(bytes(b.Output()))
    with pytest.raises(InputError) as e:
        frontends.load(path, [])
    assert "has dynamic dimensions (?x16000)" in e.value.message


def _log_spectrogram(path: Path) -> Path:
    """|STFT| in log: RFFT2D, then a RESHAPE of its complex output, which TVM 0.27's TFLite importer
    gets wrong (its complex tensors carry a trailing pair axis the RESHAPE target lacks)."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 1024], tf.float32, name="x")])
    def f(x):
        return tf.math.log(tf.abs(tf.signal.stft(x, 256, 128, 256)) + 1e-3)

    return _convert(f, path)


@pytest.mark.slow
def test_the_second_route_imports_what_tvms_tflite_importer_cannot(tvmgen, tmp_path):
    """A log spectrogram: TVM's TFLite importer fails on the RESHAPE after RFFT2D; tf2onnx's TFLite
    route and the ONNX path import it, said in one line; --check compares with LiteRT on the .tflite."""
    path = _log_spectrogram(tmp_path / "spectrogram.tflite")
    r = tvmgen("compile", path, "--check", "-o", tmp_path / "out")
    assert r.returncode == 0, r.output
    out = " ".join(r.output.split())  # the console wraps long lines
    assert out.count("imported instead through tf2onnx") == 1, r.output
    import tf2onnx

    assert (
        "TVM's TFLite importer failed on operator #6 RESHAPE (output 'stft/rfft5'): imported instead through "
        f"tf2onnx {tf2onnx.__version__} (TFLite -> ONNX opset 17) and TVM's ONNX importer; --check still runs "
        "LiteRT on the original .tflite"
    ) in out
    assert "Checking against LiteRT" in r.output and "ok Identity: max abs error" in r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["model"]["format"] == "tflite"
    assert [i["name"] for i in manifest["inputs"]] == ["x"] and [o["name"] for o in manifest["outputs"]] == ["Identity"]
    assert manifest["outputs"][0]["shape"] == [1, 7, 129]


def test_a_model_litert_cannot_run_is_not_folded_and_that_is_said_once(tmp_path):
    """The computed slice with its LOGISTIC made an unknown custom operator: LiteRT cannot run it, so
    nothing is folded, the bytes stay, one note says why; an error on a computed operand says it too."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    import zoo
    from tvmgen.frontends.tflite_fold import fold, why_not_constant

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(zoo.build("tflite_computed_slice", tmp_path)[0].read_bytes()))
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.CUSTOM
    code.customCode, code.version = "NotInLiteRT", 1
    model.operatorCodes.append(code)
    for op in model.subgraphs[0].operators:
        if model.operatorCodes[op.opcodeIndex].builtinCode == fb.BuiltinOperator.LOGISTIC:
            op.opcodeIndex, op.builtinOptionsType, op.builtinOptions = len(model.operatorCodes) - 1, 0, None
    b = flatbuffers.Builder(1 << 16)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    buf = bytes(b.Output())
    result = fold(buf, [(1, 64, 8)], ["float32"])
    assert result.model_bytes is buf and not result.folded
    assert len(result.notes) == 1 and result.notes[0].startswith(
        "not folded: 2 computed operand(s) TVM's importer may need as constants, because LiteRT cannot run the model"
    )
    pack = next(i for i, (name, _, _) in enumerate(result.graph.ops) if name == "PACK")
    reshape_target = result.graph.ops[pack][2][0]  # the first PACK makes the tokens' RESHAPE target
    assert "not folded because LiteRT cannot run the model" in why_not_constant(result, reshape_target)
