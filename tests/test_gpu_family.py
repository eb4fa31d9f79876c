"""--gpu-family desktop: dlight's matmul/convolution rule with the tile configuration dlight gives
CUDA, for OpenCL on PC GPUs; the other families keep theirs. A desktop build runs on PoCL through
tvmgen-run and matches onnxruntime."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import save_onnx, single_op_models
from tvmgen import frontends
from tvmgen.compiler import gpu
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.platforms import PLATFORMS, make_target, target_dict


def _target(family):
    return make_target(target_dict(PLATFORMS["host"], "opencl", family))


def test_desktop_family_takes_dlights_cuda_configuration():
    from tvm.s_tir import dlight as dl

    cuda = dl.gpu.Matmul().get_configs(make_target({"kind": "cuda"}))
    desktop_rule = gpu.default_rules(_target("desktop"))[0]
    assert desktop_rule.get_configs(_target("desktop")) == cuda
    assert (cuda.block_size_y, cuda.micro_size_k, cuda.vector_size) == (16, 16, 2)
    for family in ("generic", "mali"):  # unchanged: dlight's default configuration
        rule = gpu.default_rules(_target(family))[0]
        assert rule.get_configs(_target(family)) == dl.gpu.Matmul.Config()
    assert gpu.is_desktop(_target("desktop")) and not gpu.is_desktop(_target("generic"))
    assert not gpu.is_desktop(make_target({"kind": "cuda"}))


@pytest.mark.parametrize("name", ["conv3x3", "conv1x1"])
def test_desktop_build_runs_on_pocl_and_matches_onnxruntime(ocl_runtime, opencl_lib, tmp_path, name):
    import onnxruntime as ort

    path = save_onnx(single_op_models()[name], tmp_path / f"{name}.onnx")
    sources = {}
    for family in ("generic", "desktop"):
        art = tmp_path / family
        compile_to_artifact(frontends.load(path, []), BuildOptions(PLATFORMS["host"], "opencl", family), art,
                            True, {"name": name})
        sources[family] = (art / "model.so").read_bytes()
    # the CUDA configuration loads pairs of values (float2), dlight's OpenCL default single ones
    assert b"float2" in sources["desktop"] and b"float2" not in sources["generic"]
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([str(ocl_runtime / "bin" / "tvmgen-run"), str(tmp_path / "desktop"), "-i",
                           f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out"), "--repeat", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(next((tmp_path / "out").glob("*.npy"))), want, atol=1e-4, rtol=1e-4)


def test_cli_accepts_desktop_and_names_the_families(tvmgen, tmp_path):
    r = tvmgen("compile", "builtin:mobilenet", "--device", "opencl", "--gpu-family", "nvidia", "-o", tmp_path / "x")
    assert r.returncode == 2 and "desktop" in r.output and not (tmp_path / "x").exists()
    r = tvmgen("compile", "--help")
    assert "desktop" in r.output
