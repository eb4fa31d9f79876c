"""ONNX operators TVM 0.27's importer lacks, expanded into ones it has (``custom_ops`` registry).

``expand(model)`` rewrites every registered node, in the main graph and in the branches and
bodies of control flow (an ``If`` on a sample rate holding an LSTM), before the import.

LSTM and GRU need a fixed sequence length (set the input's shape with ``--input``). A layer
whose gates fit 256 GPU threads (4H or 3H <= 256), without peepholes or ``clip``, becomes one
kernel per direction (``TvmgenLSTM`` / ``TvmgenGRU`` nodes, converted by ``register_converters``
into ``frontends/recurrent.py``'s kernels); other layers are unrolled over their sequence: each
step a matrix product with the input and one with the recurrent weights, and the gate arithmetic. Directions
forward, reverse and bidirectional, both layouts, peepholes, ``clip``, GRU's
``linear_before_reset``; the default activations only (sigmoid, tanh), as every exporter writes.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from tvmgen.core.errors import ModelError
from tvmgen.frontends.custom_ops import ONNX, onnx_op

if TYPE_CHECKING:
    import onnx


class Context:
    """What an expansion may ask of the graph it rewrites."""

    def __init__(self, model, constants: dict, shapes: dict):
        self.model = model
        self._constants = constants
        self._shapes = shapes
        self.initializers: list = []
        self._names = itertools.count()
        self._taken = {n for g in _graphs(model.graph) for node in g.node for n in node.output} | set(constants)

    def name(self, hint: str) -> str:
        while True:
            candidate = f"{hint}__tvmgen{next(self._names)}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate

    def constant(self, value, hint: str = "const") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        self._constants[name] = np.asarray(value)
        return name

    def value(self, name: str):
        """A tensor's constant value (an initializer or a Constant node), else None."""
        return self._constants.get(name)

    def shape(self, name: str):
        """A tensor's shape as inferred for the fixed input shapes, or None where unknown."""
        return self._shapes.get(name)


