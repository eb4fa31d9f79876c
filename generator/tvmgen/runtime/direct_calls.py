"""Direct calls for ``HostModel``: a model's ``main`` run as the fixed list of its kernel calls.

The Relax VM interprets ``main``'s bytecode on every run and allocates every intermediate again. For a model
of a few microseconds that is most of a call from Python (a 1x16 add+relu: 1.6 us in the VM around a 0.05 us
kernel). When ``main`` is one straight line of calls, each either a kernel of the model library or a builtin
whose result depends only on shapes and on which buffers exist, the calls are the same on every run. The
first run goes through the model's VM with an instrument that keeps each kernel call and its arguments;
later runs make those kernel calls only, with the caller's input tensors put where the recorded ones were.
The C++ runtime does the same (``jni/src/direct_calls.h``, docs/runtime.md#direct-calls-on-the-cpu); this is
the Python runtime's own, through the same public interfaces (the executable's ``as_text`` and the VM's
``set_instrument``).
"""

from __future__ import annotations

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


def _handle(value) -> int | None:
    """The address of a TVM object (two Python wrappers of one tensor share it), else None."""
    chandle = getattr(value, "__chandle__", None)
    return chandle() if chandle is not None else None


class DirectCalls:
    """``main``'s kernel calls, recorded once and replayed (see the module's doc).

    ``why_not`` is ``""`` when ``entry`` of ``lib`` can run as direct calls, else the reason; nothing runs until
    ``record``.
    """

    def __init__(self, lib, entry: str):
        self.entry = entry
        self.kernels: dict = {}  # the library's kernels main calls, by name
        self.why_not = self._prepare(lib, entry)
        self._calls: list = []  # [function, its argument list] in order
        self._slots: list = []  # per input: the (argument list, index) pairs where it goes
        self._current: list = []
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

        def keep(func, name, before_run, ret_value, *args):
            if not before_run:
                return 0
            name = str(name)
            if name in RUNS_ONCE:
                if name not in _ONLY_LOOK:
                    held.update(h for h in map(_handle, args) if h in looked_at)
                return 0
            kernel = self.kernels.get(name)
            if kernel is None:
                refused.append(f"{self.entry} called {name}, which its bytecode did not show")
            elif any(isinstance(a, str) for a in args):  # the instrument sees a dtype argument as its name
                refused.append(f"the kernel {name} takes a string or dtype argument")
            calls.append([kernel, list(args)])
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
        self._calls, self._result, self.recorded = calls, result, True
        return result, ""

    def replay(self, inputs: list):
        """A later run: the recorded kernel calls, in order, on ``inputs`` (the recorded tensors themselves when
        ``fixed_inputs``). Returns the recorded result's tensors, which hold this run's outputs."""
        current = self._current
        for k, tensor in enumerate(inputs):
            if tensor is not current[k]:  # another input tensor than the last run's: put where the last was
                for args, j in self._slots[k]:
                    args[j] = tensor
                current[k] = tensor
        for kernel, args in self._calls:
            kernel(*args)
        return self._result
