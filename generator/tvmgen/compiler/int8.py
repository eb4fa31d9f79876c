"""8-bit integer matrix products on the CPU's dot-product instructions.

TVM imports an integer matmul (ONNX MatMulInteger, as ``onnxruntime.quantization.quantize_dynamic``
writes it) as ``matmul(int32(a) - a_zero, int32(w) - w_zero)``: everything widened to 32 bits, so a
vector instruction does 16 (AVX-512) or 4 (NEON) multiply-adds. A dot-product instruction does four
times as many on the 8-bit values themselves: AVX-512 VNNI ``vpdpbusd`` (u8 x s8) and the Arm
dot-product extension ``udot`` / ``sdot``.

``Int8DotProducts`` rewrites such a matmul whose weights are constant, when the target has one of
these instructions. With ``w`` the weights minus their zero point (folded at compile time):

    (a - a_zero) . w  =  a' . w'  +  c * rowsum(a')  -  a_zero' * (colsum(w') + c * K)

- ``w' = w - c`` in the 8-bit type the instruction takes, each column shifted by a constant ``c``
  where its values need it (unsigned weights for a signed instruction, per-column zero points),
  packed at compile time as [N / lanes, K / 4, lanes, 4]: one instruction reads one contiguous run;
- ``a' = a + s`` and ``a_zero' = a_zero + s``: the activations, shifted by ``s`` = 128 when the
  instruction wants the other signedness, else 0.

The core ``a' . w'`` is a TIR function of its own (tensorized by ``schedule_dot``); the
corrections are Relax operators that fuse into its epilogue (or vanish when ``c`` and the zero
point are 0). Integer arithmetic is exact (modulo 2^32, like the original), so results are bit-identical.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("tvmgen.compiler")

DOT_ANNOTATION = "tvmgen_dot"  # block annotation: the tensor intrinsic to tensorize with
INLINE_DEQUANTIZE = "tvmgen_dequantize"  # a block the schedules inline into its consumer first
_OUT_EWISE_FUSABLE = 4  # relax op pattern: elementwise consumers fuse into this function


@dataclass(frozen=True)
class DotProduct:
    intrin: str  # registered TensorIntrin: C[lanes] += A[4] . B[lanes, 4]
    lanes: int  # int32 results per instruction
    a_dtype: str  # the activations' type the instruction takes
    b_dtype: str  # the weights' type


def dot_product(target, a_dtype: str) -> DotProduct | None:
    """The dot-product instruction this target has for activations of ``a_dtype``, or None."""
    from tvm.target import codegen

    if codegen.llvm_version_major() < 20:  # the intrinsics below take <N x i8> from LLVM 20 on
        return None
    triple = str(target.attrs.get("mtriple", "")) or codegen.llvm_get_system_triple()
    if triple.startswith(("x86_64", "i686", "i386")):
        if codegen.target_has_features(["avx512vnni", "avx512bw"], target):
            return DotProduct(_register("vpdpbusd", 16, "uint8", "int8"), 16, "uint8", "int8")
    elif triple.startswith(("aarch64", "arm64")) and codegen.target_has_features("dotprod", target):
        if a_dtype == "int8":
            return DotProduct(_register("sdot", 4, "int8", "int8"), 4, "int8", "int8")
        return DotProduct(_register("udot", 4, "uint8", "uint8"), 4, "uint8", "uint8")
    return None


def register_intrinsics(target) -> None:
    """Register the dot-product intrinsics ``target`` may use (a tuning database's records name
    them: reading one needs them registered first)."""
    for a_dtype in ("uint8", "int8"):
        dot_product(target, a_dtype)


# LLVM's names; each takes the bytes as <N x i8> vectors. (TVM's own tensor intrinsic for
# vpdpbusd passes <16 x i32>, which LLVM 20 and later reject, and importing TVM's intrinsics
# loads every backend's: a minute with TensorFlow loaded. tvmgen registers its own.)
_LLVM_INTRINSICS = {
    "vpdpbusd": "llvm.x86.avx512.vpdpbusd.512",
    "sdot": "llvm.aarch64.neon.sdot.v4i32.v16i8",
    "udot": "llvm.aarch64.neon.udot.v4i32.v16i8",
}


def _register(instruction: str, lanes: int, a_dtype: str, b_dtype: str) -> str:
    """Register ``C[lanes] += A[4] . B[lanes, 4]`` (int32 sums of 8-bit products) on ``instruction``
    as a tensor intrinsic, once; its name."""
    from tvm import s_tir
    from tvm.script import tirx as T

    name = f"tvmgen_dot_{lanes}x4_{a_dtype}_{b_dtype}_{instruction}"
    if s_tir.TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    llvm = _LLVM_INTRINSICS[instruction]
    nbytes = lanes * 4

    def operand(name: str):
        """A buffer of the intrinsic's signature, new at each call (desc and impl declare their own):
        the 8-bit operands A[4] and B[lanes, 4], and the int32 sums C[lanes]."""
        shape, dtype = {"A": ((4,), a_dtype), "B": ((lanes, 4), b_dtype), "C": ((lanes,), "int32")}[name]
        return T.Buffer(shape, dtype, offset_factor=1)

    # TVMScript reads the parameters' annotations as buffer declarations: a call, which no type
    # checker takes as a type (the ignores below)
    @T.prim_func(s_tir=True)
    def desc(A: operand("A"), B: operand("B"), C: operand("C")) -> None:  # type: ignore[valid-type]
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            for i, k in T.grid(lanes, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(A: operand("A"), B: operand("B"), C: operand("C")) -> None:  # type: ignore[valid-type]
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            # the 4 activations as one 32-bit lane, repeated in every lane: each lane's 4 bytes
            # meet that lane's 4 weights
            a4: T.int32 = T.reinterpret(A.vload([0], f"{a_dtype}x4"), dtype="int32")
            C[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(llvm),
                C.vload([0], f"int32x{lanes}"),
                T.reinterpret(T.broadcast(a4, lanes), dtype=f"{a_dtype}x{nbytes}"),
                B.vload([0, 0], dtype=f"{b_dtype}x{nbytes}"),
                dtype=f"int32x{lanes}",
            )

    s_tir.TensorIntrin.register(name, desc, impl)
    return name


# ------------------------------------------------------------------ Relax: the rewrite

_INT8 = {"int8": (-128, 127), "uint8": (0, 255)}


def _operand(expr, var2val):
    """``int32(x8) [- zero]`` -> (x8, zero or None); None for anything else."""
    from tvm import relax

    value = var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr
    zero = None
    if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.subtract":
        inner, zero = value.args
        if tuple(int(d) for d in zero.ty.shape.values) != ():  # a per-row zero point: not handled
            return None
        value = var2val.get(inner, inner) if isinstance(inner, relax.Var) else inner
    if (
        isinstance(value, relax.Call)
        and getattr(value.op, "name", "") == "relax.astype"
        and str(value.attrs.dtype) == "int32"
        and str(value.args[0].ty.dtype) in _INT8
    ):
        return value.args[0], zero
    return None


def _constant(expr, var2val, kinds: str = "iu"):
    """The value of a constant expression (constants, casts, subtractions: how the importer
    spells ``int32(w) - w_zero``; transposes and reshapes) as a numpy array (int64 for integers),
    or None. ``kinds``: the numpy dtype kinds accepted ("f" for float scales)."""
    import tvm
    from tvm import relax

    value = var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr
    if isinstance(value, tvm.ir.expr.GenericConst):
        data = value.value.numpy()
        if data.dtype.kind not in kinds:
            return None
        return data.astype(np.int64) if data.dtype.kind in "iu" else data
    if not isinstance(value, relax.Call):
        return None
    op = getattr(value.op, "name", "")
    if op in ("relax.permute_dims", "relax.reshape"):
        data = _constant(value.args[0], var2val, kinds)
        if data is None:
            return None
        if op == "relax.reshape":
            return data.reshape([int(d) for d in value.ty.shape.values])
        axes = value.attrs.axes
        return data.transpose([int(a) for a in axes] if axes is not None else None)
    if op not in ("relax.astype", "relax.subtract"):
        return None
    args = [_constant(a, var2val, kinds) for a in value.args]
    known = [a for a in args if a is not None]
    if len(known) != len(args):
        return None
    if op == "relax.astype":
        return known[0] if str(value.attrs.dtype) in ("int32", "int64") else None
    return known[0] - known[1]


def _weights(w: np.ndarray, b_dtype: str):
    """A [K, N] integer weight -> (w' as b_dtype, c) with w = w' + c, ``c`` an int64 shift per
    column (zero where a column fits as it is); None if a column's values span more than 256."""
    lo, hi = _INT8[b_dtype]
    wmin, wmax = w.min(axis=0), w.max(axis=0)
    if np.any(wmax - wmin > hi - lo):
        return None
    c = np.where((wmin >= lo) & (wmax <= hi), 0, wmin - lo).astype(np.int64)
    return (w - c).astype(b_dtype), c


def dot_core(lead, k: int, n: int, dot: DotProduct):
    """The TIR function ``C[..., n] = sum_k int32(A[..., k]) * int32(B[k, n])`` with B packed as
    [n / lanes, k / 4, lanes, 4]; ``lead``: the leading dimensions (an int: one). A and C keep the
    model's shape (e.g. NHWC): a reshape between the core and its epilogue would stop the epilogue
    fusing into it, a slice of the first channels does not."""
    from tvm import te, tirx

    def i64(v: int):  # Relax's legalised functions use 64-bit shapes; FuseTIR compares them
        return tirx.const(v, "int64")

    lanes = dot.lanes
    lead = [lead] if isinstance(lead, int) else list(lead)
    a = te.placeholder((*[i64(d) for d in lead], i64(k)), dot.a_dtype, "A")
    b = te.placeholder((i64(n // lanes), i64(k // 4), i64(lanes), i64(4)), dot.b_dtype, "B")
    ko = te.reduce_axis((i64(0), i64(k // 4)), "ko")
    ki = te.reduce_axis((i64(0), i64(4)), "ki")
    c = te.compute(
        (*[i64(d) for d in lead], i64(n)),
        lambda *ij: te.sum(
            a[(*ij[:-1], ko * 4 + ki)].astype("int32") * b[ij[-1] // lanes, ko, ij[-1] % lanes, ki].astype("int32"),
            axis=[ko, ki],
        ),
        name="int8_dot",
        attrs={DOT_ANNOTATION: dot.intrin},
    )
    func = te.create_prim_func([a, b, c]).without_attr("global_symbol")  # private, as call_te makes it
    return func.with_attr("op_pattern", _OUT_EWISE_FUSABLE)


def pack_weights(w: np.ndarray, lanes: int) -> np.ndarray:
    """[K, N] -> [N / lanes, K / 4, lanes, 4]: what one instruction reads is contiguous."""
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k // 4, 4, n // lanes, lanes).transpose(2, 0, 3, 1))


def _is_int_matmul(expr) -> bool:
    from tvm import relax

    return (
        isinstance(expr, relax.Call)
        and getattr(expr.op, "name", "") == "relax.matmul"
        and str(expr.attrs.out_dtype) == "int32"
    )


def rewrite_int8_matmuls(mod, target):
    """``mod`` with main's integer matmuls on constant weights computed by ``dot_core``."""
    from tvm import relax

    main = mod["main"]
    var2val = relax.analysis.get_var2val(main)
    if not any(_is_int_matmul(v) for v in var2val.values()):  # the usual case: nothing to look up
        return mod
    mod, count = _rewrite_main_calls(mod, _is_int_matmul, lambda bb, call: _rewrite(bb, call, var2val, target))
    if count:
        log.info("int8: %d matmul(s) on the dot-product instruction", count)
    return relax.transform.DeadCodeElimination()(mod)


def _rewrite_main_calls(mod, wanted, rewrite):
    """``mod`` with each call of main for which ``wanted(call)`` replaced by ``rewrite(builder,
    call)`` where that gives an expression (None: left as it is); and how many were replaced. The
    functions the rewrites add with the builder are added to the module."""
    from tvm import relax

    rewritten = []

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not wanted(call):
                return call
            new = rewrite(self.builder_, call)
            if new is None:
                return call
            rewritten.append(new)
            return new

    rw = Rewriter(mod)
    new_main = rw.visit_expr(mod["main"])
    mod = rw.builder_.get()  # with the functions the rewrites added
    mod.update_func(mod.get_global_var("main"), new_main)
    return mod, len(rewritten)


def _rewrite(bb, call, var2val, target):
    lhs = _operand(call.args[0], var2val)
    if lhs is None:
        return None
    a8, a_zero = lhs
    w = _constant(call.args[1], var2val)
    if w is None or w.ndim != 2:
        return None
    return _dot(bb, a8, a_zero, w, target)


def _dot(bb, a8, a_zero, w: np.ndarray, target):
    """``(int32(a8) - a_zero) @ w`` (``a8`` [..., K] 8-bit, ``w`` a constant [K, N] integer array,
    ``a_zero`` a scalar int32 expression or None) on ``dot_core``: an int32 expression of shape
    [..., N], or None where the target has no instruction for it or the sizes do not fit."""
    from tvm import relax

    dot = dot_product(target, str(a8.ty.dtype))
    if dot is None:
        return None
    shape = [int(d) for d in a8.ty.shape.values]
    k, n = w.shape
    if shape[-1] != k or k % 4:
        return None
    # N short of whole instructions: zero columns up to a multiple of the lanes, sliced off after
    # (their sums are 0 and never read)
    n_pad = -(-n // dot.lanes) * dot.lanes
    if n_pad != n:
        w = np.concatenate([w, np.zeros((k, n_pad - n), w.dtype)], axis=1)
    packed = _weights(w, dot.b_dtype)
    if packed is None:
        return None
    w, c = packed
    # the activations in the instruction's type: the other signedness is 128 away
    a = a8
    shift = 0
    if str(a8.ty.dtype) != dot.a_dtype:
        shift = 128 if dot.a_dtype == "uint8" else -128
        a = relax.op.astype(relax.op.add(relax.op.astype(a8, "int32"), relax.const(shift, "int32")), dot.a_dtype)
    if not isinstance(a, relax.Var):  # read by the core and the row sums: computed once
        a = bb.emit(a)
    core = bb.add_func(dot_core(shape[:-1], k, n_pad, dot), "int8_dot")
    # Nested expressions, no var-to-var bindings: the mutator's normaliser binds the parts.
    out = relax.call_tir(
        core, relax.Tuple([a, relax.const(pack_weights(w, dot.lanes))]), relax.TensorType((*shape[:-1], n_pad), "int32")
    )
    if n_pad != n:
        out = relax.op.strided_slice(out, axes=[len(shape) - 1], begin=[0], end=[n])
        w, c = w[:, :n], c[:n]
    if c.any():
        rows = relax.op.sum(relax.op.astype(a, "int32"), axis=[len(shape) - 1], keepdims=True)
        out = relax.op.add(out, relax.op.multiply(rows, relax.const(c.astype(np.int32))))
    zero = a_zero
    if shift:
        zero = relax.const(shift, "int32") if zero is None else relax.op.add(zero, relax.const(shift, "int32"))
    if zero is not None:
        colsum = w.astype(np.int64).sum(axis=0) + c * k
        out = relax.op.subtract(out, relax.op.multiply(zero, relax.const(colsum.astype(np.int32))))
    return out


# ------------------------------------------------------------------ Relax: quantised (QDQ) models


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
    if dx is None or str(dx.args[0].ty.dtype) not in _INT8:
        return None
    sx, zx = _constant(dx.args[1], var2val, "f"), _constant(dx.args[2], var2val)
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
    if acts is None or dw is None:
        return None
    x8, sx, zx = acts
    w8 = _constant(dw.args[0], var2val)
    sw, zw = _constant(dw.args[1], var2val, "f"), _constant(dw.args[2], var2val)
    if any(v is None for v in (w8, sw, zw)):
        return None
    wdims = w8.ndim
    w8 = w8.reshape(-1, w8.shape[-1])  # [K, N]: a 1x1 HWIO kernel, or the matmul's weights
    n = w8.shape[1]
    sw = _per_column(sw, wdims, int(dw.attrs.axis), -1, n)
    zw = _per_column(zw, wdims, int(dw.attrs.axis), -1, n)
    if sw is None or zw is None:
        return None
    a_zero = relax.const(zx, "int32") if zx else None
    out = _dot(bb, x8, a_zero, w8 - zw.astype(np.int64), target)
    if out is None:
        return None
    scale = (np.float32(sx) * sw.astype(np.float32)).astype(np.float32)
    return relax.op.multiply(relax.op.astype(out, "float32"), relax.const(scale))


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
    w8 = _constant(dw.args[0], var2val)
    sw, zw = _constant(dw.args[1], var2val, "f"), _constant(dw.args[2], var2val)
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
    computed on the 8-bit values by ``dot_core``, instead of in float on dequantised copies."""
    from tvm import relax

    if not any(isinstance(f, relax.Function) for f in mod.functions.values()) or "main" not in [
        gv.name_hint for gv in mod.get_global_vars()
    ]:
        return mod
    main = mod["main"]
    var2val = relax.analysis.get_var2val(main)
    names = ("relax.nn.conv2d", "relax.matmul")
    if not any(
        isinstance(v, relax.Call) and getattr(v.op, "name", "") in names and _dequantize(v.args[0], var2val) is not None
        for v in var2val.values()
    ):
        return mod
    mod, count = _rewrite_main_calls(
        mod,
        lambda call: getattr(call.op, "name", "") in names,
        lambda bb, call: _quantised_product(bb, call, var2val, target),
    )
    if count:
        log.info("int8: %d quantised convolution(s)/matmul(s) on the dot-product instruction", count)
        mod = share_shifted_activations(mod)
    return relax.transform.DeadCodeElimination()(mod)


def _call(expr, op: str) -> bool:
    from tvm import relax

    return isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == op


def _shift_chain(u_value, values: dict):
    """``astype(add(astype(v, int32), 128), uint8)`` (``_dot``'s shift of int8 activations for an
    instruction that takes uint8, one binding per call) -> (v, t1, t2), or None."""
    from tvm import relax

    if not (_call(u_value, "relax.astype") and str(u_value.attrs.dtype) == "uint8"):
        return None
    t2 = u_value.args[0]
    add = values.get(t2)
    if add is None or not (_call(add, "relax.add") and isinstance(add.args[0], relax.Var)):
        return None
    shift = _constant(add.args[1], {})
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
    """Int8 activations that a dot-product kernel reads shifted to uint8 (``_dot``) and another
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
            zero = _constant(c.args[2], {}) if isinstance(c.args[2], tvm.ir.expr.GenericConst) else None
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


def Int8DotProducts(target):  # noqa: N802 - a pass, named like TVM's
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenInt8DotProducts")
    def _pass(mod, _ctx):
        return rewrite_int8_matmuls(mod, target)

    return _pass


# ------------------------------------------------------------------ TIR: the schedule


def dot_block(sch):
    """The ``dot_core`` block of a (fused) function, or None."""
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        if DOT_ANNOTATION in sch.get(b).annotations:
            return b
    return None


def _inline_side_terms(sch, block) -> None:
    """Inline the blocks that are neither the core nor after it: the zero-point terms (a scalar
    cast, zero x column sums) that the epilogue reads."""
    after, todo = set(), list(sch.get_consumers(block))
    while todo:
        b = todo.pop()
        name = sch.get(b).name_hint
        if name not in after:
            after.add(name)
            todo.extend(sch.get_consumers(b))
    core = sch.get(block).name_hint
    changed = True
    while changed:
        changed = False
        for b in sch.get_child_blocks(sch.get_sblock("root")):
            name = sch.get(b).name_hint
            if name == core or name in after or not sch.get_consumers(b):
                continue
            try:
                sch.compute_inline(b)
                changed = True
                break
            except Exception:
                continue


def dot_tile(m: int, col_blocks: int, registers: int) -> tuple[int, int]:
    """The register tile of ``schedule_dot``: (rows, column blocks of one instruction's lanes)."""
    rows = next(r for r in (4, 7, 3, 2, 1) if m % r == 0 and (r - 1) * 2 < registers - 4)
    # rows x cols accumulators, the cols weight vectors of one step and a broadcast row in registers
    budget = max(1, (registers - 1) // (rows + 1))
    cols = next(c for c in range(min(budget, col_blocks), 0, -1) if col_blocks % c == 0)
    return rows, cols


def schedule_dot(sch, block, registers: int, fold_epilogue, schedule_injective) -> None:
    """Register tiles of ``rows x cols`` instruction results, the whole K inside a tile, one
    instruction per (row, column block, 4 k's); tiles in parallel; the epilogue on the tile."""
    intrin = str(sch.get(block).annotations[DOT_ANNOTATION])
    for p in sch.get_producers(block):  # e.g. a signedness shift fused in: a pass of its own
        schedule_injective(sch, [p])
    _inline_side_terms(sch, block)
    # The tile's rows come from the last leading dimension (an image's columns), the others are
    # outer loops: a tile split across rows of a fused NHW loop could not be tensorized.
    *outer, i, j, ko, ki = sch.get_loops(block)
    m = int(sch.get(i).extent)
    b_buf = sch.get(block).reads[-1].source  # the packed weights: dot_core reads A, then B
    lanes = int(b_buf.shape[2])
    col_blocks = int(b_buf.shape[0])
    rows, cols = dot_tile(m, col_blocks, registers)
    jo, ji = sch.split(j, [None, lanes])
    i_o, i_i = sch.split(i, [None, rows])
    j_o, j_i = sch.split(jo, [None, cols])
    sch.reorder(j_o, *outer, i_o, ko, i_i, j_i, ji, ki)
    task = sch.fuse(j_o, *outer, i_o)
    sch.parallel(task)
    acc = sch.cache_write(block, 0, "global")  # the tile: a small array LLVM keeps in registers
    sch.reverse_compute_at(acc, task)
    fold_epilogue(sch, acc)
    last = sch.get_loops(acc)[-1]
    _, vec = sch.split(last, [None, lanes])
    sch.vectorize(vec)
    sch.unroll(i_i)
    sch.unroll(j_i)
    init = sch.decompose_reduction(block, ko)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(ji, intrin)


# ------------------------------------------------------------------ Relax: quantize, legalised


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
    s = _constant(scale, {}, "f")
    if s is None or s.size != 1 or float(s.reshape(-1)[0]) == 0.0:
        return qdq._quantize(bb, call)
    inverse = float(np.float32(1.0) / np.float32(s.reshape(-1)[0]))
    out_dtype = str(call.attrs.out_dtype)
    z = _constant(zero, {}) if zero is not None else None

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
