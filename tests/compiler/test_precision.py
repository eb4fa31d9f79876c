"""`--precision fp16`: float16 weights and activations, float32 interface, fp16-sized --check tolerances.

Each model is made here (onnx.helper); the host CPU runs the fp16 code (LLVM converts around each
half operation on x86), so the numerics are checked here; OpenCL kernels are only inspected (this
machine's PoCL has no cl_khr_fp16)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import onnx_model, opencl_info, run_native, save_onnx
from helpers import run_tvmgen

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GEMM_WEIGHTS = 64 * 16 * 16 * 16  # most of the model's bytes: the library halves with fp16


def conv_relu_gemm():
    """x[1,8,16,16] -> Conv 3x3 (16 channels) + bias -> Relu -> Flatten -> Gemm (64 outputs) + bias."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    F = TensorProto.FLOAT

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1),
    ]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", F, [1, 64])],
        [w("W", 16, 8, 3, 3), w("B", 16), w("W2", 64, 16 * 16 * 16), w("B2", 64)],
    )


def cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return run_tvmgen(*args, env={"TVMGEN_LOG_DIR": str(cwd / "logs"), "COLUMNS": "200"}, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The model, and its host/cpu artifacts at fp32 and fp16, both compiled with --check."""
    d = tmp_path_factory.mktemp("precision")
    model = save_onnx(conv_relu_gemm(), d / "crg.onnx")
    runs = {}
    for precision in ("fp32", "fp16"):
        r = cli(
            "compile",
            model,
            "--device",
            "cpu",
            "--platform",
            "host",
            "--precision",
            precision,
            "--check",
            "-o",
            d / precision,
            cwd=d,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        runs[precision] = r.stderr
    return {"dir": d, "model": model, "stderr": runs}


def run_artifact(directory: Path, x: np.ndarray) -> np.ndarray:
    from tvmgen.runtime.runner import HostModel

    return np.asarray(HostModel(directory).run({"x": x})[0])


def test_fp16_check_manifest_and_numerics(built):
    import onnxruntime as ort

    d = built["dir"]
    m16 = json.loads((d / "fp16" / "manifest.json").read_text())
    m32 = json.loads((d / "fp32" / "manifest.json").read_text())
    assert m16["precision"] == "fp16" and m32["precision"] == "fp32"
    # the interface the apps copy stays float32
    assert m16["inputs"] == m32["inputs"] == [{"name": "x", "shape": [1, 8, 16, 16], "dtype": "float32"}]
    assert m16["outputs"] == m32["outputs"] == [{"name": "y", "shape": [1, 64], "dtype": "float32"}]
    # --check used the fp16 tolerances (none given on the command line)
    err = built["stderr"]["fp16"]
    assert "Checking against onnxruntime" in err and "(fp16 build)" in err
    assert "ok y: max abs error" in err and "atol 0.001 + rtol 0.01" in err
    assert "atol 0.0001 + rtol 0.001" in built["stderr"]["fp32"]

    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(str(built["model"])).run(None, {"x": x})[0]
    y32, y16 = run_artifact(d / "fp32", x), run_artifact(d / "fp16", x)
    assert y16.dtype == np.float32
    err32, err16 = np.abs(y32 - ref).max(), np.abs(y16 - ref).max()
    scale = np.abs(ref).max()
    assert err32 <= 1e-4 + 1e-3 * scale
    assert err16 <= 1e-3 + 1e-2 * scale  # within the fp16 tolerance...
    assert err16 > 10 * err32 and err16 > 1e-4 * scale  # ...and visibly not the fp32 code: half precision ran
    assert not np.array_equal(y16, y32)


def test_fp16_library_stores_half_weights(built):
    d = built["dir"]
    lib32, lib16 = (d / "fp32" / "model.so").stat().st_size, (d / "fp16" / "model.so").stat().st_size
    # the constants are ~1 MB at fp32: the library loses about half their bytes
    assert lib32 - lib16 > 0.45 * GEMM_WEIGHTS * 4, (lib32, lib16)
    assert lib16 < 0.6 * lib32
    m16 = json.loads((d / "fp16" / "manifest.json").read_text())
    assert m16["files"]["model.so"]["bytes"] == lib16


def test_conversion_keeps_interface_and_folds_weights(built):
    """In process: main's signature is unchanged by the pass; every bound weight is a float16 constant."""
    from tvm import relax

    from tvmgen import frontends
    from tvmgen.compiler import precision

    imported = frontends.load(built["model"], [])
    mod = imported.mod
    weights = mod["main"].params[len(imported.inputs) :]
    mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    assert precision.apply(mod, "fp32") is mod
    half = precision.apply(mod, "fp16")
    main = half["main"]
    assert [str(p.ty.dtype) for p in main.params] == ["float32"]
    assert str(main.ret_ty.dtype) == "float32"
    count, nbytes, single = precision.constant_summary(half)
    assert count == 4 and single == 0
    assert nbytes == sum(p.numpy().size for p in imported.params) * 2


def compile_for_opencl(model: Path, precision: str, out: Path) -> None:
    """`tvmgen compile MODEL --device opencl --platform host --precision PRECISION -o OUT`, which must succeed."""
    r = cli(
        "compile",
        model,
        "--device",
        "opencl",
        "--platform",
        "host",
        "--precision",
        precision,
        "-o",
        out,
        cwd=out.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_opencl_kernels_are_half(built, tmp_path):
    """--device opencl: the kernels (OpenCL C, kept as source in the library) take half and enable
    cl_khr_fp16; the fp32 build's do not."""
    for precision in ("fp16", "fp32"):
        compile_for_opencl(built["model"], precision, tmp_path / precision)
    lib16 = (tmp_path / "fp16" / "model.so").read_bytes()
    lib32 = (tmp_path / "fp32" / "model.so").read_bytes()
    assert b"#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in lib16
    assert b"__global half* restrict" in lib16
    assert b"__kernel void" in lib32 and b"half" not in lib32.split(b"__kernel void", 1)[1]
    assert json.loads((tmp_path / "fp16" / "manifest.json").read_text())["precision"] == "fp16"


def test_user_tolerances_override_fp16_defaults(built, tmp_path):
    tight = ["--rtol", "1e-6", "--atol", "0"]
    r = cli("compile", built["model"], "--precision", "fp16", "--check", *tight, "-o", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 5, r.stdout + r.stderr
    assert "FAIL y" in r.stderr and "atol 0 + rtol 1e-06" in r.stderr
    assert not (tmp_path / "out").exists()


def test_bad_precision_is_refused(tmp_path):
    r = cli("compile", "builtin:mobilenet", "--precision", "fp8", cwd=tmp_path)
    assert r.returncode == 2
    assert "Invalid value for '--precision'" in r.stderr and "'fp8' is not one of 'fp32', 'fp16'" in r.stderr
    r = cli("compile", "--help", cwd=tmp_path)
    assert "--precision [fp32|fp16]" in r.stdout and "cl_khr_fp16" in r.stdout
    r = cli("app", "--help", cwd=tmp_path)
    assert "--precision [fp32|fp16]" in r.stdout


def test_fp16_refused_for_nnapi(tmp_path):
    nnapi_build = ["--platform", "android-arm64", "--device", "nnapi"]
    r = cli("compile", "builtin:mobilenet", *nnapi_build, "--precision", "fp16", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "does not apply to --device nnapi" in r.stderr and "fix:" in r.stderr


def test_fp16_refuses_integer_models(tmp_path):
    """ToMixedPrecision would give an integer matmul a float accumulator: refused with a clear error."""
    from onnx import TensorProto, helper

    from tvmgen import frontends
    from tvmgen.compiler import precision
    from tvmgen.core.errors import InputError

    model = onnx_model(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
        [
            helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 8]),
            helper.make_tensor_value_info("b", TensorProto.INT8, [8, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 4])],
    )
    imported = frontends.load(save_onnx(model, tmp_path / "mmi.onnx"), [])
    with pytest.raises(InputError, match="integer operators"):
        precision.apply(imported.mod, "fp16")


def test_manifest_without_precision_loads_as_fp32(built):
    from tvmgen.core import artifact

    d = json.loads((built["dir"] / "fp16" / "manifest.json").read_text())
    del d["precision"]
    assert artifact.Manifest.from_json(d).precision == "fp32"
    assert artifact.load(built["dir"] / "fp16").precision == "fp16"


def test_tolerances():
    from tvmgen.runtime.check import tolerances

    assert tolerances("fp32") == (1e-3, 1e-4)
    assert tolerances("fp16") == (1e-2, 1e-3)
    assert tolerances("fp16", rtol=0.5) == (0.5, 1e-3)
    assert tolerances("fp16", atol=0.0) == (1e-2, 0.0)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_fp16_on_opencl_runs_or_names_the_missing_extension(built, tmp_path, ocl_runtime, opencl_lib):
    """On a device with cl_khr_fp16 the fp16 OpenCL build matches the fp32 CPU build within fp16
    tolerances; on one without (PoCL on x86) tvmgen-run refuses it at load, naming the extension and
    the fix, instead of a driver's build log on the first run."""
    from tvmgen.runtime.check import tolerances

    compile_for_opencl(built["model"], "fp16", tmp_path / "fp16")
    info = opencl_info(opencl_lib)
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype("float32")
    proc, outs = run_native(ocl_runtime, tmp_path / "fp16", {"x": x}, tmp_path)
    if info["devices"][0]["fp16"]:
        assert proc.returncode == 0, proc.stderr
        out = outs[0]
        rtol, atol = tolerances("fp16")
        np.testing.assert_allclose(out, run_artifact(built["dir"] / "fp32", x), rtol=rtol, atol=atol)
    else:
        assert proc.returncode != 0
        assert "compiled with --precision fp16" in proc.stderr and "lacks cl_khr_fp16" in proc.stderr, proc.stderr
        assert "--precision fp32" in proc.stderr and "build log" not in proc.stderr


def test_fp16_adreno_build_then_check(tmp_path):
    """--precision fp16 with --gpu-family adreno and --check: the texture build, then --check's host build
    of the same imported model (which once failed after the GPU passes had changed shared nodes)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        [
            numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float32), "W"),
            numpy_helper.from_array(np.array(0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6, np.float32), "hi"),
        ],
    )
    path = save_onnx(model, tmp_path / "conv_relu6.onnx")
    r = cli(
        "compile",
        path,
        "--device",
        "opencl",
        "--gpu-family",
        "adreno",
        "--precision",
        "fp16",
        "--check",
        "-o",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok y:" in r.stdout + r.stderr and "(fp16 build)" in r.stdout + r.stderr
    assert b"image2d_array_t" in (tmp_path / "out" / "model.so").read_bytes()
