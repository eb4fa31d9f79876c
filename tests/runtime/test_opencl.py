"""tvmgen's own OpenCL backend (libtvmgen_opencl): run OpenCL artifacts on PoCL, the kernel cache.

Needs an OpenCL platform: PoCL (CPU OpenCL, `apt-get install pocl-opencl-icd ocl-icd-opencl-dev`,
installed by scripts/bootstrap.sh). Without one the tests are skipped (failed under CI=true).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import save_onnx, single_op_models
from helpers import python_c, run_tool
from tvmgen.core.model import random_inputs

# every test needs the runtime built with CMake and whole models compiled for OpenCL: all slow
pytestmark = pytest.mark.slow

SINGLE_OPS = ("conv3x3", "conv_depthwise", "gemm", "softmax", "two_outputs")


@pytest.fixture(scope="module")
def runtime(ocl_runtime) -> Path:
    """The host runtime (tvmgen-run, libtvmgen_runtime, libtvmgen_opencl) built from jni/ (conftest)."""
    return ocl_runtime


@pytest.fixture(scope="module")
def arts(tmp_path_factory, builtin_onnx, compiled) -> dict:
    """(name, device) -> artifact dir, for the built-in model and a few single-op models (compiled once per
    session, conftest's ``compiled``; shared, so not to be changed)."""
    d = tmp_path_factory.mktemp("ocl-arts")
    models = {"mobilenet": builtin_onnx}
    for name in SINGLE_OPS:
        models[name] = save_onnx(single_op_models()[name], d / f"{name}.onnx")
    out = {}
    for name, path in models.items():
        for device in ("cpu", "opencl"):
            out[(name, device)] = compiled(path, "host", device, name=name)
        if name == "conv3x3":  # the Adreno flavour of the OpenCL target (buffer memory for this model)
            out[(name, "adreno")] = compiled(path, "host", "opencl", name=name, gpu_family="adreno")
    return out


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ocl-cache")


def reference(runtime, arts, name, tmp_path, inputs):
    rc, want, _, err = run_tool(runtime, arts[(name, "cpu")], tmp_path, inputs, tag="cpu")
    assert rc == 0, err
    return want


@pytest.mark.parametrize(
    "name,flavour", [("mobilenet", "opencl"), *((n, "opencl") for n in SINGLE_OPS), ("conv3x3", "adreno")]
)
def test_opencl_artifact_matches_cpu(runtime, opencl_lib, arts, shared_cache, tmp_path, name, flavour):
    from tvmgen.core import artifact

    inputs = random_inputs(artifact.load(arts[(name, "cpu")]).inputs, seed=5)
    want = reference(runtime, arts, name, tmp_path, inputs)
    rc, got, stats, err = run_tool(runtime, arts[(name, flavour)], tmp_path, inputs, cache=shared_cache)
    assert rc == 0, err
    assert stats is not None and stats["hits"] + stats["misses"] > 0, err  # kernels went through the cache
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)
    # the runtime weighs each kernel by its code with its #pragma unroll loops written out (compiler.opencl_loops
    # keeps TVM's unrolled loops as loops): the convolution's tile loops several times its text
    code = re.search(r"tvmgen-opencl: (\d+) kernels, (\d+) KB of OpenCL C \((\d+) KB with its #pragma unroll", err)
    assert code, err
    if name == "conv3x3" and flavour == "opencl":
        assert int(code.group(3)) > 2 * int(code.group(2)), code.group(0)


