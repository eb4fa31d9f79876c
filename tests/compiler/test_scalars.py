"""0-d (scalar) inputs and outputs end to end (silero-vad's `sr`): the zoo's vad_scalar, whose int64
`sr` decides an If and scales the output, and whose second output is a 0-d mean. Compiled once
with `--check` and no `--const`; then `tvmgen run` with .npy files, tvmgen-run, the manifest and
`inspect`. (The Java API: tests/runtime/test_java.py; PoCL: tests/runtime/test_opencl.py; aarch64: the zoo.)"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, run_native
from helpers import run_tvmgen

sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.fixture(scope="module")
def vad(tmp_path_factory):
    import zoo

    work = tmp_path_factory.mktemp("vad-scalar")
    path = zoo.build("vad_scalar", work)[0]
    out = work / "art"
    p = run_tvmgen("compile", path, "--input", "sr:scalar:int64", "--check", "-o", out)
    return path, out, p


def _reference(path, x, sr):
    import zoo

    return zoo.reference_runner(path, {})({"x": x, "sr": np.array(sr, np.int64)})


def test_compile_check_passes_without_const(vad):
    _, out, p = vad
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok mean: max abs error" in p.stderr and "ok y: max abs error" in p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][1] == {"name": "sr", "shape": [], "dtype": "int64"}
    assert manifest["outputs"][1]["name"] == "mean" and manifest["outputs"][1]["shape"] == []


def test_inspect_shows_scalars(vad, tvmgen):
    r = tvmgen("inspect", vad[1])
    assert r.returncode == 0, r.stderr
    assert "sr:scalar:int64" in r.stdout and "mean:scalar:float32" in r.stdout, r.stdout


@pytest.mark.parametrize("sr", [16000, 8000])
def test_run_with_npy_files(vad, tvmgen, tmp_path, sr):
    path, out, _ = vad
    x = np.random.default_rng(sr).standard_normal((16, 1, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "sr.npy", np.array(sr, np.int64))
    r = tvmgen(
        "run",
        out,
        "-i",
        f"x={tmp_path / 'x.npy'}",
        "-i",
        f"sr={tmp_path / 'sr.npy'}",
        "-o",
        tmp_path / "o",
        "--repeat",
        "1",
    )
    assert r.returncode == 0, r.stderr
    y, mean = _reference(path, x, sr)
    got = np.load(tmp_path / "o" / "mean.npy")
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), y, rtol=1e-4, atol=1e-5)


def test_run_refuses_a_scalar_given_as_an_array(vad, tvmgen, tmp_path):
    np.save(tmp_path / "sr.npy", np.array([16000], np.int64))
    r = tvmgen("run", vad[1], "-i", f"sr={tmp_path / 'sr.npy'}", "--repeat", "1")
    assert r.returncode != 0
    assert "input 'sr' has shape (1,), the model expects ()" in r.stderr, r.stderr


def test_tvmgen_run_reads_and_writes_scalars(vad, ocl_runtime, tmp_path):
    path, out, _ = vad
    x = np.random.default_rng(1).standard_normal((16, 1, 64)).astype(np.float32)
    p, _ = run_native(ocl_runtime, out, {"x": x, "sr": np.array(16000, np.int64)}, tmp_path, tag="o")
    assert p.returncode == 0, p.stderr
    y, mean = _reference(path, x, 16000)
    got = np.load(tmp_path / "o" / "mean.npy")
    assert got.shape == () and abs(float(got) - float(mean)) <= 1e-6 + 1e-5 * abs(float(mean))
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), y, rtol=1e-4, atol=1e-5)


def test_tvmgen_run_names_a_scalar_in_its_shape_error(vad, ocl_runtime, tmp_path):
    np.save(tmp_path / "sr.npy", np.array([16000], np.int64))
    p = subprocess.run(
        [str(ocl_runtime / "bin" / "tvmgen-run"), str(vad[1]), "-i", f"sr={tmp_path / 'sr.npy'}", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode != 0
    assert "has shape 1, the model expects scalar (0-d)" in p.stderr, p.stderr
