"""``--precision fp16``: run a float32 model in half precision, its interface kept float32.

TVM's ``ToMixedPrecision`` does the conversion. Its policy per operator (TVM 0.27,
``src/relax/transform/to_mixed_precision.cc``):

- convolutions and matrix products (``kAlways``): inputs and weights cast to float16, products
  summed in ``out_dtype`` (float32 here: the accumulation stays float32), the result stored as
  float16;
- elementwise and layout operators (``kFollow``: add, relu, reshape...): float16 when every input is
  (constants count when their values fit float16's range), else float32;
- operators float16 would make inaccurate (``kNever``: softmax, layer norm, reductions...): float32,
  their inputs cast back.

Casts sit at the function's edges: ``main`` still takes and returns float32, so the runtimes and
apps copy the same bytes as for an fp32 build; the first kernel converts the inputs and the last
converts the outputs, on the device. Weights bound as constants are cast at compile time
(``FoldConstant``): the library stores them as float16, half the bytes. With
``--separate-params`` the weights are arguments of ``main``: they stay float32 in model.params and
each run converts them (correct, no size saving).

What the compiled code does with float16 depends on the target: OpenCL kernels declare ``half``
and enable ``cl_khr_fp16`` (a GPU without that extension cannot run them); LLVM CPU code uses
half arithmetic where the CPU has it (ARMv8.2-A ``+fullfp16``, e.g. Cortex-A55/A75 and later,
given with --cpu/--cpu-features) and otherwise converts each value to float32 and back around
each operation (x86-64: F16C conversions): numerically float16 storage, slower than fp32 (MobileNet
on this x86 host: 10.9 ms against 5.4 ms).
"""

from __future__ import annotations

import logging

from tvmgen.core.errors import CompileError, InputError

log = logging.getLogger("tvmgen.compiler")

PRECISIONS = ("fp32", "fp16")
DEFAULT = "fp32"
# `--precision` help, shared by `tvmgen compile` and `tvmgen app`.
HELP = (
    "fp16: weights and activations in float16 (convolutions and matmuls still sum in float32); the "
    "model's inputs and outputs stay float32, converted on the device. Half the weight bytes, and up to "
    "twice as fast on phone GPUs, which need half-precision support (OpenCL: cl_khr_fp16; most Adreno and "
    "Mali GPUs have it). Expect relative errors around 1e-2 (--check then allows rtol 1e-2, atol 1e-3). "
    "CPU: half arithmetic on ARMv8.2-A CPUs given --cpu-features +fullfp16; elsewhere (x86) float16 is "
    "only storage, converted around each operation: smaller, not faster. Not with --device nnapi."
)
# Accumulator of convolutions and matrix products under fp16 (TVM's ``out_dtype``).
ACCUMULATE = "float32"
# Operators ToMixedPrecision always runs in float16 (its kAlways policy): they must have float inputs.
_ALWAYS_FP16 = (
    "relax.nn.conv1d",
    "relax.nn.conv2d",
    "relax.nn.conv3d",
    "relax.nn.conv1d_transpose",
    "relax.nn.conv2d_transpose",
    "relax.nn.conv3d_transpose",
    "relax.matmul",
    "relax.nn.attention",
    "relax.nn.attention_bias",
    "relax.nn.attention_var_len",
)


def check(precision: str) -> str:
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    return precision


def apply(mod, precision: str):
    """``mod`` (a Relax module after import, weights bound or not) computing in ``precision``."""
    if check(precision) == "fp32":
        return mod
    return to_fp16(mod)


def to_fp16(mod):
    """Float16 weights and activations, float32 accumulation, float32 inputs and outputs."""
    from tvm import relax

    _refuse_unsupported(mod)
    before = _signature(mod["main"])
    try:
        mod = relax.transform.ConvertToDataflow()(mod)  # the pass rewrites dataflow blocks only
        mod = _wrap_call_tir(mod)
        mod = relax.transform.ToMixedPrecision(out_dtype=ACCUMULATE)(mod)
        mod = relax.transform.InlinePrivateFunctions()(mod)  # the wrappers, gone again
        mod = relax.transform.FoldConstant()(mod)  # astype(weight) -> float16 constants in the library
    except Exception as e:
        log.info("ToMixedPrecision failed", exc_info=True)
        raise CompileError(
            f"TVM could not convert the model to fp16: {type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}",
            "compile it with --precision fp32 (the default)",
        ) from e
    after = _signature(mod["main"])
    if after != before:  # the pass keeps main's signature (non-dataflow values keep their dtype)
        raise CompileError(
            f"the fp16 conversion changed the model's interface ({before} -> {after})",
            "compile it with --precision fp32 and please report this with the log file",
        )
    log.info("fp16: %d float16 constants (%d bytes), %d float32 left", *constant_summary(mod))
    return mod


