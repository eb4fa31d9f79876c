"""`tvmgen bench`: upload a model (or the seed's GEMM) to a device over RPC and time it there.

Cold start (load + VM init + first run) and warm runs (TVM's time_evaluator on the device) are
timed apart from copy-in and copy-out; the device's outputs are checked against the host's
reference runtime on the same seeded inputs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tvmgen.core import artifact, binfmt
from tvmgen.core.errors import CheckError, InputError
from tvmgen.core.latency import Latency
from tvmgen.core.log import console, step
from tvmgen.remote import streaming
from tvmgen.remote.rpc import RpcError, accepts, parse_address, tracker_summary


@dataclass
class Target:
    key: str
    tracker: str | None = None
    proxy: str | None = None
    session_timeout: int = 600


@dataclass
class Report:
    device: dict
    model: str
    platform: str
    dev: str
    cold: dict = field(default_factory=dict)
    warm_ms: list[float] = field(default_factory=list)
    copy_in_ms: list[float] = field(default_factory=list)
    copy_out_ms: list[float] = field(default_factory=list)
    check: list[dict] | None = None
    reference: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def warm(self) -> Latency:
        return Latency.from_samples(self.warm_ms)

    @property
    def copy_in(self) -> Latency:
        return Latency.from_samples(self.copy_in_ms)

    @property
    def copy_out(self) -> Latency:
        return Latency.from_samples(self.copy_out_ms)

    def to_json(self) -> dict:
        """The statistics in Latency's canonical form (``{"count": 0}`` for none), the warm runs one by one too."""
        return {
            "device": self.device,
            "model": self.model,
            "platform": self.platform,
            "dev": self.dev,
            "cold_ms": self.cold,
            "warm_ms": self.warm.to_json(),
            "warm_samples_ms": self.warm_ms,
            "copy_in_ms": self.copy_in.to_json(),
            "copy_out_ms": self.copy_out.to_json(),
            "reference": self.reference,
            "check": self.check,
            **self.extra,
        }


# ------------------------------------------------------------------ sessions


def connect(t: Target):
    """An RPC session with the device under ``t.key``, and what the device says it is."""
    from tvm import rpc

    if (t.tracker is None) == (t.proxy is None):
        raise InputError("give exactly one of --tracker HOST:PORT or --proxy HOST:PORT")
    if t.tracker is not None:
        keys = tracker_summary(t.tracker)
        if t.key not in keys or (keys[t.key].get("total", 0) == 0 and keys[t.key].get("free", 0) == 0):
            known = ", ".join(sorted(k for k, v in keys.items() if v.get("total") or v.get("free"))) or "none"
            raise RpcError(
                f"no device with key {t.key!r} is registered with the tracker at {t.tracker}",
                f"devices there: {known}; start one with `tvmgen rpc device --key {t.key} --tracker {t.tracker}`",
            )
        if keys[t.key].get("free", 0) == 0:
            console.print(f"  [dim]device {t.key!r} is busy: waiting for it (the tracker queues requests)[/]")
        host, port = parse_address(t.tracker, "tracker")
        try:
            remote = rpc.connect_tracker(host, port).request(t.key, priority=1, session_timeout=t.session_timeout)
        except Exception as e:
            raise RpcError(
                f"could not get a session with {t.key!r} from the tracker at {t.tracker}: {_last(e)}",
                "check the device server is running (tvmgen devices --tracker ...)",
            ) from e
    else:
        assert t.proxy is not None  # exactly one of the two (checked above)
        host, port = parse_address(t.proxy, "proxy")
        if not accepts(host, port):
            raise RpcError(f"cannot reach the RPC proxy at {t.proxy}", "start one with `tvmgen rpc proxy`")
        try:
            remote = rpc.connect(host, port, key=t.key, session_timeout=t.session_timeout)
        except Exception as e:
            raise RpcError(
                f"no device with key {t.key!r} answered through the proxy at {t.proxy}: {_last(e)}",
                f"start one with `tvmgen rpc device --key {t.key} --proxy {t.proxy}`",
            ) from e
    try:
        info = json.loads(remote.get_function("tvmgen.device_info")())
    except Exception:  # a device server that is not tvmgen's (TVM's Python server): nothing to check against
        info = {}
    return remote, info


