"""Where the time goes: a per-kernel profile of a model's runs.

Every path measures the same thing, the time of each call the Relax VM makes, and hands over
raw counts (``{name: [calls, total_ns]}`` over ``runs`` runs):

- here (``tvmgen run --profile``): the VM's instrument hook, timed in this process;
- on a device over RPC (``tvmgen bench --profile``), in ``tvmgen-run --profile`` and the Java
  API: the same hook in C++ (``tvmgen.profile_vm`` in libtvmgen_runtime), timed on the device;
- on OpenCL the kernels' times are the device's own event timestamps (libtvmgen_opencl's profiling
  mode: ``tvmgen.opencl.profiling`` / ``tvmgen.opencl.kernel_times``, ``CL_QUEUE_PROFILING_ENABLE`` and
  ``clGetEventProfilingInfo``), mapped back to the VM function that launched each kernel; the host's
  clock would only time the (asynchronous) launches. The profile's ``clock`` says which clock it is.

:class:`Profile` turns the counts into rows (one per kernel: its Relax operators, kind, calls,
total and mean time, share of the whole run, GFLOP/s from the FLOPs recorded at compile time in
``kernels.json``), a summary per kind, a table, JSON and a bar chart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tvmgen.compiler.targets.platforms import DEVICE_TABLE
from tvmgen.core import kernel_table

VM_ROW = "VM builtins (allocation, shape checks)"

OPENCL_EVENTS = "device (OpenCL events)"  # tvmgen.profile_vm's clock on OpenCL
# The clocks a profile can come from, as the table names them.
CLOCKS = {
    "host": "this host's clock around each VM call",
    "device": "the device's steady clock around each VM call",
    "device host": "the device's host clock around each launch: a GPU runs kernels asynchronously, "
    "so these are launch costs",
    "device events": "the device's own event timestamps",
    OPENCL_EVENTS: "OpenCL event timestamps (CL_PROFILING_COMMAND_START to END, on the device)",
}
EVENT_CLOCKS = ("device events", OPENCL_EVENTS)


def clock_label(clock: str) -> str:
    return CLOCKS.get(clock, clock)


def _host_timed(device: str) -> bool:
    """Whether a host timer sees ``device``'s kernels themselves (CPU code, run synchronously), rather
    than their launches (a GPU's queue)."""
    known = DEVICE_TABLE.get(device)
    return known is not None and not known.gpu


@dataclass
class Profile:
    rows: list[dict]  # per kernel, slowest first; the VM's own builtins as one row of kind "vm"
    runs: int
    whole_run_ms: float  # median of the runs timed without the profiler
    device: str = "cpu"
    clock: str = "host"  # a key of CLOCKS: "host"/"device" clock around each call, OPENCL_EVENTS: the GPU's own
    extra: dict = field(default_factory=dict)
    kernels_median_ms: float = 0.0  # the kernels' time in the median profiled run: compared with whole_run_ms
    # the fastest plain run and the fastest profiled run's kernels: noise on a shared machine only adds
    # time, so these two compare more steadily than the medians (0.0 where not recorded)
    whole_run_min_ms: float = 0.0
    kernels_min_ms: float = 0.0
    peaks: dict | None = None  # this machine's (machine_peaks.Peaks.to_json()), where the profile was taken here

    @classmethod
    def from_counts(
        cls,
        counts: dict,
        runs: int,
        whole_run_ms: float,
        table: dict | None,
        device: str = "cpu",
        clock: str = "host",
        kernels_median_ms: float | None = None,
        medians_ns: dict | None = None,
        fastest_ms: tuple[float, float] = (0.0, 0.0),
    ) -> Profile:
        """``medians_ns``: each kernel's median time per run over the profiled runs, where it was
        recorded (here, by ``profile_vm``): the slow-kernel guard reads it instead of the mean."""
        rows, vm_calls, vm_ns = [], 0, 0
        weights: dict[str, int] = {}
        for c in (table or {}).get("constants", []):
            weights[c["kernel"]] = weights.get(c["kernel"], 0) + int(c["bytes"])
        for name, (calls, total_ns) in counts.items():
            if name.startswith(("vm.", "runtime.")):
                vm_calls, vm_ns = vm_calls + calls, vm_ns + total_ns
                continue
            ops, kind, flops = kernel_table.kind_of(name, table)
            total_ms = total_ns / 1e6 / runs
            per_run = calls / runs
            row = {
                "name": name,
                "ops": ops,
                "kind": kind,
                "calls": per_run,
                "total_ms": total_ms,
                "mean_us": total_ms * 1e3 / per_run if per_run else 0.0,
                "share": total_ms / whole_run_ms if whole_run_ms else 0.0,
                "flops": flops,
                "gflops": None,
                "weight_bytes": weights.get(name, 0),
            }
            if medians_ns and name in medians_ns:
                row["median_ms"] = medians_ns[name] / 1e6
            if flops and total_ms > 0 and (_host_timed(device) or clock in EVENT_CLOCKS):
                row["gflops"] = flops * per_run / (total_ms / 1e3) / 1e9
            rows.append(row)
        rows.sort(key=lambda r: -r["total_ms"])
        if vm_calls:
            total_ms = vm_ns / 1e6 / runs
            rows.append(
                {
                    "name": VM_ROW,
                    "ops": [],
                    "kind": "vm",
                    "calls": vm_calls / runs,
                    "total_ms": total_ms,
                    "mean_us": total_ms * 1e3 / (vm_calls / runs),
                    "share": total_ms / whole_run_ms if whole_run_ms else 0.0,
                    "flops": None,
                    "gflops": None,
                }
            )
        profile = cls(rows, runs, whole_run_ms, device, clock)
        profile.kernels_median_ms = kernels_median_ms if kernels_median_ms is not None else profile.kernels_ms
        profile.kernels_min_ms, profile.whole_run_min_ms = fastest_ms
        return profile

    @classmethod
    def from_device(cls, d: dict, table: dict | None, device: str) -> Profile:
        """From what the device's profiler returns (``tvmgen.profile_vm``; ``tvmgen-run --profile`` wraps
        it in ``{"device", "arch", "profile"}``)."""
        p = d.get("profile", d)
        # the device says which clock (OPENCL_EVENTS on OpenCL); older ones did not: the host's view of a GPU
        clock = p.get("clock") or ("device" if _host_timed(device) else "device host")
        profile = cls.from_counts(
            p["counts"],
            p["runs"],
            p["whole_run_ms"],
            table,
            device,
            clock,
            kernels_median_ms=p["kernels_median_ms"],
            fastest_ms=(p.get("kernels_min_ms", 0.0), p.get("whole_run_min_ms", 0.0)),
        )
        if "opencl_kernels" in p:  # each OpenCL kernel: [launches, event ns] over the runs
            profile.extra["opencl_kernels"] = p["opencl_kernels"]
        return profile

    def slow_kernels(self) -> list:
        """The slow-kernel guard's findings (``reports.slow_kernels``); none for a profile whose clock
        times launches rather than kernels (a GPU timed from the host)."""
        from tvmgen.reports import slow_kernels

        if not _host_timed(self.device) and self.clock not in EVENT_CLOCKS:
            return []
        from tvmgen.reports.machine_peaks import Peaks

        return slow_kernels.find(self.rows, self.whole_run_ms, peaks=Peaks.from_json(self.peaks))

    @property
    def kernels_ms(self) -> float:
        """The kernels' time per run (the VM's builtins not included)."""
        return sum(r["total_ms"] for r in self.rows if r["kind"] != "vm")

    @property
    def profiled_ms(self) -> float:
        return sum(r["total_ms"] for r in self.rows)

    def kinds(self) -> list[dict]:
        """Per kind of kernel: kernels, calls, time, share, GFLOP/s; slowest first."""
        by: dict[str, dict] = {}
        for r in self.rows:
            k = by.setdefault(
                r["kind"],
                {"kind": r["kind"], "kernels": 0, "calls": 0.0, "total_ms": 0.0, "flops": 0.0, "timed_flops_ms": 0.0},
            )
            k["kernels"] += 1
            k["calls"] += r["calls"]
            k["total_ms"] += r["total_ms"]
            if r["gflops"]:
                k["flops"] += r["flops"] * r["calls"]
                k["timed_flops_ms"] += r["total_ms"]
        out = []
        for k in sorted(by.values(), key=lambda k: -k["total_ms"]):
            gflops = k["flops"] / (k["timed_flops_ms"] / 1e3) / 1e9 if k["timed_flops_ms"] else None
            out.append(
                {
                    "kind": k["kind"],
                    "kernels": k["kernels"],
                    "calls": k["calls"],
                    "total_ms": k["total_ms"],
                    "share": k["total_ms"] / self.whole_run_ms if self.whole_run_ms else 0.0,
                    "gflops": gflops,
                }
            )
        return out

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "clock": self.clock,
            "runs": self.runs,
            "whole_run_ms": self.whole_run_ms,
            "kernels_ms": self.kernels_ms,
            "kernels_median_ms": self.kernels_median_ms,
            "whole_run_min_ms": self.whole_run_min_ms,
            "kernels_min_ms": self.kernels_min_ms,
            "profiled_ms": self.profiled_ms,
            "kernels": self.rows,
            "kinds": self.kinds(),
            "slow_kernels": [k.to_json() for k in self.slow_kernels()],
            **({"machine_peaks": self.peaks} if self.peaks else {}),
            **self.extra,
        }

    @classmethod
    def from_json(cls, d: dict) -> Profile:
        return cls(
            d["kernels"],
            d["runs"],
            d["whole_run_ms"],
            d.get("device", "cpu"),
            d.get("clock", "host"),
            kernels_median_ms=d.get("kernels_median_ms", 0.0),
            whole_run_min_ms=d.get("whole_run_min_ms", 0.0),
            kernels_min_ms=d.get("kernels_min_ms", 0.0),
            peaks=d.get("machine_peaks"),
        )

    # ------------------------------------------------------------------ output

    def table(self, top: int = 25) -> str:
        """A readable table: the slowest kernels, then the summary per kind."""
        lines = [
            f"profile: {self.runs} run(s) on {self.device}, times per run; whole run "
            f"{self.whole_run_ms:.3f} ms (median), its kernels {self.kernels_median_ms:.3f} ms "
            f"({self.kernels_median_ms / self.whole_run_ms:.0%}; median of the profiled runs)"
            if self.whole_run_ms
            else f"profile: {self.runs} run(s) on {self.device}",
            f"clock: {clock_label(self.clock)}",
        ]
        head = f"{'kernel':<52} {'kind':<13} {'calls':>5} {'total ms':>9} {'mean us':>9} {'share':>6} {'GFLOP/s':>8}"
        lines += [head, "-" * len(head)]
        shown = self.rows[:top]
        for r in shown:
            name = r["name"] if len(r["name"]) <= 52 else r["name"][:49] + "..."
            lines.append(
                f"{name:<52} {r['kind']:<13} {r['calls']:>5g} {r['total_ms']:>9.3f} {r['mean_us']:>9.1f} "
                f"{r['share']:>6.1%} {_gf(r['gflops']):>8}"
            )
            if r["ops"]:
                lines.append(f"  {'ops: ' + ' + '.join(r['ops'])}")
        if len(self.rows) > top:
            rest = self.rows[top:]
            lines.append(f"... {len(rest)} more kernel(s): {sum(r['total_ms'] for r in rest):.3f} ms")
        lines += ["", f"{'kind':<15} {'kernels':>7} {'calls':>6} {'total ms':>9} {'share':>6} {'GFLOP/s':>8}"]
        for k in self.kinds():
            lines.append(
                f"{k['kind']:<15} {k['kernels']:>7} {k['calls']:>6g} {k['total_ms']:>9.3f} {k['share']:>6.1%} "
                f"{_gf(k['gflops']):>8}"
            )
        if self.peaks:
            pk = self.peaks
            who = f"device {pk['device']!r}" if pk.get("device") else "this machine"
            reads = f"; one core reads {pk['read_gbs']:.1f} GB/s" if pk.get("read_gbs") else ""
            lines += [
                "",
                f"{who} (the slow-kernel guard's yardstick): a product compiled by tvmgen reaches "
                f"{pk['gflops']:.1f} GFLOP/s on {pk['threads']} thread(s){reads}",
            ]
        slow = self.slow_kernels()
        if slow:
            lines += ["", f"{len(slow)} slow kernel(s) (median of the profiled runs):"]
            lines += [f"! {k.line()}" for k in slow]
        return "\n".join(lines)

    def plot(self, path: Path, top: int = 20) -> None:
        """A horizontal bar chart of the slowest kernels (PNG)."""
        from tvmgen.core.errors import InputError

        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise InputError("--plot needs matplotlib", "pip install matplotlib") from e
        rows = [r for r in self.rows if r["kind"] != "vm"][:top][::-1]
        colours = dict(
            zip(kernel_table.KINDS, ("#3572a5", "#6a9f3a", "#c9503c", "#2a9d8f", "#8e6bb8", "#d9a441", "#888888"))
        )
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6))
        ax.barh(
            [_short(r["name"]) for r in rows],
            [r["total_ms"] for r in rows],
            color=[colours.get(r["kind"], "#888888") for r in rows],
        )
        for kind, colour in colours.items():
            if any(r["kind"] == kind for r in rows):
                ax.barh([0], [0], color=colour, label=kind)
        ax.set_xlabel(f"ms per run ({'OpenCL events' if self.clock == OPENCL_EVENTS else self.clock + ' clock'})")
        ax.set_title(f"slowest kernels on {self.device}: {self.kernels_ms:.2f} of {self.whole_run_ms:.2f} ms per run")
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def _gf(v) -> str:
    return f"{v:.1f}" if v else "-"


