"""What a conformance worker process runs: one case through onnxruntime and tvmgen, or (batched) many cases
merged into one model, split again where the merged model fails."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import time
from pathlib import Path

import numpy as np

from conformance_cases import ATOL, RTOL, MismatchError, all_graphs, compare, plain_tensor_type, read_data

FAULT_ENV = "TVMGEN_CONFORMANCE_FAULTS"  # tests: "CASE=crash,CASE=hang,CASE=error" in the workers


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


# What tvmgen logs when it takes another path for the whole model: onnxslim gave up, shape inference failed
# before folding, or the CPU pipeline failed and another pipeline built the model. A case's result names
# the one it took (other_path); a merged model that takes one would treat its cases otherwise than alone.
OTHER_PATH = ("onnxslim could not simplify", "shape inference failed before folding", "%s failed (%s); built with %s")


@contextlib.contextmanager
def other_paths():
    """The OTHER_PATH messages tvmgen logs while in the block, collected in the list it yields."""
    import logging

    taken: list[str] = []

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if str(record.msg).startswith(OTHER_PATH):
                taken.append(record.getMessage().splitlines()[0][:300])

    logger, handler = logging.getLogger("tvmgen"), Watch(logging.INFO)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)  # the build's fallback is logged at INFO
    try:
        yield taken
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_tvmgen(case_dir: Path, rtol: float, atol: float, scratch: Path) -> dict:
    """The case the way `tvmgen compile --check` runs a host/cpu build: frontends.load() with every input's
    shape fixed from the test data, compile_to_artifact() with the default options, then the artifact
    run by tvmgen's host runner (HostModel) on the test inputs. ``other_path``: the OTHER_PATH messages
    logged on the way, where there were any."""
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
    taken: list[str] = []
    try:
        model = onnx.load(str(case_dir / "model.onnx"))
        inputs, expected = read_data(case_dir, model)
        overrides = [
            InputOverride(name, tuple(int(d) for d in np.shape(value)), None)
            for name, value in inputs.items()
            if isinstance(value, np.ndarray)
        ]
        with other_paths() as taken:
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
        result = {"pass": False, "stage": stage, "error": first_line(e), "seconds": round(time.perf_counter() - t0, 3)}
    else:
        result = {"pass": True, "seconds": round(time.perf_counter() - t0, 3)}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {**result, **({"other_path": taken} if taken else {})}


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


def run_alone(name: str, case_dir: Path, rtol: float, atol: float, scratch: Path) -> dict:
    """The case by itself, as the per-case mode runs it (an injected fault in place of tvmgen, for the tests)."""
    try:
        _inject_fault(name, "tvmgen")
        return run_tvmgen(case_dir, rtol, atol, scratch)
    except Exception as e:
        return {"pass": False, "stage": "import", "error": f"{type(e).__name__}: {e}"}


# ----------------------------------------------------------------------------------- batched: many cases, one model
# --batched: the cases that can share a model (the same IR version and opset imports, tensors in and out,
# no local functions) are merged into one model, GROUP_MAX at most, every name prefixed with the case's
# name; it is imported, compiled and run once, and its outputs are handed back to the cases. Only passes
# are taken from a merged model: a case that fails in one runs again alone, and a merged model that fails
# as a whole, or takes another path through tvmgen than its cases would alone, is split until the case at
# fault is alone. So every failure is the per-case mode's own result, with its own error line.

SEPARATOR = "__"  # case name + SEPARATOR + the case's own name (node test case names hold no "__")
# Cases in one merged model, at most: one of 32 compiles in about 5 times the time of one case, and smaller
# ones spread over the workers better.
GROUP_MAX = 24
_MERGED = itertools.count()
# A merged model of N cases may take timeout * (1 + (N - 1) / MERGED_PER_TIMEOUT), 24 cases about 4 times
# the limit: room for the others beside one case that takes most of the limit alone (Softplus compiles in
# 10 times the time of Relu), and a case that hangs still runs its merged model out of time, and is split
# from it.
MERGED_PER_TIMEOUT = 8


def group_key(model) -> tuple | None:
    """What a case's model must share with the others of a merged model: its IR version and the version of
    every domain it imports (no operator changes version). None for a model with local functions or sparse
    initializers, or with inputs or outputs other than tensors: it runs alone."""
    graph = model.graph
    if model.functions or any(g.sparse_initializer for g in all_graphs(graph)) or not graph.output:
        return None
    if not all(plain_tensor_type(v.type) for v in [*graph.input, *graph.output]):
        return None
    return (model.ir_version, tuple(sorted((o.domain, o.version) for o in model.opset_import)))


def _prefix_names(graph, prefix: str) -> None:
    """Every name in ``graph`` and its subgraphs prefixed (an empty one, an omitted optional input, kept
    empty); unnamed nodes named, so that an error naming a node names its case."""

    def named(name: str) -> str:
        return prefix + name if name else name

    for vi in [*graph.input, *graph.output, *graph.value_info]:
        vi.name = named(vi.name)
    for tensor in graph.initializer:
        tensor.name = named(tensor.name)
    for i, node in enumerate(graph.node):
        inputs, outputs = [named(n) for n in node.input], [named(n) for n in node.output]
        del node.input[:], node.output[:]
        node.input.extend(inputs)
        node.output.extend(outputs)
        node.name = prefix + (node.name or f"{node.op_type}_{i}")
        for attr in node.attribute:
            if attr.HasField("g"):
                _prefix_names(attr.g, prefix)
            for g in attr.graphs:
                _prefix_names(g, prefix)


def merge_models(models: list[tuple[str, object]]):
    """One model holding the graph of every (name, model) side by side, each of its names prefixed with
    NAME + SEPARATOR; inputs and outputs in the order of ``models``. The models share one group_key."""
    import copy

    from onnx import helper

    merged = helper.make_graph([], "conformance_batch", [], [])
    for name, model in models:
        graph = copy.deepcopy(model.graph)
        _prefix_names(graph, name + SEPARATOR)
        for field in ("node", "input", "output", "initializer", "value_info"):
            getattr(merged, field).extend(getattr(graph, field))
    first = models[0][1]
    return helper.make_model(merged, opset_imports=list(first.opset_import), ir_version=first.ir_version)


class MergedModelError(Exception):
    """A merged model failed as a whole (or took another path through tvmgen): no case's result."""

    def __init__(self, stage: str, error: str):
        super().__init__(f"{stage}: {error}")
        self.stage, self.error = stage, error


