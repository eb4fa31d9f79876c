"""The deploy app's results logic in the Java API (org.tvmgen RunStats, OutputSummary, PseudoRandom,
JsonObject), compiled with javac and run on this JVM: pure Java, so no native library is built.

tests/java/ResultsCheck.java writes one results object; its figures must be numpy's, its top-5 the
host's (tvmgen.reports.agreement.top_k) and its inputs tvmgen.core.model.pseudo_random's, since the host
checks the phone's outputs by running its reference on those inputs again.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import REPO, require_tool
from tvmgen.core.model import pseudo_random
from tvmgen.reports import agreement


@pytest.fixture(scope="module")
def results_check(tmp_path_factory):
    require_tool("javac")
    require_tool("java")
    classes = tmp_path_factory.mktemp("results-check")
    # -sourcepath: only the classes ResultsCheck uses are compiled (the app's Java 8 level, as the jar)
    c = subprocess.run(
        ["javac", "--release", "8", "-Xlint:-options", "-encoding", "UTF-8", "-sourcepath", REPO / "jni/java"]
        + ["-d", classes, REPO / "tests/java/ResultsCheck.java"],
        capture_output=True,
        text=True,
    )
    assert c.returncode == 0, c.stdout + c.stderr

    def run(*runs_ms: float) -> dict:
        p = subprocess.run(
            ["java", "-cp", classes, "ResultsCheck", *map(repr, runs_ms)], capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout)

    return run


def test_run_stats_are_numpys(results_check):
    runs = np.random.default_rng(3).lognormal(1.5, 0.3, 37).round(4).tolist()
    doc = results_check(*runs)
    assert doc["runs_ms"] == runs  # every run, in order, exactly
    assert doc["copy_in_runs_ms"] == [0.1] * 37 and doc["copy_out_runs_ms"] == [0.2] * 37
    for key, p in (("median_run_ms", 50), ("p90_run_ms", 90), ("p99_run_ms", 99), ("min_run_ms", 0)):
        assert doc[key] == pytest.approx(np.percentile(runs, p), rel=1e-12), key
    assert doc["max_run_ms"] == max(runs) and doc["mean_run_ms"] == pytest.approx(np.mean(runs))
    one = results_check(2.5)
    assert one["median_run_ms"] == one["p99_run_ms"] == 2.5
    none = results_check()
    assert none["runs_ms"] == [] and none["median_run_ms"] is None and none["empty_median"] is None


def test_output_summaries(results_check):
    logits, big = results_check(1.0)["outputs"]
    values = [0.5, 3.25, -1.0, 3.25, None, 7.0, 0.0, 2.0, 1e-7, -0.0]
    assert logits["values"] == values and logits["shape"] == [1, 10] and logits["dtype"] == "float32"
    # a NaN never counts as large; ties keep the lower index first, as the host's top_k
    assert logits["top5"] == [5, 1, 3, 7, 0] == agreement.top_k(np.array(values, dtype=float))
    assert logits["top5_values"] == [7.0, 3.25, 3.25, 2.0, 0.5]
    assert logits["non_finite"] == 1 and logits["min"] is None  # the NaN shows, it is not hidden in the figures
    # an output over MAX_VALUES elements keeps its figures only, and is not a classifier ([1, 1, N])
    v = (np.arange(4097) * 37) % 101
    assert "values" not in big and "top5" not in big
    assert big["min"] == 0 and big["max"] == 100 and big["mean"] == pytest.approx(v.mean())


def test_pseudo_random_inputs_are_the_hosts(results_check):
    doc = results_check(1.0)
    assert np.array_equal(np.asarray(doc["pseudo_random_42"], np.float32), pseudo_random((1000,), "float32", 42))
    assert np.array_equal(np.asarray(doc["pseudo_random_43"], np.float32), pseudo_random((5,), "float32", 43))
    assert pseudo_random((2, 3), "int64", 42).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_json_strings_are_escaped(results_check):
    doc = results_check(1.0)
    assert doc["text"] == 'quote " backslash \\ newline \n tab \t bell \u0007 é'
    assert doc["nan"] is None and doc["nothing"] is None
