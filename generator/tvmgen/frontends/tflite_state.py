"""TFLite resource variables as explicit state.

A streaming model keeps its state in resource variables: ``VAR_HANDLE`` names a variable (its
container and shared name), ``READ_VARIABLE`` reads its value, ``ASSIGN_VARIABLE`` writes it, and a
``CALL_ONCE`` init subgraph assigns the initial value the first time the interpreter runs. LiteRT
keeps the values between ``invoke()`` calls. A compiled function holds nothing between calls, so the
model is rewritten, before anything else reads it, into a function of its state (``explicit_state``):

- each variable becomes one more model input (``state:<shared name>``, after the model's own inputs)
  and one more output (its value after the run, after the model's own outputs);
- the operators run in order, as LiteRT runs them: a ``READ_VARIABLE`` before any assignment in the
  run reads the state input (the first one's output tensor becomes that input); one after an
  ``ASSIGN_VARIABLE`` reads the value last assigned; the state output is the value last assigned, or
  the state input itself when the run assigns none;
- the variable operators, and a ``CALL_ONCE`` whose init subgraph only assigns variables, are removed;
  the initial value is the constant that init subgraph assigns (zeros when none does).

Values move as they are stored, raw: a quantised variable stays 8-bit and carries its integers from
one run to the next exactly as LiteRT does (it never requantises a variable). The rewritten model
is an ordinary TFLite model, so folding, TVM's importer, the second route and a functional LiteRT
reference all take it as they take any other; ``reference_sequence`` runs LiteRT on the original
model, which keeps its own variables, step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tvmgen.core.errors import ModelError

_VARIABLE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})
_FIX = "export the model with the state as explicit inputs and outputs, or with its variables kept in the main graph"


@dataclass
class Variable:
    name: str  # the shared name (container/shared name when there is a container)
    shape: tuple[int, ...]
    dtype: str
    initial: np.ndarray | None  # None: zeros

    @property
    def input_name(self) -> str:
        return f"state:{self.name}"

    @property
    def output_name(self) -> str:
        return f"next_state:{self.name}"


@dataclass
class ExplicitState:
    """The model with its variables as inputs and outputs, and what the rewrite did."""

    model_bytes: bytes
    variables: list[Variable]
    removed_ops: list[int]  # operator indices (of the original subgraph 0) removed
    notes: list[str] = field(default_factory=list)


def explicit_state(buf: bytes) -> ExplicitState | None:
    """``buf`` (a TFLite model) with its resource variables as explicit state; None when it has none."""
    from ai_edge_litert import schema_py_generated as fb

    from tvmgen.frontends.tflite_constants import TENSOR_TYPES
    from tvmgen.frontends.tflite_fold import pack, unpack

    flat = fb.Model.GetRootAsModel(buf, 0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    codes = [
        names.get(max(flat.OperatorCodes(i).BuiltinCode(), flat.OperatorCodes(i).DeprecatedBuiltinCode()), "?")
        for i in range(flat.OperatorCodesLength())
    ]
    if "VAR_HANDLE" not in codes:
        return None
    model = unpack(buf)
    sub = model.subgraphs[0]

    def op_name(op) -> str:
        return codes[op.opcodeIndex]

    # CALL_ONCE init subgraphs: the constants they assign are the initial values; one that only assigns
    # variables goes with them (one doing more, such as filling a hash table, stays for TVM's importer)
    initial: dict[tuple[str, str], tuple[str, np.ndarray]] = {}
    init_only, inits = set(), set()
    for op in sub.operators:
        if op_name(op) == "CALL_ONCE":
            index = op.builtinOptions.initSubgraphIndex
            inits.add(index)
            initial.update(_initial_values(model, model.subgraphs[index], op_name))
            if all(op_name(o) in _VARIABLE_OPS for o in model.subgraphs[index].operators or []):
                init_only.add(index)
    for index, s in enumerate(model.subgraphs[1:], 1):
        used = {op_name(o) for o in s.operators or []} & {"READ_VARIABLE", "ASSIGN_VARIABLE"}
        if used and (index not in inits or "READ_VARIABLE" in used):
            raise ModelError(
                f"the model uses resource variables ({', '.join(sorted(used))}) inside subgraph {index} "
                f"('{_text(s.name)}'), a control-flow body; tvmgen makes the variables of the main graph "
                "explicit state, not those of WHILE/IF/CALL bodies",
                _FIX,
            )

    handles: dict[int, tuple[str, str]] = {}  # resource tensor -> (container, shared name)
    current: dict[tuple[str, str], int] = {}  # the tensor holding each variable's value at this point of the run
    first_read: dict[tuple[str, str], int] = {}
    written_first: list[tuple[str, str]] = []
    substitute: dict[int, int] = {}  # a READ_VARIABLE's output -> the tensor it reads
    kept, removed = [], []
    for i, op in enumerate(sub.operators):
        name = op_name(op)
        ins = [substitute.get(int(t), int(t)) for t in (op.inputs if op.inputs is not None else [])]
        outs = [int(t) for t in (op.outputs if op.outputs is not None else [])]
        if name == "VAR_HANDLE":
            handles[outs[0]] = _key(op, sub.tensors[outs[0]])
        elif name == "READ_VARIABLE":
            key = _handle(handles, ins[0], sub)
            if key in current:
                _same_tensor_type(sub, outs[0], current[key], key)
                substitute[outs[0]] = current[key]
            else:
                first_read[key] = current[key] = outs[0]
        elif name == "ASSIGN_VARIABLE":
            key = _handle(handles, ins[0], sub)
            if key not in current:
                written_first.append(key)
            current[key] = ins[1]
        elif name == "CALL_ONCE" and op.builtinOptions.initSubgraphIndex in init_only:
            pass
        else:
            resources = [t for t in ins if t in handles]
            if resources:
                raise ModelError(
                    f"operator #{i} {name} takes the resource variable '{_text(sub.tensors[resources[0]].name)}' "
                    "itself; tvmgen makes variables explicit state where only READ_VARIABLE and ASSIGN_VARIABLE use them",
                    _FIX,
                )
            op.inputs = ins
            kept.append(op)
            continue
        removed.append(i)
    sub.operators = kept
    sub.outputs = [substitute.get(int(t), int(t)) for t in sub.outputs]

    taken = {_text(t.name) for t in sub.tensors}
    variables, notes = [], []
    for key, tensor_index in first_read.items():
        tensor = sub.tensors[tensor_index]
        label = f"{key[0]}/{key[1]}" if key[0] else key[1]
        shape = tuple(int(d) for d in tensor.shape) if tensor.shape is not None else ()  # none: a scalar
        signature = [int(d) for d in tensor.shapeSignature] if tensor.shapeSignature is not None else list(shape)
        if any(d < 0 for d in signature):
            raise ModelError(f"resource variable '{label}' has no fixed shape ({_dims(signature)})", _FIX)
        dtype = TENSOR_TYPES.get(tensor.type, f"tflite-type-{tensor.type}")
        out = current[key]
        out_tensor = sub.tensors[out]
        out_shape = tuple(int(d) for d in out_tensor.shape) if out_tensor.shape is not None else ()
        if out_tensor.type != tensor.type or out_shape != shape:
            raise ModelError(
                f"resource variable '{label}' is read as {dtype} {_dims(shape)} but assigned "
                f"{TENSOR_TYPES.get(out_tensor.type, '?')} {_dims(out_shape)}; tvmgen carries state of one "
                "type and shape",
                _FIX,
            )
        value = None
        if key in initial:
            init_dtype, value = initial[key]
            if init_dtype != dtype or value.size != int(np.prod(shape, dtype=np.int64)):
                raise ModelError(
                    f"resource variable '{label}' is initialised with {init_dtype} {_dims(value.shape)} but "
                    f"read as {dtype} {_dims(shape)}",
                    _FIX,
                )
            value = value.reshape(shape)
        variable = Variable(label, shape, dtype, value)
        clash = {variable.input_name, variable.output_name} & taken
        if clash:
            raise ModelError(
                f"the model already has a tensor named '{clash.pop()}', the name of resource variable '{label}''s state",
                "rename that tensor in the model",
            )
        tensor.name = variable.input_name
        tensor.shapeSignature = None
        sub.inputs = [*sub.inputs, tensor_index]
        sub.outputs = [*sub.outputs, out]
        variables.append(variable)
        if value is None:
            notes.append(f"resource variable '{label}' has no initial value in the model: its state starts at zeros")
    for key in written_first:
        label = f"{key[0]}/{key[1]}" if key[0] else key[1]
        if key not in first_read:
            notes.append(
                f"resource variable '{label}' is assigned before it is read in every run: it carries nothing "
                "from one run to the next, so it is no state"
            )
    return ExplicitState(pack(model, len(buf)), variables, removed, notes)


def refuse_overrides(state: ExplicitState, overrides) -> None:
    """A state input keeps its variable's shape and type: --input cannot change them."""
    from tvmgen.core.errors import InputError

    for o in overrides:
        v = next((v for v in state.variables if v.input_name == o.name), None)
        if v is not None:
            raise InputError(
                f"--input {o.name}: '{o.name}' is the state of the model's resource variable '{v.name}' "
                f"({v.dtype} {_dims(v.shape)}), which keeps the variable's shape and type",
                f"leave '{o.name}' out of --input",
            )


