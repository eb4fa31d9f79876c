"""Work that only one branch of an ``If`` needs, moved into that branch.

TVM 0.27's ONNX importer converts an ``If``'s two subgraphs into the enclosing function and keeps
only the choice of results inside the ``If``: every run computes both branches. A voice-activity
detector with one LSTM per sample rate (the zoo's ``vad_scalar``) ran both LSTMs, and copied both
results, to keep one. ``sink_into_branches`` moves each binding of ``main`` whose value only one
branch reads (directly, or through bindings moved with it) to the start of that branch, so the
branch not taken computes nothing. What runs and what it computes are otherwise unchanged: only
bindings without side effects move, in their order. ``--const`` on the condition (``vad_if``)
already removes the ``If`` and the branch it does not take.
"""

from __future__ import annotations


def sink_into_branches(mod):
    """``mod`` with ``main``'s bindings that one ``If`` branch alone reads moved into it."""
    from tvm import relax

    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        return mod
    main = mod["main"]
    if not isinstance(main, relax.Function) or not isinstance(main.body, relax.SeqExpr):
        return mod
    if not any(
        isinstance(b, relax.VarBinding) and isinstance(b.value, relax.If)
        for blk in main.body.blocks
        for b in blk.bindings
    ):
        return mod
    mod = relax.transform.DeadCodeElimination()(mod)  # a dead reader (a tuple's unused field) would pin a binding
    main = mod["main"]
    body = main.body
    if any(isinstance(b, relax.DataflowBlock) for b in body.blocks):
        return mod  # an If is never inside a dataflow block; mixed blocks are left as they are
    bindings = [b for block in body.blocks for b in block.bindings]
    moved_any = False
    for at in range(len(bindings) - 1, -1, -1):
        b = bindings[at]
        if not (isinstance(b, relax.VarBinding) and isinstance(b.value, relax.If)):
            continue
        new_bindings, changed = _sink(bindings, at, body.body)
        if changed:
            bindings, moved_any = new_bindings, True
    if not moved_any:
        return mod
    new_body = relax.SeqExpr([relax.BindingBlock(bindings)], body.body)
    new_main = relax.Function(main.params, new_body, main.ret_ty, main.is_pure, main.attrs, main.span)
    mod.update_func(mod.get_global_var("main"), new_main)
    return relax.transform.Normalize()(mod)


def _free_vars(expr) -> set:
    from tvm import relax

    return set(relax.analysis.free_vars(expr))


def _sink(bindings: list, at: int, result) -> tuple[list, bool]:
    """Bindings with those before ``bindings[at]`` (an ``If``) that one branch alone reads moved into it."""
    from tvm import relax

    binding = bindings[at]
    cond, branches = binding.value.cond, [binding.value.true_branch, binding.value.false_branch]
    if not all(isinstance(br, relax.SeqExpr) for br in branches):
        return bindings, False
    # who reads each variable: binding indices, and the places that are not bindings before the If
    readers: dict = {}
    for i, b in enumerate(bindings):
        if i == at:
            continue
        for v in _free_vars(b.value):
            readers.setdefault(v, set()).add(i)
    outside = _free_vars(cond) | _free_vars(result)
    branch_reads = [_free_vars(br) for br in branches]
    sunk: list[set] = [set(), set()]  # binding indices moved into each branch
    for i in range(at - 1, -1, -1):
        b = bindings[i]
        if not isinstance(b, relax.VarBinding) or _impure(b.value):
            continue
        var = b.var
        if var in outside:
            continue
        users = readers.get(var, set())
        for side in (0, 1):
            other = 1 - side
            if var in branch_reads[other]:
                continue
            if var not in branch_reads[side] and not (users & sunk[side]):
                continue  # read by neither this branch nor what moves into it
            if users - sunk[side]:  # read by a binding that stays (or by the If's other side)
                continue
            sunk[side].add(i)
            break
    if not (sunk[0] or sunk[1]):
        return bindings, False
    new_branches = []
    for side, br in enumerate(branches):
        moved = [bindings[i] for i in sorted(sunk[side])]
        if not moved:
            new_branches.append(br)
            continue
        inner = [b for block in br.blocks for b in block.bindings]
        new_branches.append(relax.SeqExpr([relax.BindingBlock(moved + inner)], br.body, br.span))
    new_if = relax.BlockBuilder().normalize(relax.If(cond, new_branches[0], new_branches[1], binding.value.span))
    gone = sunk[0] | sunk[1]
    out = [b for i, b in enumerate(bindings) if i not in gone and i != at]
    position = at - len([i for i in gone if i < at])
    out.insert(position, relax.VarBinding(binding.var, new_if, binding.span))
    return out, True


