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

from conftest import QEMU_AARCH64, REPO, run_native, save_onnx, single_op_models, unavailable
from helpers import vulkan_device

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
    info = vulkan_device(host_runtime)
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


def test_python_runner_on_lavapipe(arts, runtime, tmp_path):
    """tvmgen's Python runner (``tvmgen run``, ``--check``) loads libtvmgen_vulkan itself. In a process of its
    own, as a user runs it: a test worker that already loaded PoCL, TensorFlow and PyTorch for other modules
    has three more copies of LLVM beside TVM's and lavapipe's, which is no process a user runs."""
    from helpers import run_tvmgen

    env = {"TVMGEN_VULKAN_BACKEND": str(runtime / "lib" / "libtvmgen_vulkan.so"), "COLUMNS": "200"}
    outs = {}
    for device in ("vulkan", "cpu"):
        out = tmp_path / device
        r = run_tvmgen("run", arts[("tiny", device)], "-o", out, "--repeat", "1", "--seed", "1", env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        outs[device] = sorted(out.glob("*.npy"))
    assert [f.name for f in outs["vulkan"]] == [f.name for f in outs["cpu"]] and outs["cpu"]
    for g, w in zip(outs["vulkan"], outs["cpu"]):
        np.testing.assert_allclose(np.load(g), np.load(w), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- wider coverage (issue 36)


def _dtypes_model(path):
    """An ONNX model whose outputs are bool, int8, uint8, float16 and int64 (packed storage buffers: 8- and
    16-bit elements stored with atomics into their 32-bit word, int64 as ivec2) and a float32 sum of two."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    def scalar(name, kind, v):
        return h.make_tensor(name, kind, [], [v])

    nodes = [
        h.make_node("Greater", ["x", "zero"], ["pos"]),
        h.make_node("Mul", ["x", "ten"], ["x10"]),
        h.make_node("Clip", ["x10", "lo", "hi"], ["xc"]),
        h.make_node("Cast", ["xc"], ["q"], to=T.INT8),
        h.make_node("Abs", ["xc"], ["xa"]),
        h.make_node("Cast", ["xa"], ["u"], to=T.UINT8),
        h.make_node("Cast", ["x"], ["half"], to=T.FLOAT16),
        h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
        h.make_node("Mul", ["ids", "two"], ["ids2"]),
        h.make_node("Cast", ["pos"], ["posf"], to=T.FLOAT),
        h.make_node("Cast", ["half"], ["hf"], to=T.FLOAT),
        h.make_node("Add", ["posf", "hf"], ["y"]),
    ]
    shape = [3, 37]  # 111 elements: words shared by neighbours, a partial last word
    outs = [("pos", T.BOOL), ("q", T.INT8), ("u", T.UINT8), ("half", T.FLOAT16), ("ids2", T.INT64), ("y", T.FLOAT)]
    graph = h.make_graph(
        nodes,
        "dtypes",
        [h.make_tensor_value_info("x", T.FLOAT, shape), h.make_tensor_value_info("ids", T.INT64, shape)],
        [h.make_tensor_value_info(n, t, shape) for n, t in outs] + [h.make_tensor_value_info("am", T.INT64, [3])],
        initializer=[
            scalar("zero", T.FLOAT, 0.0),
            scalar("ten", T.FLOAT, 10.0),
            scalar("lo", T.FLOAT, -100.0),
            scalar("hi", T.FLOAT, 100.0),
            scalar("two", T.INT64, 2),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_narrow_and_64_bit_buffers_match_cpu_exactly(tools, runtime, compiled, tmp_path):
    """bool / int8 / uint8 / float16 / int64 buffers: the Vulkan build's outputs equal the CPU build's."""
    from tvmgen.compiler import vulkan

    model = _dtypes_model(tmp_path / "dtypes.onnx")
    arts = {d: compiled(model, "host", d, name="dtypes") for d in ("cpu", "vulkan")}
    kernels = kernels_of(arts["vulkan"])
    assert not {k["name"]: e for k in kernels if (e := vulkan.spirv_val(k["spirv"]))}
    glsl = "\n".join(k["glsl"] for k in kernels)
    assert "atomicOr" in glsl and "ivec2 data[]" in glsl and "unpackHalf2x16" in glsl
    rng = np.random.default_rng(0)
    inputs = {
        "x": (rng.standard_normal((3, 37)) * 3).astype(np.float32),
        "ids": rng.integers(-1000, 1000, (3, 37)).astype(np.int64),
    }
    proc, got = run_native(runtime, arts["vulkan"], inputs, tmp_path, tag="vk")
    assert got is not None, proc.stderr[-2000:]
    _, want = run_native(runtime, arts["cpu"], inputs, tmp_path, tag="cpu")
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w), (g.dtype, g.ravel()[:8], w.ravel()[:8])


def test_fp16_precision_on_lavapipe(arts, runtime, compiled, tmp_path):
    """--precision fp16: half weights and activations in packed buffers, arithmetic in float32."""
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs
    from tvmgen.frontends.builtin import materialize

    tiny = materialize("builtin:tiny", tmp_path)
    art = compiled(tiny, "host", "vulkan", name="tiny", precision="fp16")
    assert "unpackHalf2x16" in "".join(k["glsl"] for k in kernels_of(art))
    inputs = random_inputs(artifact.load(art).inputs, seed=0)
    proc, got = run_native(runtime, art, inputs, tmp_path, tag="vk16")
    assert got is not None, proc.stderr[-2000:]
    _, want = run_native(runtime, arts[("tiny", "cpu")], inputs, tmp_path, tag="cpu")
    for g, w in zip(got, want):
        print(f"fp16 on Vulkan: max abs error vs the CPU build {float(np.abs(g - w).max()):.2g}", file=sys.stderr)
        np.testing.assert_allclose(g, w, atol=2e-3)


# vectors (seg_head's convolutions), int64 ids and a bool mask (text_encoder), int64 gathers (audio_rnn),
# a 0-d int64 input into If (vad_scalar); views of shared memory are in mobilenet_v3_small (benchmarks/zoo.py)
ZOO = ("seg_head", "text_encoder", "audio_rnn", "vad_scalar")


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_on_lavapipe_matches_its_reference(name, tools, runtime, compiled, tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo
    from tvmgen.frontends.base import parse_consts

    built = []

    def shared_build(path, flags, platform, device):
        consts, inputs = zoo.split_flags(flags)
        built.append(
            compiled(path, platform, device, name=name, consts=parse_consts(consts) or None, inputs=inputs or None)
        )
        return built[-1]

    tvmgen_run = runtime / "bin" / "tvmgen-run"
    row = zoo.run_one(name, ["vulkan"], tmp_path, runs=1, runtimes={"vulkan": tvmgen_run}, compile=shared_build)
    cell = row["targets"]["vulkan"]
    print(f"{name} on Vulkan: {cell}", file=sys.stderr)
    assert cell["status"] == "ok", cell
    if name == "seg_head":  # the transposed convolution accumulates in a register, not in its output buffer
        (k,) = [k for k in kernels_of(built[0]) if k["name"] == "conv2d_transpose_kernel"]
        assert "_acc = (v_conv2d_transpose_nhwc_acc + " in k["glsl"].replace("\n", " "), k["glsl"][-1500:]


def _branches_model(path):
    """An ONNX model with two independent convolutions of one input (two outputs), then one that reads
    both: the runtime needs no barrier between the first two dispatches, one before the third."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(1)

    def weight(name, shape):
        return h.make_tensor(name, T.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel().tolist())

    nodes = [
        h.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        h.make_node("Conv", ["x", "w2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        h.make_node("Concat", ["a", "b"], ["ab"], axis=1),
        h.make_node("Conv", ["ab", "w3"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = h.make_graph(
        nodes,
        "branches",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 16, 16])],
        [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in (("a", [1, 8, 16, 16]), ("b", [1, 8, 16, 16]))]
        + [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 16, 16])],
        initializer=[weight("w1", [8, 4, 3, 3]), weight("w2", [8, 4, 3, 3]), weight("w3", [4, 16, 1, 1])],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


def _vk_commands(stderr: str) -> dict:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("tvmgen-vulkan: commands {"))
    return json.loads(line.removeprefix("tvmgen-vulkan: commands "))


def test_barriers_only_between_dependent_dispatches(tools, runtime, compiled, tmp_path):
    """A barrier only before a dispatch that reads or writes what an earlier one since the last barrier
    wrote (or writes what it read); descriptor sets written once per kernel and buffers, reused by later
    runs. The outputs equal those with a barrier before every dispatch and no reuse (the former runtime,
    TVMGEN_VULKAN_BARRIERS=all, TVMGEN_VULKAN_SET_CACHE=0) and match the CPU build."""
    model = _branches_model(tmp_path / "branches.onnx")
    arts = {d: compiled(model, "host", d, name="branches") for d in ("cpu", "vulkan")}
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype(np.float32)}
    # every run recorded by the VM's launches (recorded runs would replay runs 4-11 without any)
    log = {"TVMGEN_VULKAN_LOG": "1", "TVMGEN_VULKAN_REPLAY": "0"}
    proc, got = run_native(runtime, arts["vulkan"], inputs, tmp_path, env=log, tag="vk", repeat=10)
    assert got is not None, proc.stderr[-2000:]
    new = _vk_commands(proc.stderr)
    old_env = {**log, "TVMGEN_VULKAN_BARRIERS": "all", "TVMGEN_VULKAN_SET_CACHE": "0"}
    proc, old = run_native(runtime, arts["vulkan"], inputs, tmp_path, env=old_env, tag="vk-old", repeat=10)
    assert old is not None, proc.stderr[-2000:]
    before = _vk_commands(proc.stderr)
    _, want = run_native(runtime, arts["cpu"], inputs, tmp_path, tag="cpu")
    for g, o, w in zip(got, old, want):
        np.testing.assert_array_equal(g, o)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    print(f"commands: {new}; with a barrier before every dispatch: {before}", file=sys.stderr)
    assert new["dispatches"] == before["dispatches"] > 0
    assert before["barriers"] >= before["dispatches"]
    assert new["barriers"] < before["barriers"]  # the second convolution needs none
    # the first runs write descriptor sets (the VM's pooled buffers change places for a few runs), the
    # later ones reuse them: of 11 runs (a warm-up and 10 timed), most write none
    assert before["descriptor_sets_written"] == before["dispatches"] and before["descriptor_sets_reused"] == 0
    assert new["descriptor_sets_written"] + new["descriptor_sets_reused"] == new["dispatches"]
    assert new["descriptor_sets_reused"] > 2 * new["descriptor_sets_written"]
    # where the host's time went (microseconds over the process): recording the dispatches, submitting
    # them, waiting for the device when results were needed (at least once a run), resetting after it
    host = new["host_us"]
    assert set(host) == {"recording", "submitting", "waiting", "resetting", "waits"}, host
    assert host["waits"] >= 11 and host["recording"] > 0 and min(host.values()) >= 0


def _vk_stats(stderr: str) -> dict:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("tvmgen-vulkan: cache {"))
    return json.loads(line.removeprefix("tvmgen-vulkan: cache "))


