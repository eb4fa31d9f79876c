"""Rewrites that save memory traffic between kernels: a concatenation's producers writing their slices of
it directly (``concat_in_place``)."""

from __future__ import annotations

from tvmgen.compiler.rewrites import single_use_vars


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
