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
    .venv/bin/python benchmarks/conformance.py --ops Add,Conv --json r.json --markdown r.md
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

# ----------------------------------------------------------------------------------- the mobile subset
# Cases of this domain's operators (Adagrad, Adam, Momentum, Gradient) train a model: not run at all.
TRAINING_DOMAIN = "ai.onnx.preview.training"
LOSS_OPS = frozenset({"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})
SEQUENCE_OPS = frozenset({"SplitToSequence", "ConcatFromSequence"})  # besides Sequence* and Optional*
STRING_OPS = frozenset({"StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"})

RTOL, ATOL = 1e-3, 1e-7  # onnx's node cases (onnx.backend.test.case.node.expect): the runner's defaults too
DEFAULT_TIMEOUT = 60.0
CASES_PER_WORKER = 150  # a worker is replaced after this many cases, so whatever TVM keeps does not pile up
FAULT_ENV = "TVMGEN_CONFORMANCE_FAULTS"  # tests: "CASE=crash,CASE=hang,CASE=error" in the workers
JSON_EVERY_S = 10.0
CASES_FORMAT = 1  # cases.json's fields; another value writes the cases again


def _graphs(graph):
    """``graph`` and every subgraph under it (If branches, Loop and Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for g in attr.graphs:
                yield from _graphs(g)


def _plain_tensor_type(type_proto) -> bool:
    """A tensor of a non-string element type (not a sequence, optional, map or sparse tensor)."""
    import onnx

    return type_proto.HasField("tensor_type") and type_proto.tensor_type.elem_type != onnx.TensorProto.STRING


def classify(node, model) -> tuple[str, str]:
    """(subset, why) of a case testing ``node`` with ``model``: ("skipped", why) for training-only
    operators, ("other", why) for the rest of what a phone does not run, else ("mobile", "")."""
    if node.domain == TRAINING_DOMAIN:
        return "skipped", "training-only operator"
    if node.op_type in LOSS_OPS:
        return "other", "loss function"
    attrs = {a.name: a for a in node.attribute}
    if (node.op_type == "BatchNormalization" and "training_mode" in attrs and attrs["training_mode"].i) or (
        node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]
    ):
        return "other", "training mode"
    ops = {n.op_type for g in _graphs(model.graph) for n in g.node} | {node.op_type}
    if any(op.startswith(("Sequence", "Optional")) or op in SEQUENCE_OPS for op in ops):
        return "other", "sequence/optional operator"
    if ops & STRING_OPS:
        return "other", "string operator"
    if not all(_plain_tensor_type(v.type) for v in [*model.graph.input, *model.graph.output]):
        return "other", "sequence, optional, map or string input/output"
    return "mobile", ""


# ----------------------------------------------------------------------------------- the cases on disk


def default_work() -> Path:
    import onnx

    return Path(tempfile.gettempdir()) / f"tvmgen-conformance-onnx{onnx.__version__}"


def prepare_cases(work: Path) -> list[dict]:
    """The node cases written under ``work``/node/NAME (once; cases.json indexes them): name, operator,
    its domain, the subset and why."""
    import onnx

    index = work / "cases.json"
    if index.is_file():
        doc = json.loads(index.read_text())
        if doc.get("onnx") == onnx.__version__ and doc.get("format") == CASES_FORMAT:
            return doc["cases"]
    import shutil
    import types
    import warnings

    import onnx.backend.test.case.node as node_cases
    from onnx.backend.test import cmd_tools

    benchlib.progress(f"writing onnx {onnx.__version__}'s node test cases to {work}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' NumPy computes overflow and divide by zero on purpose
        cases = node_cases.collect_testcases()
    nodes = getattr(node_cases, "_existing_names", {})  # test name -> the node expect() was given
    staging = Path(tempfile.mkdtemp(prefix=".cases-", dir=work.parent if work.parent.is_dir() else None))
    # onnx's writer takes its cases from cmd_tools.model_test.collect_testcases(): handed the node cases
    writer_source = cmd_tools.model_test
    cmd_tools.model_test = types.SimpleNamespace(collect_testcases=lambda: cases)  # type: ignore[assignment]
    try:
        cmd_tools.generate_data(types.SimpleNamespace(output=str(staging)))
    finally:
        cmd_tools.model_test = writer_source
    rows = []
    for case in cases:
        node = nodes.get(re.sub(r"_expanded(_ver\d+)?$", "", case.name))
        if node is None:  # not through expect(): the model's only node
            node = case.model.graph.node[0]
        subset, why = classify(node, case.model)
        rows.append(
            {
                "name": case.name,
                "op": node.op_type,
                "domain": node.domain or "ai.onnx",
                "subset": subset,
                "excluded_because": why,
                "rtol": case.rtol,
                "atol": case.atol,
            }
        )
    rows.sort(key=lambda r: (r["op"], r["name"]))
    (staging / "cases.json").write_text(
        json.dumps({"onnx": onnx.__version__, "format": CASES_FORMAT, "cases": rows}, indent=1)
    )
    work.mkdir(parents=True, exist_ok=True)
    for sub in ("node", "cases.json"):  # two runs preparing at once: the last one's copy stays, both complete
        target = work / sub
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(staging / sub, target)
    shutil.rmtree(staging, ignore_errors=True)
    return rows


def select(cases: list[dict], ops: list[str] | None, one_per_op: bool) -> list[dict]:
    """The cases to run, in the order to run them: the first case of each operator first (so a partial
    run covers every operator), then the others; training-only cases are left out."""
    if ops:
        wanted = {o.lower() for o in ops}
        cases = [c for c in cases if c["op"].lower() in wanted]
    cases = [c for c in cases if c["subset"] != "skipped"]
    firsts: dict[str, dict] = {}
    for c in sorted(cases, key=lambda c: ("_expanded" in c["name"], c["name"])):  # a plain case first
        firsts.setdefault(c["op"], c)
    head = sorted(firsts.values(), key=lambda c: c["op"])
    if one_per_op:
        return head
    chosen = {c["name"] for c in head}
    return head + [c for c in cases if c["name"] not in chosen]


def read_data(case_dir: Path, model) -> tuple[dict, list]:
    """(inputs by graph input name, expected outputs) of test_data_set_0, read as onnx's runner reads them."""
    import onnx
    from onnx import numpy_helper

    def read(path: Path, type_proto):
        data = path.read_bytes()
        if type_proto.HasField("sequence_type"):
            seq = onnx.SequenceProto()
            seq.ParseFromString(data)
            return numpy_helper.to_list(seq)
        if type_proto.HasField("optional_type"):
            opt = onnx.OptionalProto()
            opt.ParseFromString(data)
            return numpy_helper.to_optional(opt)
        if type_proto.HasField("map_type"):
            m = onnx.MapProto()
            m.ParseFromString(data)
            return numpy_helper.to_dict(m)
        tensor = onnx.TensorProto()
        tensor.ParseFromString(data)
        return numpy_helper.to_array(tensor)

    data_set = case_dir / "test_data_set_0"
    inputs = {vi.name: read(data_set / f"input_{k}.pb", vi.type) for k, vi in enumerate(model.graph.input)}
    expected = [read(data_set / f"output_{k}.pb", vi.type) for k, vi in enumerate(model.graph.output)]
    return inputs, expected


class MismatchError(AssertionError):
    """Outputs that differ from the expected ones (count, shape, dtype or values)."""


def compare(expected: list, actual: list, rtol: float, atol: float, where: str = "output") -> None:
    """onnx's Runner.assert_similar_outputs: the count, then per output its shape, dtype and
    ``np.testing.assert_allclose(actual, expected, rtol, atol)``; raises MismatchError with one line."""
    if len(actual) != len(expected):
        raise MismatchError(f"{len(actual)} outputs, expected {len(expected)}")
    for i, (a, e) in enumerate(zip(actual, expected)):
        name = f"{where} {i}"
        if isinstance(e, (list, tuple)):
            if not isinstance(a, (list, tuple)):
                raise MismatchError(f"{name}: a {type(a).__name__}, expected a sequence")
            compare(list(e), list(a), rtol, atol, where=f"{name} item")
            continue
        if e is None or a is None:
            if (e is None) != (a is None):
                raise MismatchError(
                    f"{name}: {'None' if a is None else 'a value'}, expected {'None' if e is None else 'a value'}"
                )
            continue
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            raise MismatchError(f"{name}: shape {a.shape}, expected {e.shape}")
        if e.dtype == object:  # strings
            if not np.array_equal(a, e):
                raise MismatchError(f"{name}: strings differ")
            continue
        if a.dtype != e.dtype:
            raise MismatchError(f"{name}: dtype {a.dtype}, expected {e.dtype}")
        tol = rtol
        if a.dtype.name == "bfloat16":  # as onnx's runner: two bfloat16 ULPs
            tol, a, e = max(rtol, 2**-6), a.astype(np.float32), e.astype(np.float32)
        try:
            np.testing.assert_allclose(a, e, rtol=tol, atol=atol)
        except AssertionError as err:
            text = str(err)
            count = re.search(r"Mismatched elements: (\d+) / (\d+)", text)
            worst = re.search(r"Max absolute difference[^:]*:\s*(\S+)", text)
            detail = f"{count.group(1)} of {count.group(2)} elements" if count else "values"
            raise MismatchError(
                f"{name}: {detail} differ beyond rtol {tol:g}, atol {atol:g}"
                + (f" (largest difference {worst.group(1)})" if worst else "")
            ) from None


# ----------------------------------------------------------------------------------- one case, in a worker


def first_line(e: BaseException) -> str:
    """The error's one line: a tvmgen error's message (its first line), else the type and the first
    meaningful line (TVM's tracebacks and metadata trailers left out)."""
    from tvmgen.core.errors import TvmgenError

    if isinstance(e, MismatchError):
        return str(e)
    if isinstance(e, TvmgenError):
        return (e.message.strip().splitlines() or [type(e).__name__])[0]
    from tvmgen.compiler.build import tvm_error_summary

    return tvm_error_summary(e)


def run_onnxruntime(case_dir: Path, rtol: float, atol: float) -> dict:
    import onnx
    import onnxruntime as ort

    t0 = time.perf_counter()
    try:
        model = onnx.load(str(case_dir / "model.onnx"))
        inputs, expected = read_data(case_dir, model)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(case_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        compare(expected, sess.run(None, inputs), rtol, atol)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        error = str(e) if isinstance(e, MismatchError) else f"{type(e).__name__}: {first}".rstrip(": ")
        return {"pass": False, "error": error, "seconds": round(time.perf_counter() - t0, 3)}
    return {"pass": True, "seconds": round(time.perf_counter() - t0, 3)}


def run_tvmgen(case_dir: Path, rtol: float, atol: float, scratch: Path) -> dict:
    """The case the way `tvmgen compile --check` runs a host/cpu build: frontends.load() with every input's
    shape fixed from the test data, compile_to_artifact() with the default options, then the artifact
    run by tvmgen's host runner (HostModel) on the test inputs."""
    import shutil

    import onnx

    from tvmgen import frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget
    from tvmgen.frontends.base import InputOverride
    from tvmgen.runtime.runner import HostModel

    t0 = time.perf_counter()
    stage = "import"
    out = scratch / case_dir.name
    try:
        model = onnx.load(str(case_dir / "model.onnx"))
        inputs, expected = read_data(case_dir, model)
        overrides = [
            InputOverride(name, tuple(int(d) for d in np.shape(value)), None)
            for name, value in inputs.items()
            if isinstance(value, np.ndarray)
        ]
        imported = frontends.load(case_dir / "model.onnx", overrides)
        stage = "build"
        opts = build.BuildOptions.for_target(BuildTarget(PLATFORMS["host"], "cpu", "generic"))
        build.compile_to_artifact(imported, opts, out, True, {"name": case_dir.name})
        stage = "load"
        host = HostModel(out, threads=1)
        stage = "run"
        outputs = host.run({s.name: inputs[s.name] for s in host.manifest.inputs})
        stage = "compare"
        compare(expected, outputs, rtol, atol)
    except Exception as e:
        return {"pass": False, "stage": stage, "error": first_line(e), "seconds": round(time.perf_counter() - t0, 3)}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"pass": True, "seconds": round(time.perf_counter() - t0, 3)}


def _inject_fault(name: str, stage: str) -> None:
    """Tests of the isolation: $TVMGEN_CONFORMANCE_FAULTS="CASE=crash,CASE=hang,CASE=error,CASE=ort-crash"
    makes the worker die of SIGSEGV, sleep, or raise in place of tvmgen (ort-crash: die in place of
    onnxruntime) for those cases."""
    faults = dict(f.split("=", 1) for f in os.environ.get(FAULT_ENV, "").split(",") if "=" in f)
    fault = faults.get(name, "")
    if stage == "ort":
        if fault == "ort-crash":
            os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "hang":
        time.sleep(3600)
    elif fault == "error":
        raise RuntimeError("injected fault")


def _warm_up(scratch: Path) -> None:
    """Import and compile a one-node model once, so the first case's time limit is not spent on
    loading TVM, LLVM and onnxslim."""
    import onnx
    from onnx import TensorProto, helper

    case = scratch / "warm-up"
    (case / "test_data_set_0").mkdir(parents=True, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm_up", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(case / "model.onnx"))
    value = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    for kind, array in (("input", value), ("output", np.maximum(value, 0))):
        (case / "test_data_set_0" / f"{kind}_0.pb").write_bytes(onnx.numpy_helper.from_array(array).SerializeToString())
    run_onnxruntime(case, RTOL, ATOL)
    run_tvmgen(case, RTOL, ATOL, scratch)


def worker_main(conn, log_path: str, scratch: str) -> None:
    """A worker: its stdout and stderr go to ``log_path``; it answers ("ready",) once warmed up, then
    for each (name, case_dir, rtol, atol, skip_ort) task ("ort", name, result) (unless skip_ort), then
    ("tvmgen", name, result); None ends it."""
    import faulthandler

    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # two workers on two cores; TVM reads it when its pool starts
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    faulthandler.enable()  # a crash leaves its Python stack in the log
    work = Path(scratch)
    work.mkdir(parents=True, exist_ok=True)
    _warm_up(work)
    conn.send(("ready",))
    while True:
        task = conn.recv()
        if task is None:
            return
        name, case_dir, rtol, atol, skip_ort = task
        print(f"=== {name}", flush=True)
        if not skip_ort:
            _inject_fault(name, "ort")
            conn.send(("ort", name, run_onnxruntime(Path(case_dir), rtol, atol)))
        try:
            _inject_fault(name, "tvmgen")
            result = run_tvmgen(Path(case_dir), rtol, atol, work)
        except Exception as e:
            result = {"pass": False, "stage": "import", "error": f"{type(e).__name__}: {e}"}
        conn.send(("tvmgen", name, result))


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
        self.task: dict | None = None  # the case it runs
        self.sent = self.deadline = 0.0
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


def run_pool(cases: list[dict], work: Path, jobs: int, timeout: float, on_result, logs: Path) -> None:
    """Run ``cases`` on ``jobs`` workers; ``on_result(record)`` for each finished case; each worker's
    output goes to ``logs``/worker-N.log."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    logs.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=work))
    queue = deque({"case": c, "skip_ort": False, "ort": None} for c in cases)
    workers: list[Worker | None] = [None] * jobs
    started = 0
    startup_limit = max(300.0, timeout)

    def finish(task: dict, tvmgen: dict) -> None:
        c = task["case"]
        on_result(
            {
                **{k: c[k] for k in ("name", "op", "domain", "subset", "excluded_because")},
                "ort": task["ort"],
                "tvmgen": tvmgen,
            }
        )

    def lost(slot: int, why: str) -> None:
        """Worker ``slot`` died or hung: what it was running is recorded, the worker dropped."""
        w = workers[slot]
        assert w is not None
        task = w.task
        w.stop(kill=True)
        workers[slot] = None
        if task is None:
            raise RuntimeError(f"a conformance worker failed before running any case ({why}); see {w.log}")
        if task["ort"] is None:  # it was in onnxruntime: tvmgen still runs, in a fresh worker
            task["ort"] = {"pass": False, "error": f"onnxruntime: {why}"}
            task["skip_ort"] = True
            queue.appendleft(task)
        else:
            stage = "timeout" if "timed out" in why else "crash"
            seconds = round(time.monotonic() - w.sent, 3)
            finish(task, {"pass": False, "stage": stage, "error": why, "seconds": seconds, "log": str(w.log)})

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
                    c = w.task["case"]
                    w.conn.send((c["name"], str(work / "node" / c["name"]), c["rtol"], c["atol"], w.task["skip_ort"]))
                    w.sent = time.monotonic()
                    w.deadline = w.sent + timeout
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
                        elif msg[0] == "ort" and w.task is not None:
                            w.task["ort"] = msg[2]
                        elif msg[0] == "tvmgen" and w.task is not None:
                            finish(w.task, msg[2])
                            w.task, w.done = None, w.done + 1
                except (EOFError, OSError):
                    pass
                if not w.process.is_alive():
                    if w.task is None and not queue:
                        workers[slot] = None
                        w.stop()
                        continue
                    lost(slot, death(w.process))
                elif w.task is not None and time.monotonic() > w.deadline:
                    lost(slot, f"timed out after {timeout:g} s")
                elif not w.ready and time.monotonic() > w.started + startup_limit:
                    raise RuntimeError(f"a conformance worker did not start within {startup_limit:g} s; see {w.log}")
    finally:
        for slot, w in enumerate(workers):
            if w is not None:
                w.stop(kill=True)
                workers[slot] = None
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------------------------- the report


def normalise(text: str) -> str:
    """An error line with what differs from case to case taken out (paths, quoted names, numbers,
    shapes), so that failures of one cause group together."""
    text = re.sub(r" \(inputs: [^)]*\)", "", text)  # the importer's list of a node's inputs
    text = re.sub(r"(?<![\w.])/(?:[\w.+-]+/)*[\w.+-]+", "<path>", text)
    text = re.sub(r"(?<!\w)'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"(?<![\w.])[\d?]+(?:x[\d?]+)+(?![\w.])", "…", text)  # shapes as tvmgen writes them
    text = re.sub(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])", "N", text)
    text = re.sub(r"[\(\[](?:\s*(?:N|\?|None)\s*,?)+[\)\]]", "(…)", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:300]


def shorten(error: str) -> str:
    """An error line with the model's path in the work directory cut to the case's name."""
    return re.sub(r"/\S*/(test_\w+)/model\.onnx", r"\1/model.onnx", error)


def summarise(results: list[dict]) -> dict:
    def count(rows: list[dict]) -> dict:
        return {
            "cases": len(rows),
            "onnxruntime": sum(r["ort"]["pass"] for r in rows),
            "tvmgen": sum(r["tvmgen"]["pass"] for r in rows),
            "both": sum(r["ort"]["pass"] and r["tvmgen"]["pass"] for r in rows),
            "onnxruntime_only": sum(r["ort"]["pass"] and not r["tvmgen"]["pass"] for r in rows),
            "tvmgen_only": sum(r["tvmgen"]["pass"] and not r["ort"]["pass"] for r in rows),
        }

    return {
        "mobile": count([r for r in results if r["subset"] == "mobile"]),
        "other": count([r for r in results if r["subset"] == "other"]),
        "all": count(results),
    }


def by_operator(results: list[dict]) -> list[dict]:
    ops: dict[str, dict] = {}
    for r in results:
        row = ops.setdefault(r["op"], {"op": r["op"], "cases": 0, "mobile": 0, "onnxruntime": 0, "tvmgen": 0})
        row["cases"] += 1
        row["mobile"] += r["subset"] == "mobile"
        row["onnxruntime"] += bool(r["ort"]["pass"])
        row["tvmgen"] += bool(r["tvmgen"]["pass"])
    return [ops[k] for k in sorted(ops)]


def failure_groups(results: list[dict], subset: str) -> list[dict]:
    """Cases of ``subset`` onnxruntime passes and tvmgen fails, grouped by the normalised reason
    (with the stage it failed in), largest group first."""
    groups: dict[str, dict] = {}
    for r in results:
        if r["subset"] != subset or not r["ort"]["pass"] or r["tvmgen"]["pass"]:
            continue
        t = r["tvmgen"]
        key = f"{t.get('stage', '?')}: {normalise(t.get('error', ''))}"
        g = groups.setdefault(key, {"reason": key, "example": shorten(t.get("error", "")), "cases": []})
        g["cases"].append(r["name"])
    return sorted(groups.values(), key=lambda g: (-len(g["cases"]), g["reason"]))


def text_report(results: list[dict], skipped: int, complete: bool) -> str:
    lines = []
    rows = [
        [o["op"], str(o["cases"]), str(o["mobile"]), str(o["onnxruntime"]), str(o["tvmgen"])]
        for o in by_operator(results)
    ]
    lines.append(benchlib.table(["operator", "cases", "mobile", "onnxruntime", "tvmgen"], rows, {1, 2, 3, 4}))
    lines.append("")
    lines.append(totals_table(results, skipped, markdown=False))
    if not complete:
        lines.append("(partial run: the run was stopped before every case ran)")
    for subset in ("mobile", "other"):
        groups = failure_groups(results, subset)
        n = sum(len(g["cases"]) for g in groups)
        lines.append("")
        lines.append(f"{subset} subset: {n} case(s) pass in onnxruntime and fail in tvmgen, by reason:")
        for g in groups:
            names = ", ".join(g["cases"][:8]) + (f", +{len(g['cases']) - 8} more" if len(g["cases"]) > 8 else "")
            lines.append(f"  {len(g['cases']):4d}  {g['reason']}")
            lines.append(f"        e.g. {g['example'][:200]}")
            lines.append(f"        {names}")
    return "\n".join(lines)


def totals_table(results: list[dict], skipped: int, markdown: bool) -> str:
    s = summarise(results)
    header = ["subset", "cases", "onnxruntime pass", "tvmgen pass", "both pass", "onnxruntime only", "tvmgen only"]
    body = []
    for key, label in (("mobile", "mobile subset"), ("other", "the rest"), ("all", "all run")):
        c = s[key]
        body.append(
            [label] + [str(c[k]) for k in ("cases", "onnxruntime", "tvmgen", "both", "onnxruntime_only", "tvmgen_only")]
        )
    body.append(["skipped (training-only)", str(skipped), "", "", "", "", ""])
    if markdown:
        return md_table(header, body)
    return benchlib.table(header, body, {1, 2, 3, 4, 5, 6})


def md_table(header: list[str], body: list[list[str]]) -> str:
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(out)


def markdown_report(results: list[dict], skipped: int, complete: bool, settings: dict) -> str:
    out = [
        "### Totals",
        "",
        f"onnx {settings['versions'].get('onnx')}, onnxruntime {settings['versions'].get('onnxruntime')}, "
        f"apache-tvm {settings['versions'].get('apache-tvm')}; tvmgen host/cpu"
        + ("" if complete else "; **partial run**: not every case ran")
        + ".",
        "",
        totals_table(results, skipped, markdown=True),
        "",
    ]
    for subset, title in (("mobile", "mobile subset"), ("other", "the rest")):
        groups = failure_groups(results, subset)
        n = sum(len(g["cases"]) for g in groups)
        out += [f"### Pass in onnxruntime, fail in tvmgen: {title} ({n} cases)", ""]
        if groups:
            out += ["| cases | stage: reason (normalised) | example | which |", "|---:|---|---|---|"]
            for g in groups:
                cells = [
                    str(len(g["cases"])),
                    f"`{g['reason']}`",
                    "`" + g["example"][:300].replace("`", "'") + "`",
                    ", ".join(c.removeprefix("test_") for c in g["cases"]),
                ]
                out.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        out.append("")
    out += ["### By operator", ""]
    rows = [
        [o["op"], str(o["cases"]), str(o["mobile"]), str(o["onnxruntime"]), str(o["tvmgen"])]
        for o in by_operator(results)
    ]
    out.append(md_table(["operator", "cases", "mobile subset", "onnxruntime pass", "tvmgen pass"], rows))
    return "\n".join(out) + "\n"


def write_json(
    path: Path, results: list[dict], skipped: list[dict], settings: dict, complete: bool, elapsed: float
) -> None:
    doc = {
        "benchmark": "conformance",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "complete": complete,
        "elapsed_s": round(elapsed, 1),
        "settings": settings,
        "summary": {**summarise(results), "skipped": len(skipped)},
        "failure_groups": {s: failure_groups(results, s) for s in ("mobile", "other")},
        "results": results,
        "skipped": skipped,
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = benchlib.parser(__doc__)
    p.add_argument("--ops", help="only these operators, comma-separated (e.g. Add,Conv)")
    p.add_argument("--one-per-op", action="store_true", help="only the first case of each operator (the fast subset)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds one case may take (default 60)")
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
        if c["subset"] == "skipped" and (wanted is None or c["op"].lower() in wanted) and not args.one_per_op
    ]
    logs = work / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"  # the workers' output, this run's
    env = benchlib.environment(("onnx", "onnxruntime", "apache-tvm", "tvmgen", "numpy"))
    settings = {
        "ops": ops,
        "one_per_op": args.one_per_op,
        "jobs": args.jobs,
        "timeout_s": args.timeout,
        "work": str(work),
        "logs": str(logs),
        "target": "host/cpu",
        "tolerances": {"rtol": RTOL, "atol": ATOL},
        "versions": env["packages"],
        "machine": {k: v for k, v in env.items() if k != "packages"},
    }
    benchlib.progress(f"{len(cases)} case(s) to run on {args.jobs} worker(s), {args.timeout:g} s each at most")

    results: list[dict] = []
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
            write_json(args.json, results, skipped, settings, False, time.monotonic() - t0)
            last_json[0] = time.monotonic()

    def stop(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    complete = False
    try:
        run_pool(cases, work, args.jobs, args.timeout, on_result, logs)
        complete = True
    except KeyboardInterrupt:
        benchlib.progress(f"stopped after {len(results)} of {len(cases)} case(s): the report is partial")
    results.sort(key=lambda r: (r["op"], r["name"]))
    elapsed = time.monotonic() - t0
    print(text_report(results, len(skipped), complete))
    if args.json:
        write_json(args.json, results, skipped, settings, complete, elapsed)
        benchlib.progress(f"JSON written to {args.json}")
    if args.markdown:
        args.markdown.write_text(markdown_report(results, len(skipped), complete, settings))
        benchlib.progress(f"Markdown written to {args.markdown}")
    benchlib.progress(f"{len(results)} case(s) in {elapsed / 60:.1f} min; the workers' output is in {logs}")
    return 0 if complete else 130


if __name__ == "__main__":
    sys.exit(main())