def test_pipeline_cache_persists_across_processes(arts, runtime, tmp_path):
    """The first process builds every pipeline and writes the cache; the next loads it; a corrupt entry is
    deleted and rebuilt, the outputs unchanged."""
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs

    art = arts[("tiny", "vulkan")]
    n = len(kernels_of(art))
    cache = tmp_path / "vk-cache"
    env = {"TVMGEN_VULKAN_CACHE_DIR": str(cache), "TVMGEN_VULKAN_LOG": "1"}
    inputs = random_inputs(artifact.load(art).inputs, seed=0)
    proc, first = run_native(runtime, art, inputs, tmp_path, env=env, tag="cold")
    assert first is not None, proc.stderr[-2000:]
    cold = _vk_stats(proc.stderr)
    assert (cold["misses"], cold["hits"], cold["source_builds"], cold["writes"]) == (1, 0, n, 1), cold
    entries = list(cache.glob("*.vkpc"))
    assert len(entries) == 1
    proc, second = run_native(runtime, art, inputs, tmp_path, env=env, tag="warm")
    warm = _vk_stats(proc.stderr)
    assert (warm["hits"], warm["pipelines_cached"], warm["source_builds"], warm["writes"]) == (1, n, 0, 0), warm
    data = bytearray(entries[0].read_bytes())
    data[-5] ^= 0xFF  # the checksum no longer matches
    entries[0].write_bytes(bytes(data))
    proc, third = run_native(runtime, art, inputs, tmp_path, env=env, tag="corrupt")
    again = _vk_stats(proc.stderr)
    assert "is unusable (checksum mismatch): rebuilt" in proc.stderr
    assert (again["corrupt"], again["misses"], again["source_builds"], again["writes"]) == (1, 1, n, 1), again
    for a, b, c in zip(first, second, third):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_profile_times_kernels_with_timestamps(arts, runtime, tmp_path):
    """tvmgen-run --profile on Vulkan: every kernel's time from the device's timestamp queries."""
    art = arts[("tiny", "vulkan")]
    out = tmp_path / "profile.json"
    proc, got = run_native(runtime, art, {}, tmp_path, "--profile", str(out), repeat=2)
    assert got is not None, proc.stderr[-2000:]
    p = json.loads(out.read_text())["profile"]
    assert p["clock"] == "device (Vulkan timestamps)"
    names = {k["name"] for k in kernels_of(art)}
    launched = p["vulkan_kernels"]
    assert set(launched) <= names and len(launched) >= len(names) - 1, (sorted(launched), sorted(names))
    assert all(c[0] == 2 and c[1] > 0 for c in launched.values()), launched
    assert sum(c[1] for c in p["counts"].values()) == sum(c[1] for c in launched.values())


