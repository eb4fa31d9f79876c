"""tvmgen report in a real headless chromium: a real run of the built-in MobileNet and recorded bench and
deploy-app results, each page checked against its JSON; and tvmgen app --run --report on recorded adb output.

The browser is Debian's chromium driven by Selenium through Debian's chromium-driver (scripts/bootstrap.sh
installs both); nothing is downloaded. Without them these tests skip here and fail under CI.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TESTS
from tvmgen.reports import agreement, html
from tvmgen.reports import results as result_files

RECORDED = TESTS / "recorded" / "results"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
DOCS_SCREENSHOT = REPO / "docs" / "img" / "report.png"


@pytest.fixture(scope="module")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package")
    if missing:
        why = f"{', '.join(missing)} missing: run scripts/bootstrap.sh (apt chromium chromium-driver, the test extra)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1150,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def open_page(driver, path: Path):
    """Load the page; fail on any console message of level SEVERE (errors, blocked or failed loads)."""
    from selenium.webdriver.common.by import By

    driver.get(path.resolve().as_uri())
    assert driver.find_element(By.TAG_NAME, "h1").text.startswith("tvmgen QA report")
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    return lambda css: driver.find_elements(By.CSS_SELECTOR, css)


def cell(find, run: int, metric: str):
    found = find(f'section#run-{run} td[data-metric="{metric}"]')
    assert len(found) == 1, metric
    return found[0]


def shown_ms(element) -> float:
    m = re.fullmatch(r"([\d.]+) ms", element.text.strip())
    assert m, element.text
    return float(m.group(1))


@pytest.fixture(scope="module")
def mobilenet_artifact(compiled, builtin_onnx, tmp_path_factory) -> Path:
    """The session's compiled built-in MobileNet, copied under the name `tvmgen compile` gives it, with the
    source `tvmgen compile builtin:mobilenet` records (so --check and the app's check find the reference)."""
    artifact = tmp_path_factory.mktemp("artifact") / "mobilenet-host-cpu"
    shutil.copytree(compiled(builtin_onnx, "host", "cpu", name="mobilenet"), artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["model"]["source"] = "builtin:mobilenet"
    (artifact / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return artifact


@pytest.fixture(scope="module")
def run_json(mobilenet_artifact, tmp_path_factory) -> tuple[Path, Path]:
    """A real `tvmgen run --json --profile --check` of the built-in MobileNet."""
    from click.testing import CliRunner

    from tvmgen.commands.run import run

    artifact = mobilenet_artifact
    result = CliRunner().invoke(run, [str(artifact), "--json", "--profile", "--check", "--repeat", "40"])
    assert result.exit_code == 0, result.output
    out = tmp_path_factory.mktemp("run") / "run.json"
    out.write_text(result.stdout[result.stdout.index("{") :])
    return out, artifact


def test_run_report_in_browser(run_json, browser, tvmgen_inprocess, tmp_path):
    path, artifact = run_json
    doc = json.loads(path.read_text())
    r = tvmgen_inprocess("report", path, "-o", tmp_path / "report.html", "--markdown", tmp_path / "summary.md")
    assert r.returncode == 0, r.output
    find = open_page(browser, tmp_path / "report.html")

    # the histogram: one bar per bin, every steady run counted once
    samples = doc["runs_ms"]
    assert len(samples) == 40
    counts, _ = html.histogram_bins(samples)
    bars = find("svg.histogram rect.bar")
    assert len(bars) == len(counts) >= 5
    assert [int(b.get_attribute("data-count")) for b in bars] == counts
    assert sum(counts) == 40
    assert len(find("svg.histogram line.mark")) == 3  # p50, p90, p99

    # the numbers shown are the JSON's
    t = doc["timings"]
    for metric in ("load_ms", "init_ms", "first_run_ms"):
        assert shown_ms(cell(find, 0, metric)) == pytest.approx(t[metric], abs=1e-3)
    for p in (50, 90, 99):
        c = cell(find, 0, f"p{p}_ms")
        assert float(c.get_attribute("data-value")) == pytest.approx(np.percentile(samples, p))
        assert shown_ms(c) == pytest.approx(np.percentile(samples, p), abs=1e-3)
    assert cell(find, 0, "copy_in_ms").text == "not reported"  # run --json does not time copies
    peak = cell(find, 0, "overall_peak_bytes")
    assert int(peak.get_attribute("data-value")) == doc["memory"]["overall_peak_bytes"]
    assert peak.text == f"{doc['memory']['overall_peak_bytes'] / 1e6:.1f} MB"

    # the artifact, found through the path run --json records: its library's hash from the manifest; the
    # artifact and the result named, not their temporary paths
    manifest = json.loads((artifact / "manifest.json").read_text())
    page_text = browser.find_element("tag name", "body").text
    assert manifest["files"]["model.so"]["sha256"][:16] in page_text
    assert "mobilenet" in browser.find_element("tag name", "h1").text
    assert "mobilenet-host-cpu" in page_text and str(tmp_path) not in page_text and str(artifact) not in page_text

    # --check: the outputs against onnxruntime on the same inputs, the top class the same
    (check,) = doc["check"]
    assert check["compared"] == "all 1000 values" and check["max_abs"] < 1e-4 and check["top1_match"]
    assert check["top5"] == doc["outputs"][0]["top5"] and check["top5_overlap"] >= 4
    assert "onnxruntime" in doc["reference"]
    assert float(find('table.check td[data-metric="max_abs"]')[0].get_attribute("data-value")) == check["max_abs"]
    assert find('table.check td[data-metric="top1"]')[0].text == "same class"
    assert find('table.check td[data-metric="top5_overlap"]')[0].text == f"{check['top5_overlap']}/5"

    # the profile: one bar per kernel shown (at most 12) and per kind, times as in the JSON
    kernels, kinds = doc["profile"]["kernels"], doc["profile"]["kinds"]
    kbars = find("svg.kernels rect.bar")
    assert len(kbars) == min(len(kernels), html.TOP_KERNELS) > 0
    assert float(kbars[0].get_attribute("data-value")) == pytest.approx(kernels[0]["total_ms"])
    assert len(find("svg.kinds rect.bar")) == len(kinds)
    first_row = find("table.kernels tr")[1].find_elements("tag name", "td")
    assert first_row[0].text == kernels[0]["name"]
    if kernels[0]["gflops"]:
        assert float(first_row[5].text) == pytest.approx(kernels[0]["gflops"], abs=0.01)

    # a screenshot of this real report for the docs (TVMGEN_DOCS_SCREENSHOT=1 writes docs/img/report.png)
    png = tmp_path / "report.png"
    browser.set_window_size(1150, 1400)
    browser.save_screenshot(str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("TVMGEN_DOCS_SCREENSHOT") == "1":  # 64 colours: a small file that reads the same
        from PIL import Image

        Image.open(png).convert("RGB").quantize(64).save(DOCS_SCREENSHOT, optimize=True)

    md = (tmp_path / "summary.md").read_text()
    assert f"| steady run p50 | {np.percentile(samples, 50):.3f} ms |" in md


def test_comparison_flags_a_planted_regression(browser, tvmgen_inprocess, tmp_path):
    base = json.loads((RECORDED / "bench_pixel6.json").read_text())
    slower = copy.deepcopy(base)
    slower["warm_samples_ms"] = [x * 1.25 for x in base["warm_samples_ms"]]  # planted: 25% slower steady runs
    slower["cold_ms"]["init"] = base["cold_ms"]["init"] / 2  # and an improvement, of one value a side
    (tmp_path / "new.json").write_text(json.dumps(slower))
    out, md = tmp_path / "compare.html", tmp_path / "compare.md"
    r = tvmgen_inprocess(
        "report",
        RECORDED / "bench_pixel6.json",
        tmp_path / "new.json",
        "-o",
        out,
        "--markdown",
        md,
        "--threshold",
        "10",
    )
    assert r.returncode == 0, r.output
    find = open_page(browser, out)
    flagged = {(li.get_attribute("class"), li.get_attribute("data-metric")) for li in find("#verdicts li")}
    assert ("regression", "p50_ms") in flagged
    assert ("regression", "p90_ms") in flagged
    assert all("rank test p<0.001, n=40/40" in li.text for li in find("#verdicts li"))
    assert not {m for v, m in flagged if m in ("init_ms", "load_ms", "first_run_ms", "peak_bytes")}
    # init halved, but a single value on each side: nothing to test its spread with, so said and not flagged
    (init,) = [li for li in find("#unflagged li") if li.get_attribute("data-metric") == "init_ms"]
    assert init.get_attribute("class") == "untested" and "not tested (no samples)" in init.text
    p50 = find('#compare td[data-run="1"][data-metric="p50_ms"]')[0]
    assert "regression" in p50.get_attribute("class").split()
    assert "+25.0%" in p50.text
    assert "regression" not in find('#compare td[data-run="0"][data-metric="p50_ms"]')[0].get_attribute("class")
    assert len(find("svg.p50 rect.bar")) == 2
    assert len(find("svg.histogram")) == 2
    # the same model on the same phone twice, nothing recorded differs: each column names its result file
    head = md.read_text().splitlines()[2]
    assert head == "| metric | bench_pixel6.json | new.json |", head
    assert [th.text for th in find("#compare th.num")] == ["bench_pixel6.json", "new.json"]
    # the device as the server reported it; what it did not report says so
    device = find("section#run-0 .grid table.fields")[1].text
    assert "Android 14" in device
    assert "GPU driver not reported" in device
    summary = md.read_text()
    assert re.search(
        r"\| steady run p50 \| [\d.]+ ms \| [\d.]+ ms \(\+25\.0% \*\*regression\*\*, rank test p<0\.001, n=40/40\) \|",
        summary,
    )
    assert "(-50.0%, not tested (no samples))" in summary and "**improvement**" not in summary


def test_app_results_report(browser, tvmgen_inprocess, mobilenet_artifact, tmp_path):
    """The deploy app's results: every timed run (histogram, percentiles), the copies' medians, a warm start,
    the device's raw profile counts, and its outputs checked against the host's reference on its input."""
    doc = json.loads((RECORDED / "app_pixel6_opencl.json").read_text())
    assets = tmp_path / "assets"
    shutil.copytree(mobilenet_artifact, assets / doc["artifact"])  # the host build stands in for the phone's
    assert agreement.check_app_results(doc, assets / doc["artifact"]) is None  # as tvmgen app --run does
    (check,) = doc["check"]
    assert check["max_abs"] < 1e-4 and check["top1_match"] and check["top5_overlap"] == 5
    (tmp_path / "results.json").write_text(json.dumps(doc))
    out = tmp_path / "app.html"
    r = tvmgen_inprocess("report", tmp_path / "results.json", "-o", out)
    assert r.returncode == 0, r.output
    find = open_page(browser, out)
    runs = doc["runs_ms"]
    counts, _ = html.histogram_bins(runs)
    assert [int(b.get_attribute("data-count")) for b in find("svg.histogram rect.bar")] == counts
    assert sum(counts) == len(runs) == 20
    for p in (50, 90, 99):
        assert float(cell(find, 0, f"p{p}_ms").get_attribute("data-value")) == pytest.approx(np.percentile(runs, p))
    assert shown_ms(cell(find, 0, "p50_ms")) == pytest.approx(doc["median_run_ms"], abs=1e-3)
    assert shown_ms(cell(find, 0, "init_ms")) == pytest.approx(doc["timings"]["init_ms"], rel=1e-3)
    assert shown_ms(cell(find, 0, "copy_in_ms")) == pytest.approx(np.median(doc["copy_in_runs_ms"]), abs=1e-3)
    assert shown_ms(cell(find, 0, "warm_first_run_ms")) == pytest.approx(doc["warm_start"]["first_run_ms"], abs=1e-3)
    # the mark labels of p50, p90 and p99 never overlap, though the slow run pulls p99 away from the others
    labels = [(float(t.get_attribute("x")), float(t.get_attribute("y"))) for t in find("svg.histogram text.mark-label")]
    assert len(labels) == 3
    boxes = [t.rect for t in find("svg.histogram text.mark-label")]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
            assert apart or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"], (a, b)
    assert find('table.check td[data-metric="top1"]')[0].text == "same class"
    assert find('table.check td[data-metric="top5_overlap"]')[0].text == "5/5"
    kernels = [k for k in doc["profile"]["counts"] if not k.startswith("vm.")]
    assert len(find("svg.kernels rect.bar")) == len(kernels) + 1  # and the VM's builtins as one row
    assert float(find("svg.kernels rect.bar")[0].get_attribute("data-value")) == pytest.approx(52000000 / 1e6 / 20)
    body = find("body")[0].text
    for shown in ("Pixel 6", "Tensor", "Android 14", "mali", "model-opencl"):
        assert shown in body


# ------------------------------------------------------------------ tvmgen app --run --report (adb recorded)

ADB_RECORDED = TESTS / "recorded" / "adb"


class RecordedAdb:
    """Stands in for tools.run behind tools.Adb: each adb verb answered from tests/recorded/adb; the pull
    writes the recorded deploy-app results where adb would."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, argv, cwd=None, env=None):
        import subprocess

        argv = [str(a) for a in argv]
        self.calls.append(argv)
        verb = argv[3] if argv[3] != "shell" else argv[4]
        text = {
            "install": (ADB_RECORDED / "install_adb34_success.txt").read_text(),
            "am": (ADB_RECORDED / "am_start_ok.txt").read_text(),
            "logcat": "11-21 10:41:09.001  4321  4350 I tvmgen  : results {...}\n",
            "pull": (ADB_RECORDED / "pull_ok.txt").read_text(),
            "getprop": (ADB_RECORDED / "getprop_pixel6.txt").read_text(),
        }[verb]
        if verb == "pull":
            shutil.copyfile(RECORDED / "app_pixel6_opencl.json", argv[5])
        return subprocess.CompletedProcess(argv, 0, text, "")


def test_app_run_pulls_results_with_the_phone_and_writes_the_report(tmp_path, monkeypatch, mobilenet_artifact):
    from tvmgen.android import adb, tools
    from tvmgen.android import app as android_app
    from tvmgen.commands import report

    runner = RecordedAdb()
    tool = tools.Adb(runner)
    tool._path = Path("/sdk/platform-tools/adb")
    phone = adb.Phone(adb.Device("38011FDJH00AB3", "device", model="Pixel_6"), tool)
    monkeypatch.setattr(adb, "choose_device", lambda serial=None, adb=None: phone)
    opts = android_app.AppOptions(
        "deploy", "org.tvmgen.mobilenet", "m", ["arm64-v8a"], run=True, install=True, report=tmp_path / "qa.html"
    )
    (tmp_path / "results").mkdir()
    assets = tmp_path / "assets"
    shutil.copytree(mobilenet_artifact, assets / "model-opencl")  # the project's asset; the host build stands in
    results = android_app.install_and_run(tmp_path / "app.apk", opts, tmp_path / "results", assets)
    assert [c[3:5] for c in runner.calls] == [
        ["install", "-r"],
        ["shell", "am"],
        ["logcat", "-d"],
        ["pull", "/sdcard/Android/data/org.tvmgen.mobilenet/files/tvmgen-results.json"],
        ["shell", "getprop"],
    ]
    assert results["phone"] == {
        "model": "Pixel 6",
        "manufacturer": "Google",
        "soc": "Tensor",
        "board": "gs101",
        "android": "14",
        "sdk": "34",
        "abi": "arm64-v8a",
        "gpu": "mali",
    }
    saved = tmp_path / "results" / "tvmgen-results.json"
    assert json.loads(saved.read_text())["phone"]["model"] == "Pixel 6"  # the file the report reads has it too
    # the outputs checked against the reference of the asset's source model, on the app's recorded input
    assert re.fullmatch(r"onnxruntime [\d.]+ on the host, same inputs", results["reference"])
    assert results["check"][0]["top1_match"] and results["check"][0]["max_abs"] < 1e-4
    assert json.loads(saved.read_text())["check"] == results["check"]
    report.write([saved], opts.report)
    page = opts.report.read_text()
    assert '<td data-metric="top1" class="improvement">same class</td>' in page
    assert "<td>Pixel 6</td>" in page and "<td>Tensor</td>" in page and "<td>14</td>" in page


def test_app_report_needs_run(tvmgen_inprocess, tmp_path):
    r = tvmgen_inprocess("app", "--model", "builtin:mobilenet", "--report", tmp_path / "r.html")
    assert r.returncode == 2, r.output
    assert "--report writes the report of the phone's results" in r.output and "add --run" in r.output


def test_app_check_says_why_it_was_skipped(tmp_path):
    doc = json.loads((RECORDED / "app_pixel6_opencl.json").read_text())
    assert agreement.check_app_results(doc, tmp_path / "model-opencl").startswith(
        "the artifact the app ran is not here"
    )
    on_file = {**doc, "inputs": [{**doc["inputs"][0], "fill": "file", "file": "/sdcard/x.bin"}]}
    assert agreement.check_app_results(on_file, tmp_path) == (
        "input input came from a file on the phone (/sdcard/x.bin), which is not here"
    )
    assert "check" not in doc and "check" not in on_file
    (tmp_path / "r.json").write_text(json.dumps({**doc, "check_skipped": "the source model m.onnx is not here"}))
    (run,) = result_files.load(tmp_path / "r.json")
    assert run.check is None and "not checked against the host's reference: the source model" in run.notes[0]
