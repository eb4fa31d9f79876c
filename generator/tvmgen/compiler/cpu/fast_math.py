"""Elementwise math written out so it vectorises on CPUs: LegalizeOps entries for sigmoid, erf, tanh, exp,
log and constant powers (``legalize_*``) on float32, from the approximations ``vector_exp``,
``vector_log``, ``vector_erf`` and ``vector_tanh`` (TVM's own lowering calls libm once per vector lane)."""

from __future__ import annotations


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
# exp(r) on [-ln 2 / 2, ln 2 / 2] as 1 + r + c2 r^2 + ... + c6 r^6, highest degree first: fitted for the
# least largest relative error (3e-9 exactly computed; as compiled, within 7.6e-8 of exp over [-87, 88],
# as close as a degree-7 Taylor series, one multiply-add fewer per value)
_EXP = (
    0.001381461309353545,
    0.00836870996132013,
    0.04166838737389554,
    0.16666520688657022,
    0.4999999345162584,
    1.0,
    1.0,
)


def vector_exp(x, at_most_zero: bool = False):
    """``exp(x)`` for a float32 expression, from operations that vectorise (floor, multiply-add,
    integer shift): ``exp(x) = 2^n * exp(r)`` with ``n = round(x / ln 2)`` and ``|r| <= ln 2 / 2``,
    ``exp(r)`` by a fitted polynomial of degree 6 (``_EXP``: relative error 3e-9), ``2^n``
    built in the exponent bits. ``x`` is clamped to [-87, 88], where ``2^n`` is a normal float:
    the result saturates at exp(88) ~ 1.7e38 and exp(-87) ~ 1.6e-38 instead of reaching inf / 0.
    ``at_most_zero``: ``x <= 0`` by construction (softmax's ``x - max``), so no upper clamp."""
    from tvm import tirx

    # Written out, not Let-bound (TVM's FLOP estimate cannot read Let): LLVM merges the repeats.
    x = tirx.max(x if at_most_zero else tirx.min(x, _f32(88.0)), _f32(-87.0))
    n = tirx.floor(x * _f32(1.4426950408889634) + _f32(0.5))
    r = x - n * _f32(_LN2_HIGH) - n * _f32(_LN2_LOW)
    poly = _f32(_EXP[0])
    for c in _EXP[1:]:  # Horner: 1 + r (1 + r (c2 + r (c3 + ...)))
        poly = poly * r + _f32(c)
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