def run_merged(members: list[dict], notes: tuple, scratch: Path) -> list[dict]:
    """``members`` (name, model, inputs, expected, rtol, atol) merged into one model and run the way
    run_tvmgen runs one case: each member's result, a pass or how its outputs differ. MergedModelError when
    the merged model fails as a whole, or when its import ``notes`` (the opset upgrade) or a path it took
    differ from its cases' own."""
    import shutil

    import onnx

    from tvmgen import frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget
    from tvmgen.frontends.base import InputOverride
    from tvmgen.runtime.runner import HostModel

    t0 = time.perf_counter()
    # a folder of its own: a library loaded again from the same path would be the one loaded before
    number = next(_MERGED)
    folder, out = scratch / f"merged-{number}-model", scratch / f"merged-{number}"
    stage = "import"
    try:
        with other_paths() as taken:
            for m in members:
                _inject_fault(m["name"], "tvmgen")
            folder.mkdir(parents=True, exist_ok=True)
            onnx.save(merge_models([(m["name"], m["model"]) for m in members]), str(folder / "model.onnx"))
            inputs = {m["name"] + SEPARATOR + k: v for m in members for k, v in m["inputs"].items()}
            overrides = [InputOverride(k, tuple(int(d) for d in np.shape(v)), None) for k, v in inputs.items()]
            imported = frontends.load(folder / "model.onnx", overrides)
            if tuple(imported.notes) != notes:
                raise MergedModelError(stage, "imported otherwise than its cases: " + "; ".join(imported.notes))
            stage = "build"
            opts = build.BuildOptions.for_target(BuildTarget(PLATFORMS["host"], "cpu", "generic"))
            build.compile_to_artifact(imported, opts, out, True, {"name": "conformance_batch"})
        if taken:
            raise MergedModelError(stage, "; ".join(taken))
        stage = "load"
        host = HostModel(out, threads=1)
        stage = "run"
        outputs = host.run({s.name: inputs[s.name] for s in host.manifest.inputs})
    except MergedModelError:
        raise
    except Exception as e:
        raise MergedModelError(stage, first_line(e)) from e
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    counts = [len(m["expected"]) for m in members]
    if len(outputs) != sum(counts):
        raise MergedModelError("run", f"{len(outputs)} outputs, expected {sum(counts)}")
    seconds = round(time.perf_counter() - t0, 3)
    results, k = [], 0
    for m, n in zip(members, counts):
        result = {"pass": True, "seconds": seconds, "batch": len(members)}
        try:
            compare(m["expected"], outputs[k : k + n], m["rtol"], m["atol"])
        except MismatchError as e:
            result = {"pass": False, "stage": "compare", "error": str(e), "seconds": seconds}
        results.append(result)
        k += n
    return results


def named_in(error: str, members: list[dict]) -> list[dict]:
    """The members a merged model's error points at: those whose prefixed names it quotes, else the one
    whose output it numbers ("output N of the model")."""
    named = [m for m in members if m["name"] + SEPARATOR in error]
    if named:
        return named
    number = re.search(r"\boutput (\d+) of the model\b", error)
    owners = [m for m in members for _ in m["expected"]]
    if number and int(number.group(1)) < len(owners):
        return [owners[int(number.group(1))]]
    return []


