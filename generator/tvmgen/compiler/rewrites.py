"""Relax rewrites shared by the CPU pipeline and the NNAPI partitioner."""

from __future__ import annotations


def tir_min_max_as_relax(mod):
    """``call_tir(maximum|minimum, (x, scalar const))`` -> ``relax.op.maximum|minimum(x, c)``.

    Importers lower Clip / ReLU6 to prebuilt TIR functions with a scalar bound. Nothing that
    works on Relax operators sees through such a call: NNAPI's patterns do not match it, and
    layout conversion wraps it in transposes. Giving the bounds back their Relax operators fixes
    both; unused TIR functions are removed.
    """
    from tvm import ir, relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_op, wildcard

    call = is_op("relax.call_tir")(wildcard(), wildcard())

    def relax_min_max(expr, _matches):
        func, args = expr.args[0], expr.args[1]
        kind = func.name_hint.rstrip("0123456789_")
        fields = list(getattr(args, "fields", []))
        if (
            kind in ("maximum", "minimum")
            and len(fields) == 2
            and isinstance(fields[1], ir.Constant)
            and len(fields[1].ty.shape.values) == 0
        ):
            return getattr(relax.op, kind)(fields[0], fields[1])
        return expr

    mod["main"] = rewrite_call(call, relax_min_max, mod["main"])
    return relax.transform.DeadCodeElimination()(mod)


def nchw_input_into_conv(mod):
    """``conv2d(permute_dims(x, [0, 2, 3, 1]), w, data_layout="NHWC")`` -> ``conv2d(x, w,
    data_layout="NCHW", out_layout="NHWC")``.

    Layout conversion to NHWC leaves a transpose of an NCHW model's input in front of the first
    convolution: a pass over the whole input of its own. The convolution can read NCHW and write
    NHWC itself (its padding step copies the input anyway), so the transpose goes.
    """
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_op, wildcard

    x, w = wildcard(), wildcard()
    perm = is_op("relax.permute_dims")(x)
    conv = is_op("relax.nn.conv2d")(perm, w)

    def read_nchw(expr, matches):
        axes = matches[perm].attrs.axes
        a = expr.attrs
        if (
            axes is None
            or [int(i) for i in axes] != [0, 2, 3, 1]
            or a.data_layout != "NHWC"
            or a.kernel_layout != "HWIO"
            or (a.out_layout or "NHWC") != "NHWC"
            or int(a.groups) != 1
        ):
            return expr  # only what legalize_nchw_input_conv can build
        return relax.op.nn.conv2d(
            matches[x],
            matches[w],
            a.strides,
            a.padding,
            a.dilation,
            a.groups,
            data_layout="NCHW",
            kernel_layout=a.kernel_layout,
            out_layout=a.out_layout or "NHWC",
            out_dtype=_dtype_or_none(a.out_dtype),
        )

    mod["main"] = rewrite_call(conv, read_nchw, mod["main"])
    return relax.transform.DeadCodeElimination()(mod)