def test_gpu_bench_vulkan_rows():
    """benchmarks/gpu.py --vulkan: vulkan rows, pipelines built / cached in the kernels column, the Vulkan
    device in the header and the vulkan / opencl and vulkan / cuda ratios below the table, and the steady
    run with recorded runs against the VM every run."""
    import argparse

    from helpers import load_benchmark

    gpu = load_benchmark("gpu")
    args = argparse.Namespace(
        precision="fp32", gpu_family="generic", cuda=True, vulkan=True, no_cpu=True, repeat=1, runs=1
    )
    assert [v["id"] for v in gpu.variants(args)] == ["opencl", "cuda", "vulkan"]

    def start(ms, cache=None, device=None):
        t = {"first_run_ms": ms, "init_ms": 1.0, "cache": cache}
        return {**t, "vulkan_device": device} if device else t

    def row(vid, steady, cold, warm):
        timing = {"median": steady}
        return {
            "model": "m",
            "id": vid,
            "device": vid,
            "family": None,
            "precision": "fp32",
            "cold": [cold],
            "warm": [warm],
            "steady": {"run_ms": timing, "copy_in_ms": timing, "copy_out_ms": timing},
            "max_abs_error": 1e-8,
        }

    vk_cold = {"hits": 0, "misses": 1, "source_builds": 33, "pipelines_cached": 0}
    vk_warm = {"hits": 1, "misses": 0, "source_builds": 0, "pipelines_cached": 33}
    device = "device NVIDIA H200 (Vulkan 1.4.312, driver 1), loader libvulkan.so.1"
    results = [
        row("opencl", 0.4, start(2000.0, {"hits": 0, "misses": 5, "source_builds": 5}), start(1.0, {"hits": 5})),
        row("cuda", 0.8, start(1.5), start(1.4)),
        row("vulkan", 0.44, start(250.0, vk_cold, device), start(5.0, vk_warm, device)),
    ]
    # the vulkan row's steady runs replayed (recorded runs), and the same without them
    results[2]["steady"]["vulkan_commands"] = {"recorded_runs": {"captured": 1, "replays": 8, "last_failure": ""}}
    results[2]["steady_vm"] = {"run_ms": {"median": 0.55}}
    text = gpu.report({"models": [{"name": "m"}], "created": "now"}, results, args)
    assert (
        "m fp32: vulkan steady 0.440 ms (8 runs replayed); the VM every run (TVMGEN_VULKAN_REPLAY=0) 0.550 ms: " in text
    )
    assert "recorded / VM = 0.80x" in text
    assert f"Vulkan: {device}" in text
    vk_line = next(ln for ln in text.splitlines() if ln.startswith("m ") and " vulkan " in ln)
    assert "33 / 33" in vk_line and "50.0x" in vk_line, vk_line
    assert "m fp32: vulkan / opencl steady = 1.10x" in text and "m fp32: vulkan / cuda steady = 0.55x" in text