def _short(name: str) -> str:
    return name if len(name) <= 40 else name[:37] + "..."


# ------------------------------------------------------------------ here: the VM's instrument hook


def profile_vm(
    vm, entry: str, args: list, runs: int, sync=None, events=None, per_run: dict | None = None
) -> tuple[dict, list[float], list[float]]:
    """Time ``vm[entry](*args)`` ``runs`` times plain and ``runs`` times with the VM's instrument hook
    timing each call it makes (kernels and builtins), interleaved so that a busy machine slows
    both alike. Returns ``{name: [calls, total_ns]}``, each plain run's ms and each instrumented
    run's kernel ms (builtins left out). The hook is removed afterwards.

    ``events`` (OpenCL): ``(tvmgen.opencl.profiling, tvmgen.opencl.kernel_times)``; the profiled runs
    then take each kernel's time from its OpenCL event, ``{function: [VM calls, event ns]}`` per VM
    function that launched kernels, and ``events_out`` (the dict passed as ``events[2]`` when given)
    receives ``opencl_kernels`` and ``host_counts``. ``per_run`` (a dict, when given) receives each
    function's time in each profiled run, ``{name: [ns, ...]}`` (host clock)."""
    counts: dict[str, list] = {}
    started: list[int] = []
    clock = time.perf_counter_ns
    kernel_ns = [0]
    this_run: dict[str, int] = {}

    def instrument(func, name, before, ret, *call_args):
        if before:
            started.append(clock())
            return 0
        elapsed = clock() - started.pop()
        entry_ = counts.get(name)
        if entry_ is None:
            entry_ = counts[name] = [0, 0]
        entry_[0] += 1
        entry_[1] += elapsed
        this_run[name] = this_run.get(name, 0) + elapsed
        if not name.startswith(("vm.", "runtime.")):
            kernel_ns[0] += elapsed
        return 0

    plain, kernel_runs = [], []
    launches: dict[str, list] = {}
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            vm[entry](*args)
            if sync:
                sync()
            plain.append((time.perf_counter() - t0) * 1e3)
            if events:
                events[0](True)
                events[1]()  # nothing from before this run
            vm.set_instrument(instrument)
            kernel_ns[0] = 0
            this_run.clear()
            vm[entry](*args)
            if sync:
                sync()
            vm.set_instrument(None)
            if per_run is not None:
                for name, ns in this_run.items():
                    per_run.setdefault(name, []).append(ns)
            if events:
                ns = 0
                for name, (n, t) in events[1]().items():
                    k = launches.setdefault(str(name), [0, 0])
                    k[0], k[1] = k[0] + int(n), k[1] + int(t)
                    ns += int(t)
                events[0](False)
                kernel_runs.append(ns / 1e6)
            else:
                kernel_runs.append(kernel_ns[0] / 1e6)
    finally:
        vm.set_instrument(None)
        if events:
            events[0](False)
    if not events:
        return counts, plain, kernel_runs
    rows: dict[str, list] = {}
    for kernel, (n, t) in launches.items():
        fn = launching_function(kernel, counts)
        row = rows.setdefault(fn, [0, 0])
        row[0] = counts[fn][0] if fn in counts else max(row[0], n)
        row[1] += t
    if len(events) > 2:
        events[2].update(opencl_kernels=launches, host_counts=counts)
    return rows, plain, kernel_runs


