"""The Android tools, one class each: ``verify()`` finds the tool or says how to install it.

Lookup order: the tool's environment variable (JAVA_HOME, ANDROID_HOME, ...), then the SDK
`tvmgen doctor --install` put in tvmgen's data directory, then PATH, then known install places
(Debian's /usr/lib/android-sdk, Android Studio's ~/Android/Sdk). They are core.toolchains Tools: every
command goes through the seam (``toolchains.run``), or through the runner a test passes instead. They stay
in this layer because their lookup and install hints use the SDK versions android.downloads pins.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.android import downloads
from tvmgen.android.downloads import BUILD_TOOLS, COMPILE_SDK
from tvmgen.core import fetch, toolchains
from tvmgen.core.errors import ToolMissingError

log = logging.getLogger("tvmgen.android")

# The SDK platform the app templates compile against (COMPILE_SDK, BUILD_TOOLS: android.downloads);
# minSdk is toolchains.ANDROID_MIN_API (24).
INSTALL_HINT = "tvmgen doctor --install"
SDK_ENV_VARS = ("ANDROID_HOME", "ANDROID_SDK_ROOT")
# Debian's packages (aapt, zipalign, apksigner, adb) install here; Android Studio's SDK lives in the home dir.
KNOWN_SDK_PLACES = (
    Path("/usr/lib/android-sdk"),
    Path.home() / "Android" / "Sdk",
    Path.home() / "Library" / "Android" / "sdk",
)

Runner = toolchains.Runner


def run(argv: list, cwd: str | Path | None = None, env: dict[str, str] | None = None) -> toolchains.CompletedProcess:
    """toolchains.run with extra environment variables, never raising on the exit code.

    Callers read the output themselves: adb and apksigner failures each have a known cause and fix.
    Only the names of ``env`` are logged.
    """
    return toolchains.run(argv, cwd=cwd, check=False, env=env)


def sdk_root() -> Path | None:
    """The Android SDK: $ANDROID_HOME, $ANDROID_SDK_ROOT, tvmgen's download, then the known places."""
    return _chosen_sdk() or next((p for p in KNOWN_SDK_PLACES if p.is_dir()), None)


def _chosen_sdk() -> Path | None:
    """The SDK named by the environment, else the one tvmgen installed; None when neither."""
    root = toolchains.env_dir(SDK_ENV_VARS, "an Android SDK (the folder holding platforms/ and build-tools/)")
    if root is not None:
        return root
    ours = fetch.sdk_dir()
    return ours if (ours / "platforms").is_dir() or (ours / "build-tools").is_dir() else None


def _version_key(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.-]", name))


def version_at_least(version: str, minimum: str) -> bool:
    """'8.10.2' >= '8.7' compares numerically, part by part."""
    return _version_key(version) >= _version_key(minimum)


class AndroidTool(toolchains.Tool):
    """A tool found as a program: env var, PATH, then SDK-relative and known places.

    Subclasses set ``commands`` (names on PATH), ``sdk_globs`` (relative to the SDK root,
    newest match wins), ``install`` (the command that installs it) and ``version_argv``/``version_re``.
    """

    sdk_globs: tuple[str, ...] = ()

    def _find(self) -> Path:
        # $TOOL_VAR, then the SDK that $ANDROID_HOME names (or tvmgen's), then PATH, then the known SDK places.
        found = self._from_env_or_path()
        if found is None:
            chosen = _chosen_sdk()
            found = self._from_sdk([chosen] if chosen else [])
        if found is None:
            found = self._from_env_or_path(*self.commands) or self._from_sdk(KNOWN_SDK_PLACES)
        if found is None:
            where = f"${self.env_var}, " if self.env_var else ""
            raise ToolMissingError(
                f"{self.name} not found (looked in {where}PATH, $ANDROID_HOME and {KNOWN_SDK_PLACES[0]})",
                self.fix(),
            )
        return found

    def _from_sdk(self, roots) -> Path | None:
        for root in roots:
            for pattern in self.sdk_globs:
                hits = sorted(root.glob(pattern), key=lambda p: _version_key(p.parent.name))
                if hits:
                    return hits[-1]
        return None


