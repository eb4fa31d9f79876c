"""Relax rewrites that put operators in forms TVM's passes handle (Clip / ReLU6 bounds as Relax
operators, no ``stack``, no negative axes and no split by index for the layout conversion, a channel-wise
PReLU), and the
helpers the rewrite modules share (``single_use_vars``, ``rewrite_functions``, ``module_pass``).

The other rewrites live by kind: ``conv_layout`` (convolution input layouts and channel padding),
``fast_math`` (vectorised elementwise math), ``kernel_names`` (short kernel names) and
``memory_rewrites`` (concatenations written in place)."""

from __future__ import annotations

import itertools


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

    def relax_min_max(expr, matches):
        # the matched call: ``expr`` is the bound variable where the pattern matched through a binding
        # (an einsum's operand read through a variable: 'DataflowVar' object has no attribute 'args')
        matched = matches[call]
        func, args = matched.args[0], matched.args[1]
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


def clip_as_min_max(mod):
    """``clip(x, lo, hi)`` -> ``minimum(maximum(x, lo), hi)`` on floating-point tensors.

    Relax's ``clip`` has no layout inference, so a layout conversion leaves it in the source layout: the
    Adreno pipeline's conversion to NCHW4c texture memory wrote a hard-swish between two convolutions
    (``x * clip(x + 3, 0, 6) / 6``) as a texture read by its add and its multiply, the clip and divide
    back in NCHW buffers between two layout transforms, and the next convolution's results were wrong
    (errors of the values' size on PoCL). Its elementwise form converts with the convolutions."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_op, wildcard

    clip = is_op("relax.clip")(wildcard(), wildcard(), wildcard())

    def min_max(expr, matches):
        call = matches[clip]
        x, lo, hi = call.args
        dtype = getattr(call.ty, "dtype", "")
        if not str(dtype).startswith("float"):
            return expr

        def const(v):
            return relax.const(float(getattr(v, "value", v)), dtype)

        return relax.op.minimum(relax.op.maximum(x, const(lo)), const(hi))

    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mod[gv] = rewrite_call(clip, min_max, func)
    return mod


def _split_parts(call) -> list[tuple[int, int]] | None:
    """The (begin, end) of each part of a ``split`` call along its axis, or None without a static extent there (or
    with sections that do not divide it)."""
    shape = static_shape(call.args[0])
    if shape is None:
        return None
    axis = int(call.attrs.axis) % len(shape)
    cuts = call.attrs.indices_or_sections
    if shape[axis] is None:
        return None
    if not hasattr(cuts, "__len__"):  # a number of equal sections
        n = int(cuts)
        return None if shape[axis] % n else [(shape[axis] // n * k, shape[axis] // n * (k + 1)) for k in range(n)]
    bounds = [0, *[int(c) for c in cuts], shape[axis]]
    return list(itertools.pairwise(bounds))


def _as_slices(call, parts):
    """A ``split`` call's parts as a tuple of ``strided_slice``s of its input."""
    from tvm import relax

    axis = int(call.attrs.axis) % len(static_shape(call.args[0]))
    return relax.Tuple([relax.op.strided_slice(call.args[0], [axis], [a], [b], assume_inbound=True) for a, b in parts])


