"""Convolution rewrites for the CPU schedules: the first convolution reading an NCHW input itself
(``nchw_input_into_conv`` and its legalization, ``legalize_nchw_input_conv``), and convolutions made to
compute whole vectors of channels (``pad_depthwise_chains``, ``pad_conv_output_channels``)."""

from __future__ import annotations

from tvmgen.compiler.rewrites import known_shape, single_use_vars, sink_reshapes


def nchw_input_into_conv(mod):
    """``conv2d(permute_dims(x, [0, 2, 3, 1]), w, data_layout="NHWC")`` -> ``conv2d(x, w,
    data_layout="NCHW", out_layout="NHWC")``.

    Layout conversion to NHWC leaves a transpose of an NCHW model's input in front of the first
    convolution: a pass over the whole input of its own. The convolution can read NCHW and write
    NHWC itself (its padding step copies the input anyway), so the transpose goes.
    """
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_op, wildcard

    x, w = wildcard(), wildcard()
    perm = is_op("relax.permute_dims")(x)
    conv = is_op("relax.nn.conv2d")(perm, w)

    def read_nchw(expr, matches):
        axes = matches[perm].attrs.axes
        a = expr.attrs
        if (
            axes is None
            or [int(i) for i in axes] != [0, 2, 3, 1]
            or a.data_layout != "NHWC"
            or a.kernel_layout != "HWIO"
            or (a.out_layout or "NHWC") != "NHWC"
            or int(a.groups) != 1
        ):
            return expr  # only what legalize_nchw_input_conv can build
        return relax.op.nn.conv2d(
            matches[x],
            matches[w],
            a.strides,
            a.padding,
            a.dilation,
            a.groups,
            data_layout="NCHW",
            kernel_layout=a.kernel_layout,
            out_layout=a.out_layout or "NHWC",
            out_dtype=_dtype_or_none(a.out_dtype),
        )

    mod["main"] = rewrite_call(conv, read_nchw, mod["main"])
    return relax.transform.DeadCodeElimination()(mod)


