"""Stand-ins for what `tvmgen doctor --install` downloads, with the real layouts, and the server that serves them.

- the Android command-line tools zip, whose ``cmdline-tools/bin/sdkmanager`` is a shell script taking
  the arguments tvmgen passes (--sdk_root=, --licenses with its prompts, package names) and
  installing packages with the files the real ones hold;
- a Gradle distribution zip (``gradle-8.7/bin/gradle``);
- ``FileServer``: HTTP on 127.0.0.1 with Range requests, a log of requests, and transfers it cuts off.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import socket
import subprocess
import zipfile
from pathlib import Path

CMDLINE_ZIP = "commandlinetools-linux-11076708_latest.zip"
GRADLE_ZIP = "gradle-8.7-bin.zip"

# sdkmanager's command line as tvmgen uses it: --sdk_root=DIR, --licenses (prompts answered on
# stdin), package names. The packages hold the files tvmgen and the Android Gradle Plugin look for.
SDKMANAGER = r"""#!/bin/sh
root=""; licenses=0; pkgs=""
for a in "$@"; do
  case "$a" in
    --sdk_root=*) root="${a#--sdk_root=}" ;;
    --licenses) licenses=1 ;;
    -*) echo "Error: Unknown argument $a" >&2; exit 1 ;;
    *) pkgs="$pkgs $a" ;;
  esac
done
[ -n "$FAKE_SDKMANAGER_LOG" ] && echo "$*" >> "$FAKE_SDKMANAGER_LOG"
[ -n "$root" ] || { echo "Error: could not determine SDK root." >&2; exit 1; }
[ -x "$JAVA_HOME/bin/javac" ] || { echo "ERROR: JAVA_HOME is not set" >&2; exit 1; }
tool() { mkdir -p "$(dirname "$1")"; printf '#!/bin/sh\n%s\n' "$2" > "$1"; chmod +x "$1"; }
if [ $licenses = 1 ]; then
  if [ -f "$root/licenses/android-sdk-license" ]; then echo "All SDK package licenses accepted."; exit 0; fi
  echo "1 of 1 SDK package license not accepted."
  printf "Review licenses that have not been accepted (y/N)? "
  read answer || answer=n
  [ "$answer" = y ] || exit 0
  printf '\n1/1: License android-sdk-license:\n---------------------------------------\n'
  printf 'Terms and Conditions (a stand-in for tests)\n---------------------------------------\n'
  printf "Accept? (y/N): "
  read answer || answer=n
  if [ "$answer" = y ]; then
    mkdir -p "$root/licenses"; printf '\nfake-licence-hash' > "$root/licenses/android-sdk-license"
    echo "All SDK package licenses accepted"
  fi
  exit 0
fi
if [ ! -f "$root/licenses/android-sdk-license" ]; then
  echo "Warning: License for package Android SDK Platform 35 not accepted." >&2; exit 1
fi
for p in $pkgs; do
  case "$p" in
    "platforms;android-"*) d="$root/platforms/${p#platforms;}"; mkdir -p "$d"; : > "$d/android.jar" ;;
    "build-tools;"*) d="$root/build-tools/${p#build-tools;}"
      tool "$d/aapt" "echo 'Android Asset Packaging Tool, v0.2-${p#build-tools;}'"
      tool "$d/zipalign" "exit 0"
      tool "$d/apksigner" "echo ${p#build-tools;}" ;;
    "ndk;"*) d="$root/ndk/${p#ndk;}"; mkdir -p "$d"
      printf 'Pkg.Desc = Android NDK\nPkg.Revision = %s\n' "${p#ndk;}" > "$d/source.properties"
      tool "$d/toolchains/llvm/prebuilt/linux-x86_64/bin/aarch64-linux-android24-clang++" \
           'exec aarch64-linux-gnu-g++ "$@"' ;;
    "cmake;"*) tool "$root/cmake/${p#cmake;}/bin/cmake" "echo 'cmake version ${p#cmake;}'" ;;
    *) echo "Warning: Failed to find package '$p'" >&2; exit 1 ;;
  esac
  echo "[=======================================] 100% Unzipping... $p"
done
"""

# Gradle: --version as the real one prints it; a build records what it was given, then fails
# (there is no Android Gradle Plugin here): the point is that tvmgen got as far as running it.
GRADLE = r"""#!/bin/sh
case "$1" in --version) printf '\n------------------------------------------------------------\nGradle 8.7\n'; exit 0 ;; esac
if [ -n "$FAKE_GRADLE_LOG" ]; then
  { echo "argv=$*"; echo "ANDROID_HOME=$ANDROID_HOME"; echo "TVM_SOURCE_DIR=$TVM_SOURCE_DIR"; echo "JAVA_HOME=$JAVA_HOME"; } > "$FAKE_GRADLE_LOG"
fi
echo "fake Gradle: no Android Gradle Plugin here" >&2
exit 1
"""


def make_zip(entries: dict[str, str]) -> bytes:
    """A zip as Google and Gradle make them: folders, and scripts with their executable bit."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in entries.items():
            info = zipfile.ZipInfo(name, (2024, 3, 22, 0, 0, 0))
            info.external_attr = (0o100755 if text.startswith("#!") else 0o100644) << 16
            z.writestr(info, text)
    return buf.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
    # git refuses file:// submodules unless told (CVE-2022-39253); tvmgen itself does not weaken that
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "protocol.file.allow",
    "GIT_CONFIG_VALUE_0": "always",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


ARCHIVES = {
    f"/{CMDLINE_ZIP}": make_zip(
        {
            "cmdline-tools/": "",
            "cmdline-tools/bin/sdkmanager": SDKMANAGER,
            "cmdline-tools/source.properties": "Pkg.Revision=12.0\n",
        }
    ),
    f"/{GRADLE_ZIP}": make_zip({"gradle-8.7/": "", "gradle-8.7/bin/gradle": GRADLE, "gradle-8.7/lib/README": "jars\n"}),
}


class FileServer(http.server.ThreadingHTTPServer):
    """Serves ``files`` on 127.0.0.1 with Range support; records every request; ``cut`` paths break off once."""

    daemon_threads = True

    def __init__(self, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files = files
        self.requests: list[tuple[str, str | None]] = []
        self.cut: set[str] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        server: FileServer = self.server
        rng = self.headers.get("Range")
        server.requests.append((self.path, rng))
        body = server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1)) if rng else 0
        if start >= len(body) and rng:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(body)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        data = body[start:]
        if self.path in server.cut:  # half the promised bytes, then the connection drops
            server.cut.discard(self.path)
            data = data[: len(data) // 2]
        self.wfile.write(data)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_jdk(root: Path) -> Path:
    for tool, body in (("javac", 'echo "javac 17.0.9" >&2'), ("java", "exit 0"), ("keytool", "exit 0")):
        (root / "bin").mkdir(parents=True, exist_ok=True)
        (root / "bin" / tool).write_text(f"#!/bin/sh\n{body}\n")
        (root / "bin" / tool).chmod(0o755)
    return root
