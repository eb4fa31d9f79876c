"""ONNX operators expanded by frontends/onnx_ops_nn.py and onnx_ops_attention.py (Attention, LayerNormalization,
RotaryEmbedding, CumProd, Col2Im), checked on onnx's own backend node test cases: each case's model compiled in-process
for host/cpu and run by the Python runner, its outputs compared with the ones the case carries as onnx's
backend runner compares them (same shape and dtype, rtol 1e-3, atol 1e-7; the float16 Attention cases
too: tvmgen computes float16 attention in float32, as onnxruntime does). The cases' own graph inputs that
an expansion needs as constants (CumProd's axis, Col2Im's image and block shapes) are bound as
``--const`` binds them.

The suite takes one case per attribute combination; run the file as a script for every case of these
operators (and of CumSum and CastLike, left to TVM's converters), with onnxruntime's result beside each:

    .venv/bin/python tests/frontends/test_onnx_ops_nn.py [OP ...]
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings

import numpy as np
import pytest

# the module of onnx.backend.test.case.node that writes each operator's cases
CASE_MODULES = {
    "Attention": "attention",
    "LayerNormalization": "layernormalization",
    "RotaryEmbedding": "rotaryembedding",
    "CumProd": "cumprod",
    "Col2Im": "col2im",
    "CumSum": "cumsum",
    "CastLike": "castlike",
}
# the cases' graph inputs bound at compile time (--const): the expansions need them as constants
CONSTS = {"CumProd": ("axis",), "CumSum": ("axis",), "Col2Im": ("image_shape", "block_shape")}


@functools.cache
def node_cases(op: str) -> dict:
    """onnx's backend node test cases of ``op`` (not the ``_expanded`` function-body ones), by name. Only
    ``op``'s case module is run (collect_testcases() runs them all: 10 s more), again if some code in
    this process imported it before."""
    import onnx.backend.test.case.node as nc

    full = f"onnx.backend.test.case.node.{CASE_MODULES[op]}"
    start, target, names = len(nc._NodeTestCases), nc._TargetOpType, dict(nc._existing_names)
    nc._TargetOpType = None  # type: ignore[assignment]
    nc._existing_names.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cases' NumPy overflows on purpose (CastLike's saturation)
            if full in sys.modules:
                importlib.reload(sys.modules[full])
            else:
                importlib.import_module(full)
    finally:
        nc._TargetOpType = target  # type: ignore[assignment]
        nc._existing_names.clear()
        nc._existing_names.update(names)
    cases = nc._NodeTestCases[start:]
    del nc._NodeTestCases[start:]
    return {c.name: c for c in cases if "_expanded" not in c.name and any(n.op_type == op for n in c.model.graph.node)}


def _array(value):
    import onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def case_data(case) -> tuple[dict, list]:
    inputs, outputs = case.data_sets[0]
    return (
        {vi.name: _array(v) for vi, v in zip(case.model.graph.input, inputs)},
        [_array(v) for v in outputs],
    )


def compare(expected: list, got: list, rtol: float, atol: float) -> None:
    """onnx's backend runner: the count, then each output's shape, dtype and values."""
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"output {i}: shape {g.shape}, expected {e.shape}"
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype}, expected {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def compile_model(path, values: dict, out, consts=()):
    """(the imported model, the compiled host/cpu model): ``path`` imported with every input's shape fixed
    from ``values``, the inputs named in ``consts`` bound to their values."""
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.frontends.base import InputOverride
    from tvmgen.runtime.runner import HostModel

    bound = {n: ",".join(str(x) for x in values[n].ravel().tolist()) for n in consts if n in values}
    overrides = [InputOverride(n, tuple(v.shape), None) for n, v in values.items() if n not in bound]
    imported = frontends.load(path, overrides, consts=bound or None)
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), out, True, {"name": "model"})
    return imported, HostModel(out)


def run_case(op: str, name: str, tmp_path):
    """Compile and run the case; returns the imported model (its outputs checked)."""
    import onnx

    case = node_cases(op)[name]
    values, expected = case_data(case)
    path = tmp_path / f"{name}.onnx"
    onnx.save(case.model, str(path))
    consts = CONSTS.get(op, ())
    imported, host = compile_model(path, values, tmp_path / name, consts)
    got = host.run({n: v for n, v in values.items() if n not in consts})
    compare(expected, got, case.rtol, case.atol)
    return imported


def fused_layer_norm(imported) -> bool:
    return "R.nn.layer_norm" in imported.mod.script()


# ----------------------------------------------------------------------------- Attention

# One case per attribute combination (the file run as a script takes all 93; the 73 onnxruntime passes
# and 15 more pass, the other 5 have bfloat16 inputs, which tvmgen does not take).
ATTENTION = [
    "test_attention_4d",
    "test_attention_3d_gqa_scaled",  # 3-D, grouped-query, scale
    "test_attention_3d_diff_heads_with_past_and_present",  # 3-D, V's head size, KV cache, float mask
    "test_attention_4d_gqa_with_past_and_present_fp16",  # float16, grouped-query, KV cache
    "test_attention_4d_attn_mask_bool_4d",
    "test_attention_4d_attn_mask_3d_causal",  # float mask + causal
    "test_attention_4d_softcap_neginf_mask_poison",  # softcap before a -inf mask
    "test_attention_4d_with_qk_matmul",  # qk_matmul_output modes 0 ...
    "test_attention_4d_with_qk_matmul_softcap",  # 1
    "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",  # 2, causal after a cache
    "test_attention_4d_with_qk_matmul_softmax",  # 3
    "test_attention_24_qk_matmul_output_mode3_softmax_precision",  # softmax in float32, a fully masked row
    "test_attention_causal_boolmask_nan_robustness",  # causal + bool mask: a row with no key gives zeros
    "test_attention_4d_diff_heads_mask4d_padded_kv",  # a mask shorter than the keys, nonpad_kv_seqlen
    "test_attention_4d_gqa_causal_nonpad_decode_fp16",  # causal offset from nonpad_kv_seqlen at run time
    "test_attention_4d_causal_nonpad_negative_offset_structural_empty",
    "test_attention_local_window_ext_cache_rank3_head_mask",  # opset 25: left window, a per-head mask
    "test_attention_bidirectional_window",
]


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_node_cases(name, tmp_path):
    run_case("Attention", name, tmp_path)


def test_attention_without_its_head_counts_is_refused_by_name(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from tvmgen import frontends
    from tvmgen.core.errors import ModelError

    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], name="attn0", q_num_heads=2)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8]) for n in "QKV"]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    path = tmp_path / "attention.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10), str(path))
    with pytest.raises(ModelError, match=r"Attention node 'attn0'.*kv_num_heads") as err:
        frontends.load(path, [])
    assert "export the attention with q_num_heads and kv_num_heads" in str(err.value)

    node.ClearField("attribute")  # 4-D: 3 query heads cannot share 2 key/value heads
    del graph.node[:]
    graph.node.append(node)
    shapes = {"Q": [1, 3, 4, 8], "K": [1, 2, 4, 8], "V": [1, 2, 4, 8]}
    del graph.input[:]
    graph.input.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items())
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10), str(path))
    with pytest.raises(ModelError, match="3 query heads do not group over 2 key/value heads"):
        frontends.load(path, [])


# ----------------------------------------------------------------------------- LayerNormalization

LAYER_NORM = [
    "test_layer_normalization_4d_axis0",
    "test_layer_normalization_4d_axis_negative_2",
    "test_layer_normalization_3d_axis1_epsilon",
    "test_layer_normalization_2d_axis_negative_1",
]


@pytest.mark.parametrize("name", LAYER_NORM)
def test_layer_normalization_node_cases_with_mean_and_inv_std_dev(name, tmp_path):
    assert not fused_layer_norm(run_case("LayerNormalization", name, tmp_path))  # expanded: 3 outputs


def test_layer_normalization_with_only_y_stays_tvms_fused_op(tmp_path):
    """The common form (Y alone, the scale of the normalized shape) is left to TVM's converter: one fused
    layer_norm, and the case's Y."""
    import onnx

    case = node_cases("LayerNormalization")["test_layer_normalization_4d_axis_negative_2"]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.graph.node[0].output[1:] = ["", ""]
    del model.graph.output[1:]
    values, expected = case_data(case)
    path = tmp_path / "y_only.onnx"
    onnx.save(model, str(path))
    imported, host = compile_model(path, values, tmp_path / "y_only")
    assert fused_layer_norm(imported)
    compare(expected[:1], host.run(values), case.rtol, case.atol)


