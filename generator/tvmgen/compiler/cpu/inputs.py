"""Model inputs at any alignment: the kernels that read an input stop assuming 64-byte alignment.

TVM declares every kernel argument 64-byte aligned, and LLVM may emit aligned vector loads
from that promise. So a caller had to copy each input into a tensor TVM allocated (a 600 KB
image: ~30 us, plus the caches it evicts), where onnxruntime reads a numpy array in place.
numpy only aligns to 16 bytes.

``RelaxInputAlignment`` finds the kernels that read a model input (directly, or through a
reshape that became a view of it), and re-declares those arguments aligned to their element
size only. Kernels that read other tensors keep their 64-byte promise, so their code does not
change. The result lands in ``report["input_alignment"]`` (bytes per input, for the manifest):
an input whose uses could not all be followed keeps 64, and the runner copies it as before.
"""

from __future__ import annotations

import ast
import logging

log = logging.getLogger("tvmgen.compiler")

TVM_ALIGNMENT = 64  # what TVM's kernels assume of an argument unless told otherwise
_VIEW_OPS = {"relax.reshape", "relax.memory.view"}  # results alias their first argument


def input_uses(func, num_inputs: int) -> tuple[dict, set[int]]:
    """Which kernel arguments read which model input: ``({(kernel, arg index): {input index}}, unsafe)``.

    ``unsafe`` holds the inputs used some other way (written in place, passed to a packed
    function, captured in a tuple...): those keep the 64-byte requirement.
    """
    from tvm import relax

    origin = {p: {i} for i, p in enumerate(func.params[:num_inputs])}  # var -> the inputs it aliases
    reads: dict = {}
    unsafe: set[int] = set()

    def inputs_in(expr) -> set[int]:
        found: set[int] = set()
        for v in relax.analysis.free_vars(expr):
            found |= origin.get(v, set())
        return found

    returned = func.body.body  # what main returns may be an input itself: the caller gets a copy

    def visit(seq) -> None:
        for block in seq.blocks:
            for b in block.bindings:
                value, used = b.value, inputs_in(b.value)
                if not used:
                    continue
                op = getattr(getattr(value, "op", None), "name", None)
                if op == "relax.call_tir" and isinstance(value.args[1], relax.Tuple):
                    kernel = value.args[0]
                    for k, arg in enumerate(value.args[1].fields):
                        if isinstance(arg, relax.Var) and arg in origin:
                            reads.setdefault((kernel, k), set()).update(origin[arg])
                        elif inputs_in(arg):  # an input inside some other expression
                            unsafe.update(inputs_in(arg))
                    for rest in value.args[2:]:  # output types, symbolic arguments
                        unsafe.update(inputs_in(rest))
                elif (
                    op in _VIEW_OPS
                    and isinstance(value.args[0], relax.Var)
                    and not any(inputs_in(a) for a in value.args[1:])
                ):
                    origin[b.var] = inputs_in(value.args[0])
                elif isinstance(value, relax.Var):
                    origin[b.var] = used
                elif isinstance(value, relax.If) and all(
                    isinstance(br, relax.SeqExpr) for br in (value.true_branch, value.false_branch)
                ):
                    # the kernels in each branch (branches.sink_into_branches puts work there)
                    unsafe.update(inputs_in(value.cond))
                    for br in (value.true_branch, value.false_branch):
                        visit(br)
                        if isinstance(br.body, relax.Var):
                            origin[b.var] = origin.get(b.var, set()) | inputs_in(br.body)
                        else:
                            unsafe.update(inputs_in(br.body))
                else:
                    unsafe.update(used)

    visit(func.body)
    if inputs_in(returned) and not isinstance(returned, (relax.Var, relax.Tuple)):
        unsafe |= inputs_in(returned)
    return reads, unsafe


def with_param_alignment(func, params: set[int], align: int):
    """``func`` with the given arguments declared ``align``-byte aligned, or None if that cannot
    be done (the function's script does not round-trip)."""
    import tvm

    text = func.script()
    if "metadata[" in text:  # objects the text only names: it cannot be parsed back alone
        return None
    tree = ast.parse(text)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(defs) != 1 or len(defs[0].args.args) != len(func.params):
        return None
    for k in params:
        ann = defs[0].args.args[k].annotation
        if not (isinstance(ann, ast.Call) and ast.unparse(ann.func) == "T.Buffer"):
            return None
        ann.keywords = [kw for kw in ann.keywords if kw.arg != "align"]
        ann.keywords.append(ast.keyword(arg="align", value=ast.Constant(align)))
    try:
        new = tvm.script.from_source(ast.unparse(tree))
    except Exception as e:
        log.debug("input alignment: %s does not round-trip: %s", func.attrs, e)
        return None
    if len(new.params) != len(func.params) or any(int(new.params[k].data_alignment) != align for k in params):
        return None
    return new


def relax_input_alignment(mod, report: dict | None = None):
    """The module with its input-reading kernels aligned to element size; fills ``report``."""
    import numpy as np
    from tvm import tirx

    main = mod["main"]
    num_inputs = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else len(main.params)
    reads, unsafe = input_uses(main, num_inputs)
    itemsize = [
        np.dtype(str(p.ty.dtype)).itemsize if hasattr(p.ty, "dtype") else TVM_ALIGNMENT
        for p in main.params[:num_inputs]
    ]
    by_kernel: dict = {}
    for (kernel, k), used in reads.items():
        by_kernel.setdefault(kernel, {})[k] = used
    failed: set[int] = set()
    for kernel, args in by_kernel.items():
        func = mod[kernel]
        if not isinstance(func, tirx.PrimFunc):
            failed |= set().union(*args.values())
            continue
        align = min(itemsize[i] for used in args.values() for i in used)
        new = with_param_alignment(func, set(args), align)
        if new is None:
            failed |= set().union(*args.values())
            continue
        mod[kernel] = new
    alignment = [TVM_ALIGNMENT if i in unsafe or i in failed else itemsize[i] for i in range(num_inputs)]
    if report is not None:
        report["input_alignment"] = alignment
    return mod


def RelaxInputAlignment(report: dict | None = None):  # noqa: N802 - a pass, named like TVM's
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenRelaxInputAlignment")
    def _pass(mod, _ctx):
        return relax_input_alignment(mod, report)

    return _pass