def test_printer_vectors_lets_and_views():
    """The GLSL printer's lane-by-lane vectors (Ramp, Broadcast, Shuffle), inline Let expressions and packed
    loads/stores (the layouts of 8-, 16- and 64-bit storage buffers)."""
    from tvm import tirx

    from tvmgen.compiler.vulkan import glsl, glsl_types

    p = glsl._Printer("k")
    x, y = tirx.Var("x", "int32"), tirx.Var("y", "int32")
    p.names[x] = "v_x"
    # a Let: declared before the statement, or inline where it may not be evaluated (a branch of ?:)
    assert p.expr(tirx.Let(y, x + 3, y * y)) == "(v_y * v_y)" and p.lines[-1].strip() == "int v_y = (v_x + 3);"
    c = tirx.Var("c", "bool")
    p.names[c] = "v_c"
    branchy = tirx.Select(c, tirx.Let(y, x * 2, y + y), x)
    assert p.expr(branchy) == "(v_c ? (((v_x * 2)) + ((v_x * 2))) : v_x)" and len(p.lines) == 1
    ramp = tirx.Ramp(x, 2, 4)
    assert [p.expr(ramp, i) for i in range(4)] == ["v_x", "(v_x + 1 * 2)", "(v_x + 2 * 2)", "(v_x + 3 * 2)"]
    assert p.expr(tirx.Broadcast(tirx.FloatImm("float32", 1.5), 4), 3) == "1.5"
    two = [tirx.Ramp(x, 1, 2), tirx.Ramp(x * 10, 1, 2)]
    shuffle = tirx.Shuffle(two, [tirx.IntImm("int32", 3), tirx.IntImm("int32", 0)])
    assert [p.expr(shuffle, i) for i in range(2)] == ["((v_x * 10) + 1 * 1)", "v_x"]
    with pytest.raises(glsl_types.UnsupportedError, match="vector"):
        p.expr(ramp)  # a vector where a scalar is needed
    assert glsl_types.Buf("b.data", "int64", "i64").load("i") == "b.data[i].x"
    assert glsl_types.Buf("b.data", "float16", "half").load("i") == "tvm_half_at(b.data[(i) >> 1], i)"
    assert (
        glsl_types.Buf("b.data", "int8", "byte").load("i") == "bitfieldExtract(int(b.data[(i) >> 2]), ((i) & 3) * 8, 8)"
    )
    assert glsl_types.Buf("s", "float32", offset="4").load("i") == "s[(i + 4)]"
    (store,) = glsl_types.Buf("b.data", "bool", "byte").store("i", "c")
    assert "atomicAnd(b.data[(i) >> 2], ~(0xffu << s_))" in store and "atomicOr" in store


