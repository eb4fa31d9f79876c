"""The Android toolchain layer: tool lookup, adb verbs on recorded output, real signing, doctor.

adb tests feed recorded adb output (tests/recorded/adb/) through a fake runner and assert the
exact argv. The signing tests build, align, sign and verify a real APK with Debian's aapt,
zipalign and apksigner; they skip when those are missing and fail under CI=true.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import TESTS, unavailable
from helpers import environ_without_tools
from tvmgen.android import adb, doctor, signing, tools
from tvmgen.core.errors import InputError, ToolMissingError, TvmgenError

RECORDED = TESTS / "recorded" / "adb"
FRAMEWORK_RES = Path("/usr/share/android-framework-res/framework-res.apk")


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


def phone(*answers, serial="38011FDJH00AB3"):
    runner = FakeRunner(*answers)
    return adb.Phone(adb.Device(serial, "device", model="Pixel_6"), fake(tools.Adb, runner)), runner


def require_tools(*names: str, files: tuple[Path, ...] = ()) -> None:
    """Skip (printing why) when Debian's Android tools are missing; fail under CI, where bootstrap installs them."""
    missing = [n for n in names if not shutil.which(n)] + [str(f) for f in files if not f.is_file()]
    if not missing:
        return
    unavailable(
        f"missing {', '.join(missing)} (scripts/bootstrap.sh installs them: apt-get install aapt zipalign "
        "apksigner adb android-framework-res)"
    )


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


# ----------------------------------------------------------------------------- signing (argv)


def test_sign_argv_keeps_passwords_out_of_argv(tmp_path):
    apk = tmp_path / "a.apk"
    apk.write_bytes(b"unsigned")
    key = signing.SigningKey(tmp_path / "r.ks", "release", "St0re-Secret-1", "K3y-Secret-2")
    runner = FakeRunner(("", 0))
    signing.sign(apk, key, tmp_path / "signed.apk", tool=fake(tools.Apksigner, runner, "/bt/apksigner"))
    argv = runner.calls[0]
    assert argv[:11] == [
        "/bt/apksigner",
        "sign",
        "--ks",
        str(key.keystore),
        "--ks-key-alias",
        "release",
        "--ks-pass",
        "env:TVMGEN_KEYSTORE_PASSWORD",
        "--key-pass",
        "env:TVMGEN_KEY_PASSWORD",
        "--v1-signing-enabled",
    ]
    schemes = [("--v1-signing-enabled", "false"), ("--v2-signing-enabled", "true")]
    schemes += [("--v3-signing-enabled", "true"), ("--v4-signing-enabled", "false")]
    assert list(zip(argv[10:18:2], argv[11:19:2])) == schemes and argv[18] == "--out"
    assert argv[-1] == str(apk)
    assert not any("Secret" in a for a in argv)
    assert runner.envs[0] == {"TVMGEN_KEYSTORE_PASSWORD": "St0re-Secret-1", "TVMGEN_KEY_PASSWORD": "K3y-Secret-2"}
    assert "Secret" not in repr(key)


def test_release_key_from_env_or_prompt(tmp_path, monkeypatch):
    ks = tmp_path / "r.ks"
    ks.write_bytes(b"x")
    monkeypatch.setenv("TVMGEN_KEYSTORE_PASSWORD", "from-env")
    monkeypatch.delenv("TVMGEN_KEY_PASSWORD", raising=False)
    k = signing.release_key(ks, "rel")
    assert (k.store_password, k.key_password) == ("from-env", "from-env")
    monkeypatch.delenv("TVMGEN_KEYSTORE_PASSWORD")
    asked = []
    k = signing.release_key(ks, "rel", prompt=lambda text, hide_input: asked.append(hide_input) or "typed")
    assert k.store_password == "typed" and asked == [True]
    with pytest.raises(InputError, match="does not exist"):
        signing.release_key(tmp_path / "none.ks", "rel")


def test_debug_keystore_location_honours_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert signing.config_dir() == tmp_path / "cfg" / "tvmgen"


# ----------------------------------------------------------------------------- signing (real tools)

MANIFEST = """<?xml version="1.0" encoding="utf-8"?>
<manifest xmlns:android="http://schemas.android.com/apk/res/android"
    package="org.tvmgen.test" android:versionCode="1" android:versionName="1.0">
  <uses-sdk android:minSdkVersion="24" android:targetSdkVersion="35"/>
  <uses-permission android:name="android.permission.INTERNET"/>
  <application android:label="tvmgen test" android:hasCode="false"/>
</manifest>
"""


