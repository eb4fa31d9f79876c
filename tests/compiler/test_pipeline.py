"""The one seam from a model to an artifact (compiler/pipeline.py), the device table beside the platform
table, and the one --platform vocabulary."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest

from conftest import REPO
from tvmgen.compiler import pipeline
from tvmgen.compiler.targets.platforms import DEVICE_TABLE, DEVICES, PLATFORMS, BuildTarget, target_dict
from tvmgen.core.errors import InputError

PACKAGE = REPO / "generator" / "tvmgen"


def _calls(name: str) -> list[str]:
    """Every module of the package (but its definition's) that calls ``name``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if called == name:
                    found.append(str(path.relative_to(PACKAGE)))
    return sorted(set(found))


def test_every_build_goes_through_the_seam():
    assert _calls("compile_to_artifact") == ["compiler/pipeline.py"]
    assert _calls("materialize") == ["compiler/pipeline.py"]  # a built-in model is unpacked in one place
    assert _calls("partition_and_generate") == ["compiler/pipeline.py"]


def _device_comparisons() -> list[str]:
    """``device == "..."``-style comparisons (a name compared with a device literal) outside the table."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel == "compiler/targets/platforms.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literals = set()
            for o in operands:
                if isinstance(o, ast.Constant) and isinstance(o.value, str):
                    literals.add(o.value)
                elif isinstance(o, (ast.Tuple, ast.List, ast.Set)):
                    literals |= {e.value for e in o.elts if isinstance(e, ast.Constant)}
            # the device's name itself: a variable or attribute called device (or dev), not a property of it
            names = {
                o.attr if isinstance(o, ast.Attribute) else o.id
                for o in operands
                if isinstance(o, (ast.Attribute, ast.Name))
            }
            if literals & set(DEVICES) and any("device" in n or n == "dev" for n in names):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_device_name_compared_outside_the_device_table():
    assert _device_comparisons() == []


def test_the_device_table_says_what_each_device_is():
    assert set(DEVICE_TABLE) == {d for p in PLATFORMS.values() for d in p.devices}
    gpus = {n for n, d in DEVICE_TABLE.items() if d.gpu}
    assert gpus == {"opencl", "vulkan", "metal", "cuda"}
    assert {n for n, d in DEVICE_TABLE.items() if d.host_memory} == {"cpu", "nnapi"}
    assert [n for n, d in DEVICE_TABLE.items() if d.partitions] == ["nnapi"]
    assert {n: d.backend for n, d in DEVICE_TABLE.items() if d.backend} == {"opencl": "opencl", "vulkan": "vulkan"}
    # the table's target kinds are what the TVM targets are made of
    for plat in PLATFORMS.values():
        for dev in plat.devices:
            assert target_dict(plat, dev)["kind"] == DEVICE_TABLE[dev].target_kind, (plat.name, dev)
    # the table's reason where --check cannot run the artifact itself: GPU kernels need that GPU's driver
    # (a host OpenCL or Vulkan build runs on a local device when one is present: runtime/check.py)
    assert {n for n, d in DEVICE_TABLE.items() if d.not_checked is None} == {"cpu", "cuda"}
    assert "Vulkan kernels run on the target's GPU" in DEVICE_TABLE["vulkan"].not_checked
    assert "OpenCL kernels run on the target's GPU" in DEVICE_TABLE["opencl"].not_checked


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("pipeline") / "tiny.onnx"
    onnx.save(model, path)
    return path


def test_load_and_compile_record_the_model(tiny_onnx, tmp_path):
    import numpy as np

    from tvmgen.runtime.runner import HostModel

    loaded = pipeline.load_model(tiny_onnx, tmp_path)
    assert loaded.info == {
        "name": "tiny",
        "source": str(tiny_onnx.resolve()),
        "format": "onnx",
        "sha256": hashlib.sha256(tiny_onnx.read_bytes()).hexdigest(),
    }
    seen = []
    out = tmp_path / "art"
    manifest = pipeline.compile_model(
        loaded, BuildTarget(PLATFORMS["host"], "cpu"), out, verify=lambda staged, opts: seen.append(opts.device)
    )
    assert seen == ["cpu"]  # verify ran on the staged artifact, with the options it was built with
    recorded = json.loads((out / "manifest.json").read_text())["model"]
    assert recorded == loaded.info == manifest.model
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    (y,) = HostModel(out).run({"x": x})
    assert np.array_equal(y, np.maximum(x, 0))


def test_a_failed_verify_leaves_nothing(tiny_onnx, tmp_path):
    def refuse(staged, opts):
        assert (staged / "manifest.json").is_file()  # the whole artifact is staged when verify runs
        raise InputError("refused", "nothing")

    with pytest.raises(InputError):
        pipeline.compile_model(
            pipeline.load_model(tiny_onnx, tmp_path),
            BuildTarget(PLATFORMS["host"], "cpu"),
            tmp_path / "a",
            verify=refuse,
        )
    assert not (tmp_path / "a").exists() and not list(tmp_path.glob(".a.tmp-*"))


def test_the_build_log_names_each_build(tiny_onnx, tmp_path, monkeypatch):
    """$TVMGEN_COMPILE_LOG (where a test run's compile time goes): one row a build, the same module hash for
    the same model, the target and the test that built it."""
    log = tmp_path / "builds.jsonl"
    monkeypatch.setenv("TVMGEN_COMPILE_LOG", str(log))
    loaded = pipeline.load_model(tiny_onnx, tmp_path)
    for out in ("a", "b"):
        pipeline.compile_model(loaded, BuildTarget(PLATFORMS["host"], "cpu"), tmp_path / out)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["module"] == rows[1]["module"]
    assert rows[0]["target"] == "host/cpu/generic" and rows[0]["seconds"] >= 0
    assert "test_the_build_log_names_each_build" in rows[0]["test"]


def test_options_that_do_not_apply_are_refused_before_any_work():
    nnapi = BuildTarget(PLATFORMS["android-arm64"], "nnapi")
    with pytest.raises(InputError, match="--separate-params does not apply to --device nnapi"):
        pipeline.check_build_options(nnapi, separate_params=True)
    with pytest.raises(InputError, match="--precision fp16 does not apply to --device nnapi"):
        pipeline.check_build_options(nnapi, precision="fp16")
    pipeline.check_build_options(BuildTarget(PLATFORMS["android-arm64"], "cpu"), separate_params=True, precision="fp16")


def test_model_digest_of_a_folder_names_its_files(tmp_path):
    (tmp_path / "m" / "variables").mkdir(parents=True)
    (tmp_path / "m" / "saved_model.pb").write_bytes(b"graph")
    (tmp_path / "m" / "variables" / "v").write_bytes(b"weights")
    first = pipeline.model_digest(tmp_path / "m")
    (tmp_path / "m" / "variables" / "v").rename(tmp_path / "m" / "variables" / "w")  # same bytes, other name
    assert pipeline.model_digest(tmp_path / "m") != first
    assert pipeline.model_name("builtin:mobilenet") == "mobilenet" and pipeline.model_name("a/b/net.tflite") == "net"


@pytest.mark.parametrize(
    "args, names",
    [
        (["embed", "m.onnx", "--platform", "android", "-o", "b"], "android-arm64 or android-armv7 or android-x86_64"),
        (["embed", "m.onnx", "--platform", "arm64-v8a", "-o", "b"], "android-arm64"),
        (["rpc-app", "--platform", "ios"], "ios-arm64"),
        (["app", "--model", "m.onnx", "--platform", "ios"], "ios-arm64"),
        (["runtime", "build", "--platform", "aarch64"], "linux-aarch64"),
    ],
)
def test_one_platform_vocabulary(tvmgen_inprocess, tmp_path, args, names):
    r = tvmgen_inprocess(*args, cwd=tmp_path)
    assert r.returncode == 2 and f"is not a platform name: use --platform {names}" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()
