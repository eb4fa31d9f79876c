"""benchmarks/conformance.py: the ONNX backend node cases through tvmgen and onnxruntime. One run of the
fast subset for a few operators, case by case, with a case tvmgen cannot import and three cases whose
worker is made to crash or hang (fault injection in the benchmark's own workers); one batched run of one
case of every operator of the mobile subset, checked against the committed record (every operator tvmgen
passed there still passes) and against the run case by case; then the merging (a merged run in this
process, its failures decided alone), the mobile-subset rule, the grouping of failure reasons and the output
comparison on their own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import REPO, TESTS
from helpers import load_benchmark, run_benchmark

OPS = "Add,Relu,Conv,Gather,Reshape,Col2Im,Neg,Abs,Sigmoid"
# benchmarks/conformance.py --one-per-op --subset mobile --record tests/recorded/conformance_one_per_op.json
RECORD = TESTS / "recorded" / "conformance_one_per_op.json"
FAULTY = "test_pow"  # made to fail in place of tvmgen, so that its merged model is split
SAME_EITHER_WAY = ("Add", "Relu", "Conv", "Gather", "Reshape", "Col2Im")  # batched and case by case


@pytest.fixture(scope="module")
def conformance():
    return load_benchmark("conformance")


@pytest.fixture(scope="module")
def unbatched(tmp_path_factory) -> tuple[dict, subprocess.CompletedProcess, Path]:
    """The fast subset of OPS case by case, with faults injected: (the JSON, the process, the Markdown)."""
    tmp = tmp_path_factory.mktemp("unbatched")
    out, md = tmp / "conformance.json", tmp / "conformance.md"
    # test_neg: the worker dies of SIGSEGV in tvmgen's turn; test_abs: it hangs there; test_sigmoid: it dies
    # in onnxruntime's turn, and tvmgen still runs the case in a fresh worker
    faults = "test_neg=crash,test_abs=hang,test_sigmoid=ort-crash"
    env = dict(os.environ, TVMGEN_CONFORMANCE_FAULTS=faults)
    # the cases are written to the default work directory once per onnx version, and reused
    args = ["--ops", OPS, "--one-per-op", "--jobs", "2", "--timeout", "15"]
    proc = run_benchmark("conformance.py", *args, "--json", out, "--markdown", md, env=env, timeout=300)
    return json.loads(out.read_text()), proc, md


@pytest.fixture(scope="module")
def batched(tmp_path_factory) -> tuple[dict, subprocess.CompletedProcess]:
    """One case of every operator of the mobile subset, batched (the cases the record says fail, or build
    on another path, run alone), with one case made to fail in place of tvmgen so that its merged model
    fails as a whole."""
    out = tmp_path_factory.mktemp("batched") / "conformance.json"
    env = dict(os.environ, TVMGEN_CONFORMANCE_FAULTS=f"{FAULTY}=error")
    # a compile slowed past 20 s by a loaded machine runs again alone with 300 s: the suite checks what
    # passes, not how fast it compiles (that is the benchmark's)
    args = ["--one-per-op", "--subset", "mobile", "--batched", "--known", RECORD, "--jobs", "2", "--timeout", "20"]
    args += ["--retry-timeouts", "300"]
    proc = run_benchmark("conformance.py", *args, "--json", out, env=env, timeout=1200)
    return json.loads(out.read_text()), proc


@pytest.mark.slow
def test_fast_subset_isolates_crashes_and_hangs(unbatched):
    doc, proc, md = unbatched
    assert doc["benchmark"] == "conformance" and doc["complete"] is True
    by_name = {r["name"]: r for r in doc["results"]}
    assert len(by_name) == 9 and {r["op"] for r in doc["results"]} == set(OPS.split(","))
    assert all(r["subset"] == "mobile" for r in doc["results"])
    for name in ("test_add", "test_relu"):
        assert by_name[name]["ort"]["pass"] and by_name[name]["tvmgen"]["pass"], by_name[name]

    col2im = by_name["test_col2im"]  # no Col2Im in TVM 0.27's ONNX importer: tvmgen's ModelError, one line
    assert col2im["ort"]["pass"] and not col2im["tvmgen"]["pass"]
    assert col2im["tvmgen"]["stage"] == "import" and "Col2Im" in col2im["tvmgen"]["error"]
    assert "\n" not in col2im["tvmgen"]["error"]

    neg, abs_, sigmoid = by_name["test_neg"], by_name["test_abs"], by_name["test_sigmoid"]
    assert neg["ort"]["pass"] and not neg["tvmgen"]["pass"] and neg["tvmgen"]["stage"] == "crash"
    assert "SIGSEGV" in neg["tvmgen"]["error"]
    assert abs_["ort"]["pass"] and abs_["tvmgen"]["stage"] == "timeout" and "15 s" in abs_["tvmgen"]["error"]
    assert not sigmoid["ort"]["pass"] and "SIGSEGV" in sigmoid["ort"]["error"]
    assert sigmoid["tvmgen"]["pass"]  # run again without onnxruntime, by a new worker

    s = doc["summary"]["mobile"]
    passed = sum(r["tvmgen"]["pass"] for r in doc["results"])
    assert s["cases"] == 9 and s["tvmgen"] == passed and s["onnxruntime"] == 8
    assert s["onnxruntime_only"] == sum(r["ort"]["pass"] and not r["tvmgen"]["pass"] for r in doc["results"]) >= 3
    groups = doc["failure_groups"]["mobile"]
    grouped = {c: g["reason"] for g in groups for c in g["cases"]}
    assert grouped["test_neg"].startswith("crash:") and grouped["test_abs"].startswith("timeout:")
    assert "Col2Im" in grouped["test_col2im"] and "test_sigmoid" not in grouped

    # the table on stdout, progress on stderr; the same numbers in Markdown
    table = proc.stdout
    assert any(line.split() == ["Add", "1", "1", "1", "1"] for line in table.splitlines())
    assert any(line.split() == ["Col2Im", "1", "1", "1", "0"] for line in table.splitlines())
    assert "mobile subset" in table and "test_col2im" in table and "[bench" in proc.stderr
    text = md.read_text()
    assert "### Totals" in text and "| mobile subset | 9 | 8 |" in text and "| Add | 1 | 1 | 1 | 1 |" in text
    assert "col2im" in text and "### By operator" in text

    # --report: the same tables from the JSON, nothing run
    again = run_benchmark("conformance.py", "--report", md.with_suffix(".json"))
    assert again.stdout.strip() == table.strip()


@pytest.mark.slow
def test_batched_one_case_per_operator_keeps_what_passed(batched):
    """The suite's conformance check: one case of every operator of the mobile subset, batched, and every
    operator tvmgen passed in the committed record passes still."""
    doc, proc = batched
    record = json.loads(RECORD.read_text())
    assert doc["complete"] is True and doc["settings"]["batched"] is True
    assert record["versions"]["onnx"] == doc["settings"]["versions"]["onnx"], (
        f"{RECORD} holds for another onnx: write it again with the command in its test"
    )
    assert record["selection"] == {"ops": None, "one_per_op": True, "subset": "mobile"}
    by_name = {r["name"]: r for r in doc["results"]}
    recorded = {case: (op, entry) for op, cases in record["ops"].items() for case, entry in cases.items()}
    assert set(by_name) == set(recorded) and len(recorded) == len(record["ops"]) > 150  # one case an operator
    assert all(r["subset"] == "mobile" and r["op"] == recorded[r["name"]][0] for r in doc["results"])
    lost = [
        f"{op} ({case}): {by_name[case]['tvmgen'].get('stage')}: {by_name[case]['tvmgen'].get('error')}"
        for case, (op, entry) in recorded.items()
        if entry["pass"] and case != FAULTY and not by_name[case]["tvmgen"]["pass"]
    ]
    assert not lost, "operators tvmgen passed in the record and fails now:\n" + "\n".join(lost)

    # the case made to fail: its merged model failed as a whole, and was split until the case ran alone
    faulty = by_name[FAULTY]["tvmgen"]
    assert not faulty["pass"] and faulty["stage"] == "import" and faulty["error"] == "RuntimeError: injected fault"
    assert any("injected fault" in b.get("error", "") for b in doc["batches"])
    # few compiles: most passes come out of a merged model, and the merged models are few
    passes = [r["tvmgen"] for r in doc["results"] if r["tvmgen"]["pass"]]
    assert sum(t.get("batch", 1) > 1 for t in passes) >= 0.75 * len(passes)
    assert sum(b["stage"] == "pass" for b in doc["batches"]) <= 30
    assert "merged model" in proc.stderr


@pytest.mark.slow
def test_batched_results_are_the_case_by_case_ones(batched, unbatched):
    """Batching changes no outcome: the operators both runs hold, unfaulted, have the same results (the
    passes out of a merged model, the failures from the case's run alone, with the same error line)."""
    merged = {r["op"]: r for r in batched[0]["results"]}
    alone = {r["op"]: r for r in unbatched[0]["results"]}

    def outcome(r: dict) -> tuple:
        t = r["tvmgen"]
        return r["name"], r["ort"]["pass"], t["pass"], t.get("stage"), t.get("error")

    assert [outcome(merged[op]) for op in SAME_EITHER_WAY] == [outcome(alone[op]) for op in SAME_EITHER_WAY]
    passed = [op for op in SAME_EITHER_WAY if merged[op]["tvmgen"]["pass"]]
    assert {"Add", "Relu", "Conv", "Gather"} <= set(passed)
    assert all(merged[op]["tvmgen"]["batch"] > 1 for op in passed)  # out of a merged model
    assert all("batch" not in merged[op]["tvmgen"] for op in SAME_EITHER_WAY if op not in passed)


def _write_case(root: Path, name: str, node, inputs: dict, expected: dict, version: int = 17) -> Path:
    """A node test case as onnx's writer lays it out: NAME/model.onnx and test_data_set_0/{input,output}_K.pb."""
    import onnx
    from onnx import numpy_helper

    def info(key, value):
        return helper.make_tensor_value_info(key, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)

    graph = helper.make_graph(
        [node], name, [info(k, v) for k, v in inputs.items()], [info(k, v) for k, v in expected.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    model.ir_version = 8
    data = root / name / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(model, str(root / name / "model.onnx"))
    for kind, arrays in (("input", inputs), ("output", expected)):
        for k, value in enumerate(arrays.values()):
            (data / f"{kind}_{k}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    return root / name


def test_merged_run_decides_failures_alone(conformance, tmp_path):
    """run_group, in this process, on four cases of one opset: one tvmgen cannot import (an empty input,
    caught by the import alone), one whose output shape depends on the data (the merged model's build error
    numbers its output: it runs alone and the rest are merged again), one whose expected output is wrong
    (it fails in the merged model, and runs again alone) and one that passes. Each result is the one the
    case gets alone, and the pass comes out of the merged model."""
    x = np.array([[-1.5, 0.0, 2.0], [3.0, -4.0, 0.5]], np.float32)
    cases = {
        "test_empty": _write_case(
            tmp_path, "test_empty", helper.make_node("Relu", ["x"], ["y"]), {"x": x[:0]}, {"y": x[:0]}
        ),
        "test_nonzero": _write_case(
            tmp_path,
            "test_nonzero",
            helper.make_node("NonZero", ["x"], ["y"]),
            {"x": x},
            {"y": np.array(np.nonzero(x))},
        ),
        "test_wrong": _write_case(
            tmp_path,
            "test_wrong",
            helper.make_node("Neg", ["x"], ["y"]),
            {"x": x},
            {"y": x},  # not -x
        ),
        "test_right": _write_case(
            tmp_path, "test_right", helper.make_node("Relu", ["x"], ["y"]), {"x": x}, {"y": np.maximum(x, 0)}
        ),
    }
    sent: list[tuple] = []
    tasks = [(name, str(d), 1e-3, 1e-7) for name, d in cases.items()]
    conformance.run_group(tasks, tmp_path / "scratch", sent.append)

    results = {m[1]: m[2] for m in sent if m[0] == "tvmgen"}
    assert list(results) == ["test_empty", "test_nonzero", "test_wrong", "test_right"]
    batches = [m[1] for m in sent if m[0] == "batch"]
    assert [(b["cases"], b["stage"]) for b in batches] == [(3, "build"), (2, "pass")]
    assert batches[0]["error"].startswith("output 0 of the model is not a tensor of known shape")
    merged_run = sent.index(("group", ["test_wrong", "test_right"]))
    assert ("case", "test_wrong") in sent[merged_run:]  # run again alone after the merged model
    assert results["test_right"]["pass"] and results["test_right"]["batch"] == 2
    for name, case_dir in cases.items():
        own = conformance.run_tvmgen(case_dir, 1e-3, 1e-7, tmp_path / "alone")
        assert (results[name]["pass"], results[name].get("stage"), results[name].get("error")) == (
            own["pass"],
            own.get("stage"),
            own.get("error"),
        ), name
    assert [results[n].get("stage") for n in cases] == ["import", "build", "compare", None]


def _model(nodes, inputs, outputs, domain="", version=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version)])


def test_mobile_subset_rule(conformance):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    add = helper.make_node("Add", ["x", "x"], ["y"])
    assert conformance.classify(add, _model([add], [x], [y])) == ("mobile", "")

    adam = helper.make_node("Adam", ["x"], ["y"], domain="ai.onnx.preview.training")
    assert conformance.classify(adam, _model([adam], [x], [y], adam.domain, 1))[0] == "skipped"

    loss = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "x"], ["y"])
    assert conformance.classify(loss, _model([loss], [x], [y])) == ("other", "loss function")

    dropout = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    assert conformance.classify(dropout, _model([dropout], [x], [y])) == ("other", "training mode")
    bn = helper.make_node("BatchNormalization", ["x"] * 5, ["y"], training_mode=1)
    assert conformance.classify(bn, _model([bn], [x], [y])) == ("other", "training mode")
    assert conformance.classify(helper.make_node("Dropout", ["x"], ["y"]), _model([add], [x], [y]))[0] == "mobile"

    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    split = helper.make_node("SplitToSequence", ["x"], ["s"])
    assert conformance.classify(split, _model([split], [x], [seq]))[1] == "sequence/optional operator"

    # a sequence op inside a Loop body counts too
    body = helper.make_graph([helper.make_node("SequenceEmpty", [], ["e"])], "body", [], [])
    loop = helper.make_node("Loop", ["", ""], ["y"], body=body)
    assert conformance.classify(loop, _model([loop], [x], [y]))[1] == "sequence/optional operator"

    words = helper.make_tensor_value_info("w", TensorProto.STRING, [2])
    label = helper.make_node("LabelEncoder", ["w"], ["y"], domain="ai.onnx.ml")
    assert conformance.classify(label, _model([label], [words], [y], "ai.onnx.ml", 4)) == (
        "other",
        "sequence, optional, map or string input/output",
    )
    norm = helper.make_node("StringNormalizer", ["w"], ["y"])
    assert conformance.classify(norm, _model([norm], [words], [y]))[1] == "string operator"


