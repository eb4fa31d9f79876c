"""Quantised (QDQ) models on 8-bit values: TVM imports a quantised convolution or matmul as the float
operator on ``dequantize``d copies of its 8-bit operands. ``QuantisedDotProducts`` computes the 1x1
convolutions and matmuls on the dot-product instructions (``int8.integer_dot``) and depthwise
convolutions on the 8-bit activations; ``share_shifted_activations`` and ``ShareDequantized`` leave one
copy of a tensor that several operators read; ``legalize_quantize`` quantises without divisions."""

from __future__ import annotations

import logging

import numpy as np

from tvmgen.compiler.int8 import INT8_RANGES, constant_array, integer_dot, rewrite_main_calls

log = logging.getLogger("tvmgen.compiler")

INLINE_DEQUANTIZE = "tvmgen_dequantize"  # a block the schedules inline into its consumer first


def _dequantize(expr, var2val):
    """``dequantize(x, scale, zero, axis)`` -> the call, or None."""
    from tvm import relax

    value = var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr
    if (
        isinstance(value, relax.Call)
        and getattr(value.op, "name", "") == "relax.dequantize"
        and str(value.attrs.out_dtype) == "float32"
    ):
        return value
    return None


def _activations(expr, var2val):
    """``dequantize(x8, sx, zx)`` of 8-bit activations with one scale and zero point ->
    (x8, sx as a float, zx as an int), or None."""
    dx = _dequantize(expr, var2val)
    if dx is None or str(dx.args[0].ty.dtype) not in INT8_RANGES:
        return None
    sx, zx = constant_array(dx.args[1], var2val, "f"), constant_array(dx.args[2], var2val)
    if sx is None or zx is None or sx.size != 1 or zx.size != 1:
        return None
    return dx.args[0], float(sx.reshape(-1)[0]), int(zx.reshape(-1)[0])


def _per_column(values: np.ndarray, ndim: int, axis: int, column_axis: int, n: int):
    """A dequantize parameter (a scalar, or one value per index of ``axis``) as one value per
    column, when that axis is the column axis; None otherwise."""
    values = np.asarray(values).reshape(-1)
    if values.size == 1:
        return np.full(n, values[0])
    if values.size == n and axis % ndim == column_axis % ndim:
        return values
    return None


def _quantised_product(bb, call, var2val, target):
    """A float 1x1 convolution (NHWC, HWIO, stride 1, no padding) or matmul whose operands are
    ``dequantize(x8, sx, zx)`` (8-bit activations, one scale and zero point) and ``dequantize(w8,
    sw, zw)`` (constant weights, a scale and zero point per output column) -> ``float(dot(x8, w8 -
    zw) - zx * colsum) * (sx * sw)``, or None."""
    from tvm import relax

    name = getattr(call.op, "name", "")
    x, w = call.args[0], call.args[1]
    if str(call.ty.dtype) != "float32":
        return None
    if name == "relax.nn.conv2d" and int(call.attrs.groups) != 1:
        return _depthwise_from_8bit(bb, call, var2val)
    if name == "relax.nn.conv2d":
        at = call.attrs
        wshape = [int(d) for d in w.ty.shape.values]
        if (
            (str(at.data_layout), str(at.kernel_layout), str(at.out_layout)) != ("NHWC", "HWIO", "NHWC")
            or int(at.groups) != 1
            or any(int(v) != 1 for v in (*at.strides, *at.dilation))
            or any(int(v) != 0 for v in at.padding)
            or wshape[:2] != [1, 1]
        ):
            return None
    elif name != "relax.matmul" or len(w.ty.shape.values) != 2:
        return None
    acts, dw = _activations(x, var2val), _dequantize(w, var2val)
    weights = _column_weights(dw, var2val) if dw is not None else None
    if weights is None:
        return None
    if acts is not None:
        x8, sx, zx = acts
        w8, sw, zw = weights
        a_zero = relax.const(zx, "int32") if zx else None
        out = integer_dot(bb, x8, a_zero, w8 - zw.astype(np.int64), target)
        if out is not None:
            scale = (np.float32(sx) * sw.astype(np.float32)).astype(np.float32)
            return relax.op.multiply(relax.op.astype(out, "float32"), relax.const(scale))
    return _eight_bit_weights(bb, call, dw, *weights) if name == "relax.matmul" else None


