"""`tvmgen doctor --install` and `tvmgen app --yes`: the Android toolchain and the TVM source set up by tvmgen.

Nothing here reaches the network. A local HTTP server on 127.0.0.1 (Range requests, a transfer it
can cut off half-way) serves archives built here with the real layouts: the command-line tools
(whose sdkmanager is a shell script that takes the arguments tvmgen passes and installs packages
with the files the real ones hold), a Gradle distribution, and a git repository with a submodule
standing in for TVM. The real downloads run only with TVMGEN_TEST_REAL_DOWNLOADS=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import cli_forks
from conftest import TVMGEN, onnx_model, save_onnx, unavailable
from helpers import environ_without_tools
from install_fakes import (
    ARCHIVES,
    CMDLINE_ZIP,
    GIT_ENV,
    GRADLE,
    GRADLE_ZIP,
    FileServer,
    closed_port,
    fake_jdk,
    git,
    make_zip,
    sha256,
)
from tvmgen.android import downloads, install
from tvmgen.android import project as android_project
from tvmgen.apps import templates
from tvmgen.core import fetch


@pytest.fixture(scope="module")
def tvm_repo(tmp_path_factory) -> Path:
    """A TVM stand-in: CMakeLists.txt, include/tvm/runtime, libinfo.py 0.27.0, 3rdparty/tvm-ffi as a submodule."""
    root = tmp_path_factory.mktemp("git")
    ffi, tvm = root / "tvm-ffi", root / "tvm"
    for repo in (ffi, tvm):
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
    (ffi / "CMakeLists.txt").write_text("project(tvm_ffi)\n")
    git(ffi, "add", ".")
    git(ffi, "commit", "-qm", "ffi")
    (tvm / "CMakeLists.txt").write_text("project(tvm)\n")
    (tvm / "include" / "tvm" / "runtime").mkdir(parents=True)
    (tvm / "include" / "tvm" / "runtime" / "module.h").write_text("// stand-in\n")
    (tvm / "python" / "tvm").mkdir(parents=True)
    (tvm / "python" / "tvm" / "libinfo.py").write_text('__version__ = "0.27.0"\n')
    git(tvm, "submodule", "add", "-q", f"file://{ffi}", "3rdparty/tvm-ffi")
    git(tvm, "add", ".")
    git(tvm, "commit", "-qm", "tvm")
    git(tvm, "tag", "v0.27.0")
    (tvm / "later.txt").write_text("a commit after the tag: the clone must not have it\n")
    git(tvm, "add", ".")
    git(tvm, "commit", "-qm", "after the release")
    return tvm


@pytest.fixture
def server():
    srv = FileServer(dict(ARCHIVES))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def machine(tmp_path, server, tvm_repo):
    """A machine with a JDK only: no SDK, NDK, Gradle or TVM source; the downloads point at the local server."""
    table = tmp_path / "downloads.json"
    table.write_text(
        json.dumps(
            {
                "cmdline-tools": {"url": f"{server.url}/{CMDLINE_ZIP}", "sha256": sha256(ARCHIVES[f"/{CMDLINE_ZIP}"])},
                "gradle": {"url": f"{server.url}/{GRADLE_ZIP}", "sha256": sha256(ARCHIVES[f"/{GRADLE_ZIP}"])},
                "tvm-source": {"url": f"file://{tvm_repo}", "tag": "v0.27.0"},
            }
        )
    )
    env = environ_without_tools("TVMGEN_AAPT", "TVMGEN_ZIPALIGN", "TVMGEN_APKSIGNER", "TVMGEN_DOWNLOAD_MIRROR")
    env.update(
        GIT_ENV,
        TVMGEN_DATA_DIR=str(tmp_path / "data"),
        TVMGEN_DOWNLOADS=str(table),
        JAVA_HOME=str(fake_jdk(tmp_path / "jdk")),
        TVMGEN_LOG_DIR=str(tmp_path / "logs"),
        FAKE_SDKMANAGER_LOG=str(tmp_path / "sdkmanager.log"),
        FAKE_GRADLE_LOG=str(tmp_path / "gradle.log"),
        PATH=os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not shutil.which("gradle", path=p)),
        COLUMNS="200",
    )
    return env


def _tvmgen(env: dict, *args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    return cli_forks.run(args, env, cwd=cwd, timeout=timeout)  # stdin: /dev/null


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()) if root.exists() else []


# ----------------------------------------------------------------------------- downloads


def test_fetch_resumes_an_interrupted_transfer(server, tmp_path):
    path = f"/{GRADLE_ZIP}"
    server.cut.add(path)
    dest = tmp_path / "dl" / GRADLE_ZIP
    fetch.fetch(server.url + path, sha256(ARCHIVES[path]), dest, "Gradle")
    half = (len(ARCHIVES[path])) // 2
    assert server.requests == [(path, None), (path, f"bytes={half}-")]
    assert dest.read_bytes() == ARCHIVES[path] and not dest.with_name(GRADLE_ZIP + ".part").exists()


def test_fetch_resumes_from_the_part_file_of_an_earlier_run(server, tmp_path):
    path = f"/{CMDLINE_ZIP}"
    dest = tmp_path / CMDLINE_ZIP
    dest.with_name(dest.name + ".part").write_bytes(ARCHIVES[path][:1000])
    fetch.fetch(server.url + path, sha256(ARCHIVES[path]), dest, "tools")
    assert server.requests == [(path, "bytes=1000-")] and dest.read_bytes() == ARCHIVES[path]
    fetch.fetch(server.url + path, sha256(ARCHIVES[path]), dest, "tools")  # here and right: no request
    assert len(server.requests) == 1


def test_fetch_refuses_a_wrong_checksum_and_deletes_the_file(server, tmp_path):
    dest = tmp_path / GRADLE_ZIP
    with pytest.raises(fetch.DownloadError, match="not the pinned 0000") as e:
        fetch.fetch(f"{server.url}/{GRADLE_ZIP}", "0" * 64, dest, "Gradle")
    assert "the file was deleted" in e.value.message and e.value.exit_code == 3
    assert _files(tmp_path) == []
    # a file put there by hand that is not the pinned one: deleted too, with the manual steps
    dest.write_bytes(b"not gradle")
    with pytest.raises(fetch.DownloadError, match="SHA-256 mismatch"):
        fetch.fetch(f"{server.url}/{GRADLE_ZIP}", sha256(ARCHIVES[f"/{GRADLE_ZIP}"]), dest, "Gradle")
    assert not dest.exists()


def test_fetch_without_network_says_what_to_download_by_hand(tmp_path, server):
    url, sha = f"http://127.0.0.1:{closed_port()}/{GRADLE_ZIP}", sha256(ARCHIVES[f"/{GRADLE_ZIP}"])
    dest = tmp_path / "dl" / GRADLE_ZIP
    with pytest.raises(fetch.DownloadError, match="unreachable") as e:
        fetch.fetch(url, sha, dest, "Gradle")
    assert url in e.value.hint and sha in e.value.hint and str(dest) in e.value.hint
    assert _files(tmp_path) == []
    dest.write_bytes(ARCHIVES[f"/{GRADLE_ZIP}"])  # done by hand as told: used, nothing requested
    assert fetch.fetch(url, sha, dest, "Gradle") == dest and server.requests == []


def test_fetch_stops_before_filling_the_disk(server, tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1 << 20))
    with pytest.raises(fetch.DownloadError, match="is full") as e:
        fetch.fetch(f"{server.url}/{GRADLE_ZIP}", sha256(ARCHIVES[f"/{GRADLE_ZIP}"]), tmp_path / GRADLE_ZIP, "Gradle")
    assert "TVMGEN_DATA_DIR" in e.value.hint and _files(tmp_path) == []


def test_unpack_keeps_modes_and_refuses_entries_outside(tmp_path):
    archive = tmp_path / "g.zip"
    archive.write_bytes(ARCHIVES[f"/{GRADLE_ZIP}"])
    final = fetch.unpack_zip(archive, "gradle-8.7", tmp_path / "out" / "gradle-8.7")
    assert os.access(final / "bin" / "gradle", os.X_OK) and (final / "lib" / "README").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gradle-8.7"]  # no scratch folder left
    evil = tmp_path / "evil.zip"
    evil.write_bytes(make_zip({"top/": "", "top/../../escaped": "x"}))
    with pytest.raises(fetch.DownloadError, match="outside its folder"):
        fetch.unpack_zip(evil, "top", tmp_path / "evil")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "evil").exists()


def test_pins_match_the_templates_and_can_be_overridden(tmp_path, monkeypatch):
    for item in (downloads._CMDLINE_TOOLS["Linux"], downloads._CMDLINE_TOOLS["Darwin"], downloads._GRADLE):
        assert item.url.startswith("https://") and re.fullmatch(r"[0-9a-f]{64}", item.sha256)
    ctx = android_project.android_context("deploy", "org.example.m", "M", "m", ["cpu"], ["arm64-v8a"])
    out = tmp_path / "proj"
    templates.render("android_deploy", out, ctx)
    assert (
        f"gradle-{downloads.GRADLE_VERSION}-bin.zip" in (out / "gradle/wrapper/gradle-wrapper.properties").read_text()
    )
    gradle = (out / "app/build.gradle").read_text()
    assert f"version '{downloads.CMAKE_VERSION}'" in gradle and f"ndkVersion '{downloads.NDK_VERSION}'" in gradle
    assert f"compileSdk {downloads.COMPILE_SDK}" in gradle
    monkeypatch.setenv("TVMGEN_DOWNLOAD_MIRROR", "http://mirror.example/android/")
    assert downloads.gradle().url == f"http://mirror.example/android/{GRADLE_ZIP}"
    assert downloads.gradle().sha256 == downloads._GRADLE.sha256
    (tmp_path / "t.json").write_text(json.dumps({"gradle": {"sha": "x"}}))
    monkeypatch.setenv("TVMGEN_DOWNLOADS", str(tmp_path / "t.json"))
    with pytest.raises(Exception, match="fields"):
        downloads.gradle()


def test_an_old_gradle_on_path_is_replaced_and_yours_win(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gradle").write_text("#!/bin/sh\necho 'Gradle 4.4.1'\n")
    (bin_dir / "gradle").chmod(0o755)
    for var in (
        "ANDROID_HOME",
        "ANDROID_SDK_ROOT",
        "ANDROID_NDK_HOME",
        "ANDROID_NDK_ROOT",
        "TVM_NDK_CC",
        "GRADLE_HOME",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TVMGEN_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TVM_SOURCE_DIR", str(tmp_path / "my-tvm"))
    sdk = tmp_path / "my-sdk"
    (sdk / "platforms" / "android-35").mkdir(parents=True)
    (sdk / "platforms" / "android-35" / "android.jar").write_bytes(b"")
    monkeypatch.setenv("ANDROID_HOME", str(sdk))
    plan = install.make_plan()
    assert plan.gradle and not plan.tvm  # Gradle 4.4.1 cannot run AGP 8.5; your TVM_SOURCE_DIR is kept
    assert plan.sdk == sdk and plan.packages == ["build-tools;35.0.0", "ndk;27.2.12479018", "cmake;3.22.1"]
    monkeypatch.setenv("ANDROID_NDK_HOME", str(tmp_path / "my-ndk"))
    assert "ndk;27.2.12479018" not in install.make_plan().packages
    (bin_dir / "bin").mkdir()
    shutil.copy2(bin_dir / "gradle", bin_dir / "bin" / "gradle")
    monkeypatch.setenv("GRADLE_HOME", str(bin_dir))  # yours, even if old: kept (doctor says it is too old)
    assert not install.make_plan().gradle


# ----------------------------------------------------------------------------- the commands


def test_doctor_install_on_a_fresh_machine_then_nothing_again(machine, server, tmp_path):
    data = Path(machine["TVMGEN_DATA_DIR"])
    server.cut.add(f"/{GRADLE_ZIP}")  # the Gradle transfer breaks off half-way once, and resumes
    r = _tvmgen(machine, "doctor", "--install", "--yes", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-2000:]
    report = json.loads(r.stdout)
    rows = {c["name"]: c for c in report["checks"]}
    assert report["ready"]
    for name in (
        "Gradle",
        "Android SDK",
        "Android NDK",
        "CMake 3.22.1 (SDK)",
        "TVM source tree",
        "apksigner",
        "zipalign",
        "aapt",
    ):
        assert rows[name]["usable"] and rows[name]["source"] == "tvmgen download", rows[name]
    assert rows["JDK"]["source"] == "yours ($JAVA_HOME)"
    assert rows["Gradle"]["version"] == "8.7" and rows["Android NDK"]["version"] == "27.2.12479018"
    assert rows["Android SDK"]["version"] == "android-35, build-tools 35.0.0"
    assert rows["TVM source tree"]["version"] == "0.27.0" and rows["TVM source tree"]["path"] == str(
        data / "tvm-0.27.0"
    )
    half = len(ARCHIVES[f"/{GRADLE_ZIP}"]) // 2
    assert server.requests == [
        (f"/{CMDLINE_ZIP}", None),
        (f"/{GRADLE_ZIP}", None),
        (f"/{GRADLE_ZIP}", f"bytes={half}-"),
    ]
    sdk = data / "android-sdk"
    assert (sdk / "cmdline-tools" / "latest" / "bin" / "sdkmanager").is_file()
    calls = (tmp_path / "sdkmanager.log").read_text().splitlines()
    assert calls == [f"--sdk_root={sdk} --licenses"] * 2 + [
        f"--sdk_root={sdk} platforms;android-35 build-tools;35.0.0 ndk;27.2.12479018 cmake;3.22.1"
    ]
    assert "accepting the Android SDK licences (--yes): android-sdk-license" in r.stderr
    clone = data / "tvm-0.27.0"
    assert (clone / "3rdparty" / "tvm-ffi" / "CMakeLists.txt").is_file()  # the submodule came too
    assert not (clone / "later.txt").exists()  # the tag, not the branch's head
    head = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=clone, capture_output=True, text=True)
    assert head.stdout.strip() == "1"  # shallow
    assert not (data / "downloads").exists() or _files(data / "downloads") == []  # archives removed once unpacked
    # the table shows where each tool came from
    table = _tvmgen(machine, "doctor", cwd=tmp_path)
    assert table.returncode == 0 and re.search(r"Android NDK\s+yes\s+27\.2\.12479018\s+tvmgen download", table.stdout)

    # second run: everything is here; nothing is downloaded, sdkmanager and git are not run
    (clone / "marker").write_text("kept")
    r = _tvmgen(machine, "doctor", "--install", "--yes", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nothing to download" in r.stderr and len(server.requests) == 3
    assert len((tmp_path / "sdkmanager.log").read_text().splitlines()) == 3 and (clone / "marker").is_file()


def test_licences_need_a_yes_or_a_terminal(machine, server, tmp_path):
    r = _tvmgen(machine, "doctor", "--install", cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "licences accepted first (android-sdk-license)" in r.stderr and "--yes" in r.stderr
    sdk = Path(machine["TVMGEN_DATA_DIR"]) / "android-sdk"
    assert not (sdk / "licenses").exists() and not (sdk / "platforms").exists()
    # the command-line tools it fetched are kept: the next run goes on from there
    r = _tvmgen(machine, "doctor", "--install", "--yes", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p for p, _ in server.requests].count(f"/{CMDLINE_ZIP}") == 1


def test_wrong_checksum_in_the_cli_is_refused_and_cleaned_up(machine, server, tmp_path):
    table = json.loads(Path(machine["TVMGEN_DOWNLOADS"]).read_text())
    table["gradle"]["sha256"] = "f" * 64
    Path(machine["TVMGEN_DOWNLOADS"]).write_text(json.dumps(table))
    r = _tvmgen(machine, "doctor", "--install", "--yes", cwd=tmp_path)
    assert r.returncode == 3 and "not the pinned ffff" in r.stderr and "the file was deleted" in r.stderr
    data = Path(machine["TVMGEN_DATA_DIR"])
    assert _files(data / "downloads") == [] and not (data / "gradle" / "gradle-8.7").exists()


def test_no_network_gives_the_manual_steps_and_leaves_nothing_half_written(machine, tmp_path):
    port = closed_port()
    table = json.loads(Path(machine["TVMGEN_DOWNLOADS"]).read_text())
    for name in ("cmdline-tools", "gradle"):
        table[name]["url"] = table[name]["url"].replace(re.search(r":\d+/", table[name]["url"]).group(0), f":{port}/")
    table["tvm-source"]["url"] = f"http://127.0.0.1:{port}/tvm.git"
    Path(machine["TVMGEN_DOWNLOADS"]).write_text(json.dumps(table))
    data = Path(machine["TVMGEN_DATA_DIR"])
    r = _tvmgen(machine, "doctor", "--install", "--yes", cwd=tmp_path)
    assert r.returncode == 3, r.stderr[-2000:]
    assert f"http://127.0.0.1:{port}/{CMDLINE_ZIP}" in r.stderr and table["cmdline-tools"]["sha256"] in r.stderr
    assert str(data / "downloads" / CMDLINE_ZIP) in r.stderr and "by hand" in r.stderr
    assert _files(data) == []
    # Gradle and TVM alone (an SDK of yours is complete): each failure names its manual step too
    sdk = tmp_path / "my-sdk"
    for rel in (
        "platforms/android-35/android.jar",
        "build-tools/35.0.0/apksigner",
        "ndk/27.2.12479018/source.properties",
        "cmake/3.22.1/bin/cmake",
    ):
        (sdk / rel).parent.mkdir(parents=True, exist_ok=True)
        (sdk / rel).write_text("")
    r = _tvmgen({**machine, "ANDROID_HOME": str(sdk)}, "doctor", "--install", "--yes", cwd=tmp_path)
    assert r.returncode == 3 and f"/{GRADLE_ZIP}" in r.stderr and "by hand" in r.stderr
    r = _tvmgen(
        {**machine, "ANDROID_HOME": str(sdk), "GRADLE_HOME": str(_fake_gradle(tmp_path / "g"))},
        "doctor",
        "--install",
        "--yes",
        cwd=tmp_path,
    )
    assert r.returncode == 3 and "git clone --recursive --depth 1" in r.stderr and "TVM_SOURCE_DIR" in r.stderr
    assert _files(data) == []


def _fake_gradle(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "gradle").write_text(GRADLE)
    (root / "bin" / "gradle").chmod(0o755)
    return root


def test_app_yes_on_a_machine_with_only_a_jdk_gets_to_gradle(machine, server, tmp_path):
    """Done when: `tvmgen app --model M --device opencl --yes` needs no manual step before Gradle runs."""
    if not shutil.which("aarch64-linux-gnu-g++"):
        unavailable("aarch64-linux-gnu-g++ is not installed: the stand-in NDK links with it")
    model = save_onnx(_relu_model(), tmp_path / "m.onnx")
    r = _tvmgen(
        machine,
        "app",
        "--model",
        model,
        "--device",
        "opencl",
        "--yes",
        "-o",
        tmp_path / "proj",
        cwd=tmp_path,
        timeout=600,
    )
    data = Path(machine["TVMGEN_DATA_DIR"])
    assert r.returncode == 1 and "the Gradle build failed" in r.stderr, r.stderr[-3000:]
    assert "fake Gradle: no Android Gradle Plugin here" in r.stderr
    gradle = dict(line.split("=", 1) for line in (tmp_path / "gradle.log").read_text().splitlines())
    assert gradle["ANDROID_HOME"] == str(data / "android-sdk") and gradle["TVM_SOURCE_DIR"] == str(data / "tvm-0.27.0")
    assert gradle["JAVA_HOME"] == machine["JAVA_HOME"] and "assembleRelease" in gradle["argv"]
    # the model was linked with the downloaded NDK (not left as an object archive), for both devices: each
    # library is one of the app's native libraries (loaded in place from the APK), named in its assets
    main = tmp_path / "proj/app/src/main"
    for dev in ("opencl", "cpu"):
        assert not (main / f"assets/model-{dev}/model.tar").exists()
        library = (main / f"assets/model-{dev}/library.txt").read_text().strip()
        assert (main / "jniLibs/arm64-v8a" / library).read_bytes()[:4] == b"\x7fELF", library
    assert f"'{data / 'tvm-0.27.0'}'" in (tmp_path / "proj/app/build.gradle").read_text()


def _in_a_terminal(env: dict, args: list, answers: list[tuple[str, str]], cwd: Path, timeout=300) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal (so it asks and shows progress bars), answering each prompt in turn."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*TVMGEN, *map(str, args)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**env, "TERM": "xterm"},
        close_fds=True,
    )
    os.close(slave)
    out, seen, pending = b"", 0, list(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                text = out.decode(errors="replace")
                if pending and pending[0][0] in text[seen:]:
                    seen = text.index(pending[0][0], seen) + len(pending[0][0])
                    os.write(master, pending.pop(0)[1].encode())
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            pytest.fail("the command did not finish: " + out.decode(errors="replace")[-2000:])
    finally:
        os.close(master)
    return proc.wait(), out.decode(errors="replace").replace("\r\n", "\n")


def test_at_a_terminal_the_licences_are_shown_and_asked(machine, server, tmp_path):
    sdk = Path(machine["TVMGEN_DATA_DIR"]) / "android-sdk"
    rc, out = _in_a_terminal(machine, ["doctor", "--install"], [("Accept these licences", "n\n")], tmp_path)
    assert rc == 2 and "licences were declined" in out, out[-2000:]
    assert out.index("Terms and Conditions (a stand-in for tests)") < out.index("Accept these licences")
    assert not (sdk / "licenses").exists() and not (sdk / "platforms").exists()
    rc, out = _in_a_terminal(machine, ["doctor", "--install"], [("Accept these licences", "y\n")], tmp_path)
    assert rc == 0 and "ready to build an APK: yes" in out, out[-3000:]
    assert (sdk / "licenses" / "android-sdk-license").is_file()
    assert "━" in out and re.search(r"(\d+)/\1 bytes", out)  # rich's progress bar, with the download column


def test_app_at_a_terminal_asks_once_before_downloading(machine, server, tmp_path):
    model = save_onnx(_relu_model(), tmp_path / "m.onnx")
    rc, out = _in_a_terminal(
        machine, ["app", "--model", model, "-o", tmp_path / "p1"], [("Download them now?", "n\n")], tmp_path
    )
    assert rc == 0 and "the project is rendered but no APK was built" in out, out[-3000:]
    assert (
        out.count("Download them now?") == 1
        and server.requests == []
        and _files(Path(machine["TVMGEN_DATA_DIR"])) == []
    )


def _relu_model():
    from onnx import TensorProto, helper

    return onnx_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )


@pytest.mark.skipif(
    os.environ.get("TVMGEN_TEST_REAL_DOWNLOADS") != "1",
    reason="downloads about 2 GB from Google, Gradle and GitHub: set TVMGEN_TEST_REAL_DOWNLOADS=1",
)
def test_real_downloads(tmp_path):
    env = environ_without_tools("TVMGEN_DOWNLOADS", "TVMGEN_DOWNLOAD_MIRROR")
    env.update(TVMGEN_DATA_DIR=str(tmp_path / "data"), TVMGEN_LOG_DIR=str(tmp_path / "logs"))
    r = _tvmgen(env, "doctor", "--install", "--yes", "--json", cwd=tmp_path, timeout=3 * 3600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert rows["Gradle"]["version"] == "8.7" and rows["Android NDK"]["version"] == "27.2.12479018"
    assert rows["TVM source tree"]["version"].startswith("0.27")