def test_failure_reasons_group(conformance):
    a = "TVM's ONNX importer failed on /tmp/w/node/test_a/model.onnx at operator Foo #0 (inputs: x graph input): KeyError: 'axis'"
    b = "TVM's ONNX importer failed on /tmp/w/node/test_b/model.onnx at operator Foo #3 (inputs: y, z): KeyError: 'axes'"
    assert conformance.normalise(a) == conformance.normalise(b)
    assert "TVM's ONNX importer" in conformance.normalise(a)
    assert conformance.normalise("input 'data' has dynamic dimensions (?x3x4)") == conformance.normalise(
        "input 'x' has dynamic dimensions (2x0)"
    )
    assert conformance.normalise("output 0: shape (3, 4), expected (3, 4, 1)") == "output N: shape (…), expected (…)"
    assert conformance.normalise("input 'x' has dynamic dimensions (2x?x4)") == "input '…' has dynamic dimensions (…)"
    assert conformance.shorten(a).startswith("TVM's ONNX importer failed on test_a/model.onnx at")

    results = [
        {"name": n, "subset": s, "ort": {"pass": o}, "tvmgen": {"pass": False, "stage": "import", "error": e}}
        for n, s, o, e in (("test_a", "mobile", True, a), ("test_b", "mobile", True, b), ("test_c", "mobile", False, a))
    ]
    [group] = conformance.failure_groups(results, "mobile")
    assert group["cases"] == ["test_a", "test_b"] and group["reason"].startswith("import: TVM's ONNX importer")


