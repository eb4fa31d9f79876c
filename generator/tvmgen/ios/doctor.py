"""What `tvmgen doctor` says about iOS: Xcode, the iOS SDK, signing identities and devicectl on a
Mac; elsewhere one row saying this is not macOS (the project is rendered here, built on a Mac).
None of these decide doctor's exit code, which is about the Android APK."""

from __future__ import annotations

import platform

from tvmgen.core.toolchains import Check, check_tool
from tvmgen.ios import tools


def checks(runner: tools.Runner | None = None) -> list[Check]:
    if not tools.is_macos():
        return [
            Check(
                "Xcode (iOS)",
                False,
                False,
                detail=f"not macOS ({platform.system()}): `tvmgen rpc-app --platform "
                "ios-arm64` renders the Xcode project here and prints the commands that build it on a Mac",
            )
        ]
    signing = tools.CodeSigning(runner)

    def identities() -> str:
        found = signing.identities()
        if not found:
            from tvmgen.core.errors import ToolMissingError

            raise ToolMissingError("no valid code-signing identity in the keychain", signing.install)
        teams = tools.team_ids(found)
        return f"{len(found)} valid: {'; '.join(found)}" + (f" (team ids: {', '.join(teams)})" if teams else "")

    return [
        check_tool("Xcode", tools.Xcodebuild(runner), False),
        check_tool("iOS SDK", tools.IosSdk(runner), False),
        check_tool("code-signing identities", signing, False, version=lambda: "", usable=identities),
        check_tool("devicectl", tools.Devicectl(runner), False, version=lambda: ""),
    ]
