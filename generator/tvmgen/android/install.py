"""`tvmgen doctor --install`: fetch what the Android app build lacks into tvmgen's data directory.

The steps, each skipped when what it brings is already here and usable:

1. the Android command-line tools (sdkmanager), downloaded and checked against their SHA-256;
2. the SDK licences, shown and accepted (or accepted by --yes);
3. with sdkmanager: the platform, build-tools, NDK and CMake versions the app templates name;
4. Gradle, the version the templates name (its binary distribution, checked against its SHA-256);
5. the TVM source tree at the tag tvmgen pins (shallow git clone with submodules).

The user's own tools win: an ANDROID_HOME / ANDROID_SDK_ROOT SDK gets the missing packages
(through sdkmanager, as Android Studio would) instead of a second SDK; ANDROID_NDK_HOME skips the
NDK, TVM_SOURCE_DIR the clone, GRADLE_HOME or a recent enough Gradle on PATH the Gradle download.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.android import downloads, tools
from tvmgen.core import fetch, toolchains
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError, ToolMissingError, TvmgenError

log = logging.getLogger("tvmgen.android.install")
console = logs.console

NDK_ENV_VARS = ("ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "TVM_NDK_CC")
# sdkmanager --licenses: "License <id>:", a dashed line, the text, a dashed line, "Accept? (y/N):"
_LICENCE = re.compile(r"License ([\w.-]+):\s*\n-{5,}\n(.*?)\n-{5,}\s*\nAccept\?", re.S)
_ANSWERS = 64  # more than the licences sdkmanager knows


@dataclass
class Plan:
    """What is missing, and where it will go."""

    sdk: Path  # the SDK the packages go into (the user's ANDROID_HOME, or tvmgen's)
    packages: list[str] = field(default_factory=list)  # sdkmanager packages it lacks
    sdkmanager: Path | None = None  # an sdkmanager already here; None: the command-line tools are downloaded
    gradle: bool = False
    tvm: bool = False

    def empty(self) -> bool:
        return not (self.packages or self.gradle or self.tvm)

    def lines(self) -> list[str]:
        out = []
        if self.packages and self.sdkmanager is None:
            item = downloads.cmdline_tools()
            out.append(f"{item.what}: {item.url} -> {fetch.sdk_dir() / 'cmdline-tools' / 'latest'}")
        if self.packages:
            out.append(
                f"with sdkmanager, into {self.sdk}: {', '.join(self.packages)} "
                "(Google's licences are shown first; the NDK alone is about 700 MB)"
            )
        if self.gradle:
            item = downloads.gradle()
            out.append(f"{item.what}: {item.url} -> {downloads.gradle_home()}")
        if self.tvm:
            src = downloads.tvm_source()
            out.append(f"{src.what}: git clone {src.url} -> {downloads.tvm_dir()}")
        return out


def _sdk_env() -> Path | None:
    value = next((os.environ[v] for v in tools.SDK_ENV_VARS if os.environ.get(v)), None)
    return Path(value) if value else None


def missing_packages(sdk: Path) -> list[str]:
    """The sdkmanager packages the app build needs that ``sdk`` lacks (the NDK: unless one is set)."""
    present = {
        f"platforms;android-{downloads.COMPILE_SDK}": sdk
        / "platforms"
        / f"android-{downloads.COMPILE_SDK}"
        / "android.jar",
        f"build-tools;{downloads.BUILD_TOOLS}": sdk / "build-tools" / downloads.BUILD_TOOLS / "apksigner",
        f"ndk;{downloads.NDK_VERSION}": sdk / "ndk" / downloads.NDK_VERSION / "source.properties",
        f"cmake;{downloads.CMAKE_VERSION}": sdk / "cmake" / downloads.CMAKE_VERSION / "bin" / "cmake",
    }
    ndk_set = any(os.environ.get(v) for v in NDK_ENV_VARS)
    return [p for p in downloads.SDK_PACKAGES if not present[p].is_file() and not (p.startswith("ndk;") and ndk_set)]


def sdkmanager_in(sdk: Path) -> Path | None:
    """An sdkmanager from the command-line tools: the SDK's own, else tvmgen's."""
    for root in (sdk, fetch.sdk_dir()):
        candidate = root / "cmdline-tools" / "latest" / "bin" / "sdkmanager"
        if candidate.is_file():
            return candidate
    return None


def gradle_usable() -> bool:
    """Whether a Gradle at least as new as the templates' is here (GRADLE_HOME, tvmgen's, PATH)."""
    gradle = tools.Gradle()
    try:
        gradle.verify()
        version = gradle.version()
    except TvmgenError:
        return False
    if not version:
        return False
    return tools.version_at_least(version, downloads.GRADLE_VERSION)


def make_plan() -> Plan:
    user_sdk = _sdk_env()
    in_use = tools.sdk_root()
    if in_use is not None and not missing_packages(in_use):
        plan = Plan(sdk=in_use)
    else:
        plan = Plan(sdk=user_sdk or fetch.sdk_dir())
        plan.packages = missing_packages(plan.sdk)
        plan.sdkmanager = sdkmanager_in(plan.sdk)
    # GRADLE_HOME is yours and wins (doctor says when it is too old); a Gradle on PATH gives way to tvmgen's
    yours = os.environ.get("GRADLE_HOME") and (Path(os.environ["GRADLE_HOME"]) / "bin" / "gradle").is_file()
    plan.gradle = not yours and not gradle_usable()
    plan.tvm = downloads.tvm_source_dir() is None
    return plan


def install(plan: Plan, yes: bool, interactive: bool) -> None:
    """Carry out ``plan``: each step complete and in place, or an error saying what to do."""
    if plan.packages:
        java_home = tools.Jdk().verify()  # sdkmanager is Java; so is Gradle
        sdkmanager = plan.sdkmanager or _install_cmdline_tools()
        env = {"JAVA_HOME": str(java_home)}
        _accept_licences(sdkmanager, plan.sdk, env, yes, interactive)
        _install_packages(sdkmanager, plan.sdk, plan.packages, env)
    if plan.gradle:
        _install_gradle()
    if plan.tvm:
        _clone_tvm()


def _install_cmdline_tools() -> Path:
    item = downloads.cmdline_tools()
    archive = fetch.fetch(item.url, item.sha256, downloads.downloads_dir() / item.file_name, item.what)
    final = fetch.sdk_dir() / "cmdline-tools" / "latest"
    with logs.step(f"Unpacking the command-line tools into {final}"):
        fetch.unpack_zip(archive, "cmdline-tools", final)
    archive.unlink()
    sdkmanager = final / "bin" / "sdkmanager"
    if not sdkmanager.is_file():
        shutil.rmtree(final)
        raise ToolMissingError(
            f"{item.url} unpacked without bin/sdkmanager: not the command-line tools",
            "check TVMGEN_DOWNLOADS / TVMGEN_DOWNLOAD_MIRROR",
        )
    return sdkmanager


def _accept_licences(sdkmanager: Path, sdk: Path, env: dict, yes: bool, interactive: bool) -> None:
    """Show the licences sdkmanager has not had accepted, and accept them only when the user does."""
    sdk.mkdir(parents=True, exist_ok=True)
    # Answering "y" to "Review licenses?" and "n" to each shows every text and accepts nothing.
    review = toolchains.run(
        [sdkmanager, f"--sdk_root={sdk}", "--licenses"], check=False, env=env, input="y\n" + "n\n" * _ANSWERS
    )
    licences = _LICENCE.findall(review.stdout)
    if not licences:
        if "Accept?" in review.stdout:  # a layout this parser does not know: show it whole
            licences = [("(sdkmanager's licences)", review.stdout)]
        else:
            log.info("every Android SDK licence is already accepted in %s", sdk)
            return
    names = ", ".join(name for name, _ in licences)
    for name, text in licences:
        log.info("licence %s:\n%s", name, text)
    if yes:
        console.print(
            f"[bold]•[/] accepting the Android SDK licences (--yes): {names} (their texts are in the log "
            f"file and, once accepted, in {sdk / 'licenses'})"
        )
    elif interactive:
        import click

        for name, text in licences:
            console.rule(name)
            console.print(text, markup=False, highlight=False)
        console.rule()
        if not click.confirm(f"Accept these licences ({names})?", default=False, err=True):
            raise InputError(
                "the Android SDK licences were declined: nothing was installed with sdkmanager",
                "run again and accept them, or install the SDK yourself and set ANDROID_HOME",
            )
    else:
        raise InputError(
            f"sdkmanager needs the Android SDK licences accepted first ({names}), "
            "and there is no terminal here to show them",
            "run `tvmgen doctor --install` in a terminal to read and accept them, or pass --yes to accept them",
        )
    accept = toolchains.run(
        [sdkmanager, f"--sdk_root={sdk}", "--licenses"], check=False, env=env, input="y\n" * _ANSWERS
    )
    if accept.returncode != 0:
        raise ToolMissingError(
            f"sdkmanager --licenses failed (exit {accept.returncode}): "
            f"{(accept.stderr or accept.stdout).strip()[-1500:]}",
            "see the log file",
        )


def _install_packages(sdkmanager: Path, sdk: Path, packages: list[str], env: dict) -> None:
    with logs.step(
        f"sdkmanager: installing {', '.join(packages)} into {sdk} (a few minutes: about 1 GB, most of it the NDK)"
    ):
        proc = toolchains.run(
            [sdkmanager, f"--sdk_root={sdk}", *packages], check=False, env=env, input="y\n" * _ANSWERS
        )
    still = [p for p in missing_packages(sdk) if p in packages]
    if proc.returncode != 0 or still:
        output = (proc.stdout + proc.stderr).strip()[-2000:]
        raise ToolMissingError(
            f"sdkmanager did not install {', '.join(still or packages)} (exit {proc.returncode}):\n{output}",
            "sdkmanager downloads from dl.google.com: check the network (or its --proxy settings) and run again; "
            f"on a machine without network, copy an SDK holding {' '.join(packages)} from another machine "
            "and set ANDROID_HOME to it",
        )


def _install_gradle() -> None:
    item = downloads.gradle()
    archive = fetch.fetch(item.url, item.sha256, downloads.downloads_dir() / item.file_name, item.what)
    final = downloads.gradle_home()
    with logs.step(f"Unpacking {item.what} into {final}"):
        fetch.unpack_zip(archive, f"gradle-{downloads.GRADLE_VERSION}", final)
    archive.unlink()
    if not (final / "bin" / "gradle").is_file():
        shutil.rmtree(final)
        raise ToolMissingError(
            f"{item.url} unpacked without bin/gradle: not a Gradle distribution",
            "check TVMGEN_DOWNLOADS / TVMGEN_DOWNLOAD_MIRROR",
        )


def _clone_tvm() -> None:
    src, final = downloads.tvm_source(), downloads.tvm_dir()
    git = toolchains.Git()
    by_hand = (
        f"git clone --recursive --depth 1 --shallow-submodules --branch {src.tag} {src.url} {final} "
        f"(or point TVM_SOURCE_DIR at a TVM {src.tag} checkout)"
    )
    if not git.available():
        raise ToolMissingError(git.missing, f"{git.install}, then run again; or {by_hand}")
    scratch = final.parent / f".{final.name}.cloning"
    shutil.rmtree(scratch, ignore_errors=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        with logs.step(f"Cloning {src.what} into {final}"):
            proc = git.run(
                "-c",
                "advice.detachedHead=false",
                "clone",
                "--recursive",
                "--depth",
                "1",
                "--shallow-submodules",
                "--branch",
                src.tag,
                src.url,
                scratch,
                check=False,
            )
        if proc.returncode != 0:
            raise fetch.DownloadError(
                f"git clone {src.url} failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}",
                f"check the network and run again; or by hand: {by_hand}",
            )
        problem = tvm_tree_problem(scratch)
        if problem:
            raise ToolMissingError(
                f"the clone of {src.url} ({src.tag}) is not a TVM source tree: {problem}",
                f"check TVMGEN_DOWNLOADS (tvm-source), or by hand: {by_hand}",
            )
        os.replace(scratch, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def tvm_tree_problem(root: Path) -> str:
    """Why ``root`` cannot serve as the app build's TVM source tree ("" when it can)."""
    if not ((root / "CMakeLists.txt").is_file() and (root / "include" / "tvm" / "runtime").is_dir()):
        return "no CMakeLists.txt + include/tvm/runtime"
    ffi = root / "3rdparty" / "tvm-ffi"
    if ffi.is_dir() and not any(ffi.iterdir()):
        return "the 3rdparty submodules are not checked out"
    return ""