class BuildTool(AndroidTool):
    """A program of the SDK's build-tools, which Debian packages under the same name: its environment
    variable (TVMGEN_<NAME>), PATH name, SDK place and install command follow from ``name``."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.env_var = f"TVMGEN_{cls.name.upper()}"
        cls.commands = (cls.name,)
        cls.sdk_globs = (f"build-tools/*/{cls.name}",)
        cls.install = f"apt-get install {cls.name} (or sdkmanager 'build-tools;{BUILD_TOOLS}')"


class Aapt(BuildTool):
    name = "aapt"
    version_argv = ("version",)
    version_re = r"Android Asset Packaging Tool,? v?(\S+)"

    def badging(self, apk: str | Path) -> Badging:
        """What the phone will read from the APK: package, versions, SDK levels, ABIs, permissions."""
        out = self("dump", "badging", apk)
        if out.returncode != 0:
            raise ToolMissingError(
                f"aapt cannot read {apk}: {out.stderr.strip()}",
                "check that the file is an APK (a zip with a binary AndroidManifest.xml)",
            )
        return Badging.parse(out.stdout)


@dataclass
class Badging:
    package: str
    version_code: str = ""
    version_name: str = ""
    min_sdk: int | None = None
    target_sdk: int | None = None
    abis: list[str] = field(default_factory=list)
    permissions: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Badging:
        def one(pattern):
            m = re.search(pattern, text, re.M)
            return m.group(1) if m else ""

        native = one(r"^native-code: (.*)$")
        return cls(
            package=one(r"^package: name='([^']*)'"),
            version_code=one(r"versionCode='([^']*)'"),
            version_name=one(r"versionName='([^']*)'"),
            min_sdk=int(one(r"^sdkVersion:'(\d+)'") or 0) or None,
            target_sdk=int(one(r"^targetSdkVersion:'(\d+)'") or 0) or None,
            abis=re.findall(r"'([^']+)'", native),
            permissions=re.findall(r"^uses-permission: name='([^']+)'", text, re.M),
        )


class Zipalign(BuildTool):
    name = "zipalign"

    def version(self) -> str | None:
        # zipalign has no version flag; an SDK copy is as new as its build-tools folder.
        parent = self.verify().resolve().parent
        return parent.name if parent.parent.name == "build-tools" and parent.name != "debian" else None

    def page_size_option(self) -> list[str]:
        """How this zipalign aligns uncompressed .so files to Android's 16 KB pages: ``-P 16`` where its
        usage lists -P (build-tools 35 and later), else ``-p``, which older ones (Debian's) take to mean 4 KB."""
        usage = self()
        return ["-P", "16"] if re.search(r"^\s*-P\b", usage.stdout + usage.stderr, re.M) else ["-p"]


class Apksigner(BuildTool):
    name = "apksigner"
    version_argv = ("--version",)
    version_re = r"^(\S+)"


class Adb(AndroidTool):
    name = "adb"
    commands = ("adb",)
    sdk_globs = ("platform-tools/adb",)
    install = "apt-get install adb (or sdkmanager platform-tools)"
    version_argv = ("version",)
    version_re = r"(?m)^Version (\S+)"


class Jdk(AndroidTool):
    """A JDK: keytool makes keys, javac compiles the app; Gradle needs JAVA_HOME or java on PATH."""

    name = "JDK (javac, keytool)"
    env_var = "JAVA_HOME"
    install = "apt-get install openjdk-17-jdk-headless"
    version_argv = ("-version",)
    version_re = r"javac (\S+)"

    def _find(self) -> Path:
        """The JDK home: $JAVA_HOME, the JDK that javac on PATH belongs to, then /usr/lib/jvm/*."""
        if os.environ.get("JAVA_HOME"):
            home = Path(os.environ["JAVA_HOME"])
            if not (home / "bin" / "javac").is_file():
                raise ToolMissingError(
                    f"JAVA_HOME={home} has no bin/javac (a JRE, or not a Java install)",
                    f"point JAVA_HOME at a JDK 17 or newer, or unset it; {self.install}",
                )
            return home
        javac = toolchains.which("javac")
        candidates = [javac.resolve().parent.parent] if javac else []
        candidates += sorted(Path("/usr/lib/jvm").glob("*"), reverse=True) if Path("/usr/lib/jvm").is_dir() else []
        for home in candidates:
            if (home / "bin" / "javac").is_file() and (home / "bin" / "keytool").is_file():
                return home
        raise ToolMissingError(
            "no JDK found (looked at $JAVA_HOME, javac on PATH, /usr/lib/jvm)",
            f"{self.install}, or set JAVA_HOME to a JDK 17 or newer",
        )

    @property
    def keytool(self) -> Path:
        return self.verify() / "bin" / "keytool"

    @property
    def javac(self) -> Path:
        return self.verify() / "bin" / "javac"

    def version(self) -> str | None:
        if self._version is None:
            out = self.runner([str(self.javac), "-version"])
            m = re.search(self.version_re, out.stdout + out.stderr)
            self._version = m.group(1) if m else None
        return self._version

    def keytool_run(self, *args, env=None) -> toolchains.CompletedProcess:
        return self.runner([str(self.keytool), *map(str, args)], env=env)


class AndroidSdk(AndroidTool):
    """The SDK root, with the platform the app compiles against and build tools."""

    name = "Android SDK"
    env_var = "ANDROID_HOME"
    install = (
        f"{INSTALL_HINT} (or install the command-line tools, then: sdkmanager "
        f"'platforms;android-{COMPILE_SDK}' 'build-tools;{BUILD_TOOLS}' and set ANDROID_HOME)"
    )

    def _find(self) -> Path:
        root = sdk_root()
        if root is None:
            raise ToolMissingError(
                "Android SDK not found: neither ANDROID_HOME nor ANDROID_SDK_ROOT is set, "
                f"and none of {', '.join(map(str, KNOWN_SDK_PLACES))} exists",
                self.install,
            )
        return root

    def platforms(self) -> list[int]:
        """API levels with an android.jar, newest last."""
        found = (
            p.name.removeprefix("android-")
            for p in (self.verify() / "platforms").glob("android-*")
            if (p / "android.jar").is_file()
        )
        return sorted(int(v) for v in found if v.isdigit())

    def build_tools(self) -> list[str]:
        """build-tools versions, newest last (Debian's is named 'debian')."""
        d = self.verify() / "build-tools"
        return sorted((p.name for p in d.iterdir() if p.is_dir()), key=_version_key) if d.is_dir() else []

    def require(self, platform: int = COMPILE_SDK) -> None:
        """Raise, naming the sdkmanager command, unless the platform and some build-tools are installed."""
        root = self.verify()
        missing = []
        if platform not in self.platforms():
            missing.append(f"'platforms;android-{platform}'")
        # Debian's build-tools/debian holds only aapt/zipalign/apksigner; Gradle's Android plugin wants a versioned one.
        if not [v for v in self.build_tools() if v != "debian"]:
            missing.append(f"'build-tools;{BUILD_TOOLS}'")
        if missing:
            raise ToolMissingError(
                f"the Android SDK at {root} lacks {' and '.join(missing)}",
                f"sdkmanager --sdk_root={root} {' '.join(missing)} (or: {INSTALL_HINT})",
            )

    def version(self) -> str | None:
        platforms, tools = self.platforms(), self.build_tools()
        parts = ([f"android-{platforms[-1]}"] if platforms else []) + ([f"build-tools {tools[-1]}"] if tools else [])
        return ", ".join(parts) or None


class Gradle(AndroidTool):
    """The project's gradlew when there is a project, else $GRADLE_HOME, tvmgen's download, ``gradle`` on PATH."""

    name = "Gradle"
    env_var = "GRADLE_HOME"
    install = (
        f"{INSTALL_HINT} (downloads Gradle {downloads.GRADLE_VERSION}), or set GRADLE_HOME to a Gradle "
        f"{downloads.GRADLE_VERSION} or newer"
    )
    version_argv = ("--version",)
    version_re = r"Gradle (\S+)"

    def __init__(self, project: str | Path | None = None, runner: Runner | None = None):
        super().__init__(runner)
        self.project = Path(project) if project else None

    def _find(self) -> Path:
        if self.project and (self.project / "gradlew").is_file():
            return self.project / "gradlew"
        if os.environ.get("GRADLE_HOME") and (Path(os.environ["GRADLE_HOME"]) / "bin" / "gradle").is_file():
            return Path(os.environ["GRADLE_HOME"]) / "bin" / "gradle"
        ours = downloads.gradle_home() / "bin" / "gradle"
        if ours.is_file():
            return ours
        found = toolchains.which("gradle")
        if found is None:
            raise ToolMissingError(
                "Gradle not found (no gradlew in the project, $GRADLE_HOME, tvmgen's download "
                f"at {downloads.gradle_home()} or gradle on PATH)",
                self.install,
            )
        return found

    def require(self) -> str:
        """Raise unless this Gradle is at least the version the app templates name; the detail otherwise."""
        version = self.version()
        if version and not version_at_least(version, downloads.GRADLE_VERSION):
            raise ToolMissingError(
                f"Gradle {version} at {self.verify()} is older than {downloads.GRADLE_VERSION}, "
                f"which Android Gradle Plugin {downloads.AGP_VERSION} needs",
                self.install,
            )
        return ""

    def version(self) -> str | None:
        # A wrapper's version is in its properties; running gradlew would download Gradle.
        props = self.verify().parent / "gradle" / "wrapper" / "gradle-wrapper.properties"
        if self.verify().name == "gradlew" and props.is_file():
            m = re.search(r"gradle-([\d.]+)-(?:bin|all)\.zip", props.read_text())
            return m.group(1) if m else None
        return super().version()


def ndk_version(ndk: toolchains.AndroidNdk) -> str | None:
    """Pkg.Revision from the NDK's source.properties (27.2.12479018)."""
    root = ndk.ndk_root()
    if root is None and os.environ.get("TVM_NDK_CC"):
        root = Path(os.environ["TVM_NDK_CC"]).parents[5]  # <ndk>/toolchains/llvm/prebuilt/<host>/bin/clang++
    props = root / "source.properties" if root else None
    if props and props.is_file():
        m = re.search(r"Pkg\.Revision\s*=\s*(\S+)", props.read_text())
        return m.group(1) if m else None
    return None
