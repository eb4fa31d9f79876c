"""8-bit matmuls on the dot-product instructions (compiler.int8): exact against the integer product
computed by NumPy in int64, on this CPU (AVX-512 VNNI when it has it) and on aarch64 with +dotprod
under qemu. onnxruntime is compared too where it is exact on every x86-64 CPU (u8 x u8, s8 x s8):
without VNNI its u8 x s8 MatMulInteger saturates (vpmaddubsw adds pairs into 16-bit lanes)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import onnx_model, require_tool, save_onnx
from tvmgen import frontends
from tvmgen.compiler import cpu, int8
from tvmgen.compiler.build import BuildOptions, build_executable, compile_to_artifact
from tvmgen.compiler.platforms import PLATFORMS, make_target
from tvmgen.runner import HostModel

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
    return onnx_model(nodes, [helper.make_tensor_value_info("a", onnx_type[a_dtype], list(a_shape))],
                      [helper.make_tensor_value_info("y", 6, None)], inits, opset=13)


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
    "n_not_a_multiple_of_16": ("uint8", "int8", (8, 64), 24, 3, None),  # left to the int32 matmul
}


def dot_functions(path) -> list[str]:
    """The dot-product functions in the module `compile` builds for this CPU."""
    import tvm
    from tvm import relax

    imported = frontends.load(path, [])
    mod = relax.transform.BindParams("main", dict(zip(imported.mod["main"].params[len(imported.inputs):],
                                                      imported.params)))(imported.mod)
    with HOST:
        mod = tvm.transform.Sequential(cpu.prepare_passes(HOST))(mod)
    return sorted(gv.name_hint for gv, f in mod.functions.items()
                  if isinstance(f, tvm.tirx.PrimFunc) and "int8_dot" in f.script(show_meta=False))


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
    if name == "n_not_a_multiple_of_16" or not HOST_HAS_DOT:
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
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["h3"]), helper.make_node("MatMul", ["h3", "w2"], ["y"])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", 1, [4, 256])],
                       [helper.make_tensor_value_info("y", 1, None)], [w1, b1, w2])
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
    from tvmgen import runtime_build

    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64", "cmake", "aarch64-linux-gnu-objdump"):
        require_tool(tool)
    model = matmul_integer(a_dtype, "int8", (4, 64), 32, 5 if a_dtype == "uint8" else -3)
    path = save_onnx(model, tmp_path / "m.onnx")
    imported = frontends.load(path, [])
    out = tmp_path / "art"
    plat = PLATFORMS["linux-aarch64"].with_features(["+dotprod"])
    compile_to_artifact(imported, BuildOptions(plat, "cpu"), out, True, {"name": "m"})
    assert "+dotprod" in json.loads((out / "manifest.json").read_text())["target"]["mattr"]
    disassembly = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(out / "model.so")], capture_output=True,
                                 text=True, check=True).stdout
    assert f"\t{instruction}\t" in disassembly
    lo, hi = (0, 256) if a_dtype == "uint8" else (-128, 128)
    a = np.random.default_rng(2).integers(lo, hi, (4, 64)).astype(a_dtype)
    np.save(tmp_path / "a.npy", a)
    (tmp_path / "o").mkdir()
    runtime = runtime_build.cached_build("linux-aarch64")
    proc = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", str(runtime / "bin" / "tvmgen-run"), str(out),
                           "--input", f"a={tmp_path / 'a.npy'}", "-o", str(tmp_path / "o"), "--repeat", "1",
                           "--warmup", "0"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), exact_product(model, a))


def test_cpu_features_flag(tvmgen, tmp_path):
    path = save_onnx(matmul_integer("uint8", "int8", (4, 64), 32, 5), tmp_path / "m.onnx")
    bad = tvmgen("compile", str(path), "--cpu-features", "dotprod", "-o", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "+name or -name" in bad.output and not (tmp_path / "bad").exists()
    require_tool("aarch64-linux-gnu-g++")
    ok = tvmgen("compile", str(path), "--platform", "linux-aarch64", "--cpu-features", "+dotprod", "-o",
                str(tmp_path / "a64"))
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
