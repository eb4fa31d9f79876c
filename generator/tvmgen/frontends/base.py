"""What every frontend returns, and the --input flag they all honour."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tvmgen.core.errors import InputError, ModelError
from tvmgen.core.model import DTYPES, ImportedModel, TensorSpec

INPUT_FLAG_EXAMPLE = "--input NAME:1x224x224x3:float32"


@dataclass(frozen=True)
class InputOverride:
    """One --input flag: NAME:SHAPE[:DTYPE], the shape as 1x224x224x3."""

    name: str
    shape: tuple[int, ...] | None
    dtype: str | None

    @classmethod
    def parse(cls, text: str) -> InputOverride:
        # Names may contain ':' (TensorFlow's "input:0"), so read from the right.
        parts = text.split(":")
        dtype = None
        if len(parts) >= 2 and parts[-1] in DTYPES:
            dtype = parts.pop()
        shape = None
        if len(parts) >= 2 and re.fullmatch(r"\d+(x\d+)*|scalar", parts[-1]):
            last = parts.pop()
            shape = () if last == "scalar" else tuple(int(d) for d in last.split("x"))
        name = ":".join(parts)
        if not name or (shape is None and dtype is None):
            raise InputError(
                f"cannot read --input {text!r}",
                f"write it as NAME:SHAPE[:DTYPE], e.g. {INPUT_FLAG_EXAMPLE} (dtypes: {', '.join(DTYPES)})",
            )
        if shape is not None and any(d <= 0 for d in shape):
            raise InputError(f"--input {text!r}: every dimension must be positive")
        return cls(name, shape, dtype)


def parse_consts(flags) -> dict[str, str]:
    """--const NAME=VALUE flags -> {name: value text}; the value is a number or a comma list."""
    consts = {}
    for text in flags or ():
        name, sep, value = text.rpartition("=")
        if not sep or not name or not value.strip():
            raise InputError(
                f"cannot read --const {text!r}",
                "write it as NAME=VALUE, e.g. --const sr=16000 or --const scale=0.5,0.5,0.5",
            )
        consts[name] = value
    return consts


def const_value(name: str, text: str, shape, dtype: str) -> np.ndarray:
    """The value of ``--const name=text`` for an input of ``shape`` and ``dtype``: one number fills
    the shape, a comma list gives every element in order."""
    try:
        values = [float(v) if dtype.startswith("float") else int(float(v)) for v in text.split(",")]
    except ValueError as e:
        raise InputError(
            f"--const {name}={text}: not a number or comma-separated numbers", "e.g. --const sample_rate=16000"
        ) from e
    dims = [int(d) if isinstance(d, (int, np.integer)) and d > 0 else None for d in shape]
    known = [d for d in dims if d is not None]
    if len(values) == 1 and len(known) == len(dims):
        return np.full(known, values[0], dtype=dtype)
    size = int(np.prod(known, dtype=np.int64)) if dims else 1
    if len(known) != len(dims) or len(values) != size:
        raise InputError(
            f"--const {name}: {len(values)} value(s) for an input of shape {_dims_text(shape)} ({size} elements)",
            "give one value to fill it, or one per element (and fix dynamic sizes with --input)",
        )
    return np.asarray(values, dtype=dtype).reshape(known)


def refuse_state_consts(consts, pairs: Sequence[tuple[str, str]]) -> None:
    """--const may not bind a state input (``pairs``: the model's state, (input, output) names): the runtime
    feeds it the value it holds, from one run to the next, and a constant would cut the state out of the model."""
    held = [f"{name_in} (next value from {name_out})" for name_in, name_out in pairs if name_in in consts]
    if held:
        raise InputError(
            f"--const names the state input{'s' if len(held) > 1 else ''} {', '.join(held)}: the runtime holds "
            "the state and feeds it to the model at every run, so it cannot be a constant",
            "leave it out of --const; the state starts at its initial value (the variable's initializer, or zeros) "
            "and an app can give it another with set_state (C++ SetState, Java setState)",
        )


def bind_inputs(imported: ImportedModel, consts: dict[str, str]) -> ImportedModel:
    """Relax-level --const for frontends that import first: the inputs become constants of
    ``main`` (folded at compile time), the reference gets their values."""
    import tvm
    from tvm import relax

    # a TFLite model's resource variables are state from the import on
    refuse_state_consts(consts, [(s.input, s.output) for s in imported.state])
    names = [s.name for s in imported.inputs]
    unknown = [n for n in consts if n not in names]
    if unknown:
        raise InputError(
            f"--const names {', '.join(map(repr, unknown))}, not among the model's inputs",
            f"the model's inputs are: {', '.join(names) or '(none)'}",
        )
    params = imported.mod["main"].params
    values = {
        s.name: const_value(s.name, consts[s.name], s.shape, s.dtype) for s in imported.inputs if s.name in consts
    }
    bindings = {params[names.index(n)]: tvm.runtime.tensor(v) for n, v in values.items()}
    imported.mod = relax.transform.BindParams("main", bindings)(imported.mod)
    imported.inputs = [s for s in imported.inputs if s.name not in consts]
    run = imported.reference
    imported.reference = lambda inputs: run({**inputs, **values})
    imported.constants = {n: v.tolist() for n, v in values.items()}
    return imported


LIFT_MIN_BYTES = 1024  # smaller constants (scalars, shapes, short vectors) stay in the graph, where they fold


def weights_as_params(imported: ImportedModel) -> ImportedModel:
    """--separate-params for every frontend: weights the importer left inside ``main`` as constants
    (TVM's TFLite and PyTorch importers do) become parameters after the existing ones, in the order
    they are met, so they go to model.params instead of into the library. A weight stored as fp16
    (TFLite's DEQUANTIZE, a half-precision export) stays fp16 there, and its cast to fp32 runs with
    the model instead of being folded into a constant twice the size."""
    import tvm
    from tvm import relax

    main = imported.mod["main"]
    lifted: list = []  # (constant, its parameter), in the order met; a constant used twice is lifted once

    @relax.expr_functor.mutator
    class Lift(relax.PyExprMutator):
        def visit_generic_const_(self, op):  # TVM 0.27's name for a Relax constant
            data = op.value
            if not hasattr(data, "shape") or not hasattr(data, "dtype"):
                return op
            dtype = str(data.dtype)
            bits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}.get(dtype)
            if bits is None or int(np.prod([int(d) for d in data.shape])) * bits // 8 < LIFT_MIN_BYTES:
                return op
            for const, var in lifted:
                if const.same_as(op):
                    return var
            var = relax.Var(f"weight_{len(lifted)}", op.ty)
            lifted.append((op, var))
            return var

    body = Lift(imported.mod).visit_expr(main.body)
    if not lifted:
        return imported
    func = relax.Function(
        list(main.params) + [v for _, v in lifted], body, main.ret_ty, main.is_pure, main.attrs, main.span
    )
    imported.mod = tvm.IRModule(
        {
            **{gv: f for gv, f in imported.mod.functions.items() if gv.name_hint != "main"},
            imported.mod.get_global_var("main"): func,
        },
        attrs=imported.mod.attrs,
    )
    imported.params = list(imported.params) + [c.value for c, _ in lifted]
    return imported


# A model's own view of an input: dimensions may be None or a symbol name when dynamic.
RawInput = tuple[str, Sequence[int | str | None], str]


def resolve_inputs(raw: Sequence[RawInput], overrides: Sequence[InputOverride]) -> list[TensorSpec]:
    """Apply --input overrides; every dimension must end up a known positive integer."""
    by_name = {o.name: o for o in overrides}
    known = [r[0] for r in raw]
    unknown = [n for n in by_name if n not in known]
    if unknown:
        raise InputError(
            f"--input names {', '.join(map(repr, unknown))} not among the model's inputs",
            f"the model's inputs are: {', '.join(known) or '(none)'}",
        )
    specs = []
    for name, dims, dtype in raw:
        o = by_name.get(name)
        shape = o.shape if o and o.shape is not None else tuple(dims)
        dtype = o.dtype if o and o.dtype else dtype
        if o and o.shape is not None and len(dims) and len(o.shape) != len(dims):
            raise InputError(
                f"--input {name}: the model's input has rank {len(dims)} "
                f"({_dims_text(dims)}), the flag gives rank {len(o.shape)}",
                "give one size per dimension",
            )
        if any(isinstance(d, (int, np.integer)) and d == 0 for d in shape):
            raise InputError(
                f"input {name!r} has an empty dimension ({'x'.join(str(d) for d in shape)}): tvmgen compiles "
                "for tensors with at least one element",
                f"give every dimension a size of at least 1 with --input {name}:SHAPE",
            )
        sizes = [int(d) for d in shape if isinstance(d, (int, np.integer)) and d > 0]
        if len(sizes) != len(shape):  # dimensions left dynamic
            raise InputError(
                f"input {name!r} has dynamic dimensions ({_dims_text(shape)}); TVM needs fixed shapes for a phone build",
                f"set them with --input {name}:{'x'.join(str(d) if isinstance(d, int) and d > 0 else 'N' for d in shape)}:{dtype}"
                " (N = the size you will run with)",
            )
        if dtype not in DTYPES:
            raise InputError(
                f"input {name!r} has dtype {dtype}, which tvmgen does not handle",
                f"supported dtypes: {', '.join(DTYPES)}",
            )
        specs.append(TensorSpec(name, tuple(sizes), dtype))
    return specs


def _dims_text(dims) -> str:
    return "x".join(str(d) if isinstance(d, (int, np.integer)) and d > 0 else "?" for d in dims) or "scalar"


def importer_failed(importer: str, source, e: Exception, hint: str) -> ModelError:
    """The error for TVM's ``importer`` failing on ``source`` with ``e``: its type and the last line
    of its message (TVM's errors end with the useful line; tracebacks come before it)."""
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return ModelError(
        f"TVM's {importer} importer failed on {source}: {type(e).__name__}: {lines[-1] if lines else ''}", hint
    )


def failing_locals(e: Exception, function: str) -> dict:
    """The local variables of the innermost frame of ``function`` in ``e``'s traceback: what an importer's
    node loop was converting when it raised (its ``node``, ...); {} when the loop is not in the traceback."""
    tb, found = e.__traceback__, {}
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function:
            found = tb.tb_frame.f_locals
        tb = tb.tb_next
    return found
