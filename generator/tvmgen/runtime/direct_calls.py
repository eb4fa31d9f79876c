"""Direct calls for ``HostModel``: a model's ``main`` run as the fixed list of its kernel calls.

The Relax VM interprets ``main``'s bytecode on every run and allocates every intermediate again. For a model
of a few microseconds that is most of a call from Python (a 1x16 add+relu: 1.6 us in the VM around a 0.05 us
kernel). When ``main`` is one straight line of calls, each either a kernel of the model library or a builtin
whose result depends only on shapes and on which buffers exist, the calls are the same on every run. The
first run goes through the model's VM with an instrument that keeps each kernel call and its arguments;
later runs make those kernel calls only, with the caller's input tensors put where the recorded ones were.
The C++ runtime does the same (``jni/src/direct_calls.h``, docs/runtime.md#direct-calls); this is
the Python runtime's own, through the same public interfaces (the executable's ``as_text`` and the VM's
``set_instrument``).
"""

from __future__ import annotations

from typing import Any

# Builtins whose results depend on shapes and on which buffers exist, never on the tensors' values: they run
# once, while the calls are recorded.
RUNS_ONCE = frozenset(
    {
        "vm.builtin.check_tensor_info",
        "vm.builtin.check_shape_info",
        "vm.builtin.check_prim_value_info",
        "vm.builtin.check_tuple_info",
        "vm.builtin.match_shape",
        "vm.builtin.alloc_storage",
        "vm.builtin.alloc_tensor",
        "vm.builtin.null_value",
        "vm.builtin.make_tuple",
        "vm.builtin.reshape",
    }
)
# Of those, the ones that only look at a tensor: an input passed to them can be another tensor next run.
# An input given to any other builtin (a reshape's view of it, a tuple holding it) must stay the same tensor.
_ONLY_LOOK = frozenset({"vm.builtin.check_tensor_info", "vm.builtin.match_shape"})


def read_calls(text: str, entry: str) -> tuple[list[str], str]:
    """What ``entry`` calls in the executable's text (``as_text``), in order, and ``""``; or ``[]`` and why
    ``entry`` is not one straight line of calls of packed functions."""
    calls: list[str] = []
    packed: set[str] = set()  # "@NAME packed_func;": the functions that are not the VM's own
    in_entry = found = returned = False
    for line in text.splitlines():
        if line.startswith("@"):
            in_entry = line == f"@{entry}:"
            found = found or in_entry
            if line.endswith(" packed_func;"):
                packed.add(line[1 : -len(" packed_func;")])
            continue
        words = line.split()
        if not in_entry or not words:
            continue
        if words[0] == "call" and len(words) > 1:
            calls.append(words[1])
        elif words[0] == "ret":
            returned = True
        else:
            return [], f"{entry} branches ({words[0]}): its calls can differ from run to run"
    if not found or not returned:
        return [], f"the executable's text has no function {entry} ending in ret"
    for name in calls:
        if name not in packed:
            return [], f"{entry} calls {name}, a function of the VM itself"
    return calls, ""


# TVMFFIAny type indices (tvm/ffi/c_api.h): how tvmgen_replay passes each recorded argument, as tvm-ffi does
_INT, _BOOL, _FLOAT, _TENSOR = 1, 2, 3, 70


def _handle(value) -> int | None:
    """The address of a TVM object (two Python wrappers of one tensor share it), else None."""
    chandle = getattr(value, "__chandle__", None)
    return chandle() if chandle is not None else None


