"""`--gpu-family adreno`: TVM's Adreno pipeline with texture (OpenCL image) memory.

TVM 0.27 keeps activations and weights of the Adreno schedules in `global.texture*` memory scopes
(image2d objects, read through the texture cache) when the target's keys include "texture". Its
pipeline converts convolutions to NCHW4c / OIHW4o and legalizes them with
`topi.nn.conv2d_NCHWc_OIHWo`, whose grouped branch divides by zero for depthwise convolutions
(groups == channels: `oc_chunk // groups` is 0) and indexes the wrong input channels for other
groupings. tvmgen's pipeline is TVM's, with that legalization replaced by one that states the
grouped case correctly (`conv2d_nchwc`).
"""

from __future__ import annotations

import contextlib

TEXTURE_KEYS = ["adreno", "opencl", "gpu", "texture"]


def conv2d_nchwc(bb, call):
    """relax.nn.conv2d in NCHW{c} / OIHW{o} layouts: TVM's topi for plain convolutions, tvmgen's
    compute for grouped ones (depthwise included)."""
    from tvm import topi

    groups = int(call.attrs.groups)
    # the accumulation type: the call's out_dtype (float32 for an fp16 model, --precision), else the data's
    out_dtype = "" if call.attrs.out_dtype is None else str(call.attrs.out_dtype)
    if out_dtype in ("", "void", "None"):
        out_dtype = str(call.args[0].ty.dtype)
    if groups == 1:
        return bb.call_te(
            topi.nn.conv2d_NCHWc_OIHWo,
            data=call.args[0],
            kernel=call.args[1],
            stride=call.attrs.strides,
            padding=call.attrs.padding,
            dilation=call.attrs.dilation,
            layout=call.attrs.data_layout,
            out_layout=call.attrs.out_layout,
            out_dtype=out_dtype,
            primfunc_name_hint="conv2d_NCHWc_OIHWo",
        )
    return bb.call_te(
        grouped_conv2d_nchwc,
        call.args[0],
        call.args[1],
        tuple(int(s) for s in call.attrs.strides),
        tuple(int(p) for p in call.attrs.padding),
        tuple(int(d) for d in call.attrs.dilation),
        groups,
        out_dtype,
        primfunc_name_hint="group_conv2d_NCHWc_OIHWo",
    )


