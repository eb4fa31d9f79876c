"""The iOS app: the model archive (arm64 Mach-O objects with TVM's system-lib registration), the
rendered Xcode project (parsed, not grepped), and the native code the app shares with jni/ built and
served on this machine. The commands, doctor's Mac rows and the Xcode build are in test_ios_commands.py."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import platform
import plistlib
import re
import shutil
import struct
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, require_tool, save_onnx, single_op_models
from ios_support import LIBRARY_BIN, REGISTER, TEAM
from tvmgen import frontends
from tvmgen.compiler.build import BuildOptions, build_executable, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.core.errors import InputError, ToolMissingError
from tvmgen.ios import app as ios_app
from tvmgen.ios import archive, project

MH_MAGIC_64, CPU_TYPE_ARM64 = 0xFEEDFACF, 0x0100000C


@pytest.fixture(scope="module")
def softmax(tmp_path_factory):
    d = tmp_path_factory.mktemp("ios-model")
    return frontends.load(save_onnx(single_op_models()["softmax"], d / "softmax.onnx"), [])


@pytest.fixture(scope="module")
def ios_artifacts(softmax, tmp_path_factory):
    d = tmp_path_factory.mktemp("ios-art")
    out = {}
    for device in ("cpu", "metal"):
        out[device] = d / device
        compile_to_artifact(
            softmax,
            BuildOptions(PLATFORMS["ios-arm64"], device),
            out[device],
            True,
            {"name": "softmax", "source": "softmax.onnx", "format": "onnx"},
        )
    return out


def render(dest: Path, art: Path, device="cpu", team_id=TEAM, kind="rpc") -> Path:
    ctx = project.context(
        kind,
        "org.example.SoftMax-QA",
        "Softmax QA",
        "softmax",
        device,
        team_id,
        "/opt/tvm",
        "tracker",
        "192.168.1.5",
        9190,
        "iphone-15",
    )
    project.create_project(dest, ctx, art)
    return dest


# ----------------------------------------------------------------------------- Mach-O and the archive


def nlist_symbols(data: bytes) -> dict[str, str]:
    """Every symbol of a 64-bit Mach-O object: name -> 'defined' | 'undefined' (read independently of tvmgen)."""
    (ncmds,) = struct.unpack_from("<I", data, 16)
    offset, out = 32, {}
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, offset)
        if cmd == 0x2:  # LC_SYMTAB
            symoff, nsyms, stroff, _ = struct.unpack_from("<IIII", data, offset + 8)
            for i in range(nsyms):
                strx, ntype = struct.unpack_from("<IB", data, symoff + 16 * i)
                name = data[stroff + strx : data.index(b"\0", stroff + strx)].decode()
                if not ntype & 0xE0 and ntype & 0x01:  # external, not debug
                    out[name] = "undefined" if (ntype & 0x0E) == 0 else "defined"
        offset += size
    return out


@pytest.mark.parametrize("device", ["cpu", "metal"])
def test_model_archive_holds_arm64_macho_with_system_lib_registration(ios_artifacts, tmp_path, device):
    objects = archive.objects_from_tar(ios_artifacts[device] / "model.tar")
    lib = tmp_path / "libmodel.a"
    indexed = archive.write_static_library(objects, lib)
    toc, members = archive.read_static_library(lib)
    assert sorted(n for n, _ in members.values()) == sorted(n for n, _ in objects)
    symbols: dict[str, str] = {}
    for offset, (name, data) in members.items():
        magic, cputype = struct.unpack_from("<II", data, 0)
        assert (magic, cputype) == (MH_MAGIC_64, CPU_TYPE_ARM64), name
        assert offset % 8 == 0  # members 8-aligned, as libtool writes them
        for sym, kind in nlist_symbols(data).items():
            symbols[sym] = "defined" if kind == "defined" or symbols.get(sym) == "defined" else kind
    assert symbols[LIBRARY_BIN] == "defined" and symbols[REGISTER] == "undefined"
    # the table of contents points each defined symbol at the member that defines it
    assert sorted(indexed) == sorted(s for s, k in symbols.items() if k == "defined") == sorted(s for s, _ in toc)
    for sym, offset in toc:
        assert nlist_symbols(members[offset][1])[sym] == "defined"
    if device == "metal":
        assert b"kernel void" in b"".join(d for _, d in members.values())
    # same objects, same bytes
    archive.write_static_library(list(reversed(objects)), tmp_path / "again.a")
    assert (tmp_path / "again.a").read_bytes() == lib.read_bytes()
    if shutil.which("llvm-nm"):  # an independent reader of the archive map, where LLVM is installed
        armap = subprocess.run(["llvm-nm", "--print-armap", lib], capture_output=True, text=True, check=True).stdout
        assert f"{LIBRARY_BIN} in devc.o" in armap


def test_archive_refuses_objects_of_another_platform(tmp_path, softmax):
    ex = build_executable(softmax, BuildOptions(PLATFORMS["linux-aarch64"], "cpu"))
    ex.export_library(str(tmp_path / "model.tar"))
    with pytest.raises(InputError, match="not an arm64 Mach-O object"):
        archive.objects_from_tar(tmp_path / "model.tar")


# ----------------------------------------------------------------------------- the Xcode project

TOKEN = re.compile(r'\s+|/\*.*?\*/|//[^\n]*|"((?:[^"\\]|\\.)*)"|([{}();=,])|([^\s{}();=,"]+)', re.S)


def parse_pbxproj(text: str):
    """The project file's OpenStep property-list syntax as dicts, lists and strings."""
    tokens = []
    for m in TOKEN.finditer(text):
        if m.group(1) is not None:
            tokens.append(("s", bytes(m.group(1), "utf-8").decode("unicode_escape")))
        elif m.group(2):
            tokens.append(("p", m.group(2)))
        elif m.group(3):
            tokens.append(("s", m.group(3)))
    pos = 0

    def value():
        nonlocal pos
        kind, tok = tokens[pos]
        pos += 1
        if (kind, tok) == ("p", "{"):
            d = {}
            while tokens[pos] != ("p", "}"):
                key = value()
                assert tokens[pos] == ("p", "="), tokens[pos]
                pos += 1
                d[key] = value()
                assert tokens[pos] == ("p", ";"), (key, tokens[pos])
                pos += 1
            pos += 1
            return d
        if (kind, tok) == ("p", "("):
            items = []
            while tokens[pos] != ("p", ")"):
                items.append(value())
                if tokens[pos] == ("p", ","):
                    pos += 1
            pos += 1
            return items
        assert kind == "s", tok
        return tok

    root = value()
    assert pos == len(tokens)
    return root


