"""Run a host-runnable artifact with TVM's Relax VM (Python), timing each stage."""

from __future__ import annotations

import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tvmgen.compiler.targets.platforms import PLATFORMS, get_device, host_cpu_target, missing_cpu_features
from tvmgen.core import artifact
from tvmgen.core.errors import InputError, TvmgenError
from tvmgen.core.latency import Latency
from tvmgen.core.log import filtered_stderr
from tvmgen.runtime.direct_calls import DirectCalls
from tvmgen.runtime.state import HeldState, numpy_view

# libtvmgen_opencl's or libtvmgen_vulkan's refusal of a kernel whose work-group the device cannot run
# (their CheckWorkGroup)
_CANNOT_RUN = re.compile(r"((?:OpenCL|Vulkan) kernel \S+ cannot run on .*?)\. Fix: (.*)", re.S)
KEPT_RUNS = 100_000  # the runs whose times a model keeps (``Timings.runs_ms``): the latest
# An output of at least this size is written into a new array of the caller's each run rather than copied out of
# the runtime's tensor (``HostModel._fast_run``): copying 64 KB costs about what making the array's tensor does.
FRESH_OUTPUT_BYTES = 64 * 1024

# Devices the PyPI runtime can execute here (its OpenCL loader is off; see the OpenCL issue).


@dataclass
class Timings:
    load_ms: float = 0.0
    init_ms: float = 0.0
    first_run_ms: float = 0.0
    # the latest runs' times: an app that runs a model for hours keeps a bounded record
    runs_ms: deque[float] = field(default_factory=lambda: deque(maxlen=KEPT_RUNS))

    @property
    def steady(self) -> Latency:
        """The timed runs after the first."""
        return Latency.from_samples(self.runs_ms)

    def summary(self) -> dict:
        """``tvmgen run --json``'s ``timings``; with no timed runs the statistics are NaN, as they always were."""
        stats = self.steady.flat(("median", "min", "max"), "_ms", digits=3)
        return {
            "load_ms": round(self.load_ms, 3),
            "init_ms": round(self.init_ms, 3),
            "first_run_ms": round(self.first_run_ms, 3),
            "runs": len(self.runs_ms),
            **{k: float("nan") if v is None else v for k, v in stats.items()},
        }


def aligned_empty(shape: tuple, dtype: np.dtype, nbytes: int) -> np.ndarray:
    """An uninitialised C-contiguous array whose memory starts on a 64-byte boundary, as TVM's kernels assume of
    their arguments (numpy aligns to 16 bytes)."""
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def install_parallel_pool(library: Path, threads: int = 0) -> tuple[str, int]:
    """Switch a loaded model library's parallel loops to tvmgen's launcher (jni/src/parallel/parallel_pool.cc).

    Returns ("tvmgen", its thread count), or ("tvm", TVM's pool size) for a library without it
    (compiled by an older tvmgen) or when $TVMGEN_THREAD_POOL is "tvm". Call it after TVM has loaded
    the library: TVM's loader sets the pointer this overwrites.
    """
    import ctypes

    try:
        if os.environ.get("TVMGEN_THREAD_POOL", "tvmgen") == "tvm":
            raise OSError("TVM's own thread pool asked for")
        lib = ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        install = lib.tvmgen_parallel_install
        slot = ctypes.c_void_p.in_dll(lib, "__TVMBackendParallelLaunch")
    except (OSError, AttributeError, ValueError):
        return "tvm", tvm_pool_size()
    install.restype, install.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]
    return "tvmgen", int(install(ctypes.addressof(slot), int(threads)))


def tvm_pool_size() -> int:
    """The size of TVM's own thread pool, keeping the calling thread's CPUs.

    Asking creates the pool for this thread, and TVM binds the thread that creates it: with one worker
    (TVM counts half an x86 machine's logical CPUs as its cores, so one on two vCPUs) the caller is pinned
    to CPU 0, and every thread and process it starts afterwards inherits that one CPU. The caller's CPUs
    are given back; the pool's threads keep theirs."""
    import tvm

    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    size = int(tvm.get_global_func("runtime.NumThreads")())
    if before is not None and os.sched_getaffinity(0) != before:
        os.sched_setaffinity(0, before)
    return size


