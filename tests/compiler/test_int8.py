"""8-bit matmuls on the dot-product instructions (compiler.int8): exact against the integer product
computed by NumPy in int64, on this CPU (AVX-512 VNNI when it has it) and on aarch64 with +dotprod
under qemu. onnxruntime is compared too where it is exact on every x86-64 CPU (u8 x u8, s8 x s8):
without VNNI its u8 x s8 MatMulInteger saturates (vpmaddubsw adds pairs into 16-bit lanes)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import QEMU_AARCH64, onnx_model, require_tool, run_native, save_onnx
from helpers import keras_int8_model
from tvmgen import frontends
from tvmgen.compiler import cpu, int8
from tvmgen.compiler.build import BuildOptions, build_executable, compile_to_artifact
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target
from tvmgen.runtime.runner import HostModel

HOST = make_target(PLATFORMS["host"].cpu_target())
HOST_HAS_DOT = int8.dot_product(HOST, "uint8") is not None


def matmul_integer(a_dtype, b_dtype, a_shape, n, a_zero=None, b_zero=None, seed=0):
    """MatMulInteger(A, constant B [, zero points]) -> int32, as onnxruntime's quantiser writes it."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    k = a_shape[-1]
    onnx_type = {"uint8": 2, "int8": 3}
    lo, hi = (0, 256) if b_dtype == "uint8" else (-128, 128)
    inits = [numpy_helper.from_array(rng.integers(lo, hi, (k, n)).astype(b_dtype), "b")]
    names = ["a", "b"]
    if a_zero is not None or b_zero is not None:
        inits.append(numpy_helper.from_array(np.array(a_zero or 0, a_dtype), "a_zero"))
        names.append("a_zero")
    if b_zero is not None:
        inits.append(numpy_helper.from_array(np.asarray(b_zero, b_dtype), "b_zero"))
        names.append("b_zero")
    nodes = [helper.make_node("MatMulInteger", names, ["y"])]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("a", onnx_type[a_dtype], list(a_shape))],
        [helper.make_tensor_value_info("y", 6, None)],
        inits,
        opset=13,
    )