def test_aarch64_runtime_has_the_vulkan_backend(aarch64_runtime, compiled, tmp_path):
    """The linux-aarch64 runtime build has libtvmgen_vulkan (the build host's Vulkan headers: the cross
    sysroot has none); under qemu, with no aarch64 Vulkan loader here, tvmgen-run loads it and says why
    Vulkan is unavailable."""
    from tvmgen.frontends.builtin import materialize

    assert (aarch64_runtime / "lib" / "libtvmgen_vulkan.so").is_file()
    art = compiled(materialize("builtin:tiny", tmp_path), "linux-aarch64", "vulkan", name="tiny")
    proc, got = run_native(aarch64_runtime, art, {}, tmp_path, launcher=QEMU_AARCH64)
    assert got is None and "Vulkan is not available: no Vulkan loader could be opened" in proc.stderr, proc.stderr


def test_prepare_creates_every_pipeline_before_the_first_run(arts, runtime, tmp_path):
    """tvmgen-run --prepare (Model::Prepare) on Vulkan: every pipeline created, built without a cache entry
    and from it in the next process."""
    art = arts[("tiny", "vulkan")]
    n = len(kernels_of(art))
    env = {"TVMGEN_VULKAN_CACHE_DIR": str(tmp_path / "vk-cache")}
    seen = []
    for tag in ("cold", "warm"):
        timings = tmp_path / f"{tag}.json"
        proc, got = run_native(runtime, art, {}, tmp_path, "--prepare", "--timings", str(timings), env=env, tag=tag)
        assert got is not None, proc.stderr[-2000:]
        seen.append(json.loads(timings.read_text())["prepare"])
    assert [(p["kernels"], p["built"], p["cached"]) for p in seen] == [(n, n, 0), (n, 0, n)], seen


def test_android_app_renders_for_vulkan(tmp_path):
    """`tvmgen app --device vulkan`'s project: the Vulkan backend built and shipped (gradle target
    tvmgen_vulkan), Vulkan declared as an optional feature (libvulkan.so is an NDK public library: no
    uses-native-library), the Vulkan model first with the CPU build as fallback, and the pipeline cache in
    the app's cache directory. Rendered only: no NDK here to build it."""
    import xml.etree.ElementTree as ET

    from conftest import save_onnx, single_op_models
    from tvmgen import frontends
    from tvmgen.android import project as android_project
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS

    imported = frontends.load(save_onnx(single_op_models()["softmax"], tmp_path / "m.onnx"), [])
    arts = {}
    for device in ("vulkan", "cpu"):
        arts[device] = tmp_path / device
        options = BuildOptions(PLATFORMS["android-arm64"], device, objects_only=True)
        compile_to_artifact(imported, options, arts[device], True, {"name": "m"})
    ctx = android_project.android_context("deploy", "org.example.vk", "VK", "m", ["vulkan", "cpu"], ["arm64-v8a"])
    assert ctx["model_devices"] == ["vulkan", "cpu"]
    out = tmp_path / "app"
    android_project.create_android_project("deploy", out, ctx, arts)
    android = "{http://schemas.android.com/apk/res/android}"
    manifest = ET.parse(out / "app/src/main/AndroidManifest.xml").getroot()
    feature = manifest.find("uses-feature")
    assert feature.get(f"{android}name") == "android.hardware.vulkan.version"
    assert feature.get(f"{android}required") == "false"
    assert manifest.find("application/uses-native-library") is None
    gradle = (out / "app/build.gradle").read_text()
    assert "targets 'tvmgen_jni', 'tvmgen_jni_bridge', 'tvmgen_vulkan'" in gradle
    src = (out / "app/src/main/java/org/example/vk/MainActivity.java").read_text()
    assert 'MODELS = { "model-vulkan", "model-cpu" }' in src and '"TVMGEN_VULKAN_CACHE_DIR"' in src
    assert (out / "app/src/main/assets/model-vulkan/manifest.json").is_file()


# ----------------------------------------------------------------------------- Java API and RPC on Vulkan (issue 36)

VK_BENCH_PORTS = (20300, 20390)  # this module's tracker ports (test_rpc/test_opencl/test_nnapi/... use others)


