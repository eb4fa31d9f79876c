"""Transposed convolutions in NHWC, computed without multiplying by zeros.

TVM 0.27 lowers ``relax.nn.conv2d_transpose`` in NCHW/IOHW only, by dilating the input with
zeros (a stride-2 layer then does four times the multiply-adds it needs) and TOPI has no NHWC
form: after tvmgen's NHWC layout conversion the operator reached the VM unlowered and the build
failed. This module is tvmgen's own lowering, used for every layout.

The output row ``y = oh + pad_top`` of the unpadded result receives input row ``ih`` through
kernel row ``kh = y - ih * stride``. Writing ``kh = y % stride + j * stride`` gives
``ih = y // stride - j`` for ``j`` in ``0 .. ceil(K / stride)``: each output phase
``(y % stride, x % stride)`` is an ordinary stride-1 convolution with its own slice of the
kernel. The weights are rearranged once (constant-folded at compile time) into
``[phase_h, phase_w, j, i, in_channel_of_group, out_channel]`` with zeros where ``kh >= K``;
the output channels are innermost, the axis the default schedules vectorise. Dilation enlarges
the kernel with zero rows and columns first; groups (depthwise included) reduce over their own
input channels.
"""

from __future__ import annotations


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def legalize(bb, call):
    """LegalizeOps function for ``relax.nn.conv2d_transpose``: NHWC or NCHW data, any kernel
    layout (transposed to IOHW first), 2-D, any stride, padding, output padding, dilation and
    groups. Layouts it cannot read are returned as they are (TVM's error then names them)."""
    from tvm import te, topi

    a = call.attrs
    data_layout, kernel_layout = str(a.data_layout), str(a.kernel_layout)
    out_layout = str(a.out_layout or data_layout)
    if (
        data_layout not in ("NHWC", "NCHW")
        or out_layout not in ("NHWC", "NCHW")
        or sorted(kernel_layout) != sorted("IOHW")
    ):
        return call
    strides = [int(s) for s in a.strides]
    pt, pl, pb, pr = [int(p) for p in a.padding]
    opad = [int(o) for o in a.output_padding]
    dil = [int(d) for d in a.dilation]
    groups = int(a.groups)
    out_dtype = str(call.ty.dtype)

    data, kernel = call.args
    if data_layout == "NCHW":
        data = bb.emit_te(topi.transpose, data, [0, 2, 3, 1], primfunc_name_hint="conv2d_transpose_data_nhwc")
    n, h, w, cin = [int(d) for d in data.ty.shape.values]
    if kernel_layout != "IOHW":
        kernel = bb.emit_te(
            topi.transpose,
            kernel,
            [kernel_layout.index(c) for c in "IOHW"],
            primfunc_name_hint="conv2d_transpose_kernel_iohw",
        )
    _, cog, kh0, kw0 = [int(d) for d in kernel.ty.shape.values]
    kh, kw = dil[0] * (kh0 - 1) + 1, dil[1] * (kw0 - 1) + 1  # the dilated kernel's extent
    sh, sw = strides
    jh, jw = _ceil_div(kh, sh), _ceil_div(kw, sw)
    cig, cout = cin // groups, cog * groups
    oh = (h - 1) * sh - pt - pb + kh + opad[0]
    ow = (w - 1) * sw - pl - pr + kw + opad[1]

    def phases(k):
        # [qh, qw, j, i, rc, co]: the kernel tap that output phase (ph, pw) = ((qh + pt) % s, (qw + pl) % s)
        # applies to input (y // s - j, x // s - i), zero where that tap lies outside the (dilated) kernel.
        # Indexed by the unpadded output's y % s (no padding inside the modulo): TVM 0.27's index
        # simplification dropped the "+ pt" of (y + pt) % s in a GPU kernel's thread arithmetic (a 4 x 4
        # stride-2 "same" TFLite transposed convolution, wrong on OpenCL and Vulkan, right on the CPU).
        def tap(qh, qw, j, i, rc, co):
            ph, pw = (qh + pt) % sh, (qw + pl) % sw
            ky, kx = ph + j * sh, pw + i * sw
            inside = te.all(ky < kh, kx < kw, ky % dil[0] == 0, kx % dil[1] == 0)
            value = k[(co // cog) * cig + rc, co % cog, te.min(ky, kh - 1) // dil[0], te.min(kx, kw - 1) // dil[1]]
            return te.if_then_else(inside, value, te.const(0, k.dtype))

        return te.compute((sh, sw, jh, jw, cig, cout), tap, name="kernel_phases")

    folded = _constant_phases(call.args[1], kernel_layout, (sh, sw, jh, jw, cig, cout), (pt, pl), (kh, kw), dil, cog)
    if folded is not None:
        weights = bb.normalize(folded)
    else:
        weights = bb.emit_te(phases, kernel, primfunc_name_hint="conv2d_transpose_weights")
    # input rows y // s - j run from -(jh - 1) to (oh - 1 + pt) // s: pad to cover them
    top, left = jh - 1, jw - 1
    bottom = max(0, (oh - 1 + pt) // sh + 1 - h)
    right = max(0, (ow - 1 + pl) // sw + 1 - w)

    def conv(x, wp):
        xp = topi.nn.pad(x, [0, top, left, 0], [0, bottom, right, 0], name="data_pad")
        j = te.reduce_axis((0, jh), name="j")
        i = te.reduce_axis((0, jw), name="i")
        rc = te.reduce_axis((0, cig), name="rc")

        def out(b, y, x_, co):
            yy, xx = y + pt, x_ + pl
            return te.sum(
                xp[b, yy // sh - j + top, xx // sw - i + left, (co // cog) * cig + rc].astype(out_dtype)
                * wp[y % sh, x_ % sw, j, i, rc, co].astype(out_dtype),
                axis=[j, i, rc],
            )

        return te.compute((n, oh, ow, cout), out, name="conv2d_transpose_nhwc", tag="conv2d_transpose_nhwc")

    if out_layout == "NHWC":
        return bb.call_te(conv, data, weights, primfunc_name_hint="conv2d_transpose")
    result = bb.emit_te(conv, data, weights, primfunc_name_hint="conv2d_transpose")
    return bb.call_te(topi.transpose, result, [0, 3, 1, 2], primfunc_name_hint="conv2d_transpose_nchw_out")


def _constant_phases(kernel, kernel_layout: str, shape, pads, extent, dil, cog):
    """``phases`` of a constant kernel, computed here with NumPy (a constant), or None when the kernel
    is not a constant. Folding it here, not left to FoldConstant, keeps every pipeline free of a weight
    kernel: the Adreno pipelines bind the target before folding, and FoldConstant then ran the
    rearrangement's GPU kernel on host arrays ("Mismatched A.device_type ... expected opencl"), which
    failed both Adreno builds."""
    import numpy as np
    import tvm
    from tvm import relax

    if not isinstance(kernel, tvm.ir.expr.Constant):
        return None
    k = kernel.value.numpy().transpose([kernel_layout.index(c) for c in "IOHW"])
    sh, sw, jh, jw, cig, cout = shape
    (pt, pl), (kh, kw) = pads, extent
    out = np.zeros(shape, k.dtype)
    co = np.arange(cout)
    for qh in range(sh):
        for qw in range(sw):
            for j in range(jh):
                for i in range(jw):
                    ky, kx = (qh + pt) % sh + j * sh, (qw + pl) % sw + i * sw
                    if ky < kh and kx < kw and ky % dil[0] == 0 and kx % dil[1] == 0:
                        rows = (co // cog)[None, :] * cig + np.arange(cig)[:, None]  # [rc, co]
                        out[qh, qw, j, i] = k[rows, (co % cog)[None, :], ky // dil[0], kx // dil[1]]
    return relax.const(out)


def legalize_map() -> dict:
    return {"relax.nn.conv2d_transpose": legalize}


def lower_only_pass():
    """A module pass lowering ``relax.nn.conv2d_transpose`` with ``legalize`` and leaving every other
    operator to the pipeline after it: TVM's GPU pipelines legalize the rest as usual (and their
    own conv2d_transpose legalization, NCHW only, fails on TFLite's NHWC transposed convolutions)."""
    import tvm
    from tvm import relax

    op = tvm.ir.Op.get("relax.nn.conv2d_transpose")

    @relax.expr_functor.mutator
    class Lower(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.same_as(op):
                return legalize(self.builder_, call)
            return call

    @tvm.transform.module_pass(opt_level=0, name="TvmgenLowerConvTranspose")
    def _pass(mod, _ctx):
        lower = Lower(mod)  # its builder holds the module, and gets the TIR functions legalize emits
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                lower.builder_.update_func(gv, lower.visit_expr(func))
        mod = lower.builder_.get()
        if any(gv.name_hint.startswith("conv2d_transpose_weights") for gv in mod.functions):
            # a kernel computed from constants (a TFLite fp16 weight cast to float32, a transposed layout):
            # its rearrangement folded here, on the CPU, before a GPU pipeline binds its target (see
            # _constant_phases); a kernel that is an input is left as it is
            mod = relax.transform.FoldConstant()(mod)
        return mod

    return _pass