def launching_function(kernel: str, functions) -> str:
    """The VM function that launched an OpenCL kernel: TVM names a PrimFunc's kernels ``<func>_kernel``,
    further ones ``<func>_kernel_1`` / ``<func>_kernel1``. The longest of ``functions`` (the names the VM
    called) that fits, else the name without its suffix (as ``tvmgen.profile_vm`` does)."""
    import re

    suffix = re.compile(r"_kernel(_?\d+)?")
    best = ""
    for name in functions:
        if (
            not name.startswith(("vm.", "runtime."))
            and len(name) > len(best)
            and kernel.startswith(name)
            and suffix.fullmatch(kernel[len(name) :])
        ):
            best = name
    if best:
        return best
    m = re.search(r"_kernel(_?\d+)?$", kernel)
    return kernel[: m.start()] if m and m.start() > 0 else kernel


def profile_host_model(model, inputs: dict, runs: int, table: dict | None) -> Profile:
    """Profile a runner.HostModel over ``runs`` runs (after one warm-up)."""
    arrays = model.check_inputs(inputs)
    args = [*model.device_inputs(arrays), *model.params]
    vm, entry = model.vm, model.manifest.vm["entry"]
    vm[entry](*args)  # warm-up
    model.dev.sync()
    events, clock = None, "host"
    detail: dict = {}
    if (
        DEVICE_TABLE[model.manifest.device].backend == "opencl"
    ):  # the kernels' own times, from libtvmgen_opencl's profiling mode
        import tvm

        on = tvm.get_global_func("tvmgen.opencl.profiling", allow_missing=True)
        times = tvm.get_global_func("tvmgen.opencl.kernel_times", allow_missing=True)
        if on is not None and times is not None:
            events, clock = (on, times, detail), OPENCL_EVENTS
    per_run: dict[str, list] = {}
    counts, plain, kernel_runs = profile_vm(vm, entry, args, runs, model.dev.sync, events, per_run)
    profile = Profile.from_counts(
        counts,
        runs,
        float(np.median(plain)),
        table,
        model.manifest.device,
        clock,
        kernels_median_ms=float(np.median(kernel_runs)),
        fastest_ms=(float(np.min(kernel_runs)), float(np.min(plain))),
        medians_ns={name: float(np.median(ns)) for name, ns in per_run.items()} if events is None else None,
    )
    if detail:
        profile.extra["opencl_kernels"] = detail["opencl_kernels"]
    if not DEVICE_TABLE[model.manifest.device].gpu:  # the guard's second yardstick: this machine's peaks
        from tvmgen.reports import machine_peaks

        peaks = machine_peaks.measure()
        profile.peaks = peaks.to_json() if peaks else None
    return profile


