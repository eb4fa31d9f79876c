"""The RPC app template: the rendered project's files, its server executable built with the app's own CMake
and run on the host, and its activity and foreground service run on this JVM against the Android stubs."""

from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET

from conftest import require_tool
from helpers import cmake_build, cmake_configure
from templates_support import ANDROID, compile_app_java, render_rpc


def test_rpc_project_files(tmp_path):
    out = render_rpc(tmp_path)
    manifest = ET.parse(out / "app/src/main/AndroidManifest.xml").getroot()
    perms = {p.get(f"{ANDROID}name") for p in manifest.findall("uses-permission")}
    assert "android.permission.INTERNET" in perms
    app = manifest.find("application")
    assert app.find("service").get(f"{ANDROID}name") == ".RpcService"
    assert app.get(f"{ANDROID}extractNativeLibs") == "true"  # the server executable runs from the lib dir
    assert app.find("uses-native-library").get(f"{ANDROID}name") == "libOpenCL.so"
    gradle = (out / "app/build.gradle").read_text()
    assert "namespace 'org.tvmgen.rpc'" in gradle and "targets 'tvmgen_rpc_server_exe'" in gradle
    assert "abiFilters 'arm64-v8a', 'armeabi-v7a'" in gradle and "useLegacyPackaging = true" in gradle
    # 16 KB pages: the libraries (extracted at install, so their place in the APK does not matter) and the
    # server executable packaged as a .so are all linked for them
    assert "'-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON'" in gradle
    cmake = (out / "app/src/main/cpp/CMakeLists.txt").read_text()
    assert "target_link_options(tvmgen_rpc_server_exe PRIVATE LINKER:-z,max-page-size=${TVMGEN_MAX_PAGE_SIZE})" in cmake
    java = (out / "app/src/main/java/org/tvmgen/rpc/RpcActivity.java").read_text()
    assert '"9191"' in java and '"pixel"' in java and '"proxy".equals("proxy")' in java
    service = (out / "app/src/main/java/org/tvmgen/rpc/RpcService.java").read_text()
    assert "libtvmgen_rpc_server.so" in service and "backoffMs * 2, 10000" in service
    assert "TVMGEN_OPENCL_CACHE_DIR" in service and "'tvmgen_opencl'" in gradle
    assert "adb reverse tcp:9191 tcp:9191" in (out / "README.md").read_text()


def test_rpc_app_native_part_builds_and_runs_on_the_host(tmp_path):
    """The server executable the RPC app packages, built from the app's own CMake, answers --info."""
    require_tool("cmake")
    out = render_rpc(tmp_path)
    build = cmake_configure(out / "app/src/main/cpp", tmp_path / "build", "-DTVMGEN_BUILD_JNI=OFF")
    cmake_build(build, "tvmgen_rpc_server_exe")
    exe = build / "libtvmgen_rpc_server.so"
    info = subprocess.run([exe, "--info"], capture_output=True, text=True, check=True)
    import json

    assert json.loads(info.stdout)["arch"] == "x86_64"


# Drives the RPC app on this JVM (tests/java/android_stubs): the fields' checks, then the service with a bad
# port and with a server that exits at once (so the service reconnects), then Stop from the notification.
RPC_CHECK = """package org.tvmgen.rpc;

import android.content.Intent;
import android.os.PowerManager;
import java.io.File;
import java.nio.file.Files;

public final class RpcCheck {
  static Intent intent(RpcService s, int port) {
    return new Intent(s, RpcService.class).putExtra("mode", "proxy").putExtra("address", "127.0.0.1")
        .putExtra("port", port).putExtra("key", "pixel").putExtra("listen", "0.0.0.0");
  }

  public static void main(String[] args) throws Exception {
    android.content.Context.setRoot(new File(args[0]));
    System.out.println("port-abc=" + RpcConfig.inputError(true, "127.0.0.1", "abc", "pixel", ""));
    System.out.println("port-70000=" + RpcConfig.inputError(true, "127.0.0.1", "70000", "pixel", ""));
    System.out.println("port-empty=" + RpcConfig.inputError(true, "127.0.0.1", "", "pixel", ""));
    System.out.println("address=" + RpcConfig.inputError(true, "my host", "9191", "pixel", ""));
    System.out.println("key=" + RpcConfig.inputError(true, "127.0.0.1", "9191", "a b", ""));
    System.out.println("listen=" + RpcConfig.inputError(false, "10.0.0.2", "9191", "pixel", ""));
    System.out.println("proxy-ok=" + RpcConfig.inputError(true, "127.0.0.1", " 9191 ", "pixel", null));
    System.out.println("ipv6-ok=" + RpcConfig.inputError(false, "fe80::1", "9191", "pixel", "0.0.0.0"));

    RpcService bad = new RpcService();
    bad.onCreate();
    int r = bad.onStartCommand(intent(bad, 70000), 0, 1);
    System.out.println("bad=" + r + " foreground-first=" + bad.hostForegroundType + " stopped=" + bad.hostStopped
        + " status=" + RpcService.status);

    RpcService s = new RpcService();
    s.onCreate();
    r = s.onStartCommand(intent(s, 9191), 0, 1);
    PowerManager.WakeLock lock = PowerManager.HOST.hostLast;
    System.out.println("good=" + r + " type=" + s.hostForegroundType + " actions=" + s.hostForeground.hostActions
        + " wakelock=" + lock.isHeld());
    File started = new File(args[1]);
    for (int i = 0; i < 300 && !(started.exists() && Files.readAllLines(started.toPath()).size() >= 2
        && RpcService.status.contains("1000 ms")); i++) {
      Thread.sleep(100);
    }
    System.out.println("starts=" + Files.readAllLines(started.toPath()));
    android.app.Notification n = android.app.NotificationManager.HOST.hostLast;
    System.out.println("notification=" + n.hostTitle + " | " + n.hostText + " | " + n.hostActions);
    System.out.println("status=" + RpcService.status);
    r = s.onStartCommand(new Intent(s, RpcService.class).setAction(RpcService.ACTION_STOP), 0, 2);
    s.onDestroy();
    System.out.println("stop=" + r + " stopped=" + s.hostStopped + " wakelock=" + lock.isHeld()
        + " foreground=" + (s.hostForeground != null) + " status=" + RpcService.status);
  }
}
"""