def exact_product(model, a: np.ndarray) -> np.ndarray:
    """MatMulInteger of `matmul_integer`'s model, in int64: (A - a_zero) @ (B - b_zero)."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i).astype(np.int64) for i in model.graph.initializer}
    y = (a.astype(np.int64) - inits.get("a_zero", 0)) @ (inits["b"] - inits.get("b_zero", 0))
    assert np.abs(y).max() < 2**31
    return y.astype(np.int32)


def onnxruntime_output(model, a: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]


# onnxruntime's MatMulInteger is exact for these on every x86-64 CPU; u8 x s8 only with VNNI.
ORT_EXACT = {("uint8", "uint8"), ("int8", "int8")}

VARIANTS = {  # name: (A dtype, B dtype, A shape, N, A zero point, B zero point)
    "u8_s8_zero_point": ("uint8", "int8", (8, 64), 32, 3, None),  # VNNI's own types
    "s8_s8": ("int8", "int8", (4, 128), 16, -2, None),  # activations shifted by 128 on x86
    "u8_u8_no_zero_point": ("uint8", "uint8", (8, 64), 48, None, None),  # weights 0..255: shifted, row sums
    "3d_per_column_zero_point": ("uint8", "int8", (2, 5, 64), 32, 7, list(range(-16, 16))),
    "n_not_a_multiple_of_16": ("uint8", "int8", (8, 64), 24, 3, None),  # zero columns to 32, sliced off
}


def dot_functions(path) -> list[str]:
    """The dot-product functions in the module `compile` builds for this CPU."""
    import tvm
    from tvm import relax

    imported = frontends.load(path, [])
    mod = relax.transform.BindParams(
        "main", dict(zip(imported.mod["main"].params[len(imported.inputs) :], imported.params))
    )(imported.mod)
    with HOST:
        mod = tvm.transform.Sequential(cpu.prepare_passes(HOST))(mod)
    return sorted(
        gv.name_hint
        for gv, f in mod.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and "int8_dot" in f.script(show_meta=False)
    )


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_matmul_integer_is_exact_and_on_the_dot_product_instruction(name, tmp_path):
    a_dtype, b_dtype, shape, n, a_zero, b_zero = VARIANTS[name]
    model = matmul_integer(a_dtype, b_dtype, shape, n, a_zero, b_zero)
    path = save_onnx(model, tmp_path / f"{name}.onnx")
    imported = frontends.load(path, [])
    assert imported.reference_name.startswith("NumPy") and "MatMulInteger exact in int64" in imported.reference_name
    out = tmp_path / "art"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), out, True, {"name": name})
    rng = np.random.default_rng(1)
    lo, hi = (0, 256) if a_dtype == "uint8" else (-128, 128)
    for _ in range(3):  # extremes included: 0/255 or -128/127 everywhere, then random
        a = rng.integers(lo, hi, shape).astype(a_dtype)
        a.flat[:4] = [lo, hi - 1, lo, hi - 1]
        (got,) = HostModel(out).run({"a": a})
        want = exact_product(model, a)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(imported.reference({"a": a})[0], want)  # what compile --check uses
        if (a_dtype, b_dtype) in ORT_EXACT:
            np.testing.assert_array_equal(got, onnxruntime_output(model, a))
    funcs = dot_functions(path)
    if not HOST_HAS_DOT:
        assert not funcs, funcs
    else:
        assert len(funcs) == 1, funcs


def test_dynamically_quantised_mlp_matches_onnxruntime_and_is_fully_scheduled(tmp_path):
    """onnxruntime's quantize_dynamic output: DynamicQuantizeLinear (a max / min over the whole
    tensor, now scheduled too), MatMulInteger, the float rescale fused into the epilogue."""
    from onnx import helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((256, 128)) * 0.05).astype(np.float32), "w1")
    b1 = numpy_helper.from_array((rng.standard_normal(128) * 0.1).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((128, 64)) * 0.05).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["y"]),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", 1, [4, 256])],
        [helper.make_tensor_value_info("y", 1, None)],
        [w1, b1, w2],
    )
    fp32 = save_onnx(model, tmp_path / "mlp.onnx")
    quantized = tmp_path / "mlp-int8.onnx"
    quantize_dynamic(str(fp32), str(quantized), weight_type=QuantType.QInt8)
    imported = frontends.load(quantized, [])
    report: dict = {}
    build_executable(imported, BuildOptions(PLATFORMS["host"], "cpu"), report)
    assert report["scheduled"] and not report["left"], report
    out = tmp_path / "art"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), out, True, {"name": "mlp"})
    x = rng.standard_normal((4, 256)).astype(np.float32)
    (got,) = HostModel(out).run({"x": x})
    (want,) = imported.reference({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(dot_functions(quantized)) == (2 if HOST_HAS_DOT else 0)


def test_packed_weights_put_one_instruction_s_operand_in_a_row():
    w = np.arange(8 * 32).reshape(8, 32)
    p = int8.pack_weights(w, 16)
    assert p.shape == (2, 2, 16, 4)
    for jo, ko, ji, ki in np.ndindex(p.shape):
        assert p[jo, ko, ji, ki] == w[ko * 4 + ki, jo * 16 + ji]


@pytest.mark.parametrize("a_dtype,instruction", [("uint8", "udot"), ("int8", "sdot")])
def test_aarch64_dotprod_under_qemu_is_exact(a_dtype, instruction, tmp_path):
    """--cpu-features +dotprod: the library uses Arm's dot product (udot for uint8 activations,
    sdot for int8) and gives onnxruntime's results, run by tvmgen-run under qemu."""
    from tvmgen.runtime import runtime_build

    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64", "cmake", "aarch64-linux-gnu-objdump"):
        require_tool(tool)
    model = matmul_integer(a_dtype, "int8", (4, 64), 32, 5 if a_dtype == "uint8" else -3)
    path = save_onnx(model, tmp_path / "m.onnx")
    imported = frontends.load(path, [])
    out = tmp_path / "art"
    plat = PLATFORMS["linux-aarch64"].with_features(["+dotprod"])
    compile_to_artifact(imported, BuildOptions(plat, "cpu"), out, True, {"name": "m"})
    assert "+dotprod" in json.loads((out / "manifest.json").read_text())["target"]["mattr"]
    disassembly = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(out / "model.so")], capture_output=True, text=True, check=True
    ).stdout
    assert f"\t{instruction}\t" in disassembly
    lo, hi = (0, 256) if a_dtype == "uint8" else (-128, 128)
    a = np.random.default_rng(2).integers(lo, hi, (4, 64)).astype(a_dtype)
    runtime = runtime_build.cached_build("linux-aarch64")
    proc, outs = run_native(runtime, out, {"a": a}, tmp_path, "--warmup", "0", launcher=QEMU_AARCH64)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(outs[0], exact_product(model, a))


