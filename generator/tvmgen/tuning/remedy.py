"""The slow-kernel remedy: `tvmgen compile` re-schedules the kernels its guard finds far below this machine's speed.

A host build runs here, so ``compile`` profiles it kernel by kernel (``reports.profile.guard_host_model``).
Where the guard finds a slow kernel (``reports.slow_kernels``: far below the model's other kernels of its
kind, or below this machine's measured peak), the remedy:

1. searches schedules for those kernels alone with MetaSchedule (``tuning.tune`` with ``only``), each
   candidate built with the platform's linker and timed here with the threads the model runs with, for a
   budget of seconds shared among the kernels (``--remedy-budget``, ``DEFAULT_BUDGET_S``). tvmgen's own
   default schedule is measured first as one of the candidates, so the search's best is never the slower;
2. records every measured candidate in the tuning database (``--tuning-db``, else ``$TVMGEN_TUNING_DIR`` or
   ``~/.local/state/tvmgen/tuning``, the one `tvmgen tune` fills): the next compile of the model (or of
   another with the same kernel) finds them and spends no trials;
3. builds the model again with that database and times both builds here, run for run in turn (medians):
   the faster one becomes the artifact, and the output says what changed and what it cost.

Kernels the guard finds fast are not searched, so a model without a slow kernel costs only its profile.
Cross builds (android, linux-aarch64) are remedied on a device over RPC (``--remedy-key`` with a tracker or
proxy: the servers `tvmgen bench` and `tvmgen tune` use): the guard profiles the build there on the device's
clock, the candidates are built here with the platform's linker and timed there, and both builds are timed
there. Without a device they are not remedied: their kernels' speed is not measured here, and neither ranking
at hand orders their candidates as the CPU would: ``benchmarks/cross_ranking.py`` ranks candidates for a CPU
whose own timings are known by qemu's timings and by MetaSchedule's cost model trained on that CPU's runs, and
neither picks the fast ones (docs/cpu.md has its table). An iOS device runs only the code linked into its app.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("tvmgen.remedy")

# why a cross build's candidates are ranked only on the device (docs/cpu.md has the measurements)
CROSS_RANKING = (
    "qemu's timings and MetaSchedule's cost model rank their schedules unlike the CPU (measured: docs/cpu.md, "
    "ranking a cross build's candidates)"
)

DEFAULT_BUDGET_S = 60.0
# trials per kernel at most: past a few rounds MetaSchedule's CPU search rarely finds more, and a generous
# budget on a small kernel ends early instead of measuring the same schedules again
MAX_TRIALS = 128
KEEP_BELOW = 0.97  # the rebuilt model replaces the first only when its median run is at least 3% shorter
TIMED_RUNS = 15  # runs of each build, taken in turn
ROUNDS = 3  # on a device over RPC: turns of TIMED_RUNS / ROUNDS runs, each build uploaded and loaded anew


@dataclass
class Outcome:
    slow: list[str]  # the guard's slow kernels
    searched: list[str] = field(default_factory=list)  # the tasks searched (MetaSchedule's names)
    unmatched: list[str] = field(default_factory=list)  # slow kernels with no task to search
    best_us: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # task: default, best
    searched_before: dict[str, int] = field(default_factory=dict)  # task: its trials in the database
    # task: (µs per call of its default schedule on its own, µs per call inside the model): not searched
    isolated: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    new_trials: int = 0
    before_ms: float | None = None  # the whole model's median run, first build
    after_ms: float | None = None  # and rebuilt with the database
    kept: bool = False  # the rebuilt model is the artifact
    failed: str | None = None  # why the rebuilt model was not used (it did not build or failed the check)
    searching: bool = False  # ``failed`` happened in the search, before any rebuild
    seconds: float = 0.0
    database: Path | None = None


def task_name(kernel: str) -> str:
    """The MetaSchedule task a built kernel came from: the kernel is the task's function, renamed by the
    weight-packing split (``_prepacked``) where it packs its constant weights at compile time."""
    return kernel.removesuffix("_prepacked")


def applies(target, schedules: bool, objects_only: bool, on_device: bool = False) -> str | None:
    """Why the remedy cannot run for this build (a ``BuildTarget``; None: it can). ``on_device``: its kernels
    are profiled and timed on a device over RPC (``--remedy-key``) instead of here."""
    from tvmgen.compiler.targets.platforms import missing_cpu_features

    name = f"{target.platform.name}/{target.device}"
    kind = target.kind  # the device table: CPU code, all of the model, tuned by MetaSchedule's CPU rules
    if kind.target_kind != "llvm" or kind.partitions or not kind.tunable:
        return f"{name} kernels are not timed here: `tvmgen tune --key` times them on the device"
    if on_device and target.platform.name.startswith("ios"):
        return "an iOS device runs only the code linked into its app, so candidates cannot be uploaded to it"
    if target.platform.name != "host" and not on_device:
        return (
            f"{name} kernels are not timed here, and {CROSS_RANKING}: --remedy-key times them on the device "
            "(as `tvmgen tune --key` does)"
        )
    missing = [] if on_device else missing_cpu_features(target.spec)
    if missing:
        return f"its code uses {', '.join(missing)}, which this CPU lacks"
    if not schedules:
        return "--schedules none keeps TVM's own lowering"
    if objects_only:
        return "--objects-only writes no library to time"
    return None


def run_here(staged: Path, seed: int) -> tuple:
    """The staged host build loaded and run once on seeded inputs: (HostModel, inputs), as --check's run
    gives them to the guard."""
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    model = HostModel(staged)
    inputs = random_inputs(model.inputs, seed)
    model.run(inputs)
    return model, inputs


def search(
    imported, target, slow: Sequence, budget_s: float, root: Path, compiler: Path, threads: int, device=None
) -> tuple[Outcome, object]:
    """Search schedules for the slow kernels' tasks (MetaSchedule, timed here, or on ``device``: a
    ``tune.Device`` over RPC); returns the outcome so far and tune's Summary."""
    import os

    from tvmgen.tuning import tune

    started = time.monotonic()
    names = [k.name for k in slow]
    wanted = {task_name(n) for n in names}
    summary = tune.tune(
        tune.bound(imported),
        target,
        MAX_TRIALS,
        root,
        device or tune.Device(),
        threads or os.cpu_count() or 1,
        compiler,
        only=wanted,
        deadline=started + budget_s,
        once=True,
        in_model_us={task_name(k.name): k.ms * 1e3 / max(1, getattr(k, "calls", 1)) for k in slow},
    )
    found = {t.name for t in summary.tasks}
    outcome = Outcome(
        names,
        searched=[t.name for t in summary.tasks],
        unmatched=[n for n in names if task_name(n) not in found],
        best_us={t.name: (t.default_us, t.best_us) for t in summary.tasks},
        searched_before={t.name: t.spent for t in summary.tasks if t.searched_before},
        isolated={t.name: (t.isolated_us, t.in_model_us) for t in summary.tasks if t.isolated_us is not None},
        new_trials=summary.new_trials,
        database=summary.directory,
    )
    return outcome, summary


