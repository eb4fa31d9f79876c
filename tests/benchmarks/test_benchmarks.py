"""benchmarks/cpu_speed.py end to end on a small GEMM: the rows, ratios and output check its JSON promises,
and a tuning database that cannot be used leaves the tuned column out with the reason."""

from __future__ import annotations

import json

import pytest

from conftest import unavailable
from helpers import load_benchmark, run_benchmark
from tvmgen.core.errors import ToolMissingError
from tvmgen.core.toolchains import HostCxx

pytestmark = pytest.mark.slow  # the benchmark scripts run end to end


def require_host_cxx() -> None:
    try:
        HostCxx().verify()
    except ToolMissingError as e:
        unavailable(str(e))


def test_cpu_speed_quick_gemm(tmp_path):
    require_host_cxx()
    out, empty_db = tmp_path / "speed.json", tmp_path / "empty-db"
    empty_db.mkdir()
    gemm = ["--models", "gemm,head-matmul", "--threads", "1", "--gemm-size", "128", "--head-shape", "2,64,512"]
    proc = run_benchmark("cpu_speed.py", "--quick", *gemm, "--tuning-db", empty_db, "--json", out, timeout=300)

    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "cpu_speed" and doc["failures"] == []
    assert doc["settings"]["gemm_size"] == 128 and doc["settings"]["head_shape"] == [2, 64, 512]
    row, head = doc["rows"]

    # the head's weights in GB/s beside the read bandwidth its worker measured, for every runtime
    assert "weights_gbs" not in row and doc["models"][1]["model_info"]["weight_bytes"] == 4 * 64 * 512
    bw = head["read_bandwidth"]
    assert bw["gbs"] == max(bw["by"].values()) > 0 and set(bw["by"]) == {"sum", "max"}
    assert set(head["weights_gbs"]) == {"default", "onnxruntime"} and head["outputs_match"]
    for k, gbs in head["weights_gbs"].items():
        assert gbs == pytest.approx(4 * 64 * 512 / (head["stats"][k]["median_ms"] * 1e6))
    line = next(x for x in proc.stdout.splitlines() if x.startswith("head-2x64x512, 1 thread(s): weights streamed"))
    tvmgen_gbs = head["weights_gbs"]["default"]
    assert f"tvmgen {tvmgen_gbs:.1f} GB/s ({tvmgen_gbs / bw['gbs']:.0%})" in line and f"{bw['gbs']:.1f} GB/s" in line
    assert (row["model"], row["threads"], row["tvm_threads_actual"]) == ("gemm", 1, 1)
    assert row["reference"] == "numpy" and row["reference_threads_actual"] == 1
    assert set(row["stats"]) == {"default", "numpy"}
    assert all(s["runs"] >= 5 for s in row["stats"].values())
    default = row["tvmgen"]["default"]
    assert default["ratio"] == default["median_ms"] / row["reference_ms"] > 0
    assert row["outputs_match"] and default["max_abs_diff"] < 1e-3
    assert set(row["gflops"]) == {"default", "numpy"}
    assert doc["models"][0]["model_info"]["flops"] == 2 * 128**3

    # no records in the database (or no tvmgen.tuning.tune): a tuned build is attempted at most, never measured
    why = doc["skipped_columns"].get("tuned") or doc["models"][0]["skipped"].get("tuned")
    assert why and "tuned" not in row["tvmgen"]
    assert "tuned" in proc.stdout and "tuned ms" not in proc.stdout

    # the table on stdout, progress on stderr
    assert "gemm-128^3" in proc.stdout and "tvmgen/ref" in proc.stdout and "numpy" in proc.stdout
    assert "[bench" in proc.stderr and "[bench" not in proc.stdout


