"""--input parsing, input resolution, and the artifact manifest's round trip and atomic writing."""

from __future__ import annotations

import json

import pytest

from tvmgen.core import artifact
from tvmgen.core.errors import InputError
from tvmgen.core.model import TensorSpec, random_inputs
from tvmgen.frontends.base import InputOverride, resolve_inputs


@pytest.mark.parametrize(
    "text,expected",
    [
        ("input:1x224x224x3:float32", ("input", (1, 224, 224, 3), "float32")),
        ("input:1x3x224x224", ("input", (1, 3, 224, 224), None)),
        ("input:0:1x224x224x3:uint8", ("input:0", (1, 224, 224, 3), "uint8")),  # TF tensor names hold ':'
        ("ids:int64", ("ids", None, "int64")),
        ("scale:scalar:float32", ("scale", (), "float32")),
    ],
)
def test_parse_input_flag(text, expected):
    o = InputOverride.parse(text)
    assert (o.name, o.shape, o.dtype) == expected


@pytest.mark.parametrize("text", ["input", "input:1xx3", ":1x3", "input:1x0x3", "input:1x3:float99"])
def test_parse_input_flag_rejects(text):
    with pytest.raises(InputError):
        InputOverride.parse(text)


def test_resolve_inputs_fills_dynamic_dims_and_dtype():
    raw = [("x", [None, 3, 224, 224], "float32"), ("mask", ["batch", 224], "bool")]
    specs = resolve_inputs(raw, [InputOverride.parse("x:2x3x224x224:float16"), InputOverride.parse("mask:2x224")])
    assert specs == [TensorSpec("x", (2, 3, 224, 224), "float16"), TensorSpec("mask", (2, 224), "bool")]


def test_resolve_inputs_names_the_input_and_the_flag():
    with pytest.raises(InputError) as e:
        resolve_inputs([("x", [None, 3], "float32")], [])
    assert "'x'" in e.value.message and "--input x:Nx3:float32" in e.value.hint


def test_random_inputs_are_seeded_and_typed():
    specs = [TensorSpec("a", (2, 3), "float32"), TensorSpec("b", (4,), "int64"), TensorSpec("c", (2,), "bool")]
    one, two = random_inputs(specs, 5), random_inputs(specs, 5)
    assert all((one[k] == two[k]).all() for k in one)
    assert [str(one[k].dtype) for k in "abc"] == ["float32", "int64", "bool"]
    assert (random_inputs(specs, 6)["a"] != one["a"]).any()


def make_manifest():
    return artifact.Manifest(
        model={"name": "m", "format": "onnx", "source": "m.onnx", "sha256": "0" * 64},
        platform="host",
        abi="x86_64",
        arch="x86_64",
        device="cpu",
        target={"kind": "llvm"},
        export={"kind": "shared", "library": "model.so", "system_lib": False, "finish_command": None},
        inputs=[TensorSpec("x", (1, 3), "float32")],
        outputs=[TensorSpec("y", (1, 2), "float32")],
        vm={"entry": "main", "devices": [], "num_inputs": 1},
    )


def test_manifest_round_trip_and_hashes(tmp_path):
    (tmp_path / "model.so").write_bytes(b"library")
    m = make_manifest()
    artifact.write_manifest(tmp_path, m)
    loaded = artifact.load(tmp_path)
    assert loaded.to_json() == json.loads((tmp_path / "manifest.json").read_text())
    assert loaded.files["model.so"]["bytes"] == 7
    (tmp_path / "model.so").write_bytes(b"changed")
    with pytest.raises(InputError, match="does not match the sha256"):
        artifact.load(tmp_path)
    (tmp_path / "model.so").unlink()
    with pytest.raises(InputError, match="missing"):
        artifact.load(tmp_path)


def test_manifest_from_a_newer_schema_is_refused(tmp_path):
    d = make_manifest().to_json()
    d["schema_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(d))
    with pytest.raises(InputError, match="schema version 99"):
        artifact.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="corrupt"):
        artifact.load(tmp_path)


def test_staging_is_atomic(tmp_path):
    out = tmp_path / "art"
    with pytest.raises(RuntimeError):
        with artifact.staging(out, force=False) as tmp:
            (tmp / "model.so").write_bytes(b"half")
            raise RuntimeError("build failed")
    assert list(tmp_path.iterdir()) == []  # nothing left: no output, no temporary directory
    with artifact.staging(out, force=False) as tmp:
        (tmp / "a").write_text("1")
    assert (out / "a").read_text() == "1"
    with pytest.raises(InputError, match="already exists"):
        with artifact.staging(out, force=False):
            pass
    with pytest.raises(RuntimeError):  # a failed --force rebuild keeps the old artifact
        with artifact.staging(out, force=True) as tmp:
            raise RuntimeError("boom")
    assert (out / "a").read_text() == "1"
    with artifact.staging(out, force=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"] and (out / "b").exists() and not (out / "a").exists()
