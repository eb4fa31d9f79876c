"""benchmarks/speed.py --paced: its options, the paced timing loop, the side-by-side table and its summary,
and one paced measurement of a one-operator model through HostModel.run, tvmgen-run and the Java API."""

from __future__ import annotations

import pytest

from conftest import save_onnx, single_op_models
from helpers import load_benchmark


@pytest.fixture(scope="module")
def speed():
    return load_benchmark("speed")


def test_paced_options(speed, capsys):
    args = speed.parse_args(["--paced", "--models", "vad_if", "--threads", "1,2"])
    assert (args.paced, args.fps, args.thread_counts, args.models) == (True, 30.0, [1, 2], ["vad_if"])
    assert speed.parse_args(["--paced", "--fps", "60"]).fps == 60.0
    assert speed.parse_args([]).paced is False  # the quiet / busy table stays the default
    for bad, why in (
        (["--fps", "0"], "--fps must be above 0"),
        (["--fps", "fast"], "invalid float value"),
        (["--threads", "0"], "at least 1"),
        (["--threads", "one"], "comma-separated numbers"),
        (["--runtime", "/nonexistent"], "has no bin/tvmgen-run"),
        (["--jni", "/nonexistent"], "has no libtvmgen_jni.so and tvmgen.jar"),
    ):
        with pytest.raises(SystemExit):
            speed.parse_args(bad)
        assert why in capsys.readouterr().err


def test_paced_sleeps_before_every_timed_run(monkeypatch):
    benchlib = load_benchmark("benchlib")
    events = []
    monkeypatch.setattr(benchlib.time, "sleep", lambda s: events.append(("sleep", s)))
    contenders = [benchlib.Timed(k, lambda k=k: events.append(k)) for k in ("a", "b")]
    benchlib.paced(contenders, 0.025, runs=4, rounds=2)
    assert [len(c.times_ms) for c in contenders] == [4, 4]
    calls = [e for e in events if e != ("sleep", 0.025)]
    assert calls[:2] == ["a", "b"]  # one untimed warm call each
    timed = events[2:]
    assert timed == [("sleep", 0.025), "a"] * 2 + [("sleep", 0.025), "b"] * 4 + [("sleep", 0.025), "a"] * 2


def paced_row(model, threads, b2b, paced, cpp=None, jni=None) -> dict:
    row = {
        "model": model,
        "threads": threads,
        "reference": "litert",
        "outputs": "ok",
        "quiet": {"tvmgen": b2b[0], "reference": b2b[1]},
        "paced": {"tvmgen": paced[0], "reference": paced[1]},
    }
    if cpp:
        row["tvmgen_run"] = {"quiet": cpp[0], "paced": cpp[1], "threads": threads}
    if jni:
        row["jni"] = {"quiet": jni[0], "paced": jni[1], "threads": threads, "outputs": "ok"}
    return row


def test_paced_table_and_summary(speed):
    rows = [
        paced_row("a", 1, (1.0, 2.0), (2.0, 2.5), cpp=(0.9, 1.5), jni=(1.0, 2.0)),
        paced_row("b", 1, (0.5, 0.5), (1.0, 0.8), cpp=(0.5, 0.6), jni=(0.5, 0.4)),
        paced_row("a", 2, (0.6, 1.0), (0.9, 1.0)),  # tvmgen-run and Java left out: their columns say "-"
        {"model": "c", "threads": 1, "error": "compiling c failed"},
    ]
    rows[1]["jni"]["outputs"] = "MISMATCH (1.0e+00)"
    rows[2]["jni"] = {"error": "UnsatisfiedLinkError: no tvmgen_jni"}
    table = speed.format_paced_table(rows)
    lines = table.splitlines()
    assert "py ms (b2b)" in lines[0] and "jni/ref (paced)" in lines[0] and "paced/b2b ref" in lines[0]
    a1 = lines[2].split()
    # b2b: py, run, jni, ref, py/ref, run/ref, jni/ref; paced: the same; paced/b2b: py, run, jni, ref
    assert a1[4:] == ["1.00", "0.900", "1.00", "2.00", "0.50x", "0.45x", "0.50x"] + [
        "2.00",
        "1.50",
        "2.00",
        "2.50",
        "0.80x",
        "0.60x",
        "0.80x",
    ] + ["2.00x", "1.67x", "2.00x", "1.25x"]
    assert "ok, jni MISMATCH (1.0e+00)" in lines[3]
    assert lines[4].split()[4:15] == ["0.600", "-", "-", "1.00", "0.60x", "-", "-", "0.900", "-", "-", "1.00"]
    assert lines[4].rstrip().endswith("JNI Model.run failed: UnsatisfiedLinkError: no tvmgen_jni")
    assert "failed: compiling c failed" in lines[5]

    summary = speed.summarise(rows, speed.PACED_PHASES)
    one = summary[1]
    assert one["quiet_ratio"] == pytest.approx((0.5 * 1.0) ** 0.5)
    assert one["paced_ratio"] == pytest.approx((0.8 * 1.25) ** 0.5)
    assert one["paced_worst"] == (1.25, "b")
    assert one["tvmgen_run_paced_worst"] == (pytest.approx(0.75), "b")
    assert one["tvmgen_run_slowdown"] == pytest.approx((1.5 / 0.9 * 1.2) ** 0.5)
    assert one["jni_paced_ratio"] == pytest.approx((0.8 * 0.5) ** 0.5)
    assert one["jni_quiet_worst"] == (1.0, "b")
    assert "tvmgen_run_paced_ratio" not in summary[2] and "jni_paced_ratio" not in summary[2]
    first, second = speed.summary_lines(summary, fps=30)
    assert first.startswith("1 thread(s): HostModel.run / reference geometric mean 0.71x back to back")
    assert "paced at 30 fps (slowest b 1.25x)" in first and "tvmgen-run / reference" in first
    assert "JNI Model.run / reference 0.71x back to back (slowest b 1.00x), 0.63x paced (slowest a 0.80x)" in first
    assert "tvmgen-run" not in second and "JNI" not in second


