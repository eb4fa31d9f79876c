"""benchmarks/gpu.py: the GPU benchmark, end to end on PoCL (builtin model, cpu + opencl rows).

Builds once (--build-only into a work directory), runs --quick in both phases, then --run-only on the
same directory in a Python that cannot import tvm or tvmgen (no site-packages; only numpy on
PYTHONPATH), as on a GPU machine that has python3 + numpy only. Skipped (reason printed) without an
OpenCL platform. About 1.5-2 minutes on 2 cores (PoCL compiles the kernels in the cold start).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, opencl_info, require_tool
from helpers import load_benchmark, run_benchmark

pytestmark = pytest.mark.slow  # the benchmark scripts run end to end

COLUMNS = load_benchmark("gpu").COLUMNS  # the table's header
MODEL = ["--model", "builtin:tiny"]  # the plumbing on the small built-in model (the MobileNet's builds are elsewhere)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A work directory filled by --build-only, after checking that an OpenCL platform exists."""
    require_tool("cmake")
    w = tmp_path_factory.mktemp("gpu-bench")
    run_benchmark("gpu.py", "--build-only", *MODEL, "--work", w)
    plan = json.loads((w / "plan.json").read_text())
    assert [r["id"] for r in plan["rows"]] == ["cpu", "opencl"], plan["rows"]
    assert all("error" not in r for r in plan["rows"]), plan["rows"]
    assert not list(w.rglob("*.o")) and not (w / "build").exists()
    opencl_info(w / "runtime" / "lib" / "libtvmgen_opencl.so")
    return w


