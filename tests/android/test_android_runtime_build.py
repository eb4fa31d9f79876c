"""`tvmgen runtime build --platform android-*`: the runtime for an Android ABI, built with the NDK's CMake toolchain
against the TVM source tree the app build uses, and what `tvmgen aar --native` takes.

Without an NDK (as here) these tests check the refusal and what it leaves behind, the NDK discovery on directory
layouts standing in for an NDK, and the exact CMake command lines, which are never run here. The real builds are
gated: TVMGEN_TEST_NDK=1 (with ANDROID_NDK_HOME and TVM_SOURCE_DIR) builds the runtime, and with TVMGEN_TEST_SDK=1
(and ANDROID_HOME) Gradle builds the APK of a deploy app rendered without an NDK.
"""

from __future__ import annotations

import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from tvmgen.android import aar, project
from tvmgen.commands.options import ANDROID_PLATFORMS
from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.core import binfmt, toolchains
from tvmgen.core.errors import InputError, ToolMissingError
from tvmgen.runtime import runtime_build

# every place tvmgen looks for an NDK, the Android SDK and the TVM source tree, emptied ("" counts as unset)
NO_TOOLS = dict.fromkeys(
    ("TVM_NDK_CC", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "ANDROID_HOME", "ANDROID_SDK_ROOT", "TVM_SOURCE_DIR"), ""
)
TOOLCHAIN = Path("build/cmake/android.toolchain.cmake")


def ndk_layout(root: Path, toolchain_file: bool = True, abis=tuple(toolchains.ANDROID_CLANG_PREFIX)) -> Path:
    """A directory laid out as an NDK (each ABI's clang++ where tvmgen looks, and the CMake toolchain file), with
    nothing in them: it stands in for an NDK in discovery only, never in a build."""
    bindir = root / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin"
    bindir.mkdir(parents=True)
    for abi in abis:
        (bindir / f"{toolchains.ANDROID_CLANG_PREFIX[abi]}{toolchains.ANDROID_MIN_API}-clang++").write_text("")
    if toolchain_file:
        (root / TOOLCHAIN).parent.mkdir(parents=True)
        (root / TOOLCHAIN).write_text("")
    return root


def tvm_layout(root: Path) -> Path:
    """What `tvmgen doctor` takes for a TVM source tree (CMakeLists.txt, include/tvm/runtime), and nothing more."""
    (root / "include" / "tvm" / "runtime").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("")
    return root


