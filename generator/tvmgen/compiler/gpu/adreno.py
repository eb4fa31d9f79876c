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


def _texture_schedule(func, target):
    """(schedule, root block, its child blocks, the reductions among them) of a TIR function built for a
    texture target, or None for anything else."""
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight import analysis

    if not isinstance(func, tirx.PrimFunc) or "texture" not in target.keys:
        return None
    sch = s_tir.Schedule(func)
    sch.work_on("main")
    root = analysis.get_root_block(sch, sch.func_working_on)
    blocks = sch.get_child_blocks(root)
    return sch, root, blocks, [b for b in blocks if analysis.get_sblock_info(sch, b).is_reduction()]


class Conv2dEpilogue:
    """dlight's Adreno Conv2d schedule for a convolution whose fused epilogue dlight cannot inline: a
    squeeze-excite's expand convolution, whose gate is broadcast over a larger tensor and multiplied in.
    dlight left that block outside the GPU threads, so the whole model lost texture memory (MobileNetV3,
    EfficientNet, the zoo's seg_head). Here the convolution keeps dlight's schedule and each block after it
    that is left gets dlight's Adreno default schedule: threads of its own, the 4 channels of a pixel
    vectorised (a texture store writes the whole pixel), reading the convolution's result from memory."""

    def apply(self, func, target, _tune):
        from tvm.s_tir import dlight as dl
        from tvm.s_tir.dlight.adreno.utils import schedule_default, schedule_inline_blocks

        opened = _texture_schedule(func, target)
        if opened is None:
            return None
        sch, root, blocks, reductions = opened
        if len(reductions) != 1 or "conv2d_NCHWc" not in sch.get(reductions[0]).name_hint:
            return None
        dl.adreno.Conv2d.schedule_conv2d(sch, reductions[0])
        schedule_inline_blocks(sch, [b for b in blocks if b not in reductions])
        # dlight's inlining stops at the first block it cannot inline (a `break`): what is left is read
        # from the function again
        for block in sch.get_child_blocks(root):
            if not any(sch.get(loop).thread_binding is not None for loop in sch.get_loops(block)):
                schedule_default(sch, [block])
        return sch


class TextureReduction:
    """A reduction whose result is stored into a texture through an elementwise block (a mean: a sum, then
    a division), for example a squeeze-excite's pooling. dlight's GPU rules store such a pixel one channel at
    a time, and each store writes the whole pixel with that one value (wrong results); dlight's Adreno
    fallback fails on it (cache-write). Here each thread owns one pixel: the reduction is computed at the
    thread for its 4 channels, and the store is vectorised over them."""

    def apply(self, func, target, _tune):
        from tvm.s_tir.dlight.adreno.utils import schedule_inline_blocks

        opened = _texture_schedule(func, target)
        if opened is None:
            return None
        sch, root, blocks, reductions = opened
        if not reductions or any(sch.get_child_blocks(b) for b in blocks):
            return None
        last = blocks[-1]
        if last in reductions or "texture" not in str(sch.get(last).writes[0].source.scope()):
            return None
        schedule_inline_blocks(sch, [b for b in blocks[:-1] if b not in reductions])
        loops = sch.get_loops(last)
        if int(sch.get(loops[-1]).extent) != 4:
            return None
        pixels = sch.fuse(*loops[:-1])
        bx, tx = sch.split(pixels, [None, 64])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        for block in sch.get_child_blocks(root):
            if block != last and not any(sch.get(lp).thread_binding is not None for lp in sch.get_loops(block)):
                sch.compute_at(block, tx, preserve_unit_loops=True)
                sch.set_scope(block, 0, "local")  # the thread's own 4 sums
        sch.vectorize(sch.get_loops(last)[-1])
        return sch


class TexturePool2D:
    """A pooling of 4-channel pixels (NCHW4c: max pooling, or the sum of an adaptive average) with its
    reduction window outside the 4 channels. dlight's Adreno Pool2D vectorises the channels around the
    window's loops and the local copy, and VectorizeLoop cannot vectorise a loop holding a serial one:
    the texture store kept one channel's value where the pixel's 4 are written, and TVM stopped the
    build ("Expected Data to be Written equal to Texture Store length"; a ceil-mode max pooling, as in
    SqueezeNet, so lost texture memory for the whole model). Here each thread owns one output pixel: the
    window is walked with a 4-channel maximum or sum a step, the padding read through the input with
    its condition (no padded copy), and the pixel written once, vectorised."""

    THREADS = 256  # at most, a divisor of the pixels: TIR does not vectorise a block under a predicate

    def apply(self, func, target, _tune):
        from tvm.s_tir.dlight import analysis

        opened = _texture_schedule(func, target)
        if opened is None:
            return None
        sch, _root, blocks, reductions = opened
        if len(reductions) != 1 or sch.get(reductions[0]).name_hint not in ("pool_max", "adaptive_pool_sum"):
            return None
        pool = reductions[0]
        if "".join(it.kind for it in analysis.get_sblock_info(sch, pool).iters) != "SSSSSRR":
            return None
        loops = sch.get_loops(pool)
        if len(loops) != 7 or int(sch.get(loops[4]).extent) != 4:
            return None
        at = blocks.index(pool)
        for block in reversed(blocks[:at]):  # the padding: a condition on each read
            sch.compute_inline(block)
        write = sch.cache_write(pool, 0, "local")
        for block in blocks[at + 1 :]:  # an average's division, a cast: folded into the pixel's write
            sch.reverse_compute_inline(block)
        channels, window = loops[4], loops[5:]
        pixels = sch.fuse(*loops[:4])
        extent = int(sch.get(pixels).extent)
        divisors = [d for d in range(1, min(extent, self.THREADS) + 1) if extent % d == 0]
        threads = max(divisors, key=lambda d: (d % 32 == 0, d))  # whole waves where the pixels allow
        bx, tx = sch.split(pixels, [None, threads])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        sch.reorder(*window, channels)
        sch.reverse_compute_at(write, tx)
        sch.vectorize(channels)  # while the block has its init: TIR vectorises only whole reductions
        sch.decompose_reduction(pool, window[0])  # the init's loop is a copy of the vectorised one
        sch.vectorize(sch.get_loops(write)[-1])
        return sch


