"""`tvmgen tune`: MetaSchedule tuning of a model's operators, into a database `compile` reuses.

The tasks are the fused TIR functions of the module ``compile`` schedules: for CPU targets the one
``compiler.cpu.prepare_passes`` makes, for OpenCL the one ``compiler.gpu.prepare_passes`` makes
(TVM's generic GPU pipeline before dlight), so ``MetaScheduleApplyDatabase`` finds them there.
Candidates are built here with the platform's own linker (GPU ones: the OpenCL source inside a host
library) and timed either here (LocalRunner, CPU only) or on a device over RPC (the project's
tracker or proxy and native device server, which loads libtvmgen_opencl for OpenCL).

The database's layout (a directory per target under one root) is ``compiler.database``'s.

``--trials N`` is a budget per task. Every measured candidate is a record, so a second run
counts the trials already spent and only tunes what is left (resume).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.compiler.targets.database import is_gpu, meta_schedule, open_database, target_name, target_spec
from tvmgen.compiler.targets.platforms import tunable
from tvmgen.core.errors import InputError, ToolMissingError
from tvmgen.remote.tvm_server import torchless_workers
from tvmgen.tuning.tune_measure import Device, builder, candidate_runner

log = logging.getLogger("tvmgen.tune")

# MetaSchedule's loggers (task scheduler, search) write to tvmgen's log file, never the console.
MS_LOGGER = "tvm.s_tir.meta_schedule"


# ------------------------------------------------------------------ tuning


@dataclass
class TaskState:
    name: str
    weight: int
    spent: int = 0
    best_us: float | None = None  # best measured latency of one call
    default_us: float | None = None  # tvmgen's default schedule, measured in this run
    searched_before: bool = False  # tune(once=True): left as the database has it
    in_model_us: float | None = None  # its time per call inside the model, where the caller measured it
    isolated_us: float | None = None  # set where its default schedule alone ran far faster than that: not searched

    @property
    def weighted_us(self) -> float | None:
        return None if self.best_us is None else self.best_us * self.weight


@dataclass
class Summary:
    target: str
    directory: Path
    tasks: list[TaskState] = field(default_factory=list)
    new_trials: int = 0

    @property
    def total_us(self) -> float | None:
        """The sum of the tasks' best latencies times their weights (None until every task has one)."""
        ws = [t.weighted_us for t in self.tasks]
        known = [w for w in ws if w is not None]
        return None if not ws or len(known) != len(ws) else sum(known)


def prepare(mod, target):
    """The module compile schedules: TVM's preparation and tvmgen's layout passes (compiler.cpu);
    for a GPU, TVM's generic GPU pipeline up to dlight (compiler.gpu), after the GPU forms of
    recurrent layers (as compiler.build makes them)."""
    import tvm

    from tvmgen.compiler import cpu, gpu, recurrent

    if is_gpu(target):
        if not tunable(target):
            raise InputError(
                f"tuning does not handle {target_name(target)}: TVM builds it with its own pipeline",
                "tune --device opencl with --gpu-family generic or mali, or --device cpu",
            )
        mod = recurrent.lower(mod, gpu=True)
        with target:
            return tvm.transform.Sequential(gpu.prepare_passes(target))(mod)
    mod = recurrent.lower(mod)
    with target:
        return tvm.transform.Sequential(cpu.prepare_passes(target))(mod)


def tuning_target(target, num_cores: int):
    """MetaSchedule needs the core count of the machine that runs the candidates (CPU); a GPU
    target is used as it is, with its host (its thread limits, e.g. max_threads_per_block, bound
    the search's thread tiles)."""
    from tvm.target import Target

    if is_gpu(target):
        return target
    return Target({**target_spec(target), "num-cores": num_cores})


def _records_by_workload(database) -> dict:
    import tvm_ffi

    counts: dict[int, int] = {}
    best: dict[int, float] = {}
    for rec in database.get_all_tuning_records():
        h = tvm_ffi.structural_hash(rec.workload.mod)
        counts[h] = counts.get(h, 0) + 1
        secs = [float(s) for s in rec.run_secs or []]
        if secs and max(secs) < 1e9:
            mean = sum(secs) / len(secs)
            best[h] = min(best.get(h, mean), mean)
    return {h: (counts[h], best.get(h)) for h in counts}