def on_device(device, target, staged: Path, seed: int) -> tuple[list, int]:
    """The guard on a device over RPC (a ``tune.Device``): the staged build uploaded there, run and profiled
    kernel by kernel on the device's clock, and held to the model's own kernels, the kinds' floors and the
    device's peak: tvmgen's probe product cross-built for its CPU (``target``'s platform) and timed there
    (``reports.slow_kernels``); (the slow kernels, the device's thread count)."""

    from tvmgen.compiler.targets.platforms import BuildTarget
    from tvmgen.core import log as logs
    from tvmgen.remote import bench
    from tvmgen.reports import machine_peaks
    from tvmgen.reports.profile import GUARD_RUNS, Profile, say_slow_kernels

    def guard(remote, info):
        threads = int(remote.get_function("runtime.NumThreads")())
        return threads, bench.bench_model(remote, info, staged, device.key, GUARD_RUNS, 1, 0, seed, profile=True)

    threads, report = bench.in_session(device.rpc_target(), guard, quiet=True)
    profile = Profile.from_json(report.extra["profile"])
    with logs.step(f"Timing tvmgen's probe product on device {device.key!r} (its peak, the guard's yardstick)"):
        probe = machine_peaks.probe_artifact(BuildTarget(target.platform, "cpu"))
        fastest_ms = min(
            bench.in_session(
                device.rpc_target(),
                lambda remote, info: bench.bench_model(remote, info, probe, device.key, machine_peaks.RUNS, 1, 0, seed),
                quiet=True,
            ).warm_ms
        )
    peaks = machine_peaks.Peaks(
        machine_peaks.probe_flops() / (fastest_ms / 1e3) / 1e9,
        0.0,  # no bandwidth line: NumPy does not run on the device
        threads,
        f"tvmgen's probe product on device {device.key!r} (fastest of {machine_peaks.RUNS} runs)",
        device.key,
    )
    profile.peaks = peaks.to_json()
    return say_slow_kernels(
        profile, f"kernel speed on device {device.key!r}: no slow kernel ({GUARD_RUNS} profiled runs)"
    ), threads


