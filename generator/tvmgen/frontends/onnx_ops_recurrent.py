"""RNN, GRU and LSTM, which TVM 0.27's importer has none of, expanded for ``onnx_ops.expand``
(``custom_ops`` registry entries, registered when this module is imported). Their own module because
they are one family: one set of attribute checks (``_layer``), one unrolling and the fused kernels,
apart from the shared expansion pass in ``onnx_ops``.

They need a fixed sequence length (set the input's shape with ``--input``). A GRU or LSTM whose gates
fit 256 GPU threads (4H or 3H <= 256), with the default activations, no peepholes, ``clip`` or
``sequence_lens`` shorter than the sequence, becomes one kernel per direction (``TvmgenLSTM`` /
``TvmgenGRU`` nodes, converted by ``register_converters`` into ``compiler/recurrent.py``'s kernels, on
the CPU and on GPUs); every other layer, and every RNN, is unrolled over its sequence, which works on
every target: the input side of all the steps as one matrix product, then each step a product with
the recurrent weights and the gate arithmetic. Directions forward, reverse and bidirectional, both
layouts, initial states, peepholes, ``clip``, GRU's ``linear_before_reset``, every activation ONNX
defines for these operators (with ``activation_alpha`` / ``activation_beta``, per direction), and
constant ``sequence_lens`` (different across the batch; ones given as a model input are bound with
``--const``).
"""

from __future__ import annotations

import numpy as np