def _graphs(graph):
    """A graph and every subgraph inside it (If branches, Loop and Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                yield from _graphs(attr.g)
            for g in attr.graphs:
                yield from _graphs(g)


def _key(node) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def needs_expansion(model) -> bool:
    from tvmgen.frontends import custom_ops

    custom_ops.load()
    return any(_key(n) in ONNX for g in _graphs(model.graph) for n in g.node)


def expand(model, expanded: set | None = None):
    """The model with every registered operator replaced; unchanged when there is none.
    ``expanded`` (if given) gets the operator keys replaced."""
    import onnx
    from onnx import numpy_helper

    if not needs_expansion(model):
        return model
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes, constants = {}, {}
    for g in _graphs(inferred.graph):
        for vi in [*g.value_info, *g.input, *g.output]:
            t = vi.type.tensor_type
            if t.HasField("shape"):
                shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        for init in g.initializer:
            constants[init.name] = numpy_helper.to_array(init)
            shapes.setdefault(init.name, tuple(init.dims))
        for node in g.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    ctx = Context(model, constants, shapes)
    for g in _graphs(model.graph):
        rewritten = []
        for node in g.node:
            entry = ONNX.get(_key(node))
            if entry is None:
                rewritten.append(node)
                continue
            if expanded is not None:
                expanded.add(_key(node))
            try:
                rewritten.extend(entry.fn(node, ctx))
            except ModelError:
                raise
            except Exception as e:
                raise ModelError(
                    f"expanding {node.op_type} node {node.name or node.output[0]!r} failed "
                    f"({entry.source}): {type(e).__name__}: {e}",
                    "fix the expansion registered for it (TVMGEN_CUSTOM_OPS) or report this",
                ) from e
        del g.node[:]
        g.node.extend(rewritten)
    model.graph.initializer.extend(ctx.initializers)
    return model


# ----------------------------------------------------------------------------- recurrent layers


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _input(node, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _recurrent_setup(node, ctx: Context, gates: int):
    """Checks shared by LSTM and GRU; (attributes, directions, seq length, batch, hidden, W, R, B)."""
    a = _attrs(node)
    label = f"{node.op_type} node {node.name or node.output[0]!r}"
    default = {"LSTM": [b"Sigmoid", b"Tanh", b"Tanh"], "GRU": [b"Sigmoid", b"Tanh"]}[node.op_type]
    acts = [x if isinstance(x, bytes) else x.encode() for x in a.get("activations", [])]
    if acts and acts != default * (len(acts) // len(default)):
        raise ModelError(
            f"{label} uses activations {[x.decode() for x in acts]}; tvmgen expands the default ones only",
            "export the layer with the default activations (sigmoid, tanh)",
        )
    if a.get("input_forget", 0):
        raise ModelError(f"{label} sets input_forget, which tvmgen does not expand", "export it without input_forget")
    direction = a.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    directions = {"forward": ["forward"], "reverse": ["reverse"], "bidirectional": ["forward", "reverse"]}[direction]
    layout = int(a.get("layout", 0))
    x_shape = ctx.shape(node.input[0])
    if not x_shape or len(x_shape) != 3 or None in x_shape:
        raise ModelError(
            f"{label}: the sequence length of its input {node.input[0]!r} is not fixed "
            f"(shape {x_shape}); tvmgen unrolls the sequence",
            "fix the model input's shape with --input NAME:SHAPE (e.g. the number of frames)",
        )
    seq, batch = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
    weights = [ctx.value(_input(node, i)) if _input(node, i) else None for i in (1, 2, 3)]
    if weights[0] is None or weights[1] is None:
        raise ModelError(
            f"{label}: its weights W and R are computed in the graph, not constants",
            "export the model with constant recurrent weights",
        )
    hidden = int(a.get("hidden_size", weights[1].shape[-1]))
    lens = ctx.value(_input(node, 4)) if _input(node, 4) else None
    if _input(node, 4) and (lens is None or np.any(np.asarray(lens) != seq)):
        raise ModelError(
            f"{label}: sequence_lens vary or are computed in the graph; tvmgen unrolls one fixed length",
            "export the layer without sequence_lens (all sequences the same length)",
        )
    bias = weights[2] if weights[2] is not None else np.zeros((len(directions), 2 * gates * hidden), np.float32)
    return a, directions, layout, seq, batch, hidden, weights[0], weights[1], bias


class _Emit:
    """Builds nodes for one expansion."""

    def __init__(self, ctx: Context, hint: str):
        self.ctx, self.hint = ctx, hint
        self.nodes: list[onnx.NodeProto] = []

    def __call__(self, op: str, inputs, out: str | None = None, **attrs) -> str:
        from onnx import helper

        out = out or self.ctx.name(f"{self.hint}_{op.lower()}")
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def const(self, value, hint="c") -> str:
        return self.ctx.constant(value, f"{self.hint}_{hint}")

    def columns(self, x: str, start: int, end: int) -> str:
        return self(
            "Slice",
            [
                x,
                self.const(np.array([start], np.int64)),
                self.const(np.array([end], np.int64)),
                self.const(np.array([1], np.int64)),
            ],
        )

    def clip(self, x: str, clip) -> str:
        if clip is None:
            return x
        return self("Min", [self("Max", [x, self.const(np.float32(-clip))]), self.const(np.float32(clip))])


def _steps(e: _Emit, x: str, layout: int, seq: int, reverse: bool):
    axis = 0 if layout == 0 else 1
    order = range(seq - 1, -1, -1) if reverse else range(seq)
    return [(t, e("Gather", [x, e.const(np.array(t, np.int64), "t")], axis=axis)) for t in order]


def _initial(e: _Emit, node, index: int, d: int, batch: int, hidden: int, layout: int) -> str:
    name = _input(node, index)
    if not name:
        return e.const(np.zeros((batch, hidden), np.float32), "zeros")
    return e("Gather", [name, e.const(np.array(d, np.int64), "dir")], axis=0 if layout == 0 else 1)


def _outputs(e: _Emit, node, per_dir_steps, per_dir_last, layout: int, batch: int, hidden: int, extra=()):
    """Y, Y_h (and Y_c) as ONNX lays them out, from each direction's per-step and last states."""
    outs = list(node.output) + [""] * 3
    nd = len(per_dir_steps)
    if outs[0]:
        dirs = []
        for steps in per_dir_steps:  # steps in time order: [seq, 1, batch, H]
            shaped = [e("Reshape", [h, e.const(np.array([1, 1, batch, hidden], np.int64), "shape")]) for h in steps]
            dirs.append(e("Concat", shaped, axis=0) if len(shaped) > 1 else shaped[0])
        y = e("Concat", dirs, axis=1) if nd > 1 else dirs[0]
        e("Transpose", [y], outs[0], perm=[2, 0, 1, 3]) if layout else e("Identity", [y], outs[0])
    for k, last in enumerate([per_dir_last, *extra]):
        if not outs[k + 1]:
            continue
        shaped = [e("Reshape", [h, e.const(np.array([1, batch, hidden], np.int64), "shape")]) for h in last]
        y = e("Concat", shaped, axis=0) if nd > 1 else shaped[0]
        e("Transpose", [y], outs[k + 1], perm=[1, 0, 2]) if layout else e("Identity", [y], outs[k + 1])


