"""The C++ compilers that link model libraries: the host's, Debian's aarch64 cross compiler, the NDK's clang++.

Lookup order for each: an environment variable, then PATH, then known install places.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from tvmgen.core.errors import ToolMissingError
from tvmgen.core.toolchains.seam import Tool, env_dir


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
                "tvmgen doctor --install (or install the NDK: sdkmanager 'ndk;27.2.12479018', and set ANDROID_NDK_HOME); "
                "without it, `tvmgen compile MODEL --objects-only` writes an object archive and the command that "
                "links it later",
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
