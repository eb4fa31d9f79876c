"""One multiply-add per value from an int8 kernel's accumulator to its 8-bit output.

A quantised model's convolution or matmul ends in a chain of per-channel steps: the zero-point
correction (``acc - zx * colsum``), the cast to float, the scale (``* sx * sw``), the bias, then
``quantize`` (``round(x / s) + z``), a clip (ReLU6 as 8-bit bounds) and, before a kernel on the
dot-product instruction, a shift to uint8 (``int8_qdq.share_shifted_activations``). Each step is a
vector instruction on every value: MobileNetV2's full-integer expansion layers spend more time in
them than in the dot products themselves (K = 16: 4 ``vpdpbusd`` per output vector against 10
epilogue instructions).

``fold_requantize`` turns the chain into ``round(clip(float(acc) * a[c] + b[c], lo, hi))`` with
``a`` and ``b`` folded from the constants at compile time: a cast, a fused multiply-add, two
bounds, the rounding and the narrowing. The values are the same up to float rounding of the
folded constants: an output can differ by one step where ``x / s`` lies within an ulp of a half,
as it already may between the reference runtime's fixed-point arithmetic and its float one.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

_BOUNDS = {"int8": (-128, 127), "uint8": (0, 255)}


def _name(expr) -> str:
    from tvm import relax

    return getattr(expr.op, "name", "") if isinstance(expr, relax.Call) else ""


def _per_channel(expr, channels: int, ndim: int):
    """A constant that broadcasts along the last axis only (a scalar, [C] or [1, .., 1, C]) as a
    float64 array of ``channels`` values; None for anything else."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.GenericConst):
        return None
    data = expr.value.numpy()
    if data.dtype.kind not in "iuf" or data.ndim > ndim:
        return None
    if data.size == 1:
        return np.full(channels, float(data.reshape(-1)[0]))
    if data.shape[-1] != channels or any(d != 1 for d in data.shape[:-1]):
        return None
    return data.reshape(-1).astype(np.float64)


def _bound(value) -> float | None:
    """A clip bound (a PrimValue holding a float or int immediate) as a float."""
    inner = getattr(value, "value", None)
    inner = getattr(inner, "value", inner)
    if not isinstance(inner, int | float):
        return None
    try:
        return float(inner)
    except (TypeError, ValueError):
        return None


class _Chain:
    """The folded chain of one quantize: ``round(clip(float(start - i) - f) * a + b, lo, hi)) + zero``
    (``i``: the integer offsets of an int32 start, ``f`` the float ones before the first product)."""

    def __init__(self, start, int_offset, float_offset, a, b, lo: float, hi: float, zero: int, dtype: str):
        self.start, self.int_offset, self.float_offset = start, int_offset, float_offset
        self.a, self.b, self.lo, self.hi, self.zero, self.dtype = a, b, lo, hi, zero, dtype


def _find_chains(main) -> dict:
    """{the last call of a chain: its _Chain} over main's dataflow bindings."""
    import tvm
    from tvm import relax

    values: dict = {}
    users: dict = {}  # var -> the vars of the bindings that read it (once per read)

    def reads(expr, reader) -> None:
        if isinstance(expr, relax.Var):
            users.setdefault(expr, []).append(reader)
        elif isinstance(expr, relax.Call):
            for arg in expr.args:
                reads(arg, reader)
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields:
                reads(field, reader)
        elif isinstance(expr, relax.TupleGetItem):
            reads(expr.tuple_value, reader)
        elif expr is not None and not isinstance(expr, tvm.ir.expr.GenericConst):
            for var in relax.analysis.free_vars(expr):  # an If, a function: counted as two reads
                users.setdefault(var, []).extend([None, None])

    bindings = [b for block in main.body.blocks for b in block.bindings]
    for b in bindings:
        if isinstance(b, relax.VarBinding):
            values[b.var] = b.value
            reads(b.value, b.var)
        else:  # a match_cast: its var reads the value
            reads(b.value, None)
    reads(main.body.body, None)

    def only_user(var):
        readers = users.get(var, [])
        return readers[0] if len(readers) == 1 and readers[0] is not None else None

    chains = {}
    for b in bindings:
        if not isinstance(b, relax.VarBinding) or _name(b.value) != "relax.quantize":
            continue
        found = _chain(b.var, values, only_user)
        if found is not None:
            end, chain = found
            chains[values[end]] = chain
    return chains


