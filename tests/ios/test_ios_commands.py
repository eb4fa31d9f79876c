"""The iOS commands (tvmgen rpc-app and app for ios-arm64) end to end on this machine, doctor's Mac rows and
the xcodebuild/devicectl argv on recorded output, and the Xcode build itself, which runs only on a Mac."""

from __future__ import annotations

import json
import os
import platform
import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TESTS, save_onnx, single_op_models
from ios_support import LIBRARY_BIN, TEAM
from tvmgen.core.toolchains import xcode
from tvmgen.ios import archive
from tvmgen.ios import doctor as ios_doctor

RECORDED = TESTS / "recorded" / "ios"


# ----------------------------------------------------------------------------- the commands


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    return save_onnx(single_op_models()["softmax"], tmp_path_factory.mktemp("ios-cli") / "softmax.onnx")


@pytest.mark.skipif(platform.system() == "Darwin", reason="elsewhere-path: on a Mac the command builds with Xcode")
def test_rpc_app_ios_renders_and_prints_the_mac_commands(tvmgen, tmp_path, onnx_file):
    r = tvmgen(
        "rpc-app",
        "--platform",
        "ios-arm64",
        "--team-id",
        TEAM,
        "--model",
        onnx_file,
        "--key",
        "ipad",
        "-o",
        tmp_path / "rpc",
    )
    assert r.returncode == 0, r.stderr
    assert "not built here" in r.stderr and f"cd {tmp_path / 'rpc'}" in r.stderr
    assert (
        f"xcodebuild -project TvmgenApp.xcodeproj -target TvmgenApp -configuration Release -sdk iphoneos "
        f"-allowProvisioningUpdates DEVELOPMENT_TEAM={TEAM}"
    ) in r.stderr
    assert "xcrun devicectl device install app --device DEVICE_ID build/Release-iphoneos/TvmgenApp.app" in r.stderr
    assert "iproxy 9090 9090" in r.stderr
    info = plistlib.loads((tmp_path / "rpc/TvmgenApp/Info.plist").read_bytes())
    assert (
        info["TvmgenKind"] == "rpc" and info["TvmgenDefaultMode"] == "standalone" and info["TvmgenDefaultKey"] == "ipad"
    )
    assert archive.archive_symbols(tmp_path / "rpc/Models/libmodel.a").count(LIBRARY_BIN) == 1
    r = tvmgen("rpc-app", "--platform", "ios-arm64", "--team-id", "x", "--model", onnx_file, "-o", tmp_path / "bad")
    assert r.returncode == 2 and "not an Apple developer team id" in r.stderr and not (tmp_path / "bad").exists()


@pytest.mark.skipif(platform.system() == "Darwin", reason="elsewhere-path: on a Mac the command builds with Xcode")
def test_app_ios_metal_and_wrong_device(tvmgen, tmp_path, onnx_file):
    r = tvmgen(
        "app",
        "--platform",
        "ios-arm64",
        "--model",
        onnx_file,
        "--device",
        "metal",
        "--team-id",
        TEAM,
        "-o",
        tmp_path / "app",
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "app/Models/model/manifest.json").read_text())
    assert manifest["platform"] == "ios-arm64" and manifest["device"] == "metal"
    assert plistlib.loads((tmp_path / "app/TvmgenApp/Info.plist").read_bytes())["TvmgenKind"] == "deploy"
    r = tvmgen("app", "--platform", "ios-arm64", "--model", onnx_file, "--device", "opencl", "-o", tmp_path / "cl")
    assert r.returncode == 2 and "device 'opencl' is not available on platform 'ios-arm64'" in r.stderr
    assert not (tmp_path / "cl").exists()
    r = tvmgen("app", "--platform", "ios-arm64", "--model", onnx_file, "--install", "-o", tmp_path / "inst")
    assert r.returncode == 3 and "cannot be built here" in r.stderr and not (tmp_path / "inst").exists()
    (tmp_path / "db").mkdir()
    r = tvmgen(
        "app", "--platform", "ios-arm64", "--model", onnx_file, "--tuning-db", tmp_path / "db", "-o", tmp_path / "tuned"
    )
    assert r.returncode == 2 and "an iOS app cannot load uploaded code" in r.stderr, r.stderr
    assert not (tmp_path / "tuned").exists()


# ----------------------------------------------------------------------------- the Mac tools (recorded output)


class FakeRunner:
    """Answers each command with a recorded output file, and keeps every argv."""

    def __init__(self, answers: dict[str, str], fail: str | None = None):
        self.answers, self.fail, self.calls = answers, fail, []

    def __call__(self, argv, cwd=None, env=None):
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        key = " ".join([Path(argv[0]).name, *argv[1:]])
        text = next((RECORDED.joinpath(f).read_text() for k, f in self.answers.items() if key.startswith(k)), "")
        return subprocess.CompletedProcess(argv, 65 if self.fail and key.startswith(self.fail) else 0, text, "")