# One kernel per direction (frontends/recurrent.py) where its GPU variant fits one pass of a work-group
# of 256 threads, a thread per gate; larger layers, peepholes and clip are unrolled.
FUSED_DOMAIN = "ai.tvmgen"
FUSED_MAX_GATES = 256


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


@onnx_op("LSTM")
def lstm(node, ctx: Context):
    a, directions, layout, seq, batch, hidden, W, R, B = _recurrent_setup(node, ctx, 4)
    peep = ctx.value(_input(node, 7)) if _input(node, 7) else None
    if _input(node, 7) and peep is None:
        raise ModelError(f"LSTM node {node.name!r}: its peephole weights are not constants", "export them as constants")
    e = _Emit(ctx, node.name or "lstm")
    clip = a.get("clip")
    H = hidden
    if peep is None and clip is None and 4 * H <= FUSED_MAX_GATES:
        per_dir = [
            [
                e.const(W[d].T.astype(np.float32), "w"),
                e.const(R[d].T.astype(np.float32), "r"),
                e.const((B[d][: 4 * H] + B[d][4 * H :]).astype(np.float32), "b"),
                _initial(e, node, 5, d, batch, H, layout),
                _initial(e, node, 6, d, batch, H, layout),
            ]
            for d in range(len(directions))
        ]
        return _fused(e, node, "LSTM", directions, layout, seq, batch, H, per_dir)
    all_steps, last_h, last_c = [], [], []
    for d, direction in enumerate(directions):
        w_t = e.const(W[d].T.astype(np.float32), "w")  # [I, 4H], gates i, o, f, c
        r_t = e.const(R[d].T.astype(np.float32), "r")
        bias = e.const((B[d][: 4 * H] + B[d][4 * H :]).astype(np.float32), "b")
        h = _initial(e, node, 5, d, batch, H, layout)
        c = _initial(e, node, 6, d, batch, H, layout)
        p = (
            [e.const(peep[d][k * H : (k + 1) * H].astype(np.float32), "p") for k in range(3)]
            if peep is not None
            else None
        )
        steps = {}
        for t, x_t in _steps(e, node.input[0], layout, seq, direction == "reverse"):
            gates = e("Add", [e("Add", [e("MatMul", [x_t, w_t]), e("MatMul", [h, r_t])]), bias])
            i_, o_, f_, g_ = (e.columns(gates, k * H, (k + 1) * H) for k in range(4))
            if p is not None:
                i_ = e("Add", [i_, e("Mul", [c, p[0]])])
                f_ = e("Add", [f_, e("Mul", [c, p[2]])])
            i_ = e("Sigmoid", [e.clip(i_, clip)])
            f_ = e("Sigmoid", [e.clip(f_, clip)])
            g_ = e("Tanh", [e.clip(g_, clip)])
            c = e("Add", [e("Mul", [f_, c]), e("Mul", [i_, g_])])
            if p is not None:
                o_ = e("Add", [o_, e("Mul", [c, p[1]])])
            o_ = e("Sigmoid", [e.clip(o_, clip)])
            h = e("Mul", [o_, e("Tanh", [c])])
            steps[t] = h
        all_steps.append([steps[t] for t in range(seq)])
        last_h.append(h)
        last_c.append(c)
    _outputs(e, node, all_steps, last_h, layout, batch, H, extra=(last_c,))
    return e.nodes