class HostModel:
    """An artifact loaded into the Python Relax VM; inputs and outputs as numpy arrays."""

    def __init__(self, directory: Path, threads: int = 0, direct_calls: bool = True):
        """``threads``: CPU threads for parallel kernels; 0: $TVM_NUM_THREADS, else one per big core.

        ``direct_calls``: on the CPU, run ``main`` as its recorded kernel calls from the second run on where it
        is one straight line of calls (``runtime.direct_calls``); ``executor`` says which ran and why. False:
        the Relax VM runs every call."""
        import tvm
        import tvm_ffi
        from tvm import relax

        self._from_dlpack = tvm_ffi.from_dlpack
        self.directory = Path(directory)
        self.manifest = m = artifact.load(self.directory)
        if m.platform != "host":
            raise InputError(
                f"{directory} was compiled for {m.platform}, not for this machine",
                f"run it on a {m.platform} device (tvmgen bench), or compile with --platform host",
            )
        # OpenCL and Vulkan through tvmgen's own backends, loaded below
        if m.device not in PLATFORMS["host"].devices:
            raise InputError(
                f"{directory} targets {m.device}, which the Python TVM runtime cannot run here "
                "(the PyPI runtime is built without OpenCL/Metal)",
                "compile with --device cpu (or cuda on a machine with an NVIDIA GPU) to run it here",
            )
        missing = missing_cpu_features(m.target)
        if missing:
            raise InputError(
                f"{directory} was compiled for the CPU {m.target.get('host', m.target).get('mcpu')!r}, whose "
                f"instructions this CPU ({host_cpu_target()['mcpu']}) lacks: {', '.join(missing)}",
                "compile it again on this machine, or for the oldest CPU it must run on "
                "(e.g. --cpu haswell for any AVX2 machine)",
            )
        device = get_device(m.device)
        backend = device.backend
        if backend == "opencl":
            self.load_opencl_backend()
        elif backend == "vulkan":
            from tvmgen.runtime import vulkan_backend

            vulkan_backend.load()
        self.timings = Timings()
        # A stateful model's caller gives and gets its own inputs and outputs; the state ones are held (self.state)
        self.inputs, self.outputs = m.own_inputs, m.own_outputs
        # made once for check_inputs: a small model's whole call takes 12 us
        self._expected = [(s, _numpy_dtype(s.dtype)) for s in self.inputs]
        self._input_names = {s.name for s in self.inputs}
        position = {s.name: i for i, s in enumerate(m.inputs)}
        self._positions = [position[s.name] for s in self.inputs]  # each own input's place among main's inputs
        self._staged: dict = {}  # input index -> (tensor, its numpy view or None) reused for inputs that are copied
        # input index -> (the array of the last call, its tensor, None) where it was used in place: the same array
        # object next call reuses the tensor (wrapping it again cost 1 us back to back, 20 us after an idle gap);
        # (the array, the tensor it is copied into, that tensor's numpy view) where it could not be (see own_tensors)
        self._wrapped: list = [None] * len(m.inputs)
        self._out_wrapped: list = [None] * len(self.outputs)  # the same for ``run(out=...)``'s arrays
        self._dynamic_outputs = any(not isinstance(d, int) or d < 0 for s in self.outputs for d in s.shape)
        # numpy arrays live on the CPU: usable in place there, at the alignment the kernels allow
        self._in_place = device.host_memory
        self._alignment = m.vm.get("input_alignment") or [64] * len(m.inputs)
        t0 = time.perf_counter()
        with filtered_stderr():  # TVM's per-constant "Scope Loaded" lines of texture builds
            lib = tvm.runtime.load_module(str(self.directory / m.export["library"]))
        self.parallel, self.threads = install_parallel_pool(self.directory / m.export["library"], threads)
        self.params = []
        if m.params:
            blob = (self.directory / m.params["file"]).read_bytes()
            loaded = tvm.runtime.load_param_dict(blob)
            self.params = [loaded[n] for n in m.params["names"]]
        t1 = time.perf_counter()
        self.dev = tvm.device(m.device, 0)
        if not self._in_place:
            self.params = [p.copyto(self.dev) for p in self.params]
        with filtered_stderr():
            self.vm = relax.VirtualMachine(lib, vm_devices(m, self.dev))
        self.main = self.vm[m.vm["entry"]]  # looked up once: 0.6 us a call
        self.state = HeldState(m, self.directory, self.dev) if m.state else None
        self._fast = None  # run(inputs) once direct calls are recorded (_fast_run)
        self._direct, self.executor = self._direct_calls(lib, direct_calls)
        t2 = time.perf_counter()
        self.timings.load_ms, self.timings.init_ms = (t1 - t0) * 1e3, (t2 - t1) * 1e3

    @property
    def replayed_by(self) -> str | None:
        """How the direct calls are made (``DirectCalls.replayed_by``: "one native call", or "python: " and why);
        None where the VM runs."""
        return self._direct.replayed_by if self._direct is not None else None

    def _direct_calls(self, lib, wanted: bool) -> tuple[DirectCalls | None, str]:
        """The direct calls for ``main`` and ``"direct calls"``, or None and ``"relax vm: "`` with the reason."""
        if not wanted:
            return None, "relax vm: direct calls are turned off (direct_calls=False; tvmgen run --vm)"
        if not self._in_place:
            return None, f"relax vm: direct calls are made on the CPU only ({self.manifest.device})"
        direct = DirectCalls(lib, self.manifest.vm["entry"], self.directory / self.manifest.export["library"])
        if direct.why_not:
            return None, f"relax vm: {direct.why_not}"
        return direct, "direct calls"

    @staticmethod
    def load_opencl_backend() -> None:
        """Load libtvmgen_opencl into this process: it registers TVM's OpenCL device API and kernel loader.

        $TVMGEN_OPENCL_BACKEND names the library; otherwise the host runtime build (cached) is used.
        """
        from tvmgen.runtime import runtime_build

        runtime_build.load_backend("opencl", "OpenCL")

    def check_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        if inputs.keys() != self._input_names:  # a set comparison: the common case costs one
            unknown = [n for n in inputs if n not in self._input_names]
            held = [n for n in unknown if self.state is not None and n in self.state.names]
            if held and self.state is not None:
                raise self.state.state_input_error(held)
            if unknown:
                raise InputError(
                    f"unknown input name(s) {', '.join(unknown)}",
                    f"this model's inputs are: {', '.join(map(str, self.inputs))}",
                )
        arrays = []
        for s, dtype in self._expected:
            if s.name not in inputs:
                raise InputError(f"no value for input {s}", f"pass --input {s.name}=FILE.npy")
            a = inputs[s.name]
            if type(a) is not np.ndarray or not a.flags.c_contiguous:
                a = np.asarray(a, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d
            if a.shape != s.shape:
                raise InputError(
                    f"input {s.name!r} has shape {a.shape}, the model expects {s.shape}",
                    "give an array of the expected shape (or recompile with --input)",
                )
            # numpy's dtypes of the built-in types are singletons: `is` spares the comparison's C path
            if a.dtype is not dtype and (a.dtype if isinstance(dtype, np.dtype) else str(a.dtype)) != dtype:
                raise InputError(
                    f"input {s.name!r} has dtype {a.dtype}, the model expects {s.dtype}",
                    f"convert it, e.g. np.save(path, x.astype('{s.dtype}'))",
                )
            arrays.append(a)
        return arrays

    def run(
        self, inputs: dict[str, np.ndarray], repeat: int = 1, out: list[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """The outputs as numpy arrays of their own (a later run leaves them alone).

        ``out``: one writable C-contiguous array per output, of its shape and dtype, that receives it and
        is returned instead of a new array, as an app reuses its buffers frame after frame: no array is
        allocated and none wrapped per call (the arrays' DLPack tensors are kept from call to call, as
        the inputs' are). The next run with the same arrays overwrites them.

        A streaming model (the manifest's ``state``): ``inputs`` and the outputs are the model's own (``inputs``,
        ``outputs``); each run is one step, fed the state held from the last (``reset_state``, ``get_state``,
        ``set_state``). With ``repeat``, every repeat is a step.
        """
        fast = self._fast
        if fast is not None and repeat == 1 and out is None:
            return fast(inputs)
        return self._run(inputs, repeat, out)

    def _run(self, inputs: dict[str, np.ndarray], repeat: int, out: list[np.ndarray] | None) -> list[np.ndarray]:
        try:
            return self._runs(inputs, repeat, out)
        except RuntimeError as e:  # a GPU backend that refuses a kernel before launching it: the artifact's fault
            refused = _CANNOT_RUN.search(str(e))
            if refused is None:
                raise
            raise InputError(refused.group(1), refused.group(2).strip()) from e

    def _runs(self, inputs: dict[str, np.ndarray], repeat: int, out: list[np.ndarray] | None) -> list[np.ndarray]:
        arrays = self.check_inputs(inputs)
        result = None
        state = self.state
        for i in range(max(1, repeat)):
            t0 = time.perf_counter()
            direct = self._direct
            if direct is None:
                res = self.main(*self.device_inputs(arrays), *self.params)
                if state is not None:  # the state outputs become the held values; the caller gets the rest
                    res = state.take(res)
                result = _to_numpy(res, self._in_place) if out is None else self._copy_into(res, out)
            else:
                replayed = direct.recorded  # (this run is the recording: main ran on the VM)
                res = self._direct_run(direct, arrays)
                own = res if state is None else state.own_outputs(res)
                result = _to_numpy(own, self._in_place) if out is None else self._copy_into(own, out)
                if state is not None:  # after the outputs are copied: one of them may be a held value
                    state.keep(res, copied=replayed and direct.copies_state)
            self._time(i, t0)
        assert result is not None  # the loop runs at least once
        return result

    def _direct_run(self, direct: DirectCalls, arrays: list[np.ndarray]):
        """main's result by direct calls: replayed, or recorded on this (first) run. A streaming model's held
        values stay in the same buffers (``HeldState.pin``), each run's new ones copied in (``keep``)."""
        if not direct.recorded:
            return self._record(direct, arrays)
        own = self._fixed_inputs(arrays) if direct.fixed_inputs else self.own_tensors(arrays)
        return direct.replay(own if self.state is None else self.state.pinned_arguments(own))

    def _time(self, i: int, t0: float) -> None:
        ms = (time.perf_counter() - t0) * 1e3
        if i == 0 and not self.timings.first_run_ms:
            self.timings.first_run_ms = ms
        else:
            self.timings.runs_ms.append(ms)

    def device_inputs(self, arrays: list[np.ndarray]) -> list:
        """main's inputs: ``own_tensors(arrays)``, and a streaming model's held values where main takes them."""
        tensors = self.own_tensors(arrays)
        return tensors if self.state is None else self.state.arguments(tensors)

    def own_tensors(self, arrays: list[np.ndarray]) -> list:
        """The inputs as TVM tensors on the model's device, with as little copying as possible.

        On the CPU a writable array aligned as the model's kernels require (the element size for
        models compiled by this tvmgen, see ``compiler.inputs``; else 64 bytes) is used in place
        through DLPack, as onnxruntime uses a numpy input; DLPack checks the alignment (asking numpy
        for the address first, ``a.ctypes.data``, cost 1.9 us a call, half of a small model's call).
        Any other array is copied into a tensor allocated on the first run and reused (a fresh 600 KB
        tensor per run cost 0.04 ms of page faults here). The tensor of an array used in place is kept
        until another array comes: passing the same array object call after call (refilled in place,
        as a camera pipeline does) wraps it once. An array that cannot be used in place is remembered too, and
        copied into its tensor at every call without asking DLPack again: the refusal is an exception whose
        traceback TVM parses, and whether numpy's memory is 64-byte aligned is chance (a 2 KB input ran a
        1.2 us model in 2.4 us a call in one process and in 27 us in the next).
        """
        tensors = []
        for i, a in zip(self._positions, arrays):
            last = self._wrapped[i]
            if last is not None and last[0] is a:  # the array of the last call (see __init__)
                if last[2] is not None:
                    np.copyto(last[2], a)
                tensors.append(last[1])
                continue
            if self._in_place and a.flags.writeable:
                try:
                    tensor = self._from_dlpack(a, require_alignment=self._alignment[i], require_contiguous=True)
                except Exception:  # not aligned as the kernels require (or not exportable): copied below
                    pass
                else:
                    # kept with the array: a numpy array's memory never moves (resize refuses an array whose
                    # memory is exported) and check_inputs still checks its shape and dtype every call
                    self._wrapped[i] = (a, tensor, None)
                    tensors.append(tensor)
                    continue
            tensor = self._stage(i, a)
            view = self._staged[i][1]
            # copied whatever its address: an array refilled in place comes back to the copy, not to DLPack
            self._wrapped[i] = None if view is None else (a, tensor, view)
            tensors.append(tensor)
        return tensors

    def _stage(self, i: int, a: np.ndarray):
        """Input ``i``'s tensor of its own (allocated on the first call, then reused), with ``a`` copied in."""
        entry = self._staged.get(i)
        if entry is None or tuple(entry[0].shape) != a.shape or str(entry[0].dtype) != str(a.dtype):
            import tvm

            tensor = tvm.runtime.empty(a.shape, str(a.dtype), self.dev)
            # A numpy view of a CPU tensor takes a plain memcpy (np.copyto: 14 us for 600 KB,
            # Tensor.copyfrom: 22 us)
            entry = self._staged[i] = (tensor, numpy_view(tensor) if self._in_place else None)
        tensor, view = entry
        if view is not None:
            np.copyto(view, a)
        else:
            tensor.copyfrom(a)
        return tensor

    def _fixed_inputs(self, arrays: list[np.ndarray]) -> list:
        """The inputs copied into the tensors the direct calls were recorded with (``DirectCalls.fixed_inputs``)."""
        return [self._stage(i, a) for i, a in zip(self._positions, arrays)]

    def _record(self, direct: DirectCalls, arrays: list[np.ndarray]):
        """The first run of direct calls: ``main`` on the model's VM, which records its kernel calls (run again
        on the model's own input tensors when the first recording finds that they must stay the same)."""
        own = self._fixed_inputs(arrays) if direct.fixed_inputs else self.own_tensors(arrays)
        if self.state is not None:
            self.state.pin()
        inputs = own if self.state is None else self.state.pinned_arguments(own)
        res, why_not = direct.record(self.vm, inputs, self.params)
        if why_not:  # this run's result stands; the VM runs the next ones
            self._direct, self.executor = None, f"relax vm: {why_not}"
            return res
        if direct.recorded:
            # the new state into its buffers as the last of the native calls (not where an input, a held value
            # among them, must stay the recorded tensor: an output may be one, copied out before keep)
            if self.state is not None and not direct.fixed_inputs:
                direct.copies_state = direct.append_copies(self.state.copy_pairs(res))
            self._fast = self._fast_run(direct, res)
        return res

    def _fast_run(self, direct: DirectCalls, res):
        """``run(inputs)`` once the direct calls are recorded, for the call an app makes frame after frame: the
        same input arrays (their DLPack tensors kept, see ``device_inputs``), of the right shapes and dtypes.
        It does what ``run`` does, as one function of local names (a small model's whole call is a few
        microseconds, and every attribute looked up counts). main's result ``res`` is the same tensors every
        run, so their numpy views are made once: the outputs are copies of them, and a streaming model's new
        held values are copied from them into its buffers. Any other call goes through ``run``'s own steps.
        None where a tensor has no numpy view (a dtype numpy lacks)."""
        state = self.state
        outs = [res] if hasattr(res, "numpy") else list(res)
        own = outs if state is None else state.own_outputs(res)
        made = [numpy_view(t) for t in own]
        views = [v for v in made if v is not None]
        if len(views) != len(made):
            return None
        specs = [(s.name, s.shape, dtype, i) for (s, dtype), i in zip(self._expected, self._positions)]
        count, wrapped, slow, copyto = len(specs), self._wrapped, self._run, np.copyto
        replay, clock, append = direct.replay, time.perf_counter, self.timings.runs_ms.append
        pinned, keep = (None, None) if state is None else (state.pinned_arguments, state.keep)
        if direct.copies_state:  # the replay copies the new state into the buffers pinned_arguments passes
            keep = None
        # The frame-after-frame call: the input tensors of the last replay, the held values in their buffers and
        # nothing since that gave the recorded arguments other tensors (``serial``): one native call as it is.
        native = direct.call_native if direct.replayed_by == "one native call" else None
        in_buffers = None if state is None else state.in_buffers
        last: list = [None, -1]  # the input tensors of this function's last replay, and the serial after it
        # Large outputs are written by the kernels into arrays of the caller's own, made each run, instead of into
        # the runtime's tensors and copied out (a CTC head's 2.9 MB of probabilities: 0.23-0.28 ms a run of a
        # 1.8 ms model); a small one is copied (a new array's DLPack tensor costs about 2 us).
        fresh = [
            (k, v.shape, v.dtype, v.nbytes)
            for k, v in enumerate(views)
            if state is None and native is not None and v.nbytes >= FRESH_OUTPUT_BYTES and direct.output_replaceable(k)
        ]
        into, from_dlpack = direct.call_native_into, self._from_dlpack

        def calls(tensors: list, t0: float) -> list[np.ndarray]:
            """The recorded calls on ``tensors``, the outputs copied (or written into new arrays, ``fresh``), the state
            kept, the run's time (from ``t0``)."""
            written: list | None = None  # the new arrays the kernels wrote, None where an output is copied
            if (
                native is not None
                and tensors == last[0]
                and direct.serial == last[1]
                and (in_buffers is None or in_buffers())
            ):
                if fresh:
                    written = [None] * len(views)
                    targets: list = [None] * len(views)
                    for k, shape, dtype, nbytes in fresh:
                        written[k] = a = aligned_empty(shape, dtype, nbytes)
                        targets[k] = from_dlpack(a)
                    into(targets)
                else:
                    native()
            else:
                replay(tensors if pinned is None else pinned(tensors))
                last[0], last[1] = tensors, direct.serial
            if written is None:
                result = [v.copy() for v in views]
            else:
                result = [v.copy() if a is None else a for a, v in zip(written, views)]
            if keep is not None:  # after the outputs are copied: one of them may be a held value
                keep(res)
            append((clock() - t0) * 1e3)
            return result

        if direct.fixed_inputs:  # inputs copied into the recorded tensors (a builtin keeps a view of them)
            return self._fast_fixed_run(specs, calls)

        def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
            if len(inputs) == count:
                t0 = clock()
                tensors = []
                for name, shape, dtype, i in specs:
                    a, last = inputs.get(name), wrapped[i]
                    # the array of the last call, still of the model's shape and dtype (numpy lets a caller
                    # change an array's shape in place; its DLPack tensor keeps the checked one)
                    if last is None or last[0] is not a or a.shape != shape or a.dtype is not dtype:
                        break
                    if last[2] is not None:  # an array the kernels cannot read in place: copied into its tensor
                        copyto(last[2], a)
                    tensors.append(last[1])
                else:
                    return calls(tensors, t0)
            return slow(inputs, 1, None)

        return run

    def _fast_fixed_run(self, specs: list, calls):
        """``_fast_run``'s function for direct calls recorded on the model's own input tensors
        (``DirectCalls.fixed_inputs``): each input array of the model's shape and dtype is copied into its tensor
        (a plain memcpy through a numpy view made once), then ``calls`` (``_fast_run``'s) made, without ``run``'s
        general checks. A 64 KB input, after an idle gap, went through them in 0.39 ms, 0.15 ms of it the
        kernels. None where a staged tensor has no numpy view."""
        staged = [e for e in (self._staged.get(i) for *_, i in specs) if e is not None and e[1] is not None]
        if len(staged) != len(specs):
            return None
        targets = [(name, shape, dtype, e[1]) for (name, shape, dtype, _), e in zip(specs, staged)]
        tensors = [e[0] for e in staged]
        count, slow, clock, copyto, ndarray = len(specs), self._run, time.perf_counter, np.copyto, np.ndarray

        def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
            if len(inputs) == count:
                for name, shape, dtype, _ in targets:
                    a = inputs.get(name)
                    if a.__class__ is not ndarray or a.shape != shape or a.dtype is not dtype:
                        break
                else:
                    t0 = clock()
                    for name, _, _, view in targets:
                        copyto(view, inputs[name])
                    return calls(tensors, t0)
            return slow(inputs, 1, None)

        return run

    # ------------------------------------------------------------------ streaming state (manifest "state")

    def reset_state(self) -> None:
        """The held state back to its initial values (a stateless model: nothing to do)."""
        if self.state is not None:
            self.state.reset()

    def get_state(self, key: str | int) -> np.ndarray:
        """A copy of the state held for the state input ``key`` (its name, or its index in the manifest's list)."""
        return self._held().get(key)

    def set_state(self, key: str | int, value: np.ndarray) -> None:
        """Hold ``value`` for the state input ``key`` from the next run on (shape and dtype checked)."""
        self._held().set(key, value)

    def _held(self) -> HeldState:
        if self.state is None:
            raise InputError(
                f"{self.directory} has no state: each run is independent of the last",
                "compile a streaming model with --state INPUT=OUTPUT for the runtime to carry its state",
            )
        return self.state

    def _copy_into(self, res, out: list[np.ndarray]) -> list[np.ndarray]:
        """The VM's result ``res`` copied into the caller's arrays ``out`` (see ``run``), through DLPack
        tensors of them made the first time each array comes and kept (one C copy per output then)."""
        outs = (res,) if hasattr(res, "numpy") else res
        if len(out) != len(outs):
            raise InputError(
                f"out has {len(out)} array(s), the model has {len(outs)} output(s)",
                "pass one array per output (model.outputs)",
            )
        for k, (tensor, a) in enumerate(zip(outs, out)):
            last = self._out_wrapped[k]
            # (a model of static shapes: TVM's copy checks the byte size, the shape cannot change)
            if last is None or last[0] is not a or (self._dynamic_outputs and tuple(tensor.shape) != last[2]):
                last = self._out_wrapped[k] = self._wrap_output(k, tensor, a)
            tensor.copyto(last[1])
        return out

    def _wrap_output(self, k: int, tensor, a) -> tuple:
        """``(a, a's DLPack tensor, its shape)`` after checking that ``a`` can receive output ``k``."""
        shape, dtype = tuple(tensor.shape), str(tensor.dtype)
        if type(a) is not np.ndarray or not a.flags.c_contiguous or not a.flags.writeable:
            raise InputError(
                f"out[{k}] is not a writable C-contiguous numpy array",
                f"pass np.empty({shape}, '{dtype}') for output {self.outputs[k].name!r}",
            )
        if a.shape != shape or str(a.dtype) != dtype:
            raise InputError(
                f"out[{k}] is {a.dtype}{list(a.shape)}, output {self.outputs[k].name!r} is {dtype}{list(shape)}",
                f"pass np.empty({shape}, '{dtype}')",
            )
        return a, self._from_dlpack(a), shape


def _numpy_dtype(name: str):
    """numpy's dtype for a TVM dtype name, or the name where numpy has none (bfloat16)."""
    try:
        return np.dtype(name)
    except TypeError:
        return name


def _to_numpy(out, on_cpu: bool = False) -> list[np.ndarray]:
    """The VM's result (a tensor or a tuple of them) as numpy copies; ``on_cpu``: the model's outputs are on
    the CPU (skips asking each tensor for its device)."""
    if hasattr(out, "numpy"):
        return [_copy_out(out, on_cpu)]
    try:
        return [_copy_out(o, on_cpu) for o in out]
    except TypeError as e:  # pragma: no cover - defensive: unexpected VM return type
        raise TvmgenError(f"unexpected output type from the VM: {type(out).__name__}") from e


_CPU = 1  # DLPack's kDLCPU


def _copy_out(tensor, on_cpu: bool = False) -> np.ndarray:
    """A numpy copy of an output tensor. On the CPU through a DLPack view and ``ndarray.copy``:
    0.45 us for a 2 KB output against 5 us for ``Tensor.numpy()`` (a quarter of a small model's
    whole call); other devices, and dtypes numpy's DLPack lacks, through ``numpy()``."""
    if on_cpu or tensor.device.dlpack_device_type() == _CPU:
        try:
            return np.from_dlpack(tensor).copy()
        except (TypeError, BufferError, RuntimeError):  # a dtype numpy cannot take: numpy() below
            pass
    return tensor.numpy()


def compare(actual: list[np.ndarray], expected: list[np.ndarray], names: list[str]) -> list[dict]:
    """Per output: max absolute error and max relative error (relative to the reference's max magnitude)."""
    rows = []
    for name, a, e in zip(names, actual, expected):
        e = np.asarray(e)
        a = np.asarray(a).reshape(e.shape) if a.size == e.size else a
        if a.shape != e.shape:
            rows.append(
                {
                    "name": name,
                    "shape_mismatch": f"{a.shape} vs reference {e.shape}",
                    "max_abs": float("inf"),
                    "max_rel": float("inf"),
                }
            )
            continue
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        scale = max(float(np.abs(e).max()) if e.size else 0.0, 1e-12)
        rows.append(
            {
                "name": name,
                "shape": list(e.shape),
                "ref_max": scale,
                "max_abs": float(diff.max()) if diff.size else 0.0,
                "max_rel": float(diff.max() / scale) if diff.size else 0.0,
            }
        )
    return rows


def read_input_files(flags, specs) -> dict[str, np.ndarray]:
    """`run --input [NAME=]FILE.npy` flags as arrays by input name (no name: the next input in order)."""
    names = [s.name for s in specs]
    inputs = {}
    for i, flag in enumerate(flags):
        name, sep, path = flag.rpartition("=")
        if not sep:
            if i >= len(names):
                raise InputError(
                    f"more --input files ({len(flags)}) than model inputs ({len(names)})",
                    f"the model's inputs are: {', '.join(names)}",
                )
            name, path = names[i], flag
        p = Path(path)
        if not p.is_file():
            raise InputError(f"input file {p} does not exist", "pass an existing .npy file")
        try:
            inputs[name] = np.load(p, allow_pickle=False)
        except Exception as e:
            raise InputError(f"cannot read {p} as .npy ({e})", "save inputs with numpy.save") from e
    return inputs


__all__ = ["PLATFORMS", "HostModel", "Timings", "compare"]


def vm_devices(manifest, dev):
    """What ``relax.VirtualMachine`` takes for ``dev``: one device per non-host entry of the manifest's
    ``vm.devices`` (texture builds have one per memory scope); the VM appends the host itself."""
    n = sum(1 for d in manifest.vm.get("devices", []) if d.get("dl_device_type") != 1)
    return [dev] * n if n > 1 else dev


def output_file_name(name: str) -> str:
    """The file an output named `name` is written to (NAME.npy), as tvmgen run and tvmgen-run name it:
    characters other than letters, digits, '-', '_' and '.' become '_' ("Identity:0" -> "Identity_0")."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) + ".npy"