MAC_ANSWERS = {
    "xcodebuild -version": "xcodebuild_version.txt",
    "xcrun --sdk iphoneos --show-sdk-version": "sdk_version.txt",
    "security find-identity -v -p codesigning": "find_identity.txt",
    "xcrun --find devicectl": "find_devicectl.txt",
}


@pytest.fixture
def on_a_mac(monkeypatch):
    monkeypatch.setattr(xcode, "is_macos", lambda: True)
    monkeypatch.setattr(xcode, "which", lambda name: Path(f"/usr/bin/{name}"))


def test_doctor_says_not_macos_here():
    if platform.system() == "Darwin":
        pytest.skip(
            "this machine is a Mac: the Mac rows are checked by test_doctor_on_a_mac_reads_xcode_sdk_and_identities"
        )
    (row,) = ios_doctor.checks()
    assert not row.usable and "not macOS" in row.detail and "renders the Xcode project here" in row.detail
    from tvmgen.android import doctor

    assert "not macOS" in doctor.table([row])


def test_doctor_on_a_mac_reads_xcode_sdk_and_identities(on_a_mac):
    runner = FakeRunner(MAC_ANSWERS)
    rows = {c.name: c for c in ios_doctor.checks(runner)}
    assert rows["Xcode"].usable and rows["Xcode"].version == "15.4 (15F31d)"
    assert rows["iOS SDK"].usable and rows["iOS SDK"].version == "17.5"
    signing = rows["code-signing identities"]
    assert signing.usable and "2 valid" in signing.detail and "team ids: AB12CD34EF, XY98ZW76VU" in signing.detail
    assert rows["devicectl"].usable and not any(c.required for c in rows.values())
    empty = FakeRunner({"security find-identity": "find_identity_none.txt", **MAC_ANSWERS})  # first match wins
    signing = {c.name: c for c in ios_doctor.checks(empty)}["code-signing identities"]
    assert not signing.usable and "no valid code-signing identity" in signing.detail and "Accounts" in signing.fix


def test_xcodebuild_and_devicectl_argv(on_a_mac, tmp_path):
    runner = FakeRunner(MAC_ANSWERS)
    (tmp_path / "build/Release-iphoneos/TvmgenApp.app").mkdir(parents=True)
    app = xcode.Xcodebuild(runner).build_app(tmp_path, TEAM, "/opt/tvm")
    assert app == tmp_path / "build/Release-iphoneos/TvmgenApp.app"
    assert runner.calls[-1] == [
        "/usr/bin/xcodebuild",
        "-project",
        str(tmp_path / "TvmgenApp.xcodeproj"),
        "-target",
        "TvmgenApp",
        "-configuration",
        "Release",
        "-sdk",
        "iphoneos",
        "-allowProvisioningUpdates",
        f"DEVELOPMENT_TEAM={TEAM}",
        "TVM_SOURCE_DIR=/opt/tvm",
        f"SYMROOT={tmp_path / 'build'}",
        "build",
    ]
    ctl = xcode.Devicectl(runner)
    ctl.install_app(app, "00008110-001A2B3C4D5E6F70")
    ctl.launch("org.tvmgen.rpc", "00008110-001A2B3C4D5E6F70")
    assert runner.calls[-2] == [
        "/usr/bin/xcrun",
        "devicectl",
        "device",
        "install",
        "app",
        "--device",
        "00008110-001A2B3C4D5E6F70",
        str(app),
    ]
    assert runner.calls[-1][-3:] == ["--device", "00008110-001A2B3C4D5E6F70", "org.tvmgen.rpc"]
    from tvmgen.core.errors import TvmgenError

    failing = FakeRunner(MAC_ANSWERS, fail="xcodebuild -project")
    with pytest.raises(TvmgenError, match="xcodebuild failed"):
        xcode.Xcodebuild(failing).build_app(tmp_path, TEAM, "/opt/tvm")


# ----------------------------------------------------------------------------- a real Xcode build


@pytest.mark.skipif(
    not (
        platform.system() == "Darwin"
        and shutil.which("xcodebuild")
        and os.environ.get("TVMGEN_TEST_TEAM_ID")
        and os.environ.get("TVM_SOURCE_DIR")
    ),
    reason="needs macOS with Xcode, a signing team and a TVM source tree: set TVMGEN_TEST_TEAM_ID "
    "and TVM_SOURCE_DIR on a Mac (TVMGEN_TEST_DEVICE_ID also installs on that device)",
)
def test_real_xcode_build(tvmgen, tmp_path, onnx_file):
    args = [
        "rpc-app",
        "--platform",
        "ios-arm64",
        "--team-id",
        os.environ["TVMGEN_TEST_TEAM_ID"],
        "--model",
        onnx_file,
        "-o",
        tmp_path / "rpc",
    ]
    if os.environ.get("TVMGEN_TEST_DEVICE_ID"):
        args += ["--install", "--serial", os.environ["TVMGEN_TEST_DEVICE_ID"]]
    r = tvmgen(*args, timeout=3600)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rpc/build/Release-iphoneos/TvmgenApp.app").is_dir()
