"""Neural-network operators of recent ONNX opsets that TVM 0.27's Relax importer lacks or gets wrong,
expanded into ones it has (``custom_ops`` registry; the expansions run after the model is normalized
to opset 17 or newer, so they write opset-13+ node forms).

- ``LayerNormalization``: TVM's converter returns placeholder zeros for ``Mean`` and ``InvStdDev`` and
  needs a scale of the normalized shape; expanded (ReduceMean, Sub, Mul, Sqrt, Reciprocal, with
  ``stash_type``) only where one of those outputs is used or the scale / bias broadcast, otherwise left
  to TVM's fused ``layer_norm``.
- ``RotaryEmbedding`` (opset 23) and ``CumProd`` (opset 26): TVM has neither.
- ``Col2Im`` (opset 18): TVM has none; a ConvTranspose with one-hot weights (group per channel).

``Attention`` (opsets 23-25) lives in ``onnx_ops_attention``, which builds on the helpers here.
"""

from __future__ import annotations

import numpy as np

from tvmgen.core.errors import ModelError
from tvmgen.frontends.custom_ops import ONNX, onnx_op
from tvmgen.frontends.onnx_ops import Context, _attrs, _Emit, _graphs, _input

FLOAT = 1  # onnx.TensorProto.FLOAT


def _register(op_type: str):
    """``onnx_op(op_type)``, unless a user's file (TVMGEN_CUSTOM_OPS) registered the operator already: the
    user's entry wins whichever was loaded first."""

    def register(fn):
        entry = ONNX.get(op_type)
        return onnx_op(op_type)(fn) if entry is None or entry.source == "tvmgen" else fn

    return register


# ----------------------------------------------------------------------------- what the graph knows


def _label(node) -> str:
    return f"{node.op_type} node {node.name or (node.output[0] if node.output else '?')!r}"


def _opset(ctx: Context) -> int:
    return next((o.version for o in ctx.model.opset_import if o.domain in ("", "ai.onnx")), 17)


def _types(ctx: Context) -> dict:
    """Every tensor's ONNX element type (shape inference on the model being expanded, once)."""
    cached = getattr(ctx, "_tvmgen_nn_types", None)
    if cached is None:
        import onnx

        inferred = onnx.shape_inference.infer_shapes(ctx.model)
        cached = {}
        for g in _graphs(inferred.graph):
            for vi in [*g.value_info, *g.input, *g.output]:
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                    cached[vi.name] = vi.type.tensor_type.elem_type
            for init in g.initializer:
                cached[init.name] = init.data_type
            for node in g.node:
                if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                    cached[node.output[0]] = node.attribute[0].t.data_type
        ctx._tvmgen_nn_types = cached  # type: ignore[attr-defined]
    return cached


def _elem(ctx: Context, node, name: str) -> int:
    t = _types(ctx).get(name)
    if not t:
        value = ctx.value(name)
        if value is not None:
            from onnx.helper import np_dtype_to_tensor_dtype

            return int(np_dtype_to_tensor_dtype(np.asarray(value).dtype))
        raise ModelError(
            f"{_label(node)}: the element type of its input {name!r} is unknown (ONNX shape inference gives none)",
            "export the model with typed inputs (value_info), or fix the input's type with --input NAME:SHAPE:DTYPE",
        )
    return int(t)


def _np(elem: int):
    from onnx.helper import tensor_dtype_to_np_dtype

    return tensor_dtype_to_np_dtype(elem)


def _used(ctx: Context, name: str) -> bool:
    """``name`` is read by some node (any graph) or is an output of a graph."""
    if not name:
        return False
    read = getattr(ctx, "_tvmgen_nn_read", None)
    if read is None:
        read = set()
        for g in _graphs(ctx.model.graph):
            read.update(o.name for o in g.output)
            for n in g.node:
                read.update(n.input)
        ctx._tvmgen_nn_read = read  # type: ignore[attr-defined]
    return name in read