def tune(
    mod,
    target,
    trials: int,
    root: Path,
    device: Device,
    num_cores: int,
    compiler: Path,
    on_progress=None,
    seed: int = 0,
    only: Collection[str] | None = None,
    deadline: float | None = None,
    once: bool = False,
    in_model_us: dict[str, float] | None = None,
) -> Summary:
    """Tune every task of ``mod`` (bound weights) to ``trials`` measured candidates; returns the summary.
    Each task's default schedule is measured and recorded first (``seed_default``). ``only``: the names of
    the tasks to tune (the others are left out of the summary); ``deadline`` (``time.monotonic()``): no new
    round of candidates starts after it, so a budget of seconds ends within one round of it. ``once``: a task
    with records beyond its default schedule's was searched before, and is not searched again.
    ``in_model_us``: a task's time per call as measured inside the model; where its default schedule runs
    ``ISOLATION_RATIO`` times faster on its own, the search is skipped (``TaskState.isolated_us``): the
    schedule is not what makes it slow there (its inputs are: denormal values, cold caches)."""
    import tvm_ffi

    ms = meta_schedule()
    _log_to_file()
    database = open_database(root, target, create=True)
    summary = Summary(target_name(target), Path(root) / target_name(target))
    ttarget = tuning_target(target, num_cores)
    extracted = ms.relax_integration.extract_tasks(prepare(mod, target), ttarget)
    if not extracted:
        return summary
    done = _records_by_workload(database)
    contexts = []
    for i, task in enumerate(extracted):
        if task.mod.attrs is not None and task.mod.attrs.get("tirx.is_scheduled", False):
            continue  # scheduled before the tuning step: compile keeps that schedule
        if only is not None and task.task_name not in only:
            continue
        ctx = ms.TuneContext(
            mod=task.dispatched[0],
            target=ttarget,
            space_generator="post-order-apply",
            # a deadline measures rounds of DEADLINE_ROUND: a population for a round, not the whole budget
            search_strategy=_search(ms, trials) if deadline is None else _search(ms, DEADLINE_ROUND, DEADLINE_ITERS),
            task_name=task.task_name,
            logger=logging.getLogger(f"{MS_LOGGER}.tvmgen.task{i}"),
            rand_state=seed + i,
            num_threads=_search_threads(),
        ).clone()
        spent, best = done.get(tvm_ffi.structural_hash(ctx.mod), (0, None))
        state = TaskState(task.task_name, int(task.weight), spent, None if best is None else best * 1e6)
        state.searched_before = once and spent > 1
        state.in_model_us = (in_model_us or {}).get(task.task_name)
        summary.tasks.append(state)
        contexts.append(ctx)
    with _candidate_threads(None if device.remote else num_cores), torchless_workers():
        return _tune_contexts(ms, contexts, summary, database, target, trials, device, compiler, on_progress, deadline)


def _search_threads() -> int:
    """The search and its cost model run here, on every core of this machine, whatever thread
    count the candidates are timed with (with --num-cores 1 they were single-threaded, and slow)."""
    return os.cpu_count() or 1


@contextlib.contextmanager
def _candidate_threads(num_cores: int | None):
    """Time local candidates with the thread count the tuned code will run with: TVM_NUM_THREADS
    for the runner's worker processes (started inside this block). A device over RPC uses its own."""
    if num_cores is None:
        yield
        return
    before = os.environ.get("TVM_NUM_THREADS")
    os.environ["TVM_NUM_THREADS"] = str(num_cores)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = before