class RecordingRunner:
    """The real runner, recording every argv (to check that no password reaches one)."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, argv, cwd=None, env=None):
        self.calls.append([str(a) for a in argv])
        return tools.run(argv, cwd=cwd, env=env)


@pytest.fixture
def debug_log(tmp_path):
    """Everything tvmgen logs during the test, at DEBUG, in a file."""
    path = tmp_path / "tvmgen.log"
    handler = logging.FileHandler(path)
    logger = logging.getLogger("tvmgen")
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield path
    logger.removeHandler(handler)
    handler.close()
    logger.setLevel(old_level)


@pytest.fixture
def unsigned_apk(tmp_path) -> Path:
    """A real APK: aapt-packaged manifest, an aarch64 .so stored uncompressed, a compressed asset."""
    require_tools("aapt", "zipalign", "apksigner", "keytool", "aarch64-linux-gnu-gcc", files=(FRAMEWORK_RES,))
    work = tmp_path / "apk"
    work.mkdir()
    (work / "AndroidManifest.xml").write_text(MANIFEST)
    apk = work / "unsigned.apk"
    subprocess.run(
        ["aapt", "package", "-f", "-M", str(work / "AndroidManifest.xml"), "-I", str(FRAMEWORK_RES), "-F", str(apk)],
        check=True,
        capture_output=True,
    )
    (work / "model.c").write_text("int tvmgen_test_answer(void) { return 42; }\n")
    so = work / "libtvmgen_test.so"
    subprocess.run(
        [
            "aarch64-linux-gnu-gcc",
            "-shared",
            "-fPIC",
            "-O2",
            "-Wl,-z,max-page-size=16384",
            "-o",
            str(so),
            str(work / "model.c"),
        ],
        check=True,
        capture_output=True,
    )
    with zipfile.ZipFile(apk, "a") as z:
        # stored on a 16 KB boundary, as AGP 8.5.1+ lays it out: Android mmaps native libraries straight
        # from the APK (extractNativeLibs=false)
        write_page_aligned(z, "lib/arm64-v8a/libtvmgen_test.so", so.read_bytes())
        z.writestr(
            "assets/model/manifest.json",
            json.dumps({"name": "test", "platform": "android-arm64"}) * 20,
            compress_type=zipfile.ZIP_DEFLATED,
        )
    return apk


def write_page_aligned(z: zipfile.ZipFile, name: str, data: bytes, page: int = 16384) -> None:
    """A stored entry whose bytes start on a ``page`` boundary: padding in the local header's extra field,
    as AGP and zipalign -P 16 write it."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_STORED
    start = z.start_dir + 30 + len(name.encode()) + 4  # local header, name, the extra field's own 4 bytes
    pad = -start % page
    info.extra = struct.pack("<HH", 0xD935, pad) + bytes(pad)
    z.writestr(info, data)


def so_offset(apk: Path, name: str) -> int:
    """Where the entry's data starts in the file (after its local header)."""
    with zipfile.ZipFile(apk) as z:
        info = z.getinfo(name)
    with open(apk, "rb") as f:
        f.seek(info.header_offset + 26)
        n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    return info.header_offset + 30 + n + m


def test_real_debug_signing_path(unsigned_apk, tmp_path, monkeypatch, debug_log):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    runner = RecordingRunner()
    key = signing.debug_key(tools.Jdk(runner))
    assert key.keystore == tmp_path / "cfg" / "tvmgen" / "debug.keystore" and key.keystore.is_file()
    assert oct(key.keystore.stat().st_mode & 0o777) == "0o600"
    stamp = key.keystore.stat().st_mtime_ns
    assert signing.debug_key(tools.Jdk(runner)).keystore.stat().st_mtime_ns == stamp  # made once, then reused

    aligned = signing.zipalign(unsigned_apk, tmp_path / "aligned.apk", tool=tools.Zipalign(runner))
    signed = signing.sign(aligned, key, tmp_path / "app.apk", tool=tools.Apksigner(runner))
    result = signing.verify(signed, tool=tools.Apksigner(runner))
    assert result.verified, result
    assert result.schemes[2] and result.schemes[3] and not result.schemes[1] and result.signers == 1
    assert not list(tmp_path.glob("*.idsig")) and not list(tmp_path.glob(".*signing"))

    assert so_offset(signed, "lib/arm64-v8a/libtvmgen_test.so") % 16384 == 0  # kept on its 16 KB boundary
    assert subprocess.run(["zipalign", "-c", "-p", "4", str(signed)], capture_output=True).returncode == 0
    assert [r.ok for r in signing.check_pages(signed)] == [True]
    badging = tools.Aapt(runner).badging(signed)
    assert badging.package == "org.tvmgen.test" and badging.min_sdk == 24
    assert badging.abis == ["arm64-v8a"] and "android.permission.INTERNET" in badging.permissions

    keytool_calls = [c for c in runner.calls if c[0].endswith("keytool")]
    assert len(keytool_calls) == 1 and "-storepass:env" in keytool_calls[0]
    assert not any(a == signing.DEBUG_PASSWORD for c in runner.calls for a in c)