def _shape(ctx: Context, node, name: str, what: str) -> tuple[int, ...]:
    shape = ctx.shape(name)
    if shape is None or None in shape or any(d <= 0 for d in shape):
        raise ModelError(
            f"{_label(node)}: the shape of its {what} {name!r} is not known when it compiles ({shape})",
            "fix the model's input shapes with --input NAME:SHAPE (tvmgen expands this operator for fixed shapes)",
        )
    return tuple(int(d) for d in shape)


def _ints(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _reduce(e: _Emit, op: str, x: str, axes, keepdims: int = 1) -> str:
    """A Reduce* node in the form of the model's opset (axes an input from opset 18, else an attribute)."""
    if _opset(e.ctx) >= 18:
        return e(op, [x, e.const(_ints(*axes), "axes")], keepdims=keepdims)
    return e(op, [x], axes=list(axes), keepdims=keepdims)


def _slice(e: _Emit, x: str, start: int, end: int, axis: int = -1, step: int = 1) -> str:
    consts = [_ints(start), _ints(end), _ints(axis), _ints(step)]
    return e("Slice", [x, *(e.const(c, h) for c, h in zip(consts, ("start", "end", "axis", "step")))])


def _reshape(e: _Emit, x: str, shape, out: str | None = None) -> str:
    return e("Reshape", [x, e.const(_ints(*shape), "shape")], out)


def _cast(e: _Emit, x: str, src: int, dst: int) -> str:
    return x if src == dst else e("Cast", [x], to=dst)


# ----------------------------------------------------------------------------- LayerNormalization


@_register("LayerNormalization")
def layer_normalization(node, ctx: Context):
    """Left to TVM's fused layer_norm (returned unchanged) unless Mean / InvStdDev is used, or the scale or
    bias has another shape than the normalized dimensions (ONNX broadcasts them; TVM's converter does not)."""
    a = _attrs(node)
    x, scale, bias = node.input[0], node.input[1], _input(node, 2)
    outs = list(node.output) + [""] * 3
    xs = _shape(ctx, node, x, "input X")
    rank = len(xs)
    axis = int(a.get("axis", -1))
    if not -rank <= axis < rank:
        raise ModelError(f"{_label(node)}: axis={axis} is outside the input's rank {rank}", "fix axis in the model")
    axis %= rank
    normalized = xs[axis:]
    shapes = [ctx.shape(n) for n in (scale, bias) if n]
    fused_ok = all(s is not None and tuple(s) == normalized for s in shapes)
    if fused_ok and not _used(ctx, outs[1]) and not _used(ctx, outs[2]):
        return [node]  # TVM's own converter: one fused layer_norm
    t = _elem(ctx, node, x)
    u = int(a.get("stash_type", FLOAT))
    e = _Emit(ctx, node.name or "layer_norm")
    axes = list(range(axis, rank))
    xu = _cast(e, x, t, u)
    mean = _reduce(e, "ReduceMean", xu, axes)
    d = e("Sub", [xu, mean])
    var = _reduce(e, "ReduceMean", e("Mul", [d, d]), axes)
    eps = e.const(np.asarray(float(a.get("epsilon", 1e-5)), _np(u)), "epsilon")
    inv = e("Reciprocal", [e("Sqrt", [e("Add", [var, eps])])])
    y = e("Mul", [_cast(e, e("Mul", [d, inv]), u, t), scale])
    if bias:
        e("Add", [y, bias], outs[0])
    elif outs[0]:
        e("Identity", [y], outs[0])
    for name, value in ((outs[1], mean), (outs[2], inv)):
        if name:
            e("Identity", [value], name)
    return e.nodes


# ----------------------------------------------------------------------------- RotaryEmbedding


@_register("RotaryEmbedding")
def rotary_embedding(node, ctx: Context):
    """Rotary position embedding (opset 23): 4-D (batch, heads, sequence, head size) or 3-D input with
    ``num_heads``, the caches indexed by ``position_ids`` (or given per batch and position), halves or
    interleaved pairs rotated, ``rotary_embedding_dim`` for a partial rotation."""
    a = _attrs(node)
    label = _label(node)
    x, cos, sin, pos = node.input[0], node.input[1], node.input[2], _input(node, 3)
    xs = _shape(ctx, node, x, "input")
    e = _Emit(ctx, node.name or "rotary")
    if len(xs) == 4:
        B, H, S, D = xs
        x4, head_axis, shape4 = x, 1, xs  # cos / sin [B, S, d/2] -> [B, 1, S, d/2]
    elif len(xs) == 3:
        B, S, hidden = xs
        H = int(a.get("num_heads", 0))
        if H <= 0 or hidden % H:
            raise ModelError(
                f"{label}: a 3-D input of hidden size {hidden} needs num_heads dividing it (num_heads={H})",
                "export the node with num_heads (or with a 4-D input)",
            )
        D = hidden // H
        shape4 = (B, S, H, D)
        x4, head_axis = _reshape(e, x, shape4), 2  # cos / sin [B, S, d/2] -> [B, S, 1, d/2]
    else:
        raise ModelError(f"{label}: its input has rank {len(xs)}; RotaryEmbedding takes 3-D or 4-D", "fix the model")
    rd = int(a.get("rotary_embedding_dim", 0)) or D
    if rd > D or rd % 2:
        raise ModelError(
            f"{label}: rotary_embedding_dim={rd} is odd or larger than the head size {D}",
            "fix rotary_embedding_dim in the model",
        )
    half = rd // 2
    interleaved = bool(a.get("interleaved", 0))

    def cache(c):
        c = e("Gather", [c, pos], axis=0) if pos else c  # [B, S, d/2]
        return e("Unsqueeze", [c, e.const(_ints(head_axis), "axis")])

    cos_u, sin_u = cache(cos), cache(sin)
    rot = _slice(e, x4, 0, rd) if rd < D else x4
    if interleaved:
        x1, x2 = _slice(e, rot, 0, rd, step=2), _slice(e, rot, 1, rd, step=2)
    else:
        x1, x2 = _slice(e, rot, 0, half), _slice(e, rot, half, rd)
    real = e("Sub", [e("Mul", [cos_u, x1]), e("Mul", [sin_u, x2])])
    imag = e("Add", [e("Mul", [sin_u, x1]), e("Mul", [cos_u, x2])])
    if interleaved:  # (real, imag) pairs back in place: [.., d/2, 2] -> [.., d]
        axis = e.const(_ints(-1), "axis")
        pairs = e("Concat", [e("Unsqueeze", [real, axis]), e("Unsqueeze", [imag, axis])], axis=-1)
        rotated = _reshape(e, pairs, (*shape4[:3], rd))
    else:
        rotated = e("Concat", [real, imag], axis=-1)
    out = e("Concat", [rotated, _slice(e, x4, rd, D)], axis=-1) if rd < D else rotated
    if len(xs) == 3:
        _reshape(e, out, xs, node.output[0])
    else:
        e("Identity", [out], node.output[0])
    return e.nodes


# ----------------------------------------------------------------------------- CumProd


@_register("CumProd")
def cum_prod(node, ctx: Context):
    """Cumulative product along a constant axis (opset 26), ``exclusive`` and ``reverse``: a log-step scan
    (ceil(log2 n) products of the running result with itself shifted by 1, 2, 4, ... along the axis)."""
    a = _attrs(node)
    label = _label(node)
    x, axis_name = node.input[0], node.input[1]
    axis_value = ctx.value(axis_name)
    if axis_value is None:
        raise ModelError(
            f"{label}: its axis {axis_name!r} is only known at run time; tvmgen expands CumProd for a constant axis",
            f"bind it at compile time: --const {axis_name}=AXIS (or export the axis as a constant)",
        )
    xs = _shape(ctx, node, x, "input")
    axis = int(np.asarray(axis_value).reshape(-1)[0])
    if not -len(xs) <= axis < len(xs):
        raise ModelError(f"{label}: axis {axis} is outside the input's rank {len(xs)}", "fix the axis")
    axis %= len(xs)
    n = xs[axis]
    reverse, exclusive = bool(a.get("reverse", 0)), bool(a.get("exclusive", 0))
    dt = _np(_elem(ctx, node, x))
    e = _Emit(ctx, node.name or "cumprod")

    def ones(count):
        return e.const(np.ones(xs[:axis] + (count,) + xs[axis + 1 :], dt), "ones")

    def shifted(y, k):  # y moved k places along the axis (towards the end; the start for reverse), ones let in
        if reverse:
            return e("Concat", [_slice(e, y, k, n, axis), ones(k)], axis=axis)
        return e("Concat", [ones(k), _slice(e, y, 0, n - k, axis)], axis=axis)

    y = shifted(x, 1) if exclusive and n > 1 else (ones(n) if exclusive else x)
    k = 1
    while k < n:
        y = e("Mul", [y, shifted(y, k)])
        k *= 2
    e("Identity", [y], node.output[0])
    return e.nodes


# ----------------------------------------------------------------------------- Col2Im


@_register("Col2Im")
def col2im(node, ctx: Context):
    """Col2Im (opset 18; torch.nn.Fold's export): the blocks summed back into the image, as a ConvTranspose
    over the grid of block positions with one-hot weights, one group per channel (strides, dilations and
    pads as the node gives them)."""
    a = _attrs(node)
    label = _label(node)
    x, image_name, block_name = node.input[0], node.input[1], node.input[2]
    image, block = ctx.value(image_name), ctx.value(block_name)
    if image is None or block is None:
        missing = [n for n, v in ((image_name, image), (block_name, block)) if v is None]
        raise ModelError(
            f"{label}: its image_shape and block_shape are needed when it compiles, and "
            f"{' and '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} only known at run time",
            "bind them at compile time: "
            + " ".join(f"--const {n}=SIZES" for n in missing)
            + " (e.g. --const image_shape=5,5), or export them as constants",
        )
    image = [int(v) for v in np.asarray(image).reshape(-1)]
    block = [int(v) for v in np.asarray(block).reshape(-1)]
    nd = len(image)
    dil = [int(v) for v in a.get("dilations", [1] * nd)]
    strides = [int(v) for v in a.get("strides", [1] * nd)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * nd)]
    xs = _shape(ctx, node, x, "input")
    kprod = int(np.prod(block))
    if len(xs) != 3 or len(block) != nd or xs[1] % kprod:
        raise ModelError(
            f"{label}: input {xs} does not hold (N, C x {kprod} blocks, L) for block_shape {block}",
            "fix the model's Col2Im operands",
        )
    N, ck, L = xs
    C = ck // kprod
    grid = [(image[d] + pads[d] + pads[nd + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(nd)]
    if int(np.prod(grid)) != L:
        raise ModelError(
            f"{label}: {L} blocks given, the image {image} with these blocks, strides, dilations and pads has "
            f"{int(np.prod(grid))}",
            "fix the model's Col2Im operands",
        )
    e = _Emit(ctx, node.name or "col2im")
    dt = _np(_elem(ctx, node, x))
    # input channel c * K + k writes block position k of channel c: the K one-hot blocks, once per channel
    w = np.tile(np.eye(kprod, dtype=dt).reshape(kprod, 1, *block), (C, 1, *[1] * nd))
    full = [strides[d] * (grid[d] - 1) + dil[d] * (block[d] - 1) + 1 for d in range(nd)]
    out_pad = [image[d] + pads[d] + pads[nd + d] - full[d] for d in range(nd)]
    y = e(
        "ConvTranspose",
        [_reshape(e, x, (N, ck, *grid)), e.const(w, "w")],
        group=C,
        kernel_shape=block,
        strides=strides,
        dilations=dil,
        pads=pads,
        output_padding=out_pad,
    )
    e("Identity", [y], node.output[0])
    return e.nodes