def _java_env(runtime, **extra) -> dict:
    """A JVM's environment for a Vulkan model: the runtime's lib/ on LD_LIBRARY_PATH (libtvmgen_vulkan sits
    beside libtvmgen_runtime there, where LoadBackend looks first; the path serves a JNI build without it),
    and the JDK's libjsig preloaded so that lavapipe's LLVM chains its signal handlers as the JVM asks (or
    -Xcheck:jni reports them)."""
    import os
    from pathlib import Path

    jdk = Path(shutil.which("java") or "java").resolve().parent.parent
    path = os.pathsep.join(filter(None, [str(runtime / "lib"), os.environ.get("LD_LIBRARY_PATH")]))
    env = {**os.environ, "LD_LIBRARY_PATH": path, **{k: str(v) for k, v in extra.items()}}
    if (jdk / "lib" / "libjsig.so").is_file():
        env["LD_PRELOAD"] = str(jdk / "lib" / "libjsig.so")
    return env


def _java(java_build, *args, env, lib_dir=None, fails=False, timeout=300) -> subprocess.CompletedProcess:
    """java -Xcheck:jni ARGS, which must not have complained (``fails``: a failing run, whose error TVM's
    allocator logs as a warning first)."""
    lib_dir = lib_dir or java_build["dir"]
    cmd = ["java", "-Xcheck:jni", f"-Djava.library.path={lib_dir}", "-cp", java_build["classpath"]]
    p = subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    if not fails:
        assert "warning" not in (p.stdout + p.stderr).lower(), f"-Xcheck:jni complained:\n{p.stdout}\n{p.stderr}"
    return p


