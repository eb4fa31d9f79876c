"""External tools, one class each. ``verify()`` finds the tool or says exactly how to get it.

Lookup order for every tool: an environment variable, then PATH, then known install places.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tvmgen.core.errors import ToolMissingError, TvmgenError

log = logging.getLogger("tvmgen.toolchains")


def run(
    argv: Sequence[str | os.PathLike[str]],
    cwd: str | Path | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """The one seam for subprocess calls: logs the command and its output.

    ``env`` adds variables for this child only; their values are never logged (secrets travel
    this way, never in argv). ``input`` is written to the child's stdin (answers to its prompts).
    """
    log.debug("run: %s (cwd=%s)", " ".join(map(str, argv)), cwd or os.getcwd())
    if env:
        log.debug("environment for %s: %s (values not logged)", Path(str(argv[0])).name, ", ".join(sorted(env)))
    proc = subprocess.run(
        list(map(str, argv)),
        cwd=cwd,
        capture_output=True,
        text=True,
        input=input,
        env={**os.environ, **env} if env else None,
    )
    if proc.stdout:
        log.debug("stdout: %s", proc.stdout.rstrip())
    if proc.stderr:
        log.debug("stderr: %s", proc.stderr.rstrip())
    if check and proc.returncode != 0:
        from tvmgen.core.errors import CompileError

        raise CompileError(
            f"{Path(argv[0]).name} failed with exit code {proc.returncode}:\n{proc.stderr.strip()[-2000:]}",
            "see the log file for the full command and output",
        )
    return proc


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
    """A found tool: its path, cached after the first verify()."""

    name = "tool"
    env_var: str | None = None

    def __init__(self):
        self._path: Path | None = None

    def verify(self) -> Path:
        if self._path is None:
            self._path = self._find()
            log.debug("%s: %s", self.name, self._path)
        return self._path

    def _find(self) -> Path:  # pragma: no cover - overridden
        raise NotImplementedError

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
            found = shutil.which(c)
            if found:
                return Path(found)
        return None


class HostCxx(Tool):
    """The host C++ compiler TVM links model.so with."""

    name = "host C++ compiler"
    env_var = "CXX"

    def _find(self) -> Path:
        found = self._from_env_or_path("g++", "c++", "clang++")
        if found is None:
            raise ToolMissingError(
                "no host C++ compiler found (looked for $CXX, g++, c++, clang++ on PATH)",
                "install one: apt-get install g++",
            )
        return found


class CrossGxxAarch64(Tool):
    """Debian's aarch64 Linux cross compiler."""

    name = "aarch64-linux-gnu-g++"
    env_var = "TVMGEN_AARCH64_CXX"

    def _find(self) -> Path:
        found = self._from_env_or_path("aarch64-linux-gnu-g++")
        if found is None:
            raise ToolMissingError(
                "aarch64-linux-gnu-g++ not found: it links libraries for linux-aarch64",
                "install it: apt-get install g++-aarch64-linux-gnu (or set TVMGEN_AARCH64_CXX)",
            )
        return found


NDK_ENV_VARS = ("TVM_NDK_CC", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "ANDROID_HOME")

# clang's target prefix for each Android ABI; the API level is the app template's minSdk.
ANDROID_CLANG_PREFIX = {
    "arm64-v8a": "aarch64-linux-android",
    "armeabi-v7a": "armv7a-linux-androideabi",
    "x86_64": "x86_64-linux-android",
}
ANDROID_MIN_API = 24
# 16 KB pages (Android 15+, required by Google Play for 64-bit libraries): every LOAD segment aligned to
# 16 KB. NDK r27's lld aligns to 4 KB unless told (r28 and later default to 16 KB); the flag is harmless
# for 32-bit ABIs, which keep 4 KB pages. Checked on the result by core/binfmt.page_report.
ANDROID_LINK_FLAGS = ["-Wl,-z,max-page-size=16384"]