@onnx_op("GRU")
def gru(node, ctx: Context):
    a, directions, layout, seq, batch, hidden, W, R, B = _recurrent_setup(node, ctx, 3)
    e = _Emit(ctx, node.name or "gru")
    clip, H = a.get("clip"), hidden
    before_reset = int(a.get("linear_before_reset", 0))
    if clip is None and 3 * H <= FUSED_MAX_GATES:
        per_dir = [
            [
                e.const(W[d].T.astype(np.float32), "w"),
                e.const(R[d].T.astype(np.float32), "r"),
                e.const(B[d][: 3 * H].astype(np.float32), "wb"),
                e.const(B[d][3 * H :].astype(np.float32), "rb"),
                _initial(e, node, 5, d, batch, H, layout),
            ]
            for d in range(len(directions))
        ]
        return _fused(e, node, "GRU", directions, layout, seq, batch, H, per_dir, before_reset)
    all_steps, last_h = [], []
    for d, direction in enumerate(directions):
        wb, rb = B[d][: 3 * H], B[d][3 * H :]
        w_t = e.const(W[d].T.astype(np.float32), "w")  # [I, 3H], gates z, r, h
        r_zr = e.const(R[d][: 2 * H].T.astype(np.float32), "rzr")
        r_h = e.const(R[d][2 * H :].T.astype(np.float32), "rh")
        b_zr = e.const((wb[: 2 * H] + rb[: 2 * H]).astype(np.float32), "bzr")
        wb_h, rb_h = e.const(wb[2 * H :].astype(np.float32), "wbh"), e.const(rb[2 * H :].astype(np.float32), "rbh")
        h = _initial(e, node, 5, d, batch, H, layout)
        one = e.const(np.float32(1), "one")
        steps = {}
        for t, x_t in _steps(e, node.input[0], layout, seq, direction == "reverse"):
            xw = e("MatMul", [x_t, w_t])
            zr = e("Add", [e("Add", [e.columns(xw, 0, 2 * H), e("MatMul", [h, r_zr])]), b_zr])
            z = e("Sigmoid", [e.clip(e.columns(zr, 0, H), clip)])
            r = e("Sigmoid", [e.clip(e.columns(zr, H, 2 * H), clip)])
            if before_reset:
                rec = e("Mul", [r, e("Add", [e("MatMul", [h, r_h]), rb_h])])
            else:
                rec = e("Add", [e("MatMul", [e("Mul", [r, h]), r_h]), rb_h])
            n = e("Tanh", [e.clip(e("Add", [e("Add", [e.columns(xw, 2 * H, 3 * H), wb_h]), rec]), clip)])
            h = e("Add", [e("Mul", [e("Sub", [one, z]), n]), e("Mul", [z, h])])
            steps[t] = h
        all_steps.append([steps[t] for t in range(seq)])
        last_h.append(h)
    _outputs(e, node, all_steps, last_h, layout, batch, H)
    return e.nodes


def register_converters() -> None:
    """Teach TVM's ONNX importer the fused recurrent nodes (idempotent)."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    from tvmgen.frontends import recurrent

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