def run_group(cases: list[tuple], scratch: Path, send) -> None:
    """A batched task in a worker: each case imported alone first (milliseconds; a case tvmgen cannot
    import, or imports with a note or a path of its own, runs alone), the rest merged and run once
    (run_merged), every failure decided by the case's run alone. A merged model that fails as a whole
    loses the cases its error names (they run alone) and is merged again; one whose error names none goes
    back to the pool in two halves ("split"). Before each step the worker says which case ("case") or cases
    ("group") a crash or hang from then on belongs to."""
    from collections import Counter

    import onnx

    from tvmgen import frontends
    from tvmgen.frontends.base import InputOverride

    def alone(name: str, case_dir: Path, rtol: float, atol: float) -> None:
        send(("case", name))
        send(("tvmgen", name, run_alone(name, case_dir, rtol, atol, scratch)))

    members: list[dict] = []
    for name, case_dir, rtol, atol in cases:
        send(("case", name))  # a crash or hang in the import is this case's
        imported = None
        try:
            model = onnx.load(str(Path(case_dir) / "model.onnx"))
            inputs, expected = read_data(Path(case_dir), model)
            overrides = [InputOverride(k, tuple(int(d) for d in np.shape(v)), None) for k, v in inputs.items()]
            with other_paths() as taken:
                imported = frontends.load(Path(case_dir) / "model.onnx", overrides)
        except Exception:
            pass  # decided by its run alone, below
        if imported is None or taken or group_key(model) is None:
            alone(name, Path(case_dir), rtol, atol)
            continue
        m = {"name": name, "dir": Path(case_dir), "rtol": rtol, "atol": atol, "model": model}
        members.append({**m, "inputs": inputs, "expected": expected, "notes": tuple(imported.notes)})
    notes = Counter(m["notes"] for m in members).most_common(1)[0][0] if members else ()
    for m in [m for m in members if m["notes"] != notes]:  # the opset converter failed on it alone: not merged
        alone(m["name"], m["dir"], m["rtol"], m["atol"])
    members = [m for m in members if m["notes"] == notes]
    while len(members) > 1:
        names = [m["name"] for m in members]
        send(("group", names))
        t0 = time.perf_counter()
        try:
            results = run_merged(members, notes, scratch)
        except MergedModelError as e:
            named = named_in(e.error, members)
            faulty = named if 0 < len(named) < len(members) else []
            seconds = round(time.perf_counter() - t0, 3)
            send(("batch", {"cases": len(members), "seconds": seconds, "stage": e.stage, "error": e.error[:300]}))
            for m in faulty:
                alone(m["name"], m["dir"], m["rtol"], m["atol"])
            if faulty:
                members = [m for m in members if m["name"] not in {f["name"] for f in faulty}]
                continue
            half = len(names) // 2
            send(("split", [names[:half], names[half:]]))
            return
        send(("batch", {"cases": len(members), "seconds": round(time.perf_counter() - t0, 3), "stage": "pass"}))
        for m, result in zip(members, results):
            if result["pass"]:
                send(("tvmgen", m["name"], result))
            else:
                alone(m["name"], m["dir"], m["rtol"], m["atol"])
        return
    for m in members:
        alone(m["name"], m["dir"], m["rtol"], m["atol"])


def worker_main(conn, log_path: str, scratch: str) -> None:
    """A worker: its stdout and stderr go to ``log_path``; it answers ("ready",) once warmed up, then for
    each task {"cases": [(name, case_dir, rtol, atol, skip_ort)], "batched": bool} ("ort", name, result) for
    each case (unless skip_ort), then ("tvmgen", name, result) for each (one by one: ("case", name) first;
    batched: see run_group), then ("done",); None ends it."""
    import faulthandler

    import tvmgen

    tvmgen.load_tvm_without_torch()  # ONNX cases only: TVM loads without PyTorch, as the CLI's does (1.7 s less)
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
        print(f"=== {', '.join(c[0] for c in task['cases'])}", flush=True)
        for name, case_dir, rtol, atol, skip_ort in task["cases"]:
            if not skip_ort:
                _inject_fault(name, "ort")
                conn.send(("ort", name, run_onnxruntime(Path(case_dir), rtol, atol)))
        cases = [c[:4] for c in task["cases"]]
        if task["batched"] and len(cases) > 1:
            run_group(cases, work, conn.send)
        else:
            for name, case_dir, rtol, atol in cases:
                conn.send(("case", name))
                conn.send(("tvmgen", name, run_alone(name, Path(case_dir), rtol, atol, work)))
        conn.send(("done",))