def test_cpu_speed_takes_a_tuning_database_per_thread_count(tmp_path):
    """--tuning-db DIR is for every row, --tuning-db N=DIR for the N-thread rows (tune per thread count)."""
    cpu_speed = load_benchmark("cpu_speed")
    one, two = tmp_path / "db-1t", tmp_path / "db-2t"
    one.mkdir()
    two.mkdir()

    def fail(msg):
        raise ValueError(msg)

    dbs = cpu_speed.parse_tuning_dbs([f"1={one}", f"2={two}"], [1, 2], fail)
    assert dbs == {1: one.resolve(), 2: two.resolve()}
    assert cpu_speed.parse_tuning_dbs([str(one)], [1, 2], fail) == {None: one.resolve()}
    for bad, why in (
        ([f"4={one}"], "4 is not one of the thread counts"),
        ([str(one), str(two)], "given twice"),
        ([f"1={tmp_path / 'missing'}"], "is not a directory"),
    ):
        with pytest.raises(ValueError, match=why):
            cpu_speed.parse_tuning_dbs(bad, [1, 2], fail)
    args = type("Args", (), {"threads": [1, 2], "tuning_dbs": dbs})
    assert (cpu_speed.tuned_label(args, one.resolve()), cpu_speed.tuned_label(args, two.resolve())) == (
        "1 thread",
        "2 threads",
    )


def shared_zoo_build(name: str, work, compiled):
    """The zoo model ``name`` written into a benchmark's work directory with the session's build of it
    beside it (``{name}-host``, as test_zoo compiled it): the benchmark measures, it does not compile again."""
    import shutil
    import sys

    from conftest import REPO
    from tvmgen.frontends.base import parse_consts

    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo
    import zoo_state_pairs

    work.mkdir(parents=True, exist_ok=True)
    path, flags = zoo.build(name, work)
    consts, inputs = zoo.split_flags(flags)
    state = zoo_state_pairs.state_pairs(flags) or None  # a streaming model's --state pairs
    built = compiled(path, name=name, consts=parse_consts(consts) or None, inputs=inputs or None, state=state)
    shutil.copytree(built, work / f"{name}-host")
    return path


def test_memory_benchmark_on_a_tflite_head(tmp_path, compiled):
    """benchmarks/memory.py on one small model: every engine measured in its own process, readings in
    the order the kernel produces them, and the model's weights resident in tvmgen's peak."""
    require_host_cxx()
    out, work = tmp_path / "mem.json", tmp_path / "work"
    shared_zoo_build("det_head_tflite", work, compiled)
    proc = run_benchmark("memory.py", "--models", "det_head_tflite", "--keep", work, "--json", out)
    assert "det_head_tflite" in proc.stdout and "LiteRT" in proc.stdout
    assert "reusing" in proc.stderr  # the session's build, checked by its sha256, not compiled again
    [row] = json.loads(out.read_text())["rows"]
    assert set(row["readings"]) == {"tvmgen-run (C++)", "tvmgen (Python)", "LiteRT"}
    for engine, r in row["readings"].items():
        assert 0 < r["before_load_bytes"] <= r["after_load_peak_bytes"] <= r["overall_peak_bytes"], (engine, r)
    weights = row["artifact_bytes"]
    cpp = row["readings"]["tvmgen-run (C++)"]
    assert cpp["overall_peak_bytes"] - cpp["before_load_bytes"] >= 0.5 * weights, (cpp, weights)


def test_speed_quiet_and_busy_on_one_zoo_model(tmp_path, compiled):
    """benchmarks/speed.py on the zoo's voice-activity detector at 1 and 2 threads: both phases timed for
    both engines, the outputs checked, tvmgen's own launcher with the thread count asked for."""
    out = tmp_path / "speed.json"
    shared_zoo_build("vad_if", tmp_path / "work", compiled)  # speed.py reuses what --work holds
    settings = ["--models", "vad_if", "--threads", "1,2", "--runs", "3"]
    proc = run_benchmark("speed.py", *settings, "--work", tmp_path / "work", "--json", out, timeout=600)
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "speed" and [r["threads"] for r in doc["rows"]] == [1, 2]
    for row in doc["rows"]:
        assert row["outputs"] == "ok" and row["reference"] == "onnxruntime"
        assert (row["thread_pool"], row["tvmgen_threads"]) == ("tvmgen", row["threads"])
        for phase in ("quiet", "contended"):
            assert row[phase]["tvmgen"] > 0 and row[phase]["reference"] > 0
    assert set(doc["summary"]) == {"1", "2"}
    assert "vad_if" in proc.stdout and "geometric mean" in proc.stdout


