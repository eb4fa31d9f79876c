"""Each platform's output is built for the right machine; the target table; toolchain discovery."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, onnx_model, require_tool, save_onnx, single_op_models
from tvmgen import frontends
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.export import POOL_FLAGS, parallel_pool_object, parallel_pool_source
from tvmgen.compiler.targets.platforms import PLATFORMS, check_pair, target_dict
from tvmgen.core import binfmt, toolchains
from tvmgen.core.errors import InputError, ToolMissingError

NO_NDK = dict.fromkeys(("TVM_NDK_CC", "ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "ANDROID_HOME", "ANDROID_SDK_ROOT"), "")


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("conv")
    return frontends.load(save_onnx(single_op_models()["conv3x3"], d / "conv.onnx"), [])


def build(imported, tmp_path, platform, device="cpu", **kw):
    out = tmp_path / f"{platform}-{device}"
    m = compile_to_artifact(imported, BuildOptions(PLATFORMS[platform], device, **kw), out, True, {"name": "conv"})
    return out, m


def elf_type(data: bytes) -> int:
    return struct.unpack("<H", data[16:18])[0]  # 1 relocatable, 3 shared object


def members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def test_linux_aarch64_is_aarch64_shared_object(conv_model, tmp_path):
    require_tool("aarch64-linux-gnu-g++")
    out, m = build(conv_model, tmp_path, "linux-aarch64")
    data = (out / "model.so").read_bytes()
    assert binfmt.describe(data) == ("elf", "aarch64") and elf_type(data) == 3
    assert m.export["kind"] == "shared" and m.arch == "aarch64" and m.abi == "aarch64"
    assert m.target["mtriple"] == "aarch64-linux-gnu"


def test_the_launcher_is_compiled_once_per_compiler_and_flags(tmp_path, monkeypatch):
    """Model links take the launcher as an object from tvmgen's cache: compiled on the first link, then
    reused; another compiler or other flags get their own entry; the object is the launcher's (an ELF
    relocatable of the compiler's architecture defining tvmgen_parallel_install). Without a writable cache the
    link gets the source, as before."""
    for tool in ("g++", "aarch64-linux-gnu-g++", "nm"):
        require_tool(tool)
    monkeypatch.setenv("TVMGEN_CACHE_DIR", str(tmp_path / "cache"))
    gxx, cross = Path(shutil.which("g++")), Path(shutil.which("aarch64-linux-gnu-g++"))
    first = parallel_pool_object(gxx, POOL_FLAGS)
    assert first.parent == tmp_path / "cache" / "launcher" and first.suffix == ".o"
    stamp = first.stat().st_mtime_ns
    assert parallel_pool_object(gxx, POOL_FLAGS) == first and first.stat().st_mtime_ns == stamp  # not rebuilt
    other_flags = parallel_pool_object(gxx, [*POOL_FLAGS, "-O1"])
    arm = parallel_pool_object(cross, POOL_FLAGS)
    assert len({first, other_flags, arm}) == 3
    assert sorted(p.name for p in first.parent.iterdir()) == sorted(p.name for p in (first, other_flags, arm))
    for obj, arch in ((first, "x86_64"), (arm, "aarch64")):
        data = obj.read_bytes()
        assert binfmt.describe(data) == ("elf", arch) and elf_type(data) == 1
        symbols = subprocess.run(["nm", "-g", "--defined-only", obj], capture_output=True, text=True, check=True)
        assert " T tvmgen_parallel_install" in symbols.stdout
    (tmp_path / "a-file").write_text("")  # a cache "directory" below a file: not creatable, even by root
    monkeypatch.setenv("TVMGEN_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    assert parallel_pool_object(gxx, POOL_FLAGS) == parallel_pool_source()


@pytest.mark.parametrize(
    "platform,arch", [("android-arm64", "aarch64"), ("android-armv7", "arm"), ("android-x86_64", "x86_64")]
)
def test_android_objects_only_per_abi(conv_model, tmp_path, monkeypatch, platform, arch):
    for k, v in NO_NDK.items():
        monkeypatch.setenv(k, v)
    out, m = build(conv_model, tmp_path, platform, objects_only=True)
    objs = members(out / "model.tar")
    # the parallel launcher travels as source, which the link command compiles with the objects
    assert objs.pop("parallel_pool.cc") == parallel_pool_source().read_bytes()
    assert objs and all(n.endswith(".o") for n in objs)
    for name, data in objs.items():
        assert binfmt.describe(data) == ("elf", arch), name
        assert elf_type(data) == 1
    assert m.export["kind"] == "objects" and "clang++ -shared" in m.export["finish_command"]
    assert "-Wl,-z,max-page-size=16384" in m.export["finish_command"]
    assert m.export["finish_command"].endswith("objs/*.o objs/parallel_pool.cc")
    assert m.abi == PLATFORMS[platform].abi


def fake_ndk(root: Path) -> Path:
    """An NDK directory layout whose aarch64 clang++ is Debian's aarch64 g++ standing in for it, linking
    for 4 KB pages unless told otherwise, as NDK r27's clang does.

    It exercises tvmgen's NDK discovery and linking flow; the real NDK is tested where
    TVMGEN_TEST_NDK=1 and ANDROID_NDK_HOME point at one.
    """
    bindir = root / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin"
    bindir.mkdir(parents=True)
    cc = bindir / "aarch64-linux-android24-clang++"
    cc.write_text(f'#!/bin/sh\nexec {shutil.which("aarch64-linux-gnu-g++")} -Wl,-z,max-page-size=4096 "$@"\n')
    cc.chmod(0o755)
    return cc


def test_ndk_discovery_order(tmp_path, monkeypatch):
    for k, _v in NO_NDK.items():
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ToolMissingError, match="Android NDK not found"):
        toolchains.AndroidNdk().verify()
    sdk = tmp_path / "sdk"
    old, new = fake_ndk(sdk / "ndk" / "25.2.9519653"), fake_ndk(sdk / "ndk" / "27.0.12077973")
    monkeypatch.setenv("ANDROID_HOME", str(sdk))
    assert toolchains.AndroidNdk().verify() == new  # newest version under $ANDROID_HOME/ndk
    monkeypatch.setenv("ANDROID_NDK_ROOT", str(sdk / "ndk" / "25.2.9519653"))
    assert toolchains.AndroidNdk().verify() == old  # an explicit root wins
    monkeypatch.setenv("TVM_NDK_CC", str(new))
    assert toolchains.AndroidNdk().verify() == new  # TVM_NDK_CC wins over everything
    monkeypatch.delenv("TVM_NDK_CC")
    with pytest.raises(ToolMissingError, match="has no armv7a-linux-androideabi24-clang"):
        toolchains.AndroidNdk("armeabi-v7a").verify()


def test_android_arm64_links_with_ndk_layout(conv_model, tmp_path, monkeypatch):
    require_tool("aarch64-linux-gnu-g++")
    for k in NO_NDK:
        monkeypatch.delenv(k, raising=False)
    fake_ndk(tmp_path / "ndk")
    monkeypatch.setenv("ANDROID_NDK_HOME", str(tmp_path / "ndk"))
    out, m = build(conv_model, tmp_path, "android-arm64")
    data = (out / "model.so").read_bytes()
    assert binfmt.describe(data) == ("elf", "aarch64") and elf_type(data) == 3
    assert m.target["mtriple"] == "aarch64-linux-android"
    dynamic = subprocess.run(["nm", "-D", "--defined-only", str(out / "model.so")], capture_output=True, text=True)
    assert "tvmgen_parallel_install" in dynamic.stdout  # the parallel launcher is linked in
    pages = binfmt.page_report(out / "model.so")  # tvmgen's -z max-page-size=16384 wins over the 4 KB default
    assert pages.ok and pages.min_align == 16384, pages.summary()


@pytest.mark.skipif(
    os.environ.get("TVMGEN_TEST_NDK") != "1",
    reason="set TVMGEN_TEST_NDK=1 and ANDROID_NDK_HOME to a real Android NDK to run",
)
@pytest.mark.parametrize(
    "platform,arch", [("android-arm64", "aarch64"), ("android-armv7", "arm"), ("android-x86_64", "x86_64")]
)
def test_real_ndk(conv_model, tmp_path, platform, arch):
    out, _ = build(conv_model, tmp_path, platform)
    assert binfmt.describe_file(out / "model.so") == ("elf", arch)
    assert binfmt.page_report(out / "model.so").min_align >= 16384  # 16 KB pages, whatever the NDK's default


def test_ios_system_lib_objects_are_arm64_macho(conv_model, tmp_path):
    out, m = build(conv_model, tmp_path, "ios-arm64")
    objs = members(out / "model.tar")
    assert objs
    for name, data in objs.items():
        assert binfmt.describe(data) == ("macho", "aarch64"), name
    assert m.export["system_lib"] is True
    if m.export["kind"] == "objects":  # not on macOS: the command that finishes it there
        assert "xcrun libtool -static -o libmodel.a" in m.export["finish_command"]


def test_ios_metal_carries_metal_kernels(conv_model, tmp_path):
    out, m = build(conv_model, tmp_path, "ios-arm64", device="metal")
    blob = b"".join(members(out / "model.tar").values())
    assert b"kernel void" in blob  # Metal shading language source embedded for the runtime
    assert m.target["kind"] == "metal" and m.target["host"]["mtriple"] == "aarch64-apple-ios"
    assert [d["dl_device_type"] for d in m.vm["devices"]] == [8, 1]


def test_android_opencl_adreno(conv_model, tmp_path):
    out, m = build(conv_model, tmp_path, "android-arm64", device="opencl", gpu_family="adreno", objects_only=True)
    blob = b"".join(members(out / "model.tar").values())
    assert b"__kernel" in blob  # OpenCL C source for the device runtime to compile
    assert b"image2d_array_t" in blob  # texture memory: TVM's Adreno schedules
    assert m.target == {
        "kind": "opencl",
        "device": "adreno",
        "keys": ["adreno", "opencl", "gpu", "texture"],
        "host": target_dict(PLATFORMS["android-arm64"], "cpu"),
    }
    # one OpenCL entry per memory scope the module uses (buffers and textures), then the host
    names = [(d["name"], d["dl_device_type"]) for d in m.vm["devices"]]
    assert len(names) >= 3 and set(names[:-1]) == {("opencl", 4)} and names[-1] == ("cpu", 1), names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["host"]["mtriple"] == "aarch64-linux-android"


@pytest.mark.skipif(not shutil.which("nvcc"), reason="TVM compiles CUDA kernels with nvcc, which is not installed")
def test_host_cuda_compiles(conv_model, tmp_path):
    out, m = build(conv_model, tmp_path, "host", device="cuda")
    assert m.target["kind"] == "cuda"
    assert [d["dl_device_type"] for d in m.vm["devices"]] == [2, 1]
    assert binfmt.describe_file(out / "model.so")[0] == "elf"


def test_cuda_build_passes_over_a_rule_that_fails_on_a_kernel(tvmgen, tmp_path):
    """TVM's CUDA pipeline applies dlight's rules to the whole module at once, and its Reduction rule raises on
    a mean over every element (rfactor's "block_realize == old_block_realize"): tvmgen applies the same rules
    one kernel at a time, passes over the one that fails for that kernel and says so. GeneralReduction's
    schedule of it, a launch per element from host loops, is passed over too: Fallback takes it."""
    from onnx import TensorProto
    from onnx import helper as oh

    model = onnx_model(
        [oh.make_node("ReduceMean", ["x"], ["m"], keepdims=0)],
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 40])],
        [oh.make_tensor_value_info("m", TensorProto.FLOAT, [])],
    )
    r = tvmgen("compile", save_onnx(model, tmp_path / "mean.onnx"), "--device", "cuda", "-o", tmp_path / "cuda")
    assert r.returncode == 0, r.output
    assert "dlight's Reduction rule failed on 1 kernel(s) (mean): scheduled by Fallback" in r.output
    assert re.search(r"GeneralReduction schedule of mean launches \w+ from loops on the host", r.output), r.output
    assert json.loads((tmp_path / "cuda" / "manifest.json").read_text())["target"]["kind"] == "cuda"


def test_target_table():
    host = target_dict(PLATFORMS["host"], "cpu")
    assert host["kind"] == "llvm" and host["mcpu"] not in ("", "generic")
    assert target_dict(PLATFORMS["android-armv7"], "cpu") == {
        "kind": "llvm",
        "mtriple": "armv7a-linux-androideabi",
        "mattr": ["+neon"],
    }
    assert target_dict(PLATFORMS["android-arm64"], "opencl", "mali")["device"] == "mali"
    assert "device" not in target_dict(PLATFORMS["android-arm64"], "opencl", "generic")
    with pytest.raises(InputError, match="valid platform/device pairs: host/cpu"):
        check_pair(PLATFORMS["linux-aarch64"], "metal")
    with pytest.raises(InputError, match="device 'nnapi' is not available on platform 'linux-aarch64'"):
        check_pair(PLATFORMS["linux-aarch64"], "nnapi")
    with pytest.raises(InputError, match="unknown GPU family"):
        target_dict(PLATFORMS["android-arm64"], "opencl", "powervr")


def test_binfmt_rejects_non_binaries():
    assert binfmt.describe(b"#!/bin/sh\n") == ("unknown", "unknown")
    assert binfmt.describe(io.BytesIO(b"\x7fELF").read()) == ("unknown", "unknown")  # too short


@pytest.mark.skipif(
    not (sys.platform == "darwin" and shutil.which("xcrun")),
    reason="the iOS static library is made with Xcode's libtool: runs on macOS with Xcode only",
)
def test_ios_static_library_with_xcode(conv_model, tmp_path):
    out, m = build(conv_model, tmp_path, "ios-arm64")
    assert m.export["kind"] == "static" and (out / "libmodel.a").read_bytes()[:8] == b"!<arch>\n"


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_gemm_schedules_build(device, tmp_path):
    """The remote GEMM's schedules: vectorised CPU code, and thread-bound OpenCL kernels."""
    from tvmgen.compiler.gemm import gemm_module
    from tvmgen.compiler.targets.platforms import BuildTarget

    mod = gemm_module(64, BuildTarget(PLATFORMS["linux-aarch64"], device))
    mod.export_library(str(tmp_path / "gemm.tar"))
    blob = b"".join(members(tmp_path / "gemm.tar").values())
    if device == "opencl":
        assert b"__kernel" in blob and b"get_local_id" in blob  # threadIdx-bound
    else:
        assert all(binfmt.describe(d) == ("elf", "aarch64") for d in members(tmp_path / "gemm.tar").values())


def test_cpu_matrix_bundle_checks_every_x86_level_this_cpu_has(tmp_path):
    """scripts/cpu_matrix.py: the bundle that checks x86-64 builds on another machine without TVM.
    Here it runs the levels this CPU has and names the ones it lacks; the stdlib .npy reader agrees
    with numpy."""
    import importlib.util
    import platform
    import subprocess

    import numpy as np

    if platform.machine() != "x86_64":
        pytest.skip("the bundle holds x86-64 builds")
    spec = importlib.util.spec_from_file_location("cpu_matrix", REPO / "scripts" / "cpu_matrix.py")
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    for a in (
        np.arange(6, dtype=np.float32).reshape(2, 3) / 3,
        np.array([[0, 255]], np.uint8),
        np.array([-(2**31), 7], np.int32),
    ):
        np.save(tmp_path / "a.npy", a)
        assert matrix.read_npy(tmp_path / "a.npy")[1] == a.ravel().tolist()
    matrix.bundle(tmp_path / "b", names=("int8",))
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "b" / "cpu_matrix.py"), "check", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flags = Path("/proc/cpuinfo").read_text()
    for cpu, needs in matrix.CPUS.items():
        line = next(ln for ln in proc.stdout.splitlines() if f"int8-{cpu} " in ln)
        if all(f" {f}" in flags for f in needs):
            assert "ok   max abs error 0," in line, line
        else:
            assert "not run: this CPU lacks" in line, line
