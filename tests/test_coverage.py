"""Model coverage: operators and model shapes real mobile models use, each checked against its
reference runtime (onnxruntime for ONNX), and scheduled rather than left as TVM lowers them."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import onnx_model, save_onnx
from test_frontends import assert_close, compile_and_run
from test_schedules import prepared_and_scheduled


def _vi(name, shape):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _w(rng, name, *shape):
    from onnx import numpy_helper

    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


# name -> (input channels, output channels, H, W, ConvTranspose attributes, a Conv in front?)
CONV_TRANSPOSE = {
    "k4_s2_p1_after_conv": (8, 6, 7, 9, dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]), True),
    "k3_s2_p1_outpad1": (5, 7, 6, 5, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                          output_padding=[1, 1]), True),
    "k2_s2_first_op": (3, 4, 5, 6, dict(kernel_shape=[2, 2], strides=[2, 2]), False),
    "k3_s1_dilated2": (4, 4, 6, 6, dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]), True),
    "k3_s3_asymmetric": (4, 3, 4, 5, dict(kernel_shape=[2, 3], strides=[3, 2], pads=[0, 1, 1, 0]), False),
    "grouped_2": (8, 6, 6, 6, dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1], group=2), True),
    "depthwise": (8, 8, 6, 6, dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1], group=8), True),
}


def conv_transpose_model(name: str):
    """A ConvTranspose (with bias) and a ReLU, behind a 3x3 convolution when the case says so:
    then it reads the NHWC activations of tvmgen's layout conversion, else the NCHW input."""
    from onnx import helper

    cin, cout, h, w, attrs, conv_first = CONV_TRANSPOSE[name]
    rng = np.random.default_rng(11)
    group = attrs.get("group", 1)
    nodes, inits, src = [], [_w(rng, "T", cin, cout // group, *attrs["kernel_shape"]), _w(rng, "TB", cout)], "x"
    if conv_first:
        nodes.append(helper.make_node("Conv", ["x", "C"], ["c"], pads=[1, 1, 1, 1]))
        inits.append(_w(rng, "C", cin, 3, 3, 3))
        src = "c"
    nodes += [helper.make_node("ConvTranspose", [src, "T", "TB"], ["t"], **attrs),
              helper.make_node("Relu", ["t"], ["y"])]
    return onnx_model(nodes, [_vi("x", [1, 3 if conv_first else cin, h, w])], [_vi("y", None)], inits)


@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSE))
def test_conv_transpose_matches_onnxruntime_and_is_scheduled(name, tmp_path):
    path = save_onnx(conv_transpose_model(name), tmp_path / f"{name}.onnx")
    mod, done, left = prepared_and_scheduled(path)
    assert not [f for f in left if "conv2d_transpose" in f], f"left unscheduled: {left}"
    assert [f for f in done if "conv2d_transpose" in f], done
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert actual[0].shape == expected[0].shape
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_conv_transpose_does_no_multiply_by_zero(tmp_path):
    """A stride-2 4x4 transposed convolution reads 2x2 taps per output, not TOPI's 4x4 over a
    zero-dilated input: the reduction of its kernel spans 2 x 2 x C_in, a quarter of TOPI's."""
    import tvm
    from tvm import relax, s_tir

    from tvmgen import frontends
    from tvmgen.compiler import cpu
    from tvmgen.compiler.platforms import PLATFORMS, make_target

    path = save_onnx(conv_transpose_model("k4_s2_p1_after_conv"), tmp_path / "m.onnx")
    imported = frontends.load(path, [])
    mod = relax.transform.BindParams("main", dict(zip(imported.mod["main"].params[1:], imported.params)))(imported.mod)
    target = make_target(PLATFORMS["host"].cpu_target())
    with target:
        mod = tvm.transform.Sequential(cpu.prepare_passes(target))(mod)
    extents = {}
    for gv, func in mod.functions.items():
        if "conv2d_transpose" in gv.name_hint and isinstance(func, tvm.tirx.PrimFunc):
            sch = s_tir.Schedule(func)
            for block in sch.get_child_blocks(sch.get_sblock("root")):
                ivs = sch.get(block).iter_vars
                reduce = [int(iv.dom.extent) for iv in ivs if int(iv.iter_type) == 2]
                if reduce:
                    extents[gv.name_hint] = reduce
    assert list(extents.values()) == [[2, 2, 8]], extents