def connecting(t: Target) -> str:
    """The step's title for reaching ``t``'s device."""
    return f"Connecting to device {t.key!r} via {'tracker ' + t.tracker if t.tracker else 'proxy ' + str(t.proxy)}"


def in_session(t: Target, work, quiet: bool = False):
    """``work(remote, info)`` in a session of its own with ``t``'s device, given back to the tracker when it
    returns: the tracker lends a device to one session at a time, and a session ends only when its last remote
    object is freed, which a reference cycle among a loaded model's remote objects defers to the next garbage
    collection (a next session then waited for the first's time limit). ``quiet``: the steps inside are the
    caller's, said once by it."""
    import gc

    before, console.quiet = console.quiet, quiet or console.quiet
    try:
        remote, info = connect(t)
        try:
            return work(remote, info)
        finally:
            del remote
            gc.collect()
    finally:
        console.quiet = before


def say_emulated(key: str, info: dict, consequence: str) -> None:
    """A warning where the device server runs under an emulator (``info["emulator"]``): its timings are not a
    CPU's; ``consequence``: what that means for the command."""
    if info.get("emulator"):
        console.print(f"  [yellow]![/] device {key!r} runs under {info['emulator']}: {consequence}")


def _last(e: Exception) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def guard(what: str):
    """Turn a lost device into an RpcError naming the step it happened in."""

    class _Guard:
        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc, tb):
            if exc is not None and not isinstance(exc, (RpcError, InputError, CheckError, KeyboardInterrupt)):
                message = _last(exc)
                fix = "the device server may have stopped or crashed; see its log"
                if " is not available: " in message or " support (" in message:  # the backend or driver said why
                    fix = (
                        "the device lacks the driver or backend library this artifact's device needs (the error "
                        "names it): install it there, or bench a --device cpu build"
                    )
                raise RpcError(f"the device failed while {what}: {message}", fix) from exc
            return False

    return _Guard()


# ------------------------------------------------------------------ model bench


def check_compatible(manifest: artifact.Manifest, directory: Path, info: dict, key: str) -> None:
    """Refuse, before any upload, an artifact the device cannot load."""
    if info.get("system_lib_only"):
        check_linked(manifest, info, key)
    elif manifest.export["kind"] != "shared":
        raise InputError(
            f"{directory} holds {manifest.export['kind']} ({manifest.export['library']}), not a shared "
            "library the device can load",
            "compile without --objects-only",
        )
    else:
        lib_fmt, lib_arch = binfmt.describe_file(directory / manifest.export["library"])
        if info.get("arch") and (manifest.arch != info["arch"] or lib_arch != info["arch"]):
            raise InputError(
                f"the artifact is built for {manifest.platform} ({lib_arch}), device {key!r} is "
                f"{info.get('platform', '?')} ({info['arch']}): nothing was uploaded",
                f"compile for the device: tvmgen compile MODEL --platform {info.get('platform', 'PLATFORM')}",
            )
    if info.get("devices") and manifest.device not in info["devices"]:
        raise InputError(
            f"the artifact runs on {manifest.device}, device {key!r} offers {', '.join(info['devices'])}",
            "compile with a --device the device has",
        )