def _chain(qvar, values: dict, only_user):
    """The chain through the quantize bound to ``qvar``: (the var of its last call, _Chain), or None."""
    from tvm import relax

    q = values[qvar]
    dtype = str(q.attrs.out_dtype)
    shape = q.ty.shape.values if hasattr(q.ty, "shape") and q.ty.shape is not None else None
    if dtype not in _BOUNDS or shape is None:
        return None
    ndim = len(shape)
    try:
        channels = int(shape[-1])
    except TypeError:
        return None
    scale, zero = _per_channel(q.args[1], channels, ndim), _per_channel(q.args[2], channels, ndim)
    if scale is None or zero is None or np.any(scale == 0):
        return None
    per_axis = any(int(np.prod(arg.value.shape)) > 1 for arg in q.args[1:])
    if per_axis and int(q.attrs.axis) % ndim != ndim - 1:  # per channel along another axis
        return None
    # backwards from the quantize's input to the chain's start: the steps, last first
    steps: list = []  # ("add" | "subtract" | "multiply", per-channel values, in the integer part) or ("cast",)
    var = q.args[0]
    integer = False
    while isinstance(var, relax.Var) and var in values and only_user(var) is not None:
        value = values[var]
        op = _name(value)
        if op in ("relax.add", "relax.subtract", "relax.multiply") and isinstance(value.args[0], relax.Var):
            const = _per_channel(value.args[1], channels, ndim)
            if const is None or str(value.args[0].ty.dtype) != str(value.ty.dtype):
                break
            if integer and op == "relax.multiply":
                break  # an integer product can wrap: not folded
            steps.append((op[len("relax.") :], const, integer))
        elif (
            op == "relax.astype"
            and not integer
            and str(value.ty.dtype) == "float32"
            and str(value.args[0].ty.dtype) == "int32"
            and isinstance(value.args[0], relax.Var)
        ):
            integer = True
            steps.append(("cast", None, False))
        else:
            break
        var = value.args[0]
    if not steps or not isinstance(var, relax.Var) or str(var.ty.dtype) != ("int32" if integer else "float32"):
        return None
    # forwards: the additions before the first product stay as they were (exact on an integer
    # accumulator, and rounded as before on a float one: folded into b they could cancel against a
    # large x * a, e.g. the zero point's column sums); the rest is x * a + b
    int_offset, float_offset = np.zeros(channels), np.zeros(channels)
    a, b = np.ones(channels), np.zeros(channels)
    scaled = False
    for op, const, in_integers in reversed(steps):
        if op == "cast":
            continue
        if op == "multiply":
            scaled = True
            a, b = a * const, b * const
        elif not scaled:
            offset = int_offset if in_integers else float_offset
            offset -= const if op == "add" else -const
        else:
            b = b + const if op == "add" else b - const
    inverse = 1.0 / scale
    a, b = a * inverse, b * inverse
    # one zero point (the usual case) is added after the rounding, in integers, as quantize does:
    # in b it would cost precision where it cancels against x * a (an int8 zero point of -128)
    out_zero = int(zero[0]) if np.all(zero == zero[0]) and zero[0] == np.round(zero[0]) else 0
    b = b + (zero - out_zero)
    lo, hi = _BOUNDS[dtype]
    end = qvar
    # forwards: a clip in the 8-bit type, then the uint8 shift of a dot-product kernel's input
    nxt = only_user(end)
    if nxt is not None and _name(values[nxt]) == "relax.clip":
        clo, chi = _bound(values[nxt].args[1]), _bound(values[nxt].args[2])
        if clo is not None and chi is not None:
            lo, hi = max(lo, np.ceil(clo)), min(hi, np.floor(chi))
            end, nxt = nxt, only_user(nxt)
    if nxt is not None and dtype == "int8":
        shifted = _shift(nxt, values, only_user)
        if shifted is not None:
            end, dtype = shifted, "uint8"
            out_zero, lo, hi = out_zero + 128, lo + 128, hi + 128
    if lo > hi:
        return None
    if np.any(int_offset != np.round(int_offset)) or np.any(np.abs(int_offset) >= 2**31):
        return None
    return end, _Chain(var, int_offset, float_offset, a, b, float(lo - out_zero), float(hi - out_zero), out_zero, dtype)


