"""Signing APKs: the debug key, release keys, zipalign, apksigner sign and verify.

Passwords never reach a command line or the log: keytool gets ``-storepass:env VAR`` and
apksigner ``--ks-pass env:VAR``, with the value set only in the child's environment.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.android.tools import Apksigner, Jdk, Zipalign
from tvmgen.core import binfmt
from tvmgen.core.errors import InputError, TvmgenError

log = logging.getLogger("tvmgen.android.signing")

STORE_PASSWORD_VAR = "TVMGEN_KEYSTORE_PASSWORD"
KEY_PASSWORD_VAR = "TVMGEN_KEY_PASSWORD"
# Android's documented debug key (what Android Studio makes): public values, debug builds only.
DEBUG_ALIAS = "androiddebugkey"
DEBUG_PASSWORD = "android"
DEBUG_DNAME = "CN=Android Debug,O=Android,C=US"


class SigningError(InputError):
    """A key cannot be used (wrong password, wrong alias, missing keystore)."""


@dataclass
class SigningKey:
    keystore: Path
    alias: str
    store_password: str = field(repr=False)
    key_password: str = field(repr=False)

    def env(self) -> dict[str, str]:
        """The passwords as the environment variables keytool and apksigner are told to read."""
        return {STORE_PASSWORD_VAR: self.store_password, KEY_PASSWORD_VAR: self.key_password}


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tvmgen"


def generate_key(key: SigningKey, dname: str = DEBUG_DNAME, validity_days: int = 10000, jdk: Jdk | None = None) -> Path:
    """Make a PKCS12 keystore holding one RSA key; written to a temporary name, then renamed."""
    jdk = jdk or Jdk()
    key.keystore.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{key.keystore.name}.", dir=key.keystore.parent)
    os.close(fd)
    os.unlink(tmp)  # keytool refuses to write into an existing (empty) file
    out = jdk.keytool_run(
        "-genkeypair",
        "-keystore",
        tmp,
        "-storetype",
        "PKCS12",
        "-alias",
        key.alias,
        "-storepass:env",
        STORE_PASSWORD_VAR,
        "-keypass:env",
        KEY_PASSWORD_VAR,
        "-keyalg",
        "RSA",
        "-keysize",
        "2048",
        "-validity",
        validity_days,
        "-dname",
        dname,
        "-noprompt",
        env=key.env(),
    )
    if out.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise TvmgenError(
            f"keytool could not create {key.keystore}: {(out.stdout + out.stderr).strip()[-500:]}",
            "check that the folder is writable; the log has the full command",
        )
    os.chmod(tmp, 0o600)
    os.replace(tmp, key.keystore)
    log.info("created keystore %s (alias %s)", key.keystore, key.alias)
    return key.keystore


def debug_key(jdk: Jdk | None = None) -> SigningKey:
    """The debug key in ~/.config/tvmgen/debug.keystore, made on first use and reused after.

    Reusing it matters: a phone refuses to update an app signed with a different key.
    """
    key = SigningKey(config_dir() / "debug.keystore", DEBUG_ALIAS, DEBUG_PASSWORD, DEBUG_PASSWORD)
    if not key.keystore.is_file():
        generate_key(key, jdk=jdk)
    return key


def release_key(keystore: str | Path, alias: str, prompt: Callable[..., str] | None = None) -> SigningKey:
    """A release key: passwords from TVMGEN_KEYSTORE_PASSWORD / TVMGEN_KEY_PASSWORD, else asked for.

    The key password defaults to the store password: PKCS12 stores (keytool's default since
    JDK 9, and Android Studio's) use one password for both.
    """
    keystore = Path(keystore)
    if not keystore.is_file():
        raise SigningError(
            f"keystore {keystore} does not exist",
            "pass the keystore file with --keystore (make one with: keytool -genkeypair -keystore F "
            "-alias A -keyalg RSA -keysize 2048 -validity 10000)",
        )
    store = os.environ.get(STORE_PASSWORD_VAR)
    if store is None:
        if prompt is None:
            if not sys.stdin.isatty():
                raise SigningError(
                    f"no password for {keystore}: {STORE_PASSWORD_VAR} is not set and there is no terminal to ask on",
                    f"set {STORE_PASSWORD_VAR} (and {KEY_PASSWORD_VAR} if the key "
                    "has its own password) in the environment",
                )
            import click

            prompt = click.prompt
        store = prompt(f"Password of keystore {keystore}", hide_input=True)
    key_password = os.environ.get(KEY_PASSWORD_VAR, store)
    return SigningKey(keystore, alias, store, key_password)


def zipalign(apk_in: str | Path, apk_out: str | Path, tool: Zipalign | None = None) -> Path:
    """Align stored entries to 4 bytes and uncompressed .so files to 16 KB pages, so that a phone with
    4 KB or 16 KB pages maps them from the APK in place (Google Play requires 16 KB for Android 15+).

    An APK already laid out that way (AGP 8.5.1 and later does it) is copied as it is: an older
    zipalign would move its libraries back to 4 KB boundaries. Must run before signing: v2/v3
    signatures cover the whole file, so aligning after breaks them.
    """
    apk_out = Path(apk_out)
    if binfmt.zip_aligned(Path(apk_in)):
        shutil.copyfile(apk_in, apk_out)
        return apk_out
    tool = tool or Zipalign()
    out = tool(*tool.page_size_option(), "-f", "4", apk_in, apk_out)
    if out.returncode != 0:
        apk_out.unlink(missing_ok=True)
        raise TvmgenError(
            f"zipalign failed on {apk_in}: {(out.stdout + out.stderr).strip()[-500:]}",
            "check that the input is a valid APK (zip); the log has the full command",
        )
    misplaced = [
        r
        for r in binfmt.archive_page_reports(apk_out)
        if r.zip_offset and not r.compressed and r.zip_offset % r.page_size
    ]
    if misplaced:
        apk_out.unlink(missing_ok=True)
        raise TvmgenError(
            f"{tool.verify()} placed {len(misplaced)} uncompressed native libraries on 4 KB boundaries only "
            f"({misplaced[0].summary()}); Android 15's 16 KB pages (and Google Play) need 16 KB",
            "use the zipalign of build-tools 35 or newer (it has -P 16): tvmgen doctor --install, or "
            "sdkmanager 'build-tools;35.0.0', and set TVMGEN_ZIPALIGN to it",
        )
    return apk_out


def check_pages(apk: Path) -> list[binfmt.PageReport]:
    """Every .so in ``apk`` checked for 16 KB pages; raises naming each library that is not ready."""
    reports = binfmt.archive_page_reports(apk)
    bad = [r for r in reports if not r.ok]
    if bad:
        raise TvmgenError(
            f"{len(bad)} of the {len(reports)} native libraries in {apk} are not ready for 16 KB pages "
            "(Android 15+, required by Google Play):\n" + "\n".join(f"  {r.summary()}" for r in bad),
            "link them with -Wl,-z,max-page-size=16384 (NDK r27: -DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON; r28+ "
            "does it by default) and keep them uncompressed and 16 KB-aligned (AGP 8.5.1+, or zipalign -P 16)",
        )
    return reports


# apksigner's messages for an unusable key → (cause, fix). {ks} and {alias} are filled in.
SIGN_FAILURES = [
    (
        r"keystore password was incorrect|Keystore was tampered with, or password was incorrect",
        "the keystore password for {ks} is wrong",
        f"set {STORE_PASSWORD_VAR} to the keystore's password (unset it to be asked instead)",
    ),
    (
        r"Cannot recover key|Failed to obtain key with alias|UnrecoverableKeyException|Given final block not properly padded",
        "the password of key '{alias}' in {ks} is wrong",
        f"set {KEY_PASSWORD_VAR} to the key's own password (it defaults to the keystore password)",
    ),
    (
        r"does not contain a key|No key with alias|not found in keystore",
        "keystore {ks} has no key named '{alias}'",
        "pass the right --key-alias; list the aliases with: keytool -list -keystore {ks}",
    ),
    (
        r"FileNotFoundException|No such file",
        "keystore {ks} cannot be read",
        "pass an existing keystore file with --keystore",
    ),
    (
        r"environment variable .* not specified",
        "a password variable was not passed to apksigner",
        f"set {STORE_PASSWORD_VAR}",
    ),
]


def sign(apk: str | Path, key: SigningKey, out: str | Path | None = None, tool: Apksigner | None = None) -> Path:
    """Sign ``apk`` (already zipaligned) with v2 and v3 signatures into ``out`` (default: in place).

    v1 (JAR) signing is off: it only serves Android < 7.0, and the apps' minSdk is 24 (7.0),
    where v2 is checked instead; leaving it out also keeps META-INF free of signature files.
    v4 is off too: it only serves `adb install --incremental`, and writes a stray .idsig file.
    The signed APK is written to a temporary name and renamed only on success.
    """
    tool = tool or Apksigner()
    apk = Path(apk)
    out = Path(out) if out else apk
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".signing", dir=out.parent)
    os.close(fd)
    try:
        res = tool(
            "sign",
            "--ks",
            key.keystore,
            "--ks-key-alias",
            key.alias,
            "--ks-pass",
            f"env:{STORE_PASSWORD_VAR}",
            "--key-pass",
            f"env:{KEY_PASSWORD_VAR}",
            "--v1-signing-enabled",
            "false",
            "--v2-signing-enabled",
            "true",
            "--v3-signing-enabled",
            "true",
            "--v4-signing-enabled",
            "false",
            "--out",
            tmp,
            apk,
            env=key.env(),
        )
        if res.returncode != 0:
            raise _sign_failure(res.stdout + res.stderr, key)
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    log.info("signed %s with %s (alias %s)", out, key.keystore, key.alias)
    return out


def _sign_failure(text: str, key: SigningKey) -> TvmgenError:
    for pattern, cause, fix in SIGN_FAILURES:
        if re.search(pattern, text):
            return SigningError(
                f"cannot sign: {cause.format(ks=key.keystore, alias=key.alias)}",
                fix.format(ks=key.keystore, alias=key.alias),
            )
    return TvmgenError(f"apksigner failed: {text.strip()[-800:]}", "the log has the full command and output")


@dataclass
class Verification:
    verified: bool
    schemes: dict[int, bool]
    signers: int
    errors: list[str]

    @classmethod
    def parse(cls, text: str, returncode: int) -> Verification:
        schemes = {int(v): r == "true" for v, r in re.findall(r"Verified using v(\d) scheme[^:]*: (true|false)", text)}
        m = re.search(r"Number of signers: (\d+)", text)
        return cls(
            verified=returncode == 0 and text.lstrip().startswith("Verifies"),
            schemes=schemes,
            signers=int(m.group(1)) if m else 0,
            errors=re.findall(r"(?m)^ERROR: (.*)$", text),
        )


def verify(apk: str | Path, tool: Apksigner | None = None) -> Verification:
    """apksigner verify --verbose: whether the APK verifies, and with which signature schemes."""
    tool = tool or Apksigner()
    res = tool("verify", "--verbose", apk)
    return Verification.parse(res.stdout + res.stderr, res.returncode)