def _column_weights(dw, var2val):
    """``dequantize(constant w8, sw, zw)`` -> (w8 as [K, N]: a 1x1 HWIO kernel, or a matmul's weights; the scale
    and the zero point as one value per column), or None."""
    w8 = constant_array(dw.args[0], var2val)
    sw, zw = constant_array(dw.args[1], var2val, "f"), constant_array(dw.args[2], var2val)
    if any(v is None for v in (w8, sw, zw)):
        return None
    wdims = w8.ndim
    w8 = w8.reshape(-1, w8.shape[-1])
    n = w8.shape[1]
    sw = _per_column(sw, wdims, int(dw.attrs.axis), -1, n)
    zw = _per_column(zw, wdims, int(dw.attrs.axis), -1, n)
    if sw is None or zw is None:
        return None
    return w8, sw, zw


# A float product whose weights are dequantised 8-bit constants reads each weight once per row of its
# input: with a few rows (a dense layer at batch 1) it is bound by the bytes of its weights, not by its
# multiply-adds, and the float copy of the weights is four times the bytes of the 8-bit ones.
MEMORY_BOUND_ROWS = 4
# As float, beyond a core's L2, so that they come from L3 or memory: a product whose weights L2 holds
# (a keyword spotter's 624 x 64 layer, 160 KB as float) ran faster on float weights than widening 8-bit
# ones (AVX2: 2.0 against 2.8 us), a 1,280 x 1,000 classifier (5 MB) 0.42 -> 0.15 ms on 8-bit ones.
EIGHT_BIT_WEIGHTS_MIN_BYTES = 1024 * 1024
EIGHT_BIT_WEIGHTS_MIN_COLUMNS = 8


def _eight_bit_weights(bb, call, dw, w8, sw, zw):
    """``matmul(x, dequantize(constant w8, scale per column, zero point))`` (the weights as ``_column_weights``
    gives them) with few rows of ``x``, where no integer dot product applies (float activations, or a CPU
    without a dot-product instruction) -> ``(x @ float(w8 - zero)) * scale``: the weights stay 8-bit in memory
    and are widened to float as the product reads them (``INLINE_DEQUANTIZE``, inlined by the schedules), the
    scale one multiply per output in the epilogue. A quarter of the weight bytes: the product is bound by
    them. The sums are those of the dequantised product but for the scale taken out of them (within a
    rounding of each output). None where it does not apply (more rows, small weights, a zero point per
    column)."""
    from tvm import relax, te

    x = call.args[0]
    dtype = str(dw.args[0].ty.dtype)
    k, n = w8.shape
    xshape = [int(d) for d in x.ty.shape.values]
    rows = int(np.prod(xshape[:-1]))
    zeros = np.unique(zw)
    if (
        dtype not in INT8_RANGES
        or str(x.ty.dtype) != "float32"
        or xshape[-1] != k
        or rows > MEMORY_BOUND_ROWS
        or n < EIGHT_BIT_WEIGHTS_MIN_COLUMNS
        or 4 * w8.size < EIGHT_BIT_WEIGHTS_MIN_BYTES
        or zeros.size != 1
    ):
        return None
    zero = float(zeros[0])

    def product(data, weights):
        def widened(kk, nn):
            value = weights[kk, nn].astype("float32")
            return value - zero if zero else value

        wide = te.compute(weights.shape, widened, name=INLINE_DEQUANTIZE)
        r = te.reduce_axis((0, k), "k")
        return te.compute(
            (*xshape[:-1], n),
            lambda *i: te.sum(data[(*i[:-1], r)] * wide[r, i[-1]], axis=r),
            name="matmul",
            tag="matmul",
        )

    weights = relax.const(np.ascontiguousarray(w8.astype(dtype)))
    out = bb.call_te(product, x, weights, primfunc_name_hint="matmul")
    log.info(
        "int8: a %s x %d x %d product reads its weights as 8-bit values (%.1f MB; %.1f MB as float)",
        "x".join(map(str, xshape[:-1])),
        k,
        n,
        w8.size / 2**20,
        4 * w8.size / 2**20,
    )
    return relax.op.multiply(out, relax.const(sw.astype(np.float32)))  # fuses into the epilogue


