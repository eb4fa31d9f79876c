"""`tvmgen tune`: MetaSchedule tuning of tiny models, here and on the emulated aarch64 device, and
`compile --tuning-db` applying what it found. Budgets are a few trials: these check the flow and
the numerics, not the speed."""

from __future__ import annotations

import json
import os

import pytest

from conftest import require_tool, save_onnx, single_op_models
from helpers import device_behind, run_tvmgen

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]  # servers, qemu, tuning runs


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    return save_onnx(single_op_models()["gemm"], tmp_path_factory.mktemp("tune-models") / "gemm.onnx")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, gemm):
    """A database with the GEMM tuned here, 2 trials (one task)."""
    work = tmp_path_factory.mktemp("tuned")
    (work / "tmp").mkdir()
    r = run_tvmgen(
        "tune",
        gemm,
        "--trials",
        "2",
        "--db",
        work / "db",
        env={"TVMGEN_LOG_DIR": str(work / "logs"), "COLUMNS": "200", "TMPDIR": str(work / "tmp")},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    # the candidates' libraries and the scratch folder are gone (.ses: onnxruntime's session id, its own)
    left = sorted(p.name for p in (work / "tmp").iterdir() if p.name != ".ses")
    assert not left, left
    return work / "db", r


def test_tune_here_writes_a_database_per_target(tuned):
    db, r = tuned
    (target_dir,) = [d for d in db.iterdir() if d.is_dir()]
    assert target_dir.name.startswith("llvm-mcpu=")
    assert json.loads((target_dir / "target.json").read_text())["kind"] == "llvm"
    records = (target_dir / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == 2
    assert "1 tasks, 2 trials each, measured here (0 trials already in the database)" in r.stderr
    assert "1/1 fused_matmul_add: best" in r.stderr and "2 new" in r.stderr
    # one of the two is tvmgen's default schedule, measured first (the best is never worse than it);
    # at least one, not exactly one: MetaSchedule's sampled candidate may happen to take its shape
    # (a CI run drew it), and a test must not depend on what random sampling draws
    assert "tvmgen's default schedules, measured as candidates" in r.stderr
    assert (
        sum(
            '"CacheWrite"' in rec and '"DecomposeReduction"' in rec and "SamplePerfectTile" not in rec
            for rec in records
        )
        >= 1
    )
    assert "[INFO]" not in r.stderr + r.stdout  # MetaSchedule's own log goes to the log file
    assert "task_scheduler.cc" in "".join(p.read_text() for p in (db.parent / "logs").glob("*tune*.log"))


def test_compile_applies_the_database_and_matches_onnxruntime(tuned, gemm, tvmgen, tmp_path):
    db, _ = tuned
    r = tvmgen("compile", gemm, "--tuning-db", db, "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert "kernels: 1 from the tuning database" in r.stderr
    assert "ok y: max abs error" in r.stderr
    assert "has no tuned kernel" not in r.stderr
    # both records (the default seed and MetaSchedule's candidate) read the weight packed
    (target_dir,) = [d for d in db.iterdir() if d.is_dir()]
    records = (target_dir / "database_tuning_record.json").read_text().splitlines()
    assert all('"TransformLayout"' in rec for rec in records), records
    # a database that has nothing for the model compiles with the defaults, and says so
    conv = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv.onnx")
    r = tvmgen("compile", conv, "--tuning-db", db, "-o", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "has no tuned kernel of this model for this target" in r.stderr and "tvmgen tune" in r.stderr


def test_tuned_convolution_matches_onnxruntime(tvmgen, tmp_path):
    """A convolution in tvmgen's NHWC layout: every task's tuned kernel is found and correct."""
    conv = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv.onnx")
    r = tvmgen("tune", conv, "--trials", "1", "--db", tmp_path / "db")
    assert r.returncode == 0, r.stderr
    tasks = int(r.stderr.split(" tasks, 1 trials each")[0].rsplit(" ", 1)[1])
    r = tvmgen("compile", conv, "--tuning-db", tmp_path / "db", "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert f"kernels: {tasks} from the tuning database" in r.stderr and "ok y: max abs error" in r.stderr


def test_rerun_resumes_from_the_records(tuned, gemm, tvmgen):
    db, _ = tuned
    r = tvmgen("tune", gemm, "--trials", "2", "--db", db)  # the budget is spent: nothing to measure
    assert r.returncode == 0, r.stderr
    assert "(2 trials already in the database)" in r.stderr and "(0 new)" in r.stderr
    target_dir = next(d for d in db.iterdir() if d.is_dir())
    assert len((target_dir / "database_tuning_record.json").read_text().splitlines()) == 2
    r = tvmgen("tune", gemm, "--trials", "3", "--db", db)  # one more trial, not three
    assert r.returncode == 0, r.stderr
    assert "(1 new)" in r.stderr
    assert len((target_dir / "database_tuning_record.json").read_text().splitlines()) == 3


def test_database_for_another_target_is_refused(tuned, gemm, tvmgen, tmp_path):
    db, _ = tuned
    r = tvmgen("compile", gemm, "--platform", "linux-aarch64", "--tuning-db", db, "-o", tmp_path / "a")
    assert r.returncode == 2
    assert "has no records for target llvm-mattr=+neon-mtriple=aarch64-linux-gnu" in r.stderr
    assert "it has records for: llvm-mcpu=" in r.stderr and "fix:" in r.stderr
    r = tvmgen("compile", gemm, "--tuning-db", tmp_path / "empty", "-o", tmp_path / "b")
    assert r.returncode == 2 and "it holds no records at all" in r.stderr
    r = tvmgen("app", "--model", gemm, "--tuning-db", db, "-o", tmp_path / "app")  # the phone's target
    assert r.returncode == 2 and "no records for target llvm-mattr=+neon-mtriple=aarch64-linux-android" in r.stderr
    assert not (tmp_path / "app").exists()


def test_another_platform_needs_its_device(gemm, tvmgen, tmp_path):
    r = tvmgen("tune", gemm, "--platform", "android-arm64", "--db", tmp_path / "db")
    assert r.returncode == 2 and "candidates for android-arm64 cannot be timed on this machine" in r.stderr
    assert "--key K --tracker" in r.stderr and not (tmp_path / "db").exists()
    assert "qemu's timings rank schedules unlike the CPU" in " ".join(r.stderr.split())


def test_unreachable_tracker(gemm, tvmgen, tmp_path):
    r = tvmgen("tune", gemm, "--key", "x", "--tracker", "127.0.0.1:1", "--db", tmp_path / "db")
    assert r.returncode == 6
    assert "cannot reach the RPC tracker at 127.0.0.1:1" in r.stderr and "fix:" in r.stderr


def test_tune_on_the_emulated_aarch64_device(gemm, tvmgen, tmp_path, monkeypatch):
    """Candidates cross-built for aarch64, timed under qemu through the tracker and tvmgen's device
    server; the tuned GEMM compiled for linux-aarch64 runs there and matches onnxruntime."""
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64", "cmake"):
        require_tool(tool)
    state = tmp_path / "state"
    state.mkdir()
    env = {"TVMGEN_STATE_DIR": str(state)}
    monkeypatch.setenv("TVMGEN_STATE_DIR", str(state))
    with device_behind("tracker", "linux-aarch64", "arm-tune", state / "w", 19900, 19950) as (tracker, _):
        via = ["--key", "arm-tune", "--tracker", tracker.address]
        r = tvmgen("tune", gemm, "--trials", "1", *via, "--db", tmp_path / "db", extra_env=env)
        assert r.returncode == 0, r.stderr
        assert "device: linux-aarch64 (aarch64)" in r.stderr
        # qemu ranks schedules unlike the CPU (benchmarks/cross_ranking.py): tune says whose timings these are
        assert "device 'arm-tune' runs under qemu-aarch64: the candidates are ranked by the emulator's timings" in (
            " ".join(r.stderr.split())
        )
        assert "1/1 fused_matmul_add: best" in r.stderr
        assert (
            tmp_path / "db" / "llvm-mattr=+neon-mtriple=aarch64-linux-gnu" / "database_tuning_record.json"
        ).is_file()
        a64 = tmp_path / "a64"
        r = tvmgen(
            "compile", gemm, "--platform", "linux-aarch64", "--tuning-db", tmp_path / "db", "-o", a64, extra_env=env
        )
        assert r.returncode == 0, r.stderr
        assert "kernels: 1 from the tuning database" in r.stderr
        r = tvmgen("bench", a64, *via, "--repeat", "1", "--json", tmp_path / "r.json", extra_env=env)
        assert r.returncode == 0, r.stderr
        res = json.loads((tmp_path / "r.json").read_text())
        assert res["device"]["arch"] == "aarch64" and res["check"][0]["max_abs"] < 1e-4


def test_device_lost_mid_tuning(gemm, tmp_path, monkeypatch):
    """A device that dies stops the tuning with exit 6 at once; the failed batch is not recorded,
    so a rerun resumes from the trials that did run."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    require_tool("cmake")
    conv = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv.onnx")
    monkeypatch.setenv("TVMGEN_STATE_DIR", str(tmp_path / "state"))
    with device_behind("tracker", "host", "doomed", tmp_path / "w", 19960, 19989) as (tracker, device):
        env = dict(os.environ, TVMGEN_LOG_DIR=str(tmp_path / "logs"))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tvmgen",
                "tune",
                conv,
                "--trials",
                "20",
                "--db",
                tmp_path / "db",
                "--key",
                "doomed",
                "--tracker",
                tracker.address,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        records = None
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:  # the first task's records are written
            found = list(Path(tmp_path / "db").glob("*/database_tuning_record.json"))
            if found and found[0].read_text().strip():
                records = found[0]
                break
            time.sleep(0.2)
        assert records is not None, proc.communicate()[1]
        os.killpg(device.pid, signal.SIGKILL)
        kept = len(records.read_text().splitlines())
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 6, err
        assert "every candidate failed on device 'doomed'" in err and "fix:" in err and "Traceback" not in err
        assert len(records.read_text().splitlines()) <= kept + 32  # at most the batch running when it died
        run_secs = [json.loads(line)[1][1] for line in records.read_text().splitlines()]
        assert all(max(secs) < 1e9 for secs in run_secs)  # MetaSchedule writes 1e10 for a failed run


def test_local_candidates_run_with_num_cores_threads(gemm, tmp_path, monkeypatch):
    """--num-cores N: the local runner's workers (started while tuning) get TVM_NUM_THREADS=N, and
    the caller's environment is restored afterwards; a device over RPC keeps its own."""
    from tvmgen import frontends
    from tvmgen.compiler.targets.platforms import host_cpu_target, make_target
    from tvmgen.tuning import tune

    seen = []
    monkeypatch.setattr(tune, "_tune_contexts", lambda *a, **k: seen.append(os.environ.get("TVM_NUM_THREADS")) or a[2])
    monkeypatch.setenv("TVM_NUM_THREADS", "7")
    imported = frontends.load(gemm, [])
    target = make_target(host_cpu_target())
    tune.tune(imported.mod, target, 1, tmp_path / "db", tune.Device(), 1, tmp_path)
    assert seen == ["1"] and os.environ["TVM_NUM_THREADS"] == "7"
    monkeypatch.delenv("TVM_NUM_THREADS")
    tune.tune(imported.mod, target, 1, tmp_path / "db", tune.Device(), 3, tmp_path)
    assert seen[-1] == "3" and "TVM_NUM_THREADS" not in os.environ
    remote = tune.Device(key="phone", tracker="127.0.0.1:1")
    tune.tune(imported.mod, target, 1, tmp_path / "db", remote, 4, tmp_path)
    assert seen[-1] is None  # over RPC the device server decides