def test_python_run_on_opencl(opencl_lib, arts, shared_cache, tmp_path):
    """`tvmgen run` (the Python Relax VM) on an OpenCL artifact loads libtvmgen_opencl itself."""
    from helpers import run_tvmgen

    env = {"TVMGEN_OPENCL_BACKEND": str(opencl_lib), "TVMGEN_OPENCL_CACHE_DIR": str(shared_cache)}
    outs = {}
    for device in ("cpu", "opencl"):
        proc = run_tvmgen("run", arts[("mobilenet", device)], "-o", tmp_path / device, "--repeat", "1", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs[device] = np.load(tmp_path / device / "probs.npy")
    np.testing.assert_allclose(outs["opencl"], outs["cpu"], atol=1e-4, rtol=0)


GEMM_SCRIPT = r"""
import ctypes, json, sys
import numpy as np
import tvm
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
from tvmgen.compiler.gemm import gemm_module
from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget

tvm.get_global_func("tvmgen.opencl.set_cache_dir")(sys.argv[3])
assert tvm.get_global_func("tvmgen.opencl.cache_dir")() == sys.argv[3]
n = 64
mod = gemm_module(n, BuildTarget(PLATFORMS["host"], "opencl"))
mod.export_library(sys.argv[2])
lib = tvm.runtime.load_module(sys.argv[2])
dev = tvm.opencl(0)
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n)).astype("float32")
b = rng.standard_normal((n, n)).astype("float32")
A, B = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
C = tvm.runtime.empty((n, n), "float32", dev)
lib["gemm"](A, B, C)
D = tvm.runtime.empty((n, n), "float32", dev)
D.copyfrom(C)  # device to device
print(json.dumps({"err": float(np.abs(D.numpy() - a @ b).max()), "exist": bool(dev.exist),
                  "name": dev.device_name, "max_threads": dev.max_threads_per_block, "warp": dev.warp_size,
                  "stats": json.loads(tvm.get_global_func("tvmgen.opencl.cache_stats")())}))
"""


def test_gemm_module_matches_numpy(opencl_lib, tmp_path):
    proc = subprocess.run(
        [*python_c(GEMM_SCRIPT), str(opencl_lib), str(tmp_path / "gemm.so"), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["err"] < 1e-3, r
    assert r["exist"] and r["name"] and r["max_threads"] > 0 and r["warp"] == 1
    assert r["stats"]["misses"] == 1 and r["stats"]["writes"] == 1
    assert len(list((tmp_path / "cache").glob("*.clbin"))) == 1


def first_run_with_a_cache(runtime, arts, name, tmp_path, seed):
    """NAME's OpenCL build run once (a new process) with the empty kernel cache tmp_path/cache, which must
    succeed: (the artifact, its inputs, the CPU build's outputs for them, the cache, the run's cache stats)."""
    from tvmgen.core import artifact

    art = arts[(name, "opencl")]
    inputs = random_inputs(artifact.load(art).inputs, seed=seed)
    want = reference(runtime, arts, name, tmp_path, inputs)
    cache = tmp_path / "cache"
    rc, _, first, err = run_tool(runtime, art, tmp_path, inputs, cache=cache, tag="first")
    assert rc == 0, err
    return art, inputs, want, cache, first


def test_cache_written_then_hit(runtime, opencl_lib, arts, tmp_path):
    art, inputs, want, cache, first = first_run_with_a_cache(runtime, arts, "conv3x3", tmp_path, seed=1)
    assert first["hits"] == 0 and first["misses"] > 0 and first["writes"] == first["misses"], first
    files = sorted(cache.glob("*.clbin"))
    assert len(files) == first["writes"]
    rc, got2, second, err = run_tool(runtime, art, tmp_path, inputs, cache=cache, tag="second")  # a new process
    assert rc == 0, err
    assert second["hits"] == first["misses"] and second["misses"] == 0 and second["writes"] == 0, second
    for g, w in zip(got2, want):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)


def test_corrupt_cache_entry_is_rebuilt(runtime, opencl_lib, arts, tmp_path):
    art, inputs, want, cache, first = first_run_with_a_cache(runtime, arts, "conv_depthwise", tmp_path, seed=2)
    files = sorted(cache.glob("*.clbin"))
    assert files
    for i, f in enumerate(files):  # truncated, a flipped byte, garbage
        data = bytearray(f.read_bytes())
        if i % 3 == 0:
            f.write_bytes(bytes(data[: len(data) // 2]))
        elif i % 3 == 1:
            data[len(data) // 2] ^= 0xFF
            f.write_bytes(bytes(data))
        else:
            f.write_bytes(b"not a cache entry")
    rc, got, second, err = run_tool(runtime, art, tmp_path, inputs, cache=cache, tag="second")
    assert rc == 0, err
    assert second["corrupt"] == len(files) and second["hits"] == 0 and second["writes"] == len(files), second
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)
    rc, _, third, err = run_tool(runtime, art, tmp_path, inputs, cache=cache, tag="third")
    assert rc == 0 and third["hits"] == len(files) and third["corrupt"] == 0, third


def test_no_opencl_library_gives_clear_error(runtime, arts, tmp_path):
    art = arts[("softmax", "opencl")]
    from tvmgen.core import artifact

    inputs = random_inputs(artifact.load(art).inputs, seed=3)
    missing = "/nonexistent/vendor/lib64/libOpenCL.so"
    rc, _, _, err = run_tool(runtime, art, tmp_path, inputs, env={"TVMGEN_OPENCL_LIBRARY": missing})
    assert rc != 0
    assert "no OpenCL library could be loaded" in err and missing in err, err
    assert "Traceback" not in err and "Segmentation" not in err


def test_a_vendor_icd_named_as_the_library_says_to_use_the_loader(runtime, arts, tmp_path):
    """A vendor ICD (NVIDIA's libnvidia-opencl.so exports only clIcdGetPlatformIDsKHR and
    clGetExtensionFunctionAddress) named by TVMGEN_OPENCL_LIBRARY: the error says it is a driver
    and how to reach it through the ICD loader."""
    from tvmgen.core import artifact

    src = tmp_path / "icd.c"
    src.write_text(
        "int clIcdGetPlatformIDsKHR(unsigned n, void** p, unsigned* k) { return -1001; }\n"
        "void* clGetExtensionFunctionAddress(const char* name) { return 0; }\n"
    )
    icd = tmp_path / "libvendor-opencl.so"
    cc = subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(icd), str(src)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    art = arts[("softmax", "opencl")]
    inputs = random_inputs(artifact.load(art).inputs, seed=3)
    rc, _, _, err = run_tool(runtime, art, tmp_path, inputs, env={"TVMGEN_OPENCL_LIBRARY": str(icd)})
    assert rc != 0
    assert f"{icd}: lacks clGetPlatformIDs" in err, err
    assert "not the ICD loader" in err and "libOpenCL.so.1" in err and "OCL_ICD_VENDORS" in err, err


def test_bench_over_rpc_on_opencl(opencl_lib, arts, tmp_path):
    """`tvmgen bench --device opencl` against the native device server, which loads libtvmgen_opencl (the
    session's OpenCL build of the built-in model: compiling a model for bench is test_rpc's)."""
    from helpers import bench_on_a_gpu_device

    res = bench_on_a_gpu_device(arts[("mobilenet", "opencl")], tmp_path, "--device", "opencl")
    assert res["dev"] == "opencl" and "opencl" in res["device"]["devices"]
    assert res["check"][0]["max_abs"] < 1e-5 and res["warm_ms"]["count"] == 2


def test_host_visible_inputs_match_plain_copies(runtime, opencl_lib, arts, shared_cache, tmp_path):
    """--host-visible-inputs (scope global.host, mapped copies): same outputs, recorded in the timings JSON."""
    art = arts[("mobilenet", "opencl")]
    rng = np.random.default_rng(3)
    inputs = {
        i["name"]: rng.standard_normal(i["shape"]).astype(i["dtype"])
        for i in json.loads((art / "manifest.json").read_text())["inputs"]
    }
    rc, plain, _, err = run_tool(
        runtime,
        art,
        tmp_path,
        inputs,
        cache=shared_cache,
        tag="plain",
        extra=["--timings", str(tmp_path / "plain.json")],
    )
    assert rc == 0, err
    assert json.loads((tmp_path / "plain.json").read_text())["host_visible_inputs"] is False
    rc, mapped, _, err = run_tool(
        runtime,
        art,
        tmp_path,
        inputs,
        cache=shared_cache,
        tag="mapped",
        extra=["--host-visible-inputs", "--timings", str(tmp_path / "mapped.json")],
    )
    assert rc == 0, err
    assert json.loads((tmp_path / "mapped.json").read_text())["host_visible_inputs"] is True
    for a, b in zip(plain, mapped):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)


def test_host_visible_inputs_ignored_on_cpu(runtime, arts, tmp_path):
    art = arts[("gemm", "cpu")]
    inputs = {
        i["name"]: np.ones(i["shape"], i["dtype"]) for i in json.loads((art / "manifest.json").read_text())["inputs"]
    }
    rc, _, _, err = run_tool(
        runtime, art, tmp_path, inputs, extra=["--host-visible-inputs", "--timings", str(tmp_path / "t.json")]
    )
    assert rc == 0, err
    assert "--host-visible-inputs ignored: the model runs on cpu" in err
    assert json.loads((tmp_path / "t.json").read_text())["host_visible_inputs"] is False


def test_direct_calls_on_opencl_equal_the_vm(runtime, opencl_lib, arts, shared_cache, tmp_path):
    """Model::Run makes main's kernel launches itself on OpenCL as on the CPU (recorded on the first run, on
    buffers allocated once): the timings say so, and every replayed run's outputs equal the VM's bit for bit."""
    from tvmgen.core import artifact

    art = arts[("mobilenet", "opencl")]
    inputs = random_inputs(artifact.load(art).inputs, seed=7)
    outs, executors = {}, {}
    for tag, extra in (("direct", ()), ("vm", ("--vm",))):
        timings = tmp_path / f"{tag}.json"
        rc, outs[tag], _, err = run_tool(
            runtime, art, tmp_path, inputs, cache=shared_cache, tag=tag, extra=[*extra, "--timings", str(timings)]
        )
        assert rc == 0, err
        t = json.loads(timings.read_text())
        executors[tag] = t["executor"]
        assert t["runs"] >= 1 and t["warmup"] >= 1  # the timed runs come after the recording run
    assert executors == {
        "direct": "direct calls",
        "vm": "relax vm: direct calls are turned off (LoadOptions::direct_calls)",
    }
    for a, b in zip(outs["direct"], outs["vm"]):
        np.testing.assert_array_equal(a, b)