def pad_depthwise_chains(mod, lanes: int):
    """``conv2d(x, Wa) + ba -> act -> depthwise(Wd) + bd [-> act] -> conv2d(Wc)`` whose C channels are
    not a multiple of ``lanes`` -> the same chain on C rounded up to whole vectors: ``Wa`` and ``ba``
    get zero output channels, ``Wd`` and ``bd`` zero channels, ``Wc`` zero input channels. No slice
    and no pad: the extra channels hold act(0) (finite), and ``Wc``'s zero rows take them out, so
    the result is exactly the unpadded chain's. (onnxruntime's NCHWc layout computes the same
    padded channels.)

    A depthwise convolution's tile is one vector of channels; with 72 or 120 channels (MnasNet),
    88 (MobileNetV3-Small) or 58 (ShuffleNet) it was a half, a quarter or an eighth of a register:
    MnasNet's 56 x 56 x 72 depthwise took 116 us against onnxruntime's 55. Padding the depthwise
    convolution alone, with a slice and a pad around it, was wrong on two threads (see
    pad_conv_output_channels); this rewrite makes neither. Only chains whose every step has one
    user are rewritten (a value also used elsewhere would be computed twice)."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    single = single_use_vars(mod["main"])
    value_var = {b.value: b.var for block in mod["main"].body.blocks for b in block.bindings}

    def act(x):
        return is_op("relax.nn.relu")(x) | is_op("relax.clip")(x, wildcard(), wildcard())

    x = wildcard()
    conv_a = is_op("relax.nn.conv2d")(x, is_const())
    bias_a = is_op("relax.add")(conv_a, is_const())
    act_a = act(bias_a)
    dw = is_op("relax.nn.conv2d")(act_a, is_const())
    bias_d = is_op("relax.add")(dw, is_const())
    act_d = act(bias_d)
    conv_c = is_op("relax.nn.conv2d")(act_d | bias_d, is_const())

    def nhwc_hwio(call) -> bool:
        a = call.attrs
        return (a.data_layout, a.kernel_layout, a.out_layout or a.data_layout) == ("NHWC", "HWIO", "NHWC") and str(
            call.args[1].ty.dtype
        ) == "float32"

    def channel_const(c, channels: int) -> bool:
        shape = [int(d) for d in c.ty.shape.values]
        return bool(shape) and shape[-1] == channels and all(d == 1 for d in shape[:-1])

    def pad_last(c, extra: int, axis: int = -1):
        v = c.value.numpy()
        widths = [(0, 0)] * v.ndim
        widths[axis] = (0, extra)
        return relax.const(np.pad(v, widths), str(c.ty.dtype))

    def conv_like(call, data, weight, groups=None):
        a = call.attrs
        return relax.op.nn.conv2d(
            data,
            weight,
            a.strides,
            a.padding,
            a.dilation,
            int(a.groups) if groups is None else groups,
            data_layout=a.data_layout,
            kernel_layout=a.kernel_layout,
            out_layout=a.out_layout or None,
            out_dtype=_dtype_or_none(a.out_dtype),
        )

    def like_act(call, data):
        if call.op.name == "relax.nn.relu":
            return relax.op.nn.relu(data)
        return relax.Call(call.op, [data, *call.args[1:]], call.attrs)

    def pad(expr, m):
        ca, ba, d, bd = m[conv_a], m[bias_a], m[dw], m[bias_d]
        aa, ad = m.get(act_a), m.get(act_d)
        steps = [ca, ba, aa, d, bd] + ([ad] if ad is not None else [])
        if any(value_var.get(e) not in single for e in steps):
            return expr
        if not all(nhwc_hwio(c) for c in (ca, d, expr)) or int(ca.attrs.groups) != 1 or int(expr.attrs.groups) != 1:
            return expr
        channels = int(ca.args[1].ty.shape.values[3])
        wd = [int(v) for v in d.args[1].ty.shape.values]
        wc = [int(v) for v in expr.args[1].ty.shape.values]
        padded = -(-channels // lanes) * lanes
        if (
            padded == channels
            or channels < lanes
            or int(d.attrs.groups) != channels
            or wd[2:] != [1, channels]
            or wc[2] != channels
            or not channel_const(ba.args[1], channels)
            or not channel_const(bd.args[1], channels)
        ):
            return expr
        extra = padded - channels
        y = conv_like(ca, m[x], pad_last(ca.args[1], extra))
        y = like_act(aa, relax.op.add(y, pad_last(ba.args[1], extra)))
        y = relax.op.add(conv_like(d, y, pad_last(d.args[1], extra), groups=padded), pad_last(bd.args[1], extra))
        if ad is not None:
            y = like_act(ad, y)
        return conv_like(expr, y, pad_last(expr.args[1], extra, axis=2))

    mod["main"] = rewrite_call(conv_c, pad, mod["main"])
    return relax.transform.DeadCodeElimination()(mod)


def pad_conv_output_channels(mod, lanes: int):
    """``conv2d(x, W)`` (NHWC output, HWIO constant weights, ``O`` output channels not a multiple of
    ``lanes``) -> ``strided_slice(conv2d(x, W padded with zero filters to a multiple of lanes),
    channels [0, O))``.

    The convolution schedules tile the output channels in whole vectors: ShuffleNet's 58 and 116
    channels (2 x 29, 4 x 29) left tiles of 2 and 4 floats, a quarter of an AVX-512 register or
    less, and its 1x1 convolutions ran at 25-45 GFLOP/s against 140 for 96 channels. The padded
    convolution computes a few zero channels more and runs in whole vectors (two per tile where
    that adds at most an eighth: SqueezeNet's 1000-class convolution, 1024 not 1008 channels, 2.2
    -> 1.4 ms); the slice is fused into the convolution's kernel with the bias and activation
    after it, and a constant bias added after the slice is padded and moved before it.

    Depthwise convolutions are left as they are. Padding them too (the zero channels added to their
    input, a pad fused into the kernel that makes it) took ShuffleNet from 3.6 to 3.0 ms, but its
    outputs were wrong on two threads, with TVM's pool as with tvmgen's (max error 224 on outputs of
    about 1e4; right on one thread): a race in that fused slice -> relu -> pad epilogue that the
    whole zoo at 2 threads now guards against (tests/test_parallel.py)."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    x, w = wildcard(), is_const()
    conv = is_op("relax.nn.conv2d")(x, w)

    def pad(expr, matches):
        a = expr.attrs
        weights, data = matches[w], matches[x]
        out = a.out_layout or a.data_layout
        if a.kernel_layout != "HWIO" or out != "NHWC" or str(weights.ty.dtype) != "float32":
            return expr
        channels, groups = int(weights.ty.shape.values[3]), int(a.groups)
        padded = -(-channels // lanes) * lanes
        if channels < lanes or padded == channels or groups != 1:
            return expr
        pair = -(-channels // (2 * lanes)) * 2 * lanes  # tiles of two vectors, where that costs little
        padded = pair if pair - channels <= channels // 8 else padded
        zeros = [(0, 0), (0, 0), (0, 0), (0, padded - channels)]
        wide = relax.const(np.pad(weights.value.numpy(), zeros), "float32")
        full = relax.op.nn.conv2d(
            data,
            wide,
            a.strides,
            a.padding,
            a.dilation,
            groups,
            data_layout=a.data_layout,
            kernel_layout=a.kernel_layout,
            out_layout=a.out_layout or None,
            out_dtype=_dtype_or_none(a.out_dtype),
        )
        return relax.op.strided_slice(full, axes=[3], begin=[0], end=[channels])

    mod["main"] = rewrite_call(conv, pad, mod["main"])

    # add(slice(conv), bias) -> slice(add(conv, bias padded with zeros)): the bias is read in the
    # padded tile like the weights, so the schedule can pack both (a bias read only for the first
    # O channels would get a packed copy of the padded size, which with_packed_weights refuses).
    wide_conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    sliced = is_op("relax.strided_slice")(wide_conv, varg_default_wildcard=True)
    bias = is_const()
    add = is_op("relax.add")(sliced, bias)

    def pad_bias(expr, matches):
        s, c = matches[sliced], matches[bias]
        shape = [int(d) for d in c.ty.shape.values] if c.ty.shape is not None else []
        full = [int(d) for d in matches[wide_conv].ty.shape.values]
        out = [int(d) for d in s.ty.shape.values]
        try:  # axes, begin, end (, strides): tuples of integers in the slices made above
            slicing = [[int(v.value) for v in a.fields] for a in s.args[1:]]
        except (AttributeError, TypeError, ValueError):
            return expr
        if (
            slicing[:2] != [[3], [0]]
            or any(st != [1] for st in slicing[3:])
            or len(full) != 4
            or full[:3] != out[:3]
            or str(c.ty.dtype) != str(s.ty.dtype)
            or not shape
            or len(shape) > 4
            or shape[-1] != out[3]
            or any(d != 1 for d in shape[:-1])
        ):
            return expr  # only the channel slice made above, and a per-channel bias
        values = np.pad(c.value.numpy(), [(0, 0)] * (len(shape) - 1) + [(0, full[3] - out[3])])
        return relax.op.strided_slice(
            relax.op.add(matches[wide_conv], relax.const(values, str(c.ty.dtype))), axes=[3], begin=[0], end=[out[3]]
        )

    mod["main"] = rewrite_call(add, pad_bias, mod["main"])
    return mod


def legalize_nchw_input_conv(bb, call):
    """LegalizeOps for ``conv2d(data_layout="NCHW", kernel_layout="HWIO", out_layout="NHWC")``,
    groups 1 (what ``nchw_input_into_conv`` makes), which TOPI's legalization leaves alone: a
    TE convolution that pads the NCHW input and writes NHWC. Any other conv2d is returned as is."""
    from tvm import te, topi

    a = call.attrs
    if (a.data_layout, a.kernel_layout, a.out_layout, int(a.groups)) != ("NCHW", "HWIO", "NHWC", 1):
        return call
    sh, sw = (int(v) for v in a.strides)
    dh, dw = (int(v) for v in a.dilation)
    pt, pl, pb, pr = (int(v) for v in a.padding)
    out_dtype = _dtype_or_none(a.out_dtype)

    def conv(x, w):
        _, channels, height, width = (int(v) for v in x.shape)
        kh, kw, _, cout = (int(v) for v in w.shape)
        dtype = out_dtype or x.dtype
        padded = topi.nn.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], name="pad_temp")
        oh = (height + pt + pb - (kh - 1) * dh - 1) // sh + 1
        ow = (width + pl + pr - (kw - 1) * dw - 1) // sw + 1
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")
        rc = te.reduce_axis((0, channels), name="rc")
        return te.compute(
            (x.shape[0], oh, ow, cout),
            lambda n, y, xx, co: te.sum(
                padded[n, rc, y * sh + ry * dh, xx * sw + rx * dw].astype(dtype) * w[ry, rx, rc, co].astype(dtype),
                axis=[ry, rx, rc],
            ),
            name="conv2d_nchw_nhwc",
        )

    return bb.call_te(conv, call.args[0], call.args[1], primfunc_name_hint="conv2d")


