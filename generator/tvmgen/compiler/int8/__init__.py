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

Quantised (QDQ) models' convolutions and matmuls on the same instructions, and the passes around
them, are ``int8_qdq``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("tvmgen.compiler")

DOT_ANNOTATION = "tvmgen_dot"  # block annotation: the tensor intrinsic to tensorize with
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

INT8_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


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
        and str(value.args[0].ty.dtype) in INT8_RANGES
    ):
        return value.args[0], zero
    return None


def constant_array(expr, var2val, kinds: str = "iu"):
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
        data = constant_array(value.args[0], var2val, kinds)
        if data is None:
            return None
        if op == "relax.reshape":
            return data.reshape([int(d) for d in value.ty.shape.values])
        axes = value.attrs.axes
        return data.transpose([int(a) for a in axes] if axes is not None else None)
    if op not in ("relax.astype", "relax.subtract"):
        return None
    args = [constant_array(a, var2val, kinds) for a in value.args]
    known = [a for a in args if a is not None]
    if len(known) != len(args):
        return None
    if op == "relax.astype":
        return known[0] if str(value.attrs.dtype) in ("int32", "int64") else None
    return known[0] - known[1]


def _weights(w: np.ndarray, b_dtype: str):
    """A [K, N] integer weight -> (w' as b_dtype, c) with w = w' + c, ``c`` an int64 shift per
    column (zero where a column fits as it is); None if a column's values span more than 256."""
    lo, hi = INT8_RANGES[b_dtype]
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
    mod, count = rewrite_main_calls(mod, _is_int_matmul, lambda bb, call: _rewrite(bb, call, var2val, target))
    if count:
        log.info("int8: %d matmul(s) on the dot-product instruction", count)
    return relax.transform.DeadCodeElimination()(mod)


def rewrite_main_calls(mod, wanted, rewrite):
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
    w = constant_array(call.args[1], var2val)
    if w is None or w.ndim != 2:
        return None
    return integer_dot(bb, a8, a_zero, w, target)


def integer_dot(bb, a8, a_zero, w: np.ndarray, target):
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
