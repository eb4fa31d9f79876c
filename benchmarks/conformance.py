#!/usr/bin/env python3
"""ONNX conformance: the ONNX backend node test cases of the installed onnx package, each run
through tvmgen (host/cpu) and onnxruntime (CPUExecutionProvider) and compared with the expected outputs.

The cases come from ``onnx.backend.test.case.node.collect_testcases()`` and are written with onnx's own
test-data writer (``onnx.backend.test.cmd_tools.generate_data``: model.onnx, test_data_set_0/input_K.pb,
output_K.pb) into a work directory, once per onnx version. Each case runs in a pool of worker processes
(each imports TVM once and runs many cases); a case that crashes or hangs its worker is recorded as such,
the worker is replaced and the run goes on. The outputs are compared as onnx's backend test runner does:
same count, shape and dtype, then ``np.testing.assert_allclose`` with the case's tolerances (rtol 1e-3,
atol 1e-7 for every node case).

    .venv/bin/python benchmarks/conformance.py                             # every case (~1,900; ~30 min on 2 cores)
    .venv/bin/python benchmarks/conformance.py --one-per-op                # the first case of each operator
    .venv/bin/python benchmarks/conformance.py --one-per-op --batched      # the same, cases merged: ~1 min
    .venv/bin/python benchmarks/conformance.py --ops Add,Conv --json r.json --markdown r.md
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
from conformance_cases import ATOL, RTOL, MismatchError, classify, compare, default_work, prepare_cases, select
from conformance_report import (
    failure_groups,
    markdown_report,
    normalise,
    read_record,
    shorten,
    text_report,
    write_json,
    write_record,
)
from conformance_worker import (
    GROUP_MAX,
    MERGED_PER_TIMEOUT,
    OTHER_PATH,
    group_key,
    merge_models,
    named_in,
    run_group,
    run_tvmgen,
    worker_main,
)

# what the tests call, reached through this module whichever part defines it
__all__ = [
    "OTHER_PATH",
    "MismatchError",
    "classify",
    "compare",
    "failure_groups",
    "group_key",
    "main",
    "merge_models",
    "named_in",
    "normalise",
    "run_group",
    "run_tvmgen",
    "select",
    "shorten",
]

DEFAULT_TIMEOUT = 60.0
CASES_PER_WORKER = 150  # a worker is replaced after this many cases, so whatever TVM keeps does not pile up
JSON_EVERY_S = 10.0


# ----------------------------------------------------------------------------------- the pool


class Worker:
    def __init__(self, ctx, logs: Path, scratch: Path, number: int):
        self.conn, child = ctx.Pipe()
        self.log = logs / f"worker-{number}.log"
        self.scratch = scratch / f"worker-{number}"
        self.process = ctx.Process(
            target=worker_main, args=(child, str(self.log), str(self.scratch)), name=f"conformance-{number}"
        )
        self.process.start()
        child.close()
        self.started = time.monotonic()
        self.ready = False
        self.task: list[dict] | None = None  # the cases it runs
        self.running: list[str] = []  # what a crash or hang now belongs to: one case, a merged model's cases
        self.since = self.deadline = self.limit = 0.0
        self.done = 0

    def stop(self, kill: bool = False) -> None:
        import shutil

        if kill or not self.ready:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                self.process.kill()
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def death(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"the worker process died of {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker process died of signal {-code}"
    return f"the worker process exited with status {code}"


def plan_tasks(
    cases: list[dict], work: Path, apart: frozenset = frozenset(), slow: frozenset = frozenset()
) -> list[list[dict]]:
    """The batched mode's tasks: the cases of one group_key together (GROUP_MAX at most, in even parts),
    the others and those in ``apart`` one by one. Those in ``slow`` (known to time out) first, so that
    their time overlaps the rest, then the merged models, largest first, then the other cases."""
    import onnx

    groups: dict[tuple, list[dict]] = {}
    first, last = [], []
    for c in cases:
        if c["name"] in apart or c["name"] in slow:
            (first if c["name"] in slow else last).append([c])
            continue
        key = group_key(onnx.load(str(work / "node" / c["name"] / "model.onnx"), load_external_data=False))
        if key is None:
            last.append([c])
        else:
            groups.setdefault(key, []).append(c)
    merged = []
    for members in groups.values():
        size = -(-len(members) // -(-len(members) // GROUP_MAX))
        merged += [members[i : i + size] for i in range(0, len(members), size)]
    return first + sorted(merged, key=len, reverse=True) + last


def retry_timeouts(results: list[dict], cases: list[dict], work: Path, args, logs: Path, slow: frozenset) -> None:
    """Each case that timed out (and is not known to) run once more, alone, with ``args.retry_timeouts``
    seconds: its new result replaces the timeout, marked ``retried_after_timeout_s``."""
    timed_out = {r["name"] for r in results if r["tvmgen"].get("stage") == "timeout" and r["name"] not in slow}
    if not timed_out:
        return
    benchlib.progress(
        f"{len(timed_out)} case(s) timed out after {args.timeout:g} s: run again alone, "
        f"{args.retry_timeouts:g} s each ({', '.join(sorted(timed_out))})"
    )
    again: dict[str, dict] = {}

    def on_retry(record: dict) -> None:
        record["tvmgen"]["retried_after_timeout_s"] = args.timeout
        again[record["name"]] = record
        verdict = "ok" if record["tvmgen"]["pass"] else f"FAIL ({record['tvmgen'].get('stage')})"
        benchlib.log(f"retried {record['name']}: tvmgen {verdict}")

    run_pool([c for c in cases if c["name"] in timed_out], work, args.jobs, args.retry_timeouts, on_retry, logs)
    results[:] = [again.get(r["name"], r) for r in results]


def run_pool(
    cases: list[dict],
    work: Path,
    jobs: int,
    timeout: float,
    on_result,
    logs: Path,
    batched: bool = False,
    apart: frozenset = frozenset(),
    slow: frozenset = frozenset(),
    on_batch=None,
) -> None:
    """Run ``cases`` on ``jobs`` workers; ``on_result(record)`` for each finished case; each worker's
    output goes to ``logs``/worker-N.log. ``batched``: the cases merged (plan_tasks with ``apart`` and
    ``slow``, run_group), ``on_batch(stats)`` for each merged model built or failed. A case that crashes or
    hangs its worker is recorded as such; a merged model that does is split in two halves, run again."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    logs.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=work))
    queue = deque(plan_tasks(cases, work, apart, slow) if batched else [[c] for c in cases])
    by_name = {c["name"]: c for c in cases}
    ort: dict[str, dict] = {}  # onnxruntime's result of each case, once known
    finished: set[str] = set()
    workers: list[Worker | None] = [None] * jobs
    started = 0
    startup_limit = max(300.0, timeout)

    def finish(name: str, tvmgen: dict) -> None:
        finished.add(name)
        c = by_name[name]
        on_result(
            {
                **{k: c[k] for k in ("name", "op", "domain", "subset", "excluded_because")},
                "ort": ort[name],
                "tvmgen": tvmgen,
            }
        )

    def lost(slot: int, why: str) -> None:
        """Worker ``slot`` died or hung: what it was running is recorded (one case) or split and queued again
        (a merged model), the rest of its task queued again, the worker dropped."""
        w = workers[slot]
        assert w is not None
        task, running = w.task, [n for n in w.running if n not in finished]
        seconds = round(time.monotonic() - w.since, 3)
        w.stop(kill=True)
        workers[slot] = None
        if task is None:
            raise RuntimeError(f"a conformance worker failed before running any case ({why}); see {w.log}")
        left = [c for c in task if c["name"] not in finished]
        in_ort = [c for c in left if c["name"] not in ort]
        if in_ort:  # it was in onnxruntime's turn: tvmgen still runs the case, in a fresh worker
            ort[in_ort[0]["name"]] = {"pass": False, "error": f"onnxruntime: {why}"}
            queue.appendleft(left)
            return
        rest = [c for c in left if c["name"] not in running]
        if rest:
            queue.appendleft(rest)
        if len(running) == 1:
            stage = "timeout" if "timed out" in why else "crash"
            finish(running[0], {"pass": False, "stage": stage, "error": why, "seconds": seconds, "log": str(w.log)})
        elif running:
            if on_batch is not None:
                on_batch(
                    {
                        "cases": len(running),
                        "seconds": seconds,
                        "stage": "timeout" if "timed out" in why else "crash",
                        "error": why,
                    }
                )
            half = len(running) // 2
            for part in (running[half:], running[:half]):
                queue.appendleft([by_name[n] for n in part])

    try:
        while queue or any(w is not None and w.task is not None for w in workers):
            for slot in range(jobs):
                w = workers[slot]
                if w is not None and w.ready and w.task is None and (not queue or w.done >= CASES_PER_WORKER):
                    w.stop()  # worn out, or nothing left for it
                    workers[slot] = w = None
                if w is None and queue:
                    started += 1
                    workers[slot] = w = Worker(ctx, logs, scratch, started)
                if w is not None and w.ready and w.task is None and queue:
                    w.task = queue.popleft()
                    w.conn.send(
                        {
                            "batched": batched,
                            "cases": [
                                (c["name"], str(work / "node" / c["name"]), c["rtol"], c["atol"], c["name"] in ort)
                                for c in w.task
                            ],
                        }
                    )
                    w.running, w.limit = [], timeout
                    w.since = time.monotonic()
                    w.deadline = w.since + timeout
            live = [w for w in workers if w is not None]
            if not live:
                continue
            now = time.monotonic()
            deadlines = [w.deadline if w.ready else w.started + startup_limit for w in live]
            wait([w.conn for w in live] + [w.process.sentinel for w in live], timeout=max(0.0, min(deadlines) - now))
            for slot, w in enumerate(workers):
                if w is None:
                    continue
                try:
                    while w.conn.poll():
                        msg = w.conn.recv()
                        if msg[0] == "ready":
                            w.ready = True
                        elif w.task is None:
                            continue
                        elif msg[0] == "ort":
                            ort[msg[1]] = msg[2]
                        elif msg[0] in ("case", "group"):  # a crash or hang from now on is theirs
                            w.running = [msg[1]] if msg[0] == "case" else list(msg[1])
                            w.since = time.monotonic()
                            w.limit = timeout * (1 + (len(w.running) - 1) / MERGED_PER_TIMEOUT)
                            w.deadline = w.since + w.limit
                        elif msg[0] == "tvmgen":
                            finish(msg[1], msg[2])
                            w.done += 1
                        elif msg[0] == "batch" and on_batch is not None:
                            on_batch(msg[1])
                        elif msg[0] == "split":
                            for part in reversed(msg[1]):
                                queue.appendleft([by_name[n] for n in part])
                        elif msg[0] == "done":
                            w.task, w.running = None, []
                except (EOFError, OSError):
                    pass
                if not w.process.is_alive():
                    if w.task is None and not queue:
                        workers[slot] = None
                        w.stop()
                        continue
                    lost(slot, death(w.process))
                elif w.task is not None and time.monotonic() > w.deadline:
                    lost(slot, f"timed out after {w.limit:g} s")
                elif not w.ready and time.monotonic() > w.started + startup_limit:
                    raise RuntimeError(f"a conformance worker did not start within {startup_limit:g} s; see {w.log}")
    finally:
        for slot, w in enumerate(workers):
            if w is not None:
                w.stop(kill=True)
                workers[slot] = None
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def main(argv=None) -> int:
    p = benchlib.parser(__doc__)
    p.add_argument("--ops", help="only these operators, comma-separated (e.g. Add,Conv)")
    p.add_argument("--one-per-op", action="store_true", help="only the first case of each operator (the fast subset)")
    p.add_argument("--subset", choices=("mobile", "other"), help="only the cases of this subset")
    p.add_argument(
        "--batched",
        action="store_true",
        help=f"merge the cases that share their opset imports into models of {GROUP_MAX} cases at most, compile "
        "and run each once; a case that fails runs again alone, so the results are the per-case mode's, in a "
        "fraction of the time (the suite's one-case-per-operator check)",
    )
    p.add_argument(
        "--known",
        type=Path,
        metavar="RECORD.json",
        help="with --batched: a --record file; the cases it records as failing in tvmgen or built on another "
        "path (a fallback pipeline) are not merged, and run alone (those that timed out first): a merged "
        "model they would make fail need not be split to find them",
    )
    p.add_argument(
        "--record",
        type=Path,
        metavar="OUT.json",
        help="write tvmgen's result of each case by operator here, once every case ran "
        "(tests/recorded/conformance_one_per_op.json: --one-per-op --subset mobile)",
    )
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds one case may take (default 60)")
    p.add_argument(
        "--retry-timeouts",
        type=float,
        metavar="S",
        help="run each case that timed out once more, alone, allowed S seconds (a loaded machine slows compiles; "
        "with --known, cases the record says time out are not retried); the output and the JSON say which were",
    )
    p.add_argument("--work", type=Path, help="where the cases are written (kept; default: a directory in $TMPDIR)")
    benchlib.json_option(p)
    p.add_argument("--markdown", type=Path, metavar="OUT.md", help="also write the tables in Markdown here")
    p.add_argument(
        "--report",
        type=Path,
        metavar="RUN.json",
        help="run nothing: the tables of an earlier run's --json (partial too)",
    )
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if args.known and not args.batched:
        p.error("--known applies to --batched")
    if args.report:
        doc = json.loads(args.report.read_text())
        results, skipped = doc["results"], len(doc["skipped"])
        print(text_report(results, skipped, doc["complete"]))
        if args.markdown:
            args.markdown.write_text(markdown_report(results, skipped, doc["complete"], doc["settings"]))
            benchlib.progress(f"Markdown written to {args.markdown}")
        return 0

    work = (args.work or default_work()).resolve()
    work.mkdir(parents=True, exist_ok=True)
    all_cases = prepare_cases(work)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    if ops:
        known = {c["op"].lower() for c in all_cases}
        unknown = [o for o in ops if o.lower() not in known]
        if unknown:
            p.error(f"no node test case for operator(s) {', '.join(unknown)}")
    cases = select(all_cases, ops, args.one_per_op)
    wanted = {o.lower() for o in ops} if ops else None
    skipped = [
        {k: c[k] for k in ("name", "op", "domain", "subset", "excluded_because")}
        for c in all_cases
        if c["subset"] == "skipped"
        and (wanted is None or c["op"].lower() in wanted)
        and not args.one_per_op
        and not args.subset
    ]
    if args.subset:
        cases = [c for c in cases if c["subset"] == args.subset]
    apart = slow = frozenset()
    if args.known:
        known = read_record(args.known)
        apart = frozenset(n for n, k in known.items() if not k["pass"] or k.get("other_path"))
        slow = frozenset(n for n, k in known.items() if k.get("stage") == "timeout")
    logs = work / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"  # the workers' output, this run's
    env = benchlib.environment(("onnx", "onnxruntime", "apache-tvm", "tvmgen", "numpy"))
    settings = {
        "ops": ops,
        "one_per_op": args.one_per_op,
        "subset": args.subset,
        "batched": args.batched,
        "known": str(args.known) if args.known else None,
        "jobs": args.jobs,
        "timeout_s": args.timeout,
        "work": str(work),
        "logs": str(logs),
        "target": "host/cpu",
        "tolerances": {"rtol": RTOL, "atol": ATOL},
        "versions": env["packages"],
        "machine": {k: v for k, v in env.items() if k != "packages"},
    }
    benchlib.progress(
        f"{len(cases)} case(s) to run on {args.jobs} worker(s), {args.timeout:g} s each at most"
        + (" (batched)" if args.batched else "")
    )

    results: list[dict] = []
    batches: list[dict] | None = [] if args.batched else None
    t0 = time.monotonic()
    last_json = [t0]

    def on_result(record: dict) -> None:
        results.append(record)
        o, t = record["ort"], record["tvmgen"]
        tv = "ok" if t["pass"] else f"FAIL ({t.get('stage')}: {t.get('error', '')[:150]})"
        benchlib.log(
            f"[{len(results)}/{len(cases)}] {record['name']}: onnxruntime {'ok' if o['pass'] else 'FAIL'}, tvmgen {tv}"
        )
        if args.json and time.monotonic() - last_json[0] > JSON_EVERY_S:
            write_json(args.json, results, skipped, settings, False, time.monotonic() - t0, batches)
            last_json[0] = time.monotonic()

    def on_batch(stats: dict) -> None:
        assert batches is not None
        batches.append(stats)
        what = (
            "built and run"
            if stats["stage"] == "pass"
            else f"failed ({stats['stage']}: {stats.get('error', '')[:150]})"
        )
        benchlib.log(f"merged model of {stats['cases']} case(s) {what} in {stats['seconds']:g} s")

    def stop(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    complete = False
    try:
        run_pool(cases, work, args.jobs, args.timeout, on_result, logs, args.batched, apart, slow, on_batch)
        if args.retry_timeouts:
            retry_timeouts(results, cases, work, args, logs, slow)
        complete = True
    except KeyboardInterrupt:
        benchlib.progress(f"stopped after {len(results)} of {len(cases)} case(s): the report is partial")
    results.sort(key=lambda r: (r["op"], r["name"]))
    elapsed = time.monotonic() - t0
    print(text_report(results, len(skipped), complete))
    if args.json:
        write_json(args.json, results, skipped, settings, complete, elapsed, batches)
        benchlib.progress(f"JSON written to {args.json}")
    if args.record:
        if complete:
            write_record(args.record, results, settings)
            benchlib.progress(f"record written to {args.record}")
        else:
            benchlib.progress(f"no record written to {args.record}: the run is partial")
    if args.markdown:
        args.markdown.write_text(markdown_report(results, len(skipped), complete, settings))
        benchlib.progress(f"Markdown written to {args.markdown}")
    if batches:
        built = sum(b["stage"] == "pass" for b in batches)
        benchlib.progress(
            f"{len(batches)} merged model(s), {built} built and run, {len(batches) - built} failed or split"
        )
    benchlib.progress(f"{len(results)} case(s) in {elapsed / 60:.1f} min; the workers' output is in {logs}")
    return 0 if complete else 130


if __name__ == "__main__":
    sys.exit(main())