def test_compare_as_onnx_runner(conformance):
    compare, mismatch = conformance.compare, conformance.MismatchError
    e = [np.array([1.0, 2.0], np.float32)]
    compare(e, [np.array([1.0, 2.0005], np.float32)], 1e-3, 1e-7)  # within rtol
    with pytest.raises(mismatch, match=r"output 0: 1 of 2 elements differ beyond rtol 0.001, atol 1e-07"):
        compare(e, [np.array([1.0, 2.01], np.float32)], 1e-3, 1e-7)
    with pytest.raises(mismatch, match=r"output 0: dtype float64, expected float32"):
        compare(e, [np.array([1.0, 2.0])], 1e-3, 1e-7)
    with pytest.raises(mismatch, match=r"output 0: shape \(1, 2\), expected \(2,\)"):
        compare(e, [np.ones((1, 2), np.float32)], 1e-3, 1e-7)
    with pytest.raises(mismatch, match="2 outputs, expected 1"):
        compare(e, e + e, 1e-3, 1e-7)
    compare([np.array([np.nan], np.float32)], [np.array([np.nan], np.float32)], 1e-3, 1e-7)  # NaN == NaN


def test_one_per_op_picks_a_plain_case_first(conformance):
    cases = [
        {"name": n, "op": op, "subset": s}
        for n, op, s in (
            ("test_relu_expanded", "Relu", "mobile"),
            ("test_relu", "Relu", "mobile"),
            ("test_add_bcast", "Add", "mobile"),
            ("test_add", "Add", "mobile"),
            ("test_adam", "Adam", "skipped"),
        )
    ]
    assert [c["name"] for c in conformance.select(cases, None, True)] == ["test_add", "test_relu"]
    everything = [c["name"] for c in conformance.select(cases, ["add", "RELU"], False)]
    assert everything[:2] == ["test_add", "test_relu"] and sorted(everything[2:]) == [
        "test_add_bcast",
        "test_relu_expanded",
    ]