def time_builds_on(device, seed: int) -> Callable[[Path, Path], tuple[float, float]]:
    """``time_builds`` on a device over RPC: each build uploaded and timed there in ROUNDS turns (a, b, a, b,
    ...), so a slow moment of the device falls on both; the medians of each build's TIMED_RUNS runs (ms)."""

    def timer(first: Path, second: Path) -> tuple[float, float]:
        import numpy as np

        from tvmgen.remote import bench

        def timed(build: Path):
            return lambda remote, info: bench.bench_model(
                remote, info, build, device.key, TIMED_RUNS // ROUNDS, 1, 0, seed
            )

        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(ROUNDS):
            for build, out in zip((first, second), times):
                out += bench.in_session(device.rpc_target(), timed(build), quiet=True).warm_ms
        return float(np.median(times[0])), float(np.median(times[1]))

    return timer


def time_builds(
    first: Path, second: Path, inputs: dict, threads: int = 0, runs: int = TIMED_RUNS
) -> tuple[float, float]:
    """The median run (ms) of each of two builds of a model, timed here in turn, run for run: a shared
    machine's slow moments fall on both."""
    import numpy as np

    from tvmgen.runtime.runner import HostModel

    a, b = HostModel(first, threads), HostModel(second, threads)
    for m in (a, b):
        m.run(inputs)  # loaded, its thread pool started
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for m, out in zip((a, b), times):
            t0 = time.perf_counter()
            m.run(inputs)
            out.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times[0])), float(np.median(times[1]))