def _shift(t1, values: dict, only_user):
    """``astype(add(astype(v, int32), 128), uint8)`` from its first var: the last var, or None."""
    cast = values[t1]
    if not (_name(cast) == "relax.astype" and str(cast.ty.dtype) == "int32"):
        return None
    t2 = only_user(t1)
    if t2 is None or _name(values[t2]) != "relax.add":
        return None
    const = values[t2].args[1]
    data = getattr(getattr(const, "value", None), "numpy", lambda: None)()
    if data is None or data.size != 1 or int(data.reshape(-1)[0]) != 128:
        return None
    u = only_user(t2)
    if u is None or not (_name(values[u]) == "relax.astype" and str(values[u].ty.dtype) == "uint8"):
        return None
    return u


def _emit(bb, chain: _Chain, start):
    from tvm import relax, te, tirx

    consts = [relax.const(chain.a.astype(np.float32)), relax.const(chain.b.astype(np.float32))]
    with_int, with_float = bool(chain.int_offset.any()), bool(chain.float_offset.any())
    if with_int:
        consts.append(relax.const(chain.int_offset.astype(np.int32)))
    if with_float:
        consts.append(relax.const(chain.float_offset.astype(np.float32)))

    def compute(x, a, b, *offsets):
        def value(*idx):
            c = idx[-1]
            v = x[idx]
            rest = list(offsets)
            if with_int:
                v = v - rest.pop(0)[c]
            v = v.astype("float32")
            if with_float:
                v = v - rest.pop(0)[c]
            v = v * a[c] + b[c]
            v = tirx.max(tirx.min(v, tirx.const(chain.hi, "float32")), tirx.const(chain.lo, "float32"))
            v = te.round(v).astype("int32")
            return (v + tirx.const(chain.zero, "int32") if chain.zero else v).astype(chain.dtype)

        return te.compute(x.shape, value, name="requantized")

    return bb.call_te(compute, start, *consts, primfunc_name_hint="requantize")


def fold_requantize(mod):
    """``mod`` with each quantize chain of main (see the module) computed as one multiply-add."""
    from tvm import relax

    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        return mod
    main = mod["main"]
    if not isinstance(main, relax.Function) or not isinstance(main.body, relax.SeqExpr):
        return mod
    chains = _find_chains(main)
    if not chains:
        return mod
    count = 0

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            nonlocal count
            chain = chains.get(call)
            if chain is None:
                return super().visit_call_(call)
            count += 1
            return _emit(self.builder_, chain, self.visit_expr(chain.start))

    rw = Rewriter(mod)
    new_main = rw.visit_expr(main)
    mod = rw.builder_.get()
    mod.update_func(mod.get_global_var("main"), new_main)
    if count:
        log.info("requantize: %d chain(s) folded into one multiply-add", count)
    return relax.transform.DeadCodeElimination()(mod)


def FoldRequantize():  # noqa: N802 - a pass, named like TVM's
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenFoldRequantize")
    def _pass(mod, _ctx):
        return fold_requantize(mod)

    return _pass