def test_project_structure(tmp_path, ios_artifacts):
    out = render(tmp_path / "proj", ios_artifacts["cpu"])
    text = (out / "TvmgenApp.xcodeproj/project.pbxproj").read_text()
    assert text.startswith("// !$*UTF8*$!")
    pbx = parse_pbxproj(text)
    objects = pbx["objects"]
    assert all(re.fullmatch(r"[0-9A-F]{24}", i) for i in objects)
    referenced = set(re.findall(r"\b[0-9A-F]{24}\b", text))
    assert referenced <= set(objects), referenced - set(objects)  # no dangling reference

    proj = objects[pbx["rootObject"]]
    assert (
        proj["isa"] == "PBXProject"
        and proj["attributes"]["TargetAttributes"][proj["targets"][0]]["DevelopmentTeam"] == TEAM
    )
    (target,) = [objects[t] for t in proj["targets"]]
    assert target["isa"] == "PBXNativeTarget" and target["name"] == "TvmgenApp"
    assert target["productType"] == "com.apple.product-type.application"
    phases = {objects[p]["isa"]: objects[p] for p in target["buildPhases"]}
    assert next(iter(phases)) == "PBXShellScriptBuildPhase"  # the TVM runtime is built before compiling
    assert "build_tvm_runtime.sh" in phases["PBXShellScriptBuildPhase"]["shellScript"]
    assert os.access(out / "scripts/build_tvm_runtime.sh", os.X_OK)

    def paths(phase):
        return [objects[objects[f]["fileRef"]]["path"] for f in phase["files"]]

    sources = paths(phases["PBXSourcesBuildPhase"])
    assert set(sources) == {
        "TvmgenApp/main.mm",
        "TvmgenApp/AppDelegate.mm",
        "TvmgenApp/ViewController.mm",
        "TvmgenApp/TvmgenBridge.mm",
        "TvmgenApp/Bridge/app_core.cc",
        "tvmgen-jni/src/runtime.cc",
        "tvmgen-jni/src/rpc_server.cc",
    }
    assert paths(phases["PBXResourcesBuildPhase"]) == ["Models/model"]
    refs = [o for o in objects.values() if o["isa"] == "PBXFileReference" and o.get("sourceTree") == "SOURCE_ROOT"]
    for ref in refs:  # every file the project names is in the rendered directory
        assert (out / ref["path"]).exists(), ref["path"]
    archive_ref = next(r for r in refs if r["path"] == "Models/libmodel.a")
    assert archive_ref["lastKnownFileType"] == "archive.ar"
    assert json.loads((out / "Models/model/manifest.json").read_text())["export"]["system_lib"] is True

    configs = [objects[c] for c in objects[target["buildConfigurationList"]]["buildConfigurations"]]
    assert sorted(c["name"] for c in configs) == ["Debug", "Release"]
    for c in configs:
        s = c["buildSettings"]
        assert s["DEVELOPMENT_TEAM"] == TEAM and s["CODE_SIGN_STYLE"] == "Automatic"
        assert s["PRODUCT_BUNDLE_IDENTIFIER"] == "org.example.SoftMax-QA" and s["SDKROOT"] == "iphoneos"
        assert s["INFOPLIST_FILE"] == "TvmgenApp/Info.plist" and s["TVM_SOURCE_DIR"] == "/opt/tvm"
        flags = s["OTHER_LDFLAGS"]
        assert flags[flags.index("$(PROJECT_DIR)/Models/libmodel.a") - 1] == "-force_load"
        assert "Metal" in flags and "$(PROJECT_DIR)/tvmgen-jni/include" in s["HEADER_SEARCH_PATHS"]

    info = plistlib.loads((out / "TvmgenApp/Info.plist").read_bytes())
    assert info["CFBundleIdentifier"] == "$(PRODUCT_BUNDLE_IDENTIFIER)" and info["CFBundleDisplayName"] == "Softmax QA"
    assert info["TvmgenDefaultMode"] == "tracker" and info["TvmgenDefaultAddress"] == "192.168.1.5"
    assert info["TvmgenDefaultPort"] == 9190 and info["TvmgenDefaultKey"] == "iphone-15"
    assert info["UIRequiredDeviceCapabilities"] == ["arm64"] and "NSLocalNetworkUsageDescription" in info
    readme = (out / "README.md").read_text()
    assert f"DEVELOPMENT_TEAM={TEAM}" in readme and "iproxy 9190 9190" in readme and "remote.system_lib()" in readme
    assert (out / "tvmgen-jni/include/tvmgen/rpc_server.h").is_file() and not list(out.rglob("*.jinja"))


