"""ONNX conformance's cases: which are in the mobile subset, how they are written to the work directory and
read back, and how their outputs are compared with the expected ones."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

import benchlib

# ----------------------------------------------------------------------------------- the mobile subset
# Cases of this domain's operators (Adagrad, Adam, Momentum, Gradient) train a model: not run at all.
TRAINING_DOMAIN = "ai.onnx.preview.training"
LOSS_OPS = frozenset({"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})
SEQUENCE_OPS = frozenset({"SplitToSequence", "ConcatFromSequence"})  # besides Sequence* and Optional*
STRING_OPS = frozenset({"StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"})

RTOL, ATOL = 1e-3, 1e-7  # onnx's node cases (onnx.backend.test.case.node.expect): the runner's defaults too
CASES_FORMAT = 1  # cases.json's fields; another value writes the cases again


def all_graphs(graph):
    """``graph`` and every subgraph under it (If branches, Loop and Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from all_graphs(attr.g)
            for g in attr.graphs:
                yield from all_graphs(g)


def plain_tensor_type(type_proto) -> bool:
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
    ops = {n.op_type for g in all_graphs(model.graph) for n in g.node} | {node.op_type}
    if any(op.startswith(("Sequence", "Optional")) or op in SEQUENCE_OPS for op in ops):
        return "other", "sequence/optional operator"
    if ops & STRING_OPS:
        return "other", "string operator"
    if not all(plain_tensor_type(v.type) for v in [*model.graph.input, *model.graph.output]):
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