# What TVM 0.27 printed when tvmgen's layout conversion left a transposed convolution in NHWC
# (recorded verbatim from a build of a text-detection model; the user saw only the last line).
RECORDED_CODEGEN_ERROR = (
    "CodeGenVM cannot emit this Relax operator directly. Run the appropriate lowering pass, or route the "
    "operator to an external codegen before VM codegen.\n"
    "Offending call:\n"
    'R.nn.conv2d_transpose(alloc, metadata["ir.GenericConst"][0], strides=[2, 2], padding=[1, 1, 1, 1], '
    'output_padding=[0, 0], dilation=[1, 1], groups=1, data_layout="NHWC", kernel_layout="IOHW", '
    'out_layout="NHWC", out_dtype=None)\n'
    "# Metadata omitted. Use show_meta=True in script() method to show it.")


def test_tvm_error_summary_names_the_operator_and_the_node():
    from tvmgen.compiler.build import tvm_error_summary

    nodes = [("Conv", "backbone/conv1"), ("ConvTranspose", "head/up1"), ("ConvTranspose", "head/up2")]
    text = tvm_error_summary(RuntimeError(RECORDED_CODEGEN_ERROR), nodes)
    assert text.startswith("RuntimeError: CodeGenVM cannot emit this Relax operator directly."), text
    assert "operator R.nn.conv2d_transpose" in text
    assert "from the model's ConvTranspose node 'head/up1', 'head/up2'" in text
    assert "Metadata" not in text
    # the TFLite names of the operator are recognised as well
    tflite = tvm_error_summary(RuntimeError(RECORDED_CODEGEN_ERROR), [("TRANSPOSE_CONV", "up/out")])
    assert "from the model's TRANSPOSE_CONV node 'up/out'" in tflite


def test_a_pipeline_step_that_breaks_a_model_falls_back_instead_of_failing(tmp_path, monkeypatch):
    """With tvmgen's transposed-convolution lowering taken away, the NHWC layout conversion
    leaves an operator nothing lowers (the bug a text-detection model hit): the build must fall
    back (here: without the layout conversion), say why, and still match onnxruntime."""
    from tvm import relax

    from tvmgen import frontends
    from tvmgen.compiler import build, cpu
    from tvmgen.compiler.platforms import PLATFORMS
    from tvmgen.frontends.base import random_inputs
    from tvmgen.runner import HostModel

    def tvm_legalize():
        return [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]

    monkeypatch.setattr(cpu, "legalize_passes", tvm_legalize)
    path = save_onnx(conv_transpose_model("k4_s2_p1_after_conv"), tmp_path / "m.onnx")
    imported = frontends.load(path, [])
    report: dict = {}
    out = tmp_path / "artifact"
    build.compile_to_artifact(imported, build.BuildOptions(PLATFORMS["host"], "cpu"), out, True, {"name": "m"})
    build.build_executable(imported, build.BuildOptions(PLATFORMS["host"], "cpu"), report)
    fb = report["fallback"]
    assert fb["failed"] == "tvmgen's CPU pipeline"
    assert fb["pipeline"] == "tvmgen's CPU pipeline without the NHWC layout conversion"
    assert "operator R.nn.conv2d_transpose" in fb["cause"] and "ConvTranspose node" in fb["cause"]
    assert report["scheduled"], report  # the other kernels still get tvmgen's schedules
    inputs = random_inputs(imported.inputs, seed=1)
    assert_close(HostModel(out).run(inputs), imported.reference(inputs))
