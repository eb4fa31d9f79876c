"""What `tvmgen doctor --install` fetches, from where, with which SHA-256, and where it goes.

One table: every URL and checksum tvmgen downloads lives here. The versions are the ones the
app templates name (android/project.py: android_context): Gradle 8.7, AGP 8.6.1, compileSdk and
targetSdk 35 (Google Play requires targetSdk 35 since 31 August 2025), build-tools 35.0.0, NDK 27.2.12479018, CMake 3.22.1, and the TVM release tvmgen pins.

Where the checksums come from:
- Android command-line tools 11076708 (linux and mac): the SHA-256 values Google lists on
  developer.android.com/studio ("Command line tools only") and in its repository XML; the same
  values are pinned by Homebrew's android-commandlinetools cask and many CI images.
- gradle-8.7-bin.zip: https://services.gradle.org/distributions/gradle-8.7-bin.zip.sha256
  (also on https://gradle.org/release-checksums/).
- The SDK packages (platform, build-tools, NDK, CMake) come through sdkmanager, which checks
  each archive against the checksum in Google's repository XML itself.
- The TVM source comes through git: the tag is pinned, and git checks every object by its hash.
  tvmgen pins no commit id for the tag (none was at hand to copy from a published source).

Overrides (a mirror, an offline copy, or the tests' local server):
- TVMGEN_DATA_DIR: where everything goes (default $XDG_DATA_HOME/tvmgen, ~/.local/share/tvmgen).
- TVMGEN_DOWNLOAD_MIRROR: a base URL; each file is fetched from <mirror>/<file name> and
  checked against the same SHA-256.
- TVMGEN_DOWNLOADS: a JSON file {"<name>": {"url": ..., "sha256": ...}, "tvm-source":
  {"url": ..., "tag": ...}} replacing any field of any entry below.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, replace
from pathlib import Path

from tvmgen.core.errors import InputError
from tvmgen.core.fetch import data_dir

# The versions the Android templates build with (the single place tvmgen decides them).
GRADLE_VERSION = "8.7"
# AGP 8.6 is the first to support compileSdk 35 (it needs Gradle 8.7+); build-tools 35 has zipalign -P 16.
AGP_VERSION = "8.6.1"
COMPILE_SDK = 35
BUILD_TOOLS = "35.0.0"
NDK_VERSION = "27.2.12479018"
CMAKE_VERSION = "3.22.1"
TVM_TAG = "v0.27.0"
TVM_VERSION = "0.27.0"

SDK_PACKAGES = (
    f"platforms;android-{COMPILE_SDK}",
    f"build-tools;{BUILD_TOOLS}",
    f"ndk;{NDK_VERSION}",
    f"cmake;{CMAKE_VERSION}",
)


@dataclass(frozen=True)
class Download:
    name: str  # the key in this table and in TVMGEN_DOWNLOADS
    what: str  # for people
    url: str
    sha256: str | None  # None: no published value known; refused unless TVMGEN_DOWNLOADS gives one

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class GitSource:
    name: str
    what: str
    url: str
    tag: str


_CMDLINE_TOOLS = {
    "Linux": Download(
        "cmdline-tools",
        "Android SDK command-line tools 12.0 (sdkmanager)",
        "https://dl.google.com/android/repository/commandlinetools-linux-11076708_latest.zip",
        "2d2d50857e4eb553af5a6dc3ad507a17adf43d115264b1afc116f95c92e5e258",
    ),
    "Darwin": Download(
        "cmdline-tools",
        "Android SDK command-line tools 12.0 (sdkmanager)",
        "https://dl.google.com/android/repository/commandlinetools-mac-11076708_latest.zip",
        "7bc5c72ba0275c80a8f19684fb92793b83a6b5c94d4d179fc5988930282d7e64",
    ),
}

_GRADLE = Download(
    "gradle",
    f"Gradle {GRADLE_VERSION} (binary distribution)",
    f"https://services.gradle.org/distributions/gradle-{GRADLE_VERSION}-bin.zip",
    "544c35d6bd849ae8a5ed0bcea39ba677dc40f49df7d1835561582da2009b961d",
)

_TVM = GitSource(
    "tvm-source", f"the TVM source tree ({TVM_TAG}, with its submodules)", "https://github.com/apache/tvm", TVM_TAG
)


def _overrides() -> dict:
    path = os.environ.get("TVMGEN_DOWNLOADS")
    if not path:
        return {}
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(
            f"TVMGEN_DOWNLOADS={path} cannot be read as JSON: {e}",
            'write {"gradle": {"url": "...", "sha256": "..."}, ...} there, or unset it',
        ) from e
    if not isinstance(table, dict):
        raise InputError(f"TVMGEN_DOWNLOADS={path} is not a JSON object", "map entry names to {url, sha256}")
    return table


def _resolved(entry):
    fields = _overrides().get(entry.name, {})
    allowed = set(entry.__dataclass_fields__) - {"name", "what"}
    if not isinstance(fields, dict) or set(fields) - allowed:
        raise InputError(
            f"TVMGEN_DOWNLOADS: {entry.name} must map to an object with fields {sorted(allowed)}, not {fields!r}",
            "fix the JSON file, or unset TVMGEN_DOWNLOADS",
        )
    entry = replace(entry, **fields)
    mirror = os.environ.get("TVMGEN_DOWNLOAD_MIRROR")
    if mirror and isinstance(entry, Download) and "url" not in fields:
        entry = replace(entry, url=mirror.rstrip("/") + "/" + entry.file_name)
    return entry


def cmdline_tools() -> Download:
    system = platform.system()
    if system not in _CMDLINE_TOOLS:
        raise InputError(
            f"tvmgen installs the Android command-line tools on Linux and macOS, not {system}",
            "install Android Studio (or the command-line tools) yourself and set ANDROID_HOME",
        )
    return _resolved(_CMDLINE_TOOLS[system])


def gradle() -> Download:
    return _resolved(_GRADLE)


def tvm_source() -> GitSource:
    return _resolved(_TVM)


# ----------------------------------------------------------------------------- where things go


def gradle_home() -> Path:
    return data_dir() / "gradle" / f"gradle-{GRADLE_VERSION}"


def tvm_dir() -> Path:
    return data_dir() / f"tvm-{TVM_VERSION}"


def tvm_source_dir() -> Path | None:
    """The TVM source tree the app build uses: $TVM_SOURCE_DIR (yours wins), else tvmgen's clone, else None."""
    if os.environ.get("TVM_SOURCE_DIR"):
        return Path(os.environ["TVM_SOURCE_DIR"])
    return tvm_dir() if tvm_dir().is_dir() else None


def downloads_dir() -> Path:
    """Archives in flight (<name>.part) and, for a manual download, where to put the file."""
    return data_dir() / "downloads"


def is_ours(path: str | Path) -> bool:
    """Whether ``path`` lies in tvmgen's data directory (a tool tvmgen downloaded)."""
    try:
        Path(path).resolve().relative_to(data_dir().resolve())
        return True
    except ValueError:
        return False


def origin(path: str | Path, env_vars: tuple[str, ...] = ()) -> str:
    """Where a found tool came from, for `tvmgen doctor`: tvmgen's download, an env var, PATH, or a known place."""
    if not path:
        return ""
    if is_ours(path):
        return "tvmgen download"
    resolved = Path(path).resolve()
    for var in env_vars:
        value = os.environ.get(var)
        if value:
            try:
                resolved.relative_to(Path(value).resolve())
                return f"yours (${var})"
            except ValueError:
                pass
    parent = str(Path(path).parent)
    if parent in os.environ.get("PATH", "").split(os.pathsep):
        return "yours (PATH)"
    return "yours"