def _wrap_call_tir(mod):
    """Each ``R.call_tir(f, args)`` (importers emit some: ONNX Clip is TE's maximum/minimum) moved
    into a private Relax function of its own, inlined again after ToMixedPrecision.

    TVM 0.27's ToMixedPrecision crashes on a call_tir whose tensor arguments it turned to float16
    ("Expected TensorType, but got R.Callable": it casts every argument back to float32, the TIR
    function's GlobalVar included). A call to a Relax function is left alone, its float16 arguments
    cast back to float32: the TIR function gets the float32 it was written for."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    wrapped = []

    @relax.expr_functor.mutator
    class Wrap(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (
                isinstance(call.op, tvm.ir.Op)
                and call.op.same_as(call_tir)
                and len(call.args) == 2
                and isinstance(call.args[1], relax.Tuple)
            ):
                return call  # (call_tir with symbolic tir_vars: left as it is)
            fields = list(call.args[1].fields)
            bb = relax.BlockBuilder()
            params = [relax.Var(f"x{i}", f.ty) for i, f in enumerate(fields)]
            with bb.function(f"fp32_{call.args[0].name_hint}", params, private=True):
                with bb.dataflow():
                    out = bb.emit_output(relax.call_tir(call.args[0], relax.Tuple(params), call.ty))
                bb.emit_func_output(out)
            func = next(iter(bb.get().functions.values()))
            wrapped.append(call.args[0].name_hint)
            return relax.Call(self.builder_.add_func(func, f"fp32_{call.args[0].name_hint}"), fields)

    wrap = Wrap(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            wrap.builder_.update_func(gv, wrap.visit_expr(func))
    if wrapped:
        log.info("fp16: %d TIR calls kept in float32 (%s)", len(wrapped), ", ".join(sorted(set(wrapped))[:8]))
    return wrap.builder_.get()


def constant_summary(mod) -> tuple[int, int, int]:
    """(float16 constants, their bytes, float32 constants) in main: what --precision fp16 stores."""
    from tvm import ir, relax

    half, half_bytes, single = 0, 0, 0

    def visit(expr):
        nonlocal half, half_bytes, single
        if isinstance(expr, ir.Constant) and isinstance(expr.ty, relax.TensorType):  # not IntImm
            dtype = str(expr.ty.dtype)
            if dtype == "float16":
                half += 1
                half_bytes += int(expr.value.numpy().nbytes)
            elif dtype == "float32":
                single += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return half, half_bytes, single


def _signature(func) -> str:
    return f"{[str(p.ty) for p in func.params]} -> {func.ret_ty}"


def _refuse_unsupported(mod) -> None:
    """Models ToMixedPrecision would break: integer convolutions / matmuls (it would give them a
    float accumulator) and functions offloaded to another code generator (NNAPI)."""
    from tvm import relax

    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and func.attrs is not None and "Codegen" in func.attrs:
            raise InputError(
                f"--precision fp16 cannot convert {gv.name_hint}, offloaded to {func.attrs['Codegen']}",
                "use --precision fp32 with --device nnapi (NNAPI chooses its own precision)",
            )
    integer = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) in _ALWAYS_FP16:
            for a in expr.args:
                dtype = str(getattr(a.ty, "dtype", "float32"))
                if not dtype.startswith(("float", "bfloat")) and dtype != "void":
                    integer.append(f"{expr.op.name} on {dtype}")
                    return

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    if integer:
        raise InputError(
            f"--precision fp16 applies to float models; this one has integer operators "
            f"({', '.join(sorted(set(integer))[:3])}): it is quantized already",
            "compile it with --precision fp32 (the default): its 8-bit operators stay 8-bit",
        )
