"""Shared fixtures: models made inside the tests (nothing downloaded), a CLI runner, the device runtime
built once per session and platform, and compiled artifacts cached per session.

Two ways to run the suite (from the repository root):

    .venv/bin/python -m pytest                  # everything, on every core (pytest-xdist; -n0: one process)
    .venv/bin/python -m pytest -m "not slow"    # the quick subset: no end-to-end compiles of whole models,
                                                # RPC, qemu, CMake builds or tuning (tests marked slow)

Tests that take more than about 15 seconds are marked ``@pytest.mark.slow``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import cli_forks

# the fixture modules' asserts are rewritten as the test modules' are (they are imported here first)
pytest.register_assert_rewrite("fixtures_models", "fixtures_runtime")

from fixtures_models import branching_model, dynamic_pad_model, onnx_model, save_onnx, single_op_models
from fixtures_runtime import QEMU_AARCH64, opencl_info, require_tool, run_native, unavailable

# the fixtures, by what they make; the plain functions imported above stay importable from here, as the test
# modules import them (`from conftest import ...`)
pytest_plugins = ["fixtures_models", "fixtures_runtime"]
__all__ = [
    "QEMU_AARCH64",
    "REPO",
    "TESTS",
    "TVMGEN",
    "branching_model",
    "dynamic_pad_model",
    "onnx_model",
    "opencl_info",
    "require_tool",
    "run_native",
    "save_onnx",
    "single_op_models",
    "unavailable",
]

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# `compile`'s slow-kernel remedy (a profile of every host build, a search where a kernel is slow) is off
# for the tests of everything else: a kernel a loaded machine happens to time as slow would start a search
# of a minute inside a test about something else. tests/tuning/test_remedy.py runs it, and its default.
os.environ.setdefault("TVMGEN_REMEDY_BUDGET", "0")

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"  # the recorded outputs (recorded/) and the Java checks (java/) the test folders share


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: two workers a core. Half of a worker's time goes to waiting (on RPC servers, qemu,
    subprocesses, another worker's compile of a shared artifact): with one worker a core, a 2-core run
    kept one core busy on average (24 min wall for 25 min of CPU)."""
    return 2 * len(os.sched_getaffinity(0))


TVMGEN = cli_forks.TVMGEN

# The modules that take longest, heaviest first (their wall time in a run with 4 workers on 2 cores,
# measured with TVMGEN_TEST_TIMES). With --dist loadfile each module runs whole on one worker, handed out
# in collection order (pyproject's --no-loadscope-reorder: xdist would otherwise order the modules by their
# number of tests, which says little about their time): a long module handed out late is the suite's tail.
# Only the order changes; modules not listed keep their places after these.
HEAVY_FIRST = (
    "test_conformance.py",  # 390 s
    "test_recurrent.py",  # 369
    "test_tune.py",  # 321
    "test_schedules.py",  # 321
    "test_parallel.py",  # 269
    "test_deploy_app_build.py",  # 256 (as test_templates.py, before it was split)
    "test_onnx_ops_nn.py",  # 254
    "test_gpu_bench.py",  # 211
    "test_opencl_zoo.py",  # 202
    "test_coverage.py",  # 197
    "test_nnapi.py",  # 186
    "test_cli.py",  # 183
    "test_frontends.py",  # 176
    "test_vulkan.py",  # 171
    "test_rpc.py",  # 166
    "test_streaming.py",  # 147
    "test_tflite_import.py",  # 133
    "test_benchmarks.py",  # 128
    "test_int8.py",  # 125
    "test_conv1d.py",  # 121
    "test_texture.py",  # 114
    "test_zoo.py",  # 106
    "test_remedy.py",  # 70
    "test_tune_opencl.py",  # 106
    "test_check_arm.py",  # 102
)


