"""The one seam through which tvmgen runs external programs.

``run`` starts a program, waits for it (with an optional time limit), captures its output and logs
both; ``spawn`` starts a long-running server detached from tvmgen; ``pipe_worker`` starts a worker that
talks to tvmgen over pipes; ``which`` finds a program on PATH.
Failures become tvmgen's errors naming the tool and the fix: a program that cannot be started is a
ToolMissingError, one past its time limit a ToolTimeoutError, a non-zero exit (when checked) a
CompileError with the tail of the tool's stderr. ``Tool`` finds one program and runs it through ``run``.
Nothing outside this package imports ``subprocess``: tests/core/test_toolchains.py enforces it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from subprocess import CompletedProcess, Popen

from tvmgen.core.errors import CompileError, ToolMissingError, ToolTimeoutError

__all__ = ["CompletedProcess", "Popen", "Runner", "Tool", "env_dir", "pipe_worker", "run", "spawn", "which"]

log = logging.getLogger("tvmgen.toolchains")

# What a Tool runs its program with: run's signature without check (callers read the exit code); tests
# pass a fake that answers with recorded output.
Runner = Callable[..., CompletedProcess]

# How much of a failing tool's stderr the error message carries (the log file has all of it).
STDERR_TAIL = 2000


def which(command: str, path: str | None = None) -> Path | None:
    """``command`` found on PATH (or on ``path``), None when it is not there."""
    found = shutil.which(command, path=path)
    return Path(found) if found else None


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _not_started(e: OSError, argv0: str, cwd) -> bool:
    """Whether ``e`` says the program itself could not be started (rather than, say, a missing cwd)."""
    if cwd is not None and e.filename is not None and str(e.filename) == str(cwd):
        return False
    return e.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR)


def run(
    argv: Sequence[str | os.PathLike[str]],
    cwd: str | Path | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    tool: str | None = None,
    fix: str | None = None,
) -> CompletedProcess:
    """Run ``argv`` to completion with its output captured as text, logging the command and the output.

    ``env`` adds variables for this child only; their values are never logged (secrets travel this way,
    never in argv). ``input`` is written to the child's stdin (answers to its prompts). ``tool`` names the
    program in errors (default: argv[0]'s file name) and ``fix`` says how to install it. A program that
    cannot be started raises ToolMissingError; one still running after ``timeout`` seconds is killed and
    raises ToolTimeoutError; with ``check`` a non-zero exit raises CompileError with its stderr's tail.
    """
    args = list(map(str, argv))
    name = tool or Path(args[0]).name
    log.debug("run: %s (cwd=%s)", " ".join(args), cwd or os.getcwd())
    if env:
        log.debug("environment for %s: %s (values not logged)", Path(args[0]).name, ", ".join(sorted(env)))
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            capture_output=True,
            text=True,
            input=input,
            env={**os.environ, **env} if env else None,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        stderr = _text(e.stderr).strip()
        log.debug("%s timed out after %s s; stdout: %s; stderr: %s", name, timeout, _text(e.stdout).rstrip(), stderr)
        raise ToolTimeoutError(
            f"{name} did not finish within {timeout:g} s and was stopped: {' '.join(args)}"
            + (f"\n{stderr[-STDERR_TAIL:]}" if stderr else ""),
            "see the log file for the full command; run it by hand to see where it stops",
        ) from e
    except OSError as e:
        if not _not_started(e, args[0], cwd):
            raise
        raise ToolMissingError(
            f"{name} could not be started ({args[0]}: {e.strerror})",
            fix or f"install {name}, or put it on PATH",
        ) from e
    if proc.stdout:
        log.debug("stdout: %s", proc.stdout.rstrip())
    if proc.stderr:
        log.debug("stderr: %s", proc.stderr.rstrip())
    if check and proc.returncode != 0:
        raise CompileError(
            f"{name} failed with exit code {proc.returncode}:\n{proc.stderr.strip()[-STDERR_TAIL:]}",
            "see the log file for the full command and output",
        )
    return proc


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    log_path: str | Path,
    env: dict[str, str] | None = None,
    tool: str | None = None,
    fix: str | None = None,
) -> Popen:
    """Start a long-running program (a server) detached from tvmgen: its own session (so stopping its
    process group stops whatever it forks), stdin closed, stdout and stderr into ``log_path``."""
    args = list(map(str, argv))
    log.debug("start: %s (output to %s)", " ".join(args), log_path)
    with open(log_path, "w") as log_file:
        try:
            return Popen(
                args,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        except OSError as e:
            if not _not_started(e, args[0], None):
                raise
            name = tool or Path(args[0]).name
            raise ToolMissingError(
                f"{name} could not be started ({args[0]}: {e.strerror})", fix or f"install {name}, or put it on PATH"
            ) from e


def pipe_worker(argv: Sequence[str | os.PathLike[str]], fds: Sequence[int], stdout=None, stderr=None) -> Popen:
    """Start a worker process that reads and writes the pipe ends ``fds`` (passed to it open, their
    numbers in ``argv``); it lives as long as its parent uses it (a process pool's worker)."""
    args = list(map(str, argv))
    log.debug("start worker: %s", " ".join(args))
    return Popen(args, pass_fds=tuple(fds), stdout=stdout, stderr=stderr)


def env_dir(variables, what: str) -> Path | None:
    """The directory named by the first of ``variables`` that is set; None when none is. A variable that
    names no directory is an error saying to point it at ``what`` or unset it."""
    for var in variables:
        if os.environ.get(var):
            root = Path(os.environ[var])
            if not root.is_dir():
                raise ToolMissingError(f"{var}={root} is not a directory", f"point {var} at {what}, or unset it")
            return root
    return None


class Tool:
    """One external program: found once (``verify()``, cached), then run through the seam.

    Lookup: the ``env_var`` naming the executable, then ``commands`` on PATH; subclasses add places.
    ``install`` is the command that installs it (the fix a ToolMissingError names), ``missing`` the
    message when it is not found, ``timeout`` the time limit of each run (None: none), and
    ``version_argv``/``version_re`` how ``version()`` asks for and reads its version. ``runner`` replaces
    the seam for this tool's runs (tests pass recorded output this way).
    """

    name = "tool"
    env_var: str | None = None
    commands: tuple[str, ...] = ()
    install = ""
    missing = ""
    timeout: float | None = None
    version_argv: tuple[str, ...] = ()
    version_re = r"(\S+)"

    def __init__(self, runner: Runner | None = None):
        self._path: Path | None = None
        self._version: str | None = None
        self.runner: Runner = runner or self._run

    def verify(self) -> Path:
        if self._path is None:
            self._path = self._find()
            log.debug("%s: %s", self.name, self._path)
        return self._path

    def available(self) -> bool:
        try:
            self.verify()
            return True
        except ToolMissingError:
            return False

    def fix(self) -> str:
        """How to get the tool: its install command, and the variable that names it instead."""
        return f"install it: {self.install}" + (f" (or set {self.env_var})" if self.env_var else "")

    def _find(self) -> Path:
        found = self._from_env_or_path(*self.commands)
        if found is None:
            where = f"${self.env_var}, " if self.env_var else ""
            raise ToolMissingError(self.missing or f"{self.name} not found (looked in {where}PATH)", self.fix())
        return found

    def _from_env_or_path(self, *commands: str) -> Path | None:
        if self.env_var and os.environ.get(self.env_var):
            p = Path(os.environ[self.env_var])
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise ToolMissingError(
                    f"{self.env_var}={p} is not an executable file",
                    f"point {self.env_var} at the {self.name} executable, or unset it",
                )
            return p
        for c in commands:
            found = which(c)
            if found:
                return found
        return None

    def _run(self, argv, cwd=None, env=None) -> CompletedProcess:
        return run(argv, cwd=cwd, env=env, check=False, timeout=self.timeout, tool=self.name, fix=self.fix())

    def __call__(self, *args, cwd=None, env=None) -> CompletedProcess:
        """Run the tool with ``args`` through its runner; the caller reads the exit code and output."""
        return self.runner([str(self.verify()), *map(str, args)], cwd=cwd, env=env)

    def run(
        self,
        *args,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> CompletedProcess:
        """Run the tool with ``args`` through the seam; with ``check`` a non-zero exit raises CompileError."""
        return run(
            [self.verify(), *args],
            cwd=cwd,
            check=check,
            env=env,
            input=input,
            timeout=timeout if timeout is not None else self.timeout,
            tool=self.name,
            fix=self.fix(),
        )

    def version(self) -> str | None:
        """The tool's version, or None when it does not say."""
        if self._version is None and self.version_argv:
            out = self(*self.version_argv)
            m = re.search(self.version_re, out.stdout + out.stderr)
            self._version = m.group(1) if m else None
        return self._version