def splits_by_sections(mod):
    """``split(x, indices)`` of a 4-D tensor -> ``split(x, sections)`` where the parts are equal, else a
    ``strided_slice`` per part.

    TVM's layout inference for ``split`` moves its axis into a converted layout but keeps its indices:
    in NCHW4c, a C2f block's split of 32 channels at 16 (YOLOv8) cut the 8 channel blocks at 16, the
    second part had 0 channels, and the Adreno texture build failed ("the data channel size is 0") for
    the whole model. A number of equal sections means the same in either layout; a slice goes back to
    the source layout where the conversion cannot follow it (a layout transform, never a wrong cut)."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    split = is_op("relax.split")(wildcard())

    def by_sections(expr, matches):
        call = matches[split]
        shape = static_shape(call.args[0])
        parts = _split_parts(call)
        if shape is None or len(shape) != 4 or parts is None or not hasattr(call.attrs.indices_or_sections, "__len__"):
            return expr
        x, axis = call.args[0], int(call.attrs.axis) % 4
        if len({b - a for a, b in parts}) == 1:
            return relax.op.split(x, len(parts), axis)
        return _as_slices(call, parts)

    return rewrite_functions(mod, split, by_sections)


def splits_as_slices(mod):
    """``split(x)`` of a static shape -> a ``strided_slice`` of ``x`` per part, the parts read directly. TVM
    fuses no multi-output operator into its readers: a split is a kernel per part that copies it (a streaming
    keyword spotter's ring buffer of 24 x 40 bytes, split at 9: two launches, 11.5 us of a 78 us run on NVIDIA's
    OpenCL), while a slice is injective and joins the kernel that reads it (there, elementwise dequantizes)."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    split = is_op("relax.split")(wildcard())
    main = mod["main"]
    readers = _readers(main)
    bindings = [b for block in getattr(main.body, "blocks", []) for b in block.bindings]
    parts_read: dict = {}  # a split's variable -> the operators that read its parts
    for b in bindings:
        if isinstance(b.value, relax.TupleGetItem) and isinstance(b.value.tuple_value, relax.Var):
            parts_read.setdefault(b.value.tuple_value, []).extend(readers.get(b.var, [""]))
    # the splits whose every part only operators that take injective producers read (elementwise, injective)
    wanted = [
        b.value
        for b in bindings
        if parts_read.get(b.var) and all(op and not op.startswith(_WHOLE_READERS) for op in parts_read[b.var])
    ]

    def as_slices(expr, matches):
        call = matches[split]
        parts = _split_parts(call) if any(call.same_as(w) for w in wanted) else None
        return expr if parts is None else _as_slices(call, parts)

    mod = rewrite_functions(mod, split, as_slices)
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))


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


def identifier_params(mod):
    """``main``'s parameters (the model's inputs; its weights too with --separate-params) named as C identifiers.

    A kernel that reads a parameter directly names its argument after it, and the GPU code generators that
    write source (OpenCL C, CUDA, Metal) copy the name as it is: an ONNX input ``in/put:0`` or a weight
    ``/head/MatMul_output_0_weight`` made kernel source that no device compiler builds. main's arguments are
    passed by position, and the manifest keeps the model's own names."""
    import re

    from tvm import ir, relax

    main = mod["main"]
    taken: set[str] = set()
    params, renamed = [], {}
    for p in main.params:
        name = re.sub(r"[^0-9A-Za-z_]", "_", p.name)
        name = name if name and not name[0].isdigit() else "v_" + name
        while name in taken:
            name += "_"
        taken.add(name)
        params.append(p if name == p.name else relax.Var(name, p.ty))
        if params[-1] is not p:
            renamed[p] = params[-1]
    if not renamed:
        return mod
    body = main.bind_params(renamed).body
    func = relax.Function(params, body, main.ret_ty, main.is_pure, main.attrs, main.span)
    out = ir.IRModule({gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}, attrs=mod.attrs)
    out[mod.get_global_var("main")] = func
    return out


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


