"""Ctrl-C and kill stop a compile (issue 48): exit 130 (SIGINT) or 143 (SIGTERM), no artifact, no temporary
folder, no fallback pipeline run instead; and a compile removes the temporary folders a killed one left,
never those of a compile still running.

The end-to-end tests start `tvmgen compile builtin:mobilenet`, wait for a line of its log that says TVM is
building, send the signal, and stop there: none compiles to the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import TVMGEN
from tvmgen.core import artifact

# Printed as the build starts: TVM's passes (legalisation first, where the interrupt became a
# RuntimeError and the fallback pipeline ran) follow at once, for several seconds.
BUILDING = "Compiling for"
STARTED = 300  # seconds to reach the marker: imports and the first passes on a loaded 2-core machine
STOPPED = 120  # seconds from the signal to the exit


def compile_until(marker: str, out: Path) -> tuple[subprocess.Popen, threading.Thread, list[str]]:
    """Start a compile into ``out`` and return once its output has shown ``marker``: the process, the
    thread that keeps reading its output (it never blocks on a full pipe), and the lines read."""
    p = subprocess.Popen(
        [*TVMGEN, "-v", "compile", "builtin:mobilenet", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=out.parent,
    )
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            lines.append(line)
            if marker in line:
                seen.set()
        seen.set()  # the output ended (the compile failed, or finished before the marker)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not seen.wait(STARTED) or p.poll() is not None:
        p.kill()
        pytest.fail(f"the compile never showed {marker!r}:\n{''.join(lines)}")
    return p, reader, lines


def wait_for_exit(p: subprocess.Popen, reader: threading.Thread, lines: list[str]) -> tuple[int, str]:
    try:
        rc = p.wait(STOPPED)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"the compile went on {STOPPED} s after the signal:\n{''.join(lines)}")
    reader.join(STOPPED)  # the output's last lines
    return rc, "".join(lines)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"])
def test_signal_stops_a_compile(tmp_path, sig, code):
    out = tmp_path / "m"
    p, reader, lines = compile_until(BUILDING, out)
    p.send_signal(sig)
    rc, output = wait_for_exit(p, reader, lines)
    assert rc == code, output
    assert not out.exists(), output
    assert not list(tmp_path.glob(".*.tmp-*")), output
    lowered = output.lower()
    for fallback in ("fallback", "failed", "built with", "traceback", "internal error"):
        assert fallback not in lowered, output
    assert f"interrupted ({signal.Signals(sig).name})" in output, output
    assert "artifact:" not in output and "Exporting" not in output, output  # it stopped inside TVM


# how each script below ends: what its try block's interrupt came back as (the caught error, or the interrupt)
REPORT = """except Exception as e:
    print("CAUGHT AS", type(e).__name__, repr(str(e)))
except KeyboardInterrupt as e:
    print("INTERRUPTED", type(e).__name__, interrupts.exit_code())
    interrupts.handled()
"""


def test_interrupt_inside_a_tvm_pass_is_not_an_error():
    """A signal whose handler runs in a Python pass that TVM's C++ called comes back as the interrupt:
    an ``except Exception`` (a fallback's) does not catch it. (Without tvmgen's handler, tvm_ffi hands it
    back as a RuntimeError with an empty message.)"""
    script = (
        """
import os, signal, time
from tvmgen.core import interrupts
interrupts.install()
import tvm

@tvm.transform.module_pass(opt_level=0, name="Slow")
def slow(mod, ctx):
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the handler runs between these bytecodes
        pass
    return mod

try:
    slow(tvm.IRModule({}))
    print("NOT INTERRUPTED")
"""
        + REPORT
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=STARTED)
    assert "INTERRUPTED Interrupted 130" in r.stdout, r.stdout + r.stderr


def test_interrupt_swallowed_by_tvm_cpp_stops_at_the_next_callback(tmp_path):
    """FoldConstant's C++ catches any error from the ``tirx.build`` it calls and goes on (the fold is
    skipped). An interrupt raised there is lost to it; the next Python call TVM makes raises it again,
    so the pass after it never runs."""
    script = (
        """
import os, signal, time
import numpy as np
from tvmgen.core import interrupts
interrupts.install()
import tvm
from tvm import relax
from tvm.script import relax as R