def test_layer_normalization_with_a_broadcast_scale_is_expanded(tmp_path):
    """ONNX broadcasts the scale and bias to the normalized shape; TVM's converter takes only that shape
    (ValueError): expanded, checked against onnxruntime."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    init = [
        numpy_helper.from_array(rng.standard_normal([5]).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal([4, 1]).astype(np.float32), "bias"),
    ]
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-2, epsilon=1e-3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    path = tmp_path / "broadcast.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    values = {"x": (rng.standard_normal([2, 3, 4, 5]) * 3 + 1).astype(np.float32)}
    imported, host = compile_model(path, values, tmp_path / "broadcast")
    assert not fused_layer_norm(imported)
    compare(imported.reference(values), host.run(values), 1e-4, 1e-5)


# ----------------------------------------------------------------------------- RotaryEmbedding, CumProd, Col2Im

ROTARY = [
    "test_rotary_embedding",
    "test_rotary_embedding_3d_input",
    "test_rotary_embedding_with_interleaved_rotary_dim",
    "test_rotary_embedding_no_position_ids_rotary_dim",
]
CUMPROD = [
    "test_cumprod_1d_reverse_exclusive",
    "test_cumprod_2d_negative_axis",
    "test_cumprod_2d_int32",
]
COL2IM = ["test_col2im_pads", "test_col2im_5d", "test_col2im_dilations", "test_col2im_strides"]


@pytest.mark.parametrize(
    "op, name",
    [("RotaryEmbedding", n) for n in ROTARY] + [("CumProd", n) for n in CUMPROD] + [("Col2Im", n) for n in COL2IM],
)
def test_node_cases(op, name, tmp_path):
    run_case(op, name, tmp_path)


@pytest.mark.parametrize(
    "op, name, fix",
    [
        ("CumProd", "test_cumprod_1d", "--const axis=AXIS"),
        ("Col2Im", "test_col2im", "--const image_shape=SIZES --const block_shape=SIZES"),
    ],
)
def test_shapes_known_only_at_run_time_are_refused_with_the_const_to_bind(op, name, fix, tmp_path):
    import onnx

    from tvmgen import frontends
    from tvmgen.core.errors import ModelError
    from tvmgen.frontends.base import InputOverride

    case = node_cases(op)[name]
    values, _ = case_data(case)
    path = tmp_path / f"{name}.onnx"
    onnx.save(case.model, str(path))
    with pytest.raises(ModelError, match=f"{op} node") as err:
        frontends.load(path, [InputOverride(n, tuple(v.shape), None) for n, v in values.items()])
    assert fix in str(err.value)


def test_a_users_expansion_wins_over_tvmgens_whichever_is_loaded_first():
    from tvmgen.frontends import custom_ops, onnx_ops_nn

    saved = dict(custom_ops.ONNX)
    try:
        custom_ops.ONNX["Col2Im"] = custom_ops.Entry("Col2Im", lambda node, ctx: [node], source="/home/me/my_ops.py")
        importlib.reload(onnx_ops_nn)  # tvmgen's registrations run again, after the user's file
        assert custom_ops.ONNX["Col2Im"].source == "/home/me/my_ops.py"
        assert custom_ops.ONNX["LayerNormalization"].fn is onnx_ops_nn.layer_normalization
    finally:
        custom_ops.ONNX.clear()
        custom_ops.ONNX.update(saved)


# ----------------------------------------------------------------------------- every case, as a script


def _onnxruntime_passes(case) -> bool:
    import onnxruntime as ort

    values, expected = case_data(case)
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        compare(expected, sess.run(None, values), case.rtol, case.atol)
    except Exception:
        return False
    return True


def main(ops: list[str]) -> int:
    import contextlib
    import io
    import tempfile
    import time
    from pathlib import Path

    t0 = time.perf_counter()
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for op in ops:
            passed = ort_passed = both = 0
            cases = node_cases(op)
            for name, case in cases.items():
                ort_ok = _onnxruntime_passes(case)
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        run_case(op, name, Path(tmp))
                    error = ""
                except Exception as e:
                    error = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
                ok = not error
                passed, ort_passed, both = passed + ok, ort_passed + ort_ok, both + (ok and ort_ok)
                print(f"{'pass' if ok else 'FAIL'} (onnxruntime {'pass' if ort_ok else 'fail'}) {name} {error}")
            summary.append(
                f"{op}: tvmgen passes {both} of the {ort_passed} cases onnxruntime passes; {passed} of all {len(cases)}"
            )
    print("\n".join(summary), f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(CASE_MODULES)))