def _depthwise_from_8bit(bb, call, var2val):
    """``conv2d(dequantize(x8, sx, zx), w)``, depthwise (NHWC, multiplier 1) -> the same float
    convolution (``topi.nn.conv``, as TVM legalises it, so the depthwise schedule applies) reading
    ``x8`` and dequantising each value as its padded window row is made. The 8-bit tensor is then
    what the kernel before writes, not its float copy: a quarter of the bytes (MobileNetV2's
    112 x 112 x 96 expansion: 1.2 instead of 4.8 MB written and read). Same arithmetic as the
    float path; None where it does not apply."""
    from tvm import relax, te, topi

    at = call.attrs
    x, w = call.args[0], call.args[1]
    acts = _activations(x, var2val)
    if acts is None:
        return None
    x8, scale, zero = acts
    xshape, wshape = [int(d) for d in x.ty.shape.values], [int(d) for d in w.ty.shape.values]
    layouts = (str(at.data_layout), str(at.out_layout or at.data_layout))
    channels = xshape[3] if len(xshape) == 4 else 0
    if (
        layouts != ("NHWC", "NHWC")
        or int(at.groups) != channels
        or [int(d) for d in call.ty.shape.values][3] != channels
    ):
        return None
    hwoi = str(at.kernel_layout) == "HWOI" and wshape[2:] == [channels, 1]  # TFLite's depthwise kernel
    if not (hwoi or (str(at.kernel_layout) == "HWIO" and wshape[2:] == [1, channels])):
        return None
    integer = _integer_depthwise_weights(w, var2val, wshape, channels)
    if integer is not None:  # exact integer sums, scaled once per channel
        w8, w_scale = integer
        if hwoi:
            w8 = w8.transpose(0, 1, 3, 2)
        w = relax.const(np.ascontiguousarray(w8, dtype=np.float32))
        combined = (np.float32(scale) * w_scale).astype(np.float32)
        scale = 1.0
    elif hwoi:
        w = bb.emit(relax.op.permute_dims(w, [0, 1, 3, 2]))  # -> HWIO [kh, kw, 1, C]: folded at compile time

    padding = [int(v) for v in at.padding]

    def conv(x8, weights):
        if integer is not None:  # x8 as it is, padded with the zero point: integers, exact in float32
            data = te.compute(x8.shape, lambda *i: x8(*i).astype("float32"), name=INLINE_DEQUANTIZE)
            top, left, bottom, right = padding
            data = topi.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0], pad_value=float(zero), name="pad_temp")
            return _depthwise_nhwc(data, weights, [int(v) for v in at.strides], [int(v) for v in at.dilation])
        data = te.compute(x8.shape, lambda *i: (x8(*i).astype("float32") - float(zero)) * scale, name=INLINE_DEQUANTIZE)
        return topi.nn.conv(
            data,
            weights,
            [int(v) for v in at.strides],
            padding,
            [int(v) for v in at.dilation],
            channels,
            "NHWC",
            "HWIO",
            "float32",
        )

    out = bb.call_te(conv, x8, w, primfunc_name_hint="conv2d")
    if integer is None:
        return out
    # sum (x8 - zero) w8 = sum x8 w8 - zero sum w8 (the padding is x8 = zero): exact integers
    corr = np.float32(zero) * w8.reshape(-1, channels).sum(axis=0, dtype=np.float64).astype(np.float32)
    out = relax.op.subtract(out, relax.const(corr)) if np.any(corr) else out
    return relax.op.multiply(out, relax.const(combined))  # fuses into the kernel's epilogue