def test_merged_model_keeps_cases_apart(conformance):
    import onnxruntime as ort

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    # the same names in both; b's If branches read x from the outer graph
    a = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", 1, [3])]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", 1, [3])]
    )
    b = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], [c, x], [y])
    a.ir_version = b.ir_version = 8  # one onnxruntime reads
    assert (
        conformance.group_key(a)
        == conformance.group_key(b)
        != conformance.group_key(_model(a.graph.node, [x], [y], version=13))
    )
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    assert conformance.group_key(_model([helper.make_node("SequenceEmpty", [], ["s"])], [], [seq])) is None

    merged = conformance.merge_models([("test_a", a), ("test_b", b)])
    assert [i.name for i in merged.graph.input] == ["test_a__x", "test_b__c", "test_b__x"]
    assert [o.name for o in merged.graph.output] == ["test_a__y", "test_b__y"]
    assert [n.name for n in merged.graph.node] == ["test_a__Relu_0", "test_b__If_0"]
    value = np.array([-1.5, 0.0, 2.0], np.float32)
    session = ort.InferenceSession(merged.SerializeToString(), providers=["CPUExecutionProvider"])
    for flag, branch in ((True, -value), (False, np.abs(value))):
        feeds = {"test_a__x": value, "test_b__c": np.array(flag), "test_b__x": value}
        relu, chosen = session.run(None, feeds)
        np.testing.assert_array_equal(relu, np.maximum(value, 0))
        np.testing.assert_array_equal(chosen, branch)
    assert a.graph.input[0].name == "x" and a.graph.node[0].name == ""  # the cases' own models untouched

    # the fallbacks a merged model must not take are found by tvmgen's log lines: still logged as written
    source = "".join(f.read_text() for f in (REPO / "generator" / "tvmgen").rglob("*.py"))
    assert all(f'"{message}' in source for message in conformance.OTHER_PATH)

    # a merged model's error points at the cases it names, or at the owner of the output it numbers
    members = [{"name": "test_a", "expected": [0]}, {"name": "test_b", "expected": [0, 0]}]
    named = conformance.named_in
    assert [m["name"] for m in named("at operator If #1 'test_b__If_0' (inputs: test_b__c bool[])", members)] == [
        "test_b"
    ]
    assert [m["name"] for m in named("output 1 of the model is not a tensor of known shape (…)", members)] == ["test_b"]
    assert named("output 3 of the model is not a tensor", members) == [] and named("RuntimeError: x", members) == []


@pytest.mark.slow
def test_a_timeout_is_retried_alone_and_said(tmp_path):
    """--retry-timeouts: a case that ran out of time (here, a limit no compile meets) runs once more alone with
    the longer limit; its result replaces the timeout, marked, and the output says it happened."""
    out = tmp_path / "r.json"
    args = ["--ops", "Relu", "--one-per-op", "--jobs", "1", "--timeout", "0.01", "--retry-timeouts", "300"]
    proc = run_benchmark("conformance.py", *args, "--json", out, timeout=600)
    (relu,) = json.loads(out.read_text())["results"]
    assert relu["tvmgen"]["pass"] and relu["tvmgen"]["retried_after_timeout_s"] == 0.01, relu
    assert "1 case(s) timed out after 0.01 s: run again alone, 300 s each (test_relu)" in proc.stderr