def legalize_sigmoid(bb, call):
    """LegalizeOps for ``relax.sigmoid`` on CPUs: ``1 / (1 + exp(-x))`` with ``exp`` written out
    (``vector_exp``) for float32, so a vectorised loop computes it in vectors. TVM's own lowering
    calls LLVM's ``exp``, which LLVM turns into one libm call per lane: a vectorised SiLU
    (``x * sigmoid(x)``, EfficientNet's activation) still spent most of its time in ``expf``.
    Other types keep TOPI's lowering."""
    from tvm import topi

    return _legalize_float32(bb, call, "sigmoid", lambda x: _f32(1.0) / (_f32(1.0) + vector_exp(-x)), topi.sigmoid)


def legalize_erf(bb, call):
    """LegalizeOps for ``relax.erf`` on CPUs: ``vector_erf`` for float32. TVM lowers ``erf`` to a
    libm ``erff`` call per element, which no loop vectorises: an Erf GELU (``x / 2 (1 + erf(x /
    sqrt 2))``, transformers' MLP activation) fused into a convolution ran it at 0.3 GFLOP/s and
    took most of a transformer's time (issue 37)."""
    from tvm import topi

    return _legalize_float32(bb, call, "erf", vector_erf, topi.erf)


def legalize_tanh(bb, call):
    """LegalizeOps for ``relax.tanh`` on CPUs: ``vector_tanh`` for float32 (TVM's lowering for
    LLVM computes two ``exp`` calls per element, each a libm call per lane)."""
    from tvm import topi

    return _legalize_float32(bb, call, "tanh", vector_tanh, topi.tanh)