def _depthwise_nhwc(padded, weights, strides: list[int], dilation: list[int]):
    """``topi.nn.conv``'s depthwise NHWC convolution (same loops, names and reduction order, so the
    depthwise schedule applies) of an input padded already (with the zero point, not 0)."""
    from tvm import te

    n, h, w, c = (int(d) for d in padded.shape)
    kh, kw = int(weights.shape[0]), int(weights.shape[1])
    oh = (h - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (w - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, 1), "rc")
    return te.compute(
        (n, oh, ow, c),
        lambda nn, yy, xx, ff: te.sum(
            padded[nn, yy * strides[0] + ry * dilation[0], xx * strides[1] + rx * dilation[1], ff + rc]
            * weights[ry, rx, rc, ff],
            axis=[ry, rx, rc],
        ),
        name="group_conv2d_nhwc",
        tag="group_conv2d_nhwc",
    )


def _integer_depthwise_weights(w, var2val, wshape: list[int], channels: int):
    """A depthwise kernel ``[reshape](dequantize(constant w8, scale per channel, zero point 0))``
    -> (w8 as float32 integers in ``wshape``, the scale per channel), or None. Its sums over
    (x8 - zero) x w8 are exact in float32 (|x8 - zero| <= 255, |w8| <= 255: products under 2^16,
    sums of up to 256 taps under 2^24), where the dequantised kernel rounded every product."""
    from tvm import relax

    value = var2val.get(w, w) if isinstance(w, relax.Var) else w
    if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.reshape":
        value = value.args[0]
    dw = _dequantize(value, var2val)
    if dw is None:
        return None
    w8 = constant_array(dw.args[0], var2val)
    sw, zw = constant_array(dw.args[1], var2val, "f"), constant_array(dw.args[2], var2val)
    if w8 is None or sw is None or zw is None or np.any(zw != 0) or np.abs(w8).max(initial=0) > 255:
        return None
    if int(np.prod(w8.shape)) != int(np.prod(wshape)) or int(np.prod(wshape)) // channels > 256:
        return None
    sw = np.asarray(sw, np.float32).reshape(-1)
    axis = int(dw.attrs.axis) % max(w8.ndim, 1)
    if sw.size == 1:
        sw = np.full(channels, sw[0], np.float32)
    elif not (sw.size == channels and w8.ndim >= 1 and w8.shape[axis] == channels and axis == w8.ndim - 1):
        return None  # a scale per channel along the kernel's last (channel) axis only
    return w8.reshape(wshape).astype(np.float32), sw


def rewrite_quantised_products(mod, target):
    """``mod`` with main's quantised 1x1 convolutions and matmuls (``_quantised_product``)
    computed on the 8-bit values by ``dot_core``, instead of in float on dequantised copies; batch-1
    dense layers where that does not apply on their 8-bit weights (``_eight_bit_weights``)."""
    from tvm import relax

    if not any(isinstance(f, relax.Function) for f in mod.functions.values()) or "main" not in [
        gv.name_hint for gv in mod.get_global_vars()
    ]:
        return mod
    main = mod["main"]
    var2val = relax.analysis.get_var2val(main)
    names = ("relax.nn.conv2d", "relax.matmul")
    if not any(
        isinstance(v, relax.Call)
        and getattr(v.op, "name", "") in names
        and any(_dequantize(a, var2val) is not None for a in v.args[:2])
        for v in var2val.values()
    ):
        return mod
    mod, count = rewrite_main_calls(
        mod,
        lambda call: getattr(call.op, "name", "") in names,
        lambda bb, call: _quantised_product(bb, call, var2val, target),
    )
    if count:
        log.info("int8: %d quantised convolution(s)/matmul(s) rewritten on their 8-bit values", count)
        mod = share_shifted_activations(mod)
    return relax.transform.DeadCodeElimination()(mod)


def _call(expr, op: str) -> bool:
    from tvm import relax

    return isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == op


