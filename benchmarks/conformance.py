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

import contextlib
import itertools
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
    if model.functions or any(g.sparse_initializer for g in _graphs(graph)) or not graph.output:
        return None
    if not all(_plain_tensor_type(v.type) for v in [*graph.input, *graph.output]):
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
    path: Path,
    results: list[dict],
    skipped: list[dict],
    settings: dict,
    complete: bool,
    elapsed: float,
    batches: list[dict] | None = None,
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
        **({"batches": batches} if batches is not None else {}),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def write_record(path: Path, results: list[dict], settings: dict) -> None:
    """--record: tvmgen's result of each case by operator, {"pass": true} or {"pass": false, "stage": ...}
    ("other_path": true where tvmgen took one, see OTHER_PATH), with the versions it holds for; one operator
    a line."""
    ops: dict[str, dict] = {}
    for r in sorted(results, key=lambda r: (r["op"], r["name"])):
        t = r["tvmgen"]
        entry = {"pass": True} if t["pass"] else {"pass": False, "stage": t.get("stage")}
        ops.setdefault(r["op"], {})[r["name"]] = {**entry, **({"other_path": True} if t.get("other_path") else {})}
    head = {
        "about": "tvmgen's host/cpu result of each ONNX node test case run, by operator: conformance.py --record",
        "selection": {k: settings[k] for k in ("ops", "one_per_op", "subset")},
        "versions": {k: settings["versions"].get(k) for k in ("onnx", "apache-tvm")},
    }
    body = ",\n".join(f"  {json.dumps(op)}: {json.dumps(cases)}" for op, cases in ops.items())
    text = json.dumps(head, indent=1)[:-2] + ',\n "ops": {\n' + body + "\n }\n}\n"
    json.loads(text)  # the layout above is still JSON
    path.write_text(text)


def read_record(path: Path) -> dict[str, dict]:
    """A --record file: case name -> {"pass": ..., "stage": ..., "other_path": ...}."""
    doc = json.loads(path.read_text())
    return {name: entry for cases in doc["ops"].values() for name, entry in cases.items()}


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