def test_rpc_app_service_on_the_host(tmp_path):
    """The RPC app's Java compiled against the Android stubs and run: a bad port or address is an error (no
    exception), the service goes to the foreground (specialUse) before anything else, holds a wake lock while
    serving, reconnects with a growing backoff when the server exits, and Stop ends it all."""
    require_tool("java")
    out = render_rpc(tmp_path)
    java = out / "app/src/main/java/org/tvmgen/rpc"
    activity = (java / "RpcActivity.java").read_text()
    assert "Integer.parseInt" not in activity  # the port goes through RpcConfig.parsePort
    assert "startForegroundService(s)" in activity and "Manifest.permission.POST_NOTIFICATIONS" in activity
    (java / "RpcCheck.java").write_text(RPC_CHECK)
    classes = compile_app_java(out, "org.tvmgen.rpc", tmp_path / "java")
    libs = tmp_path / "lib"
    libs.mkdir()
    server = libs / "libtvmgen_rpc_server.so"  # a server that records its arguments and exits at once
    server.write_text('#!/bin/sh\necho "$@" >> "$TVMGEN_TEST_STARTS"\nexit 3\n')
    server.chmod(0o755)
    starts = tmp_path / "starts.txt"
    r = subprocess.run(
        [
            "java",
            f"-Dstub.nativeLibraryDir={libs}",
            "-cp",
            classes,
            "org.tvmgen.rpc.RpcCheck",
            tmp_path / "app",
            starts,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TVMGEN_TEST_STARTS": str(starts)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    got = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert got["port-abc"].startswith('the port must be a whole number from 1 to 65535, not "abc"')
    assert got["port-70000"].startswith("the port must be") and got["port-empty"].startswith("the port must be")
    assert got["address"].startswith("the proxy address must be a host name or an IP address")
    assert got["key"].startswith("the key must be letters") and got["listen"].startswith("the listen address")
    assert got["proxy-ok"] == "null" and got["ipv6-ok"] == "null"
    # startForegroundService's promise kept (type specialUse, 0x40000000) even for settings it then refuses
    assert got["bad"].startswith(f"2 foreground-first={0x40000000} stopped=true status=not started: the port"), got
    assert got["good"] == f"3 type={0x40000000} actions=[Stop] wakelock=true"
    work = tmp_path / "app/files/rpc-work"
    launches = got["starts"].strip("[]").split(", ")  # the first start and at least one reconnection
    assert len(launches) >= 2 and set(launches) == {f"--proxy 127.0.0.1:9191 --key pixel --work-dir {work}"}
    assert got["notification"].startswith("proxy 127.0.0.1:9191 | key pixel: server exited with code 3; reconnecting")
    assert got["notification"].endswith(" | [Stop]")
    backoff = re.fullmatch(r"server exited with code 3; reconnecting in (\d+) ms", got["status"])
    assert backoff and int(backoff.group(1)) >= 1000, got  # it grew from 500 ms
    assert got["stop"] == "2 stopped=true wakelock=false foreground=false status=stopped"