def attach(imported, state: ExplicitState, functional, sequence) -> None:
    """Make ``imported`` (the rewritten model's import) the stateful model's: its state pairs, the state
    outputs named, and its references: ``functional`` runs the rewritten model (state in, state out),
    ``sequence`` the original file step by step (LiteRT keeping the variables)."""
    from tvmgen.core.model import StateSpec

    n = len(state.variables)
    own_outputs = list(imported.output_names[: len(imported.output_names) - n])
    pairs = [StateSpec(v.input_name, v.output_name, v.shape, v.dtype, v.initial) for v in state.variables]
    imported.state = pairs
    imported.output_names = own_outputs + [v.output_name for v in state.variables]
    imported.reference = lambda inputs: functional([inputs])[0]
    imported.reference_sequence = sequence
    names = ", ".join(f"'{v.name}' ({v.dtype} {_dims(v.shape)})" for v in state.variables)
    imported.notes.append(
        f"resource variable(s) {names} made explicit state: inputs {', '.join(s.input for s in pairs)}, "
        f"outputs {', '.join(s.output for s in pairs)}"
    )
    imported.notes.extend(state.notes)


def _initial_values(model, init, op_name) -> dict[tuple[str, str], tuple[str, np.ndarray]]:
    """The constants an init subgraph assigns: (container, shared name) -> (dtype, raw value)."""
    from tvmgen.frontends.tflite_constants import TENSOR_TYPES

    handles, values = {}, {}
    for op in init.operators or []:
        ins = [int(t) for t in (op.inputs if op.inputs is not None else [])]
        if op_name(op) == "VAR_HANDLE":
            out = int(op.outputs[0])
            handles[out] = _key(op, init.tensors[out])
        elif op_name(op) == "ASSIGN_VARIABLE":
            key = _handle(handles, ins[0], init)
            tensor = init.tensors[ins[1]]
            dtype = TENSOR_TYPES.get(tensor.type, f"tflite-type-{tensor.type}")
            data = model.buffers[tensor.buffer].data if tensor.buffer < len(model.buffers) else None
            label = f"{key[0]}/{key[1]}" if key[0] else key[1]
            if data is None or len(data) == 0 or dtype.startswith("tflite-type"):
                raise ModelError(
                    f"the initial value of resource variable '{label}' is not a constant of the model "
                    f"(tensor '{_text(tensor.name)}')",
                    "initialise the variable with a constant (tf.Variable(initial_value)); tvmgen reads "
                    "the value the CALL_ONCE init subgraph assigns",
                )
            shape = tuple(int(d) for d in tensor.shape) if tensor.shape is not None else ()
            values[key] = (dtype, np.frombuffer(np.asarray(data, np.uint8).tobytes(), dtype).reshape(shape).copy())
    return values