class AndroidNdk(Tool):
    """The NDK's clang++ for one ABI.

    Found from TVM_NDK_CC (a compiler path, as TVM itself uses), else an NDK root from
    ANDROID_NDK_HOME / ANDROID_NDK_ROOT, else the newest $ANDROID_HOME/ndk/<version>.
    """

    name = "Android NDK clang++"

    def __init__(self, abi: str = "arm64-v8a"):
        super().__init__()
        self.abi = abi

    def ndk_root(self) -> Path | None:
        root = env_dir(("ANDROID_NDK_HOME", "ANDROID_NDK_ROOT"), "an unpacked Android NDK (r25 or newer)")
        if root is not None:
            return root
        from tvmgen.core.fetch import sdk_dir

        # the SDK's ndk/<version> folders: the environment's SDK, else the one `tvmgen doctor --install` made
        sdk = os.environ.get("ANDROID_HOME") or os.environ.get("ANDROID_SDK_ROOT") or sdk_dir()
        if (Path(sdk) / "ndk").is_dir():
            versions = sorted(
                (p for p in (Path(sdk) / "ndk").iterdir() if p.is_dir()),
                key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in p.name.split(".")),
            )
            if versions:
                return versions[-1]
        return None

    def _find(self) -> Path:
        if os.environ.get("TVM_NDK_CC"):
            cc = Path(os.environ["TVM_NDK_CC"])
            if not cc.is_file():
                raise ToolMissingError(f"TVM_NDK_CC={cc} does not exist", "point TVM_NDK_CC at the NDK's clang++")
            return cc
        root = self.ndk_root()
        if root is None:
            raise ToolMissingError(
                "Android NDK not found: none of " + ", ".join(NDK_ENV_VARS) + " is set, and tvmgen's SDK has none",
                "tvmgen doctor --install (or install the NDK: sdkmanager 'ndk;27.2.12479018', and set ANDROID_NDK_HOME), "
                "or use --objects-only to write an object archive that the app build links later",
            )
        host_tag = {"Linux": "linux-x86_64", "Darwin": "darwin-x86_64", "Windows": "windows-x86_64"}[platform.system()]
        prefix = ANDROID_CLANG_PREFIX[self.abi]
        cc = root / "toolchains" / "llvm" / "prebuilt" / host_tag / "bin" / f"{prefix}{ANDROID_MIN_API}-clang++"
        if not cc.is_file():
            raise ToolMissingError(
                f"the NDK at {root} has no {cc.name} (looked in {cc.parent})",
                "use NDK r25 or newer, or set TVM_NDK_CC to the clang++ to use",
            )
        return cc


class Xcode(Tool):
    """xcrun, for the static library iOS apps link. Only on macOS."""

    name = "xcrun (Xcode command line tools)"

    def _find(self) -> Path:
        found = shutil.which("xcrun")
        if platform.system() != "Darwin" or found is None:
            raise ToolMissingError(
                "Xcode is not available on this machine (xcrun not found)",
                "run the printed libtool command on a Mac with Xcode installed",
            )
        return Path(found)

    def available(self) -> bool:
        try:
            self.verify()
            return True
        except ToolMissingError:
            return False


# ------------------------------------------------------------------ `tvmgen doctor` rows


@dataclass
class Check:
    """One row of `tvmgen doctor`: a tool, whether it was found and works, and the fix."""

    name: str
    found: bool
    usable: bool
    version: str = ""
    path: str = ""
    detail: str = ""
    fix: str = ""
    required: bool = False  # needed by `tvmgen app` to build an APK
    source: str = ""  # where it came from: "yours ($ANDROID_HOME)", "yours (PATH)", "tvmgen download", ...


def check_tool(name: str, tool, required: bool, version=None, usable=None, origin=None) -> Check:
    """Run verify() (and the version/usable probes); a ToolMissingError becomes a failed check with its fix.
    ``origin(path)`` says where the tool came from (the doctor's "from" column)."""
    try:
        path = tool.verify()
    except TvmgenError as e:
        return Check(name, False, False, fix=e.hint or "", detail=e.message, required=required)
    source = origin(path) if origin else ""
    ver = ""
    try:
        ver = (version or tool.version)() or ""
        detail = usable() if usable else ""
    except TvmgenError as e:
        return Check(name, True, False, ver, str(path), e.message, e.hint or "", required, source)
    return Check(name, True, True, ver, str(path), detail or "", required=required, source=source)
