"""1-D convolutions as 2-D ones of height 1, so they get the CPU pipeline's NHWC layout and its
convolution schedules.

TVM lowers ``relax.nn.conv1d`` (ONNX ``Conv`` with a 1-D kernel: audio front ends, keyword
spotters) as it is, in the model's NCW layout, where the default schedules cannot vectorise the
output channels: the zoo's audio model's 40 -> 64 channel, width-3 convolution ran at 18 GFLOP/s
and took a quarter of the model's time. As ``conv2d`` on ``[N, C, 1, W]`` it is converted to NHWC
with the other convolutions and tiled like them.
"""

from __future__ import annotations


def conv1d_as_conv2d(mod):
    """``conv1d(x, w)`` (NCW, OIW) -> ``squeeze(conv2d(expand_dims(x, 2), expand_dims(w, 2)), 2)``."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    from tvmgen.compiler.rewrites import rewrite_functions

    x, w = wildcard(), wildcard()
    pattern = is_op("relax.nn.conv1d")(x, w)

    def rewrite(expr, matches):
        a = expr.attrs
        if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout)) != ("NCW", "OIW", "NCW"):
            return expr
        out_dtype = str(a.out_dtype) if a.out_dtype is not None and str(a.out_dtype) not in ("", "void") else None
        y = relax.op.nn.conv2d(
            relax.op.expand_dims(matches[x], 2),
            relax.op.expand_dims(matches[w], 2),
            strides=[1, int(a.strides[0])],
            padding=[0, int(a.padding[0]), 0, int(a.padding[1])],
            dilation=[1, int(a.dilation[0])],
            groups=int(a.groups),
            data_layout="NCHW",
            kernel_layout="OIHW",
            out_dtype=out_dtype,
        )
        return relax.op.squeeze(y, [2])

    return rewrite_functions(mod, pattern, rewrite)


def Conv1dAsConv2d():  # noqa: N802 - a pass, named like TVM's
    from tvmgen.compiler.rewrites import module_pass

    return module_pass("TvmgenConv1dAsConv2d", conv1d_as_conv2d)
