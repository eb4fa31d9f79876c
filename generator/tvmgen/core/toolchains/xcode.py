"""The Mac tools: xcrun (the static library iOS apps link), and what an iOS app build needs, one class
each: ``verify()`` finds the tool or says how to get it.

They exist only on macOS with Xcode; elsewhere ``verify()`` raises a ToolMissingError that says
"not macOS" and what finishes the job on a Mac. Every command goes through the tool's runner (the seam,
which tests replace with recorded output).
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from tvmgen.core.errors import ToolMissingError, TvmgenError
from tvmgen.core.toolchains.seam import Tool, which

XCODE_INSTALL = (
    "install Xcode from the App Store, then: sudo xcode-select -s /Applications/Xcode.app && xcodebuild -runFirstLaunch"
)


def is_macos() -> bool:
    return platform.system() == "Darwin"


class MacTool(Tool):
    """A tool that exists only on macOS, found on PATH (``command``) and checked with ``probe``."""

    command = "xcrun"
    probe: tuple[str, ...] = ()  # argv run by verify(); a non-zero exit means unusable
    install = XCODE_INSTALL

    def _find(self) -> Path:
        if not is_macos():
            raise ToolMissingError(
                f"not macOS ({platform.system()}): {self.name} runs only on a Mac with Xcode",
                "copy the rendered project to a Mac and run the printed commands there",
            )
        found = which(self.command)
        if found is None:
            raise ToolMissingError(f"{self.command} not found: {self.name} comes with Xcode", self.install)
        if self.probe:
            proc = self.runner([str(found), *self.probe])
            if proc.returncode != 0:
                raise ToolMissingError(
                    f"{self.name} is not usable: {(proc.stderr or proc.stdout).strip()[-300:]}", self.install
                )
        return found

    def output(self, *args: str) -> str:
        proc = self.runner([str(self.verify()), *args])
        if proc.returncode != 0:
            raise ToolMissingError(
                f"{self.command} {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-300:]}", self.install
            )
        return proc.stdout


class Xcodebuild(MacTool):
    name = "Xcode (xcodebuild)"
    command = "xcodebuild"
    probe = ("-version",)

    def version(self) -> str:
        """'15.4 (15F31d)' from `xcodebuild -version`."""
        text = self.output("-version")
        m = re.search(r"Xcode\s+(\S+)", text)
        build = re.search(r"Build version\s+(\S+)", text)
        return (m.group(1) if m else text.strip()) + (f" ({build.group(1)})" if build else "")

    def build_app(self, project: Path, team_id: str, tvm_source_dir: str, configuration: str = "Release") -> Path:
        """xcodebuild the app for devices (signed with the team's automatic profile); the .app's path."""
        argv = build_argv(project, team_id, tvm_source_dir, configuration)
        proc = self.runner([str(self.verify()), *argv[1:]], cwd=project)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            hint = "see the log file for xcodebuild's full output"
            if "No Account for Team" in tail or "requires a development team" in tail or "No profiles for" in tail:
                hint = (
                    "sign in to the team in Xcode > Settings > Accounts (automatic signing needs it), and check "
                    "--team-id; `security find-identity -v -p codesigning` lists your identities"
                )
            raise TvmgenError(f"xcodebuild failed (exit {proc.returncode}):\n{tail}", hint)
        app = project / "build" / f"{configuration}-iphoneos" / "TvmgenApp.app"
        if not app.is_dir():
            raise TvmgenError(f"xcodebuild finished but {app} is missing", "see the log file for xcodebuild's output")
        return app


def build_argv(project: Path, team_id: str, tvm_source_dir: str, configuration: str = "Release") -> list[str]:
    """The xcodebuild command line (also printed for a Mac when it cannot run here)."""
    return [
        "xcodebuild",
        "-project",
        str(project / "TvmgenApp.xcodeproj"),
        "-target",
        "TvmgenApp",
        "-configuration",
        configuration,
        "-sdk",
        "iphoneos",
        "-allowProvisioningUpdates",
        f"DEVELOPMENT_TEAM={team_id}",
        f"TVM_SOURCE_DIR={tvm_source_dir}",
        "SYMROOT=" + str(project / "build"),
        "build",
    ]


class IosSdk(MacTool):
    name = "iOS SDK"
    probe = ("--sdk", "iphoneos", "--show-sdk-version")
    install = "install Xcode's iOS platform: xcodebuild -downloadPlatform iOS"

    def version(self) -> str:
        return self.output("--sdk", "iphoneos", "--show-sdk-version").strip()


IDENTITY_RE = re.compile(r'^\s*\d+\)\s+([0-9A-F]{40})\s+"([^"]+)"', re.M)


class CodeSigning(MacTool):
    """`security find-identity -v -p codesigning`: the signing identities in the keychain."""

    name = "code-signing identities"
    command = "security"
    install = "sign in with your Apple ID in Xcode > Settings > Accounts and create an Apple Development certificate"

    def identities(self) -> list[str]:
        return [name for _sha, name in IDENTITY_RE.findall(self.output("find-identity", "-v", "-p", "codesigning"))]


def team_ids(identities: list[str]) -> list[str]:
    """The team ids in identity names such as 'Apple Development: Jane Doe (AB12CD34EF)'."""
    return sorted({m.group(1) for name in identities for m in [re.search(r"\(([A-Z0-9]{10})\)\s*$", name)] if m})


class Devicectl(MacTool):
    """`xcrun devicectl` (Xcode 15+): installs and launches apps on a connected iPhone/iPad."""

    name = "devicectl"
    probe = ("--find", "devicectl")
    install = "update to Xcode 15 or newer (devicectl replaced ios-deploy)"

    def install_app(self, app: Path, device: str) -> None:
        xcrun = str(self.verify())
        proc = self.runner([xcrun, "devicectl", "device", "install", "app", "--device", device, str(app)])
        if proc.returncode != 0:
            raise TvmgenError(
                f"installing on {device} failed: {(proc.stderr or proc.stdout).strip()[-1000:]}",
                "unlock the device, trust this Mac, and turn on Developer Mode (Settings > Privacy & "
                "Security); `xcrun devicectl list devices` shows what is connected",
            )

    def launch(self, bundle_id: str, device: str) -> None:
        proc = self.runner(
            [str(self.verify()), "devicectl", "device", "process", "launch", "--device", device, bundle_id]
        )
        if proc.returncode != 0:
            raise TvmgenError(
                f"launching {bundle_id} failed: {(proc.stderr or proc.stdout).strip()[-1000:]}",
                "trust the developer certificate on the device: Settings > General > VPN & Device Management",
            )


class Xcode(Tool):
    """xcrun, for the static library iOS apps link. Only on macOS."""

    name = "xcrun (Xcode command line tools)"

    def _find(self) -> Path:
        found = which("xcrun")
        if not is_macos() or found is None:
            raise ToolMissingError(
                "Xcode is not available on this machine (xcrun not found)",
                "run the printed libtool command on a Mac with Xcode installed",
            )
        return found