def pad_depthwise_chains(mod, lanes: int):
    """``conv2d(x, Wa) + ba -> act -> depthwise(Wd) + bd [-> act] -> conv2d(Wc)`` whose C channels are
    not a multiple of ``lanes`` -> the same chain on C rounded up to whole vectors: ``Wa`` and ``ba``
    get zero output channels, ``Wd`` and ``bd`` zero channels, ``Wc`` zero input channels. No slice
    and no pad: the extra channels hold act(0) (finite), and ``Wc``'s zero rows take them out, so
    the result is exactly the unpadded chain's. (onnxruntime's NCHWc layout computes the same
    padded channels.)

    A depthwise convolution's tile is one vector of channels; with 72 or 120 channels (MnasNet),
    88 (MobileNetV3-Small) or 58 (ShuffleNet) it was a half, a quarter or an eighth of a register:
    MnasNet's 56 x 56 x 72 depthwise took 116 us against onnxruntime's 55. Padding the depthwise
    convolution alone, with a slice and a pad around it, was wrong on two threads (see
    pad_conv_output_channels); this rewrite makes neither. Only chains whose every step has one
    user are rewritten (a value also used elsewhere would be computed twice)."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    single = single_use_vars(mod["main"])
    value_var = {b.value: b.var for block in mod["main"].body.blocks for b in block.bindings}

    def act(x):
        return is_op("relax.nn.relu")(x) | is_op("relax.clip")(x, wildcard(), wildcard())

    x = wildcard()
    conv_a = is_op("relax.nn.conv2d")(x, is_const())
    bias_a = is_op("relax.add")(conv_a, is_const())
    act_a = act(bias_a)
    dw = is_op("relax.nn.conv2d")(act_a, is_const())
    bias_d = is_op("relax.add")(dw, is_const())
    act_d = act(bias_d)
    conv_c = is_op("relax.nn.conv2d")(act_d | bias_d, is_const())

    def nhwc_hwio(call) -> bool:
        a = call.attrs
        return (a.data_layout, a.kernel_layout, a.out_layout or a.data_layout) == ("NHWC", "HWIO", "NHWC") and str(
            call.args[1].ty.dtype
        ) == "float32"

    def channel_const(c, channels: int) -> bool:
        shape = [int(d) for d in c.ty.shape.values]
        return bool(shape) and shape[-1] == channels and all(d == 1 for d in shape[:-1])

    def pad_last(c, extra: int, axis: int = -1):
        v = c.value.numpy()
        widths = [(0, 0)] * v.ndim
        widths[axis] = (0, extra)
        return relax.const(np.pad(v, widths), str(c.ty.dtype))

    def conv_like(call, data, weight, groups=None):
        a = call.attrs
        return relax.op.nn.conv2d(
            data,
            weight,
            a.strides,
            a.padding,
            a.dilation,
            int(a.groups) if groups is None else groups,
            data_layout=a.data_layout,
            kernel_layout=a.kernel_layout,
            out_layout=a.out_layout or None,
            out_dtype=_dtype_or_none(a.out_dtype),
        )

    def like_act(call, data):
        if call.op.name == "relax.nn.relu":
            return relax.op.nn.relu(data)
        return relax.Call(call.op, [data, *call.args[1:]], call.attrs)

    def pad(expr, m):
        ca, ba, d, bd = m[conv_a], m[bias_a], m[dw], m[bias_d]
        aa, ad = m.get(act_a), m.get(act_d)
        steps = [ca, ba, aa, d, bd] + ([ad] if ad is not None else [])
        if any(value_var.get(e) not in single for e in steps):
            return expr
        if not all(nhwc_hwio(c) for c in (ca, d, expr)) or int(ca.attrs.groups) != 1 or int(expr.attrs.groups) != 1:
            return expr
        channels = int(ca.args[1].ty.shape.values[3])
        wd = [int(v) for v in d.args[1].ty.shape.values]
        wc = [int(v) for v in expr.args[1].ty.shape.values]
        padded = -(-channels // lanes) * lanes
        if (
            padded == channels
            or channels < lanes
            or int(d.attrs.groups) != channels
            or wd[2:] != [1, channels]
            or wc[2] != channels
            or not channel_const(ba.args[1], channels)
            or not channel_const(bd.args[1], channels)
        ):
            return expr
        extra = padded - channels
        y = conv_like(ca, m[x], pad_last(ca.args[1], extra))
        y = like_act(aa, relax.op.add(y, pad_last(ba.args[1], extra)))
        y = relax.op.add(conv_like(d, y, pad_last(d.args[1], extra), groups=padded), pad_last(bd.args[1], extra))
        if ad is not None:
            y = like_act(ad, y)
        return conv_like(expr, y, pad_last(expr.args[1], extra, axis=2))

    mod["main"] = rewrite_call(conv_c, pad, mod["main"])
    return relax.transform.DeadCodeElimination()(mod)


def pad_conv_output_channels(mod, lanes: int, odd_pairs: bool = False):
    """``conv2d(x, W)`` (NHWC output, HWIO constant weights, ``O`` output channels not a multiple of
    ``lanes``) -> ``strided_slice(conv2d(x, W padded with zero filters to a multiple of lanes),
    channels [0, O))``.

    The convolution schedules tile the output channels in whole vectors: ShuffleNet's 58 and 116
    channels (2 x 29, 4 x 29) left tiles of 2 and 4 floats, a quarter of an AVX-512 register or
    less, and its 1x1 convolutions ran at 25-45 GFLOP/s against 140 for 96 channels. The padded
    convolution computes a few zero channels more and runs in whole vectors (two per tile where
    that adds at most an eighth: SqueezeNet's 1000-class convolution, 1024 not 1008 channels, 2.2
    -> 1.4 ms); the slice is fused into the convolution's kernel with the bias and activation
    after it, and a constant bias added after the slice is padded and moved before it.

    With ``odd_pairs`` (16 vector registers) a weight-stationary convolution of an odd number of whole vectors
    is padded to pairs too: its tile would be rows x one vector (a band's odd vector counts get tiles of 3 or 5
    vectors, ``reduction_rules.schedule_reduction``'s ``across``; a stationary task's do not). SqueezeNet's
    13 x 13 1x1 512 -> 1000 (125 AVX2 vectors): 7 rows x 1 vector, 2.90 ms; 1008 channels in guarded tiles of 5
    rows x 2, 2.26 ms.

    Depthwise convolutions are left as they are. Padding them too (the zero channels added to their
    input, a pad fused into the kernel that makes it) took ShuffleNet from 3.6 to 3.0 ms, but its
    outputs were wrong on two threads, with TVM's pool as with tvmgen's (max error 224 on outputs of
    about 1e4; right on one thread): a race in that fused slice -> relu -> pad epilogue that the
    whole zoo at 2 threads now guards against (tests/runtime/test_parallel.py)."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    def pad(expr, a, data, weights):
        channels, groups = int(weights.ty.shape.values[3]), int(a.groups)
        padded = -(-channels // lanes) * lanes
        if channels < lanes or groups != 1:
            return expr
        if padded == channels and not (odd_pairs and _heavy_weights(expr, weights)):
            return expr
        pair = -(-channels // (2 * lanes)) * 2 * lanes  # tiles of two vectors, where that costs little
        padded = pair if pair - channels <= channels // 8 else padded
        if padded == channels:
            return expr
        zeros = [(0, 0), (0, 0), (0, 0), (0, padded - channels)]
        wide = relax.const(np.pad(weights.value.numpy(), zeros), "float32")
        full = _conv2d_like(a, data, wide, a.padding)
        return relax.op.strided_slice(full, axes=[3], begin=[0], end=[channels])

    mod = _rewrite_float_hwio_convs(mod, pad)

    # add(slice(conv), bias) -> slice(add(conv, bias padded with zeros)): the bias is read in the
    # padded tile like the weights, so the schedule can pack both (a bias read only for the first
    # O channels would get a packed copy of the padded size, which with_packed_weights refuses).
    return move_bias_before_slice(mod, is_op("relax.nn.conv2d")(wildcard(), wildcard()))


def _heavy_weights(call, weights) -> bool:
    """``reduction_rules.heavy_weights`` of a convolution call with constant ``weights``: its schedule keeps them in
    place."""
    import numpy as np

    from tvmgen.compiler.cpu.reduction_rules import heavy_weights
    from tvmgen.compiler.rewrites import static_shape

    shape = static_shape(call)
    if not shape or None in shape:
        return False
    return heavy_weights(shape[3], shape[1] * shape[2], int(np.prod([int(v) for v in weights.ty.shape.values])) * 4)


def pad_conv_output_width(mod, lanes: int, rows: int):
    """``conv2d(x, W)`` (NHWC, HWIO constant float32 weights, whole pairs of vectors of output channels, an
    output width that ``rows`` does not divide but a width at most a twelfth wider does) -> ``strided_slice(
    conv2d(x, W, right padding wider by the extra columns times the stride), width [0, W_out))``.

    With 16 vector registers (AVX2) a tile of two vectors of channels holds ``rows`` = 6 rows: 12
    accumulators, enough to hide the multiply-add's latency. A width of 28 or 56 has no such divisor and got
    tiles of 4 rows (8 accumulators): a 3x3 convolution of 128 channels at 28 x 28 ran at 76 GFLOP/s on a Zen 2
    core, at 24 and 30 columns (tiles of 6) at 91-96. Computed 30 wide (zero input columns on the right) and
    sliced back to 28 in its kernel, it does a fifteenth more work in tiles of 6."""
    import math

    from tvm import relax

    from tvmgen.compiler.rewrites import static_shape

    def pad(expr, a, data, weights):
        shape = static_shape(expr)
        if a.data_layout != "NHWC" or not shape or None in shape or int(a.groups) != 1 or shape[3] % (2 * lanes):
            return expr
        height, width = shape[1], shape[2]
        if width < rows or any(width % r == 0 for r in range(rows - 1, rows + 1)):
            return expr
        if (height * width) % rows == 0 and (height * width) % math.lcm(rows, width) == 0:
            return expr  # its rows and columns make whole tiles as one loop (reduction_rules._pixels_as_rows)
        wider = -(-width // rows) * rows
        if (wider - width) * 12 > width:
            return expr
        top, left, bottom, right = (int(p) for p in a.padding)
        extra = (wider - width) * int(a.strides[1])
        full = _conv2d_like(a, data, weights, [top, left, bottom, right + extra])
        return relax.op.strided_slice(full, axes=[2], begin=[0], end=[width])

    return _rewrite_float_hwio_convs(mod, pad)


def flatten_stationary_pixels(mod, lanes: int, rows: int):
    """``conv2d(x, W)`` (1x1, stride 1, no padding, NHWC, HWIO constant float32 weights, whole pairs of vectors
    of output channels, weight-stationary: ``reduction_rules.stationary_shape``) over an image whose width no
    tile of ``rows`` or ``rows - 1`` rows divides -> ``reshape(strided_slice(conv2d(reshape(x, one row of all
    H x W pixels), W, right padding to whole tiles), [0, H x W)), the output's shape)``.

    A late stage's 1x1 convolution (7 x 7 pixels, 320 -> 1280 channels) ran in tiles of each image row:
    4 + 3 rows of two vectors with 16 registers (AVX2), 8 and 6 accumulators, too few to hide the
    multiply-add's latency, and 8 rows computed for 7. Over the 49 pixels as one row (a reshape of an NHWC
    tensor moves nothing), padded to 50, it runs in 10 tiles of 5 rows, unguarded (a guarded tile over the
    pixels kept one row's accumulators in memory: 2x slower)."""
    import tvm
    from tvm import relax

    from tvmgen.compiler.cpu.reduction_rules import stationary_shape
    from tvmgen.compiler.rewrites import static_shape

    def flat(expr, a, data, weights, skip):
        if any(weights.same_as(w) for w in skip):
            return expr
        shape = static_shape(expr)
        wshape = [int(v) for v in weights.ty.shape.values]
        if a.data_layout != "NHWC" or not shape or None in shape or int(a.groups) != 1 or shape[3] % (2 * lanes):
            return expr
        if (
            wshape[:2] != [1, 1]
            or any(int(v) != 1 for v in [*a.strides, *a.dilation])
            or any(int(p) for p in a.padding)
        ):
            return expr
        batch, height, width, channels = shape
        if batch != 1 or height < 2 or any(width % r == 0 for r in (rows - 1, rows)):
            return expr
        pixels = height * width
        if not stationary_shape(channels, pixels, wshape[2], 2 * lanes, 32, True):
            return expr
        padded = min(-(-pixels // r) * r for r in (rows, rows - 1))
        if (padded - pixels) * 12 > pixels:
            return expr
        row = relax.op.reshape(data, [1, 1, pixels, wshape[2]])
        full = _conv2d_like(a, row, weights, [0, 0, 0, padded - pixels])
        return relax.op.reshape(relax.op.strided_slice(full, axes=[2], begin=[0], end=[pixels]), shape)

    def rewritten(skip):
        trial = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)  # the rewrites set its "main"
        return sink_pixel_reshapes(_rewrite_float_hwio_convs(trial, lambda *args: flat(*args, skip)))

    first = rewritten([])
    unsunk = _unsunk_weights(first)  # convolutions whose epilogue would be split from them: left as they were
    return rewritten(unsunk) if unsunk else first


# what may read an image regrouped from a row of pixels without a kernel of its own for the regrouping
_READS_REGROUPED = (
    "relax.nn.conv2d",
    "relax.matmul",
    "relax.nn.max_pool2d",
    "relax.nn.avg_pool2d",
    "relax.nn.adaptive_avg_pool2d",
    "relax.mean",
    "relax.reshape",
    "relax.permute_dims",  # (NHWC back to NCHW: a kernel of its own either way)
)


def _unsunk_weights(mod) -> list:
    """The weights of each convolution ``flatten_stationary_pixels`` regrouped whose regrouped output (after
    ``sink_pixel_reshapes``) is read by an operator not in ``_READS_REGROUPED`` (a quantisation, a split of the
    channels, a concatenation): that operator would be a kernel of its own, not the convolution's epilogue."""
    import tvm
    from tvm import relax

    values: dict = {}
    users: dict = {}
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            values[b.var] = b.value
            if isinstance(b.value, relax.Call):
                for a in b.value.args:
                    if isinstance(a, relax.Var):
                        users.setdefault(a, []).append(b.value)
    conv = tvm.ir.Op.get("relax.nn.conv2d")
    reshape = tvm.ir.Op.get("relax.reshape")
    allowed = [tvm.ir.Op.get(n) for n in _READS_REGROUPED]
    found = []
    for var, value in values.items():
        if not (isinstance(value, relax.Call) and value.op.same_as(reshape)):
            continue
        inner, out = known_shape(value.args[0]), known_shape(var)
        if inner is None or out is None or not _pixels_regrouped(inner, out):
            continue
        if all(any(u.op.same_as(op) for op in allowed) for u in users.get(var, [])):
            continue
        source = value.args[0]
        for _ in range(16):  # back through the epilogue to the convolution
            bound = values.get(source)
            if not isinstance(bound, relax.Call):
                break
            if bound.op.same_as(conv):
                found.append(bound.args[1])
                break
            source = next((a for a in bound.args if isinstance(a, relax.Var)), None)
    return found


_SUNK_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum")
_SUNK_UNARY = ("relax.nn.relu", "relax.clip", "relax.sigmoid")


def sink_pixel_reshapes(mod):
    """``op(reshape(X), c)`` -> ``reshape(op(X, c))`` where the reshape regroups one row of pixels into an
    image's rows (``flatten_stationary_pixels``'s, ``_pixels_regrouped``), ``op`` is elementwise (add, subtract,
    multiply, maximum, minimum; relu, clip, sigmoid) and each other operand a constant per channel or of one
    value, or a tensor of the image's shape (a residual: regrouped into a row, a view; a SiLU's sigmoid of the
    same reshape: its own row); and a slice of the channels alone (padded output channels sliced back). A
    convolution's bias, activation, residual and channel slice so stay in its kernel's epilogue, the reshape
    after them (a view); the reshapes no one reads any more are dropped (``rewrites.sink_reshapes``)."""
    import tvm
    from tvm import relax

    slice_op = tvm.ir.Op.get("relax.strided_slice")

    def sunk_channel_slice(sink, call):
        """A slice of the channels alone (the padded output channels sliced back after the bias:
        ``pad_conv_output_channels``) regroups nothing: it is taken of the row, the reshape after it."""
        if not call.op.same_as(slice_op):
            return call
        row, full, out = sink.row_of(call.args[0]), known_shape(call.args[0]), known_shape(call)
        if row is None or full is None or out is None:
            return call
        cut = padding_slice(call, full)
        if cut is None or cut[0] != [len(full) - 1]:
            return call
        sliced = sink.builder_.emit(relax.Call(call.op, [row, *call.args[1:]], call.attrs, call.ty_args))
        return relax.op.reshape(sliced, out)

    return sink_reshapes(mod, _pixels_regrouped, _SUNK_UNARY, _SUNK_BINARY, sunk_channel_slice)


def _pixels_regrouped(inner: list[int], out: list[int]) -> bool:
    """Whether a reshape from ``inner`` to ``out`` regroups one row of an NHWC image's pixels into its rows."""
    return (
        len(inner) == len(out) == 4
        and inner[:2] == [1, 1]
        and out[0] == 1
        and out[1] > 1
        and inner[2] == out[1] * out[2]
        and inner[3] == out[3]
    )


def _rewrite_float_hwio_convs(mod, rewrite):
    """``mod`` with each conv2d of constant float32 HWIO weights and an NHWC output replaced by
    ``rewrite(call, attrs, data, weights)`` (the call itself to leave it)."""
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    x, w = wildcard(), is_const()

    def each(expr, matches):
        a, weights = expr.attrs, matches[w]
        out = a.out_layout or a.data_layout
        if a.kernel_layout != "HWIO" or out != "NHWC" or str(weights.ty.dtype) != "float32":
            return expr
        return rewrite(expr, a, matches[x], weights)

    mod["main"] = rewrite_call(is_op("relax.nn.conv2d")(x, w), each, mod["main"])
    return mod


def _conv2d_like(attrs, data, weights, padding):
    """A conv2d with ``attrs``'s strides, dilation, groups, layouts and output type, on ``data`` and ``weights``
    with ``padding``."""
    from tvm import relax

    return relax.op.nn.conv2d(
        data,
        weights,
        attrs.strides,
        padding,
        attrs.dilation,
        int(attrs.groups),
        data_layout=attrs.data_layout,
        kernel_layout=attrs.kernel_layout,
        out_layout=attrs.out_layout or None,
        out_dtype=_dtype_or_none(attrs.out_dtype),
    )


def move_bias_before_slice(mod, wide):
    """``add(strided_slice(W, last axis [0, n)), bias)`` -> ``strided_slice(add(W, bias padded with zeros))`` for
    ``W`` matching the pattern ``wide`` (an operator padded to whole vectors and sliced back by
    ``pad_conv_output_channels`` or ``matmul_layout.pad_matmul_columns``) and a constant bias per element of that
    axis: the kernel keeps the add in its epilogue and the slice as its last step. A slice of the rows too (the
    second last axis: ``pad_matmul_columns``'s padded rows), or of the rows only, moves the same way."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op

    sliced = is_op("relax.strided_slice")(wide, varg_default_wildcard=True)
    bias = is_const()
    add = is_op("relax.add")(sliced, bias)

    def pad_bias(expr, matches):
        s, c = matches[sliced], matches[bias]
        shape = [int(d) for d in c.ty.shape.values] if c.ty.shape is not None else []
        full = [int(d) for d in matches[wide].ty.shape.values]
        out = [int(d) for d in s.ty.shape.values]
        slicing = padding_slice(s, full)
        if (
            slicing is None
            or str(c.ty.dtype) != str(s.ty.dtype)
            or not shape
            or len(shape) > len(out)
            or shape[-1] != out[-1]
            or any(d != 1 for d in shape[:-1])
        ):
            return expr  # only the slice made by the padding, and a bias per element of the last axis
        axes, ends = slicing
        values = np.pad(c.value.numpy(), [(0, 0)] * (len(shape) - 1) + [(0, full[-1] - out[-1])])
        return relax.op.strided_slice(
            relax.op.add(matches[wide], relax.const(values, str(c.ty.dtype))),
            axes=axes,
            begin=[0] * len(axes),
            end=ends,
        )

    mod["main"] = rewrite_call(add, pad_bias, mod["main"])
    return mod


def padding_slice(s, full: list[int]) -> tuple[list[int], list[int]] | None:
    """(axes, ends) of ``s``, a ``strided_slice`` of a value of shape ``full``, where it is one the padding rewrites
    make: from 0, step 1, along the last axis, the second last, or both (in that order, ascending); else None."""
    try:  # axes, begin, end (, strides): tuples of integers in the slices the rewrites make
        axes, begin, ends, *strides = [[int(v.value) for v in a.fields] for a in s.args[1:]]
    except (AttributeError, TypeError, ValueError):
        return None
    rank = len(full)
    out = [int(d) for d in s.ty.shape.values] if s.ty.shape is not None else []
    kept = [i for i in range(rank) if i not in axes]
    if (
        axes not in ([rank - 1], [rank - 2], [rank - 2, rank - 1])
        or any(b != 0 for b in begin)
        or any(st != [1] * len(axes) for st in strides)
        or len(out) != rank
        or any(full[i] != out[i] for i in kept)
    ):
        return None
    return axes, ends


def legalize_nchw_input_conv(bb, call):
    """LegalizeOps for ``conv2d(data_layout="NCHW", kernel_layout="HWIO", out_layout="NHWC")``,
    groups 1 (what ``nchw_input_into_conv`` makes), which TOPI's legalization leaves alone: a
    TE convolution that pads the NCHW input and writes NHWC. Any other conv2d is returned as is."""
    from tvm import te, topi

    a = call.attrs
    if (a.data_layout, a.kernel_layout, a.out_layout, int(a.groups)) != ("NCHW", "HWIO", "NHWC", 1):
        return call
    sh, sw = (int(v) for v in a.strides)
    dh, dw = (int(v) for v in a.dilation)
    pt, pl, pb, pr = (int(v) for v in a.padding)
    out_dtype = _dtype_or_none(a.out_dtype)

    def conv(x, w):
        _, channels, height, width = (int(v) for v in x.shape)
        kh, kw, _, cout = (int(v) for v in w.shape)
        dtype = out_dtype or x.dtype
        padded = topi.nn.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], name="pad_temp")
        oh = (height + pt + pb - (kh - 1) * dh - 1) // sh + 1
        ow = (width + pl + pr - (kw - 1) * dw - 1) // sw + 1
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")
        rc = te.reduce_axis((0, channels), name="rc")
        return te.compute(
            (x.shape[0], oh, ow, cout),
            lambda n, y, xx, co: te.sum(
                padded[n, rc, y * sh + ry * dh, xx * sw + rx * dw].astype(dtype) * w[ry, rx, rc, co].astype(dtype),
                axis=[ry, rx, rc],
            ),
            name="conv2d_nchw_nhwc",
        )

    return bb.call_te(conv, call.args[0], call.args[1], primfunc_name_hint="conv2d")


def _dtype_or_none(dtype):
    """A conv2d's out_dtype attribute: None when unset (it prints as "None", "void" or "")."""
    text = str(dtype) if dtype is not None else ""
    return None if text in ("", "None", "void") else text
