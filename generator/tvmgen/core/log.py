"""Logging: a log file for every run, console verbosity from -v/-vv, progress for long steps."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from datetime import datetime
from pathlib import Path

from rich.console import Console

LOGGER_NAME = "tvmgen"
log = logging.getLogger(LOGGER_NAME)

# Everything user-facing goes to stderr so stdout stays clean for --json output.
console = Console(stderr=True, highlight=False, soft_wrap=True)


def log_dir() -> Path:
    base = os.environ.get("TVMGEN_LOG_DIR")
    if base:
        return Path(base)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "tvmgen" / "logs"


def setup(verbosity: int, command: str) -> Path:
    """Send DEBUG to a fresh log file and INFO/DEBUG to the console per verbosity."""
    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = directory / f"{stamp}-{command}-{os.getpid()}.log"

    root = logging.getLogger(LOGGER_NAME)
    root.handlers.clear()
    root.setLevel(logging.DEBUG)
    root.propagate = False

    file_handler = logging.FileHandler(path, encoding="utf-8")
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    file_handler.setLevel(logging.DEBUG)
    root.addHandler(file_handler)

    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    stream.setLevel(level)
    root.addHandler(stream)
    to_file_only("py.warnings")
    log.debug("tvmgen %s: argv=%s", command, sys.argv)
    return path


def to_file_only(*names: str) -> None:
    """Send other libraries' loggers (TensorFlow, torch) to tvmgen's log file, not the console.

    Call it after importing the library: some install their own console handler on import.
    """
    files = [h for h in logging.getLogger(LOGGER_NAME).handlers if isinstance(h, logging.FileHandler)]
    for name in names:
        other = logging.getLogger(name)
        other.handlers[:] = files
        other.propagate = False


@contextlib.contextmanager
def step(title: str):
    """Show a spinner with elapsed time while a step runs; print its duration when done.

    Every step is logged, so the log file shows where time went.
    """
    log.info("%s ...", title)
    start = time.perf_counter()
    if console.is_terminal:
        with console.status(f"{title} ...", spinner="dots"):
            yield
    else:
        console.print(f"[bold]•[/] {title} ...")
        yield
    elapsed = time.perf_counter() - start
    console.print(f"[green]✓[/] {title} [dim]({elapsed:.1f}s)[/]")
    log.info("%s done in %.2fs", title, elapsed)


# Lines TVM 0.27's C++ runtime prints for every texture-scoped constant of an executable it saves or
# loads (--gpu-family adreno): hundreds per model, and nothing for a user to act on.
TVM_SCOPE_NOISE = (b"Scope Saving:", b"Scope Loaded:")


@contextlib.contextmanager
def filtered_stderr(drop=TVM_SCOPE_NOISE):
    """Drop the lines of file descriptor 2 (where C++ libraries write) that contain any of ``drop``
    while the block runs; everything else passes through, a line without its newline after 50 ms."""
    import select
    import threading

    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        pending = b""
        while True:
            ready, _, _ = select.select([read_end], [], [], 0.05)
            if not ready:
                if pending and not any(d in pending for d in drop):
                    os.write(saved, pending)
                    pending = b""
                continue
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not any(d in line for d in drop))
            if out:
                os.write(saved, out)
        if pending and not any(d in pending for d in drop):
            os.write(saved, pending)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer closes: the pump reads to the end and stops
        thread.join(timeout=5)
        os.close(read_end)
        os.close(saved)