@pytest.mark.parametrize("model", MODELS)
def test_java_api_on_lavapipe_matches_cpu(arts, runtime, java_build, tmp_path, model):
    """org.tvmgen.RunModel (Model over libtvmgen_jni) on the Vulkan build: device vulkan, outputs equal to
    the Python VM's on the CPU build, and Model.profile's kernels timed by Vulkan timestamps."""
    from tvmgen.core import artifact
    from tvmgen.runtime.runner import HostModel

    art = arts[(model, "vulkan")]
    m = artifact.load(art)
    rng = np.random.default_rng(11)
    inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in m.inputs}
    flags = []
    for name, x in inputs.items():
        x.astype(x.dtype.newbyteorder("<")).tofile(tmp_path / f"{name}.bin")
        flags += ["--input", f"{name}={tmp_path / f'{name}.bin'}"]
    env = _java_env(runtime, TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache")
    prof = tmp_path / "profile.json"
    p = _java(
        java_build,
        "org.tvmgen.RunModel",
        art,
        *flags,
        "--repeat",
        "2",
        "-o",
        tmp_path / "out",
        "--profile",
        prof,
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["device"] == "vulkan" and summary["timings"]["runs"] == 3, summary
    assert "on vulkan: " in p.stderr, p.stderr
    want = HostModel(arts[(model, "cpu")]).run(inputs)
    for spec, ref in zip(m.outputs, want):
        ref = np.asarray(ref)
        got = np.fromfile(tmp_path / "out" / f"{spec.name}.bin", ref.dtype).reshape(ref.shape)
        print(
            f"{model}/{spec.name}: Java on Vulkan vs the Python VM (CPU build): max abs error "
            f"{float(np.abs(got - ref).max()):.3g}",
            file=sys.stderr,
        )
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    profile = json.loads(prof.read_text())
    assert profile["device"] == "vulkan", profile
    p = profile["profile"]
    assert p["runs"] == 2 and p["clock"] == "device (Vulkan timestamps)", p
    names = {k["name"] for k in kernels_of(art)}
    launched = p["vulkan_kernels"]
    assert set(launched) <= names and len(launched) >= len(names) - 1, (sorted(launched), sorted(names))
    # dispatches over the 2 runs: a kernel shared by two layers is dispatched twice a run
    assert all(c[0] >= 2 and c[0] % 2 == 0 and c[1] > 0 for c in launched.values()), launched


def test_java_prepare_on_lavapipe(arts, runtime, java_build, tmp_path):
    """Model.prepare() over JNI on Vulkan (tests/java/PrepareCheck.java): every pipeline created before the
    first run (built, then from the pipeline cache in the next JVM), the output equal to the CPU build's."""
    from tvmgen.runtime.runner import HostModel

    art, cpu = arts[("tiny", "vulkan")], arts[("tiny", "cpu")]
    n = len(kernels_of(art))
    env = _java_env(runtime, TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache")
    seen = []
    for tag in ("cold", "warm"):
        out = tmp_path / f"{tag}.bin"
        p = _java(java_build, "PrepareCheck", art, cpu, out, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        line = next(ln for ln in p.stdout.splitlines() if ln.startswith("prepared "))
        seen.append(json.loads(line.removeprefix("prepared ")))
        model = HostModel(cpu)  # PrepareCheck's inputs: sin(0.37 i) in each
        x = {
            i.name: np.sin(np.arange(int(np.prod(i.shape))) * 0.37).astype(np.float32).reshape(i.shape)
            for i in model.manifest.inputs
        }
        np.testing.assert_allclose(np.fromfile(out, "<f4"), np.asarray(model.run(x)[0]).ravel(), rtol=1e-4, atol=1e-5)
    assert [(s["kernels"], s["built"], s["cached"]) for s in seen] == [(n, n, 0), (n, 0, n)], seen


def test_java_reports_missing_vulkan(arts, runtime, java_build, tmp_path):
    """Where Vulkan is missing, Model.load's TvmgenException names the cause and the fix: no libtvmgen_vulkan
    beside the runtime, no Vulkan loader, a loader without a driver."""
    import os

    art = arts[("tiny", "vulkan")]
    bare = tmp_path / "lib"  # the JNI libraries (hard links) without libtvmgen_vulkan
    bare.mkdir()
    for f in java_build["dir"].iterdir():
        if f.is_file() and f.name != "libtvmgen_vulkan.so" and ".so" in f.name:
            os.link(f, bare / f.name)
    none = tmp_path / "none.json"
    cases = {
        "backend": ({**_java_env(runtime), "LD_LIBRARY_PATH": ""}, bare, ["libtvmgen_vulkan.so", "libvulkan-dev"]),
        "loader": (
            _java_env(runtime, TVMGEN_VULKAN_LIBRARY=tmp_path / "x.so"),
            None,
            ["no Vulkan loader", "libvulkan1"],
        ),
        "driver": (_java_env(runtime, VK_ICD_FILENAMES=none, VK_DRIVER_FILES=none), None, ["mesa-vulkan-drivers"]),
    }
    for case, (env, lib_dir, words) in cases.items():
        p = _java(java_build, "org.tvmgen.RunModel", art, "--repeat", "1", env=env, lib_dir=lib_dir, fails=True)
        assert p.returncode == 1, (case, p.stdout + p.stderr)
        assert "RunModel: error: " in p.stderr and all(w in p.stderr for w in words), (case, p.stderr)


def test_bench_over_rpc_on_lavapipe(arts, runtime, tmp_path):
    """`tvmgen bench` of a Vulkan artifact on tvmgen's host device server (`tvmgen rpc device`, which loads
    libtvmgen_vulkan beside its runtime): the device lists vulkan, the report's device is vulkan, the outputs
    match the host reference, and --profile times the kernels with Vulkan timestamps."""
    from helpers import bench_on_a_gpu_device

    res = bench_on_a_gpu_device(arts[("tiny", "vulkan")], tmp_path, "--profile", ports=VK_BENCH_PORTS)
    assert res["dev"] == "vulkan" and "vulkan" in res["device"]["devices"], res
    assert res["check"] and all(c["max_abs"] < 1e-5 for c in res["check"]), res["check"]
    assert res["warm_ms"]["count"] == 2
    prof = res["profile"]
    assert prof["clock"] == "device (Vulkan timestamps)", prof.get("clock")


def test_bench_without_a_vulkan_driver_says_why(arts, runtime, tmp_path):
    """A device server whose Vulkan loader finds no driver: `tvmgen bench` fails naming the cause and the fix
    (not a crashed server)."""
    from helpers import device_behind, environment, run_tvmgen

    none = tmp_path / "none.json"
    with (
        environment(TVMGEN_STATE_DIR=tmp_path / "state", VK_ICD_FILENAMES=none, VK_DRIVER_FILES=none),
        device_behind("tracker", "host", "novk", tmp_path / "w", *VK_BENCH_PORTS) as (tracker, _),
    ):
        via = ["--key", "novk", "--tracker", tracker.address]
        r = run_tvmgen("bench", arts[("tiny", "vulkan")], *via, "--repeat", "1", env={"COLUMNS": "400"})
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode != 0, out
    assert "the device failed while loading and running the model" in out and "mesa-vulkan-drivers" in out, out
    assert "lacks the driver or backend library" in out and "crashed" not in out, out


def test_depthwise_window_unrolled_and_fused_with_hard_swish_on_lavapipe(tools, runtime, compiled, tmp_path):
    """MobileNetV3's depthwise block on Vulkan: the 5 x 5 convolution, its bias and hard-swish one kernel
    (compiler.gpu.fused_short_reduction), the window's 5 columns printed out in the GLSL (glsl.FULL_UNROLL:
    NVIDIA's SPIR-V compiler keeps such loops) around one loop over its rows; the result matches
    onnxruntime."""
    import onnxruntime as ort

    path = save_onnx(single_op_models()["conv_dw5_hardswish"], tmp_path / "dwhs.onnx")
    art = compiled(path, "host", "vulkan", name="dwhs")
    (conv,) = [k for k in kernels_of(art) if "conv2d" in k["name"]]
    body = conv["glsl"][conv["glsl"].index("void main()") :]
    assert body.count("for (int ") == 1 and "_local[0] = (v_" in body, body[:3000]
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype("float32") * 3
    want = ort.InferenceSession(str(path)).run(None, {"x16": x})[0]
    proc, got = run_native(runtime, art, {"x16": x}, tmp_path, tag="vk")
    assert got is not None, proc.stderr[-2000:]
    np.testing.assert_allclose(got[0], want, atol=1e-4, rtol=1e-4)


def _if_on_data_model():
    """y = x * 2 where sum(x) > 0, else x - 1: the VM reads the condition from the device in the middle of
    the run, so the run cannot be recorded and replayed."""
    from onnx import TensorProto as T
    from onnx import helper as h

    def branch(tag, op, const):
        c = h.make_tensor(f"c{tag}", T.FLOAT, [], [const])
        node = h.make_node(op, ["x", f"c{tag}"], [f"y{tag}"])
        return h.make_graph([node], tag, [], [h.make_tensor_value_info(f"y{tag}", T.FLOAT, [1, 8])], [c])

    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["positive"]),
        h.make_node(
            "If", ["positive"], ["y"], then_branch=branch("a", "Mul", 2.0), else_branch=branch("b", "Sub", 1.0)
        ),
    ]
    zero = h.make_tensor("zero", T.FLOAT, [], [0.0])
    graph = h.make_graph(
        nodes,
        "if_on_data",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 8])],
        initializer=[zero],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_recorded_runs_follow_new_inputs_on_lavapipe(arts, runtime, java_build, compiled, tmp_path):
    """Model::Run records the third run's commands and submits them again after (libtvmgen_vulkan's
    recorded runs) instead of running the VM. Through the Java API, a new input at every run, each output
    against the CPU build's for that input: one model (recorded once, replayed from the fourth run on); two
    instances of a model taking turns (each replays or runs its VM again where the other took its
    buffers, never the other's results); a model whose VM reads a condition from the device mid-run
    (recording fails, saying why; every run on the VM)."""
    from tvmgen.runtime.runner import HostModel

    path = save_onnx(_if_on_data_model(), tmp_path / "if.onnx")
    branchy = {d: compiled(path, "host", d, name="if_on_data") for d in ("cpu", "vulkan")}
    cases = [
        ("mobilenet", arts[("mobilenet", "vulkan")], arts[("mobilenet", "cpu")], "0" * 7),
        ("tiny, two instances", arts[("tiny", "vulkan")], arts[("tiny", "cpu")], "0000" + "10" * 4),
        ("If on data", branchy["vulkan"], branchy["cpu"], "0" * 7),
    ]
    rng = np.random.default_rng(21)
    seen = {}
    for tag, art, cpu, order in cases:
        runs = len(order)
        ref = HostModel(cpu)
        specs = ref.manifest.inputs
        inputs = [{s.name: rng.standard_normal(s.shape).astype(np.float32) for s in specs} for _ in range(runs)]
        if tag == "If on data":  # both branches, alternately
            inputs = [{"x": np.abs(x["x"]) * (1 if k % 2 else -1)} for k, x in enumerate(inputs)]
        d = tmp_path / tag.replace(" ", "_").replace(",", "")
        (d / "in").mkdir(parents=True)
        for k, x in enumerate(inputs):
            for name, a in x.items():
                a.tofile(d / "in" / f"{name}_{k}.bin")
        env = _java_env(runtime, TVMGEN_VULKAN_LOG="1", TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache")
        p = _java(java_build, "ReplayCheck", art, d / "in", d / "out", order, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        seen[tag] = _vk_commands(p.stderr)["recorded_runs"]
        print(f"{tag}: {runs} runs; recorded runs {seen[tag]}", file=sys.stderr)
        for k, x in enumerate(inputs):
            for j, want in enumerate(ref.run(x)):
                want = np.asarray(want)
                got = np.fromfile(d / "out" / f"out_{k}_{j}.bin", want.dtype).reshape(want.shape)
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{tag}: run {k}, output {j}")
    assert seen["mobilenet"] == {"captured": 1, "failed": 0, "replays": 4, "invalidated": 0, "last_failure": ""}
    two = seen["tiny, two instances"]
    assert two["failed"] == 0 and two["captured"] >= 2 and two["replays"] + 2 * two["captured"] + 4 >= 10, two
    branch = seen["If on data"]
    assert branch["captured"] == branch["replays"] == 0 and branch["failed"] == 5, branch
    assert "a copy to the host" in branch["last_failure"], branch
    # said once, with what it costs
    assert p.stderr.count("tvmgen-vulkan: a run could not be recorded for replay (the run needed") == 1, p.stderr
