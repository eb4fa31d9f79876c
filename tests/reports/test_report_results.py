"""tvmgen report without a browser: result files read, compared (a rank test tells a real shift from noise)
and rendered to HTML and Markdown with every number rounded; outputs' top-k agreement, --fail-on-regression's
exit code, and bad input refused with nothing written."""

from __future__ import annotations

import copy
import json
import os
import re

import numpy as np
import pytest

from conftest import TESTS
from tvmgen.reports import agreement, html
from tvmgen.reports import results as result_files

RECORDED = TESTS / "recorded" / "results"


def test_benchmark_tables_give_one_run_per_row(tmp_path):
    gpu = {
        "benchmark": "gpu",
        "created": "2025-11-20T10:00:00+0000",
        "machine": {"cpu": "AMD EPYC", "gpu": None},
        "rows": [
            {
                "model": "mobilenet",
                "id": "opencl-fp16",
                "device": "opencl",
                "precision": "fp16",
                "cold": [{"first_run_ms": 80.0}, {"first_run_ms": 90.0}],
                "warm": [{"first_run_ms": 20.0}],
                "steady": {"load_ms": 5.0, "init_ms": 40.0, "run_ms": {"median": 3.5, "min": 3.1, "max": 4.0}},
                "max_abs_error": 0.002,
            },
            {"model": "vit", "id": "opencl-fp32", "error": "build failed: out of memory"},
        ],
    }
    speed = {
        "benchmark": "speed",
        "rows": [{"model": "mobilenet", "threads": 2, "quiet": {"tvmgen": 1.2, "reference": 1.5}}],
    }
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    (tmp_path / "speed.json").write_text(json.dumps(speed))
    runs = result_files.load(tmp_path / "gpu.json")
    assert [r.label for r in runs] == ["mobilenet opencl-fp16", "vit opencl-fp32"]
    assert runs[0].latency["first_run_ms"] == 85.0 and runs[0].latency["warm_first_run_ms"] == 20.0
    assert runs[0].metrics()["max_abs_error"] == 0.002
    assert runs[1].error == "build failed: out of memory"
    page = html.render([*runs, *result_files.load(tmp_path / "speed.json")], 0.05)
    assert "This run failed: build failed: out of memory" in page
    assert page.count('class="run"') == 3


def test_missing_fields_say_not_reported(tvmgen_inprocess, tmp_path):
    (tmp_path / "old.json").write_text(
        json.dumps({"timings": {"load_ms": 1.0, "init_ms": 0.5, "first_run_ms": 2.0, "runs": 3, "median_ms": 1.5}})
    )
    r = tvmgen_inprocess("report", tmp_path / "old.json", "-o", tmp_path / "old.html")
    assert r.returncode == 0, r.output
    page = (tmp_path / "old.html").read_text()
    assert 'data-metric="p50_ms" data-value="1.5">1.500 ms' in page
    for section in ("Per-kernel profile", "Memory", "Outputs against the host reference"):
        after = page[page.index(section) :]
        assert "not reported" in after[:600], section


