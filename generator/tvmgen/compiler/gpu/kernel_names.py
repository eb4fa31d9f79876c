"""Short names for TIR functions whose fused names are too long for GPU drivers (``short_kernel_names``)."""

from __future__ import annotations

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
