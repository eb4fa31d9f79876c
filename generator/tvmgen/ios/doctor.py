"""What `tvmgen doctor` says about iOS: Xcode, the iOS SDK, signing identities and devicectl on a
Mac; elsewhere one row saying this is not macOS (the project is rendered here, built on a Mac).
None of these decide doctor's exit code, which is about the Android APK."""

from __future__ import annotations

import platform

from tvmgen.core.toolchains import Check, Runner, check_tool, xcode


def checks(runner: Runner | None = None) -> list[Check]:
    if not xcode.is_macos():
        return [
            Check(
                "Xcode (iOS)",
                False,
                False,
                detail=f"not macOS ({platform.system()}): `tvmgen rpc-app --platform "
                "ios-arm64` renders the Xcode project here and prints the commands that build it on a Mac",
            )
        ]
    signing = xcode.CodeSigning(runner)

    def identities() -> str:
        found = signing.identities()
        if not found:
            from tvmgen.core.errors import ToolMissingError

            raise ToolMissingError("no valid code-signing identity in the keychain", signing.install)
        teams = xcode.team_ids(found)
        return f"{len(found)} valid: {'; '.join(found)}" + (f" (team ids: {', '.join(teams)})" if teams else "")

    return [
        check_tool("Xcode", xcode.Xcodebuild(runner), False),
        check_tool("iOS SDK", xcode.IosSdk(runner), False),
        check_tool("code-signing identities", signing, False, version=lambda: "", usable=identities),
        check_tool("devicectl", xcode.Devicectl(runner), False, version=lambda: ""),
    ]