def legalize_exp(bb, call):
    """LegalizeOps for ``relax.exp`` on CPUs: ``vector_exp`` for float32 (TVM's lowering is LLVM's
    ``exp``, one libm ``expf`` call per vector lane, alone or fused into a convolution's epilogue)."""
    from tvm import topi

    return _legalize_float32(bb, call, "exp", vector_exp, topi.exp)


def legalize_log(bb, call):
    """LegalizeOps for ``relax.log`` on CPUs: ``vector_log`` for float32 (TVM's lowering calls libm's
    ``logf`` once per vector lane)."""
    from tvm import topi

    return _legalize_float32(bb, call, "log", vector_log, topi.log)


# pow(x, c) for these constant exponents, written out for float32: x * x ... and sqrt vectorise, where
# TVM lowers a power other than 2 to libm's powf per lane (GELU's tanh form: 0.044715 x^3).
_POWERS = {0.5: lambda x: _sqrt(x), -0.5: lambda x: _f32(1.0) / _sqrt(x), -1.0: lambda x: _f32(1.0) / x}


def legalize_power(bb, call):
    """LegalizeOps for ``relax.power`` on CPUs: a float32 power by a constant scalar exponent that is a
    whole number from -4 to 8, 0.5 or -0.5 as multiplications, a square root or a reciprocal (exact or
    within an ulp or two of powf, which LLVM calls per lane); anything else keeps TOPI's lowering."""
    from tvm import ir, topi

    x, y = call.args
    compute = None
    if isinstance(y, ir.Constant) and str(x.ty.dtype) == str(y.ty.dtype) == "float32":
        c = y.value.numpy()
        if c.size == 1 and c.ndim <= x.ty.ndim:  # broadcasts to x's shape
            exponent = float(c.reshape(()))
            compute = _POWERS.get(exponent)
            if compute is None and exponent == int(exponent) and -4 <= exponent <= 8:
                compute = _integer_power(int(exponent))
    if compute is None:
        return bb.call_te(topi.power, x, y, primfunc_name_hint="power")
    return _elementwise(bb, x, "power", compute)


def _integer_power(n: int):
    def compute(x):
        if n == 0:
            return _f32(1.0)
        value = x
        for _ in range(abs(n) - 1):
            value = value * x
        return _f32(1.0) / value if n < 0 else value

    return compute


def _sqrt(x):
    from tvm import tirx

    return tirx.sqrt(x)


def _legalize_float32(bb, call, name: str, compute, topi_op):
    """An elementwise operator as ``compute`` of each float32 element (tagged elementwise, so it
    fuses into the kernel before it and vectorises there); other types keep TOPI's ``topi_op``."""
    x = call.args[0]
    if str(x.ty.dtype) != "float32":
        return bb.call_te(topi_op, x, primfunc_name_hint=f"tir_{name}")
    return _elementwise(bb, x, name, compute)


def _elementwise(bb, x, name: str, compute):
    from tvm import te

    return bb.call_te(
        lambda t: te.compute(t.shape, lambda *i: compute(t(*i)), name=name, tag="elemwise"),
        x,
        primfunc_name_hint=name,
    )


def _f32(value: float):
    from tvm import tirx

    return tirx.const(value, "float32")


# ln 2 in two parts: the high part has few significant bits, so n * high is exact for |n| < 2^9
_LN2_HIGH, _LN2_LOW = 0.693145751953125, 1.4286068203094172e-06


def vector_exp(x):
    """``exp(x)`` for a float32 expression, from operations that vectorise (floor, multiply-add,
    integer shift): ``exp(x) = 2^n * exp(r)`` with ``n = round(x / ln 2)`` and ``|r| <= ln 2 / 2``,
    ``exp(r)`` by its Taylor series to degree 7 (truncation error below 6e-9, relative), ``2^n``
    built in the exponent bits. ``x`` is clamped to [-87, 88], where ``2^n`` is a normal float:
    the result saturates at exp(88) ~ 1.7e38 and exp(-87) ~ 1.6e-38 instead of reaching inf / 0."""
    from tvm import tirx

    # Written out, not Let-bound (TVM's FLOP estimate cannot read Let): LLVM merges the repeats.
    x = tirx.max(tirx.min(x, _f32(88.0)), _f32(-87.0))
    n = tirx.floor(x * _f32(1.4426950408889634) + _f32(0.5))
    r = x - n * _f32(_LN2_HIGH) - n * _f32(_LN2_LOW)
    poly = _f32(1.0 / 5040.0)
    for k in (720, 120, 24, 6, 2, 1, 1):  # Horner: 1 + r (1 + r (1/2 + r (1/6 + ...)))
        poly = poly * r + _f32(1.0 / k)
    return poly * tirx.reinterpret("float32", tirx.shift_left(n.astype("int32") + 127, 23))


# log(m) for m in [sqrt(1/2), sqrt(2)) as f - f^2/2 + f^3 P(f), f = m - 1: Cephes' logf (highest degree first)
_LOG = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
_MIN_NORMAL = 1.1754943508222875e-38