def _key(op, tensor) -> tuple[str, str]:
    """A variable's identity, as LiteRT resolves VAR_HANDLE: its container and shared name; the handle
    tensor's name when the options name neither."""
    options = op.builtinOptions
    container = _text(getattr(options, "container", None))
    shared = _text(getattr(options, "sharedName", None))
    return (container, shared) if container or shared else ("", _text(tensor.name))


def _handle(handles: dict, tensor: int, sub) -> tuple[str, str]:
    if tensor not in handles:
        raise ModelError(
            f"a variable operator reads the resource '{_text(sub.tensors[tensor].name)}', which no VAR_HANDLE "
            "before it in the same graph makes",
            _FIX,
        )
    return handles[tensor]


def _same_tensor_type(sub, read: int, source: int, key) -> None:
    """A READ_VARIABLE whose output becomes ``source`` must see the same values: same type, shape and
    quantisation (its consumers read the values with the tensor's scale and zero point)."""
    a, b = sub.tensors[read], sub.tensors[source]

    def quant(t):
        q = t.quantization
        if q is None or q.scale is None or len(q.scale) == 0:
            return None
        return (list(np.asarray(q.scale, np.float32)), list(np.asarray(q.zeroPoint, np.int64)))

    same_shape = list(a.shape if a.shape is not None else []) == list(b.shape if b.shape is not None else [])
    if a.type != b.type or not same_shape or quant(a) != quant(b):
        label = f"{key[0]}/{key[1]}" if key[0] else key[1]
        raise ModelError(
            f"resource variable '{label}' is read as '{_text(a.name)}' with another type, shape or quantisation "
            f"than the value '{_text(b.name)}' assigned to it before in the same run",
            _FIX,
        )


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes | bytearray) else str(value)


def _dims(shape) -> str:
    return "x".join(str(int(d)) for d in shape) or "scalar"