def test_real_release_signing_keeps_passwords_secret(unsigned_apk, tmp_path, monkeypatch, debug_log):
    secret = "Rel3ase-Pa55-9f3c"
    runner = RecordingRunner()
    made = signing.SigningKey(tmp_path / "release.keystore", "upload", secret, secret)
    signing.generate_key(made, dname="CN=tvmgen test,O=tvmgen", jdk=tools.Jdk(runner))
    monkeypatch.setenv("TVMGEN_KEYSTORE_PASSWORD", secret)
    monkeypatch.delenv("TVMGEN_KEY_PASSWORD", raising=False)
    key = signing.release_key(made.keystore, "upload")
    aligned = signing.zipalign(unsigned_apk, tmp_path / "aligned.apk", tool=tools.Zipalign(runner))
    signed = signing.sign(aligned, key, tmp_path / "release.apk", tool=tools.Apksigner(runner))
    assert signing.verify(signed, tool=tools.Apksigner(runner)).verified

    # a wrong password: a clear error, no APK, no temporary file left behind
    monkeypatch.delenv("TVMGEN_KEYSTORE_PASSWORD")
    wrong = signing.release_key(made.keystore, "upload", prompt=lambda *a, **k: "not-the-Pa55")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(signing.SigningError) as e:
        signing.sign(aligned, wrong, tmp_path / "wrong.apk", tool=tools.Apksigner(runner))
    assert "keystore password" in e.value.message and "wrong" in e.value.message
    assert "TVMGEN_KEYSTORE_PASSWORD" in e.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path / "wrong.apk").exists()

    # a wrong alias names the alias and how to list them
    with pytest.raises(signing.SigningError, match="no key named 'nope'"):
        signing.sign(
            aligned,
            signing.SigningKey(made.keystore, "nope", secret, secret),
            tmp_path / "x.apk",
            tool=tools.Apksigner(runner),
        )

    log_text = debug_log.read_text()
    assert "apksigner" in log_text and "keytool" in log_text  # the log did record the commands
    for password in (secret, "not-the-Pa55"):
        assert not any(password in a for c in runner.calls for a in c)
        assert password not in log_text
    assert "TVMGEN_KEYSTORE_PASSWORD" not in os.environ  # the scoped environment was restored


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


def test_zipalign_without_16k_pages_is_refused(unsigned_apk, tmp_path):
    """Debian's zipalign knows only -p, which means 4 KB pages: an APK whose library is off a 16 KB
    boundary is refused with the fix, never signed with its library on a 4 KB boundary."""
    moved = tmp_path / "moved.apk"
    with zipfile.ZipFile(unsigned_apk) as src, zipfile.ZipFile(moved, "w") as dst:
        for info in src.infolist():  # rewritten without the padding
            dst.writestr(info.filename, src.read(info), compress_type=info.compress_type)
    assert so_offset(moved, "lib/arm64-v8a/libtvmgen_test.so") % 16384 != 0
    tool = tools.Zipalign()
    if tool.page_size_option() != ["-p"]:
        pytest.skip(f"{tool.verify()} has -P: it aligns to 16 KB itself")
    with pytest.raises(TvmgenError, match="on 4 KB boundaries only") as e:
        signing.zipalign(moved, tmp_path / "aligned.apk", tool=tool)
    assert "libtvmgen_test.so" in e.value.message and "build-tools;35.0.0" in e.value.hint
    assert not (tmp_path / "aligned.apk").exists()


def test_check_pages_names_a_4k_library(tmp_path):
    """A library linked for 4 KB pages (NDK r27's default) is named, even when it is stored on a 16 KB boundary."""
    require_tools("aarch64-linux-gnu-gcc")
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    apk = tmp_path / "app.apk"
    with zipfile.ZipFile(apk, "w") as z:
        for page in (4096, 16384):
            so = tmp_path / f"lib{page}.so"
            subprocess.run(
                [
                    "aarch64-linux-gnu-gcc",
                    "-shared",
                    "-fPIC",
                    f"-Wl,-z,max-page-size={page}",
                    "-o",
                    str(so),
                    str(tmp_path / "a.c"),
                ],
                check=True,
            )
            write_page_aligned(z, f"lib/arm64-v8a/{so.name}", so.read_bytes())
    with pytest.raises(TvmgenError, match="1 of the 2 native libraries") as e:
        signing.check_pages(apk)
    assert "lib/arm64-v8a/lib4096.so (aarch64): p_align 0x1000" in e.value.message
    assert "lib16384.so" not in e.value.message and "max-page-size=16384" in e.value.hint
