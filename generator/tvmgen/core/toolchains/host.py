"""Host programs tvmgen runs besides the compilers: CMake (builds the device runtime), qemu-aarch64 (runs
aarch64 code here: ``--check``, the emulated RPC device) and git (clones the TVM source)."""

from __future__ import annotations

from tvmgen.core.toolchains.seam import Tool


class CMake(Tool):
    """CMake on PATH: configures and builds the runtime in jni/."""

    name = "cmake"
    commands = ("cmake",)
    install = "apt-get install cmake"
    missing = "cmake not found: it builds the device runtime"
    version_argv = ("--version",)
    version_re = r"cmake version (\S+)"


class Qemu(Tool):
    """qemu-aarch64: runs aarch64 binaries here (the emulated phone CPU)."""

    name = "qemu-aarch64"
    env_var = "TVMGEN_QEMU"
    commands = ("qemu-aarch64",)
    install = "apt-get install qemu-user"
    version_argv = ("--version",)
    version_re = r"version (\S+)"


class Git(Tool):
    """git: clones the TVM source tree the Android app build compiles."""

    name = "git"
    commands = ("git",)
    install = "apt-get install git (or brew install git)"
    missing = "git is not installed: tvmgen clones the TVM source with it"
    version_argv = ("--version",)
    version_re = r"git version (\S+)"