@pytest.fixture
def no_tools(tmp_path, monkeypatch) -> dict:
    """No NDK, SDK or TVM source tree anywhere tvmgen looks (tvmgen's own data directory is an empty one)."""
    env = {**NO_TOOLS, "TVMGEN_DATA_DIR": str(tmp_path / "data")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


# --------------------------------------------------------------------------- refusals: nothing written


@pytest.mark.parametrize("platform", ANDROID_PLATFORMS)
def test_without_ndk_says_how_to_get_one_and_writes_nothing(tvmgen_inprocess, tmp_path, no_tools, platform):
    out = tmp_path / "build"
    r = tvmgen_inprocess("runtime", "build", "--platform", platform, "-o", out, extra_env=no_tools)
    assert r.returncode == 3, r.stderr
    assert "Android NDK not found" in r.stderr and "ANDROID_NDK_HOME" in r.stderr
    assert "tvmgen doctor --install" in r.stderr
    assert "TVM source tree" in r.stderr and "TVM_SOURCE_DIR" in r.stderr  # the other thing missing, said at once
    assert not out.exists()


def test_without_tvm_source_names_it_and_writes_nothing(tvmgen_inprocess, tmp_path, no_tools):
    env = {**no_tools, "ANDROID_NDK_HOME": str(ndk_layout(tmp_path / "ndk"))}
    out = tmp_path / "build"
    r = tvmgen_inprocess("runtime", "build", "--platform", "android-arm64", "-o", out, extra_env=env)
    assert r.returncode == 3, r.stderr
    assert "NDK" not in r.stderr.split("fix:")[0]  # the NDK was found: only the TVM source tree is missing
    assert "TVM_SOURCE_DIR is not set" in r.stderr and "git clone --recursive --branch v0.27.0" in r.stderr
    assert not out.exists()
    # a tree without its submodules is refused with `tvmgen doctor`'s words, before anything is written
    tree = tvm_layout(tmp_path / "tvm")
    (tree / "3rdparty" / "tvm-ffi").mkdir(parents=True)
    r = tvmgen_inprocess(
        "runtime", "build", "--platform", "android-arm64", "-o", out, extra_env={**env, "TVM_SOURCE_DIR": str(tree)}
    )
    assert r.returncode == 3 and "submodules are not checked out" in r.stderr, r.stderr
    assert "git submodule update --init --recursive" in r.stderr and not out.exists()


def test_platform_choices(tvmgen_inprocess):
    r = tvmgen_inprocess("runtime", "build", "--help")
    assert r.returncode == 0
    for name in ["host", "linux-aarch64", *ANDROID_PLATFORMS]:
        assert name in r.stdout
    r = tvmgen_inprocess("runtime", "build", "--platform", "ios-arm64")
    assert r.returncode == 2 and "'ios-arm64' is not one of" in r.stderr
    r = tvmgen_inprocess("runtime", "build", "--platform", "arm64-v8a")
    assert r.returncode == 2 and "use --platform android-arm64" in r.stderr
    # the RPC device server still runs only where tvmgen runs it (host, or linux-aarch64 under qemu)
    r = tvmgen_inprocess("rpc", "device", "--platform", "android-arm64")
    assert r.returncode == 2 and "'android-arm64' is not one of" in r.stderr


# --------------------------------------------------------------------------- NDK discovery (layouts, no build)


def test_toolchain_file_from_the_ndk_tvmgen_finds(tmp_path, no_tools, monkeypatch):
    with pytest.raises(ToolMissingError) as e:
        runtime_build.ndk_toolchain_file("arm64-v8a")
    assert "ANDROID_NDK_HOME" in str(e.value) and "tvmgen doctor --install" in e.value.hint
    assert "--objects-only" not in e.value.hint  # compile's way round a missing NDK is no help here
    # the newest $ANDROID_HOME/ndk/<version>, as `tvmgen compile` and `tvmgen doctor` take it
    sdk = tmp_path / "sdk"
    ndk_layout(sdk / "ndk" / "25.2.9519653")
    newest = ndk_layout(sdk / "ndk" / "27.2.12479018")
    monkeypatch.setenv("ANDROID_HOME", str(sdk))
    assert runtime_build.ndk_toolchain_file("arm64-v8a") == newest / TOOLCHAIN
    # an explicit root wins
    mine = ndk_layout(tmp_path / "mine")
    monkeypatch.setenv("ANDROID_NDK_HOME", str(mine))
    assert runtime_build.ndk_toolchain_file("arm64-v8a") == mine / TOOLCHAIN
    # TVM_NDK_CC wins over everything: the NDK holding that compiler
    monkeypatch.setenv("TVM_NDK_CC", str(next(newest.rglob("aarch64-*clang++"))))
    assert runtime_build.ndk_toolchain_file("arm64-v8a") == newest / TOOLCHAIN
    # a compiler outside any NDK: the toolchain file of the NDK root found instead
    loose = tmp_path / "loose-clang++"
    loose.write_text("")
    monkeypatch.setenv("TVM_NDK_CC", str(loose))
    assert runtime_build.ndk_toolchain_file("arm64-v8a") == mine / TOOLCHAIN


def test_ndk_layout_problems_keep_their_own_fix(tmp_path, no_tools, monkeypatch):
    monkeypatch.setenv("ANDROID_NDK_HOME", str(ndk_layout(tmp_path / "old", toolchain_file=False)))
    with pytest.raises(ToolMissingError, match=r"no build/cmake/android.toolchain.cmake in the Android NDK"):
        runtime_build.ndk_toolchain_file("arm64-v8a")
    monkeypatch.setenv("ANDROID_NDK_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ToolMissingError, match=r"ANDROID_NDK_HOME=.* is not a directory"):
        runtime_build.ndk_toolchain_file("arm64-v8a")
    monkeypatch.setenv("ANDROID_NDK_HOME", str(ndk_layout(tmp_path / "arm64-only", abis=["arm64-v8a"])))
    with pytest.raises(ToolMissingError, match="has no armv7a-linux-androideabi24-clang"):
        runtime_build.ndk_toolchain_file("armeabi-v7a")


# --------------------------------------------------------------------------- the CMake command lines


@pytest.mark.parametrize("platform", ANDROID_PLATFORMS)
def test_configure_arguments_per_abi(platform):
    abi = PLATFORMS[platform].abi
    args = runtime_build.android_configure_args(platform, Path("/ndk") / TOOLCHAIN, Path("/src/tvm"))
    assert args == [
        "-DCMAKE_TOOLCHAIN_FILE=/ndk/build/cmake/android.toolchain.cmake",
        f"-DANDROID_ABI={abi}",
        "-DANDROID_PLATFORM=android-24",
        "-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON",
        "-DTVM_SOURCE_DIR=/src/tvm",
        "-DTVMGEN_BUILD_JNI=ON",
    ]
    assert abi in aar.ABI_ARCH and aar.ABI_PLATFORM[abi] == platform  # the ABIs `tvmgen aar --native` takes
    assert (
        runtime_build.android_configure_args(platform, Path("/t"), Path("/s"), jni=False)[-1]
        == "-DTVMGEN_BUILD_JNI=OFF"
    )


def test_configure_arguments_follow_the_app_build():
    """The libraries an AAR ships are built as the deploy app's Gradle build builds them: its minSdk, and every
    definition its CMake arguments pass that is not about the app's own targets."""
    args = runtime_build.android_configure_args("android-arm64", Path("/t"), Path("/s"))
    context = project.android_context("deploy", "org.tvmgen.x", "X", "x", ["cpu"], ["arm64-v8a"])
    assert f"-DANDROID_PLATFORM=android-{context['min_sdk']}" in args
    assert context["min_sdk"] == toolchains.ANDROID_MIN_API
    for template in ("android_deploy", "android_rpc"):
        gradle = (REPO / "templates" / template / "app" / "build.gradle.jinja").read_text()
        (line,) = [ln for ln in gradle.splitlines() if ln.strip().startswith("arguments ")]
        passed = dict(d.split("=", 1) for d in re.findall(r"-D([A-Z_]+=[^'\"]+)", line))
        for app_only in ("TVMGEN_BUILD_TOOLS", "TVMGEN_BUILD_JNI", "TVMGEN_NNAPI", "TVM_SOURCE_DIR"):
            passed.pop(app_only, None)
        assert passed, line
        for name, value in passed.items():
            assert f"-D{name}={value}" in args, (template, name)


def test_non_android_platform_is_refused():
    with pytest.raises(InputError, match="linux-aarch64 is not an Android platform"):
        runtime_build.android_configure_args("linux-aarch64", Path("/t"), Path("/s"))
    with pytest.raises(InputError, match="built from a TVM source tree"):
        runtime_build.build("android-arm64", Path("/never"), tvm_source=None)


def test_build_runs_configure_build_install(tmp_path, no_tools, monkeypatch):
    """The three CMake runs of an Android build, recorded instead of run (nothing is built here)."""
    ndk = ndk_layout(tmp_path / "ndk")
    monkeypatch.setenv("ANDROID_NDK_HOME", str(ndk))
    calls = []
    monkeypatch.setattr(toolchains.CMake, "verify", lambda self: Path("/usr/bin/cmake"))
    monkeypatch.setattr(toolchains.CMake, "run", lambda self, *args, **kw: calls.append([str(a) for a in args]))
    tvm = tvm_layout(tmp_path / "tvm")
    prefix = runtime_build.build("android-armv7", tmp_path / "out", tvm_source=tvm)
    assert prefix == tmp_path / "out" / "install"
    cmake_dir = str(tmp_path / "out" / "cmake")
    assert calls == [
        [
            "-S",
            str(REPO / "jni"),
            "-B",
            cmake_dir,
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            *runtime_build.android_configure_args("android-armv7", ndk / TOOLCHAIN, tvm),
        ],
        ["--build", cmake_dir, "-j", str(os.cpu_count() or 2)],
        ["--install", cmake_dir],
    ]
    assert "-DANDROID_ABI=armeabi-v7a" in calls[0] and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- gated: the real NDK, SDK and Gradle


@pytest.mark.skipif(
    os.environ.get("TVMGEN_TEST_NDK") != "1"
    or not os.environ.get("ANDROID_NDK_HOME")
    or not os.environ.get("TVM_SOURCE_DIR"),
    reason="set TVMGEN_TEST_NDK=1, ANDROID_NDK_HOME to a real Android NDK and TVM_SOURCE_DIR to a TVM source tree",
)
def test_real_android_runtime_build(tvmgen, tmp_path):
    r = tvmgen("runtime", "build", "--platform", "android-arm64", "-o", tmp_path / "rt", timeout=3600)
    assert r.returncode == 0, r.stderr[-5000:]
    prefix = Path(r.stdout.strip().splitlines()[-1])
    assert prefix == tmp_path / "rt" / "install"
    lib = prefix / "lib"
    runtime = lib / "libtvmgen_runtime.so"
    assert binfmt.describe_file(runtime) == ("elf", "aarch64")
    pages = binfmt.page_report(runtime)
    assert pages.ok and pages.min_align >= 16384, pages.summary()
    assert b"GLIBC_2." not in runtime.read_bytes()  # bionic, not a Linux build
    # exactly what `tvmgen aar --native arm64-v8a=<prefix>/lib` takes: present, aarch64, Android, 16 KB pages
    checked = aar.check_native("arm64-v8a", lib, opencl=False, require_android=True)
    assert {p.name for p in checked} >= set(aar.RUNTIME_LIBRARIES)
    assert f"--native arm64-v8a={lib}" in r.stderr


@pytest.mark.skipif(
    os.environ.get("TVMGEN_TEST_NDK") != "1"
    or os.environ.get("TVMGEN_TEST_SDK") != "1"
    or not os.environ.get("ANDROID_HOME")
    or not os.environ.get("TVM_SOURCE_DIR"),
    reason="set TVMGEN_TEST_NDK=1 and TVMGEN_TEST_SDK=1, ANDROID_HOME to an Android SDK with the NDK the project names "
    "(`tvmgen doctor --install` puts it there) and TVM_SOURCE_DIR to a TVM source tree",
)
def test_real_gradle_build_of_an_app_rendered_without_ndk(tvmgen, tmp_path):
    """The deploy app rendered where there is no NDK (the model left as objects), then built by Gradle with the
    NDK: the APK holds the model's library under the name its assets' library.txt gives."""
    from tvmgen.android import app as android_app
    from tvmgen.android import tools

    proj = tmp_path / "proj"
    hidden = {**NO_TOOLS, "TVMGEN_DATA_DIR": str(tmp_path / "no-data")}  # no NDK anywhere, nor tvmgen's SDK
    r = tvmgen("app", "--model", "builtin:mobilenet", "--device", "cpu", "-o", proj, extra_env=hidden, timeout=1800)
    assert r.returncode == 0, r.stderr[-5000:]
    assets = proj / "app" / "src" / "main" / "assets"
    (library_txt,) = assets.glob("*/library.txt")
    library = library_txt.read_text().strip()
    # rendered without an NDK: the model's objects are in the project, for its CMake to link; no library yet
    assert list((proj / "app" / "src" / "main" / "cpp" / "models").glob(f"{library_txt.parent.name}/*.o"))
    assert not list((proj / "app" / "src" / "main").glob("jniLibs/*/*.so"))
    # what the project's README says: ANDROID_HOME and TVM_SOURCE_DIR set, then gradle assembleRelease
    readme = (proj / "README.md").read_text()
    assert "gradle assembleRelease" in readme
    gradle = tools.Gradle(proj).verify()
    build = subprocess.run(
        [str(gradle), "--no-daemon", "-p", str(proj), "assembleRelease"],
        cwd=proj,
        env={**os.environ, **android_app.build_env()},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert build.returncode == 0, build.stdout[-5000:] + build.stderr[-5000:]
    (apk,) = (proj / "app" / "build" / "outputs" / "apk" / "release").glob("*.apk")
    with zipfile.ZipFile(apk) as z:
        names = set(z.namelist())
        assert f"lib/arm64-v8a/{library}" in names, sorted(n for n in names if n.startswith("lib/"))
        assert {f"lib/arm64-v8a/{n}" for n in aar.RUNTIME_LIBRARIES} <= names
        assert library_txt.relative_to(proj / "app" / "src" / "main").as_posix() in names
    reports = {r.name: r for r in binfmt.archive_page_reports(apk)}
    model = reports[f"lib/arm64-v8a/{library}"]
    assert model.arch == "aarch64" and model.min_align >= 16384, model.summary()