def _shift_chain(u_value, values: dict):
    """``astype(add(astype(v, int32), 128), uint8)`` (``int8.integer_dot``'s shift of int8 activations for an
    instruction that takes uint8, one binding per call) -> (v, t1, t2), or None."""
    from tvm import relax

    if not (_call(u_value, "relax.astype") and str(u_value.attrs.dtype) == "uint8"):
        return None
    t2 = u_value.args[0]
    add = values.get(t2)
    if add is None or not (_call(add, "relax.add") and isinstance(add.args[0], relax.Var)):
        return None
    shift = constant_array(add.args[1], {})
    if shift is None or shift.shape != () or int(shift) != 128:
        return None
    t1 = add.args[0]
    cast = values.get(t1)
    if cast is None or not (_call(cast, "relax.astype") and str(cast.attrs.dtype) == "int32"):
        return None
    v = cast.args[0]
    if not (isinstance(v, relax.Var) and str(v.ty.dtype) == "int8"):
        return None
    return v, t1, t2


def share_shifted_activations(mod):
    """Int8 activations that a dot-product kernel reads shifted to uint8 (``int8.integer_dot``) and another
    operator reads through ``dequantize(v, s, z)`` (a residual add): that one reads the shifted
    copy instead, as ``dequantize(u, s, z + 128)`` (the same values: ``u - (z + 128) = v - z``,
    exactly), and the shift is computed right after ``v``. ``v`` then has one reader, the shift,
    which fuses into the kernel that writes ``v``: that kernel writes the uint8 copy and no
    kernel of its own shifts it (MobileNetV2's full-integer model: 5 kernels, 10 calls a run)."""
    import tvm
    from tvm import relax

    main = mod["main"]
    if not isinstance(main, relax.Function) or not isinstance(main.body, relax.SeqExpr):
        return mod
    new_blocks, changed = [], False
    for block in main.body.blocks:
        bindings = list(block.bindings)
        values = {b.var: b.value for b in bindings if isinstance(b, relax.VarBinding)}
        position = {b.var: i for i, b in enumerate(bindings)}
        chains: dict = {}  # v -> [t1, t2, u] binding indices
        for i, b in enumerate(bindings):
            found = _shift_chain(b.value, values) if isinstance(b, relax.VarBinding) else None
            if found is not None and found[0] not in chains:
                v, t1, t2 = found
                chains[v] = [position[t1], position[t2], i]
        replaced = {}
        for i, b in enumerate(bindings):
            c = b.value if isinstance(b, relax.VarBinding) else None
            if not (_call(c, "relax.dequantize") and isinstance(c.args[0], relax.Var) and c.args[0] in chains):
                continue
            zero = constant_array(c.args[2], {}) if isinstance(c.args[2], tvm.ir.expr.GenericConst) else None
            if zero is None or zero.size != 1:
                continue
            u = bindings[chains[c.args[0]][2]].var
            new_zero = relax.const(int(zero.reshape(-1)[0]) + 128, str(c.args[2].ty.dtype))
            replaced[i] = relax.VarBinding(
                b.var, relax.op.dequantize(u, c.args[1], new_zero, int(c.attrs.axis), str(c.attrs.out_dtype)), b.span
            )
        if not replaced:
            new_blocks.append(block)
            continue
        changed = True
        moved = {i for v, idx in chains.items() for i in idx}
        after: dict = {}  # binding index of v (-1: bound before this block) -> the chains to put after it
        for v, idx in chains.items():
            after.setdefault(position.get(v, -1), []).extend(idx)
        out = [bindings[i] for i in after.get(-1, [])]
        for i, b in enumerate(bindings):
            if i in moved:
                continue
            out.append(replaced.get(i, b))
            out.extend(bindings[j] for j in after.get(i, []))
        new_blocks.append(type(block)(out))
    if not changed:
        return mod
    new_main = relax.Function(
        main.params, relax.SeqExpr(new_blocks, main.body.body), main.ret_ty, main.is_pure, main.attrs, main.span
    )
    mod.update_func(mod.get_global_var("main"), new_main)
    return relax.transform.Normalize()(mod)