def _ty_scope(ty) -> str:
    vdevice = getattr(ty, "vdevice", None)
    return str(vdevice.memory_scope) if vdevice is not None else ""


def _scope(expr) -> str:
    return _ty_scope(getattr(expr, "ty", None))


def reshapes_as_reshapes(mod):
    """A TIR function that only reshapes (a layout transform whose data order does not change: NCHW4c with one
    block of 4 channels to NHWC) called on one buffer becomes ``R.reshape``, every use of its result following
    it: in place of TVM's RewriteDataflowReshape, which the Adreno pipelines leave out. TVM's pass also made a
    reshape of a copy into texture memory (16 channels into 4 blocks of 4 as a convolution's texture weights),
    a real copy into an image, and re-emitted such bindings under new variables (the reshape's type lost the
    call's memory scope) without following them in the calls after: VM codegen failed ("Var lv3 is not
    defined") and the zoo's det_head_tflite and keras_mobilenet_v3_small fell back to buffers."""
    import math

    import tvm
    from tvm import relax

    from tvmgen.compiler import rewrites

    call_tir = tvm.ir.Op.get("relax.call_tir")

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir) or len(call.args) != 2 or len(call.ty_args) != 1:
                return call
            callee, args = call.args
            out = call.ty_args[0]
            if not isinstance(args, relax.Tuple) or len(args.fields) != 1 or not isinstance(out, relax.TensorType):
                return call
            (x,) = args.fields
            ty = getattr(x, "ty", None)
            func = mod[callee] if isinstance(callee, tvm.ir.GlobalVar) else None
            if not isinstance(ty, relax.TensorType) or not isinstance(func, tvm.tirx.PrimFunc):
                return call
            if str(ty.dtype) != str(out.dtype) or "texture" in _ty_scope(ty) + _ty_scope(out):  # buffers only
                return call
            dims = rewrites.static_shape(x)
            out_dims = [getattr(d, "value", None) for d in getattr(out.shape, "values", None) or [None]]
            if None in (dims or [None]) or None in out_dims or math.prod(dims) != math.prod(out_dims):
                return call
            if not relax.analysis.has_reshape_pattern(func):
                return call
            return relax.op.reshape(x, out.shape)

    rewrite = Rewrite(mod)
    rewrite.builder_.update_func(mod.get_global_var("main"), rewrite.visit_expr(mod["main"]))
    return rewrite.builder_.get()


def callee_per_scopes(mod):
    """A TIR function called with different memory scopes (texture at one call, a buffer at another) split
    into one copy per combination of scopes. SpecializePrimFuncBasedOnCallSite keeps one specialisation per
    function: a squeeze-excite's mean, called on a texture in one block and on a buffer in another, was
    compiled for buffers and handed an image at run time ("argument 0 is declared as a buffer but got an
    image")."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    main = mod["main"]
    seen: dict = {}  # callee name -> {scopes: GlobalVar}

    @relax.expr_functor.mutator
    class Split(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir):
                return call
            callee, args = call.args[0], call.args[1]
            out = call.ty_args[0] if call.ty_args else None  # the output's type (the call's own may be unset)
            fields = out.fields if isinstance(out, relax.TupleType) else [out]
            scopes = tuple(_scope(a) for a in args.fields) + tuple(_ty_scope(t) for t in fields)
            copies = seen.setdefault(callee.name_hint, {})
            if not copies:
                copies[scopes] = callee
            if scopes not in copies:
                name = f"{callee.name_hint}_scoped{len(copies)}"
                # marked with its scopes: the builder would hand back the equal original otherwise
                copies[scopes] = self.builder_.add_func(mod[callee].with_attr("tvmgen.scopes", ",".join(scopes)), name)
            target = copies[scopes]
            if target.same_as(callee):
                return call
            return relax.Call(call.op, [target, *call.args[1:]], call.attrs, call.ty_args, call.span)

    split = Split(mod)
    split.builder_.update_func(mod.get_global_var("main"), split.visit_expr(main))
    return split.builder_.get()


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
            *rewrites.before_layout_conversion(),
            rewrites.module_pass("TvmgenClipAsMinMax", rewrites.clip_as_min_max),  # converts with the layouts
            rewrites.module_pass("TvmgenSplitsBySections", rewrites.splits_by_sections),  # cut where meant
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
            rewrites.module_pass("TvmgenCalleePerScopes", callee_per_scopes),
            relax.transform.SpecializePrimFuncBasedOnCallSite(),
        ]
    passes += [
        relax.transform.Normalize(),
        rewrites.module_pass("TvmgenReshapesAsReshapes", reshapes_as_reshapes),
        gpu.apply_rules(
            dl.adreno.Conv2d(),
            Conv2dEpilogue(),
            dl.adreno.LayoutTransform(),
            TexturePool2D(),
            dl.adreno.Pool2D(),
            TextureReduction(),
            dl.adreno.Fallback(),
            report=report,
        ),
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
            # without TVM's RewriteDataflowReshape: reshapes_as_reshapes does its work (see there)
            lower = [p for p in gpu_generic.dataflow_lower_passes(target) if p.info.name != "RewriteDataflowReshape"]
            return tvm.transform.Sequential(
                legalize_passes(target, texture, report) + lower + gpu_generic.finalize_passes(target)
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