def _impure(expr) -> bool:
    from tvm import relax

    try:
        return bool(relax.analysis.contains_impure_call(expr))
    except Exception:
        return True


def SinkIntoBranches():  # noqa: N802 - a pass, named like TVM's
    from tvmgen.compiler.rewrites import module_pass

    return module_pass("TvmgenSinkIntoBranches", sink_into_branches)


def own_branch_storages(mod):
    """``mod`` with every ``If`` branch of ``main`` allocating the storages it uses itself.

    TVM 0.27's StaticPlanBlockMemory shares its storage tokens between the two branches of an
    ``If``: a storage first allocated in the true branch is used by the false branch without
    being allocated there (the false branch then reads an unbound variable and the VM crashes).
    Each such use gets an ``alloc_storage`` of its own at the start of the branch, of the size
    the planner gave the token (the largest of all its uses, in both branches)."""
    from tvm import relax

    main = mod["main"] if "main" in [gv.name_hint for gv in mod.get_global_vars()] else None
    if not isinstance(main, relax.Function) or not isinstance(main.body, relax.SeqExpr):
        return mod
    storages: dict = {}

    def collect(expr):
        if isinstance(expr, relax.SeqExpr):
            for block in expr.blocks:
                for b in block.bindings:
                    if isinstance(b, relax.VarBinding):
                        v = b.value
                        if isinstance(v, relax.Call) and getattr(v.op, "name", "") in (
                            "relax.memory.alloc_storage",
                            "relax.vm.alloc_storage",
                        ):
                            storages[b.var] = v
                        elif isinstance(v, relax.If):
                            collect(v.true_branch)
                            collect(v.false_branch)

    collect(main.body)
    if not storages:
        return mod
    changed = [False]

    def fix(seq, defined: set):
        scope = set(defined)
        blocks = []
        for block in seq.blocks:
            out = []
            renamed: dict = {}
            for b in block.bindings:
                if isinstance(b, relax.VarBinding):
                    v = b.value
                    if isinstance(v, relax.If):
                        t, f = fix(v.true_branch, scope), fix(v.false_branch, scope)
                        if t is not v.true_branch or f is not v.false_branch:
                            b = relax.VarBinding(
                                b.var, relax.BlockBuilder().normalize(relax.If(v.cond, t, f, v.span)), b.span
                            )
                    elif isinstance(v, relax.Call):
                        args = list(v.args)
                        for i, a in enumerate(args):
                            if isinstance(a, relax.Var) and a in storages and a not in scope:
                                if a not in renamed:
                                    fresh = relax.Var(str(a.name) + "_branch", a.ty)
                                    out.append(relax.VarBinding(fresh, storages[a]))
                                    renamed[a] = fresh
                                args[i] = renamed[a]
                        if any(x is not y for x, y in zip(args, v.args)):
                            b = relax.VarBinding(b.var, relax.Call(v.op, args, v.attrs, v.ty_args, v.span), b.span)
                            changed[0] = True
                out.append(b)
                scope.add(b.var)
            blocks.append(type(block)(out))
        if not changed[0]:
            return seq
        return relax.SeqExpr(blocks, seq.body, seq.span)

    new_body = fix(main.body, set(main.params))
    if not changed[0]:
        return mod
    new_main = relax.Function(main.params, new_body, main.ret_ty, main.is_pure, main.attrs, main.span)
    mod.update_func(mod.get_global_var("main"), new_main)
    return mod


def OwnBranchStorages():  # noqa: N802 - a pass, named like TVM's
    from tvmgen.compiler.rewrites import module_pass

    return module_pass("TvmgenOwnBranchStorages", own_branch_storages)
