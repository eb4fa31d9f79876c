"""The state a streaming artifact's runtime holds between runs (the manifest's ``state`` list).

Each pair names an input of main, which the runtime feeds with the value it holds, and an output, whose
value it holds after the run: on a GPU the output's device tensor is kept as it is, with no copy through
the host. Callers give and get only the model's own inputs and outputs.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from tvmgen.core import artifact
from tvmgen.core.errors import InputError


def initial_values(manifest: artifact.Manifest, directory: Path) -> list[np.ndarray]:
    """Each state's initial value: its .npy file in the artifact, else zeros."""
    values = []
    for s in manifest.state:
        if s["initial"] is None:
            values.append(np.zeros(s["shape"], s["dtype"]))
            continue
        path = Path(directory) / s["initial"]
        try:
            value = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(
                f"cannot read {path}, the initial value of state {s['input']} ({e})", "compile again"
            ) from e
        if list(value.shape) != list(s["shape"]) or str(value.dtype) != s["dtype"]:
            raise InputError(
                f"{path} is {value.dtype}{list(value.shape)}, state {s['input']} is {s['dtype']}{s['shape']}",
                "compile the model again",
            )
        values.append(value)
    return values


class HeldState:
    """The values of a manifest's state pairs on the device ``dev``, fed to main and replaced by its outputs."""

    def __init__(self, manifest: artifact.Manifest, directory: Path, dev):
        self.specs = manifest.state
        self.names = [s["input"] for s in self.specs]
        self.dev = dev
        positions = {s.name: i for i, s in enumerate(manifest.inputs)}
        # (position in main's inputs, state index), ascending: inserted in this order they land where main takes them
        self._inserts = sorted((positions[s["input"]], j) for j, s in enumerate(self.specs))
        out_positions = {s.name: i for i, s in enumerate(manifest.outputs)}
        self._from = [out_positions[s["output"]] for s in self.specs]
        held = set(self._from)
        self._own_outputs = [i for i in range(len(manifest.outputs)) if i not in held]
        self._initial = initial_values(manifest, directory)
        self.tensors: list = []
        self._buffers: list = []  # the held values' fixed tensors once pinned (direct calls)
        self._kept_for = None  # the result keep last worked out, and its copies
        self._copies: list = []
        self.reset()

    def reset(self) -> None:
        """Back to the initial values."""
        import tvm

        self.tensors = [tvm.runtime.tensor(v, self.dev) for v in self._initial]

    def arguments(self, own: list) -> list:
        """main's inputs: the caller's tensors ``own`` (in the model's order), the held values where main takes them."""
        args = list(own)
        for position, j in self._inserts:
            args.insert(position, self.tensors[j])
        return args

    def pin(self) -> None:
        """Hold the values in fixed buffers from now on, as direct calls need (their recorded calls read the held
        values from the same tensors every run): the tensors held now. Nothing changes if already pinned."""
        if not self._buffers:
            self._buffers = list(self.tensors)

    def in_buffers(self) -> bool:
        """Whether the held values are the pinned buffers themselves (``pin``): ``pinned_arguments`` then
        copies nothing. (The list comparison takes identical tensors as equal without looking further.)"""
        return self.tensors == self._buffers

    def pinned_arguments(self, own: list) -> list:
        """``arguments`` with the held values in the pinned buffers: a value that ``set`` or ``reset`` gave
        since the last run is copied into its buffer."""
        for j, buffer in enumerate(self._buffers):
            t = self.tensors[j]
            if t is not buffer:
                t.copyto(buffer)
                self.tensors[j] = buffer
        return self.arguments(own)

    def own_outputs(self, result) -> list:
        """The model's own outputs of main's ``result``."""
        outs = [result] if hasattr(result, "numpy") else list(result)
        return [outs[i] for i in self._own_outputs]

    def keep(self, result, copied: bool = False) -> None:
        """Copy the state outputs of main's ``result`` into the pinned buffers (see ``pin``): the held values
        of the next run. A state output that is its buffer (the state passed through) needs no copy. Direct
        calls return the same result every run: its copies are worked out once (``copies``). ``copied``: the
        run made them already (``DirectCalls.append_copies``)."""
        if copied:
            self.tensors = list(self._buffers)
            return
        if result is not self._kept_for:
            self._kept_for, self._copies = result, self.copies(result)
        for copy in self._copies:
            copy()
        self.tensors = list(self._buffers)

    def copy_pairs(self, result) -> list:
        """(state output, its pinned buffer) for each state output of ``result`` that is not its buffer."""
        outs = [result] if hasattr(result, "numpy") else list(result)
        return [(outs[i], b) for i, b in zip(self._from, self._buffers) if not outs[i].same_as(b)]

    def copies(self, result) -> list:
        """A function per state output of ``result`` that is not its buffer, copying it there: through numpy
        views made once (a plain memcpy), or TVM's copy where numpy cannot view the dtype."""
        outs = [result] if hasattr(result, "numpy") else list(result)
        made = []
        for i, buffer in zip(self._from, self._buffers):
            new = outs[i]
            if new.same_as(buffer):  # (the VM's result is another Python object of the same tensor)
                continue
            src, dst = numpy_view(new), numpy_view(buffer)
            if src is not None and dst is not None:
                made.append(functools.partial(np.copyto, dst, src))
            else:
                made.append(functools.partial(new.copyto, buffer))
        return made

    def take(self, result) -> list:
        """Keep the state outputs of main's ``result`` as the held values; return the model's own outputs."""
        outs = [result] if hasattr(result, "numpy") else list(result)
        self.tensors = [outs[i] for i in self._from]
        return [outs[i] for i in self._own_outputs]

    def index(self, key: str | int) -> int:
        """A state by its input's name or its index in the manifest's list."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if 0 <= key < len(self.specs):
                return int(key)
        elif key in self.names:
            return self.names.index(key)
        raise InputError(
            f"{key!r} is not a state of this model",
            f"its state (by input name or index 0..{len(self.specs) - 1}): {', '.join(self.names) or 'none'}",
        )

    def get(self, key: str | int) -> np.ndarray:
        """A copy of a held value, on the host."""
        return self.tensors[self.index(key)].numpy()

    def set(self, key: str | int, value) -> None:
        """Hold ``value`` (copied to the device) for the state ``key`` from the next run on."""
        import tvm

        j = self.index(key)
        spec = self.specs[j]
        a = np.asarray(value)
        if list(a.shape) != list(spec["shape"]) or str(a.dtype) != spec["dtype"]:
            raise InputError(
                f"state {spec['input']!r} is {spec['dtype']}{list(spec['shape'])}, the value given "
                f"{a.dtype}{list(a.shape)}",
                f"give an array of that shape and dtype, e.g. one get_state({spec['input']!r}) returned",
            )
        self.tensors[j] = tvm.runtime.tensor(np.ascontiguousarray(a), self.dev)

    def state_input_error(self, names) -> InputError:
        """The error for a state input given as an ordinary input."""
        return InputError(
            f"{', '.join(names)} {'is a state input' if len(names) == 1 else 'are state inputs'}: the runtime "
            "holds the state and feeds it to the model itself",
            "leave it out of the inputs; to give it a value, use set_state (reset_state: back to the initial value)",
        )


def numpy_view(tensor) -> np.ndarray | None:
    """A numpy array on a CPU tensor's memory (DLPack), or None where numpy cannot take it."""
    try:
        return np.from_dlpack(tensor)
    except Exception:
        return None
