"""compiler/conv_transpose.py: a constant kernel's phases are computed at lowering with NumPy (no weight
kernel left for a pipeline to fold or run), a kernel that is an input gets the TE rearrangement; both give
NumPy's transposed convolution, for every stride, padding, dilation, group count and kernel layout."""

from __future__ import annotations

import numpy as np
import pytest

# name -> (input channels, output channels, H, W, strides, padding (top, left, bottom, right), output padding,
#          dilation, groups, kernel layout)
CASES = {
    "k4_s2_p1": (6, 4, 5, 6, (2, 2), (1, 1, 1, 1), (0, 0), (1, 1), 1, "IOHW"),
    "k3_s2_outpad": (5, 7, 4, 3, (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1, "IOHW"),
    "k3_s3_asymmetric": (4, 3, 4, 5, (3, 2), (0, 1, 1, 0), (0, 0), (1, 1), 1, "IOHW"),
    "k3_dilated2": (4, 4, 6, 6, (1, 1), (2, 2, 2, 2), (0, 0), (2, 2), 1, "IOHW"),
    "grouped_oihw": (8, 6, 5, 5, (2, 2), (1, 1, 1, 1), (0, 0), (1, 1), 2, "OIHW"),
}
KERNEL = (4, 4)


def reference(x, w, strides, padding, out_pad, dilation, groups):
    """The scatter form of ONNX's ConvTranspose, NCHW data and an IOHW kernel, in float64."""
    n, cin, h, wd = x.shape
    _, cog, kh, kw = w.shape
    cig = cin // groups
    full_h = (h - 1) * strides[0] + dilation[0] * (kh - 1) + 1 + out_pad[0]
    full_w = (wd - 1) * strides[1] + dilation[1] * (kw - 1) + 1 + out_pad[1]
    out = np.zeros((n, cog * groups, full_h, full_w))
    for c in range(cin):
        g = c // cig
        for o in range(cog):
            for ky in range(kh):
                for kx in range(kw):
                    y0, x0 = ky * dilation[0], kx * dilation[1]
                    out[
                        :, g * cog + o, y0 : y0 + h * strides[0] : strides[0], x0 : x0 + wd * strides[1] : strides[1]
                    ] += x[:, c] * w[c, o, ky, kx]
    pt, pl, pb, pr = padding
    return out[:, :, pt : full_h - pb, pl : full_w - pr]


@pytest.mark.parametrize("name", sorted(CASES))
def test_constant_and_input_kernels_give_numpys_transposed_convolution(name):
    import tvm
    from tvm import relax

    from tvmgen.compiler import conv_transpose

    cin, cout, h, w, strides, padding, out_pad, dilation, groups, layout = CASES[name]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, cin, h, w)).astype("float32")
    iohw = rng.standard_normal((cin, cout // groups, *KERNEL)).astype("float32")
    kernel = iohw.transpose(["IOHW".index(c) for c in layout]).copy()
    want = reference(x.astype(float), iohw.astype(float), strides, padding, out_pad, dilation, groups)

    def build(constant: bool):
        bb = relax.BlockBuilder()
        xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
        kv = relax.Var("k", relax.TensorType(kernel.shape, "float32"))
        params = [xv] if constant else [xv, kv]
        with bb.function("main", params):
            y = bb.emit(
                relax.op.nn.conv2d_transpose(
                    xv,
                    relax.const(kernel) if constant else kv,
                    strides=strides,
                    padding=padding,
                    output_padding=out_pad,
                    dilation=dilation,
                    groups=groups,
                    kernel_layout=layout,
                )
            )
            bb.emit_func_output(y)
        mod = relax.transform.LegalizeOps(conv_transpose.legalize_map())(bb.get())
        names = [gv.name_hint for gv in mod.functions]
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        args = [tvm.runtime.tensor(x)] + ([] if constant else [tvm.runtime.tensor(kernel)])
        return names, vm["main"](*args).numpy()

    folded_names, folded = build(constant=True)
    input_names, computed = build(constant=False)
    assert not [n for n in folded_names if "weights" in n], folded_names  # rearranged here, no kernel for it
    assert [n for n in input_names if "conv2d_transpose_weights" in n], input_names
    assert folded.shape == want.shape, (folded.shape, want.shape)
    np.testing.assert_allclose(folded, want, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(computed, want, atol=1e-4, rtol=1e-4)