# --check's profile for the guard: a few runs (medians), fewer for a slow model
GUARD_RUNS, GUARD_BUDGET_MS = 5, 1500.0


def guard_host_model(model, inputs: dict, artifact_dir: Path) -> list:
    """`compile --check` on a build that runs here (a runner.HostModel that has run once): profile a
    few runs kernel by kernel and print the slow kernels. A warning, not a failure: the timings are
    this machine's, and the outputs are right."""
    from tvmgen.core import log as logs

    first_ms = model.timings.first_run_ms  # the check's run (warming up: an upper bound)
    runs = max(3, min(GUARD_RUNS, int(GUARD_BUDGET_MS / max(first_ms, 1e-3) / 2)))  # plain + profiled runs
    with logs.step(f"Profiling {runs} runs kernel by kernel (slow-kernel guard)"):
        profile = profile_host_model(model, inputs, runs, kernel_table.load(artifact_dir))
    return say_slow_kernels(
        profile, f"kernel speed: no slow kernel (median of {runs} profiled runs; `tvmgen run --profile` for the table)"
    )


def say_slow_kernels(profile: Profile, none: str) -> list:
    """The guard's slow kernels in ``profile``, each printed on a line of its own (``none`` printed where there
    is none)."""
    from rich.markup import escape

    from tvmgen.core import log as logs

    slow = profile.slow_kernels()
    for k in slow:
        logs.console.print(f"  [yellow]![/] {escape(k.line())}", highlight=False)
    if not slow:
        logs.console.print(f"  [dim]{escape(none)}[/]")
    return slow
