"""NNAPI partition reports: placement, feature levels, the cost strategy, and the build-option error."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from tvmgen import frontends
from tvmgen.compiler import nnapi


def report(path, **kw):
    imported = frontends.load(path, [])
    return nnapi.partition(imported.mod, imported.params, len(imported.inputs), **kw)[1]


@pytest.fixture(scope="module")
def builtin(tmp_path_factory):
    from tvmgen.frontends.builtin import materialize

    return materialize("builtin:mobilenet", tmp_path_factory.mktemp("nn"))


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def w(name, *shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32), name)


def test_convnet_placement_and_feature_levels(builtin):
    full = report(builtin)
    assert full.partitions == 3 and full.transitions == 6
    nn = full.counts("nnapi")
    assert nn["conv2d"] == 21 and nn["maximum"] == 21 and nn["minimum"] == 21  # relu6 joins the convs
    assert full.counts("tvm") == {"reshape": 4}
    assert full.flops_share()["nnapi"] > 0.99
    # feature level 2 has no maximum/minimum: relu6 splits every conv into its own partition
    lvl2 = report(builtin, feature_level=2)
    assert lvl2.partitions == 23 and lvl2.transitions == 46  # 21 convs, the mean, add + softmax
    why = {b["op"]: b["why"] for b in lvl2.blockers()}
    assert why["maximum"] == "needs NNAPI feature level 3 (asked for 2)"
    assert "matmul" in lvl2.counts("tvm")  # batch_matmul needs feature level 6


def test_unsupported_op_in_the_middle(tmp_path):
    r = report(conv_erf_conv(tmp_path))
    assert r.partitions == 2 and r.counts("nnapi") == {"conv2d": 2}  # the pattern is conv2d + bias add
    assert r.counts("tvm") == {"erf": 1}
    assert r.blockers() == [{"op": "erf", "count": 1, "why": "NNAPI has no pattern for it in TVM 0.27"}]
    # without a bias the convolution matches no pattern, and the report says why
    bare = onnx_model(
        [helper.make_node("Conv", ["x", "W1"], ["y"], pads=[1, 1, 1, 1])],
        [vi("x", [1, 4, 16, 16])],
        [vi("y", [1, 4, 16, 16])],
        [w("W1", 4, 4, 3, 3)],
    )
    r = report(save_onnx(bare, tmp_path / "bare.onnx"))
    assert r.partitions == 0 and "needs the convolution followed by a bias add" in r.ops[0].blocked_because


def test_matmul_model_needs_feature_level_6(tmp_path):
    m = onnx_model(
        [helper.make_node("MatMul", ["a", "B"], ["y"])], [vi("a", [8, 64])], [vi("y", [8, 32])], [w("B", 64, 32)]
    )
    path = save_onnx(m, tmp_path / "mm.onnx")
    r6 = report(path, feature_level=6)
    assert r6.partitions == 1 and r6.counts("nnapi") == {"batch_matmul": 1}  # 2-D made batched by preparation
    r5 = report(path, feature_level=5)
    assert r5.partitions == 0 and "matmul" in r5.counts("tvm")


def test_cost_strategy_merges_away_a_tiny_partition(tmp_path, builtin):
    nodes = [
        helper.make_node("Erf", ["x"], ["a"]),
        helper.make_node("Add", ["a", "c"], ["b"]),
        helper.make_node("Erf", ["b"], ["y"]),
    ]
    m = onnx_model(nodes, [vi("x", [1, 8])], [vi("y", [1, 8])], [w("c", 1, 8)])
    path = save_onnx(m, tmp_path / "tiny.onnx")
    patterns = report(path)
    assert patterns.partitions == 1 and patterns.counts("nnapi") == {"add": 1}
    cost = report(path, strategy="cost")
    assert cost.partitions == 0 and cost.transitions == 0
    assert "transitions cost more" in next(o.blocked_because for o in cost.ops if "add" in (o.composites or []))
    # on the convnet the cost strategy keeps the heavy part on NNAPI, in one piece
    big = report(builtin, strategy="cost")
    assert big.partitions == 1 and big.flops_share()["nnapi"] > 0.95


def test_cost_table_override(tmp_path, builtin):
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"transition_ms": 1000.0}))  # transitions far too dear: nothing moves
    r = report(builtin, strategy="cost", costs=nnapi.load_costs(table))
    assert r.partitions == 0
    table.write_text(json.dumps({"bogus": 1}))
    with pytest.raises(Exception, match="unknown key 'bogus'"):
        nnapi.load_costs(table)


def test_partition_cli_and_compile_error(tvmgen, tmp_path):
    r = tvmgen("partition", "builtin:mobilenet", "--nnapi", "--feature-level", "2", "--json", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    assert "partitions: 23" in r.stdout and "needs NNAPI feature level 3" in r.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["partitions"] == 23 and data["transitions_per_inference"] == 46
    r = tvmgen("compile", "builtin:mobilenet", "--platform", "android-arm64", "--device", "nnapi", "-o", tmp_path / "o")
    assert r.returncode == 4
    assert "USE_NNAPI_CODEGEN=ON" in r.stderr and "USE_NNAPI_RUNTIME=ON" in r.stderr and "fix:" in r.stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ compile / app --device nnapi


def conv_erf_conv(tmp_path):
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Erf", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "W2", "B2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    m = onnx_model(
        nodes,
        [vi("x", [1, 4, 16, 16])],
        [vi("y", [1, 4, 16, 16])],
        [w("W1", 4, 4, 3, 3), w("B1", 4), w("W2", 4, 4, 3, 3), w("B2", 4)],
    )
    return save_onnx(m, tmp_path / "cec.onnx")


def codegen_functions(mod) -> list[str]:
    return sorted(g.name_hint for g, f in mod.functions.items() if f.attrs is not None and "Codegen" in f.attrs)


def test_placement_the_cost_strategy_rejects_goes_back_to_tvm(tmp_path):
    """What `compile --device nnapi --strategy cost` hands the code generator: NNAPI calls the cost
    strategy keeps on TVM become ordinary Relax functions, and the module still computes the model."""
    import dataclasses

    import tvm
    from tvm import relax

    imported = frontends.load(conv_erf_conv(tmp_path), [])
    partitioned, patterns = nnapi.partition(imported.mod, imported.params, len(imported.inputs))
    assert patterns.partitions == 2 and len(codegen_functions(partitioned)) == 1  # both calls share one function
    # the first call kept on TVM, the second on NNAPI: the shared function is split in two
    mixed = dataclasses.replace(patterns, ops=[dataclasses.replace(o) for o in patterns.ops])
    next(o for o in mixed.ops if o.side == "nnapi").side = "tvm"
    mod = nnapi.keep_on_tvm(partitioned, mixed)
    assert len(codegen_functions(mod)) == 1 and len(nnapi._nnapi_calls(mod)) == 1
    assert any(g.name_hint.endswith("_tvm") for g in mod.get_global_vars())
    # every call kept on TVM (transitions far too dear): no NNAPI function is left, and it builds and runs
    costs = nnapi.load_costs(None)
    costs["transition_ms"] = 1000.0
    _, dear = nnapi.partition(imported.mod, imported.params, len(imported.inputs), strategy="cost", costs=costs)
    assert dear.partitions == 0
    mod = nnapi.keep_on_tvm(partitioned, dear)
    assert codegen_functions(mod) == []
    ex = relax.build(mod, tvm.target.Target({"kind": "llvm"}))
    x = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, imported.reference({"x": x})[0], atol=1e-4, rtol=1e-4)


def test_this_tvm_has_no_nnapi_codegen_and_app_stops_cleanly(tvmgen, tmp_path):
    """The PyPI TVM (what runs here): detection says no, and `app --device nnapi` stops before
    writing anything, after showing the placement."""
    import tvm

    assert not nnapi.has_codegen()
    assert tvm.get_global_func(nnapi.CODEGEN, allow_missing=True) is None
    r = tvmgen(
        "app", "--model", "builtin:mobilenet", "--device", "nnapi", "--strategy", "cost", "-o", tmp_path / "proj"
    )
    assert r.returncode == 4, r.stderr
    assert "cost strategy" in r.stdout + r.stderr and "USE_NNAPI_CODEGEN=ON" in r.stderr
    assert not (tmp_path / "proj").exists()
    nnapi_build = ["--platform", "android-arm64", "--device", "nnapi"]
    r = tvmgen("compile", "builtin:mobilenet", *nnapi_build, "--separate-params", "-o", tmp_path / "o")
    assert r.returncode == 2 and "--separate-params does not apply" in r.stderr


def test_compile_with_an_nnapi_tvm_build(tvmgen, tmp_path):
    """Needs a TVM built with USE_NNAPI_CODEGEN=ON: TVMGEN_TEST_NNAPI_TVM=<its source tree>, with the
    libraries in <tree>/build (or TVM_LIBRARY_PATH)."""
    import os
    import sys
    from pathlib import Path

    tree = os.environ.get("TVMGEN_TEST_NNAPI_TVM")
    if not tree:
        reason = "TVMGEN_TEST_NNAPI_TVM is not set (a TVM source tree built with USE_NNAPI_CODEGEN=ON)"
        print(f"skipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    env = {
        "PYTHONPATH": os.pathsep.join([str(Path(tree) / "python"), os.environ.get("PYTHONPATH", "")]),
        "TVM_LIBRARY_PATH": os.environ.get("TVM_LIBRARY_PATH", str(Path(tree) / "build")),
    }
    for strategy in ("patterns", "cost"):
        out = tmp_path / strategy
        r = tvmgen(
            "compile",
            "builtin:mobilenet",
            "--platform",
            "android-arm64",
            "--device",
            "nnapi",
            "--strategy",
            strategy,
            "--objects-only",
            "-o",
            out,
            extra_env=env,
        )
        assert r.returncode == 0, r.stderr
        m = json.loads((out / "manifest.json").read_text())
        assert m["device"] == "nnapi" and m["target"]["mtriple"] == "aarch64-linux-android"
        assert [d["dl_device_type"] for d in m["vm"]["devices"]] == [1]  # NNAPI parts are called from the CPU
        needs = m["runtime_needs"]["nnapi"]
        assert needs["loader"] == "ffi.Module.load_from_bytes.nnapi" and needs["min_android_api"] == 27
        assert needs["strategy"] == strategy and needs["partitions"] >= 1


# ------------------------------------------------------------------ measured TVM-side costs


def test_measured_rates_replace_the_tvm_column(tmp_path):
    imported = frontends.load(conv_erf_conv(tmp_path), [])
    partitioned, patterns = nnapi.partition(imported.mod, imported.params, len(imported.inputs))
    assert sorted(nnapi.op_instances(partitioned)) == ["add", "conv2d"]  # what a device would time
    table = nnapi.load_costs(None)
    assert nnapi.cost_strategy(patterns, table).partitions == 0  # the table: TVM is fast enough here

    def rows(gflops):
        return [{"op": k, "gflops": gflops, "source": "measured"} for k in ("conv2d", "add")]

    slow = nnapi.with_measured(table, rows(0.01))  # a device where TVM is this slow: NNAPI pays
    assert slow["tvm_gflops"]["conv2d"] == 0.01 and slow["nnapi_gflops"] == table["nnapi_gflops"]
    assert nnapi.cost_strategy(patterns, slow).partitions == 2
    assert nnapi.cost_strategy(patterns, nnapi.with_measured(table, rows(1e6))).partitions == 0


@pytest.fixture(scope="module")
def host_device(tmp_path_factory):
    """A tracker and a proxy, each with the native host device server, on 127.0.0.1 (as
    tests/remote/test_rpc.py starts them)."""
    from conftest import require_tool
    from helpers import device_behind, environment

    require_tool("cmake")
    state = tmp_path_factory.mktemp("nnapi-rpc")
    with (
        environment(TVMGEN_STATE_DIR=state),
        device_behind("tracker", "host", "nnapi-costs", state / "w1", 20000, 20060) as (tracker, _),
        device_behind("proxy", "host", "nnapi-costs-p", state / "w2", 20060, 20120) as (proxy, _),
    ):
        yield {"tracker": (tracker.address, "nnapi-costs"), "proxy": (proxy.address, "nnapi-costs-p")}


@pytest.mark.parametrize("via", ["tracker", "proxy"])
def test_partition_measures_tvm_costs_over_rpc(tvmgen, host_device, via, tmp_path):
    address, key = host_device[via]
    r = tvmgen(
        "partition",
        conv_erf_conv(tmp_path),
        "--nnapi",
        "--strategy",
        "cost",
        "--measure",
        "--key",
        key,
        f"--{via}",
        address,
        "--json",
        tmp_path / "r.json",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    rows = {c["op"]: c for c in data["tvm_costs"]}
    assert sorted(rows) == ["add", "conv2d"] and data["nnapi_costs"] == "table"
    for c in rows.values():
        assert c["source"] == "measured" and c["median_ms"] > 0 and c["gflops"] > 0 and c["flops"] > 0
        assert c["device"] == "host (x86_64)" and c["gflops"] != c["table_gflops"]
    assert "TVM-side costs measured on host (x86_64)" in r.stdout
    assert "NNAPI-side and transition costs stay from the cost table" in r.stdout
    assert "conv2d" in r.stdout and "measured" in r.stdout and "cost strategy" in r.stdout
    r = tvmgen("partition", conv_erf_conv(tmp_path), "--nnapi", "--measure", "--key", key, f"--{via}", address)
    assert r.returncode == 2 and "pass --strategy cost" in r.stderr


def test_a_runtime_without_nnapi_refuses_an_nnapi_artifact(tmp_path):
    """What the app's CPU fallback catches on a phone whose TVM runtime lacks NNAPI: the runtime asks
    for TVM's NNAPI loader (libtvm_runtime_extra) and names the build option. The host runtime (the
    wheel's libtvm_runtime_extra, built without NNAPI) stands in for such a phone's; the artifact is a
    CPU one whose manifest says nnapi, since no NNAPI artifact can be made with this TVM."""
    import subprocess

    from conftest import require_tool, single_op_models
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.runtime import runtime_build

    require_tool("cmake")
    prefix = runtime_build.cached_build("host")
    imported = frontends.load(save_onnx(single_op_models()["softmax"], tmp_path / "m.onnx"), [])
    art = tmp_path / "art"
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), art, True, {"name": "m"})
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["device"] = "nnapi"
    (art / "manifest.json").write_text(json.dumps(manifest))
    r = subprocess.run([str(prefix / "bin" / "tvmgen-run"), str(art)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "no nnapi support (ffi.Module.load_from_bytes.nnapi is not registered" in r.stderr, r.stderr
    assert "libtvm_runtime_extra.so" in r.stderr and "USE_NNAPI_RUNTIME=ON" in r.stderr  # looked for, and the fix


# ----------------------------------------------------------------------------- FLOP counts


def conv_macs(report_) -> dict[str, float]:
    """Multiply-adds per convolution / matmul kind over the whole report (FLOPs / 2)."""
    macs: dict[str, float] = {}
    for op in report_.ops:
        for kind, flops in (op.kind_flops or {op.name: op.flops}).items():
            if kind.startswith(("conv", "matmul", "dense")):
                macs[kind] = macs.get(kind, 0.0) + flops / 2
    return macs


def test_flops_of_each_convolution_form_match_analytic_counts(tmp_path):
    """ONNX layouts (OIHW, IOHW): groups, depthwise, stride, dilation, a transposed convolution, matmul."""
    conv = helper.make_node
    cases = {  # name: (nodes, input shape, output shape, weights, multiply-adds by hand)
        "grouped": (
            [conv("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], group=4)],
            [1, 16, 10, 10],
            [1, 32, 10, 10],
            [w("W", 32, 4, 3, 3)],
            10 * 10 * 32 * (4 * 9),
        ),
        "depthwise_5x5": (
            [conv("Conv", ["x", "W"], ["y"], pads=[2, 2, 2, 2], group=24)],
            [1, 24, 12, 12],
            [1, 24, 12, 12],
            [w("W", 24, 1, 5, 5)],
            12 * 12 * 24 * 25,
        ),
        "strided_dilated": (
            [conv("Conv", ["x", "W"], ["y"], strides=[2, 2], dilations=[2, 2])],
            [1, 8, 21, 21],
            [1, 6, 9, 9],
            [w("W", 6, 8, 3, 3)],
            9 * 9 * 6 * (8 * 9),
        ),
        "transposed": (
            [conv("ConvTranspose", ["x", "W"], ["y"], strides=[2, 2])],
            [1, 8, 6, 6],
            [1, 4, 13, 13],
            [w("W", 8, 4, 3, 3)],
            6 * 6 * 8 * (4 * 9),
        ),  # each input to 4x3x3 outputs
        "matmul": ([conv("MatMul", ["x", "W"], ["y"])], [3, 40], [3, 7], [w("W", 40, 7)], 3 * 7 * 40),
    }
    for name, (nodes, x, y, inits, macs) in cases.items():
        path = save_onnx(onnx_model(nodes, [vi("x", x)], [vi("y", y)], inits), tmp_path / f"{name}.onnx")
        assert sum(conv_macs(report(path)).values()) == macs, name


def test_flops_of_a_tflite_depthwise_block_and_mobilenetv2(tmp_path):
    """TFLite's NHWC layouts (HWIO, depthwise HWOI): the block the palm detector was counted 4.93
    GFLOPs for is 20.7 MFLOPs, and MobileNetV2 1.0 at 224 is the paper's 300 M multiply-adds."""
    import tensorflow as tf

    def tflite(model, name):
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
        return path

    tf.random.set_seed(0)
    block = tf.keras.Sequential(
        [
            tf.keras.Input((12, 12, 256), batch_size=1),
            tf.keras.layers.DepthwiseConv2D(5, padding="same"),
            tf.keras.layers.Conv2D(256, 1),
        ]
    )
    macs = conv_macs(report(tflite(block, "block")))
    assert sum(macs.values()) == 12 * 12 * 256 * 25 + 12 * 12 * 256 * 256, macs  # 10.4 M: depthwise + 1x1

    base = tf.keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))  # built in code
    image = tf.keras.Input((224, 224, 3), batch_size=1)
    mobilenet = tf.keras.Model(image, base(image))
    r = report(tflite(mobilenet, "mobilenetv2"))
    total = sum(conv_macs(r).values())
    assert 295e6 <= total <= 305e6, conv_macs(r)  # 300.8 M counted by hand from the architecture
    assert 590 <= r.flops_share()["total_mflops"] <= 640, r.flops_share()  # plus adds, activations, pooling