def vector_log(x):
    """``log(x)`` for a float32 expression from integer and multiply-add operations that vectorise
    (Cephes' ``logf``): ``x = m 2^e`` read from the bits, ``m`` in [sqrt(1/2), sqrt(2)), ``log(m)``
    by a degree-9 polynomial in ``m - 1``, ``e ln 2`` in two parts. ``log(0) = -inf``, ``log(x < 0)``
    and ``log(NaN)`` are NaN, ``log(inf) = inf``; subnormal inputs are read as the smallest normal
    float (-87.34 instead of down to -103.3)."""
    from tvm import tirx

    v = tirx.max(x, _f32(_MIN_NORMAL))
    bits = tirx.reinterpret("int32", v)
    e = tirx.shift_right(bits, tirx.const(23, "int32")) - tirx.const(126, "int32")  # v = m 2^e, m in [0.5, 1)
    m = tirx.reinterpret(
        "float32",
        tirx.bitwise_or(tirx.bitwise_and(bits, tirx.const(0x007FFFFF, "int32")), tirx.const(0x3F000000, "int32")),
    )
    low = m < _f32(0.7071067811865476)
    f = tirx.Select(low, m + m - _f32(1.0), m - _f32(1.0))
    ef = tirx.Select(low, e - tirx.const(1, "int32"), e).astype("float32")
    poly = _f32(_LOG[0])
    for c in _LOG[1:]:
        poly = poly * f + _f32(c)
    # Written out, not Let-bound (TVM's FLOP estimate cannot read Let): LLVM merges the repeats.
    value = f * f * f * poly - ef * _f32(2.12194440e-4) - _f32(0.5) * f * f + f + ef * _f32(0.693359375)
    value = tirx.Select(x == _f32(float("inf")), x, value)
    value = tirx.Select(x == _f32(0.0), _f32(float("-inf")), value)
    return tirx.Select(x < _f32(0.0), _f32(float("nan")), tirx.Select(tirx.isnan(x), x, value))


# erf and tanh as odd rational functions x P(x^2) / Q(x^2) of a clamped x: the float32
# approximations of Eigen and XLA (coefficients highest degree first). Measured against float64
# over the float32 range: erf 4.3e-7 absolute error at most (2.6e-7 relative near 0), tanh 3.6e-7
# absolute and relative. Beyond the clamp, erf is 1 - 1.5e-8 and tanh 1 - 2.7e-7 or closer.
_ERF = (
    4.0,
    (
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    ),
    (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02),
)
_TANH = (
    7.90531110763549805,
    (
        -2.76076847742355e-16,
        2.00018790482477e-13,
        -8.60467152213735e-11,
        5.12229709037114e-08,
        1.48572235717979e-05,
        6.37261928875436e-04,
        4.89352455891786e-03,
    ),
    (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03),
)


def vector_erf(x):
    """``erf(x)`` for a float32 expression from multiply-adds and one division, which vectorise
    (``_ERF``). NaN is not propagated (the clamp makes it -4 or 4)."""
    return _odd_rational(x, *_ERF)


def vector_tanh(x):
    """``tanh(x)`` for a float32 expression from multiply-adds and one division (``_TANH``)."""
    return _odd_rational(x, *_TANH)


def _odd_rational(x, limit: float, p: tuple, q: tuple):
    from tvm import tirx

    def horner(coefficients, y):
        value = _f32(coefficients[0])
        for c in coefficients[1:]:
            value = value * y + _f32(c)
        return value

    x = tirx.max(tirx.min(x, _f32(limit)), _f32(-limit))
    # Written out, not Let-bound (TVM's FLOP estimate cannot read Let): LLVM merges the repeats.
    value = x * horner(p, x * x) / horner(q, x * x)
    # Rounded, erf's reaches 1 + 2^-23 near 3.7: both functions stay within [-1, 1].
    return tirx.max(tirx.min(value, _f32(1.0)), _f32(-1.0))


def _dtype_or_none(dtype):
    """A conv2d's out_dtype attribute: None when unset (it prints as "None", "void" or "")."""
    text = str(dtype) if dtype is not None else ""
    return None if text in ("", "None", "void") else text


KERNEL_NAME_LIMIT = 64


def short_kernel_names(limit: int = KERNEL_NAME_LIMIT):
    """A module pass giving TIR functions with names longer than ``limit`` a short one: the first
    characters and a hash of the full name. Fusion names a function after every operator in it
    (an unrolled LSTM step: 200+ characters), GPU kernels are named after their function, and
    drivers put kernel names in file paths: PoCL's kernel cache asserts on such a name
    (``pocl_cache.c: bytes_written < POCL_FILENAME_LENGTH``) and the model cannot run."""
    import hashlib

    import tvm
    from tvm import relax, tirx

    @tvm.transform.module_pass(opt_level=0, name="TvmgenShortKernelNames")
    def _pass(mod, _ctx):
        renamed = {}
        for gv, func in mod.functions.items():
            if isinstance(func, tirx.PrimFunc) and len(gv.name_hint) > limit:
                digest = hashlib.sha1(gv.name_hint.encode()).hexdigest()[:8]
                new = tvm.ir.GlobalVar(f"{gv.name_hint[: limit - 9]}_{digest}")
                relax.expr._update_type(new, gv.ty)  # the function's type, as the module gave the old one
                renamed[gv.name_hint] = new
        if not renamed:
            return mod

        @relax.expr_functor.mutator
        class Rename(relax.PyExprMutator):
            def visit_global_var_(self, gv):
                return renamed.get(gv.name_hint, gv)

        out = tvm.IRModule({}, attrs=mod.attrs, global_infos=mod.global_infos)
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function):
                new = renamed.get(gv.name_hint)
                out[new or gv] = func.with_attr("global_symbol", new.name_hint) if new else func
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                out[gv] = Rename().visit_expr(func)
        return out

    return _pass