def replace_contents(directory: Path, new: Path) -> None:
    """``directory``'s files become ``new``'s (both artifact directories; ``new`` is emptied)."""
    import shutil

    for entry in list(directory.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in list(new.iterdir()):
        shutil.move(str(entry), directory / entry.name)


def apply(
    imported,
    target,
    staged: Path,
    slow: Sequence,
    inputs: dict,
    *,
    budget_s: float,
    root: Path,
    compiler: Path,
    rebuild: Callable[[Path, Path], None],
    scratch: Path,
    threads: int,
    device=None,
    timer: Callable[[Path, Path], tuple[float, float]] | None = None,
) -> Outcome:
    """The remedy for the staged artifact ``staged`` (see the module doc). ``rebuild(database_root, out)``
    builds the model again into ``out`` with the database (and checks it where compile checks);
    ``inputs``: the inputs the guard profiled with; ``threads``: the model's thread pool (the candidates
    are timed with as many). The staged directory's contents are replaced by the
    rebuilt model's where that one is faster. ``device`` (a ``tune.Device``) and ``timer`` (``time_builds_on``):
    the candidates and both builds are timed on that device over RPC instead of here."""
    from tvmgen.core import interrupts
    from tvmgen.core import log as logs

    started = time.monotonic()
    try:
        with logs.step(
            f"Searching schedules for {len(slow)} slow kernel(s) (MetaSchedule, timed {_where(device)}, "
            f"budget {budget_s:.0f} s; --remedy-budget)"
        ):
            outcome, _summary = search(imported, target, slow, budget_s, root, compiler, threads, device)
    except Exception as e:  # the build stands as it is: built, and checked where --check asked
        interrupts.reraise_if_interrupted(e)
        log.info("the remedy's search failed", exc_info=True)
        outcome = Outcome([k.name for k in slow], failed=f"{type(e).__name__}: {e}".splitlines()[0], searching=True)
        outcome.database, outcome.seconds = root, time.monotonic() - started
        report(outcome)
        return outcome
    outcome.database = root
    for name in outcome.unmatched:
        logs.console.print(f"  [yellow]![/] remedy: no schedulable task for kernel {name} (it keeps its schedule)")
    improved = any(
        best is not None and (default is None or best < default * KEEP_BELOW)
        for default, best in outcome.best_us.values()
    )
    if outcome.searched and improved:
        out = Path(scratch) / "remedied"
        logs.console.print("  remedy: building the model again with the schedules found")
        try:
            rebuild(root, out)  # its own steps print as compile's do
        except Exception as e:  # the first build stands: it was built and checked
            interrupts.reraise_if_interrupted(e)
            log.info("the remedy's build failed", exc_info=True)
            outcome.failed = f"{type(e).__name__}: {e}".splitlines()[0]
        else:
            try:
                with logs.step(f"Timing both builds {_where(device)}, run for run in turn"):
                    outcome.before_ms, outcome.after_ms = (
                        timer(staged, out) if timer is not None else time_builds(staged, out, inputs, threads)
                    )
            except Exception as e:  # a device lost now: the first build stands, built and checked
                interrupts.reraise_if_interrupted(e)
                log.info("timing the two builds failed", exc_info=True)
                outcome.failed = f"timing the two builds: {type(e).__name__}: {e}".splitlines()[0]
            else:
                outcome.kept = outcome.after_ms < outcome.before_ms * KEEP_BELOW
                if outcome.kept:
                    replace_contents(staged, out)
    outcome.seconds = time.monotonic() - started
    report(outcome)
    return outcome


def _where(device) -> str:
    return f"on device {device.key!r}" if device is not None and device.remote else "here"


def report(o: Outcome) -> None:
    """What the remedy changed, and what it cost."""
    from tvmgen.core.log import console

    for name, (alone, inside) in o.isolated.items():
        console.print(
            f"  [yellow]![/] remedy: kernel {name} runs in {alone:.1f} µs on its own against {inside or 0:.1f} µs "
            "a call inside the model: its schedule is not what makes it slow there, so it was not searched. "
            "Likely: denormal values in its inputs (x86 runs them by microcode, many times slower) or caches "
            "another kernel left cold"
        )
    for name, (default, best) in o.best_us.items():
        if name in o.isolated:
            continue
        b = f"{best / 1e3:.3f} ms" if best is not None else "no working candidate"
        if name in o.searched_before:
            console.print(
                f"  remedy: kernel {name}: searched by an earlier compile ({o.searched_before[name]} trials in the "
                f"database, best {b}); `tvmgen tune` searches further"
            )
            continue
        d = f"{default / 1e3:.3f} ms" if default is not None else "measured before"
        console.print(f"  remedy: kernel {name}: tvmgen's schedule {d}, best found {b}")
    where = f"{o.new_trials} new trial(s) recorded in {o.database}"
    if o.failed and o.searching:
        console.print(
            f"  [yellow]![/] remedy: the search failed ({o.failed}); the build is unchanged "
            f"({o.seconds:.0f} s; see the log, and please report it)"
        )
        return
    if o.failed:
        console.print(
            f"  [yellow]![/] remedy: the build with the schedules found failed ({o.failed}); the first build "
            f"stands ({o.seconds:.0f} s, {where}; see the log, and please report it)"
        )
        return
    if o.before_ms is None or o.after_ms is None:
        searched = [n for n in o.best_us if n not in o.isolated]
        what = "nothing faster than tvmgen's schedules found; " if searched else ""
        console.print(f"  remedy: {what}the build is unchanged ({o.seconds:.0f} s, {where})")
        return
    verdict = "rebuilt with the schedules found" if o.kept else "kept the first build (not faster)"
    console.print(
        f"  [green]✓[/] remedy: {verdict}: the model runs in {o.after_ms:.3f} ms against {o.before_ms:.3f} ms "
        f"({o.before_ms / o.after_ms:.2f}x; medians of {TIMED_RUNS} runs each, in turn) "
        f"({o.seconds:.0f} s, {where})"
    )
