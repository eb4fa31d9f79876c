"""The CLI in a process of its own without paying Python's and TVM's start each time.

Each `python -m tvmgen ...` of the suite would start a Python and import TVM, ONNX and tvmgen (about 1.5 s of
CPU), several hundred times a run. Here one process per pytest worker imports them once and forks a child for
each command: the child takes the command's environment, working directory and arguments, writes to its own
stdout and stderr, and exits with the CLI's own exit code, as `python -m tvmgen` would; a crash or a timeout
ends only the child.

A command whose environment differs from the forking process's in something read when a library is loaded
(the dynamic linker's paths, Python's, TVM's and the math libraries' settings, the GLSL printer's switches),
or which wants PyTorch (`tvmgen.cli.wants_torch`), runs as a plain `python -m tvmgen` instead, and so does
every command when TVMGEN_TEST_CLI_FORKS=0.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TVMGEN = [sys.executable, "-m", "tvmgen"]  # the command a plain run starts (conftest.TVMGEN)

# what the forking process has already read from its environment when it loaded its libraries: a command
# that differs here runs in a plain new Python
LOAD_TIME = ("LD_", "PYTHON", "TVM_", "OMP_", "OPENBLAS_", "MKL_", "TVMGEN_GLSL_", "TF_", "NO_COLOR", "FORCE_COLOR")

# The forking process: reads one JSON request a line from the pipe argv[1] names, forks, answers on argv[2]'s
# with the child's pid and then its exit status.
FORKING_PROCESS = r"""
import json, os, sys
requests, answers = os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w")
import tvmgen
tvmgen.load_tvm_without_torch()
import numpy, onnx, onnxslim, tvm
from tvm import relax
import tvmgen.cli
from tvmgen.core import log

def child(req):
    for fd, path in ((0, os.devnull), (1, req["stdout"]), (2, req["stderr"])):
        f = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_TRUNC | os.O_CREAT)
        os.dup2(f, fd)
        os.close(f)
    requests.close()
    answers.close()
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [MAIN, *req["argv"]]
    sys.modules["__main__"].__package__ = "tvmgen"  # as `python -m tvmgen`: click's usage says so
    log.console.__init__(stderr=True, highlight=False, soft_wrap=True)  # the width and colours of this env
    code = 0
    try:
        tvmgen.cli.main()
    except SystemExit as e:  # as Python's own exit: None is 0, a message is printed and is 1
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)

MAIN = os.path.join(os.path.dirname(tvmgen.__file__), "__main__.py")
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req)
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.flush()
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
    answers.flush()
"""


class _Server:
    """One forking process (per pytest worker), started at the first command."""

    def __init__(self):
        self.env = dict(os.environ)
        req_r, self._req_w = os.pipe()
        self._ans_r, ans_w = os.pipe()
        self._pending = b""  # answer bytes read but not yet taken (a line at a time)
        # the forking process's own output (what it prints if it cannot start), kept for the error message
        self.log = tempfile.NamedTemporaryFile(prefix="tvmgen-cli-forks-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKING_PROCESS, str(req_r), str(ans_w)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            pass_fds=(req_r, ans_w),
            env=self.env,
        )
        os.close(req_r)
        os.close(ans_w)
        atexit.register(self.close)

    def close(self) -> None:
        """The forking process ends at the end of its requests; its log goes with it."""
        os.close(self._req_w)
        os.close(self._ans_r)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a child that never ended (its command was killed on a timeout)
            self.proc.kill()
        self.log.close()
        os.unlink(self.log.name)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _answer(self, timeout: float | None = None) -> dict | None:
        """The next answer, or None when none came within ``timeout`` seconds. The pipe is read unbuffered: a
        buffered reader may hold both of a quick command's answers while select() waits on the empty pipe."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._ans_r], [], [], wait)[0]:
                return None
            chunk = os.read(self._ans_r, 4096)
            if not chunk:
                raise RuntimeError(f"the CLI's forking process ended: {Path(self.log.name).read_text()[-2000:]}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, argv: list[str], env: dict, cwd: Path, timeout: float | None) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="tvmgen-cli-") as d:
            out, err = Path(d) / "stdout", Path(d) / "stderr"
            req = {"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
            os.write(self._req_w, (json.dumps(req) + "\n").encode())
            pid = self._answer()["pid"]
            done = self._answer(timeout)
            timed_out = done is None
            if timed_out:
                os.kill(pid, signal.SIGKILL)  # not yet reaped: the forking process answers once it is
                done = self._answer()
            status = done["status"]
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        cmd = [*TVMGEN, *argv]
        if timed_out:
            raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(cmd, status, stdout, stderr)


_server: _Server | None = None


def _forkable(argv: list[str], env: dict) -> bool:
    if os.environ.get("TVMGEN_TEST_CLI_FORKS", "1") == "0":
        return False
    from tvmgen.cli import wants_torch

    if wants_torch(argv):
        return False
    base = _server.env if _server is not None else os.environ
    keys = {k for k in (*env, *base) if k.startswith(LOAD_TIME)}
    return all(env.get(k) == base.get(k) for k in keys)


def run(args, env: dict, cwd: Path | str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`python -m tvmgen ARGS` with exactly the environment ``env``, in ``cwd`` (default: this process's),
    its output captured as text: forked from this worker's forking process where it can be."""
    global _server
    argv = [str(a) for a in args]
    cwd = Path(cwd) if cwd else Path.cwd()
    if _forkable(argv, env):
        if _server is None or not _server.alive():
            _server = _Server()
        return _server.run(argv, env, cwd, timeout)
    return subprocess.run([*TVMGEN, *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
