"""Every external program tvmgen runs, one class each, all run through one seam (``seam.run``).

``verify()`` finds a tool or says exactly how to get it. Lookup order for every tool: an environment
variable, then PATH, then known install places. Modules: ``seam`` (run, spawn, pipe_worker, which, the Tool base),
``compilers`` (host, aarch64 cross and NDK C++ compilers), ``host`` (cmake, qemu-aarch64, git),
``spirv`` (glslang, spirv-val), ``xcode`` (xcrun and the iOS app tools), ``doctor`` (`tvmgen doctor` rows).
The Android SDK's tools (aapt, zipalign, apksigner, adb, the JDK, Gradle) are Tools in android/tools.py:
their lookup and install hints use the SDK versions android/downloads.py pins, above this layer.
"""

from tvmgen.core.toolchains.compilers import (
    ANDROID_CLANG_PREFIX,
    ANDROID_LINK_FLAGS,
    ANDROID_MIN_API,
    NDK_ENV_VARS,
    AndroidNdk,
    CrossGxxAarch64,
    HostCxx,
)
from tvmgen.core.toolchains.doctor import Check, check_tool
from tvmgen.core.toolchains.host import CMake, Git, Qemu
from tvmgen.core.toolchains.seam import (
    CompletedProcess,
    Popen,
    Runner,
    Tool,
    env_dir,
    pipe_worker,
    run,
    spawn,
    which,
)
from tvmgen.core.toolchains.spirv import Glslang, SpirvVal
from tvmgen.core.toolchains.xcode import Xcode

__all__ = [
    "ANDROID_CLANG_PREFIX",
    "ANDROID_LINK_FLAGS",
    "ANDROID_MIN_API",
    "NDK_ENV_VARS",
    "AndroidNdk",
    "CMake",
    "Check",
    "CompletedProcess",
    "CrossGxxAarch64",
    "Git",
    "Glslang",
    "HostCxx",
    "Popen",
    "Qemu",
    "Runner",
    "SpirvVal",
    "Tool",
    "Xcode",
    "check_tool",
    "env_dir",
    "pipe_worker",
    "run",
    "spawn",
    "which",
]
