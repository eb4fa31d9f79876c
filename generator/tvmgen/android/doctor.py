"""`tvmgen doctor`: which tools are here, their versions, and whether an APK can be built.

An APK needs the JDK, Gradle (at least the version the templates name), the Android SDK
(platform + build-tools), the NDK, a TVM source tree (the app's Gradle build compiles the TVM
runtime from it) and the build tools apksigner, zipalign and aapt. Everything else (CMake, adb,
qemu, the cross compiler, OpenCL, Xcode) is reported but does not decide the exit code.
Each row says where the tool came from: yours (an environment variable, PATH, a known place)
or tvmgen's download (`tvmgen doctor --install`, android.install).
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import asdict
from pathlib import Path

from tvmgen.android import adb as adb_mod
from tvmgen.android import downloads, tools
from tvmgen.core import fetch, toolchains
from tvmgen.core.toolchains import Check, check_tool

TVM_CLONE = (
    f"git clone --recursive --branch {downloads.TVM_TAG} https://github.com/apache/tvm && "
    "export TVM_SOURCE_DIR=$PWD/tvm (or: tvmgen doctor --install)"
)


_ENV_VARS = ("JAVA_HOME", "GRADLE_HOME", "TVM_NDK_CC", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", *tools.SDK_ENV_VARS)


def _tool(name: str, tool, required: bool, version=None, usable=None) -> Check:
    """``check_tool`` with where an Android tool came from (your SDK, PATH, tvmgen's download)."""
    return check_tool(name, tool, required, version, usable, origin=lambda path: downloads.origin(path, _ENV_VARS))


def _sdk_usable(sdk: tools.AndroidSdk):
    def check() -> str:
        sdk.require()
        return f"platforms: {', '.join(map(str, sdk.platforms()))}; build-tools: {', '.join(sdk.build_tools())}"

    return check


def _devices(adb: tools.Adb):
    def check() -> str:
        found = adb_mod.devices(adb)
        if not found:
            return "no device attached"
        return "; ".join(f"{d.name}: {d.state}" for d in found)

    return check


def cmake() -> Check:
    """The CMake the app's native build asks for (externalNativeBuild version), in the SDK in use."""
    name = f"CMake {downloads.CMAKE_VERSION} (SDK)"
    root = tools.sdk_root()
    exe = root / "cmake" / downloads.CMAKE_VERSION / "bin" / "cmake" if root else None
    if exe is None or not exe.is_file():
        return Check(
            name,
            False,
            False,
            detail=f"no cmake/{downloads.CMAKE_VERSION} in the Android SDK" + (f" at {root}" if root else ""),
            fix=f"tvmgen doctor --install (or sdkmanager 'cmake;{downloads.CMAKE_VERSION}'); without it the "
            "Android Gradle Plugin tries to install it during the build",
        )
    return Check(name, True, True, downloads.CMAKE_VERSION, str(exe), source=downloads.origin(exe, _ENV_VARS))


def tvm_source() -> Check:
    from tvmgen.android.install import tvm_tree_problem

    root = downloads.tvm_source_dir()
    if root is None:
        return Check(
            "TVM source tree",
            False,
            False,
            detail=f"TVM_SOURCE_DIR is not set and tvmgen has no clone at {downloads.tvm_dir()}",
            fix=TVM_CLONE,
            required=True,
        )
    source = downloads.origin(root, ("TVM_SOURCE_DIR",))
    where = f"TVM_SOURCE_DIR={root}" if os.environ.get("TVM_SOURCE_DIR") else str(root)
    problem = tvm_tree_problem(root)
    if problem.startswith("no "):
        return Check(
            "TVM source tree",
            False,
            False,
            path=str(root),
            detail=f"{where} is not a TVM source tree ({problem})",
            fix=TVM_CLONE,
            required=True,
            source=source,
        )
    version = ""
    libinfo = root / "python" / "tvm" / "libinfo.py"
    if libinfo.is_file():
        m = re.search(r"__version__\s*=\s*\"([^\"]+)\"", libinfo.read_text())
        version = m.group(1) if m else ""
    if problem:
        return Check(
            "TVM source tree",
            True,
            False,
            version,
            str(root),
            problem,
            f"cd {root} && git submodule update --init --recursive",
            required=True,
            source=source,
        )
    return Check("TVM source tree", True, True, version, str(root), required=True, source=source)


def opencl() -> Check:
    icds = sorted(Path("/etc/OpenCL/vendors").glob("*.icd"))
    try:
        ctypes.CDLL("libOpenCL.so.1")
        loadable = True
    except OSError:
        loadable = False
    if icds or loadable:
        detail = ", ".join(p.name for p in icds) or "libOpenCL.so.1 loads (no ICD file)"
        return Check(
            "OpenCL ICD",
            True,
            bool(icds),
            path=str(icds[0]) if icds else "libOpenCL.so.1",
            detail=detail,
            fix="" if icds else "install a vendor ICD, e.g. apt-get install pocl-opencl-icd",
        )
    return Check(
        "OpenCL ICD",
        False,
        False,
        detail="no ICD under /etc/OpenCL/vendors and libOpenCL.so.1 does not load",
        fix="apt-get install ocl-icd-libopencl1 pocl-opencl-icd (host OpenCL; phones bring their own)",
    )


def checks(runner: tools.Runner | None = None) -> list[Check]:
    sdk = tools.AndroidSdk(runner)
    ndk = toolchains.AndroidNdk()
    adb = tools.Adb(runner)
    cross = toolchains.CrossGxxAarch64()
    gradle = tools.Gradle(runner=runner)
    result = [
        _tool("JDK", tools.Jdk(runner), True),
        _tool("Gradle", gradle, True, usable=gradle.require),
        _tool("Android SDK", sdk, True, usable=_sdk_usable(sdk)),
        _tool("Android NDK", ndk, True, version=lambda: tools.ndk_version(ndk)),
        cmake(),
        tvm_source(),
        _tool("apksigner", tools.Apksigner(runner), True),
        _tool("zipalign", tools.Zipalign(runner), True),
        _tool("aapt", tools.Aapt(runner), True),
        _tool("adb", adb, False, usable=_devices(adb)),
        _tool("qemu-aarch64", toolchains.Qemu(runner), False),
        _tool(
            "aarch64 cross g++",
            cross,
            False,
            version=lambda: (runner or tools.run)([str(cross.verify()), "-dumpversion"]).stdout.strip(),
        ),
        opencl(),
    ]
    return result


def ready(found: list[Check]) -> bool:
    """Whether `tvmgen app` can build an APK: every required check usable."""
    return all(c.usable for c in found if c.required)


def as_json(found: list[Check]) -> dict:
    return {"ready": ready(found), "checks": [asdict(c) for c in found]}


def table(found: list[Check]) -> str:
    """A plain-text table (it also reads well in logs and CI output), then the fix for each problem."""
    rows = [("tool", "found", "version", "from", "usable", "needed for APK", "where / what")]
    for c in found:
        rows.append(
            (
                c.name,
                "yes" if c.found else "no",
                c.version or "-",
                c.source or "-",
                "yes" if c.usable else "no",
                "yes" if c.required else "",
                c.detail if (c.detail and not c.usable) else (c.path + (f" ({c.detail})" if c.detail else "")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:6], widths)) + "  " + r[6] for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 12)
    fixes = [f"  {c.name}: {c.fix}" for c in found if c.fix and not c.usable]
    if fixes:
        lines += ["", "fixes:", *fixes]
        if any(c.required and not c.usable for c in found):
            lines += [
                "",
                f"`tvmgen doctor --install` downloads what the APK build lacks into {fetch.data_dir()} "
                "(your own ANDROID_HOME, ANDROID_NDK_HOME and TVM_SOURCE_DIR are kept)",
            ]
    lines += [
        "",
        "ready to build an APK: " + ("yes" if ready(found) else "no (every 'needed for APK' row must be usable)"),
    ]
    return "\n".join(lines)