def test_a_streaming_models_state_files_go_into_the_bundle(tmp_path, ios_artifacts):
    """The runtime reads a streaming model's initial state from state/<i>.npy beside the manifest: the app's
    model folder keeps that subfolder, byte for byte."""
    art = tmp_path / "art"
    shutil.copytree(ios_artifacts["cpu"], art)
    (art / "state").mkdir()
    initial = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(art / "state" / "0.npy", initial)
    out = render(tmp_path / "proj", art)
    np.testing.assert_array_equal(np.load(out / "Models" / "model" / "state" / "0.npy"), initial)
    assert (out / "Models" / "model" / "manifest.json").read_bytes() == (art / "manifest.json").read_bytes()


def test_metal_project_and_deploy_kind(tmp_path, ios_artifacts):
    out = render(tmp_path / "metal", ios_artifacts["metal"], device="metal", kind="deploy", team_id="")
    info = plistlib.loads((out / "TvmgenApp/Info.plist").read_bytes())
    assert info["UIRequiredDeviceCapabilities"] == ["arm64", "metal"] and info["TvmgenKind"] == "deploy"
    assert info["TvmgenModelDevice"] == "metal"
    pbx = parse_pbxproj((out / "TvmgenApp.xcodeproj/project.pbxproj").read_text())
    settings = [
        o["buildSettings"]
        for o in pbx["objects"].values()
        if o["isa"] == "XCBuildConfiguration" and "DEVELOPMENT_TEAM" in o["buildSettings"]
    ]
    assert settings and all(s["DEVELOPMENT_TEAM"] == "" for s in settings)  # no team yet: filled in on the Mac
    assert "DEVELOPMENT_TEAM=YOUR_TEAM_ID" in (out / "README.md").read_text()