def parse_table(stdout: str) -> dict[str, dict[str, str]]:
    """device -> {column: cell} from gpu.py's table (columns are two or more spaces apart)."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("model "))
    header = re.split(r"\s{2,}", lines[start].strip())
    assert header == COLUMNS, header
    rows = {}
    for ln in lines[start + 2 :]:
        if not ln.startswith("builtin:"):
            break
        cells = re.split(r"\s{2,}", ln.strip())
        rows[cells[1]] = dict(zip(header, cells))
    return rows


def check_rows(stdout: str) -> None:
    rows = parse_table(stdout)
    assert set(rows) == {"cpu", "opencl"}, stdout
    for device, row in rows.items():
        assert row["device"] == device and row["status"] == "ok", stdout
        assert row["precision"] == "fp32"
        for col in ("cold first run ms", "warm first run ms", "init ms", "steady ms", "copy-in ms", "copy-out ms"):
            assert float(row[col]) >= 0, (device, col, row[col])
        assert float(row["cold/warm"].rstrip("x")) >= 0, row  # a ratio (a loaded machine makes some tiny)
        assert float(row["max abs err"]) < 1e-4, (device, row["max abs err"])
    built, hits = (int(x) for x in rows["opencl"]["kernels built / hits"].split("/"))
    assert built > 0 and hits == built, rows["opencl"]  # cold: all built from source; warm: all from the cache
    assert float(rows["opencl"]["steady x cpu"].rstrip("x")) > 0
    assert "OpenCL: " in stdout and "platform" in stdout  # the platform / device / driver line
    # and the device's limits; the build's largest work-group against its family's (compile's, kernels.json)
    assert re.search(r"OpenCL: .*\d+ KB of local memory and \d+ threads per work-group", stdout), stdout
    assert re.fullmatch(r"\d+\.\d / \d+ \(32 / 256\)", rows["opencl"]["work-group KB / threads (limits)"]), rows
    assert rows["cpu"]["work-group KB / threads (limits)"] == "-"


def run_and_check(*args, **options) -> None:
    """gpu.py ARGS (``options`` as ``run_benchmark``'s), which must succeed and print a table whose cpu and
    opencl rows are ok (check_rows)."""
    proc = run_benchmark("gpu.py", *args, **options)
    print(proc.stdout)
    check_rows(proc.stdout)


def test_quick_end_to_end(work):
    """Both phases (the build reused from the work directory), one start each, one timed run."""
    out = work / "quick.json"
    run_and_check("--quick", *MODEL, "--work", work, "--json", out)
    doc = json.loads(out.read_text())
    opencl = next(r for r in doc["rows"] if r["id"] == "opencl")
    assert opencl["cold"][0]["cache"]["hits"] == 0 and opencl["warm"][0]["cache"]["misses"] == 0


def test_run_only_without_tvm(work, tmp_path):
    """--run-only in a Python where tvm and tvmgen cannot be imported: site-packages off (-S -s), numpy
    alone on PYTHONPATH."""
    site = tmp_path / "site"
    site.mkdir()
    np_dir = Path(np.__file__).resolve().parent
    for p in np_dir.parent.iterdir():  # numpy and the wheel's bundled libraries (numpy.libs)
        if p.name == "numpy" or p.name.startswith("numpy.libs"):
            (site / p.name).symlink_to(p)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONPATH"] = str(site)
    py = [sys.executable, "-S", "-s"]
    probe = (
        "import importlib.util as u, numpy; "
        "print([m for m in ('tvm', 'tvm_ffi', 'tvmgen') if u.find_spec(m) is not None])"
    )
    proc = subprocess.run([*py, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout  # nothing of TVM is importable there
    run_and_check("--run-only", *MODEL, "--work", work, "--quick", python=py, env=env, cwd=tmp_path)


def test_compare_cold_starts_under_a_setting(work, tmp_path):
    """--compare NAME:VAR=VALUE: the GPU row's cold first runs under that environment and the default, interleaved
    over --rounds (1 here: PoCL compiles for seconds); the setting reaches the runner (one kernel per program: as many programs built as kernels,
    against fewer in groups of 8); a malformed comparison, or one without --run-only, is refused."""
    out = tmp_path / "compare.json"
    args = ["--run-only", "--work", work, "--compare", "one:TVMGEN_OPENCL_KERNELS_PER_PROGRAM=1", "--rounds", "1"]
    proc = run_benchmark("gpu.py", *args, "--json", out)
    print(proc.stdout)
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in proc.stdout.splitlines() if ln.startswith("builtin:")]
    assert [(r[1], r[2], r[4]) for r in rows] == [("opencl", "default", "1"), ("opencl", "one", "1")], proc.stdout
    assert rows[1][3] == "TVMGEN_OPENCL_KERNELS_PER_PROGRAM=1" and rows[1][7].endswith("x"), rows
    doc = json.loads(out.read_text())
    built = {s["variant"]: [r["cache"]["source_builds"] for r in s["runs"]] for s in doc["starts"]}
    plan = json.loads((work / "plan.json").read_text())
    art = work / next(r["artifact"] for r in plan["rows"] if r["id"] == "opencl")
    kernels = (art / "model.so").read_bytes().count(b"// Function: ")
    assert kernels > 8 and built == {"default": [2], "one": [kernels]}, (kernels, built)
    for bad, why in (
        (["--compare", "x:NOEQUALS"], "--compare takes NAME:VAR=VALUE"),
        (["--compare", "x:A=1", "--compare", "x:B=2"], "used twice"),
    ):
        proc = run_benchmark("gpu.py", "--run-only", "--work", work, *bad, succeed=False)
        assert proc.returncode == 2 and why in proc.stderr, proc.stderr
    proc = run_benchmark("gpu.py", "--work", work, "--compare", "x:A=1", succeed=False)
    assert proc.returncode == 2 and "add --run-only" in proc.stderr, proc.stderr


def test_reference_inputs_keep_a_scalar_input_scalar(compiled, tmp_path):
    """The seeded inputs gpu.py carries to the GPU machine keep their shapes: a 0-d input (the VAD's sample
    rate) stays 0-d, which tvmgen-run requires (np.ascontiguousarray made it [1])."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo

    art = compiled(zoo.build("vad_scalar", tmp_path)[0], "host", "cpu", name="vad_scalar")
    dest = tmp_path / "work" / "ref" / "vad_scalar"
    plan = load_benchmark("gpu_build").reference_outputs(art, dest, np)
    shapes = {i["name"]: np.load(tmp_path / "work" / i["file"]).shape for i in plan["inputs"]}
    assert shapes["sr"] == () and len(shapes) == 2, shapes


def test_a_streaming_model_is_carried_with_its_initial_state(compiled, tmp_path):
    """A streaming model's runtime holds its state from the initial values in the artifact (state/0.npy):
    gpu.py keeps them when it prunes an artifact, and its reference is the first step on the caller's own
    inputs (the state inputs are the runtime's, not the caller's)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo
    import zoo_state_pairs

    path, flags = zoo.build("streaming_kws_int8", tmp_path)
    built = compiled(path, "host", "cpu", name="kws", state=zoo_state_pairs.state_pairs(flags))
    art = tmp_path / "work" / "artifacts" / "kws"
    shutil.copytree(built, art)
    (art / "model.o").write_bytes(b"")  # what the runner does not need goes
    gpu_build = load_benchmark("gpu_build")
    gpu_build._prune(art)
    manifest = json.loads((art / "manifest.json").read_text())
    names = {p.name for p in art.iterdir()}
    assert "model.o" not in names and {"manifest.json", "model.so", "state"} <= names, names
    assert all((art / f).is_file() for f in manifest["files"])  # state/0.npy among them
    plan = gpu_build.reference_outputs(art, tmp_path / "work" / "ref" / "kws", np)
    state_inputs = {s["input"].split(":")[-1] for s in manifest["state"]}
    assert plan["inputs"] and not state_inputs & {i["name"] for i in plan["inputs"]}, plan
    assert plan["outputs"], plan
