"""Rows of `tvmgen doctor`: whether a tool was found and works, its version and where it came from."""

from __future__ import annotations

from dataclasses import dataclass

from tvmgen.core.errors import TvmgenError


@dataclass
class Check:
    """One row of `tvmgen doctor`: a tool, whether it was found and works, and the fix."""

    name: str
    found: bool
    usable: bool
    version: str = ""
    path: str = ""
    detail: str = ""
    fix: str = ""
    required: bool = False  # needed by `tvmgen app` to build an APK
    source: str = ""  # where it came from: "yours ($ANDROID_HOME)", "yours (PATH)", "tvmgen download", ...


def check_tool(name: str, tool, required: bool, version=None, usable=None, origin=None) -> Check:
    """Run verify() (and the version/usable probes); a ToolMissingError becomes a failed check with its fix.
    ``origin(path)`` says where the tool came from (the doctor's "from" column)."""
    try:
        path = tool.verify()
    except TvmgenError as e:
        return Check(name, False, False, fix=e.hint or "", detail=e.message, required=required)
    source = origin(path) if origin else ""
    ver = ""
    try:
        ver = (version or tool.version)() or ""
        detail = usable() if usable else ""
    except TvmgenError as e:
        return Check(name, True, False, ver, str(path), e.message, e.hint or "", required, source)
    return Check(name, True, True, ver, str(path), detail or "", required=required, source=source)