from tvmgen.core.errors import ModelError
from tvmgen.frontends.custom_ops import onnx_op
from tvmgen.frontends.onnx_ops import Context, _attrs, _Emit, _input


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# The activations ONNX defines for RNN, GRU and LSTM: name (lower case, as onnxruntime matches them for
# GRU and LSTM) -> (takes an alpha, takes a beta).
ACTIVATIONS = {
    "relu": (False, False),
    "tanh": (False, False),
    "sigmoid": (False, False),
    "affine": (True, True),
    "leakyrelu": (True, False),
    "thresholdedrelu": (True, False),
    "scaledtanh": (True, True),
    "hardsigmoid": (True, True),
    "elu": (True, False),
    "softsign": (False, False),
    "softplus": (False, False),
}
# onnxruntime's values for an alpha / beta the attributes leave out (0 for the others)
_ACTIVATION_DEFAULTS = {"leakyrelu": (0.01, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}
_DEFAULT_ACTIVATIONS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"], "LSTM": ["sigmoid", "tanh", "tanh"]}


def _activations(node, a: dict, label: str, dirs: int) -> list[list[tuple[str, float, float]]]:
    """Each direction's activations as (name, alpha, beta): f (RNN); f, g (GRU); f, g, h (LSTM).

    ``activation_alpha`` / ``activation_beta`` are consumed in order by the activations that take one,
    a value left out being onnxruntime's default (LeakyRelu 0.01, HardSigmoid 0.2 / 0.5, Elu 1; 0 for
    the others): as onnxruntime 1.31 reads them for all three operators (the reference tvmgen checks
    against)."""
    per = len(_DEFAULT_ACTIVATIONS[node.op_type])
    names = [_text(x).lower() for x in a.get("activations", [])] or _DEFAULT_ACTIVATIONS[node.op_type] * dirs
    if node.op_type == "RNN" and dirs == 1 and len(names) == 2:
        names = names[:1]  # RNN's schema default is [Tanh, Tanh]; one direction takes the first
    if len(names) != per * dirs:
        raise ModelError(
            f"{label} lists {len(names)} activations; {'a bidirectional' if dirs == 2 else 'a'} "
            f"{node.op_type} takes {per * dirs} ({per} a direction, the forward direction's first)",
            "export the layer with one activation per gate function and direction",
        )
    unknown = sorted({n for n in names if n not in ACTIVATIONS})
    if unknown:
        raise ModelError(
            f"{label} uses activation(s) {unknown}, which ONNX does not define for recurrent layers",
            f"use one of {', '.join(sorted(ACTIVATIONS))}",
        )
    alphas = [float(v) for v in a.get("activation_alpha", [])]
    betas = [float(v) for v in a.get("activation_beta", [])]
    out = []
    for name in names:
        takes_alpha, takes_beta = ACTIVATIONS[name]
        alpha, beta = _ACTIVATION_DEFAULTS.get(name, (0.0, 0.0))
        if takes_alpha and alphas:
            alpha = alphas.pop(0)
        if takes_beta and betas:
            beta = betas.pop(0)
        out.append((name, alpha if takes_alpha else 0.0, beta if takes_beta else 0.0))
    return [out[d * per : (d + 1) * per] for d in range(dirs)]


class _Layer:
    """A recurrent node's attributes and constant operands, checked (``_layer``)."""

    op: str
    label: str
    attrs: dict
    directions: list[str]
    layout: int
    seq: int
    batch: int
    hidden: int
    W: np.ndarray
    R: np.ndarray
    B: np.ndarray
    clip: float | None
    lens: np.ndarray | None  # per sequence of the batch; None where every one has the full length
    activations: list  # per direction: [(name, alpha, beta), ...]

    @property
    def default_activations(self) -> bool:
        return all([n for n, _, _ in acts] == _DEFAULT_ACTIVATIONS[self.op] for acts in self.activations)


def _layer(node, ctx: Context, gates: int) -> _Layer:
    """Checks shared by RNN, GRU and LSTM."""
    L = _Layer()
    L.op, a = node.op_type, _attrs(node)
    L.attrs, L.label = a, f"{node.op_type} node {node.name or node.output[0]!r}"
    if a.get("input_forget", 0):
        raise ModelError(f"{L.label} sets input_forget, which tvmgen does not expand", "export it without input_forget")
    direction = _text(a.get("direction", b"forward"))
    L.directions = {"forward": ["forward"], "reverse": ["reverse"], "bidirectional": ["forward", "reverse"]}[direction]
    L.activations = _activations(node, a, L.label, len(L.directions))
    L.layout = int(a.get("layout", 0))
    L.clip = a.get("clip")
    x_shape = ctx.shape(node.input[0])
    if not x_shape or len(x_shape) != 3 or None in x_shape:
        raise ModelError(
            f"{L.label}: the sequence length of its input {node.input[0]!r} is not fixed "
            f"(shape {x_shape}); tvmgen unrolls the sequence",
            "fix the model input's shape with --input NAME:SHAPE (e.g. the number of frames)",
        )
    L.seq, L.batch = (x_shape[0], x_shape[1]) if L.layout == 0 else (x_shape[1], x_shape[0])
    weights = [ctx.value(_input(node, i)) if _input(node, i) else None for i in (1, 2, 3)]
    if weights[0] is None or weights[1] is None:
        raise ModelError(
            f"{L.label}: its weights W and R are computed in the graph, not constants",
            "export the model with constant recurrent weights",
        )
    L.W, L.R = weights[0], weights[1]
    L.hidden = int(a.get("hidden_size", weights[1].shape[-1]))
    L.B = weights[2] if weights[2] is not None else np.zeros((len(L.directions), 2 * gates * L.hidden), np.float32)
    L.lens = _lengths(node, ctx, L)
    return L


def _lengths(node, ctx: Context, L: _Layer):
    """``sequence_lens`` as constants (None where absent or all the full length)."""
    name = _input(node, 4)
    if not name:
        return None
    lens = ctx.value(name)
    if lens is None:
        graph_inputs = {i.name for i in ctx.model.graph.input} - {i.name for i in ctx.model.graph.initializer}
        if name in graph_inputs:
            raise ModelError(
                f"{L.label}: its sequence_lens come from the model input {name!r}; tvmgen unrolls the "
                "sequence with lengths known when it compiles",
                f"bind the lengths at compile time: --const {name}="
                + ",".join([str(L.seq)] * L.batch)
                + " (one length per sequence of the batch)",
            )
        raise ModelError(
            f"{L.label}: its sequence_lens ({name!r}) are computed in the graph; tvmgen unrolls the sequence "
            "with lengths known when it compiles",
            "export the layer with constant sequence_lens, or bind the model inputs they are computed from "
            "with --const NAME=VALUES",
        )
    lens = np.asarray(lens).astype(np.int64).reshape(-1)
    if lens.shape != (L.batch,) or lens.min() < 0 or lens.max() > L.seq:
        raise ModelError(
            f"{L.label}: sequence_lens {lens.tolist()} do not give one length in 0..{L.seq} for each of "
            f"the batch's {L.batch} sequences",
            "fix sequence_lens in the model (or the --const that binds them)",
        )
    return None if np.all(lens == L.seq) else lens


def _initial(e: _Emit, node, index: int, d: int, batch: int, hidden: int, layout: int) -> str:
    name = _input(node, index)
    if not name:
        return e.const(np.zeros((batch, hidden), np.float32), "zeros")
    return e("Gather", [name, e.const(np.array(d, np.int64), "dir")], axis=0 if layout == 0 else 1)


def _unrolled(e: _Emit, node, L: _Layer, w_t, bias, initial, step):
    """The layer unrolled over its sequence, each direction from ``initial(d)`` (its states: h, and c for
    an LSTM) through ``step(d, xw_t, states) -> new states``; then Y, Y_h (and Y_c). ``xw_t`` is step t's
    input side, ``X[t] w_t[d] (+ bias[d])``, which does not depend on the states: one matrix product
    over the whole sequence before the steps, [S, B, G] (or [B, S, G] for layout 1).

    With ``sequence_lens``, as onnxruntime: a sequence's steps past its length leave its states as they
    are and give zeros in Y; its last states (Y_h, Y_c) are those after its last step, which for the
    reverse direction (run from the sequence's own last step back to the first) is step 0; a sequence
    of length 0 gets zeros there too. Steps where every sequence of the batch has ended are left out."""
    zeros = e.const(np.zeros((L.batch, L.hidden), np.float32), "zeros")
    per_dir_steps, finals = [], []
    for d, direction in enumerate(L.directions):
        states = initial(d)
        xw = e("MatMul", [node.input[0], w_t[d]])
        xw = e("Add", [xw, bias[d]]) if bias is not None else xw
        ys = {}
        for t in range(L.seq - 1, -1, -1) if direction == "reverse" else range(L.seq):
            valid = None if L.lens is None else L.lens > t
            if valid is not None and not valid.any():
                ys[t] = zeros
                continue
            xw_t = e("Gather", [xw, e.const(np.array(t, np.int64), "t")], axis=0 if L.layout == 0 else 1)
            new = step(d, xw_t, states)
            ys[t] = new[0]  # zeros past each sequence's length: one product with a mask, at the end
            if valid is not None and not valid.all():
                mask = e.const(valid.reshape(L.batch, 1), "mask")
                states = [e("Where", [mask, n, s]) for n, s in zip(new, states)]
            else:
                states = new
        if L.lens is not None and not L.lens.all():
            mask = e.const((L.lens > 0).reshape(L.batch, 1), "mask")
            states = [e("Where", [mask, s, zeros]) for s in states]
        per_dir_steps.append([ys[t] for t in range(L.seq)])
        finals.append(states)
    extra = [[f[1] for f in finals]] if len(finals[0]) > 1 else []
    y_mask = None if L.lens is None else (np.arange(L.seq)[:, None] < L.lens[None, :]).astype(np.float32)
    _outputs(e, node, per_dir_steps, [f[0] for f in finals], L, extra, y_mask)
    return e.nodes


def _outputs(e: _Emit, node, per_dir_steps, per_dir_last, L: _Layer, extra=(), y_mask=None):
    """Y, Y_h (and Y_c) as ONNX lays them out, from each direction's per-step and last states [B, H];
    ``y_mask`` [S, B] (if given) multiplies Y."""
    outs = list(node.output) + [""] * 3
    B, H = L.batch, L.hidden

    def stacked(states, shape):  # [B, H] each -> concatenated [n * B, H] -> shape
        cat = e("Concat", states, axis=0) if len(states) > 1 else states[0]
        return e("Reshape", [cat, e.const(np.array(shape, np.int64), "shape")])

    if outs[0]:
        dirs = [stacked(steps, [L.seq, 1, B, H]) for steps in per_dir_steps]  # steps in time order
        y = e("Concat", dirs, axis=1) if len(dirs) > 1 else dirs[0]  # [S, D, B, H]
        if y_mask is not None:
            y = e("Mul", [y, e.const(y_mask.reshape(L.seq, 1, B, 1), "mask")])
        e("Transpose", [y], outs[0], perm=[2, 0, 1, 3]) if L.layout else e("Identity", [y], outs[0])
    for k, last in enumerate([per_dir_last, *extra]):
        if outs[k + 1]:
            y = stacked(last, [len(last), B, H])
            e("Transpose", [y], outs[k + 1], perm=[1, 0, 2]) if L.layout else e("Identity", [y], outs[k + 1])


# One kernel per direction (compiler/recurrent.py) where its GPU variant fits one pass of a work-group
# of 256 threads, a thread per gate; larger layers, peepholes, clip, non-default activations and
# sequence_lens shorter than the sequence are unrolled (the kernels compute sigmoid and tanh only, over
# the whole sequence for every batch row).
FUSED_MAX_GATES = 256
FUSED_DOMAIN = "ai.tvmgen"


def _fusable(L: _Layer, gates: int) -> bool:
    return L.default_activations and L.clip is None and L.lens is None and gates * L.hidden <= FUSED_MAX_GATES


def _fused(e: _Emit, node, kind: str, directions, layout, seq, batch, hidden, inputs_per_dir, lbr=0):
    """Each direction as one TvmgenLSTM / TvmgenGRU node; the ONNX outputs assembled from them."""
    from onnx import helper

    x = node.input[0] if layout == 0 else e("Transpose", [node.input[0]], perm=[1, 0, 2])  # [S, B, I]
    width = e.ctx.shape(node.input[0])[2]
    ys: list[str] = []
    last_h: list[str] = []
    last_c: list[str] = []  # LSTM only
    for d, direction in enumerate(directions):
        reverse = direction == "reverse"
        y, c = e.ctx.name(f"{e.hint}_y"), e.ctx.name(f"{e.hint}_c")
        e.nodes.append(
            helper.make_node(
                f"Tvmgen{kind}",
                [x, *inputs_per_dir[d]],
                [y, c][: 2 if kind == "LSTM" else 1],
                domain=FUSED_DOMAIN,
                S=seq,
                B=batch,
                I=width,
                H=hidden,
                reverse=int(reverse),
                linear_before_reset=int(lbr),
            )
        )
        ys.append(e("Unsqueeze", [y, e.const(np.array([1], np.int64), "axis")]))  # [S, 1, B, H]
        last_h.append(e("Gather", [y, e.const(np.array([0 if reverse else seq - 1], np.int64), "t")], axis=0))
        if kind == "LSTM":
            last_c.append(e("Unsqueeze", [c, e.const(np.array([0], np.int64), "axis")]))
    outs = list(node.output) + [""] * 3
    if outs[0]:
        y = e("Concat", ys, axis=1) if len(ys) > 1 else ys[0]
        e("Transpose", [y], outs[0], perm=[2, 0, 1, 3]) if layout else e("Identity", [y], outs[0])
    for k, last in enumerate([last_h, last_c] if kind == "LSTM" else [last_h]):
        if not outs[k + 1]:
            continue
        y = e("Concat", last, axis=0) if len(last) > 1 else last[0]  # [D, B, H]
        e("Transpose", [y], outs[k + 1], perm=[1, 0, 2]) if layout else e("Identity", [y], outs[k + 1])
    return e.nodes


@onnx_op("RNN")
def rnn(node, ctx: Context):
    """TVM 0.27's importer has no RNN: always unrolled, H_t = f(X_t W^T + H_(t-1) R^T + Wb + Rb)."""
    L = _layer(node, ctx, 1)
    e = _Emit(ctx, node.name or "rnn")
    H = L.hidden
    w_t = [e.const(L.W[d].T.astype(np.float32), "w") for d in range(len(L.directions))]
    r_t = [e.const(L.R[d].T.astype(np.float32), "r") for d in range(len(L.directions))]
    bias = [e.const((L.B[d][:H] + L.B[d][H:]).astype(np.float32), "b") for d in range(len(L.directions))]

    def step(d, xw_t, states):
        return [e.act(L.activations[d][0], e("Add", [xw_t, e("MatMul", [states[0], r_t[d]])]), L.clip)]

    return _unrolled(e, node, L, w_t, bias, lambda d: [_initial(e, node, 5, d, L.batch, H, L.layout)], step)


@onnx_op("LSTM")
def lstm(node, ctx: Context):
    L = _layer(node, ctx, 4)
    peep = ctx.value(_input(node, 7)) if _input(node, 7) else None
    if _input(node, 7) and peep is None:
        raise ModelError(f"{L.label}: its peephole weights are not constants", "export them as constants")
    e = _Emit(ctx, node.name or "lstm")
    H, W, R, B, nd = L.hidden, L.W, L.R, L.B, len(L.directions)
    if peep is None and _fusable(L, 4):
        per_dir = [
            [
                e.const(W[d].T.astype(np.float32), "w"),
                e.const(R[d].T.astype(np.float32), "r"),
                e.const((B[d][: 4 * H] + B[d][4 * H :]).astype(np.float32), "b"),
                _initial(e, node, 5, d, L.batch, H, L.layout),
                _initial(e, node, 6, d, L.batch, H, L.layout),
            ]
            for d in range(nd)
        ]
        return _fused(e, node, "LSTM", L.directions, L.layout, L.seq, L.batch, H, per_dir)
    w_t = [e.const(W[d].T.astype(np.float32), "w") for d in range(nd)]  # [I, 4H], gates i, o, f, c
    r_t = [e.const(R[d].T.astype(np.float32), "r") for d in range(nd)]
    bias = [e.const((B[d][: 4 * H] + B[d][4 * H :]).astype(np.float32), "b") for d in range(nd)]
    p = [
        [e.const(peep[d][k * H : (k + 1) * H].astype(np.float32), "p") for k in range(3)] if peep is not None else None
        for d in range(nd)
    ]

    def step(d, xw_t, states):
        h, c = states
        f, g, act_h = L.activations[d]
        gates = e("Add", [xw_t, e("MatMul", [h, r_t[d]])])
        i_, o_, f_, g_ = (e.columns(gates, k * H, (k + 1) * H) for k in range(4))
        if p[d] is not None:
            i_ = e("Add", [i_, e("Mul", [c, p[d][0]])])
            f_ = e("Add", [f_, e("Mul", [c, p[d][2]])])
        i_, f_, g_ = e.act(f, i_, L.clip), e.act(f, f_, L.clip), e.act(g, g_, L.clip)
        c = e("Add", [e("Mul", [f_, c]), e("Mul", [i_, g_])])
        if p[d] is not None:
            o_ = e("Add", [o_, e("Mul", [c, p[d][1]])])
        return [e("Mul", [e.act(f, o_, L.clip), e.act(act_h, c)]), c]

    def initial(d):
        return [_initial(e, node, 5, d, L.batch, H, L.layout), _initial(e, node, 6, d, L.batch, H, L.layout)]

    return _unrolled(e, node, L, w_t, bias, initial, step)


@onnx_op("GRU")
def gru(node, ctx: Context):
    L = _layer(node, ctx, 3)
    e = _Emit(ctx, node.name or "gru")
    H, W, R, B, nd = L.hidden, L.W, L.R, L.B, len(L.directions)
    before_reset = int(L.attrs.get("linear_before_reset", 0))
    if _fusable(L, 3):
        per_dir = [
            [
                e.const(W[d].T.astype(np.float32), "w"),
                e.const(R[d].T.astype(np.float32), "r"),
                e.const(B[d][: 3 * H].astype(np.float32), "wb"),
                e.const(B[d][3 * H :].astype(np.float32), "rb"),
                _initial(e, node, 5, d, L.batch, H, L.layout),
            ]
            for d in range(nd)
        ]
        return _fused(e, node, "GRU", L.directions, L.layout, L.seq, L.batch, H, per_dir, before_reset)
    w_t, consts = [], []
    for d in range(nd):
        wb, rb = B[d][: 3 * H], B[d][3 * H :]
        w_t.append(e.const(W[d].T.astype(np.float32), "w"))  # [I, 3H], gates z, r, h
        consts.append(
            (
                e.const(R[d][: 2 * H].T.astype(np.float32), "rzr"),
                e.const(R[d][2 * H :].T.astype(np.float32), "rh"),
                e.const((wb[: 2 * H] + rb[: 2 * H]).astype(np.float32), "bzr"),
                e.const(wb[2 * H :].astype(np.float32), "wbh"),
                e.const(rb[2 * H :].astype(np.float32), "rbh"),
            )
        )
    one = e.const(np.float32(1), "one")

    def step(d, xw_t, states):
        (h,) = states
        r_zr, r_h, b_zr, wb_h, rb_h = consts[d]
        f, g = L.activations[d]
        # the biases added here, in the step (test_coverage's test_packed_weights_never_lose_part_of_a_weight
        # relies on this gate function reading b_zr at two offsets)
        zr = e("Add", [e("Add", [e.columns(xw_t, 0, 2 * H), e("MatMul", [h, r_zr])]), b_zr])
        z = e.act(f, e.columns(zr, 0, H), L.clip)
        r = e.act(f, e.columns(zr, H, 2 * H), L.clip)
        if before_reset:
            rec = e("Mul", [r, e("Add", [e("MatMul", [h, r_h]), rb_h])])
        else:
            rec = e("Add", [e("MatMul", [e("Mul", [r, h]), r_h]), rb_h])
        n = e.act(g, e("Add", [e("Add", [e.columns(xw_t, 2 * H, 3 * H), wb_h]), rec]), L.clip)
        return [e("Add", [e("Mul", [e("Sub", [one, z]), n]), e("Mul", [z, h])])]

    return _unrolled(e, node, L, w_t, None, lambda d: [_initial(e, node, 5, d, L.batch, H, L.layout)], step)


def register_converters() -> None:
    """Teach TVM's ONNX importer the fused recurrent nodes (idempotent)."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    from tvmgen.frontends import recurrent_calls as recurrent

    if getattr(onnx_frontend._get_convert_map, "tvmgen", False):
        return

    def converter(kind):
        class Fused(onnx_frontend.OnnxOpConverter):
            @classmethod
            def _impl_v1(cls, bb, inputs, attr, params):
                sp = recurrent.spec(
                    kind,
                    attr["S"],
                    attr["B"],
                    attr["I"],
                    attr["H"],
                    bool(attr["reverse"]),
                    attr.get("linear_before_reset", 0),
                )
                outs = recurrent.emit(bb, sp, list(inputs))
                return relax.Tuple(outs) if len(outs) > 1 else outs[0]

        Fused.__name__ = f"Tvmgen{kind.upper()}"
        return Fused

    original = onnx_frontend._get_convert_map

    def convert_map():
        return {**original(), "TvmgenLSTM": converter("lstm"), "TvmgenGRU": converter("gru")}

    vars(convert_map)["tvmgen"] = True  # the mark checked above
    onnx_frontend._get_convert_map = convert_map