def pytest_configure(config):
    """Every build of the run is logged ($TVMGEN_COMPILE_LOG, compiler/build.py; the workers and the CLI
    subprocesses inherit it), so the summary can name the builds that repeat: a model compiled twice is
    suite time spent twice."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("TVMGEN_COMPILE_LOG"):
        return
    import tempfile

    fd, path = tempfile.mkstemp(prefix="tvmgen-builds-", suffix=".jsonl")
    os.close(fd)
    os.environ["TVMGEN_COMPILE_LOG"] = path
    config._tvmgen_build_log = Path(path)


def pytest_terminal_summary(terminalreporter, config):
    log = getattr(config, "_tvmgen_build_log", None)
    if log is None or not log.is_file():
        return
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    log.unlink()
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["module"], r["target"], json.dumps(r["options"], sort_keys=True)), []).append(r)
    again = sorted(((sum(r["seconds"] for r in g[1:]), g) for g in groups.values() if len(g) > 1), key=lambda x: -x[0])
    write = terminalreporter.write_line
    write(
        f"builds: {len(rows)} ({sum(r['seconds'] for r in rows):.0f} s), {len(groups)} distinct; "
        f"{sum(len(g) - 1 for _, g in again)} repeated a build of the same module, target and options "
        f"({sum(s for s, _ in again):.0f} s)"
    )
    for seconds, g in again[:10]:
        tests = sorted({r["test"].split(" ")[0] for r in g})
        write(f"  {seconds:5.1f} s  x{len(g)} {g[0]['target']}: {', '.join(tests)[:300]}")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's order is kept


def _timed_phase(item, phase: str):
    """With TVMGEN_TEST_TIMES=FILE, append one JSON line per test phase: wall and CPU seconds (this
    worker's own, and its waited-for children's), the start time and the worker. Where the suite's
    time goes: a phase with much wall and little CPU is waiting (a timeout, a sleep, another process)."""
    out = os.environ.get("TVMGEN_TEST_TIMES")
    if not out:
        yield
        return
    import time

    t0, c0 = time.time(), os.times()
    yield
    c1 = os.times()
    row = {
        "test": item.nodeid,
        "phase": phase,
        "start": round(t0, 3),
        "wall": round(time.time() - t0, 3),
        "cpu": round(c1.user + c1.system - c0.user - c0.system, 3),
        "children": round(c1.children_user + c1.children_system - c0.children_user - c0.children_system, 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


@pytest.fixture(autouse=True)
def _worker_keeps_its_cpus():
    """A test must leave its worker on every CPU it had: a worker pinned to one CPU (as TVM's thread pool
    pins the thread that creates it, see runner.tvm_pool_size) runs the rest of its modules, and every
    process it starts, on that CPU while the others idle. Put back, and the test fails."""
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    yield
    after = os.sched_getaffinity(0)
    if after != before:
        os.sched_setaffinity(0, before)
        pytest.fail(f"the test left its process pinned to CPUs {sorted(after)} of {sorted(before)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed_phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed_phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _timed_phase(item, "teardown")


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def tvmgen(tmp_path, monkeypatch):
    """Run the real CLI in a process of its own (real exit codes, real output; forked from a process that has
    imported TVM already: tests/cli_forks.py), logs under tmp_path."""
    env = dict(os.environ, TVMGEN_LOG_DIR=str(tmp_path / "logs"), COLUMNS="200")

    def run(*args, cwd=None, extra_env=None, timeout=600) -> CliResult:
        proc = cli_forks.run(args, {**env, **(extra_env or {})}, cwd=cwd or tmp_path, timeout=timeout)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def tvmgen_inprocess(tmp_path, monkeypatch):
    """Like ``tvmgen``, but tvmgen.cli's main() runs in this process under click's CliRunner, capturing the
    file descriptors (what C++ code writes too), with the same exit codes and error output; no new Python,
    no TVM import (2-5 s each). For argument and error paths that do no TVM work; the subprocess runner
    stays for everything else."""
    import logging
    import warnings

    import click
    from click.testing import CliRunner

    from tvmgen import cli as tvmgen_cli

    @click.command(
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False, "help_option_names": []}
    )
    @click.argument("argv", nargs=-1, type=click.UNPROCESSED)
    def real_main(argv):
        sys.argv = ["tvmgen", *argv]
        tvmgen_cli.main()

    env = {"TVMGEN_LOG_DIR": str(tmp_path / "logs"), "COLUMNS": "200"}
    logger = logging.getLogger("tvmgen")

    def run(*args, cwd=None, extra_env=None) -> CliResult:
        monkeypatch.chdir(cwd or tmp_path)
        monkeypatch.setattr(sys, "argv", list(sys.argv))
        saved = (list(logger.handlers), logger.level, logger.propagate, warnings.showwarning)
        try:
            result = CliRunner(capture="fd").invoke(
                real_main, list(map(str, args)), env={**env, **(extra_env or {})}, catch_exceptions=True
            )
        finally:
            for h in logger.handlers:
                if h not in saved[0]:
                    h.close()
            logger.handlers[:] = saved[0]
            logger.setLevel(saved[1])
            logger.propagate = saved[2]
            logging.captureWarnings(False)
            warnings.showwarning = saved[3]
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run
