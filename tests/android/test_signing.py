"""APK signing: apksigner's argv and the keys' passwords (never in an argv or the log), then a real APK
built, aligned, signed and verified with Debian's aapt, zipalign and apksigner, and its native libraries'
16 KB pages checked. The real-tool tests skip when those tools are missing and fail under CI=true.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from tools_support import FakeRunner, fake, require_tools
from tvmgen.android import signing, tools
from tvmgen.core.errors import InputError, TvmgenError

FRAMEWORK_RES = Path("/usr/share/android-framework-res/framework-res.apk")


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