def check_linked(manifest: artifact.Manifest, info: dict, key: str) -> None:
    """A device that runs only the model linked into its app (the iOS app): the artifact must be that model."""
    if not manifest.export.get("system_lib"):
        raise InputError(
            f"device {key!r} runs only the model linked into its app (iOS cannot load uploaded code); "
            f"this {manifest.platform} artifact is not that",
            "bench the model the app was made with "
            "(tvmgen rpc-app --platform ios-arm64 --model MODEL), or its ios-arm64 artifact",
        )
    if info.get("arch") and manifest.arch != info["arch"]:
        raise InputError(
            f"the artifact is built for {manifest.platform} ({manifest.arch}), device {key!r} is "
            f"{info.get('platform', '?')} ({info['arch']})",
            "bench the model the app was made with",
        )
    linked = info.get("linked_models") or []
    if linked and manifest.model.get("name") not in linked:
        raise InputError(
            f"device {key!r} serves {', '.join(linked)}, not {manifest.model.get('name')}",
            "bench that model, or make the app again with --model",
        )


def bench_model(
    remote,
    info: dict,
    directory: Path,
    key: str,
    repeat: int,
    number: int,
    min_repeat_ms: int,
    seed: int,
    reference=None,
    reference_name: str | None = None,
    profile: bool = False,
    reference_steps=None,
) -> Report:
    """Upload, load and time the artifact on the device; its outputs compared with ``reference`` (inputs by
    name -> outputs). A streaming model (the manifest's state): each timed run is one step from the initial
    state, then ``repeat`` seeded steps run in order with the state carried on the device, every step compared
    with ``reference_steps`` (a sequence of own inputs -> each step's own outputs)."""
    import tvm
    from tvm import relax

    from tvmgen.compiler.targets.platforms import DL_DEVICE_TYPES
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import compare, vm_devices

    manifest = artifact.load(directory)
    check_compatible(manifest, directory, info, key)
    report = Report(device=info, model=manifest.model.get("name", "?"), platform=manifest.platform, dev=manifest.device)
    linked = bool(info.get("system_lib_only"))  # the iOS app: its model is linked in, nothing is uploaded
    lib_name = f"model-{manifest.files[manifest.export['library']]['sha256'][:12]}.so"
    report.cold["upload"] = 0.0
    if not linked:
        with (
            step(
                f"Uploading {manifest.export['library']} ({manifest.files[manifest.export['library']]['bytes']:,} "
                "bytes)"
            ),
            guard("receiving the library"),
        ):
            t0 = time.perf_counter()
            remote.upload(str(directory / manifest.export["library"]), target=lib_name)
            report.cold["upload"] = (time.perf_counter() - t0) * 1e3
    inputs = random_inputs(manifest.own_inputs, seed)
    if manifest.state:  # a streaming model: the state inputs at their initial values, as a first step has them
        inputs.update(streaming.initial_inputs(manifest, directory))
    resident = _device_memory(remote)
    memory = (
        {"source": "the device server's /proc/self/status", "before_load_bytes": resident["rss_bytes"]}
        if resident
        else None
    )
    with step("Loading on the device and running once (cold start)"), guard("loading and running the model"):
        t0 = time.perf_counter()
        lib = remote.system_lib() if linked else remote.load_module(lib_name)
        t1 = time.perf_counter()
        dev = remote.device(DL_DEVICE_TYPES[manifest.device], 0)
        vm = relax.VirtualMachine(lib, vm_devices(manifest, dev))
        params = []
        if manifest.params:
            loaded = tvm.runtime.load_param_dict((directory / manifest.params["file"]).read_bytes())
            params = [tvm.runtime.tensor(loaded[n].numpy(), dev) for n in manifest.params["names"]]
        t2 = time.perf_counter()
        if memory:
            memory["after_load_peak_bytes"] = _peak_bytes(remote)
        args = [tvm.runtime.tensor(inputs[s.name], dev) for s in manifest.inputs]
        t3 = time.perf_counter()
        out = vm[manifest.vm["entry"]](*args, *params)
        dev.sync()
        t4 = time.perf_counter()
        tensors = device_outputs(remote, out, manifest.outputs)
        outputs = [o.numpy() for o in tensors]
        t5 = time.perf_counter()
    report.cold.update(
        load=(t1 - t0) * 1e3,
        init=(t2 - t1) * 1e3,
        copy_in=(t3 - t2) * 1e3,
        first_run=(t4 - t3) * 1e3,
        copy_out=(t5 - t4) * 1e3,
    )
    report.cold["total"] = report.cold["load"] + report.cold["init"] + report.cold["first_run"]
    with step(f"Timing {repeat} warm runs on the device"), guard("timing the model"):
        timer = vm.time_evaluator(manifest.vm["entry"], dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        report.warm_ms = [r * 1e3 for r in timer(*args, *params).results]
        for _ in range(repeat):
            t0 = time.perf_counter()
            fresh = [tvm.runtime.tensor(inputs[s.name], dev) for s in manifest.inputs]
            dev.sync()
            report.copy_in_ms.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            _ = [o.numpy() for o in tensors]
            report.copy_out_ms.append((time.perf_counter() - t0) * 1e3)
        del fresh
    if manifest.state:
        steps = [random_inputs(manifest.own_inputs, seed + k) for k in range(max(repeat, 2))]
        with step(f"Running {len(steps)} steps in order on the device, the state carried"), guard("running steps"):
            step_outputs, step_ms = streaming.carried_steps(
                vm[manifest.vm["entry"]],
                args,
                params,
                manifest,
                dev,
                steps,
                lambda o: device_outputs(remote, o, manifest.outputs),
                lambda a: tvm.runtime.tensor(a, dev),
            )
        report.extra.update(per_step=True, sequence=streaming.sequence_record(step_ms))
    if profile:
        with step(f"Profiling {repeat} runs kernel by kernel on the device"), guard("profiling the model"):
            report.extra["profile"] = _profile_on_device(
                remote, vm, manifest, directory, dev, repeat, [*args, *params]
            ).to_json()
    if memory:
        memory["overall_peak_bytes"] = _peak_bytes(remote)
        report.extra["memory"] = memory
    if manifest.state and reference_steps is not None:
        from tvmgen.runtime.check import tolerances
        from tvmgen.runtime.sequence import compare_steps

        report.reference = f"{reference_name}, the same {len(steps)} steps in order from the initial state"
        names = [s.name for s in manifest.own_outputs]
        report.check = compare_steps(step_outputs, reference_steps(steps), names, *tolerances(manifest.precision))
    elif reference is not None:
        report.reference = reference_name
        own = {s.name: inputs[s.name] for s in manifest.own_inputs}
        names = [s.name for s in manifest.own_outputs]
        report.check = compare(streaming.own_outputs(manifest, outputs), reference(own), names)
    return report


def _device_memory(remote) -> dict | None:
    """The device server's resident memory now ({rss_bytes, peak_bytes}); None from a server without it."""
    try:
        f = remote.get_function("tvmgen.resident_memory")
    except Exception:
        return None
    return json.loads(f())


def _peak_bytes(remote) -> int:
    """The device server's peak resident memory; asked only of a server that has told its memory before."""
    now = _device_memory(remote)
    if now is None:
        raise RpcError("the device server stopped telling its memory use", "run the benchmark again")
    return now["peak_bytes"]


def _profile_on_device(remote, vm, manifest: artifact.Manifest, directory: Path, dev, runs: int, args: list):
    """Each kernel timed on the device by its own clock (``tvmgen.profile_vm`` in libtvmgen_runtime)."""
    from tvmgen.core import kernel_table
    from tvmgen.reports import profile

    try:
        f = remote.get_function("tvmgen.profile_vm")
    except Exception as e:
        raise InputError(
            "the device server cannot profile (no tvmgen.profile_vm): it is not tvmgen's, or older",
            "start tvmgen's device server (tvmgen rpc device), rebuilt by this tvmgen",
        ) from e
    from tvmgen.compiler.targets.platforms import DL_DEVICE_TYPES

    result = json.loads(f(vm.module, manifest.vm["entry"], runs, DL_DEVICE_TYPES[manifest.device], 0, *args))
    return profile.Profile.from_device(result, kernel_table.load(directory), manifest.device)


def device_outputs(remote, out, specs: list) -> list:
    """The model's outputs as a flat list of tensors, in the manifest's order (it lists them flat).

    The VM returns one tensor or a tuple, maybe nested. Over RPC a tuple comes back as an
    ``RPCObjectRef`` (a handle to an ``ffi.Array`` on the device) that Python cannot iterate: its
    items are read through the device's own ``ffi.ArraySize`` / ``ffi.ArrayGetItem`` (in tvm-ffi's
    core library, so every device server has them), tensors coming back as remote tensors. A 0-d
    output is a 0-d tensor; a scalar that is not a tensor (a Relax PrimValue) comes back as a
    Python number and is taken as a 0-d array of the manifest's dtype.
    """
    flat: list = []
    size = get = None

    def walk(value, path: str) -> None:
        nonlocal size, get
        if hasattr(value, "numpy"):
            flat.append(value)
        elif isinstance(value, (bool, int, float, np.generic)):
            try:
                a = np.asarray(value, dtype=specs[len(flat)].dtype if len(flat) < len(specs) else None)
            except TypeError:  # a dtype numpy lacks (bfloat16): as Python gave it
                a = np.asarray(value)
            flat.append(_Scalar(a))
        elif isinstance(value, (list, tuple)) or _is_local_array(value):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        else:  # a remote object: a tuple, or something that is not an output tvmgen can copy
            if size is None:
                size, get = remote.get_function("ffi.ArraySize"), remote.get_function("ffi.ArrayGetItem")
            try:
                n = int(size(value))
            except Exception as e:
                raise CheckError(
                    f"the device's output {path} is neither a tensor nor a tuple of tensors "
                    f"({type(value).__name__}: {_last(e)})",
                    "tvmgen benches models whose outputs are tensors",
                ) from e
            for i in range(n):
                walk(get(value, i), f"{path}[{i}]")

    walk(out, "out")
    if len(flat) != len(specs):
        raise CheckError(
            f"the device returned {len(flat)} output(s), the artifact's manifest lists {len(specs)} "
            f"({', '.join(s.name for s in specs)})",
            "recompile the artifact with this tvmgen",
        )
    return flat


def _is_local_array(value) -> bool:
    try:
        import tvm_ffi
    except ImportError:  # pragma: no cover - TVM 0.27 always has it
        return False
    return isinstance(value, tvm_ffi.Array)


class _Scalar:
    """A scalar output that came back as a number, not a tensor: copies like one."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def numpy(self) -> np.ndarray:
        return self.value.copy()


# ------------------------------------------------------------------ the seed's GEMM


def bench_gemm(
    remote, info: dict, n: int, platform, device: str, repeat: int, number: int, min_repeat_ms: int, scratch: Path
) -> Report:
    import tvm

    from tvmgen.compiler.gemm import build_gemm
    from tvmgen.compiler.targets.platforms import DL_DEVICE_TYPES, BuildTarget

    if info.get("arch") and platform.arch != info["arch"]:
        raise InputError(
            f"--platform {platform.name} ({platform.arch}) does not match device ({info['arch']})",
            f"use --platform {info.get('platform')}",
        )
    with step(f"Building a {n}x{n}x{n} GEMM for {platform.name}/{device}"):
        lib_path = build_gemm(n, BuildTarget(platform, device), scratch / "gemm.so")
    report = Report(device=info, model=f"gemm{n}", platform=platform.name, dev=device)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    with step("Uploading and running the GEMM on the device"), guard("running the GEMM"):
        remote.upload(str(lib_path), target="gemm.so")
        lib = remote.load_module("gemm.so")
        dev = remote.device(DL_DEVICE_TYPES[device], 0)
        ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
        tc = tvm.runtime.tensor(np.zeros((n, n), np.float32), dev)
        lib["gemm"](ta, tb, tc)
        got = tc.numpy()
        timer = lib.time_evaluator("gemm", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        report.warm_ms = [r * 1e3 for r in timer(ta, tb, tc).results]
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(got - want).max())
    report.reference = "numpy (float64) on the host"
    report.check = [
        {"name": "C", "max_abs": err, "max_rel": err / float(np.abs(want).max()), "ref_max": float(np.abs(want).max())}
    ]
    median = report.warm.median
    assert median is not None  # time_evaluator returned its repeats
    report.extra["gflops"] = 2 * n**3 / (median / 1e3) / 1e9
    return report


# ------------------------------------------------------------------ output


def print_report(r: Report) -> None:
    d = r.device
    console.print(
        f"[bold]{r.model}[/] on device {d.get('platform', '?')} ({d.get('arch', '?')}, "
        f"{d.get('machine', '?')}), {r.dev}"
    )
    if r.cold:
        c = r.cold
        console.print(
            f"  cold start {c['total']:.1f} ms = load {c['load']:.1f} + init {c['init']:.1f} + "
            f"first run {c['first_run']:.1f} (upload {c['upload']:.1f} ms)"
        )
    if r.extra.get("per_step"):
        console.print(
            "  a streaming model: each timed run is one step (the state inputs at their initial values; the step's "
            "cost does not depend on them)"
        )
    rows = [("step (device)" if r.extra.get("per_step") else "run (device)", r.warm)]
    rows += [("copy-in", r.copy_in), ("copy-out", r.copy_out)]
    console.print(f"  {'ms':<13}{'count':>6}{'mean':>10}{'std':>9}{'min':>10}{'p50':>10}{'p90':>10}{'max':>10}")
    for name, lat in rows:
        if lat.count:
            s = lat.flat(("mean", "std", "min", "p50", "p90", "max"))
            console.print(
                f"  {name:<13}{lat.count:>6}{s['mean']:>10.3f}{s['std']:>9.3f}{s['min']:>10.3f}"
                f"{s['p50']:>10.3f}{s['p90']:>10.3f}{s['max']:>10.3f}"
            )
    if "gflops" in r.extra:
        console.print(f"  {r.extra['gflops']:.2f} GFLOPS (median)")
    m = r.extra.get("memory")
    if m:
        console.print(
            f"  device peak resident memory (VmHWM): after load {m['after_load_peak_bytes'] / 2**20:.1f} MB, "
            f"overall {m['overall_peak_bytes'] / 2**20:.1f} MB ({m['before_load_bytes'] / 2**20:.1f} MB before "
            "loading)"
        )
    seq = r.extra.get("sequence")
    if seq:
        console.print(
            f"  {seq['steps']} steps in order, the state carried on the device: per step median "
            f"{seq['median_ms']:.3f} ms, p90 {seq['p90_ms']:.3f}, max {seq['max_ms']:.3f} ({seq['timed']})"
        )
    if r.check is not None:
        for row in r.check:
            at = f" (worst step {row['step']} of {row['steps']})" if "step" in row else ""
            console.print(f"  outputs vs {r.reference}: {row['name']} max abs error {row['max_abs']:.3g}{at}")


def plot(r: Report, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise InputError("--plot needs matplotlib", "pip install matplotlib") from e
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(r.warm_ms, bins=max(5, int(math.sqrt(len(r.warm_ms))) * 2), color="#3572a5")
    warm = r.warm
    for q, style in ((50, "-"), (90, "--")):
        x = warm.percentile(q)
        if x is not None:  # None only with no warm runs, an empty histogram
            ax.axvline(x, color="black", linestyle=style, label=f"p{q}")
    ax.set_xlabel("latency per run (ms)")
    ax.set_ylabel("repeats")
    ax.set_title(f"{r.model} on {r.device.get('platform', '?')} ({r.dev}), {len(r.warm_ms)} repeats")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