class DirectCalls:
    """``main``'s kernel calls, recorded once and replayed (see the module's doc).

    ``why_not`` is ``""`` when ``entry`` of ``lib`` can run as direct calls, else the reason; nothing runs until
    ``record``.
    """

    def __init__(self, lib, entry: str, library=None):
        """``library``: the path of the shared library ``lib`` was loaded from, whose ``tvmgen_replay`` makes
        the recorded calls in one call (``native``)."""
        self.entry = entry
        self._lib, self._library = lib, library
        self._native: tuple | None = None  # (tvmgen_replay, the arrays it reads) once recorded, see _native_plan
        self._entries: list[int] = []  # each native call's entry point, and its argument count
        self._counts: list[int] = []
        self._kept: list = []  # tensors the native calls take that no recorded call holds (append_copies)
        self._native_slots: list = []  # per input: where its tensor's handle goes in the packed arguments
        # per output: (its places in the packed arguments, the recorded tensor's handle), ([], None) where another
        # tensor cannot take its place (see call_native_into)
        self._output_slots: list = []
        self._packed: Any = None  # the packed arguments (numpy, two int64 a TVMFFIAny)
        self._native_args: tuple = ()  # tvmgen_replay's four integers (addresses of the arrays it reads, a count)
        self._copy_entry: int | None = None  # the library's tvmgen_copy
        self.copies_state = False  # the replay ends copying a streaming model's new state (append_copies)
        # how a replay makes its calls: "one native call" (tvmgen_replay), else "python: " and why
        self.replayed_by = "python: not recorded yet"
        self.kernels: dict = {}  # the library's kernels main calls, by name
        self.why_not = self._prepare(lib, entry)
        self._calls: list = []  # [function, its argument list] in order
        self._slots: list = []  # per input: the (argument list, index) pairs where it goes
        self._current: list = []
        self.serial = 0  # counts the times the recorded arguments took other input tensors
        self._result = None
        self.recorded = False
        self.fixed_inputs = False  # the inputs must be the recorded tensors (copied into, not replaced)

    def _prepare(self, lib, entry: str) -> str:
        try:
            as_text = lib.get_function("as_text")
        except AttributeError:
            return "the library has no VM executable whose bytecode can be read (as_text)"
        calls, why_not = read_calls(str(as_text()), entry)
        if why_not:
            return why_not
        for name in calls:
            if name in RUNS_ONCE or name in self.kernels:
                continue
            # A kernel is the library's own function. A function of the runtime's registry may depend on more
            # than its arguments (a random number, a clock, a copy made on the fly): the VM keeps those.
            kernel = None
            if not name.startswith("vm.builtin."):
                try:
                    kernel = lib.get_function(name, query_imports=True)
                except AttributeError:
                    kernel = None
            if kernel is None:
                return f"{entry} calls {name}, a runtime function that has to run on every call"
            self.kernels[name] = kernel
        return ""

    def record(self, recorder, inputs: list, params: list):
        """The first run, on ``recorder`` (the model's VM, its instrument set for this run): ``main`` with
        ``inputs`` and ``params``, each kernel call kept with its arguments. Returns ``(result, why_not)``: what
        ``main`` returned, and ``""`` when the calls can be replayed, else why not (the result is still
        that run's).

        An input that a builtin keeps (a view of it, a tuple holding it) or that main returns must be the same
        tensor on every run, which later runs copy into. When ``fixed_inputs`` was False (``inputs`` may be the
        caller's arrays) and that is found, nothing is kept: ``fixed_inputs`` becomes True and the next run
        records again, on the model's own tensors."""
        calls: list = []
        refused: list[str] = []
        looked_at = {_handle(t) for t in inputs}
        held: set = set()  # inputs given to a builtin that keeps them (a view, a tuple)
        viewed: set = set()  # any tensor given to a builtin that makes a view of it or of its storage
        allocated: set = set()  # the tensors this run allocated (alloc_tensor), not a constant, a parameter, an input
        names: list[str] = []  # each call's kernel

        def keep(func, name, before_run, ret_value, *args):
            if not before_run:
                if str(name) == "vm.builtin.alloc_tensor":
                    allocated.add(_handle(ret_value))
                return 0
            name = str(name)
            if name in RUNS_ONCE:
                if name not in _ONLY_LOOK:
                    held.update(h for h in map(_handle, args) if h in looked_at)
                    if name != "vm.builtin.make_tuple":  # (a tuple of the outputs is main's result, not a view)
                        viewed.update(h for h in map(_handle, args) if h is not None)
                return 0
            kernel = self.kernels.get(name)
            if kernel is None:
                refused.append(f"{self.entry} called {name}, which its bytecode did not show")
            elif any(isinstance(a, str) for a in args):  # the instrument sees a dtype argument as its name
                refused.append(f"the kernel {name} takes a string or dtype argument")
            calls.append([kernel, list(args)])
            names.append(name)
            return 0

        recorder.set_instrument(keep)
        try:
            result = recorder[self.entry](*inputs, *params)
        finally:
            recorder.set_instrument(None)  # the VM runs as before for anything else (a profile)
        if refused:
            return result, refused[0]
        outs = [result] if hasattr(result, "numpy") else list(result)
        returned = {_handle(t) for t in outs}
        if (held or any(_handle(t) in returned for t in inputs)) and not self.fixed_inputs:
            self.fixed_inputs = True
            return result, ""
        self._slots = []
        for t in inputs:
            h = _handle(t)
            self._slots.append(
                [(args, j) for _, args in calls for j, a in enumerate(args) if _handle(a) == h]
                if not self.fixed_inputs
                else []
            )
        self._current = list(inputs)  # the input tensors the recorded arguments hold
        self.serial += 1
        self._calls, self._result, self.recorded = calls, result, True
        # outputs allocated by this run and not viewed: another tensor can take their place where kernels write
        # them (a constant or an input main returns may be read by kernels too: it keeps its tensor)
        replaceable = [h if h in allocated and h not in viewed else None for h in map(_handle, outs)]
        self.replayed_by = self._native_plan(names, inputs, replaceable)
        return result, ""

    def _native_plan(self, names: list[str], inputs: list, replaceable: list) -> str:
        """Set up the recorded calls to be made in one call of the library's ``tvmgen_replay``
        (jni/src/parallel/parallel_pool.cc): from Python each kernel call through tvm-ffi costs about 0.4 us,
        most of a model of a few microseconds. ``replaceable``: per output, its handle where another tensor may
        take its place (``call_native_into``), else None. Returns ``replayed_by``: "one native call", or "python: " and why
        the calls stay Python's (a library compiled by an older tvmgen, an argument no kernel entry takes
        as a plain value)."""
        import ctypes
        import os
        import struct

        import tvm_ffi

        if self._library is None:
            return "python: the model library's path is unknown"
        try:
            replay = self._lib.get_function("tvmgen_replay", query_imports=True)
            so = ctypes.CDLL(str(self._library), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            entries = [int(ctypes.cast(so["__tvm_ffi_" + n], ctypes.c_void_p).value or 0) for n in names]
        except (AttributeError, OSError):
            return "python: the model library has no tvmgen_replay (compiled by an older tvmgen)"
        packed: list[tuple[int, int]] = []
        flat_of: dict[int, list[int]] = {}  # an input's or output's handle -> its places in ``packed``
        looked_for = {_handle(t) for t in inputs} | {h for h in replaceable if h is not None}
        for (_, args), name in zip(self._calls, names):
            for a in args:
                h = _handle(a)
                if h is not None and isinstance(a, tvm_ffi.Tensor):
                    if h in looked_for:
                        flat_of.setdefault(h, []).append(len(packed))
                    packed.append((_TENSOR, h))
                elif isinstance(a, bool):
                    packed.append((_BOOL, int(a)))
                elif isinstance(a, int):
                    packed.append((_INT, a))
                elif isinstance(a, float):
                    packed.append((_FLOAT, struct.unpack("<q", struct.pack("<d", a))[0]))
                else:
                    return f"python: the kernel {name} takes a {type(a).__name__}, not a tensor or a number"
        self._native_slots = [flat_of.get(_handle(t) or 0, []) for t in inputs]
        self._output_slots = [([], None) if h is None else (flat_of.get(h, []), h) for h in replaceable]
        self._set_native(replay, entries, packed, [len(args) for _, args in self._calls])
        try:
            self._copy_entry = ctypes.cast(so["__tvm_ffi_tvmgen_copy"], ctypes.c_void_p).value
        except AttributeError:  # a library from before tvmgen_copy: the state copied from Python (HeldState.keep)
            self._copy_entry = None
        return "one native call"

    def _set_native(self, replay, entries: list[int], packed: list[tuple[int, int]], counts: list[int]) -> None:
        import numpy as np

        self._entries, self._counts = entries, counts
        self._packed = np.array(packed or [(0, 0)], dtype=np.int64)
        kernels, sizes = np.array(entries, dtype=np.uint64), np.array(counts, dtype=np.int32)
        self._native = (replay, kernels, sizes)  # the arrays kept alive with the addresses taken of them
        self._native_args = (kernels.ctypes.data, self._packed.ctypes.data, sizes.ctypes.data, len(entries))

    def append_copies(self, pairs: list) -> bool:
        """Make each ``(source, destination)`` tensor copy (host memory, the same size) after the recorded calls,
        in the same native call: a streaming model's new state into the buffers the next run reads it from
        (``HeldState.keep``'s copies, about 0.3 us each from Python). False, and nothing changes, where the calls
        are not made natively."""
        if self._native is None or self._copy_entry is None:
            return False
        if not pairs:
            return True
        # the arguments as they stand (an input's tensor may have been put in since), without the empty placeholder
        packed = [(int(a), int(b)) for a, b in self._packed[: sum(self._counts)]]
        entries, counts = list(self._entries), list(self._counts)
        for src, dst in pairs:
            self._kept += [src, dst]
            entries.append(self._copy_entry)
            packed += [(_TENSOR, _handle(src) or 0), (_TENSOR, _handle(dst) or 0)]
            counts.append(2)
        self._set_native(self._native[0], entries, packed, counts)
        return True

    def call_native(self) -> None:
        """The recorded calls in one native call, on the input tensors the arguments hold now (``replay``'s
        last, see ``serial``); only where ``replayed_by`` is "one native call"."""
        assert self._native is not None
        self._native[0](*self._native_args)

    def output_replaceable(self, k: int) -> bool:
        """Whether ``call_native_into`` can write output ``k`` into another tensor: a kernel writes it as it is
        (allocated by the run, not a view), and the calls are made natively."""
        return self._native is not None and k < len(self._output_slots) and bool(self._output_slots[k][0])

    def call_native_into(self, targets: list) -> None:
        """``call_native`` with output ``k`` written into ``targets[k]`` (a tensor of its shape and dtype, 64-byte
        aligned as the kernels assume; None: the recorded tensor) instead of the recorded tensor, which is put back
        after the call: every other path still finds the recorded arguments."""
        packed, slots = self._packed, self._output_slots
        for k, t in enumerate(targets):
            if t is not None:
                h = _handle(t)
                for i in slots[k][0]:
                    packed[i, 1] = h
        try:
            self._native[0](*self._native_args)  # type: ignore[index]
        finally:
            for k, t in enumerate(targets):
                if t is not None:
                    for i in slots[k][0]:
                        packed[i, 1] = slots[k][1]

    def replay(self, inputs: list):
        """A later run: the recorded kernel calls, in order, on ``inputs`` (the recorded tensors themselves when
        ``fixed_inputs``). Returns the recorded result's tensors, which hold this run's outputs."""
        current = self._current
        for k, tensor in enumerate(inputs):
            if tensor is not current[k]:  # another input tensor than the last run's: put where the last was
                self.serial += 1
                for args, j in self._slots[k]:
                    args[j] = tensor  # (also what keeps it alive for the native call)
                if self._native is not None:
                    h = _handle(tensor)
                    for i in self._native_slots[k]:
                        self._packed[i, 1] = h
                current[k] = tensor
        if self._native is not None:
            self._native[0](*self._native_args)
            return self._result
        for kernel, args in self._calls:
            kernel(*args)
        return self._result