def test_rendering_is_deterministic(tmp_path, ios_artifacts):
    a, b = render(tmp_path / "a", ios_artifacts["cpu"]), render(tmp_path / "b", ios_artifacts["cpu"])
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []
    assert project.object_id("file:TvmgenApp/main.mm") == project.object_id("file:TvmgenApp/main.mm")
    assert project.object_id("a") != project.object_id("b")


def test_bad_input_is_refused_before_anything_is_written(tmp_path, ios_artifacts):
    with pytest.raises(InputError, match="not an Apple developer team id"):
        project.check_team_id("team")
    with pytest.raises(InputError, match="not a valid iOS bundle identifier"):
        project.check_bundle_id("no_dots")
    opts = ios_app.IosAppOptions("rpc", "m.onnx", bundle_id="org.x.y")
    with pytest.raises(InputError, match="--team-id is missing"):
        ios_app.check_options(opts, builds_here=True)  # where it would be built, a team is needed
    ios_app.check_options(opts, builds_here=False)  # rendering alone does not need one
    with pytest.raises(InputError, match="device 'opencl' is not available on platform 'ios-arm64'"):
        ios_app.check_options(dataclasses.replace(opts, device="opencl"), builds_here=False)
    with pytest.raises(ToolMissingError, match="cannot install"):
        ios_app.check_options(dataclasses.replace(opts, install=True), builds_here=False)
    with pytest.raises(InputError, match="--install needs the device"):
        ios_app.check_options(dataclasses.replace(opts, install=True, team_id=TEAM), builds_here=True)
    # a failure while rendering leaves no project behind
    ctx = project.context("rpc", "org.x.y", "x", "softmax", "cpu")
    bad = tmp_path / "bad-art"
    shutil.copytree(ios_artifacts["cpu"], bad)
    with tarfile.open(bad / "model.tar", "w") as t:
        t.add(bad / "manifest.json", arcname="lib0.o")  # not an object file
    from tvmgen.core import artifact

    with pytest.raises(InputError, match="not an arm64 Mach-O object"):
        with artifact.staging(tmp_path / "proj", False) as staged:
            project.create_project(staged, ctx, bad)
    assert not (tmp_path / "proj").exists() and not list(tmp_path.glob(".proj*"))


# ----------------------------------------------------------------------------- shared native code, on this host


