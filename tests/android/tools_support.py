"""What the Android toolchain tests share: a fake ``tools.run`` answering with recorded adb output
(tests/recorded/adb/), a tool object already found, and the skip (a failure under CI) when Debian's
Android tools are missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import TESTS, unavailable

RECORDED = TESTS / "recorded" / "adb"


class FakeRunner:
    """Stands in for tools.run: answers each call with the next recorded output, records argv and env."""

    def __init__(self, *answers):
        self.answers = list(answers)  # (recorded file name or literal text, exit code)
        self.calls: list[list[str]] = []
        self.envs: list[dict | None] = []

    def __call__(self, argv, cwd=None, env=None):
        self.calls.append([str(a) for a in argv])
        self.envs.append(env)
        text, rc = self.answers.pop(0)
        path = RECORDED / text
        out = path.read_text() if path.suffix == ".txt" and path.is_file() else text
        # adb 34 prints failures on stderr with exit 1; the code reads both streams
        return subprocess.CompletedProcess(argv, rc, out if rc == 0 else "", out if rc else "")


def fake(tool_cls, runner, path="/sdk/platform-tools/adb"):
    tool = tool_cls(runner)
    tool._path = Path(path)  # found already: these tests are about what is run, not where from
    return tool


def require_tools(*names: str, files: tuple[Path, ...] = ()) -> None:
    """Skip (printing why) when Debian's Android tools are missing; fail under CI, where bootstrap installs them."""
    missing = [n for n in names if not shutil.which(n)] + [str(f) for f in files if not f.is_file()]
    if not missing:
        return
    unavailable(
        f"missing {', '.join(missing)} (scripts/bootstrap.sh installs them: apt-get install aapt zipalign "
        "apksigner adb android-framework-res)"
    )
