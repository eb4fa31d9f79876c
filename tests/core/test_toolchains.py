"""core/toolchains: the one seam every external program runs through, on real programs found here.

The seam's promises: a program that is not there is a ToolMissingError naming it and how to install it;
one past its time limit is stopped and reported with its name; a non-zero exit carries the tail of its
stderr; and nothing else in tvmgen starts a process (no ``subprocess`` import outside core/toolchains/).
"""

from __future__ import annotations

import ast
import os
import re
import stat
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, require_tool
from tvmgen.core import toolchains
from tvmgen.core.errors import CompileError, ToolMissingError, ToolTimeoutError

PACKAGE = REPO / "generator" / "tvmgen"
TOOLCHAINS = PACKAGE / "core" / "toolchains"


def _process_uses(path: Path) -> list[str]:
    """Where ``path`` imports subprocess or calls shutil.which: 'file:line what' for each."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        hits = [n for n in names if n == "subprocess" or n.startswith("subprocess.") or n == "shutil.which"]
        if isinstance(node, ast.Attribute) and node.attr == "which":
            base = node.value
            if isinstance(base, ast.Name) and base.id == "shutil":
                hits.append("shutil.which")
        uses += [f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)} {h}" for h in hits]
    return uses


def test_no_process_is_started_outside_core_toolchains():
    outside, inside = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        (inside if TOOLCHAINS in path.parents else outside).extend(_process_uses(path))
    assert not outside, "run external programs through tvmgen.core.toolchains, not directly:\n" + "\n".join(outside)
    # the walk sees the seam's own imports: the check above looks where processes are really started
    assert any(u.startswith("core/toolchains/seam.py") and u.endswith(" subprocess") for u in inside), inside


def test_the_toolchains_package_is_in_core():
    """The package sits in the lowest layer: every layer above it can run tools through it."""
    for path in TOOLCHAINS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tvmgen."):
                assert node.module.startswith("tvmgen.core"), f"{path.name} imports {node.module}"


def test_a_missing_tool_names_itself_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with nothing on it
    with pytest.raises(ToolMissingError) as e:
        toolchains.CMake().verify()
    assert "cmake not found" in e.value.message and e.value.hint == "install it: apt-get install cmake"
    assert e.value.exit_code == 3
    assert not toolchains.Qemu().available()
    with pytest.raises(ToolMissingError, match=r"qemu-aarch64 not found \(looked in \$TVMGEN_QEMU, PATH\)") as e:
        toolchains.Qemu().verify()
    assert e.value.hint == "install it: apt-get install qemu-user (or set TVMGEN_QEMU)"
    not_executable = tmp_path / "qemu"
    not_executable.write_text("")
    monkeypatch.setenv("TVMGEN_QEMU", str(not_executable))
    with pytest.raises(ToolMissingError, match=r"TVMGEN_QEMU=.* is not an executable file"):
        toolchains.Qemu().verify()


def test_a_program_that_cannot_start_is_a_missing_tool(tmp_path):
    with pytest.raises(ToolMissingError) as e:
        toolchains.run([tmp_path / "no-such-program", "--version"], tool="the widget compiler", fix="apt-get widget")
    assert e.value.message.startswith("the widget compiler could not be started")
    assert "No such file or directory" in e.value.message and e.value.hint == "apt-get widget"
    # a program found once but gone (or no longer executable) by the time it runs: the Tool's own fix
    script = tmp_path / "glslangValidator"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    tool = toolchains.Glslang()
    tool._path = script
    assert tool.run("--version").returncode == 0
    script.chmod(stat.S_IRUSR)
    with pytest.raises(ToolMissingError, match="glslangValidator could not be started") as e:
        tool.run("--version")
    assert e.value.hint == "install it: apt-get install glslang-tools (or set TVMGEN_GLSLANG)"
    # a missing working directory is not a missing tool: it stays the OSError it is
    with pytest.raises(FileNotFoundError):
        toolchains.run(["true"], cwd=tmp_path / "no-such-dir")


def test_a_timeout_stops_the_tool_and_names_it():
    require_tool("sleep")
    start = time.monotonic()
    with pytest.raises(ToolTimeoutError) as e:
        toolchains.run(["sleep", "30"], timeout=0.5)
    assert time.monotonic() - start < 10  # stopped, not waited for
    assert e.value.message.startswith("sleep did not finish within 0.5 s") and "sleep 30" in e.value.message
    assert isinstance(e.value, CompileError) and e.value.exit_code == 4

    class Sleeper(toolchains.Tool):
        name = "the sleeper"
        commands = ("sleep",)
        timeout = 0.3

    with pytest.raises(ToolTimeoutError, match=r"^the sleeper did not finish within 0\.3 s"):
        Sleeper()("30")  # the Tool's own limit applies to its runs, checked or not
    assert Sleeper().run("0", timeout=10).returncode == 0  # a per-call limit replaces it


def test_a_failing_tool_carries_its_stderr_tail():
    require_tool("false")
    with pytest.raises(CompileError, match=r"^false failed with exit code 1"):
        toolchains.run(["false"])
    assert toolchains.run(["false"], check=False).returncode == 1  # unchecked: the caller reads the exit code
    script = "printf 'HEAD%.0s' $(seq 1000) >&2; echo; echo 'the real cause' >&2; exit 3"
    with pytest.raises(CompileError) as e:
        toolchains.run(["sh", "-c", script], tool="shell")
    assert e.value.message.startswith("shell failed with exit code 3:")
    assert e.value.message.endswith("the real cause") and "HEADHEAD" in e.value.message
    assert len(e.value.message) < 2100  # the tail only: the whole of it is in the log file


def test_env_and_input_reach_the_child_and_values_stay_out_of_the_log(caplog):
    caplog.set_level("DEBUG", logger="tvmgen.toolchains")
    proc = toolchains.run(
        ["sh", "-c", 'read line; echo "$line $SECRET_VALUE"'], env={"SECRET_VALUE": "s3cr3t"}, input="hi\n"
    )
    assert proc.stdout.strip() == "hi s3cr3t"
    assert "SECRET_VALUE" in caplog.text and caplog.text.count("s3cr3t") == 1  # only in the child's own output


@pytest.mark.parametrize(
    ("tool", "program", "version"),
    [
        (toolchains.CMake, "cmake", r"^\d+\.\d+"),
        (toolchains.Qemu, "qemu-aarch64", r"^\d+\.\d+"),
        (toolchains.Git, "git", r"^\d+\.\d+"),
        (toolchains.Glslang, "glslangValidator", r"\d+\.\d+"),
        (toolchains.SpirvVal, "spirv-val", r"^v\d{4}"),
    ],
)
def test_real_tools_are_found_and_report_their_versions(tool, program, version):
    require_tool(program)
    found = tool()
    assert found.verify() == toolchains.which(program) and os.access(found.verify(), os.X_OK)
    assert found.version() is not None
    assert re.search(version, found.version() or ""), found.version()


def test_cmake_runs_through_the_seam(tmp_path):
    require_tool("cmake")
    (tmp_path / "CMakeLists.txt").write_text("this is not cmake(\n")
    with pytest.raises(CompileError, match=r"^cmake failed with exit code 1") as e:
        toolchains.CMake().run("-S", tmp_path, "-B", tmp_path / "build")
    assert "CMakeLists.txt" in e.value.message  # CMake's own message, from its stderr


def test_spawn_detaches_and_logs(tmp_path):
    log = tmp_path / "server.log"
    code = "import os, sys; print(os.getsid(0), os.getpid(), os.environ['GREETING']); print('oops', file=sys.stderr)"
    proc = toolchains.spawn([sys.executable, "-c", code], log, env={"GREETING": "hello"})
    assert proc.wait(timeout=60) == 0
    first, second = log.read_text().splitlines()[:2]
    sid, pid, greeting = first.split()
    assert sid == pid == str(proc.pid) and greeting == "hello"  # its own session, leading it
    assert second == "oops"  # stderr into the same log
    with pytest.raises(ToolMissingError, match="no-such-server could not be started"):
        toolchains.spawn([tmp_path / "no-such-server"], log)
