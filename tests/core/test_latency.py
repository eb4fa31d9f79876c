"""core.latency: one statistics type for every timer and result reader (issue 48)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import TESTS
from tvmgen.core.latency import Latency

RECORDED = TESTS / "recorded" / "results"

# Fixed, unsorted, with an outlier and a repeated value: percentiles interpolate between samples.
SAMPLES = [6.56, 6.29, 6.55, 6.45, 6.41, 6.38, 6.27, 6.44, 6.32, 7.9, 6.29, 6.39, 6.22, 6.5]


def test_statistics_are_numpys():
    lat = Latency.from_samples(SAMPLES)
    a = np.asarray(SAMPLES)
    assert lat.count == 14 and lat.samples == tuple(SAMPLES)
    assert lat.mean == pytest.approx(a.mean(), abs=0) and lat.std == pytest.approx(a.std(), abs=0)
    assert (lat.min, lat.max) == (6.22, 7.9)
    assert lat.median == np.median(a)
    for p in (0, 1, 25, 50, 75, 90, 95, 99, 99.9, 100):
        assert lat.percentile(p) == np.percentile(a, p), p
    assert lat.stat("p99.9") == np.percentile(a, 99.9) and lat.stat("median") == lat.percentile(50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        lat.percentile(101)
    with pytest.raises(ValueError, match="no statistic"):
        lat.stat("p50_ms")


def test_numpy_columns_and_untimed_runs():
    """benchlib hands numpy columns; a NaN (a run not timed) is not a sample."""
    col = np.array([[1.0, 9.0], [3.0, 9.0], [np.nan, 9.0], [2.0, 9.0]])[:, 0]
    lat = Latency.from_samples(col)
    assert lat.count == 3 and lat.median == 2.0 and lat.max == 3.0
    none = Latency.from_samples([])
    assert none.count == 0 and none.empty and none.median is None and none.to_json() == {"count": 0}


def test_flat_keys_in_order_and_rounded():
    lat = Latency.from_samples([1.23456, 2.34567, 3.45678])
    assert list(lat.flat(("median", "mean", "min", "max", "p90"), "_us")) == [
        "median_us",
        "mean_us",
        "min_us",
        "max_us",
        "p90_us",
    ]
    assert lat.flat(("median", "min"), "_ms", digits=3) == {"median_ms": 2.346, "min_ms": 1.235}


def test_canonical_form_round_trip():
    lat = Latency.from_samples(SAMPLES)
    doc = lat.to_json()
    assert list(doc) == ["count", "mean", "std", "min", "p50", "p90", "p99", "max"]
    assert doc["p90"] == np.percentile(SAMPLES, 90)
    assert Latency.from_json(json.loads(json.dumps(lat.to_json(samples=True)))) == lat
    back = Latency.from_json(json.loads(json.dumps(doc)))  # without the samples: the statistics alone
    assert back.samples == () and back.to_json() == doc and back.percentile(90) == doc["p90"]
    assert back.percentile(75) is None  # not a percentile the form carries: unknown, not guessed
    assert Latency.from_json({"count": 0}) == Latency.from_samples([])
    with pytest.raises(ValueError, match="no count"):
        Latency.from_json({"median_ms": 1.0})
    with pytest.raises(ValueError, match="count 3 but 2 samples"):
        Latency.from_json({"count": 3, "samples": [1.0, 2.0]})


# Each shape a tvmgen command or app wrote: the reader gets the same statistics from all of them.
OLD_SHAPES = {
    "tvmgen bench --json warm_ms": (
        {"count": 40, "mean": 11.9, "std": 0.65, "min": 11.03, "p50": 11.78, "p90": 12.26, "max": 14.33},
        {"count": 40, "min": 11.03, "p50": 11.78, "p90": 12.26, "max": 14.33, "mean": 11.9, "std": 0.65},
    ),
    "tvmgen run --json timings": (
        {"load_ms": 6.7, "init_ms": 0.3, "first_run_ms": 9.1, "runs": 10, "median_ms": 2.5, "min_ms": 2.1},
        {"count": 10, "p50": 2.5, "min": 2.1, "max": None, "mean": None},
    ),
    "Android app (RunStats)": (
        {"iterations": 20, "median_run_ms": 6.42, "p90_run_ms": 6.56, "p99_run_ms": 7.65, "min_run_ms": 6.22},
        {"count": 20, "p50": 6.42, "p90": 6.56, "p99": 7.65, "min": 6.22, "max": None},
    ),
    "iOS app": (
        {
            "device": "cpu",
            "load_ms": 3.0,
            "first_run_ms": 5.0,
            "median_run_ms": 1.7,
            "median_copy_out_ms": 0.1,
            "runs": 3,
        },
        {"count": 3, "p50": 1.7, "min": None},
    ),
    "tvmgen-run --timings": (
        {"median": 3.5, "mean": 3.6, "min": 3.1, "max": 4.0},
        {"count": None, "p50": 3.5, "mean": 3.6, "min": 3.1, "max": 4.0, "p90": None},
    ),
    "benchlib.stats in us": (
        {"median_us": 12.0, "mean_us": 13.0, "min_us": 10.0, "max_us": 20.0, "p90_us": 18.0},
        {"p50": 12.0, "mean": 13.0, "min": 10.0, "max": 20.0, "p90": 18.0},
    ),
    "the report's own record": (
        {"load_ms": 1.0, "p50_ms": 2.0, "p90_ms": 2.5, "p99_ms": 3.0, "min_ms": 1.5, "max_ms": 3.1, "runs": 7},
        {"count": 7, "p50": 2.0, "p90": 2.5, "p99": 3.0, "min": 1.5, "max": 3.1},
    ),
}


@pytest.mark.parametrize("shape", list(OLD_SHAPES))
def test_reader_takes_every_old_shape(shape):
    doc, want = OLD_SHAPES[shape]
    unit = "us" if shape.endswith("in us") else "ms"
    lat = Latency.read(doc, unit=unit)
    assert {k: lat.stat(k) for k in want} == want
    assert not lat.samples and not lat.empty
    assert Latency.from_json(lat.to_json()) == lat  # what an old result holds survives the canonical form


def test_reader_prefers_the_samples():
    doc = {"runs_ms": [3.0, 1.0, 2.0], "median_run_ms": 99.0, "iterations": 3}
    lat = Latency.read(doc)
    assert lat.samples == (3.0, 1.0, 2.0) and lat.median == 2.0
    assert Latency.read([3.0, 1.0, 2.0]) == lat
    assert Latency.read({"warm_samples_ms": [1.0, 2.0], "count": 2}).max == 2.0


def test_reader_on_nothing_and_zero_runs():
    assert Latency.read(None).empty
    nan_run = {"load_ms": 1.0, "init_ms": 0.1, "first_run_ms": 2.0, "runs": 0, "median_ms": math.nan}
    assert Latency.read(nan_run) == Latency.from_samples([])
    assert Latency.read({"median_run_ms": None, "min_run_ms": None}).empty


def test_recorded_results_read():
    app = json.loads((RECORDED / "app_pixel6_opencl.json").read_text())
    lat = Latency.read(app)
    assert lat.count == len(app["runs_ms"]) == app["iterations"]
    assert lat.median == pytest.approx(app["median_run_ms"], abs=1e-9)
    assert lat.percentile(99) == pytest.approx(app["p99_run_ms"], abs=1e-9)  # Java's percentile is numpy's
    assert lat.mean == pytest.approx(app["mean_run_ms"], abs=1e-9)
    bench = json.loads((RECORDED / "bench_pixel6.json").read_text())
    warm = Latency.read(bench["warm_samples_ms"])
    assert Latency.read(bench["warm_ms"]).to_json() == {**bench["warm_ms"]}  # the recorded stats, key for key
    assert warm.count == bench["warm_ms"]["count"] and warm.median == pytest.approx(bench["warm_ms"]["p50"])
    assert Latency.read(bench["copy_in_ms"]).median == 0.21
