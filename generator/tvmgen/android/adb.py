"""Talking to phones over adb: list and choose a device, install, start, logcat, pull, reverse.

adb's known failure strings become a cause and the exact fix. adb often exits 0 even when
the phone reports a failure, so the output is read, not only the exit code.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tvmgen.android.tools import Adb
from tvmgen.core.errors import InputError, TvmgenError
from tvmgen.core.toolchains import ANDROID_MIN_API


class DeviceError(TvmgenError):
    """The phone refused or failed an operation (install, start, pull)."""

    exit_code = 6


# `adb devices` states; "no permissions (...)" holds spaces, so states are matched, not split.
STATES = (
    "device",
    "unauthorized",
    "offline",
    "no permissions",
    "authorizing",
    "connecting",
    "bootloader",
    "recovery",
    "sideload",
    "host",
    "rescue",
)


@dataclass
class Device:
    serial: str
    state: str
    model: str = ""
    product: str = ""
    device: str = ""
    transport_id: str = ""
    usb: str = ""

    @property
    def name(self) -> str:
        return f"{self.serial} ({self.model.replace('_', ' ')})" if self.model else self.serial


def parse_devices(text: str) -> list[Device]:
    """Parse `adb devices -l` (adb 29 and 34 print the same layout)."""
    found = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("List of devices", "*", "adb server", "adb: ")):
            continue
        serial, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        state = next((s for s in STATES if rest == s or rest.startswith(s + " ")), rest.split(" ")[0])
        if state == "no permissions":  # "no permissions (missing udev rules? ...); see [url]"
            rest = re.sub(r"^no permissions.*?\]\s*|^no permissions(\s+\(.*?\))?\s*", "", rest)
        else:
            rest = rest[len(state) :]
        props = dict(re.findall(r"(\w+):(\S+)", rest))
        found.append(
            Device(
                serial,
                state,
                props.get("model", ""),
                props.get("product", ""),
                props.get("device", ""),
                props.get("transport_id", ""),
                props.get("usb", ""),
            )
        )
    return found


def devices(adb: Adb | None = None) -> list[Device]:
    adb = adb or Adb()
    out = adb("devices", "-l")
    if out.returncode != 0:
        raise DeviceError(
            f"adb devices failed: {(out.stdout + out.stderr).strip()[-500:]}",
            "restart the adb server: adb kill-server && adb start-server",
        )
    return parse_devices(out.stdout)


def choose_device(serial: str | None = None, adb: Adb | None = None) -> Phone:
    """The phone to use: the one named by --serial, or the only one attached."""
    adb = adb or Adb()
    attached = devices(adb)
    if serial:
        matching = [d for d in attached if d.serial == serial]
        if not matching:
            listed = ", ".join(d.name for d in attached) or "none"
            raise InputError(
                f"no device with serial {serial} (attached: {listed})", "pass one of the serials `adb devices -l` lists"
            )
        device = matching[0]
    else:
        if not attached:
            raise InputError(
                "no Android device attached",
                "connect a phone by USB with USB debugging on (Settings → Developer options), "
                "or start an emulator; `adb devices -l` should list it",
            )
        if len(attached) > 1:
            listed = "\n    ".join(f"{d.name}: {d.state}" for d in attached)
            raise InputError(f"{len(attached)} devices attached:\n    {listed}", "pass --serial SERIAL to choose one")
        device = attached[0]
    if device.state == "unauthorized":
        raise InputError(
            f"{device.name} has not authorized this computer",
            "unlock the phone and accept the RSA prompt on the phone ('Allow USB debugging'), then try again",
        )
    if device.state == "no permissions":
        raise InputError(
            f"{device.serial}: no permission to open the USB device",
            "add a udev rule for the phone (Debian: apt-get install android-sdk-platform-tools-common) "
            "and replug it, or run adb as root",
        )
    if device.state != "device":
        raise InputError(
            f"{device.name} is {device.state}",
            "replug the USB cable or reboot the phone; `adb devices -l` should say 'device'",
        )
    return Phone(device, adb)


# INSTALL_* codes → (cause, fix). {serial} and {package} are filled in.
INSTALL_FAILURES = {
    "INSTALL_FAILED_UPDATE_INCOMPATIBLE": (
        "the phone already has {package} signed with a different key (a debug build from another machine, "
        "or a release build over a debug one)",
        "uninstall it first (this deletes its data): adb -s {serial} uninstall {package}",
    ),
    "INSTALL_FAILED_INSUFFICIENT_STORAGE": (
        "the phone has not enough free storage for the APK",
        "free space on the phone (Settings → Storage), or remove an old build: adb -s {serial} uninstall {package}",
    ),
    "INSTALL_FAILED_NO_MATCHING_ABIS": (
        "the APK has no native libraries for this phone's CPU",
        "see the phone's ABI with `adb -s {serial} shell getprop ro.product.cpu.abi` and compile for it: "
        "--platform android-arm64 (arm64-v8a), android-armv7 (armeabi-v7a) or android-x86_64 (emulator)",
    ),
    "INSTALL_FAILED_VERSION_DOWNGRADE": (
        "the phone has a newer versionCode of {package} than this APK",
        "uninstall the newer one (this deletes its data): adb -s {serial} uninstall {package}, "
        "or raise the app's versionCode",
    ),
    "INSTALL_PARSE_FAILED_NO_CERTIFICATES": (
        "the APK is not signed, or was changed after signing (e.g. zipaligned after apksigner)",
        "zipalign first, then sign: tvmgen's build does both in that order; check with apksigner verify --verbose",
    ),
    "INSTALL_FAILED_OLDER_SDK": (
        f"the phone's Android is older than the app's minSdk ({ANDROID_MIN_API}, Android 7.0)",
        f"use a phone or emulator with Android 7.0 (API {ANDROID_MIN_API}) or newer",
    ),
}


@dataclass
class Phone:
    """One chosen device; every verb passes -s SERIAL so a second phone plugged in changes nothing."""

    device: Device
    adb: Adb

    @property
    def serial(self) -> str:
        return self.device.serial

    def _adb(self, *args):
        return self.adb("-s", self.serial, *args)

    def install(self, apk: str | Path, package: str | None = None) -> None:
        """adb install -r (replace, keeping the app's data). ``package`` only improves error messages."""
        out = self._adb("install", "-r", apk)
        text = out.stdout + out.stderr
        m = re.search(r"Failure \[(\w+)(?::\s*(.*?))?\]", text) or re.search(r"\b(INSTALL_\w+)", text)
        if m is None and out.returncode == 0 and "Success" in text:
            return
        code = m.group(1) if m else ""
        detail = m.group(2) if m and m.lastindex and m.lastindex >= 2 and m.group(2) else ""
        named = re.search(r"[Pp]ackage ([\w.]+)", detail)
        pkg = package or (named.group(1) if named else "<package>")
        if code in INSTALL_FAILURES:
            cause, fix = INSTALL_FAILURES[code]
            raise DeviceError(
                f"cannot install {Path(apk).name} on {self.device.name}: {code}: "
                + cause.format(serial=self.serial, package=pkg),
                fix.format(serial=self.serial, package=pkg),
            )
        raise DeviceError(
            f"cannot install {Path(apk).name} on {self.device.name}: {text.strip()[-500:]}",
            f"see the phone's log: adb -s {self.serial} logcat -d -s PackageManager",
        )

    def start(self, component: str, extras: dict | None = None, fresh: bool = False) -> None:
        """am start -n package/activity, with extras as --es (str), --ei (int), --ez (bool), --ef (float);
        ``fresh``: the app's process stopped first (-S), so a run still going in it is not joined."""
        args = ["shell", "am", "start", *(["-S"] if fresh else []), "-n", component]
        for k, v in (extras or {}).items():
            flag = (
                "--ez"
                if isinstance(v, bool)
                else "--ei"
                if isinstance(v, int)
                else "--ef"
                if isinstance(v, float)
                else "--es"
            )
            value = str(v).lower() if isinstance(v, bool) else str(v)
            args += [flag, shlex.quote(k), shlex.quote(value)]  # the phone's shell joins the words again
        out = self._adb(*args)
        text = out.stdout + out.stderr
        m = re.search(r"(?m)^Error: (.*)$", text)
        if m or out.returncode != 0:
            raise DeviceError(
                f"cannot start {component} on {self.device.name}: {m.group(1) if m else text.strip()}",
                "check the package and activity names (aapt dump badging APK shows "
                "launchable-activity) and that the app is installed",
            )

    def logcat(self, tag: str | None = None, since: datetime | str | None = None) -> list[str]:
        """The log so far (-d), in threadtime format; only ``tag`` when given; only lines after ``since``."""
        args = ["logcat", "-d", "-v", "threadtime"]
        if since is not None:
            args += ["-T", since.strftime("%m-%d %H:%M:%S.000") if isinstance(since, datetime) else since]
        if tag:
            args += ["-s", tag]
        out = self._adb(*args)
        if out.returncode != 0:
            raise DeviceError(
                f"adb logcat failed on {self.device.name}: {out.stderr.strip()[-500:]}",
                "check the phone is still attached: adb devices -l",
            )
        return [ln for ln in out.stdout.splitlines() if ln.strip() and not ln.startswith("--------- beginning of")]

    def properties(self) -> dict[str, str]:
        """What the QA report shows of the phone, from getprop: model, SoC, Android version, ABI, GPU driver."""
        out = self._adb("shell", "getprop")
        if out.returncode != 0:
            raise DeviceError(
                f"adb shell getprop failed on {self.device.name}: {out.stderr.strip()[-500:]}",
                "check the phone is still attached: adb devices -l",
            )
        props = dict(re.findall(r"(?m)^\[([^\]\n]+)\]: \[([^\]\n]*)\]$", out.stdout))
        wanted = {
            "model": "ro.product.model",
            "manufacturer": "ro.product.manufacturer",
            "soc": "ro.soc.model",  # Android 12+
            "board": "ro.board.platform",
            "android": "ro.build.version.release",
            "sdk": "ro.build.version.sdk",
            "abi": "ro.product.cpu.abi",
            "gpu": "ro.hardware.egl",  # the GLES/Vulkan driver's name (mali, adreno, ...)
        }
        return {key: props[prop] for key, prop in wanted.items() if props.get(prop)}

    def pull(self, remote: str, local: str | Path) -> Path:
        out = self._adb("pull", remote, local)
        if out.returncode != 0:
            text = (out.stdout + out.stderr).strip()
            hint = (
                "the path must be readable by adb's shell user: app-private files need "
                f"`adb -s {self.serial} shell run-as PACKAGE cat FILE` or a path under /sdcard"
            )
            raise DeviceError(f"cannot pull {remote} from {self.device.name}: {text[-500:]}", hint)
        return Path(local)

    def reverse(self, port: int) -> None:
        """adb reverse tcp:P tcp:P: the phone's localhost:P reaches this machine's port P over USB."""
        out = self._adb("reverse", f"tcp:{port}", f"tcp:{port}")
        if out.returncode != 0:
            raise DeviceError(
                f"adb reverse tcp:{port} failed on {self.device.name}: {(out.stdout + out.stderr).strip()[-500:]}",
                "adb reverse needs Android 5.0+ over USB; for Wi-Fi use the tracker or proxy address",
            )
