"""``--device vulkan``: tvmgen's GLSL code generator (SPIR-V through glslang) and its Vulkan backend
(libtvmgen_vulkan), on Mesa's lavapipe (a CPU Vulkan device).

Needs glslang-tools and spirv-tools to compile and validate, and the Vulkan loader with a driver to run
(libvulkan1, mesa-vulkan-drivers; the runtime build needs libvulkan-dev): all installed by
scripts/bootstrap.sh. Without them the tests are skipped (failed under CI=true).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import run_native, unavailable

# whole models compiled for Vulkan and the host runtime built with CMake
pytestmark = pytest.mark.slow

MODELS = ("tiny", "mobilenet")


@pytest.fixture(scope="module")
def tools():
    for tool, package in (("glslangValidator", "glslang-tools"), ("spirv-val", "spirv-tools")):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install {package}; scripts/bootstrap.sh)")


@pytest.fixture(scope="module")
def arts(tools, tmp_path_factory, builtin_onnx, compiled) -> dict:
    """(model, device) -> artifact dir (conftest's ``compiled``: once per session, shared)."""
    from tvmgen.frontends.builtin import materialize

    paths = {"mobilenet": builtin_onnx, "tiny": materialize("builtin:tiny", tmp_path_factory.mktemp("vk-models"))}
    return {(m, d): compiled(paths[m], "host", d, name=m) for m in MODELS for d in ("cpu", "vulkan")}


@pytest.fixture(scope="module")
def runtime(host_runtime):
    """The host runtime with libtvmgen_vulkan, after checking (in another process) that it finds a device."""
    lib = host_runtime / "lib" / "libtvmgen_vulkan.so"
    if not lib.is_file():
        unavailable("the host runtime was built without libtvmgen_vulkan (apt-get install libvulkan-dev)")
    code = f"import ctypes, tvm; ctypes.CDLL({str(lib)!r}, ctypes.RTLD_GLOBAL); print(tvm.get_global_func('tvmgen.vulkan.info')())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-500:]}
    if not info.get("available"):
        unavailable(f"no Vulkan device: {info.get('error')} (apt-get install libvulkan1 mesa-vulkan-drivers)")
    print(f"Vulkan device: {info['device']} (Vulkan {info['api']})", file=sys.stderr)
    return host_runtime


def kernels_of(art) -> list[dict]:
    from tvmgen.compiler import vulkan

    return vulkan.read_payload((art / "model.so").read_bytes())


@pytest.mark.parametrize("model", MODELS)
def test_every_kernel_is_valid_spirv(arts, model):
    from tvmgen.compiler import vulkan

    art = arts[(model, "vulkan")]
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["device"] == "vulkan" and manifest["target"]["kind"] == "vulkan"
    assert manifest["vm"]["devices"][0]["dl_device_type"] == 7
    kernels = kernels_of(art)
    assert len(kernels) >= 5
    invalid = {k["name"]: vulkan.spirv_val(k["spirv"]) for k in kernels}
    assert not {n: e for n, e in invalid.items() if e}, invalid
    for k in kernels:
        assert k["spirv"][:4] == b"\x03\x02\x23\x07"  # SPIR-V magic, little-endian
        assert k["glsl"].startswith("#version 450") and f"// Function: {k['name']}" in k["glsl"]
        assert k["launch_tags"] and all(t.startswith(("blockIdx.", "threadIdx.")) for t in k["launch_tags"])
        assert np.prod(k["workgroup"]) <= 256


def test_repack_keeps_other_modules():
    """The export's import-tree rewrite: only a placeholder becomes a vulkan module; the rest is unchanged."""
    import struct

    from tvmgen.compiler import vulkan

    def s(b):
        return struct.pack("<Q", len(b)) + b

    def vec(xs):
        return struct.pack(f"<Q{len(xs)}Q", len(xs), *xs)

    payload = vulkan.payload([], [])
    holder = b"junk" + vulkan.PLACEHOLDER_KEY.encode() + b"more" + payload + b"tail"
    body = vec([0, 1, 2, 2]) + vec([1, 2]) + s(b"relax.VMExecutable") + s(b"exec") + s(b"_lib")
    body += s(b"const_loader") + s(holder)
    out, n = vulkan.repack(struct.pack("<Q", len(body)) + body)
    assert n == 1
    want = (
        vec([0, 1, 2, 2]) + vec([1, 2]) + s(b"relax.VMExecutable") + s(b"exec") + s(b"_lib") + s(b"vulkan") + s(payload)
    )
    assert out == struct.pack("<Q", len(want)) + want
    # a const_loader of TVM's own (no payload) is kept as it is
    body2 = vec([0, 1]) + vec([]) + s(b"const_loader") + s(b"weights")
    blob2 = struct.pack("<Q", len(body2)) + body2
    assert vulkan.repack(blob2) == (blob2, 0)


@pytest.mark.parametrize("model", MODELS)
def test_tvmgen_run_on_lavapipe_matches_cpu(arts, runtime, tmp_path, model):
    """tvmgen-run (libtvmgen_runtime + libtvmgen_vulkan) against the CPU build of the same model."""
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs

    m = artifact.load(arts[(model, "vulkan")])
    inputs = random_inputs(m.inputs, seed=0)
    proc, got = run_native(runtime, arts[(model, "vulkan")], inputs, tmp_path, tag="vk", repeat=2)
    assert got is not None, proc.stderr[-2000:]
    assert "on vulkan" in proc.stderr
    _, want = run_native(runtime, arts[(model, "cpu")], inputs, tmp_path, tag="cpu", repeat=1)
    for g, w in zip(got, want):
        err = float(np.abs(g - w).max())
        print(f"{model}: max abs error vs the CPU build {err:.3g}", file=sys.stderr)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_python_runner_on_lavapipe(arts, runtime, monkeypatch):
    """tvmgen's Python runner (``tvmgen run``, ``--check``) loads libtvmgen_vulkan itself."""
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    monkeypatch.setenv("TVMGEN_VULKAN_BACKEND", str(runtime / "lib" / "libtvmgen_vulkan.so"))
    m = artifact.load(arts[("tiny", "vulkan")])
    inputs = random_inputs(m.inputs, seed=1)
    got = HostModel(arts[("tiny", "vulkan")]).run(inputs)
    want = HostModel(arts[("tiny", "cpu")]).run(inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