def sink_reshapes(mod, regrouped, unary: tuple[str, ...], binary: tuple[str, ...], other=None):
    """``op(reshape(X), c)`` -> ``reshape(op(X, c))`` in ``main``, for the elementwise ``unary`` / ``binary``
    operators (Relax op names) where ``regrouped(inner, out)`` accepts the reshape from X's shape to its own
    (of two such operands, the X of fewer axes). Each other operand is a constant per value of the last axis or of one value, another such reshape of a
    tensor of X's shape, or a tensor of the result's shape (reshaped as X: a view); else the call stays. So
    an operator chain after a reshape stays in the kernel of X's producer, the reshape after it (a view);
    the reshapes no one reads any more are dropped. ``other(sinker, call)`` rewrites the other calls (the
    call itself where nothing applies); ``sinker.row_of(var)`` is the X a variable reshapes, or None."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    ops = {tvm.ir.Op.get(n): n in binary for n in (*binary, *unary)}
    reshape_op = tvm.ir.Op.get("relax.reshape")

    @mutator
    class Sink(PyExprMutator):
        def row_of(self, e):
            if not isinstance(e, relax.Var):
                return None
            bound = self.lookup_binding(e)
            if not (isinstance(bound, relax.Call) and bound.op.same_as(reshape_op)):
                return None
            inner, out = known_shape(bound.args[0]), known_shape(e)
            return bound.args[0] if inner and out and regrouped(inner, out) else None

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            kind = ops.get(call.op) if isinstance(call.op, tvm.ir.Op) else None
            out = known_shape(call)
            if kind is None or out is None:
                return other(self, call) if other is not None else call
            operands = call.args[:2] if kind else call.args[:1]
            rows = [self.row_of(a) if known_shape(a) == out else None for a in operands]  # not broadcast
            if all(r is None for r in rows):
                return call
            # the operands' own shape of fewest axes: a flattened product's rows, whose kernel the op joins
            inner = min((known_shape(r) for r in rows if r is not None), key=len)
            moved = []
            for a, r in zip(operands, rows):
                shape = known_shape(a)
                if r is not None and known_shape(r) == inner:
                    moved.append(r)
                elif isinstance(a, tvm.ir.expr.Constant) and shape is not None and len(shape) <= len(inner):
                    if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, out[-1])):
                        return call
                    moved.append(a)
                elif shape == out:
                    moved.append(self.builder_.emit(relax.op.reshape(a, inner)))
                else:
                    return call
            row = self.builder_.emit(
                relax.Call(call.op, [*moved, *call.args[len(operands) :]], call.attrs, call.ty_args)
            )
            return relax.op.reshape(row, out)

    sink = Sink(mod)
    func = sink.visit_expr(mod["main"])
    sink.builder_.update_func(mod.get_global_var("main"), func)
    return relax.transform.DeadCodeElimination(["main"])(sink.builder_.get())


def sink_row_reshapes(mod):
    """``sink_reshapes`` over reshapes that keep the last axis (rows regrouped: a linear layer's ``[1, 32, 64]``
    flattened to ``[32, 64]`` for its product and back), for elementwise operators and activations: the residual
    add and the GELU after a flattened product (``Reshape -> MatMul -> Add -> Reshape -> Add``, as exported
    transformer blocks are) join the product's kernel, and a reshape of such a reshape is one (none where it
    gives the first shape back: the flatten before the next product). A kernel less per residual and per
    activation: on a GPU, a launch less (about 6 us each through NVIDIA's OpenCL)."""
    import tvm
    from tvm import relax

    reshape_op = tvm.ir.Op.get("relax.reshape")

    def collapse(sink, call):
        if not call.op.same_as(reshape_op) or not isinstance(call.args[0], relax.Var):
            return call
        bound = sink.lookup_binding(call.args[0])
        if not (isinstance(bound, relax.Call) and bound.op.same_as(reshape_op)):
            return call
        source, out = bound.args[0], known_shape(call)
        if out is None or known_shape(source) is None:
            return call
        return source if known_shape(source) == out else relax.op.reshape(source, out)

    return sink_reshapes(
        mod,
        lambda inner, out: inner[-1] == out[-1] and inner != out,
        ("relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.erf", "relax.nn.gelu", "relax.nn.silu"),
        ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"),
        collapse,
    )


def _readers(main) -> dict:
    """Each variable of Relax function ``main`` -> the operators of the calls that read it ("" for a read outside
    an operator's call: a tuple, a branch, the result)."""
    import tvm
    from tvm import relax

    readers: dict = {}

    def note(expr) -> None:
        if isinstance(expr, relax.SeqExpr):
            for block in expr.blocks:
                for b in block.bindings:
                    value = b.value
                    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                        for a in value.args:
                            for v in relax.analysis.free_vars(a):
                                readers.setdefault(v, []).append(value.op.name if isinstance(a, relax.Var) else "")
                    else:
                        for v in relax.analysis.free_vars(value):
                            readers.setdefault(v, []).append("")
            for v in relax.analysis.free_vars(expr.body):
                readers.setdefault(v, []).append("")

    relax.analysis.post_order_visit(main.body, note)
    return readers


# Readers that take no injective producer into their kernel (TVM fuses elementwise ops after them, not before)
_WHOLE_READERS = ("relax.nn.conv", "relax.matmul", "relax.call_dps_packed", "relax.nn.max_pool", "relax.nn.avg_pool")


def reshape_views(mod):
    """``expand_dims`` and ``squeeze`` of static shapes written as the reshapes they are, a chain of them as one
    (none where it gives the first shape back), in ``main``, where everything that reads the result takes no
    injective producer into its kernel (a convolution, a product, an external kernel such as tvmgen's LSTM,
    pooling) or is no operator (a branch, a tuple, the result). TVM fuses such a chain into a kernel of its
    own that copies the tensor (TFLite's 1-D convolutions: ``reshape -> expand_dims`` before each, one of them
    back to the shape it started from; an LSTM's output expanded and squeezed back), while one reshape becomes
    a view of its input (``RewriteDataflowReshape``): on a GPU a launch less each (about 6 us through NVIDIA's
    OpenCL). A chain that elementwise operators read stays: it is part of their kernel, and collapsed it
    changed how TVM grouped them (slices of a reshaped product, their sigmoid and product: one kernel, three)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    views = [tvm.ir.Op.get(f"relax.{n}") for n in ("reshape", "expand_dims", "squeeze")]
    main = mod["main"]
    readers = _readers(main)

    def is_view(e) -> bool:
        return isinstance(e, relax.Call) and any(e.op.same_as(op) for op in views)

    def whole(v) -> bool:
        return bool(readers.get(v)) and all(by == "" or by.startswith(_WHOLE_READERS) for by in readers[v])

    @mutator
    class Views(PyExprMutator):
        def visit_var_binding_(self, binding):
            call = self.visit_expr(binding.value)
            source, out = (call.args[0], known_shape(call)) if is_view(call) else (None, None)
            while isinstance(source, relax.Var) and is_view(self.lookup_binding(source)):
                source = self.lookup_binding(source).args[0]
            if (
                source is None
                or not whole(binding.var)
                or out is None
                or known_shape(source) is None
                or source.ty.dtype != call.ty.dtype
            ):
                super().visit_var_binding_(binding)
                return
            value = source if known_shape(source) == out else relax.op.reshape(source, out)
            if not isinstance(binding.var, relax.DataflowVar) and self.builder_.current_block_is_dataflow():
                new = self.builder_.emit_output(value, binding.var.name)  # a block's output stays one
            elif isinstance(value, relax.Var):
                new = value
            else:
                new = self.builder_.emit(value, binding.var.name)
            self.set_var_remap(binding.var, new)

    rewrite = Views(mod)
    func = rewrite.visit_expr(main)
    rewrite.builder_.update_func(mod.get_global_var("main"), func)
    return relax.transform.DeadCodeElimination(["main"])(rewrite.builder_.get())


def known_shape(e) -> list[int] | None:
    """``static_shape`` of ``e`` where every dimension is known, else None."""
    shape = static_shape(e)
    return None if shape is None or None in shape else shape


def rewrite_functions(mod, pattern, rewrite):
    """``mod`` with ``rewrite`` (``relax.dpl.rewrite_call``'s callback) applied to every match of
    ``pattern`` in each of its Relax functions."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = rewrite_call(pattern, rewrite, func)
    return mod


def before_layout_conversion() -> list:
    """The passes TVM 0.27's ConvertLayout needs before it, whatever the layout: axes from the start
    (``non_negative_axes``) and no ``stack`` (``stack_free``)."""
    return [
        module_pass("TvmgenNonNegativeAxes", non_negative_axes),
        module_pass("TvmgenStackFree", stack_free),  # TVM's layout of a stack breaks
    ]


def module_pass(name: str, fn):
    """``fn(mod) -> mod`` as a TVM module pass named ``name``."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod, _ctx):
        return fn(mod)

    return _pass


def static_shape(e) -> list | None:
    """A Relax expression's shape as Python ints (None for a symbolic dimension), or None without a shape."""
    ty = getattr(e, "ty", None)
    dims = getattr(getattr(ty, "shape", None), "values", None)
    return [getattr(d, "value", None) for d in dims] if dims is not None else None


def prelu_unflattened(mod):
    """``reshape(prelu(reshape(x, [-1]), alpha, axis=0), shape(x))`` with a constant ``alpha`` that is
    one value per channel of ``x``'s last axis, as ``prelu(x, alpha_c, axis=-1)``. TVM's TFLite importer
    writes PRELU that way (the input flattened, alpha broadcast to it), and the reshapes kept the PReLU
    out of the preceding convolution's epilogue: a kernel of its own on the GPU (two of the selfie
    segmenter's 14 dispatches). Run after FoldConstant (alpha is a constant then); other alphas stay."""
    import numpy as np
    from tvm import ir, relax
    from tvm.relax.dpl import is_op, wildcard

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