@pytest.mark.parametrize(
    ("content", "message", "fix"),
    [
        (None, "does not exist", "tvmgen run --json"),
        ("load 6.7 ms · VM init 0.3 ms", "is not JSON", "redirect only stdout"),
        ('{"rows": [1, 2]}', "is not a result tvmgen knows (its keys: rows)", "tvmgen bench --json"),
        ("[1, 2]", "is not a result tvmgen knows (its keys: list)", "the deploy app"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(tvmgen_inprocess, tmp_path, content, message, fix):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    out = tmp_path / "out"
    r = tvmgen_inprocess(
        "report", RECORDED / "bench_pixel6.json", bad, "-o", out / "r.html", "--markdown", out / "s.md"
    )
    assert r.returncode == 2, r.output
    assert f"result file {bad} {message}" in r.output
    assert fix in r.output
    assert not out.exists()  # nothing written, not even the folder


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    out = tmp_path / "report.html"
    out.write_text("the previous report")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        html.write_atomic(out, "<html>new</html>")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert out.read_text() == "the previous report"


def test_top_k_agreement():
    ref = np.array([[0.1, 0.5, 0.2, 0.9, 0.05, 0.3, 0.0]], np.float32)
    same = agreement.compare_arrays([ref + 1e-6], [ref], ["p"])[0]
    assert (
        same["top1_match"] and same["top5_overlap"] == 5 and same["max_abs"] == pytest.approx(1e-6, rel=0.1)
    )  # float32
    assert same["top5"] == same["top5_reference"] == [3, 1, 5, 2, 0]
    swapped = ref.copy()
    swapped[0, [3, 6]] = swapped[0, [6, 3]]  # the top class sinks to the bottom: planted disagreement
    row = agreement.compare_arrays([swapped], [ref], ["p"])[0]
    assert not row["top1_match"] and row["top5_overlap"] == 4 and row["max_abs"] == pytest.approx(0.9)
    # the summary of a big output: only its top-5 entries compared, and said so
    summary = {"name": "p", "top5": [3, 1, 5, 2, 0], "top5_values": [0.9, 0.5, 0.3, 0.2, 0.1001]}
    (row,) = agreement.compare_summaries([summary], [ref])
    assert row["compared"] == "the top-5 entries" and row["max_abs"] == pytest.approx(1e-4, rel=1e-3)
    assert row["top1_match"] and row["top5_overlap"] == 5
    (row,) = agreement.compare_summaries([{"name": "map", "min": 0, "max": 1}], [np.zeros((4, 4))])
    assert row["max_abs"] is None and "top1_match" not in row


def test_mark_labels_do_not_overlap():
    # p50 and p90 one pixel apart, p99 at the right edge: stacked rows, the last drawn left of its line
    (x0, r0, a0), (x1, r1, a1), (x2, r2, a2) = html._label_positions([100.0, 101.0, 549.0], 550)
    assert (r0, a0) == (0, "start") and r1 == 1 and a2 == "end" and x2 < 549
    assert r2 == 0  # far from the others: back on the first row
    svg = html.histogram_svg([1.0] * 30 + [1.01] * 9 + [5.0], {"p50": 1.0, "p90": 1.01, "p99": 4.9})
    ys = [int(y) for y in re.findall(r'class="mark-label" x="[\d.]+" y="(\d+)"', svg)]
    assert ys == [16, 28, 16]
    bars_top = min(float(y) for y in re.findall(r'class="bar" x="[\d.]+" y="([\d.]+)"', svg))
    assert bars_top > max(ys) + 2  # the labels sit above the bars, never on them


def test_fail_on_regression_exit_code(tvmgen_inprocess, tmp_path):
    base = RECORDED / "bench_pixel6.json"
    slower = json.loads(base.read_text())
    slower["warm_samples_ms"] = [x * 1.25 for x in slower["warm_samples_ms"]]
    (tmp_path / "new.json").write_text(json.dumps(slower))
    out = tmp_path / "compare.html"
    r = tvmgen_inprocess("report", base, tmp_path / "new.json", "-o", out, "--fail-on-regression")
    assert r.returncode == 5, r.output
    assert "regressions beyond 5% and beyond the runs' spread against" in r.output
    assert "steady run p50 +25.0% (rank test p<0.001, n=40/40)" in r.output
    assert "raise --threshold" in r.output
    assert out.is_file() and "regression" in out.read_text()  # the report is written all the same
    # no regression (the same run twice, or a change under the threshold): exit 0
    assert tvmgen_inprocess("report", base, base, "-o", out, "--fail-on-regression").returncode == 0
    r = tvmgen_inprocess("report", base, tmp_path / "new.json", "-o", out, "--fail-on-regression", "--threshold", "30")
    assert r.returncode == 0, r.output
    # without the flag, a regression is only flagged in the page
    assert tvmgen_inprocess("report", base, tmp_path / "new.json", "-o", out).returncode == 0


# ------------------------------------------------------------------ issue 51: a report QA can trust


def long_floats(text: str) -> list[str]:
    """The numbers in ``text`` with more significant digits (7 or more) than any rounded figure has."""
    return [m for m in re.findall(r"\d+\.\d+", text) if len(re.sub(r"^[0.]*", "", m).replace(".", "")) >= 7]


def test_time_by_kind_adds_up_to_100_percent():
    """The kinds' shares are of the profiled runs' own time: they add up to 100%. The device's whole-run
    median (runs without the profiler) differs from it, so shares of that would not."""
    doc = json.loads((RECORDED / "app_pixel6_opencl.json").read_text())
    (run,) = result_files.load(RECORDED / "app_pixel6_opencl.json")
    kinds = run.profile["kinds"]
    profiled = sum(k["total_ms"] for k in kinds)
    assert abs(profiled - doc["profile"]["whole_run_ms"]) / profiled > 0.1  # the two times differ here
    assert sum(k["share"] for k in kinds) == pytest.approx(1.0, abs=1e-9)
    assert [k["share"] for k in kinds] == pytest.approx([k["total_ms"] / profiled for k in kinds])
    assert sum(k["share"] for k in run.profile["kernels"]) == pytest.approx(1.0, abs=1e-9)
    page = html.render([run], 0.05)
    table = page[page.index('<table class="kinds">') :]
    table = table[: table.index("</table>")]
    shown = [float(x) for x in re.findall(r'data-share="[^"]*">([\d.]+)%</td>', table)]
    assert len(shown) == len(kinds)
    assert abs(sum(shown) - 100) <= 0.05 * len(shown)  # each rounded to 0.1%


def _run_doc(threads: int, samples: list[float]) -> dict:
    return {
        "model": "tiny",
        "threads": threads,
        "timings": {"load_ms": 1.0, "init_ms": 0.5, "first_run_ms": 2.0, "median_ms": float(np.median(samples))},
        "runs_ms": samples,
    }


def test_columns_are_named_by_what_differs(tmp_path):
    samples = [1.0, 1.1, 1.2, 1.05]
    for name, threads in (("a.json", 1), ("b.json", 4), ("c.json", 1)):
        (tmp_path / name).write_text(json.dumps(_run_doc(threads, samples)))
    a, b, c = (result_files.load(tmp_path / n)[0] for n in ("a.json", "b.json", "c.json"))
    assert result_files.column_names([a, b]) == ["threads 1", "threads 4"]
    assert html.markdown([a, b], 0.05).splitlines()[2] == "| metric | threads 1 | threads 4 |"
    assert 'class="num" title="tiny (b.json)">threads 4</th>' in html.render([a, b], 0.05)
    # nothing differs: the file names; two alike among three: the file name added to those two
    assert result_files.column_names([a, c]) == ["a.json", "c.json"]
    assert result_files.column_names([a, b, c]) == ["threads 1 · a.json", "threads 4", "threads 1 · c.json"]
    # builds: device, precision and the library's hash name them
    a.artifact = {"device": "opencl", "precision": "fp16", "sha256": "3fa2c01b9e" + "0" * 54, "platform": "android"}
    b.artifact = {"device": "opencl", "precision": "fp32", "sha256": "77e1d0aa42" + "0" * 54, "platform": "android"}
    b.device["threads"] = 1
    assert result_files.column_names([a, b]) == ["precision fp16, build 3fa2c01b9e", "precision fp32, build 77e1d0aa42"]


# fixed samples (ms): 20 steady runs of a quiet model, and the same again shifted or with two outliers
QUIET = [
    10.0,
    10.2,
    9.9,
    10.1,
    10.3,
    9.8,
    10.0,
    10.4,
    10.1,
    9.9,
    10.2,
    10.0,
    10.1,
    9.7,
    10.3,
    10.0,
    10.2,
    9.9,
    10.1,
    10.0,
]
NOISY = [
    9.9,
    10.1,
    10.0,
    10.2,
    9.8,
    10.3,
    10.1,
    9.9,
    10.0,
    10.2,
    10.1,
    9.8,
    10.0,
    10.3,
    9.9,
    10.1,
    10.0,
    10.2,
    70.0,
    80.0,
]


def _runs(base: list[float], new: list[float]) -> list[result_files.Run]:
    runs = []
    for name, samples in (("base.json", base), ("new.json", new)):
        r = result_files.Run(name, "run", model="tiny", label="tiny", samples_ms=list(samples))
        r.latency = {f"p{p}_ms": float(np.percentile(samples, p)) for p in (50, 90, 99)} if samples else {}
        r.latency["init_ms"] = 5.0 if name == "base.json" else 8.0
        runs.append(r)
    return runs


def test_a_real_shift_is_flagged_and_noise_is_not():
    # a real shift: every run about 8% slower
    shifted = [x * 1.08 for x in QUIET]
    changes = result_files.compare(_runs(QUIET, shifted), 0.05)[1]
    p50 = changes["p50_ms"]
    assert p50.verdict == "regression" and p50.n == (20, 20) and p50.p_value < 1e-4
    assert p50.test == "rank test p<0.001, n=20/20"
    # noise with two big outliers: p90 and p99 far beyond the threshold, the runs' ranks not shifted
    changes = result_files.compare(_runs(QUIET, NOISY), 0.05)[1]
    assert changes["p90_ms"].change > 0.5 and changes["p99_ms"].change > 5
    for key in ("p90_ms", "p99_ms"):
        assert changes[key].verdict == "noise" and changes[key].p_value > 0.05, changes[key]
    assert changes["p50_ms"].verdict == "same"
    assert result_files.regressions(_runs(QUIET, NOISY), 0.05) == []
    # a single value a side (init) or no runs one by one: not tested, said so, never flagged
    assert changes["init_ms"].verdict == "untested" and changes["init_ms"].test == "not tested (no samples)"
    base, new = _runs(QUIET, [])
    new.latency["p50_ms"] = 20.0
    c = result_files.compare([base, new], 0.05)[1]["p50_ms"]
    assert (c.verdict, c.test) == ("untested", "not tested (no samples)")
    summary = html.markdown([base, new], 0.05)
    assert "20.000 ms (+99.0%, not tested (no samples))" in summary and "**regression**" not in summary
    # the test itself: symmetric, and no evidence from identical samples
    slower, faster = result_files.rank_test(QUIET, shifted)
    assert slower < 1e-4 and faster > 0.99
    assert result_files.rank_test([5.0] * 10, [5.0] * 10) == (1.0, 1.0)


def test_device_names_cpu_and_gpu(tmp_path):
    gpu = {
        "benchmark": "gpu",
        "machine": {"host": "box", "cpu": "AMD EPYC 7B13", "cpus": 16, "nvidia_smi": "NVIDIA H200, 550.54.15"},
        "rows": [{"model": "m", "id": "cuda", "device": "cuda", "steady": {"run_ms": {"median": 1.0}}}],
    }
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    (row,) = result_files.load(tmp_path / "gpu.json")
    fields = html._device_fields(row)
    assert (fields["CPU"], fields["GPU"], fields["GPU driver"]) == ("AMD EPYC 7B13", "NVIDIA H200", "550.54.15")
    page = html.render([row], 0.05)
    assert "<th>CPU</th><td>AMD EPYC 7B13</td>" in page and "<th>GPU driver</th><td>550.54.15</td>" in page
    # tvmgen run --json records no CPU: this machine's, and the page says whose it is
    (tmp_path / "run.json").write_text(json.dumps(_run_doc(2, [1.0, 1.1])))
    (run,) = result_files.load(tmp_path / "run.json")
    cpu = result_files.host_cpu()
    assert cpu and run.device["CPU"] == cpu and cpu != "this machine"
    assert any("machine writing this report" in n for n in run.notes)
    # a GPU build: its GPU and driver are listed, "not reported" where the result does not say
    run.artifact["device"] = "opencl"
    assert {"GPU": None, "GPU driver": None}.items() <= html._device_fields(run).items()
    assert '<th>GPU driver</th><td><span class="missing">not reported</span></td>' in html.render([run], 0.05)


def test_no_unrounded_floats_on_the_page(tmp_path):
    ugly = 0.0009999999310821295
    doc = json.loads((RECORDED / "app_pixel6_opencl.json").read_text())
    doc["outputs"][0].update(min=ugly, max=1 / 3, mean=ugly / 7)
    doc["phone"]["gpu_driver"] = 2 / 3  # a float where a string is expected: rounded all the same
    (tmp_path / "app.json").write_text(json.dumps(doc))
    base = json.loads((RECORDED / "bench_pixel6.json").read_text())
    noisy = copy.deepcopy(base)
    noisy["warm_samples_ms"] = [x * (1 + ugly) for x in base["warm_samples_ms"]]
    noisy["cold_ms"]["init"] = base["cold_ms"]["init"] * 1.123456789
    (tmp_path / "new.json").write_text(json.dumps(noisy))
    files = (RECORDED / "bench_pixel6.json", tmp_path / "new.json", tmp_path / "app.json")
    runs = [r for p in files for r in result_files.load(p)]
    page, summary = html.render(runs, 0.05), html.markdown(runs, 0.05)
    shown = re.sub(r' data-[a-z-]+="[^"]*"', "", page)  # data-* keep the exact numbers, for scripts and tests
    assert long_floats(page)  # there are unrounded numbers to round: in data-value, kept exact
    assert long_floats(shown) == [] and long_floats(summary) == []
    assert ">0.001</td>" in shown and ">0.3333</td>" in shown and "<td>0.6667</td>" in shown