def test_nnapi_commands_say_it_is_deprecated(tvmgen_inprocess, tmp_path):
    """NNAPI is deprecated since Android 15: compile and app with --device nnapi, and partition, say so before
    anything else (here each then stops on an argument error, so no TVM work runs) and point to the GPU path;
    a command for another device says nothing of it."""
    notice = "NNAPI is deprecated since Android 15 (developer.android.com/ndk/guides/neuralnetworks/migration-guide)"
    nnapi_fp16 = ["--platform", "android-arm64", "--device", "nnapi", "--precision", "fp16"]
    runs = {
        "compile": tvmgen_inprocess("compile", "builtin:mobilenet", *nnapi_fp16, "-o", tmp_path / "c"),
        "app": tvmgen_inprocess("app", "--model", "builtin:mobilenet", *nnapi_fp16, "-o", tmp_path / "a"),
        "partition": tvmgen_inprocess("partition", "builtin:mobilenet", "--nnapi", "--measure"),
    }
    for command, r in runs.items():
        assert r.returncode == 2, (command, r.output)
        assert notice in r.stderr and "For the phone's GPU use --device opencl" in r.stderr, (command, r.stderr)
        assert r.stderr.index(notice) < r.stderr.index("error"), (command, r.stderr)  # said first
    r = tvmgen_inprocess("app", "--model", "builtin:mobilenet", "--device", "opencl", "--report", tmp_path / "r.html")
    assert r.returncode == 2 and "--report writes" in r.stderr and "NNAPI" not in r.output, r.output