def _tune_contexts(ms, contexts, summary, database, target, trials, device, compiler, on_progress, deadline=None):
    """Tune every task; the candidates' libraries are built into a scratch folder removed afterwards."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tvmgen-tune-") as scratch:
        build = builder(compiler, Path(scratch))
        return _tune_with(ms, contexts, summary, database, target, trials, device, build, on_progress, deadline)


# A default schedule that runs this many times faster on its own than inside the model is not slow
# because of its schedule: a search (timed on its own, on other inputs) could not see the difference.
ISOLATION_RATIO = 4.0

# Where a deadline bounds the search, rounds are small, since a round that starts before the deadline runs
# to its end (each is one MetaSchedule call): DEADLINE_ROUND candidates, from a population evolved
# DEADLINE_ITERS times. A round's cost is the search (population x generations, on every core) plus one build
# and one timed run per candidate; 4 generations of a 128-candidate population for 16 candidates made a
# single round several times a budget of 20 s. Later rounds start from the database's best, so small rounds
# still evolve.
DEADLINE_ROUND = 8
DEADLINE_ITERS = 2


def _tune_with(ms, contexts, summary, database, target, trials, device, build, on_progress, deadline=None):
    from tvmgen.compiler.cpu import schedules

    runner = candidate_runner(ms, device)
    cost_model = _cost_model(ms, summary.directory / "cost_model.tar", _search_threads())
    progress = _ProgressCallback(summary, on_progress, device)
    if on_progress:
        on_progress(summary, None)
    shape = None if is_gpu(target) else schedules.cpu_shape(target)
    for i, (ctx, state) in enumerate(zip(contexts, summary.tasks)):
        us = seed_default(ms, ctx, shape, database, build, runner, device)
        if us is not None:  # a measured candidate like any other: it counts against --trials
            state.default_us, state.spent = us, state.spent + 1
            summary.new_trials += 1
            state.best_us = us if state.best_us is None else min(state.best_us, us)
        left = 0 if state.searched_before else trials - state.spent
        if us is not None and state.in_model_us is not None and us * ISOLATION_RATIO < state.in_model_us:
            state.isolated_us, left = us, 0
        if left <= 0:
            if us is not None and on_progress:  # the default schedule was this run's only trial
                on_progress(summary, i, True)
            continue
        progress.current = i
        if on_progress:
            on_progress(summary, i)
        # a deadline is shared among the tasks left: the first one does not take it all
        until = None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / (len(contexts) - i)
        # a round is started only where at least half of one like the last fits; the first always runs (a
        # loaded machine can spend the budget on the default schedule's measurement alone)
        last_round, first = 0.0, True
        while left > 0 and (until is None or first or time.monotonic() + last_round / 2 < until):
            first = False
            spent, round_started = state.spent, time.monotonic()
            batch = left if until is None else min(left, DEADLINE_ROUND)
            try:
                ms.tune.tune_tasks(
                    tasks=[ctx],
                    task_weights=[1.0],
                    work_dir=str(summary.directory),
                    max_trials_global=batch,
                    max_trials_per_task=batch,
                    num_trials_per_iter=min(batch, 32),
                    builder=build,
                    runner=runner,
                    cost_model=cost_model,
                    database=database if shape is not None else _search_view(database),
                    measure_callbacks=[progress.hook, *ms.measure_callback.MeasureCallback.create("default")],
                    task_scheduler="round-robin",
                )
            except Exception:
                if progress.failure is not None:
                    raise progress.failure from None
                raise
            if until is None or state.spent == spent:
                break  # one call for the whole budget; or the search space is spent
            left, last_round = trials - state.spent, time.monotonic() - round_started
        # the search space ran out before the budget: nothing more to try
        if state.spent < trials and (until is None or time.monotonic() < until):
            log.info("task %s: the search produced %d candidates of %d", state.name, state.spent, trials)
        if cost_model.booster is not None:  # a resumed run starts with what this one learnt
            cost_model.save(str(summary.directory / "cost_model.tar"))
        if on_progress:
            on_progress(summary, i, True)
    return summary


def default_schedule(ctx, shape):
    """The schedule ``compile`` gives the task without a database: tvmgen's default (CPU, ``shape``
    is the CPU's) or dlight's (GPU, ``shape`` None); None when there is none, or (GPU) when its
    trace does not replay into the same function (a record must replay)."""
    from tvmgen.compiler import gpu
    from tvmgen.compiler.cpu import schedules

    if shape is not None:
        sch = schedules.default_schedule(ctx.mod, shape)
        return None if sch is None else schedules.with_packed_weights(sch)  # as compile (and MetaSchedule) does
    import tvm
    from tvm import s_tir

    try:
        sch = gpu.default_schedule(ctx.mod, ctx.target)
        if sch is None:
            return None
        replay = s_tir.Schedule(ctx.mod)
        sch.trace.apply_to_schedule(replay, remove_postproc=False)
        tvm.ir.assert_structural_equal(replay.mod, sch.mod)
    except Exception as e:
        log.info("task %s: dlight's schedule is not a replayable record (%s)", ctx.task_name, e)
        return None
    return sch


def seed_default(ms, ctx, shape, database, build, runner, device: Device) -> float | None:
    """Measure the default schedule of the task (tvmgen's on CPU, dlight's on GPU) like any
    candidate and record it (once).

    The database's best for the task is then never slower than what ``compile`` does without
    it, and the search's first population starts from a good schedule. Returns its latency (us),
    or None when it was recorded before, has no default schedule, or failed to build or run.
    """
    sch = default_schedule(ctx, shape)
    if sch is None:
        return None
    trace = str(sch.trace.as_json(remove_postproc=True))
    workload = database.commit_workload(ctx.mod)
    for rec in database.get_top_k(workload, 1 << 30):
        if str(rec.trace.as_json(remove_postproc=True)) == trace:
            return None
    args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    (built,) = build.build([ms.builder.BuilderInput(sch.mod, ctx.target)])
    if built.error_msg:
        log.warning(
            "task %s: the default schedule did not build: %s",
            ctx.task_name,
            " ".join(str(built.error_msg).splitlines()[-1:]),
        )
        return None
    dev_type = "cpu" if shape is not None else ctx.target.kind.name  # as MetaSchedule names it for its candidates
    (future,) = runner.run([ms.runner.RunnerInput(built.artifact_path, dev_type, args_info)])
    result = future.result()
    if result.error_msg or not result.run_secs:
        last = " ".join([ln for ln in str(result.error_msg).splitlines() if ln.strip()][-1:])
        if device.remote:
            from tvmgen.remote.rpc import RpcError

            raise RpcError(
                f"every candidate failed on device {device.key!r}: {last}",
                "the device server may have stopped; see its log, then rerun (tuning resumes)",
            )
        log.warning("task %s: the default schedule did not run: %s", ctx.task_name, last)
        return None
    secs = [float(x) for x in result.run_secs]
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, secs, ctx.target, args_info))
    return sum(secs) / len(secs) * 1e6


def _search_view(database):
    """The database as MetaSchedule's GPU search sees it: without dlight's seeds, which are records
    (``compile`` applies the best one, so a tuned kernel is never slower than dlight's) but not
    search material. Its search replays the best records and runs its post-processors on them,
    and RewriteUnboundBlock aborts the whole search on some of dlight's schedules ("Unsupported
    case, where blockIdx is bound but threadIdx is not", seen on a mean); a schedule without
    sampled decisions would give its mutators nothing to change anyway."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.database import PyDatabase

    def searched(record) -> bool:
        return any(inst.kind.name.startswith("Sample") for inst in record.trace.insts)

    @derived_object
    class SearchView(PyDatabase):
        def has_workload(self, mod):
            return database.has_workload(mod)

        def commit_workload(self, mod):
            return database.commit_workload(mod)

        def commit_tuning_record(self, record):
            database.commit_tuning_record(record)

        def get_top_k(self, workload, top_k):
            return [r for r in database.get_top_k(workload, 1 << 30) if searched(r)][:top_k]

        def get_all_tuning_records(self):
            return database.get_all_tuning_records()

        def __len__(self):
            return len(database)

    return SearchView()


def _cost_model(ms, path: Path, threads: int):
    """MetaSchedule's XGBoost cost model, trained on the target's earlier runs when they saved it."""
    model = ms.cost_model.XGBModel(num_tuning_cores=threads)
    if path.is_file():
        try:
            model.load(str(path))
        except Exception as e:
            log.warning("cannot load the saved cost model %s (%s); starting untrained", path, e)
            model = ms.cost_model.XGBModel(num_tuning_cores=threads)
    return model


def _search(ms, trials: int, generations: int = 4):
    """MetaSchedule's evolutionary search, its population scaled down for small budgets (its
    default of 512 candidates per round costs more than a handful of trials measure); ``generations``:
    its evolution steps per round (MetaSchedule's default 4)."""
    population = min(512, max(32, 8 * trials))
    return ms.search_strategy.EvolutionarySearch(
        population_size=population, init_min_unmeasured=min(50, population // 2), genetic_num_iters=generations
    )


class _ProgressCallback:
    """A MetaSchedule measure callback that counts trials and keeps the best latency per task."""

    def __init__(self, summary: Summary, on_progress, device: Device):
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

        outer = self
        self.summary, self.on_progress, self.device, self.current = summary, on_progress, device, 0
        self.failure: Exception | None = None  # what stopped the tuning (raised again outside TVM's FFI)

        @derived_object
        class Hook(PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
                outer.record(builder_results, runner_results)

        self.hook = Hook()

    def record(self, builder_results, runner_results) -> None:
        built = [r for b, r in zip(builder_results, runner_results) if b.error_msg is None]
        if self.device.remote and built and all(r.error_msg for r in built):
            # Raised before MetaSchedule records the batch: a lost device does not eat the budget.
            from tvmgen.remote.rpc import RpcError

            last = [ln for ln in str(built[-1].error_msg).splitlines() if ln.strip()][-1:]
            self.failure = RpcError(
                f"every candidate failed on device {self.device.key!r}: {' '.join(last)}",
                "the device server may have stopped; see its log, then rerun (tuning resumes)",
            )
            raise self.failure
        state = self.summary.tasks[self.current]
        for r in runner_results:
            state.spent += 1
            self.summary.new_trials += 1
            secs = [float(s) for s in r.run_secs or []] if r.error_msg is None else []
            if secs:
                us = sum(secs) / len(secs) * 1e6
                state.best_us = us if state.best_us is None else min(state.best_us, us)
        if self.on_progress:
            self.on_progress(self.summary, self.current)


def _log_to_file() -> None:
    from tvmgen.core import log as logs

    logging.getLogger(MS_LOGGER).setLevel(logging.INFO)
    logs.to_file_only(MS_LOGGER)


def check_dependencies() -> None:
    missing = []
    for module, package in (("xgboost", "xgboost-cpu"), ("psutil", "psutil"), ("cloudpickle", "cloudpickle")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise ToolMissingError(
            f"tuning needs {', '.join(missing)} (MetaSchedule's cost model and workers)",
            f"pip install {' '.join(missing)}  (or: pip install -c scripts/constraints.txt 'tvmgen[tune]')",
        )


# ------------------------------------------------------------------ the command's display


def run(imported, target, trials: int, root: Path, device: Device, num_cores: int, compiler: Path) -> Summary:
    """Bind the model's weights and tune it with a progress bar: trials, best latency per task and in all."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tvmgen.core.log import console

    mod = bound(imported)
    where = f"device {device.key!r}" if device.remote else "here"
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as bar:
        row = bar.add_task(f"extracting tasks for {target_name(target)}", total=None)

        def show(summary: Summary, current: int | None, finished: bool = False) -> None:
            n = len(summary.tasks)
            done = sum(min(t.spent, trials) for t in summary.tasks)
            total = summary.total_us
            overall = f" · model ≈ {total / 1e3:.3f} ms" if total is not None else ""
            if current is None:
                console.print(
                    f"  {n} tasks, {trials} trials each, measured {where} ({done} trials already in the database)"
                )
                bar.update(row, total=n * trials, completed=done)
                return
            t = summary.tasks[current]
            best = f"best {t.best_us:.1f} µs" if t.best_us is not None else "no result yet"
            bar.update(row, completed=done, description=f"task {current + 1}/{n} {t.name[:32]}: {best}{overall}")
            if finished:
                console.print(f"  [green]✓[/] {current + 1}/{n} {t.name}: {best} ({t.spent} trials){overall}")

        return tune(mod, target, trials, root, device, num_cores, compiler, on_progress=show)


def bound(imported):
    """The model's module with its weights bound, as compile binds them: the tasks' constants must match."""
    from tvm import relax

    mod = imported.mod
    if imported.params:
        weights = mod["main"].params[len(imported.inputs) :]
        mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    return mod


def print_summary(summary: Summary, trials: int) -> None:
    from tvmgen.core.log import console

    total = summary.total_us
    spent = sum(t.spent for t in summary.tasks)
    line = f"{len(summary.tasks)} tasks, {spent} trials in the database ({summary.new_trials} new)" + (
        f"; sum of the best kernel latencies ≈ {total / 1e3:.3f} ms" if total is not None else ""
    )
    console.print(line)
    seeded = [t for t in summary.tasks if t.default_us is not None]
    gpu = not summary.target.startswith("llvm")
    defaults = "TVM's default GPU schedules (dlight)" if gpu else "tvmgen's default schedules"
    if seeded and total is not None:
        default = sum(t.default_us * t.weight for t in seeded if t.default_us is not None) + sum(
            t.best_us * t.weight for t in summary.tasks if t.default_us is None and t.best_us is not None
        )
        console.print(
            f"  {defaults}, measured as candidates: ≈ {default / 1e3:.3f} ms ({default / total:.2f}x the best)"
        )
    failed = [t.name for t in summary.tasks if t.best_us is None]
    if failed:
        console.print(
            f"  [yellow]![/] no working candidate yet for: {', '.join(failed)} (they keep {defaults}; see the log)"
        )