def test_cpu_features_flag(tvmgen, tmp_path):
    path = save_onnx(matmul_integer("uint8", "int8", (4, 64), 32, 5), tmp_path / "m.onnx")
    bad = tvmgen("compile", str(path), "--cpu-features", "dotprod", "-o", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "+name or -name" in bad.output and not (tmp_path / "bad").exists()
    require_tool("aarch64-linux-gnu-g++")
    ok = tvmgen(
        "compile", str(path), "--platform", "linux-aarch64", "--cpu-features", "+dotprod", "-o", str(tmp_path / "a64")
    )
    assert ok.returncode == 0, ok.output
    assert json.loads((tmp_path / "a64" / "manifest.json").read_text())["target"]["mattr"] == ["+neon", "+dotprod"]


def test_tuned_int8_matmul_compiles_from_its_database(tvmgen, tmp_path):
    """Tuning records of the dot-product kernel name tvmgen's tensor intrinsic: reading the
    database registers it first, and the tuned build is exact."""
    path = save_onnx(matmul_integer("uint8", "int8", (8, 64), 32, 3), tmp_path / "m.onnx")
    r = tvmgen("tune", path, "--trials", "2", "--num-cores", "1", "--db", tmp_path / "db")
    assert r.returncode == 0, r.stderr
    tasks = int(r.stderr.split(" tasks, 2 trials each")[0].rsplit(" ", 1)[1])
    r = tvmgen("compile", path, "--tuning-db", tmp_path / "db", "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert f"kernels: {tasks} from the tuning database" in r.stderr and "max abs error 0," in r.stderr
    assert "Checking against NumPy" in r.stderr and "saturate on x86-64 CPUs without VNNI" in r.stderr


# ------------------------------------------------------------------ quantised (QDQ) models


def qdq_matmul(m: int, k: int, n: int, a_dtype: str, seed: int = 0):
    """x -> QuantizeLinear -> DequantizeLinear -> MatMul(DequantizeLinear(constant 8-bit W, a
    scale per column)): how a statically quantised ONNX model spells a quantised layer. Returns
    (model, W, per-column scales, activation scale, activation zero point)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (k, n)).astype(np.int8)
    sw = rng.uniform(0.001, 0.02, n).astype(np.float32)
    sx, zx = np.float32(0.05), (np.uint8(131) if a_dtype == "uint8" else np.int8(-7))
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(sw, "sw"),
        numpy_helper.from_array(np.zeros(n, np.int8), "zw"),
        numpy_helper.from_array(np.array(sx), "sx"),
        numpy_helper.from_array(np.array(zx), "zx"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=1),
        helper.make_node("MatMul", ["xf", "wf"], ["y"]),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        inits,
    )
    return model, w, sw, sx, zx


def qdq_expected(x, w, sw, sx, zx, a_dtype):
    """The layer in float64 from the 8-bit values: sx * sw * ((xq - zx) @ W), exact but for the last rounding."""
    lo, hi = _INT8_RANGE[a_dtype]
    xq = np.clip(np.rint(x / sx) + int(zx), lo, hi)
    return (float(sx) * sw.astype(np.float64)) * ((xq - int(zx)) @ w.astype(np.float64))


_INT8_RANGE = {"uint8": (0, 255), "int8": (-128, 127)}


@pytest.mark.parametrize("a_dtype,n", [("int8", 48), ("uint8", 40)])
def test_quantised_matmul_on_the_dot_product_matches_the_integer_product(a_dtype, n, tmp_path):
    """A QDQ matmul becomes one dot-product kernel on the 8-bit values (40 columns: padded to 48,
    sliced off in the kernel), with the zero point and the scales in its epilogue; its result is
    the exact integer product times the scales, and onnxruntime's without its QDQ fusion (whose 8-bit
    products saturate on an AVX2-only CPU: off by up to 24 here)."""
    model, w, sw, sx, zx = qdq_matmul(6, 64, n, a_dtype)
    path = save_onnx(model, tmp_path / "q.onnx")
    imported = frontends.load(path, [])
    # onnxruntime unfused: its QDQ fusion's u8 x s8 products saturate on x86-64 CPUs without VNNI
    assert "basic graph optimisations" in imported.reference_name, imported.reference_name
    out = tmp_path / "art"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), out, True, {"name": "q"})
    x = np.random.default_rng(3).uniform(-6, 6, (6, 64)).astype(np.float32)
    x[0, :4] = [1e3, -1e3, 0.0, 0.05 * 0.3]  # clipped both ways, zero, rounding
    (got,) = HostModel(out).run({"x": x})
    want = qdq_expected(x, w, sw, sx, zx, a_dtype)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5)
    np.testing.assert_allclose(got, imported.reference({"x": x})[0], rtol=1e-4, atol=1e-4)  # onnxruntime
    assert len(dot_functions(path)) == (1 if HOST_HAS_DOT else 0)
    if HOST_HAS_DOT:  # the profile's table: a matmul, its FLOPs counted on the padded columns
        table = json.loads((out / "kernels.json").read_text())["kernels"]
        (dot,) = [k for k in table if "int8_dot" in k["name"]]
        assert dot["kind"] == "matmul" and dot["flops"] == 2 * 6 * 64 * 48, dot


def test_full_integer_tflite_model_on_dot_products_matches_litert_and_the_float_path(tmp_path, monkeypatch):
    """The converter's full-integer model: its two 1x1 convolutions and dense layer on the
    dot-product instruction where the CPU has one, within one output quantum of LiteRT (its own
    fixed-point arithmetic rounds differently) and of the float path TVM's importer gives (the same
    values but for a quantisation rounding at an exact half, here and there)."""
    path = keras_int8_model(tmp_path)
    imported = frontends.load(path, [])
    name = imported.inputs[0].name
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-1, 1, (1, 14, 14, 24)).astype(np.float32) for _ in range(4)]
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / "dot", True, {"name": "q"})
    monkeypatch.setattr(int8, "dot_product", lambda target, a_dtype: None)  # TVM's float path
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / "float", True, {"name": "q"})
    monkeypatch.undo()
    dot, flt = HostModel(tmp_path / "dot"), HostModel(tmp_path / "float")
    for x in xs:
        (ref,) = imported.reference({name: x})
        q = float(ref.max() - ref.min()) / 255
        (a,) = dot.run({name: x})
        (b,) = flt.run({name: x})
        assert np.abs(a - b).max() <= 1.01 * q, (np.abs(a - b).max(), q)
        assert np.abs(a - ref).max() <= 2.01 * q and np.mean(np.abs(a - ref)) <= 0.5 * q
    moved = np.abs(imported.reference({name: xs[0]})[0] - imported.reference({name: xs[1]})[0]).max()
    assert moved > 4 * q  # the comparison means something: inputs move the outputs by more than it allows
    assert len(dot_functions(path)) == (3 if HOST_HAS_DOT else 0)
    # the depthwise convolution reads the 8-bit tensor (a quarter of the bytes), on any CPU
    assert depthwise_inputs(path) == ["int8"]


def depthwise_inputs(path) -> list[str]:
    """The element types of the activations each depthwise convolution of the prepared module reads."""
    import tvm

    imported = frontends.load(path, [])
    with HOST:
        mod = tvm.transform.Sequential(cpu.prepare_passes(HOST))(imported.mod)
    types = []
    for f in mod.functions.values():
        if isinstance(f, tvm.tirx.PrimFunc) and "group_conv2d" in f.script(show_meta=False):
            types.append(str(f.params[0].ty.dtype))
    return types


def test_quantised_matmul_on_aarch64_sdot_under_qemu(tmp_path):
    """The same QDQ layer for aarch64 with +dotprod: int8 activations on ``sdot``, run by
    tvmgen-run under qemu, equal to the integer product times the scales (any host CPU)."""
    from tvmgen.runtime import runtime_build

    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64", "cmake", "aarch64-linux-gnu-objdump"):
        require_tool(tool)
    model, w, sw, sx, zx = qdq_matmul(4, 32, 20, "int8", seed=4)
    path = save_onnx(model, tmp_path / "q.onnx")
    out = tmp_path / "art"
    plat = PLATFORMS["linux-aarch64"].with_features(["+dotprod"])
    compile_to_artifact(frontends.load(path, []), BuildOptions(plat, "cpu"), out, True, {"name": "q"})
    disassembly = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(out / "model.so")], capture_output=True, text=True, check=True
    ).stdout
    assert "\tsdot\t" in disassembly
    x = np.random.default_rng(6).uniform(-6, 6, (4, 32)).astype(np.float32)
    runtime = runtime_build.cached_build("linux-aarch64")
    proc, outs = run_native(runtime, out, {"x": x}, tmp_path, "--warmup", "0", launcher=QEMU_AARCH64)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(outs[0], qdq_expected(x, w, sw, sx, zx, "int8"), rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("k,n,eight_bit", [(1024, 384, True), (624, 64, False)])
def test_dense_layer_on_8bit_weights_beyond_l2_reads_them_as_8bit(k, n, eight_bit, tmp_path):
    """A batch-1 dense layer on dequantised 8-bit weights (float activations, so no dot-product instruction
    applies on any CPU) is bound by the bytes of its weights: where they pass a core's L2 as float (1024 x 384:
    1.5 MB) the kernel reads the 8-bit constant (0.4 MB) and widens each weight as it multiplies, the
    per-column scale applied once per output; where L2 holds them (624 x 64) the float copy stays (faster
    there). Results as float64 NumPy's from the 8-bit values and as onnxruntime's."""
    from onnx import TensorProto, helper, numpy_helper

    from helpers import CPU_TARGETS, prepared_and_scheduled

    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, (k, n)).astype(np.int8)
    sw = rng.uniform(0.001, 0.02, n).astype(np.float32)
    model = onnx_model(
        [
            helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=1),
            helper.make_node("MatMul", ["x", "wf"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(sw, "sw"),
            numpy_helper.from_array(np.zeros(n, np.int8), "zw"),
        ],
    )
    path = save_onnx(model, tmp_path / "dense8.onnx")
    mod, done, _ = prepared_and_scheduled(path, target_spec=CPU_TARGETS["avx2"][0])
    (kernel,) = [f for f in done if "matmul" in f]
    weights = [(str(p.dtype), int(np.prod([int(d) for d in p.shape]))) for p in mod[kernel].params]
    assert (("int8", k * n) in weights) == eight_bit and (("float32", k * n) in weights) != eight_bit, weights
    imported = frontends.load(path, [])
    out = tmp_path / "art"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), out, True, {"name": "dense8"})
    x = rng.standard_normal((1, k)).astype(np.float32)
    (got,) = HostModel(out).run({"x": x})
    want = x.astype(np.float64) @ (w.astype(np.float64) * sw.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, imported.reference({"x": x})[0], rtol=1e-4, atol=1e-4)