def test_java_paths(speed, tmp_path):
    """The JNI library and the jar in an install prefix (lib/, share/java/) or a CMake build directory."""
    assert speed.java_paths(None) is None and speed.java_paths(tmp_path) is None
    (tmp_path / "libtvmgen_jni.so").touch()
    (tmp_path / "tvmgen.jar").touch()
    assert speed.java_paths(tmp_path) == (tmp_path, tmp_path / "tvmgen.jar")
    prefix = tmp_path / "install"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "share" / "java").mkdir(parents=True)
    (prefix / "lib" / "libtvmgen_jni.so").touch()
    assert speed.java_paths(prefix) is None  # no jar
    (prefix / "share" / "java" / "tvmgen.jar").touch()
    assert speed.java_paths(prefix) == (prefix / "lib", prefix / "share" / "java" / "tvmgen.jar")


@pytest.mark.slow
def test_paced_row_of_a_one_operator_model(speed, compiled, host_runtime, tmp_path):
    """time_model in paced mode (as the benchmark's child runs it) on a softmax: both engines timed back to back
    and paced, tvmgen-run both ways with the thread count asked for."""
    work = tmp_path / "work"
    work.mkdir()
    model = save_onnx(single_op_models()["softmax"], work / "softmax.onnx")
    (work / "softmax-host").symlink_to(compiled(model, name="softmax"))
    row = speed.time_model("softmax", work, 1, runs=4, fps=200, runner=host_runtime)
    assert row["outputs"] == "ok" and row["reference"] == "onnxruntime"
    for phase in ("quiet", "paced"):
        assert row[phase]["tvmgen"] > 0 and row[phase]["reference"] > 0
        assert row["tvmgen_run"][phase] > 0
    assert row["tvmgen_run"]["threads"] == 1
    assert "contended" not in row
    assert "softmax" in speed.format_paced_table([row])


@pytest.mark.slow
def test_paced_java_row_of_a_one_operator_model(speed, compiled, java_build, tmp_path):
    """time_model with the Java API (PacedRun compiled against the session's jar): org.tvmgen.Model timed back to
    back and paced in one JVM, its two outputs checked against HostModel.run's; a JVM that cannot load the JNI
    library gives the row an error, not a failure."""
    work = tmp_path / "work"
    work.mkdir()
    model = save_onnx(single_op_models()["two_outputs"], work / "two_outputs.onnx")
    (work / "two_outputs-host").symlink_to(compiled(model, name="two_outputs"))
    lib, jar = speed.java_paths(java_build["prefix"])
    classpath = speed.compile_java(jar, work)
    row = speed.time_model("two_outputs", work, 1, runs=4, fps=200, java=(lib, classpath))
    assert row["jni"]["outputs"] == "ok" and row["jni"]["threads"] == 1
    assert row["jni"]["quiet"] > 0 and row["jni"]["paced"] > 0
    assert "tvmgen_run" not in row  # no runner given
    assert "JNI Model.run" in speed.summary_lines(speed.summarise([row], speed.PACED_PHASES), fps=200)[0]
    row = speed.time_model("two_outputs", work, 1, runs=2, fps=200, java=(tmp_path, classpath))
    assert "tvmgen_jni" in row["jni"]["error"] and "quiet" in row