def share_dequantized(mod):
    """One ``dequantize`` binding for each 8-bit tensor and parameters, read by every operator that
    dequantises it. A TFLite importer's residual block dequantises the block's int8 input twice,
    once for the next convolution and once for the residual add: the first copy is a kernel of its
    own (its input has two readers, so it cannot fuse into the kernel that writes it, nor into the
    convolution that reads it). With one binding, the tensor's only reader is the dequantize,
    which fuses into the writer's epilogue: that kernel writes the float copy, and both readers
    read it (a full-integer MobileNetV2 on a GPU: 48 kernels -> 38; the same values, only the
    kernel count changes). Duplicates compare by ``structural_equal``: the same input variable,
    equal constants and attributes."""
    import tvm_ffi
    from tvm import relax

    changed = False
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        new_blocks, aliased = [], False
        for block in func.body.blocks:  # within a block: its dataflow variables are not seen outside
            first: dict = {}  # structural hash -> [(call, var)]
            out = []
            for b in block.bindings:
                c = b.value if isinstance(b, relax.VarBinding) else None
                if _call(c, "relax.dequantize") and isinstance(c.args[0], relax.Var):
                    seen = first.setdefault(tvm_ffi.structural_hash(c), [])
                    same = next((v for call, v in seen if tvm_ffi.structural_equal(call, c)), None)
                    if same is not None:
                        out.append(relax.VarBinding(b.var, same, b.span))  # an alias, removed below
                        aliased = True
                        continue
                    seen.append((c, b.var))
                out.append(b)
            new_blocks.append(type(block)(out))
        if aliased:
            if not changed:
                mod = mod.clone()  # the pass's input stays as it was
            changed = True
            mod.update_func(
                gv,
                relax.Function(
                    func.params,
                    relax.SeqExpr(new_blocks, func.body.body),
                    func.ret_ty,
                    func.is_pure,
                    func.attrs,
                    func.span,
                ),
            )
    return relax.transform.CanonicalizeBindings()(mod) if changed else mod


def ShareDequantized():  # noqa: N802 - a pass, named like TVM's
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenShareDequantized")
    def _pass(mod, _ctx):
        return share_dequantized(mod)

    return _pass


def QuantisedDotProducts(target):  # noqa: N802 - a pass, named like TVM's
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenQuantisedDotProducts")
    def _pass(mod, _ctx):
        return rewrite_quantised_products(mod, target)

    return _pass


def legalize_quantize(bb, call):
    """``relax.quantize`` as TVM lowers it (``clip(round(x / scale) + zero)``), but multiplying by
    the reciprocal of a constant scale: a vector division takes about ten times as long as a
    multiplication (AVX-512: one per ~10 cycles), and a quantised model quantises every activation
    (MobileNetV2's 112 x 112 x 96 layer: 1.2 million divisions). ``x * (1 / s)`` is within an ulp
    of ``x / s``; the rounded result differs only where ``x / s`` is that close to a half, as it
    already may from the reference runtime's own fixed-point arithmetic."""
    from tvm import te, tirx
    from tvm.relax.transform.legalize_ops import qdq

    scale, zero = call.args[1], call.args[2]
    s = constant_array(scale, {}, "f")
    if s is None or s.size != 1 or float(s.reshape(-1)[0]) == 0.0:
        return qdq._quantize(bb, call)
    inverse = float(np.float32(1.0) / np.float32(s.reshape(-1)[0]))
    out_dtype = str(call.attrs.out_dtype)
    z = constant_array(zero, {}) if zero is not None else None

    def compute(data, zp):
        def value(*idx):
            if z is not None and z.size == 1:
                zp_value = tirx.const(int(z.reshape(-1)[0]), "int32")
            elif len(zp.shape) == 0 or all(int(d) == 1 for d in zp.shape):
                zp_value = zp[(0,) * len(zp.shape)]
            else:
                zp_value = zp[idx[int(call.attrs.axis)]]
            scaled = data[idx] * tirx.const(inverse, str(data.dtype))
            rounded = (te.round(scaled) if "int" in out_dtype else scaled) + zp_value.astype(str(data.dtype))
            return qdq.clip_cast(rounded, out_dtype)

        return te.compute(data.shape, value, name="quantized")

    return bb.call_te(compute, call.args[0], zero, primfunc_name_hint="quantize")