def grouped_conv2d_nchwc(data, kernel, strides, padding, dilation, groups, out_dtype=None):
    """Grouped convolution, data N,C/cb,H,W,cb and kernel O/ob,I/groups,KH,KW,ob -> N,O/ob,OH,OW,ob.

    Output channel o = oc*ob + j belongs to group g = o // (O/groups) and reads input channels
    g*(I/groups) + r, r < I/groups, stored at [c // cb, ..., c % cb]."""
    from tvm import te, tirx
    from tvm.topi.nn import pad

    n, c_chunks, h, w, cb = (int(x) for x in data.shape)
    o_chunks, in_per_group, kh, kw, ob = (int(x) for x in kernel.shape)
    out_per_group = o_chunks * ob // groups
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding if len(padding) == 4 else (padding[0], padding[1], padding[0], padding[1])
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    padded = (
        pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="group_conv2d_pad")
        if top or left or bottom or right
        else data
    )
    r = te.reduce_axis((0, in_per_group), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def compute(b, oc, y, x, j):
        channel = (oc * ob + j) // out_per_group * in_per_group + r
        value = padded[b, tirx.indexdiv(channel, cb), y * sh + ry * dh, x * sw + rx * dw, tirx.indexmod(channel, cb)]
        weight = kernel[oc, r, ry, rx, j]
        if out_dtype and out_dtype != data.dtype:
            value, weight = value.astype(out_dtype), weight.astype(out_dtype)
        return te.sum(value * weight, axis=[r, ry, rx])

    return te.compute((n, o_chunks, oh, ow, ob), compute, name="group_conv2d_NCHWc_OIHWo")


def legalize_passes(target, texture: bool = True, report: dict | None = None) -> list:
    """TVM 0.27's Adreno legalization, with texture memory where ``texture`` (and the target has the
    "texture" key), grouped convolutions legalized by tvmgen."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from tvmgen.compiler import gpu, rewrites
    from tvmgen.compiler.gpu import float64
    from tvmgen.compiler.int8 import int8_qdq

    texture = texture and "texture" in target.keys
    passes = [
        tvm.tirx.transform.BindTarget(target),
        float64.demote_pass(report),  # Adreno's OpenCL has no cl_khr_fp64
        int8_qdq.ShareDequantized(),
        relax.transform.DecomposeOpsForInference(),
    ]
    if texture:
        passes += [
            rewrites.module_pass("TvmgenClipAsMinMax", rewrites.clip_as_min_max),  # converts with the layouts
            relax.transform.ConvertLayout({"relax.nn.conv2d": ["NCHW4c", "OIHW4o", "NCHW4c"]}),
            relax.transform.Normalize(),
            relax.transform.FoldConstant(),
            relax.transform.LegalizeOps(
                skip_ops=["relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.adaptive_avg_pool2d"]
            ),
            relax.transform.AnnotateTIROpPattern(),
            relax.backend.adreno.transform.AnnotateCustomMemoryScope(target),
        ]
    passes.append(relax.transform.LegalizeOps())
    if texture:
        passes.append(relax.transform.LegalizeOps({"relax.nn.conv2d": conv2d_nchwc}))
    passes += [
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ]
    if texture:
        passes += [
            relax.backend.adreno.transform.FoldVDeviceScopeChange(),
            relax.transform.DeadCodeElimination(),
            relax.transform.SpecializePrimFuncBasedOnCallSite(),
        ]
    passes += [
        relax.transform.Normalize(),
        gpu.apply_rules(dl.adreno.Conv2d(), dl.adreno.LayoutTransform(), dl.adreno.Pool2D(), report=report),
        gpu.apply_rules(dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback(), report=report),
    ]
    return passes


def pipeline(target, texture: bool = True, report: dict | None = None):
    """The whole Relax pipeline for an Adreno target (texture memory or buffers)."""
    import tvm
    from tvm.relax.backend import gpu_generic

    @tvm.transform.module_pass(opt_level=0, name="TvmgenAdrenoPipeline")
    def _pipeline(mod, _ctx):
        with target:
            return tvm.transform.Sequential(
                legalize_passes(target, texture, report)
                + gpu_generic.dataflow_lower_passes(target)
                + gpu_generic.finalize_passes(target)
            )(mod)

    return _pipeline


TIR_PIPELINE = "tvmgen-adreno"


def register_tir_pipeline() -> str:
    """TVM 0.27's Adreno TIR lowering (texture flattening, image allocations) under a name
    ``relax.build(tir_pipeline=...)`` accepts. TVM registers its own as "adreno", but that factory
    returns only the lowering pass where ``tvm.tirx.build`` unpacks (pass, host finalization,
    device finalization), so neither that name nor the target's default builds; this pairs it with
    TVM's default finalization passes."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.backend.adreno import pipeline as adreno_tir
    from tvm.tirx import compilation_pipeline as tir

    def factory():
        # TextureFlatten first, then tvmgen's fix of its store calls, then TVM's whole Adreno lowering
        # (whose own TextureFlatten then finds nothing left to flatten)
        lowering = tvm.transform.Sequential(
            [
                s_tir.backend.adreno.transform.TextureFlatten(),
                retype_texture_stores(),
                adreno_tir.default_tir_pipeline(),
            ]
        )
        return lowering, tir.finalize_host_passes, tir.finalize_device_passes

    tir.register_tir_pipeline(TIR_PIPELINE, factory)
    return TIR_PIPELINE


# Math calls TVM 0.27 does not mark vectorizable (TVectorizable) that OpenCL C has for vectors. In a
# loop that writes a pixel of a texture (4 channels), VectorizeLoop must vectorize or it scalarizes
# the loop, and each scalar iteration's texture store writes the whole pixel with one channel's value:
# a convolution with a GELU (erf) epilogue into a texture gave errors of 0.3 on PoCL.
OPENCL_VECTOR_MATH = tuple(
    f"tirx.{name}"
    for name in (
        "erf",
        "log1p",
        "acos",
        "asin",
        "atan",
        "atan2",
        "acosh",
        "asinh",
        "atanh",
        "rsqrt",
        "hypot",
        "copysign",
        "fmod",
    )
)


@contextlib.contextmanager
def vector_math():
    """Mark OPENCL_VECTOR_MATH vectorizable while an Adreno build lowers (op attributes are global:
    CPU builds, whose LLVM has no vector erf, must not see it)."""
    import tvm

    ops = [tvm.ir.Op.get(name) for name in OPENCL_VECTOR_MATH]
    marked = [op for op in ops if op.get_attr("TVectorizable") is None]
    for op in marked:
        op.set_attr("TVectorizable", True)
    try:
        yield
    finally:
        for op in marked:
            op.reset_attr("TVectorizable")


def retype_texture_stores():
    """A TIR pass fixing TVM 0.27's image writes: TextureFlatten gives each `texture2d_store` call the
    type of its image (a pointer), and VectorizeLoop only vectorizes calls of a primitive type, so it
    scalarizes the pixel's channel loop (each iteration writes a whole pixel of one channel's value).
    Typed void (a primitive type), the call reaches VectorizeLoop's texture-store case and becomes one write of
    the 4-channel vector. Runs right after TextureFlatten."""
    import tvm
    import tvm_ffi
    from tvm.ir.expr import Call

    store = tvm.ir.Op.get("tirx.texture2d_store")

    def fix(call):
        if call.op.same_as(store) and not isinstance(call.ty, tvm.ir.PrimType):
            return Call(call.op, list(call.args), ret_ty=tvm.ir.PrimType("void"), span=call.span)
        return call

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="TvmgenRetypeTextureStores")
    def _pass(func, _mod, _ctx):
        return tvm_ffi.structural_map(func, (Call, fix))

    return _pass
