"""ONNX operators TVM 0.27's importer lacks, expanded into ones it has (``custom_ops`` registry).

``expand(model)`` rewrites every registered node, in the main graph and in the branches and
bodies of control flow (an ``If`` on a sample rate holding an LSTM), before the import. This module
holds that pass and what the expansions share (``Context``, the node builder ``_Emit``); the
expansions themselves live in ``onnx_ops_recurrent`` (RNN, GRU, LSTM), ``onnx_ops_nn`` and
``onnx_ops_attention``, which register them when imported.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from tvmgen.core.errors import ModelError
from tvmgen.frontends.custom_ops import ONNX

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


# ----------------------------------------------------------------------------- what the expansions share


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _input(node, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


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

    def act(self, activation, x: str, clip=None) -> str:
        """``activation`` (name, alpha, beta) of ``x``, clipped first where ``clip`` is set (ONNX clips
        the activations' inputs)."""
        name, alpha, beta = activation
        x = self.clip(x, clip)
        f32 = np.float32
        if name in ("relu", "tanh", "sigmoid", "softsign", "softplus"):
            return self({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}.get(name, name.title()), [x])
        if name == "affine":
            return self("Add", [self("Mul", [x, self.const(f32(alpha))]), self.const(f32(beta))])
        if name == "scaledtanh":
            return self("Mul", [self("Tanh", [self("Mul", [x, self.const(f32(beta))])]), self.const(f32(alpha))])
        if name == "hardsigmoid":
            return self("HardSigmoid", [x], alpha=float(alpha), beta=float(beta))
        op = {"leakyrelu": "LeakyRelu", "thresholdedrelu": "ThresholdedRelu", "elu": "Elu"}[name]
        return self(op, [x], alpha=float(alpha))