def connect_soon(rpc, port: int, seconds: float = 10):
    """Connect once the server thread listens (Start returns before it does)."""
    import time

    deadline = time.time() + seconds
    while True:
        try:
            return rpc.connect("127.0.0.1", port, key="iphone")
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def test_shared_native_code_runs_and_serves_the_linked_model(tmp_path, softmax, ios_artifacts):
    """The app's C++ core + jni/'s runtime and server, built here with g++ and linked with a host build of
    the model in system-lib mode (as the app links its model): it runs the model from its manifest,
    serves it in standalone mode to a TVM RPC client (remote.system_lib()), refuses uploads, and stops."""
    require_tool("g++")
    import tvm
    from tvm import relax, rpc

    plat = dataclasses.replace(PLATFORMS["host"], system_lib=True)
    build_executable(softmax, BuildOptions(plat, "cpu")).export_library(str(tmp_path / "host.tar"))
    objs = tmp_path / "objs"
    with tarfile.open(tmp_path / "host.tar") as t:
        t.extractall(objs, filter="data")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    manifest = json.loads((ios_artifacts["cpu"] / "manifest.json").read_text())
    manifest["arch"] = platform.machine()  # the iOS manifest, for this machine's build of the same model
    (model_dir / "manifest.json").write_text(json.dumps(manifest))

    site = Path(tvm.__file__).resolve().parent.parent
    bridge = REPO / "templates/ios_rpc/TvmgenApp/Bridge"
    flags = [
        "-std=c++17",
        "-O0",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        f"-I{REPO / 'jni/include'}",
        f"-I{bridge}",
        f"-I{site / 'tvm_ffi/include'}",
    ]
    sources = [
        REPO / "tests/ios/ios_app_core_check.cc",
        bridge / "app_core.cc",
        REPO / "jni/src/runtime.cc",
        REPO / "jni/src/rpc_server.cc",
    ]

    def compile_one(src):
        return subprocess.run(
            ["g++", *flags, "-c", src, "-o", tmp_path / f"{src.stem}.o"], capture_output=True, text=True
        )

    with ThreadPoolExecutor(2) as pool:
        for r in pool.map(compile_one, sources):
            assert r.returncode == 0, r.stderr[-3000:]
    exe = tmp_path / "ios_app_core_check"
    r = subprocess.run(
        [
            "g++",
            *[tmp_path / f"{s.stem}.o" for s in sources],
            *sorted(objs.glob("*.o")),
            "-o",
            exe,
            "-Wl,--no-as-needed",
            site / "tvm/lib/libtvm_runtime.so",
            site / "tvm_ffi/lib/libtvm_ffi.so",
            "-ldl",
            "-lpthread",
            f"-Wl,-rpath,{site / 'tvm/lib'}:{site / 'tvm_ffi/lib'}",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, model_dir, str(port), tmp_path / "work"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        result = json.loads(proc.stdout.readline())
        assert result["device"] == "cpu" and result["runs"] == 3 and result["median_run_ms"] >= 0
        (out,) = result["outputs"]
        assert out["shape"] == [3, 10] and abs(out["mean"] - 0.1) < 1e-6  # softmax rows sum to 1
        assert "unknown mode" in proc.stdout.readline()
        assert proc.stdout.readline().strip() == "serving"

        remote = connect_soon(rpc, port)
        info = json.loads(remote.get_function("tvmgen.device_info")())
        assert info["system_lib_only"] is True and info["linked_models"] == ["softmax"]
        dev = remote.cpu()
        vm = relax.VirtualMachine(remote.system_lib(), dev)
        x = np.random.default_rng(0).standard_normal((3, 10)).astype("float32")
        y = vm["main"](tvm.runtime.tensor(x, dev)).numpy()
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
        assert vm.time_evaluator("main", dev, number=3, repeat=2)(tvm.runtime.tensor(x, dev)).mean > 0
        # tvmgen bench on the same session: no upload, the linked model run, timed and compared
        from tvmgen.remote import bench

        art = tmp_path / "artifact"
        shutil.copytree(ios_artifacts["cpu"], art)
        (art / "manifest.json").write_text(json.dumps(manifest))  # this machine's build of the same model

        def reference(inputs):
            v = inputs["a"]
            e = np.exp(v - v.max(-1, keepdims=True))
            return [e / e.sum(-1, keepdims=True)]

        report = bench.bench_model(remote, info, art, "iphone", 3, 1, 0, 0, reference, "numpy")
        assert report.cold["upload"] == 0 and len(report.warm_ms) == 3 and report.check[0]["max_abs"] < 1e-6
        manifest_other = dict(manifest, model={**manifest["model"], "name": "mobilenet"})
        (art / "manifest.json").write_text(json.dumps(manifest_other))
        with pytest.raises(InputError, match="serves softmax, not mobilenet"):
            bench.bench_model(remote, info, art, "iphone", 3, 1, 0, 0)
        refused = ""
        try:
            remote.upload(model_dir / "manifest.json", "manifest.json")
        except Exception as e:
            refused = str(e)
        assert "iOS cannot load uploaded code" in refused and "remote.system_lib()" in refused
        del vm, remote, dev
        gc.collect()  # the session ends when the client lets go; then the server can stop
        stdout, stderr = proc.communicate("stop\n", timeout=20)
        assert proc.returncode == 0 and "stopped 1" in stdout, stderr
        assert "listening on 127.0.0.1" in stderr and "stopped after 1 sessions" in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