build = tvm.get_global_func("tirx.build")

def interrupted_build(*args):
    print("BUILD CALLED", flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the handler runs between these bytecodes
        pass
    return build(*args)

tvm.register_global_func("tirx.build", interrupted_build, override=True)

@tvm.script.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            c = R.add(R.const(np.array([1.0, 2.0], "float32")), R.const(np.array([3.0, 4.0], "float32")))
            y = R.add(x, c)
            R.output(y)
        return y

@tvm.transform.module_pass(opt_level=0, name="After")
def after(mod, ctx):
    print("CARRIED ON", flush=True)
    return mod

try:
    tvm.transform.Sequential([relax.transform.FoldConstant(), after])(Module)
    print("NOT INTERRUPTED")
"""
        + REPORT
    )
    (tmp_path / "swallowed.py").write_text(script)  # TVMScript reads its functions' source from the file
    r = subprocess.run(
        [sys.executable, str(tmp_path / "swallowed.py")], capture_output=True, text=True, timeout=STARTED
    )
    assert "BUILD CALLED" in r.stdout, r.stdout + r.stderr  # the interrupt came inside FoldConstant
    assert "CARRIED ON" not in r.stdout, r.stdout + r.stderr
    assert "INTERRUPTED Interrupted 130" in r.stdout, r.stdout + r.stderr


def test_reraise_if_interrupted_only_after_a_signal(monkeypatch):
    from tvmgen.core import interrupts

    interrupts.reraise_if_interrupted(RuntimeError(""))  # no signal: the caller's fallback goes on
    monkeypatch.setattr(interrupts, "_received", int(signal.SIGTERM))
    with pytest.raises(interrupts.Interrupted) as e:
        interrupts.reraise_if_interrupted(RuntimeError(""))
    assert e.value.exit_code == 143 and isinstance(e.value.__cause__, RuntimeError)
    assert interrupts.is_interrupt(ValueError("any error, once a signal came"))


def test_is_interrupt_follows_the_cause():
    from tvmgen.core import interrupts

    assert interrupts.received() is None
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("wrapped") from ki
    except RuntimeError as e:
        assert interrupts.is_interrupt(e)
    assert not interrupts.is_interrupt(RuntimeError("a plain failure"))


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporary_folders_removed_live_ones_kept(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    gone = dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        stale = tmp_path / f".m.tmp-{gone}-abcd1234"
        stale_old = tmp_path / f".m.old-{gone}"
        running = tmp_path / f".m.tmp-{live.pid}-efgh5678"
        mine = tmp_path / f".m.tmp-{os.getpid()}-ijkl9012"
        unknown = tmp_path / ".m.tmp-mnop3456"  # no process id in the name: nothing says whose it is
        other = tmp_path / f".n.tmp-{gone}-qrst7890"  # another output's
        for d in (stale, stale_old, running, mine, unknown, other):
            d.mkdir()
            (d / "model.so").write_bytes(b"\0" * 16)

        removed = artifact.remove_stale(out)

        assert sorted(removed) == sorted([stale, stale_old])
        assert not stale.exists() and not stale_old.exists()
        for kept in (running, mine, unknown, other):
            assert kept.is_dir(), kept
    finally:
        live.kill()
        live.wait()


def test_staging_removes_stale_folders_and_names_its_own_with_its_pid(tmp_path):
    out = tmp_path / "m"
    stale = tmp_path / f".m.tmp-{dead_pid()}-abcd1234"
    stale.mkdir()
    with artifact.staging(out, force=False) as tmp:
        assert not stale.exists()
        assert tmp.name.startswith(f".m.tmp-{os.getpid()}-")
        (tmp / "manifest.json").write_text("{}")
    assert (out / "manifest.json").is_file()
    assert not list(tmp_path.glob(".m.tmp-*"))


def test_an_old_folder_is_kept_when_the_swap_was_cut_short(tmp_path):
    """Killed between putting the old artifact aside and the new one in place: the old one is then the
    only artifact, and stays."""
    out = tmp_path / "m"
    old = tmp_path / f".m.old-{dead_pid()}"
    old.mkdir()
    assert artifact.remove_stale(out) == []
    assert old.is_dir()