def concat_in_place(mod):
    """``call_tir(concatenate, (call_tir(f1, a1), call_tir(f2, a2), ...))`` -> one kernel running
    f1, f2, ... one after another, each writing its slice of the concatenation directly.

    A concatenation copies every value its producers just wrote: SqueezeNet's fire modules
    concatenate their 1x1 and 3x3 expand convolutions, eight copies of up to 1.5 MB. When each
    of the concatenation's inputs is a kernel's only output and nothing else reads it, the kernels
    (scheduled already) are put in one function whose output is the concatenation, each writing
    at its offset along the concatenated axis, and the copy goes. For scheduled TIR functions
    (after the default schedules); anything else is left as it is."""
    import tvm
    import tvm_ffi
    from tvm import ir, relax, s_tir, tirx

    call_tir = ir.Op.get("relax.call_tir")
    funcs = {gv.name_hint: f for gv, f in mod.functions.items()}
    merged: dict = {}  # (concat, producers) -> GlobalVar of the merged kernel
    bb = relax.BlockBuilder(mod)

    def is_call_tir(v):
        return isinstance(v, relax.Call) and v.op.same_as(call_tir) and len(v.args) == 2

    def shape_of(buf):
        return [int(d) for d in buf.ty.shape] if all(isinstance(d, tirx.IntImm) for d in buf.ty.shape) else None

    def retarget(body, old, new, axis, offset):
        """``body`` with every access to buffer ``old`` made to ``new`` at ``offset`` along ``axis``."""

        def shift(idx):
            return [i + tirx.const(offset, i.ty.dtype) if k == axis else i for k, i in enumerate(idx)]

        def store(s):
            return tirx.BufferStore(new, s.value, shift(s.indices), s.span) if s.buffer.same_as(old) else s

        def load(x):
            return tirx.BufferLoad(new, shift(x.indices), x.span) if x.source.same_as(old) else x

        def region(r):
            if not r.source.same_as(old):
                return r
            return tirx.BufferRegion(
                new,
                [
                    ir.Range.from_min_extent(x.min + tirx.const(offset, x.min.ty.dtype), x.extent) if k == axis else x
                    for k, x in enumerate(r.region)
                ],
            )

        return tvm_ffi.structural_map(
            body, [(tirx.BufferStore, store), (ir.TensorLoad, load), (ir.TensorRegion, region)]
        )

    def merge(concat, producers):
        """The merged PrimFunc, or None when the producers do not fit."""
        out = concat.params[-1]
        full = shape_of(out)
        ins = [shape_of(p) for p in concat.params[:-1]]
        if full is None or any(s is None or len(s) != len(full) for s in ins) or len(ins) != len(producers):
            return None
        axes = {k for s in ins for k, (a, b) in enumerate(zip(s, full)) if a != b}
        if len(axes) > 1:
            return None
        axis = axes.pop() if axes else len(full) - 1
        if sum(s[axis] for s in ins) != full[axis]:
            return None
        params, allocs, bodies, offset = [], [], [], 0
        for shape, func in zip(ins, producers):
            func = s_tir.renew_defs(func)  # a kernel used twice gets its own variables each time
            result = func.params[-1]
            root = func.body.block if isinstance(func.body, s_tir.SBlockRealize) else None
            if (
                root is None
                or root.name_hint != "root"
                or root.match_buffers
                or shape_of(result) != shape
                or str(result.ty.dtype) != str(out.ty.dtype)
                or any(p.same_as(result) for p in func.params[:-1])
            ):
                return None
            params += list(func.params[:-1])
            allocs += list(root.alloc_buffers)
            bodies.append(retarget(root.body, result, out, axis, offset))
            offset += shape[axis]
        root = s_tir.SBlock([], [], [], "root", tirx.SeqStmt(bodies), alloc_buffers=allocs)
        attrs = {k: v for k, v in producers[0].attrs.items() if k not in ("global_symbol", "layout_free_buffers")}
        return tirx.PrimFunc(
            [*params, out], s_tir.SBlockRealize([], True, root), attrs=tvm.ir.make_node("ir.DictAttrs", **attrs)
        )

    for fgv, fn in list(mod.functions.items()):
        if not isinstance(fn, relax.Function):
            continue
        bindings = {
            b.var: (b.value, block)
            for block in getattr(fn.body, "blocks", [])
            for b in block.bindings
            if isinstance(b, relax.VarBinding)
        }
        single = single_use_vars(fn)
        rewrites = {}
        for var, (value, block) in bindings.items():
            if not is_call_tir(value) or not value.args[0].name_hint.startswith("concatenate"):
                continue
            concat = funcs.get(value.args[0].name_hint)
            args = list(getattr(value.args[1], "fields", []))
            if not isinstance(concat, tirx.PrimFunc) or len(args) < 2 or len(concat.params) != len(args) + 1:
                continue
            made = [bindings.get(a) if isinstance(a, relax.Var) else None for a in args]
            if any(
                m is None
                or not is_call_tir(m[0])
                or not m[1].same_as(block)
                or a not in single
                or not isinstance(m[0].ty, relax.TensorType)
                for a, m in zip(args, made)
            ):
                continue
            names = [m[0].args[0].name_hint for m in made]
            producers = [funcs.get(n) for n in names]
            if any(a.same_as(b) for i, a in enumerate(args) for b in args[:i]) or not all(
                isinstance(p, tirx.PrimFunc)
                and p.attrs
                and p.attrs.get("tirx.is_scheduled")
                and len(p.params) == len(m[0].args[1].fields) + 1
                for p, m in zip(producers, made)
            ):
                continue
            key = (value.args[0].name_hint, *names)
            if key not in merged:
                func = merge(concat, producers)
                if func is None:
                    continue
                parts = [n.removeprefix("fused_").removesuffix("_prepacked") for n in names]
                name = "fused_" + "_".join(parts) + "_" + value.args[0].name_hint
                merged[key] = bb.add_func(func, name)
            inputs = [f for m in made for f in m[0].args[1].fields]
            rewrites[var] = relax.call_tir(merged[key], relax.Tuple(inputs), value.ty)
        if not rewrites:
            continue

        @relax.expr_functor.mutator
        class Rewrite(relax.PyExprMutator):
            def visit_var_binding_(self, binding):
                new = rewrites.get(binding.var)
                if new is None:
                    return super().visit_var_binding_(binding)
                self.builder_.emit_normalized(relax.VarBinding(binding.var, self.visit_expr(new)))
                return None

        bb.update_func(fgv, Rewrite(bb.get()).visit_expr(fn))
    return relax.transform.DeadCodeElimination()(bb.get()) if merged else mod


