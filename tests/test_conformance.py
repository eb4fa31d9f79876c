"""benchmarks/conformance.py: the ONNX backend node cases through tvmgen and onnxruntime. One run of the
fast subset for a few operators, with a case tvmgen cannot import and three cases whose worker is made to
crash or hang (fault injection in the benchmark's own workers), then the mobile-subset rule, the
grouping of failure reasons and the output comparison on their own."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import load_benchmark, run_benchmark

OPS = "Add,Relu,Conv,Gather,Reshape,Col2Im,Neg,Abs,Sigmoid"


@pytest.fixture(scope="module")
def conformance():
    return load_benchmark("conformance")


def test_fast_subset_isolates_crashes_and_hangs(tmp_path):
    out, md = tmp_path / "conformance.json", tmp_path / "conformance.md"
    # test_neg: the worker dies of SIGSEGV in tvmgen's turn; test_abs: it hangs there; test_sigmoid: it dies
    # in onnxruntime's turn, and tvmgen still runs the case in a fresh worker
    faults = "test_neg=crash,test_abs=hang,test_sigmoid=ort-crash"
    env = dict(os.environ, TVMGEN_CONFORMANCE_FAULTS=faults)
    # the cases are written to the default work directory once per onnx version, and reused
    args = ["--ops", OPS, "--one-per-op", "--jobs", "2", "--timeout", "15"]
    proc = run_benchmark("conformance.py", *args, "--json", out, "--markdown", md, env=env, timeout=300)

    doc = json.loads(out.read_text())
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
    again = run_benchmark("conformance.py", "--report", out)
    assert again.stdout.strip() == table.strip()


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
