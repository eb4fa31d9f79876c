"""The Android toolchain layer: tool lookup, adb verbs on recorded output, doctor.

adb tests feed recorded adb output (tests/recorded/adb/) through a fake runner and assert the
exact argv. Signing is tested in test_signing.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import environ_without_tools
from tools_support import RECORDED, FakeRunner, fake, require_tools
from tvmgen.android import adb, doctor, tools
from tvmgen.core.errors import InputError, ToolMissingError


def phone(*answers, serial="38011FDJH00AB3"):
    runner = FakeRunner(*answers)
    return adb.Phone(adb.Device(serial, "device", model="Pixel_6"), fake(tools.Adb, runner)), runner


def test_missing_tools_fail_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing no-such-tool-tvmgen"):
        require_tools("no-such-tool-tvmgen")


# ----------------------------------------------------------------------------- adb devices


def test_devices_adb29_mixed_states():
    runner = FakeRunner(("devices_adb29_mixed.txt", 0))
    found = adb.devices(fake(tools.Adb, runner))
    assert runner.calls == [["/sdk/platform-tools/adb", "devices", "-l"]]
    assert [(d.serial, d.state, d.model, d.transport_id) for d in found] == [
        ("R58M12ABCDE", "device", "SM_G973F", "1"),
        ("emulator-5554", "device", "sdk_gphone_x86_64", "2"),
        ("0A1B2C3D4E5F", "unauthorized", "", "3"),
        ("ZY2245ABCD", "offline", "", "4"),
    ]
    assert found[0].usb == "1-1" and found[0].product == "beyond1ltexx"


def test_devices_adb34_no_permissions_state_has_spaces():
    found = adb.devices(fake(tools.Adb, FakeRunner(("devices_adb34_no_permissions.txt", 0))))
    assert [(d.serial, d.state, d.usb, d.transport_id) for d in found] == [
        ("38011FDJH00AB3", "no permissions", "3-2", "1")
    ]


def test_choose_device_single():
    runner = FakeRunner(("devices_adb34_one.txt", 0))
    p = adb.choose_device(adb=fake(tools.Adb, runner))
    assert p.serial == "38011FDJH00AB3" and p.device.model == "Pixel_6"


def test_choose_device_none_attached():
    with pytest.raises(InputError, match="no Android device attached") as e:
        adb.choose_device(adb=fake(tools.Adb, FakeRunner(("devices_none.txt", 0))))
    assert "USB debugging" in e.value.hint


def test_choose_device_several_lists_them_and_asks_for_serial():
    with pytest.raises(InputError) as e:
        adb.choose_device(adb=fake(tools.Adb, FakeRunner(("devices_adb29_mixed.txt", 0))))
    assert "4 devices attached" in e.value.message
    assert "R58M12ABCDE (SM G973F): device" in e.value.message and "emulator-5554" in e.value.message
    assert "--serial" in e.value.hint


def test_choose_device_by_serial_and_unknown_serial():
    p = adb.choose_device("emulator-5554", adb=fake(tools.Adb, FakeRunner(("devices_adb29_mixed.txt", 0))))
    assert p.device.state == "device"
    with pytest.raises(InputError, match="no device with serial nope"):
        adb.choose_device("nope", adb=fake(tools.Adb, FakeRunner(("devices_adb29_mixed.txt", 0))))


@pytest.mark.parametrize(
    "serial,answer,expect",
    [
        ("0A1B2C3D4E5F", "devices_adb29_mixed.txt", "accept the RSA prompt on the phone"),
        (None, "devices_adb34_unauthorized.txt", "accept the RSA prompt on the phone"),
        ("ZY2245ABCD", "devices_adb29_mixed.txt", "replug"),
        (None, "devices_adb34_no_permissions.txt", "udev"),
    ],
)
def test_choose_device_unusable_states(serial, answer, expect):
    with pytest.raises(InputError) as e:
        adb.choose_device(serial, adb=fake(tools.Adb, FakeRunner((answer, 0))))
    assert expect in e.value.hint


# ----------------------------------------------------------------------------- adb verbs


def test_install_success_argv():
    p, runner = phone(("install_adb34_success.txt", 0))
    p.install("build/app-debug.apk")
    assert runner.calls == [["/sdk/platform-tools/adb", "-s", "38011FDJH00AB3", "install", "-r", "build/app-debug.apk"]]


@pytest.mark.parametrize(
    "recorded,rc,code,fix",
    [
        (
            "install_adb34_update_incompatible.txt",
            1,
            "INSTALL_FAILED_UPDATE_INCOMPATIBLE",
            "adb -s 38011FDJH00AB3 uninstall org.tvmgen.test",
        ),
        (
            "install_adb29_update_incompatible.txt",
            1,
            "INSTALL_FAILED_UPDATE_INCOMPATIBLE",
            "adb -s 38011FDJH00AB3 uninstall org.tvmgen.test",
        ),
        ("install_adb34_insufficient_storage.txt", 1, "INSTALL_FAILED_INSUFFICIENT_STORAGE", "Settings → Storage"),
        ("install_adb34_no_matching_abis.txt", 1, "INSTALL_FAILED_NO_MATCHING_ABIS", "ro.product.cpu.abi"),
        ("install_adb34_version_downgrade.txt", 1, "INSTALL_FAILED_VERSION_DOWNGRADE", "versionCode"),
        ("install_adb34_no_certificates.txt", 1, "INSTALL_PARSE_FAILED_NO_CERTIFICATES", "zipalign first, then sign"),
        # adb 29's push install to an old phone exits 0 on failure: the output decides
        ("install_adb29_older_sdk.txt", 0, "INSTALL_FAILED_OLDER_SDK", "API 24"),
    ],
)
def test_install_failures_map_to_cause_and_fix(recorded, rc, code, fix):
    p, _ = phone((recorded, rc))
    with pytest.raises(adb.DeviceError) as e:
        p.install("app-debug.apk")
    assert code in e.value.message and fix in e.value.hint
    assert e.value.exit_code == 6


def test_start_with_extras_argv():
    p, runner = phone(("am_start_ok.txt", 0))
    p.start("org.tvmgen.test/.MainActivity", {"model": "my model", "runs": 10, "gpu": True, "scale": 0.5})
    assert runner.calls[0] == [
        "/sdk/platform-tools/adb",
        "-s",
        "38011FDJH00AB3",
        "shell",
        "am",
        "start",
        "-n",
        "org.tvmgen.test/.MainActivity",
        "--es",
        "model",
        "'my model'",
        "--ei",
        "runs",
        "10",
        "--ez",
        "gpu",
        "true",
        "--ef",
        "scale",
        "0.5",
    ]


def test_start_fresh_stops_the_app_first():
    p, runner = phone(("am_start_ok.txt", 0))
    p.start("org.tvmgen.test/.MainActivity", {"exit": True}, fresh=True)
    assert runner.calls[0][3:8] == ["shell", "am", "start", "-S", "-n"]


def test_start_missing_activity_exit_0_is_still_an_error():
    p, _ = phone(("am_start_missing.txt", 0))
    with pytest.raises(adb.DeviceError, match="does not exist"):
        p.start("org.tvmgen.test/.Missing")


def test_logcat_tag_since():
    from datetime import datetime

    p, runner = phone(("logcat_tvmgen.txt", 0))
    lines = p.logcat("tvmgen", since=datetime(2026, 11, 21, 10, 41, 0))
    assert runner.calls[0][3:] == ["logcat", "-d", "-v", "threadtime", "-T", "11-21 10:41:00.000", "-s", "tvmgen"]
    assert len(lines) == 2 and lines[1].endswith("run 12.3 ms (cpu)")


def test_pull_and_missing_remote(tmp_path):
    p, runner = phone(("pull_ok.txt", 0), ("pull_missing.txt", 1))
    assert p.pull("/sdcard/Android/data/org.tvmgen.test/files/result.json", tmp_path / "r.json") == tmp_path / "r.json"
    assert runner.calls[0][3:] == [
        "pull",
        "/sdcard/Android/data/org.tvmgen.test/files/result.json",
        str(tmp_path / "r.json"),
    ]
    with pytest.raises(adb.DeviceError, match="failed to stat remote object") as e:
        p.pull("/sdcard/nope.json", tmp_path / "n.json")
    assert "run-as" in e.value.hint


def test_reverse_argv_and_failure():
    p, runner = phone(("", 0), ("reverse_closed.txt", 1))
    p.reverse(9190)
    assert runner.calls[0] == ["/sdk/platform-tools/adb", "-s", "38011FDJH00AB3", "reverse", "tcp:9190", "tcp:9190"]
    with pytest.raises(adb.DeviceError, match="closed"):
        p.reverse(9190)


@pytest.mark.parametrize(
    "recorded,version", [("version_adb29.txt", "29.0.6-debian"), ("version_adb34.txt", "34.0.5-10900879")]
)
def test_adb_version_recorded(recorded, version):
    runner = FakeRunner((recorded, 0))
    assert fake(tools.Adb, runner).version() == version
    assert runner.calls == [["/sdk/platform-tools/adb", "version"]]


def test_adb_version_real():
    require_tools("adb")
    version = tools.Adb().version()
    assert version and version[0].isdigit(), version


# ----------------------------------------------------------------------------- tool lookup


def test_sdk_tools_come_from_android_home_before_path(tmp_path, monkeypatch):
    sdk = tmp_path / "sdk"
    for v in ("34.0.0", "35.0.0"):
        exe = sdk / "build-tools" / v / "apksigner"
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\necho 0.9\n")
        exe.chmod(0o755)
    (sdk / "platforms" / "android-35").mkdir(parents=True)
    (sdk / "platforms" / "android-35" / "android.jar").write_bytes(b"")
    monkeypatch.setenv("ANDROID_HOME", str(sdk))
    monkeypatch.delenv("TVMGEN_APKSIGNER", raising=False)
    assert tools.Apksigner().verify() == sdk / "build-tools" / "35.0.0" / "apksigner"
    s = tools.AndroidSdk()
    assert s.platforms() == [35] and s.build_tools() == ["34.0.0", "35.0.0"]
    s.require()
    with pytest.raises(ToolMissingError, match="platforms;android-36") as e:
        s.require(36)
    assert e.value.hint.startswith("sdkmanager --sdk_root=")


def test_missing_tool_names_variable_and_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ANDROID_HOME", str(tmp_path))
    monkeypatch.setattr(tools, "KNOWN_SDK_PLACES", (tmp_path / "none",))
    with pytest.raises(ToolMissingError) as e:
        tools.Zipalign().verify()
    assert "apt-get install zipalign" in e.value.hint and "TVMGEN_ZIPALIGN" in e.value.hint
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ToolMissingError, match=r"JAVA_HOME=.* has no bin/javac") as e:
        tools.Jdk().verify()
    assert "openjdk-17-jdk-headless" in e.value.hint
    monkeypatch.setenv("ANDROID_HOME", str(tmp_path / "gone"))
    with pytest.raises(ToolMissingError, match=r"ANDROID_HOME=.* is not a directory"):
        tools.AndroidSdk().verify()


def test_gradle_wrapper_version_without_running_it(tmp_path):
    (tmp_path / "gradlew").write_text("#!/bin/sh\nexit 1\n")
    props = tmp_path / "gradle" / "wrapper" / "gradle-wrapper.properties"
    props.parent.mkdir(parents=True)
    props.write_text("distributionUrl=https\\://services.gradle.org/distributions/gradle-8.7-bin.zip\n")
    runner = FakeRunner()
    g = tools.Gradle(tmp_path, runner)
    assert g.verify() == tmp_path / "gradlew" and g.version() == "8.7" and runner.calls == []


# ----------------------------------------------------------------------------- doctor


def _exe(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def _doctor(tmp_path, env_extra: dict) -> subprocess.CompletedProcess:
    env = environ_without_tools("TVMGEN_AAPT", "TVMGEN_ZIPALIGN", "TVMGEN_APKSIGNER")
    # tvmgen's own downloads (tvmgen doctor --install) live elsewhere: an empty data directory here
    env.update(TVMGEN_LOG_DIR=str(tmp_path / "logs"), TVMGEN_DATA_DIR=str(tmp_path / "tvmgen-data"), **env_extra)
    return subprocess.run(
        [sys.executable, "-m", "tvmgen", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def test_doctor_ready_with_a_complete_sdk(tmp_path):
    require_tools("javac", "keytool")
    sdk, ndk, tvm = tmp_path / "sdk", tmp_path / "ndk", tmp_path / "tvm"
    (sdk / "platforms" / "android-35").mkdir(parents=True)
    (sdk / "platforms" / "android-35" / "android.jar").write_bytes(b"")
    bt = sdk / "build-tools" / "35.0.0"
    _exe(bt / "apksigner", "echo 0.9")
    _exe(bt / "zipalign", "exit 0")
    _exe(bt / "aapt", "echo 'Android Asset Packaging Tool, v0.2-10932466'")
    _exe(
        sdk / "platform-tools" / "adb",
        f"case $1 in version) cat {RECORDED / 'version_adb34.txt'};; *) cat {RECORDED / 'devices_adb34_one.txt'};; esac",
    )
    (ndk / "source.properties").parent.mkdir(parents=True)
    (ndk / "source.properties").write_text("Pkg.Desc = Android NDK\nPkg.Revision = 27.2.12479018\n")
    _exe(ndk / "toolchains/llvm/prebuilt/linux-x86_64/bin/aarch64-linux-android24-clang++", "exit 0")
    (tvm / "include" / "tvm" / "runtime").mkdir(parents=True)
    (tvm / "CMakeLists.txt").write_text("project(tvm)\n")
    (tvm / "python" / "tvm").mkdir(parents=True)
    (tvm / "python" / "tvm" / "libinfo.py").write_text('__version__ = "0.27.0"\n')
    _exe(tmp_path / "gradle" / "bin" / "gradle", "echo 'Gradle 8.7'")

    env = {
        "ANDROID_HOME": str(sdk),
        "ANDROID_NDK_HOME": str(ndk),
        "TVM_SOURCE_DIR": str(tvm),
        "GRADLE_HOME": str(tmp_path / "gradle"),
    }
    proc = _doctor(tmp_path, env)
    report = json.loads(proc.stdout)
    rows = {c["name"]: c for c in report["checks"]}
    assert proc.returncode == 0 and report["ready"], proc.stdout + proc.stderr
    assert rows["Android NDK"]["version"] == "27.2.12479018"
    assert rows["Android SDK"]["version"] == "android-35, build-tools 35.0.0"
    assert rows["apksigner"]["path"] == str(bt / "apksigner") and rows["aapt"]["version"] == "0.2-10932466"
    assert rows["adb"]["version"] == "34.0.5-10900879" and "38011FDJH00AB3 (Pixel 6): device" in rows["adb"]["detail"]
    assert (
        rows["TVM source tree"]["version"] == "0.27.0"
        and rows["TVM source tree"]["source"] == "yours ($TVM_SOURCE_DIR)"
    )
    assert rows["Gradle"]["version"] == "8.7" and rows["Android NDK"]["source"] == "yours ($ANDROID_NDK_HOME)"

    env.pop("TVM_SOURCE_DIR")
    proc = _doctor(tmp_path, env)
    report = json.loads(proc.stdout)
    rows = {c["name"]: c for c in report["checks"]}
    assert proc.returncode == 3 and not report["ready"]
    assert rows["TVM source tree"]["fix"].startswith("git clone --recursive")


def test_doctor_table_names_fixes():
    found = [
        doctor.Check("JDK", True, True, "17.0.15", "/usr/lib/jvm/x", required=True),
        doctor.Check(
            "Android NDK", False, False, detail="Android NDK not found", fix="sdkmanager 'ndk;27'", required=True
        ),
    ]
    text = doctor.table(found)
    assert "Android NDK: sdkmanager 'ndk;27'" in text and text.endswith(
        "ready to build an APK: no (every 'needed for APK' row must be usable)"
    )
