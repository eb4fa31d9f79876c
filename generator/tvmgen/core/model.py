"""The types every stage shares: a tensor's spec and an imported model (what a frontend returns,
what the compiler builds, what the runtime checks inputs against)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DTYPES = (
    "float32",
    "float16",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict) -> TensorSpec:
        return cls(d["name"], tuple(int(x) for x in d["shape"]), d["dtype"])

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.name}:{'x'.join(map(str, self.shape)) or 'scalar'}:{self.dtype}"


@dataclass(frozen=True)
class StateSpec:
    """A tensor a streaming model carries from one run to the next: the compiled function reads it as
    the input ``input`` and returns its next value as the output ``output`` (same shape and dtype).
    The runtime holds it between runs, starting from ``initial`` (zeros when None)."""

    input: str
    output: str
    shape: tuple[int, ...]
    dtype: str
    initial: np.ndarray | None = None

    def to_json(self) -> dict:
        return {"input": self.input, "output": self.output, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class ImportedModel:
    """A model in TVM's hands: the Relax module and what the artifact needs to say about it.

    ``mod["main"]`` takes the inputs first, then the weights in ``params`` order.
    """

    mod: Any  # tvm.IRModule (TVM ships no type information)
    params: list  # tvm.runtime.Tensor weights, detached from the graph
    inputs: list[TensorSpec]
    output_names: list[str]
    format: str
    reference_name: str
    # Runs the same model in its reference runtime: inputs by name -> outputs in order.
    reference: Callable[[dict[str, np.ndarray]], list[np.ndarray]] = field(repr=False)
    notes: list[str] = field(default_factory=list)
    # (operator kind, node name) of the model's operators, for errors that name the node
    nodes: list[tuple[str, str]] = field(default_factory=list)
    # inputs bound at compile time by --const: name -> value (nested lists)
    constants: dict = field(default_factory=dict)
    # Streaming state: each pair names one of ``inputs`` and one of ``output_names``. Empty: stateless.
    state: list[StateSpec] = field(default_factory=list)
    # A stateful model's reference run over a sequence from its initial state: each step's non-state
    # inputs by name -> each step's non-state outputs in order. None: thread ``reference`` through
    # the state pairs (a functional reference, as onnxruntime's is).
    reference_sequence: Callable[[list[dict[str, np.ndarray]]], list[list[np.ndarray]]] | None = field(
        default=None, repr=False
    )


def random_inputs(specs: Sequence[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for checks: normal floats, small non-negative integers."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        if s.dtype.startswith("float"):
            out[s.name] = rng.standard_normal(s.shape).astype(s.dtype)
        elif s.dtype == "bool":
            out[s.name] = rng.integers(0, 2, s.shape).astype(bool)
        else:
            out[s.name] = rng.integers(0, 10, s.shape).astype(s.dtype)
    return out


PSEUDO_RANDOM_FIRST_SEED = 42  # input k gets seed 42 + k


def pseudo_random(shape: Sequence[int], dtype: str, seed: int) -> np.ndarray:
    """The inputs tvmgen-run, the Java API's RunModel and the deploy app make (org.tvmgen.PseudoRandom): a
    32-bit LCG (s = s * 1664525 + 1013904223) mapped to [-1, 1) for float32, zeros for other types; so the
    host can run its reference on exactly the input the phone ran."""
    n = int(np.prod(shape, dtype=np.int64))
    if dtype != "float32":
        return np.zeros(shape, dtype)
    # s_i = a^i s_0 + c (1 + a + ... + a^(i-1)) mod 2^32, i = 1..n; uint64 arithmetic wraps mod 2^64, a multiple of 2^32
    powers = np.cumprod(np.full(n, 1664525, np.uint64), dtype=np.uint64)  # a^1 .. a^n
    sums = np.cumsum(np.concatenate([[np.uint64(1)], powers[:-1]]), dtype=np.uint64)  # 1 + a + ... + a^(i-1)
    states = (powers * np.uint64(seed & 0xFFFFFFFF) + sums * np.uint64(1013904223)) & np.uint64(0xFFFFFFFF)
    return ((states >> np.uint64(8)).astype(np.float64) / 2**23 - 1.0).astype(np.float32).reshape(shape)


def output_specs(mod, names: list[str]) -> list[TensorSpec]:
    """Output shapes and dtypes from main's return type, named after the model's outputs."""
    from tvm import relax

    from tvmgen.core.errors import CompileError

    ret = mod["main"].ret_ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    specs = []
    for i, f in enumerate(fields):
        if not isinstance(f, relax.TensorType) or f.shape is None:
            raise CompileError(
                f"output {i} of the model is not a tensor of known shape ({f})",
                "tvmgen handles models whose outputs are tensors with fixed shapes",
            )
        shape = tuple(int(d) for d in f.shape.values)
        name = names[i] if i < len(names) else f"output_{i}"
        specs.append(TensorSpec(name, shape, str(f.dtype)))
    return specs