def test_streaming_per_step_table(tmp_path, compiled):
    """benchmarks/streaming.py --quick on the zoo's ONNX streaming model: one row per mode, the outputs of the C++
    (direct calls and VM) and Python paths equal to onnxruntime's over a sequence, the C++ harness running direct
    calls where asked and the VM where not, and the table's ratios positive numbers."""
    require_host_cxx()
    out, work = tmp_path / "streaming.json", tmp_path / "work"
    shared_zoo_build("stream_gru", work, compiled)  # streaming.py reuses what --work holds
    proc = run_benchmark("streaming.py", "--quick", "--models", "stream_gru", "--work", work, "--json", out)

    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "streaming" and doc["settings"]["threads"] == [1]
    rows = doc["rows"]
    assert [(r["model"], r["threads"], r["mode"]) for r in rows] == [
        ("stream_gru", 1, "back-to-back"),
        ("stream_gru", 1, "paced"),
    ]
    for r in rows:
        assert r["reference"] == "onnxruntime" and r["outputs"] == {"python": "ok", "cpp": "ok", "cpp_vm": "ok"}
        assert r["direct_calls"] == {"cpp": True, "cpp_vm": False}
        assert r["tvmgen_threads"] == {"cpp": 1, "python": 1}
        for path in ("cpp", "cpp_vm", "python"):
            assert r[f"{path}_ratio"] == pytest.approx(r[f"{path}_us"] / r["reference_us"]) and r[f"{path}_ratio"] > 0
        assert (
            set(r["steps_timed"]) == {"reference", "cpp", "cpp_vm", "python"} and min(r["steps_timed"].values()) >= 10
        )

    # the table on stdout: its header, then one line per row whose three ratios are positive numbers
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("model "))
    header = "model threads mode reference ref us C++ us C++/ref C++ VM us VM/ref Python us Py/ref"
    assert lines[at].split() == header.split()
    body = [line.split() for line in lines[at + 2 : at + 2 + len(rows)]]
    assert [(c[0], c[2]) for c in body] == [("stream_gru", "back-to-back"), ("stream_gru", "paced")]
    for cells in body:
        assert len(cells) == 11 and all(cells[i].endswith("x") and float(cells[i][:-1]) > 0 for i in (6, 8, 10))
    assert "outputs over 20 steps" in proc.stdout and "ok" in proc.stdout
    assert "[bench" in proc.stderr and "[bench" not in proc.stdout


def test_cross_ranking_scores_the_rankings_against_native_times(tmp_path):
    """benchmarks/cross_ranking.py on one kernel, without its qemu column (minutes): each ranking gets a Kendall
    tau in [-1, 1] and a pick of at least 1.0x, worked out from the native times it records."""
    require_host_cxx()
    out = tmp_path / "ranking.json"
    proc = run_benchmark(
        "cross_ranking.py", "--no-qemu", "--candidates", "3", "--kernels", "head", "--json", out, timeout=300
    )
    doc = json.loads(out.read_text())
    (name,) = doc
    row = doc[name]
    assert name == "head_8x120x2048" and row["candidates"] == 3 and row["spread"] >= 1.0
    assert row["qemu_slowdown"] is None and "qemu-x86_64" not in row
    for method in ("native again", "model: same kernel", "model: other ISA"):
        assert -1.0 <= row[method]["tau"] <= 1.0 and row[method]["pick"] >= 1.0, (method, row[method])
    assert "model: other kernels" not in row  # one kernel: no others to learn from
    assert row["random_pick"] >= 1.0 and row["best_ms"] > 0
    assert "| head_8x120x2048 |" in proc.stdout and "Kendall tau" in proc.stdout
