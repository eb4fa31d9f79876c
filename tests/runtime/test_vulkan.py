"""``--device vulkan``: tvmgen's GLSL code generator (SPIR-V through glslang) and its Vulkan backend
(libtvmgen_vulkan), on Mesa's lavapipe (a CPU Vulkan device): the kernels, and the outputs of tvmgen-run,
the Python runner and `tvmgen bench` over RPC against the CPU build. The backend's own work (barriers,
pipeline cache, profiling): test_vulkan_runtime.py; the Java API on Vulkan: test_vulkan_java.py.

Needs glslang-tools and spirv-tools to compile and validate, and the Vulkan loader with a driver to run
(libvulkan1, mesa-vulkan-drivers; the runtime build needs libvulkan-dev): all installed by
scripts/bootstrap.sh. Without them the tests are skipped (failed under CI=true).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import QEMU_AARCH64, REPO, run_native, save_onnx, single_op_models, unavailable
from vulkan_support import MODELS, kernels_of, module_fixtures

# whole models compiled for Vulkan and the host runtime built with CMake
pytestmark = pytest.mark.slow


tools, arts, runtime = module_fixtures()


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


# Khronos' validation layer (Debian's vulkan-validationlayers) with synchronization validation: a missing barrier,
# a wrong descriptor, a dispatch bound or sized wrongly is reported (ERROR / WARN lines on stdout) before it can
# lose a device; INFO shows the layer is active and what it checks.
VALIDATION_SETTINGS = """\
khronos_validation.report_flags = error,warn,info
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.log_filename = stdout
khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
khronos_validation.disables = VK_VALIDATION_FEATURE_DISABLE_SHADER_VALIDATION_CACHE_EXT
"""


def test_kernels_run_clean_under_the_validation_layers(arts, tools, runtime, compiled, tmp_path):
    """The built-in models and the zoo's text recognizer (GELU-epilogue convolutions, LayerNorm, attention: the
    kernels that lost an NVIDIA device) run on lavapipe under the validation layer, synchronization validation
    on: the layer is active and reports no error or warning, and the outputs are the CPU build's."""
    from pathlib import Path

    layer = Path("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")
    if not layer.is_file():
        unavailable("Khronos' Vulkan validation layer is not installed (apt-get install vulkan-validationlayers)")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo

    (tmp_path / "vk_layer_settings.txt").write_text(VALIDATION_SETTINGS)
    env = {"VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation", "VK_LAYER_SETTINGS_PATH": str(tmp_path)}
    path = zoo.build("text_recognizer", tmp_path)[0]
    models = {m: (arts[(m, "vulkan")], arts[(m, "cpu")]) for m in ("tiny", "mobilenet")}
    models["text_recognizer"] = tuple(compiled(path, "host", d, name="text_recognizer") for d in ("vulkan", "cpu"))
    for name, (vk, cpu) in models.items():
        spec = json.loads((vk / "manifest.json").read_text())["inputs"]
        x = {s["name"]: np.random.default_rng(8).standard_normal(s["shape"]).astype(s["dtype"]) for s in spec}
        proc, got = run_native(runtime, vk, x, tmp_path, env=env, tag=f"{name}-vk")
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = [ln for ln in proc.stdout.splitlines() if "(" in ln and " / " in ln and "msgNum" in ln]
        assert any("createinstance-status-message(INFO" in ln for ln in said), proc.stdout[:2000]
        assert "Current Enables: VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION" in proc.stdout
        bad = [ln for ln in said if "(ERROR" in ln or "(WARN" in ln]
        assert not bad, (name, bad[:5])
        _, want = run_native(runtime, cpu, x, tmp_path, tag=f"{name}-cpu")
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=2e-3, rtol=2e-3)


def test_a_kernel_over_the_devices_limits_is_refused_naming_it(tools, runtime, compiled, tmp_path):
    """libtvmgen_vulkan checks each kernel's work-group (its invocations, and the bytes of its GLSL's shared
    arrays) against the device's limits before making its pipeline: lavapipe's limits lowered
    (TVMGEN_VULKAN_MAX_INVOCATIONS / _MAX_SHARED_MEMORY, as a smaller device's) refuse the text recognizer's
    kernels with an error naming the kernel, what it needs and the fix, instead of a dispatch the device may
    not survive; through tvmgen run, exit 2."""
    import re
    import subprocess

    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo

    vk = compiled(zoo.build("text_recognizer", tmp_path)[0], "host", "vulkan", name="text_recognizer")
    spec = json.loads((vk / "manifest.json").read_text())["inputs"]
    x = {s["name"]: np.zeros(s["shape"], s["dtype"]) for s in spec}
    for env, needs in (
        (
            {"TVMGEN_VULKAN_MAX_INVOCATIONS": "16"},
            r"work-groups of (\d+) invocations \(\d+x\d+x\d+\), and the device takes at most 16 ",
        ),
        (
            {"TVMGEN_VULKAN_MAX_SHARED_MEMORY": "1000"},
            r"(\d+) bytes of shared memory per work-group, and the device has 1000\.",
        ),
    ):
        proc, outs = run_native(runtime, vk, x, tmp_path, env=env, tag=next(iter(env)))
        assert proc.returncode != 0 and outs is None
        said = re.search(r"Vulkan kernel (\w+) cannot run on [^:]+: it needs " + needs, proc.stderr)
        assert said and int(said.group(2)) > 16, proc.stderr[-2000:]
        assert "Fix: compile for this device's GPU family" in proc.stderr
    env = {**__import__("os").environ, "TVMGEN_VULKAN_MAX_INVOCATIONS": "16"}
    env["TVMGEN_VULKAN_BACKEND"] = str(runtime / "lib" / "libtvmgen_vulkan.so")
    r = subprocess.run(
        [sys.executable, "-m", "tvmgen", "run", str(vk), "--repeat", "1"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 2 and "error: Vulkan kernel" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]


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


def test_aarch64_runtime_has_the_vulkan_backend(aarch64_runtime, compiled, tmp_path):
    """The linux-aarch64 runtime build has libtvmgen_vulkan (the build host's Vulkan headers: the cross
    sysroot has none); under qemu, with no aarch64 Vulkan loader here, tvmgen-run loads it and says why
    Vulkan is unavailable."""
    from tvmgen.frontends.builtin import materialize

    assert (aarch64_runtime / "lib" / "libtvmgen_vulkan.so").is_file()
    art = compiled(materialize("builtin:tiny", tmp_path), "linux-aarch64", "vulkan", name="tiny")
    proc, got = run_native(aarch64_runtime, art, {}, tmp_path, launcher=QEMU_AARCH64)
    assert got is None and "Vulkan is not available: no Vulkan loader could be opened" in proc.stderr, proc.stderr


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


# ----------------------------------------------------------------------------- RPC on Vulkan (issue 36)


VK_BENCH_PORTS = (20300, 20390)  # this module's tracker ports (test_rpc/test_opencl/test_nnapi/... use others)


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