REDUCTIONS = ("sum", "mean", "max", "min", "prod", "variance", "std")

# reduction over a stacked axis -> the elementwise operator that combines two of its slices
_PAIRWISE = {"max": "maximum", "min": "minimum", "sum": "add", "mean": "add"}


def stack_free(mod):
    """No ``stack`` left for the layout conversion: ``max|min|sum|mean(stack([x0, .., xn], k), k)``
    becomes ``x0 op x1 op .. xn`` (mean: the sum times 1/n), any other ``stack`` the concatenation
    of its inputs each with a unit axis ``k``.

    TVM 0.27's ONNX importer writes a Max, Min, Sum or Mean of several inputs as that reduction of
    their stack, and TVM's layout inference names the new axis of a ``stack`` "S", a letter no
    layout of its rank has: the reduction after it failed with ``Invalid SLayout: can't find S in
    source layout ABC``, and the CPU build fell back to no NHWC layout conversion for the whole
    model (a 1-D convolutional classifier with a ``Max(x, 0)`` ran its convolution 14x slower).
    The pairwise form is also one elementwise kernel, where the stack was a copy and a reduction."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    def stacked(expr):
        """(the stacked values, the new axis) of a ``stack`` call, else None."""
        if not (isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.stack"):
            return None
        values = expr.args[0]
        if not isinstance(values, relax.Tuple) or not values.fields:
            return None
        rank = len(expr.ty.shape.values) if isinstance(expr.ty, relax.TensorType) and expr.ty.shape else -1
        axis = int(expr.attrs.axis) if expr.attrs.axis is not None else 0
        return (list(values.fields), axis % rank) if rank > 0 else None

    def combine(call, matches):
        name = getattr(getattr(call, "op", None), "name", "").removeprefix("relax.")
        found = stacked(matches[stack]) if name in _PAIRWISE else None
        axes = call.attrs.axis if found else None
        if found is None or axes is None or len(axes) != 1:
            return call
        values, axis = found
        if int(axes[0]) % len(call.args[0].ty.shape.values) != axis:
            return call
        dtype = str(call.ty.dtype)
        if name == "mean" and not dtype.startswith("float"):
            return call
        result = values[0]
        for v in values[1:]:
            result = getattr(relax.op, _PAIRWISE[name])(result, v)
        if name == "mean":
            result = relax.op.multiply(result, relax.const(1.0 / len(values), dtype))
        return relax.op.expand_dims(result, [axis]) if bool(call.attrs.keepdims) else result

    def as_concat(call, _matches):
        found = stacked(call)
        if found is None:
            return call
        values, axis = found
        return relax.op.concat([relax.op.expand_dims(v, [axis]) for v in values], axis=axis)

    stack = is_op("relax.stack")(wildcard())
    reduction = is_op("relax.max")(stack)
    for op in list(_PAIRWISE)[1:]:
        reduction = reduction | is_op(f"relax.{op}")(stack)
    mod = rewrite_functions(mod, reduction, combine)
    mod = relax.transform.DeadCodeElimination()(mod)
    return rewrite_functions(mod, stack, as_concat)


def non_negative_axes(mod):
    """Axes counted from the end (``squeeze(x, axis=[-1])``, ``mean(x, axis=[-1])``,
    ``concat(.., axis=-1)``, ``expand_dims(x, axis=[-1])``) written from the start.

    TVM 0.27's layout conversion indexes its layouts with the axis as given: a negative one made it
    fail with ``std::bad_alloc`` on silero-vad (``squeeze(axis=[-1])`` after its convolutions), and
    the CPU build fell back to no layout conversion."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    def ndim(expr) -> int:
        ty = getattr(expr, "ty", None)
        if isinstance(ty, relax.TensorType):
            return int(ty.ndim)
        fields = getattr(ty, "fields", None)  # concat's tuple
        return int(fields[0].ndim) if fields and isinstance(fields[0], relax.TensorType) else -1

    def positive(axes, rank):
        return [int(a) % rank if int(a) < 0 else int(a) for a in axes]

    def rewrite(call, _matches):
        if not isinstance(call, relax.Call):  # a variable bound to the match (`gv = lv`): its binding is rewritten
            return call
        name, a, x = call.op.name.removeprefix("relax."), call.attrs, call.args[0]
        axes = a.axis if hasattr(a, "axis") else None
        if axes is None:
            return call
        many = not isinstance(axes, (int,)) and hasattr(axes, "__len__")
        if all(int(v) >= 0 for v in (axes if many else [axes])):
            return call
        rank = ndim(x) + (len(axes) if name == "expand_dims" else 0)
        if rank <= 0:
            return call  # rank unknown: left as it is
        if name == "concat":
            return relax.op.concat(x, axis=positive([axes], rank)[0])
        if name in REDUCTIONS:
            return getattr(relax.op, name)(x, axis=positive(axes, rank), keepdims=bool(a.keepdims))
        return getattr(relax.op, name)(x, axis=positive(axes, rank))

    ops = ["squeeze", "expand_dims", "concat", *REDUCTIONS]
    pattern = is_op(f"relax.{ops[0]}")(wildcard())
    for op in ops[1:]:
        pattern = pattern | is_op(f"relax.{op}")(wildcard())
    return rewrite_functions(mod, pattern, rewrite)


def single_use_vars(fn) -> set:
    """The variables of Relax function ``fn`` that exactly one binding reads and its result does not:
    the values a rewrite may replace without computing them twice."""
    from tvm import relax

    uses: dict = {}
    for block in getattr(fn.body, "blocks", []):
        for b in block.bindings:
            if isinstance(b, relax.VarBinding):
                for v in relax.analysis.free_vars(b.value):
                    uses[v] = uses.get(v, 0) + 1
    returned = relax.analysis.free_vars(fn.body.body)
    return {v for v, n in uses.items() if n == 1 and not any(v.same_as(r) for r in returned)}


def rewrite_functions(mod, pattern, rewrite):
    """``mod`` with ``rewrite`` (``relax.dpl.rewrite_call``'s callback) applied to every match of
    ``pattern`` in each of its Relax functions."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = rewrite_call(pattern, rewrite, func)
    return mod


def module_pass(name: str, fn):
    """``fn(mod) -> mod`` as a TVM module pass named ``name``."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod, _ctx):
        return fn(mod)

    return _pass


def prelu_unflattened(mod):
    """``reshape(prelu(reshape(x, [-1]), alpha, axis=0), shape(x))`` with a constant ``alpha`` that is
    one value per channel of ``x``'s last axis, as ``prelu(x, alpha_c, axis=-1)``. TVM's TFLite importer
    writes PRELU that way (the input flattened, alpha broadcast to it), and the reshapes kept the PReLU
    out of the preceding convolution's epilogue: a kernel of its own on the GPU (two of the selfie
    segmenter's 14 dispatches). Run after FoldConstant (alpha is a constant then); other alphas stay."""
    import numpy as np
    from tvm import ir, relax
    from tvm.relax.dpl import is_op, wildcard

    def static_shape(e):
        ty = getattr(e, "ty", None)
        dims = getattr(getattr(ty, "shape", None), "values", None)
        return [getattr(d, "value", None) for d in dims] if dims is not None else None

    x, alpha, flat_shape, shape = wildcard(), wildcard(), wildcard(), wildcard()
    prelu = is_op("relax.nn.prelu")(is_op("relax.reshape")(x, flat_shape), alpha)
    pattern = is_op("relax.reshape")(prelu, shape)

    def rewrite(expr, matches):
        a, data = matches[alpha], matches[x]
        if not isinstance(a, ir.Constant) or int(matches[prelu].attrs.axis) != 0:
            return expr
        dims, out = static_shape(data), static_shape(expr)
        if not dims or None in dims or dims != out:
            return expr
        values = a.value.numpy()
        if values.size != int(np.prod(dims)):
            return expr
        per_pixel = values.reshape(-1, dims[-1])
        if not np.array_equal(per_pixel, np.broadcast_to(per_pixel[:1], per_pixel.shape)):
            return expr  # alpha varies over more than the channels
        return relax.op.nn.prelu(data, relax.const(per_pixel[0].copy(), str(values.dtype)), axis=len(dims) - 1)

    return rewrite_functions(mod, pattern, rewrite)
