"""LSTM and GRU as one kernel per direction (compiler/recurrent.py), on the CPU and on OpenCL (PoCL).

The kernels are checked against NumPy statements of ONNX's LSTM / GRU equations in float64, every
variant (reverse, batch > 1, GRU's linear_before_reset 0 and 1); then whole ONNX models, where
tvmgen picks the fused kernel or the unrolled steps, against onnxruntime or ONNX's own evaluator.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
import pytest

from conftest import onnx_model, save_onnx, unavailable
from helpers import assert_close, python_c

CASES = [
    ("lstm", 0, False, 9, 1, 6, 5),
    ("lstm", 0, True, 7, 2, 5, 64),
    ("gru", 0, False, 8, 1, 6, 7),
    ("gru", 1, True, 6, 2, 4, 85),
    ("gru", 0, True, 5, 3, 4, 5),
    ("gru", 1, False, 9, 1, 3, 16),
    ("gru", 0, False, 4, 1, 20, 5),  # more inputs than threads (staged: the input row in two passes)
]

# Compiles each case's kernel for one device and compares it with NumPy; prints one JSON line per case.
KERNEL_CHECK = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tvm
    from tvmgen.compiler import recurrent
    from tvmgen.frontends.recurrent_calls import spec
    from tvmgen.runtime.runner import HostModel

    gpu = sys.argv[1] in ("opencl", "opencl-staged")
    staged = sys.argv[1] == "opencl-staged"  # the Vulkan forms (LSTM and GRU), run here through OpenCL
    if gpu:
        HostModel.load_opencl_backend()
        info = json.loads(tvm.get_global_func("tvmgen.opencl.info")())
        if not info["available"]:
            print(json.dumps({"unavailable": info.get("error", "?")}))
            sys.exit(0)
    sig = lambda x: 1 / (1 + np.exp(-x))

    def reference(kind, lbr, reverse, X, W, R, wb, rb, h, c):
        H = R.shape[1]
        ys = [None] * len(X)
        for t in (range(len(X) - 1, -1, -1) if reverse else range(len(X))):
            if kind == "lstm":
                g = X[t] @ W.T + h @ R.T + wb + rb
                c = sig(g[:, 2 * H:3 * H]) * c + sig(g[:, :H]) * np.tanh(g[:, 3 * H:])
                h = sig(g[:, H:2 * H]) * np.tanh(c)
            else:
                gx = X[t] @ W.T + wb
                z = sig(gx[:, :H] + h @ R[:H].T + rb[:H])
                r = sig(gx[:, H:2 * H] + h @ R[H:2 * H].T + rb[H:2 * H])
                rec = r * (h @ R[2 * H:].T + rb[2 * H:]) if lbr else (r * h) @ R[2 * H:].T + rb[2 * H:]
                n = np.tanh(gx[:, 2 * H:] + rec)
                h = (1 - z) * n + z * h
            ys[t] = h
        return np.stack(ys), c

    rng = np.random.default_rng(0)
    for kind, lbr, reverse, S, B, I, H in json.loads(sys.argv[2]):
        sp = spec(kind, S, B, I, H, reverse, lbr)
        target = (tvm.target.Target({"kind": "opencl"}, host={"kind": "llvm"}) if gpu
                  else tvm.target.Target({"kind": "llvm"}))
        func = recurrent.kernel(sp, gpu=gpu, staged=staged).with_attr("global_symbol", "main")
        lib = tvm.compile(tvm.IRModule({"main": func}), target=target)
        path = sys.argv[3] + f"/{kind}{lbr}{int(reverse)}{H}.so"
        lib.export_library(path)
        run = tvm.runtime.load_module(path)["main"]
        G = (4 if kind == "lstm" else 3) * H
        f32 = lambda *shape, s=1.0: (rng.standard_normal(shape) * s).astype("float32")
        X, W, R, wb, rb, h0, c0 = f32(S, B, I), f32(G, I, s=0.3), f32(G, H, s=0.3), f32(G, s=0.1), f32(G, s=0.1), \\
            f32(B, H), f32(B, H)
        dev = tvm.opencl() if gpu else tvm.cpu()
        t = lambda a: tvm.runtime.tensor(np.ascontiguousarray(a), dev)
        Y, C = t(np.zeros((S, B, H), "float32")), t(np.zeros((B, H), "float32"))
        if kind == "lstm":
            run(t(X), t(W.T), t(R.T), t(wb + rb), t(h0), t(c0), Y, C)
        else:
            run(t(X), t(W.T), t(R.T), t(wb), t(rb), t(h0), Y)
        ys, c = reference(kind, lbr, reverse, X, W, R, wb, rb, h0.astype(float), c0.astype(float))
        err = float(np.abs(Y.numpy() - ys).max())
        if kind == "lstm":
            err = max(err, float(np.abs(C.numpy() - c).max()))
        print(json.dumps({"case": [kind, lbr, reverse, S, B, I, H], "max_error": err,
                          "moved": float(np.abs(ys).max())}))
""")


@pytest.mark.parametrize("device", ["cpu", "opencl", "opencl-staged"])
def test_kernels_match_numpy(device, tmp_path):
    proc = subprocess.run(
        [*python_c(KERNEL_CHECK), device, json.dumps(CASES), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if rows and "unavailable" in rows[0]:
        unavailable(f"no OpenCL device: {rows[0]['unavailable']}")
    assert [r["case"] for r in rows] == [list(c) for c in CASES]
    for r in rows:
        assert r["moved"] > 0.1, r  # the states are not all zero: the comparison means something
        assert r["max_error"] < 2e-5, r  # float32 with a rational tanh (3e-7) against float64


def test_staged_lstm_keeps_its_weights_in_registers():
    """The GPU LSTM for Vulkan (``staged``): each thread's columns of Wt / Rt and its cell state in local
    (register) arrays read by unrolled loops, the step's input row in shared memory; NVIDIA's Vulkan
    compiler left the plain kernel's global loads serialised (2.3x OpenCL's time: docs/vulkan.md). Where
    the columns would not fit registers, or a thread has more than one gate row, the plain kernel."""
    from tvmgen.compiler import recurrent
    from tvmgen.frontends.recurrent_calls import spec

    def script(inputs, hidden, staged):
        sp = spec("lstm", 50, 1, inputs, hidden, False)
        return recurrent.kernel(sp, gpu=True, staged=staged).script()

    staged, plain = script(64, 48, True), script(64, 48, False)
    assert "wx = T.alloc_local((64,))" in staged and "wr = T.alloc_local((48,))" in staged, staged
    assert "for k in T.unroll(64):" in staged and "xs = T.alloc_shared((64,))" in staged
    assert "T.unroll" not in plain and "wx" not in plain
    assert "wx" not in script(100, 48, True)  # 148 floats a thread: the plain kernel
    assert "wx" not in script(16, 80, True)  # 320 gate rows, 256 threads: the plain kernel


@pytest.mark.parametrize("lbr", [0, 1])
def test_staged_gru_keeps_its_weights_in_registers(lbr):
    """The GPU GRU for Vulkan, staged as the LSTM (its kernel 59 us against OpenCL's 50-54 us on an H100
    before): each thread's columns of Wt / Rt in local arrays read by unrolled loops, the step's input row
    in shared memory, two barriers a step; the plain kernel where they would not fit or a thread would
    have more than one gate row. The NumPy match is test_kernels_match_numpy's 'opencl-staged'."""
    from tvmgen.compiler import recurrent
    from tvmgen.frontends.recurrent_calls import spec

    def script(inputs, hidden, staged):
        sp = spec("gru", 50, 1, inputs, hidden, False, lbr)
        return recurrent.kernel(sp, gpu=True, staged=staged).script()

    staged, plain = script(64, 64, True), script(64, 64, False)  # the audio RNN's GRU
    assert "wx = T.alloc_local((64,))" in staged and "wr = T.alloc_local((64,))" in staged, staged
    assert "for k in T.unroll(64):" in staged and "xs = T.alloc_shared((64,))" in staged
    assert staged.count("T.tvm_storage_sync") == 3, staged  # one before the sequence, two a step
    assert "T.unroll" not in plain and "wx" not in plain
    assert "wx" not in script(100, 48, True)  # 148 floats a thread: the plain kernel
    assert "wx" not in script(16, 90, True)  # 270 gate rows, 256 threads: the plain kernel


def _vi(name, shape):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _lstm_model(hidden: int, peepholes: bool):
    """A bidirectional batch-first LSTM with initial states and every output."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(4)
    seq, batch, size = 6, 2, 5

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [w("W", 2, 4 * hidden, size), w("R", 2, 4 * hidden, hidden), w("B", 2, 8 * hidden)]
    names = ["x", "W", "R", "B", "", "h0", "c0"]
    if peepholes:
        inits.append(w("P", 2, 3 * hidden))
        names.append("P")
    node = helper.make_node("LSTM", names, ["y", "yh", "yc"], hidden_size=hidden, direction="bidirectional", layout=1)
    return onnx_model(
        [node],
        [_vi("x", [batch, seq, size]), _vi("h0", [batch, 2, hidden]), _vi("c0", [batch, 2, hidden])],
        [_vi(o, None) for o in ("y", "yh", "yc")],
        inits,
    )


@pytest.mark.parametrize(
    "hidden,peepholes,fused",
    [(8, False, True), (80, False, False), (8, True, False)],
    ids=["fused", "unrolled-over-256-gates", "unrolled-peepholes"],
)
def test_onnx_lstm_fused_or_unrolled(hidden, peepholes, fused, tmp_path):
    from onnx.reference import ReferenceEvaluator

    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.core import kernel_table
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    path = save_onnx(_lstm_model(hidden, peepholes), tmp_path / "lstm.onnx")
    imported = frontends.load(path, [])
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / "a", True, {"name": "lstm"})
    names = [k["name"] for k in kernel_table.load(tmp_path / "a")["kernels"]]
    assert (sum(n.startswith("tvmgen_lstm") for n in names) == 2) == fused, names  # one per direction
    inputs = random_inputs(imported.inputs, seed=3)
    actual = HostModel(tmp_path / "a").run(inputs)
    expected = ReferenceEvaluator(str(path)).run(None, inputs)  # onnxruntime has no batch-first LSTM
    assert len(actual) == 3
    assert_close(actual, expected, atol=1e-5, rtol=1e-4)


# Runs a compiled OpenCL artifact (argv[2]) on PoCL and onnxruntime on its model (argv[1]); prints the
# largest difference, the outputs' scale and the fused recurrent kernels.
OPENCL_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np, onnxruntime as ort, tvm
    from tvmgen.core import kernel_table
    from tvmgen.runtime.runner import HostModel
    from tvmgen.core.model import random_inputs
    HostModel.load_opencl_backend()
    info = json.loads(tvm.get_global_func("tvmgen.opencl.info")())
    if not info["available"]:
        print(json.dumps({"unavailable": info.get("error", "?")})); sys.exit(0)
    m = HostModel(sys.argv[2])
    x = random_inputs(m.manifest.inputs, seed=1)
    got = m.run(x)
    want = ort.InferenceSession(sys.argv[1]).run(None, x)
    names = [k["name"] for k in kernel_table.load(sys.argv[2])["kernels"]]
    print(json.dumps({"err": max(float(np.abs(g - w).max()) for g, w in zip(got, want)),
                      "scale": min(float(np.abs(w).max()) for w in want),
                      "fused": sorted(n for n in names if n.startswith("tvmgen_"))}))
""")


def test_pytorch_gru_lstm_on_opencl_match_onnxruntime(tvmgen, tmp_path):
    """The GPU variants inside a model: Conv1d, GRU (linear_before_reset 1), bidirectional LSTM."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(10, 16, 3, padding=1)
            self.gru = torch.nn.GRU(16, 20, batch_first=True)
            self.lstm = torch.nn.LSTM(20, 12, batch_first=True, bidirectional=True)

        def forward(self, x):
            return self.lstm(self.gru(torch.relu(self.conv(x)).transpose(1, 2))[0])[0]

    torch.manual_seed(0)
    path = tmp_path / "rnn.onnx"
    torch.onnx.export(Net().eval(), torch.randn(1, 10, 15), str(path), opset_version=17, dynamo=False)
    r = _compile_and_run_on_opencl(tvmgen, path, tmp_path)
    assert r["fused"] == ["tvmgen_gru", "tvmgen_lstm", "tvmgen_lstm1"]
    assert r["scale"] > 0.05 and r["err"] < 1e-5 + 1e-4 * r["scale"], r


def _compile_and_run_on_opencl(tvmgen, path, tmp_path, *flags) -> dict:
    """`tvmgen compile --device opencl` of the ONNX model ``path``, run on the machine's OpenCL device
    (PoCL) against onnxruntime by OPENCL_RUN: its verdict (fused kernels, output scale, error)."""
    art = tmp_path / "ocl"
    p = tvmgen("compile", path, "--device", "opencl", *flags, "-o", art, timeout=900)
    assert p.returncode == 0, p.output
    proc = subprocess.run([*python_c(OPENCL_RUN), str(path), str(art)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if "unavailable" in r:
        unavailable(f"no OpenCL device: {r['unavailable']}")
    return r


def test_unrolled_lstm_on_opencl_gets_short_kernel_names(tvmgen, tmp_path):
    """An LSTM with peepholes stays unrolled; fusion names a step's kernel after its 20-odd operators,
    which PoCL's kernel cache cannot put in a file name: tvmgen shortens such names (kernel_names.py)."""
    import re

    from tvmgen.compiler.gpu.kernel_names import KERNEL_NAME_LIMIT
    from tvmgen.core import kernel_table

    path = save_onnx(_lstm_model(8, peepholes=True), tmp_path / "lstm.onnx")
    art = tmp_path / "ocl"
    p = tvmgen("compile", path, "--device", "opencl", "-o", art, timeout=900)
    assert p.returncode == 0, p.output
    names = [k["name"] for k in kernel_table.load(art)["kernels"]]
    assert not [n for n in names if n.startswith("tvmgen_lstm")]
    assert max(map(len, names)) <= KERNEL_NAME_LIMIT, names
    assert [n for n in names if re.search(r"_[0-9a-f]{8}$", n) and len(n) == KERNEL_NAME_LIMIT], names  # shortened


# ------------------------------------------------------------------ every spelling of RNN, GRU and LSTM

SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 8
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}

# Each op's layers in one model (a TVM compile costs seconds): name -> the spelling's attributes and
# operands. h0: the initial states are model inputs; lens: constant sequence_lens ("input": a model
# input bound with --const; a 0 among them, and in "activations" every sequence shorter than the
# input); layout 1 reads the batch-first input "xb"; lbr: GRU's linear_before_reset. Every layer but
# "fused" is unrolled; "fused" (default activations, lengths all full) becomes the fused kernel for
# GRU and LSTM (RNN has none).
SPELLINGS = {
    "initial_state_lens": dict(attrs={"direction": "forward"}, h0=True, lens="input", lbr=1),
    "batch_first_reverse": dict(
        attrs={"direction": "reverse", "layout": 1},
        activations={"RNN": ["Softplus"], "GRU": ["Sigmoid", "ThresholdedRelu"], "LSTM": ["Sigmoid", "Relu", "Elu"]},
        alpha=[0.6],
        h0=True,
        lens=[2, SEQ, 0],
    ),
    "activations": dict(
        attrs={"direction": "bidirectional", "clip": 2.5},
        activations={
            "RNN": ["LeakyRelu", "ScaledTanh"],
            "GRU": ["HardSigmoid", "Softsign", "Sigmoid", "Elu"],
            "LSTM": ["HardSigmoid", "Affine", "Softsign", "Sigmoid", "ScaledTanh", "Tanh"],
        },
        alpha=[0.3, 0.7, 0.9],
        beta=[0.45, 0.8, 1.2],
        lens=[SEQ - 1, 1, 2],
        lbr=1,
    ),
    "fused": dict(attrs={"direction": "forward", "layout": 1}, h0=True, lens=[SEQ] * BATCH),
}
LENS_INPUT = "lens"
LENS_BOUND = "3,0,4"


def _spellings_model(op: str):
    """One model with a layer of ``op`` per spelling in SPELLINGS, all outputs its outputs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    G, H = GATES[op], HIDDEN
    nodes, inputs, outputs, inits = [], [_vi("x", [SEQ, BATCH, INPUT]), _vi("xb", [BATCH, SEQ, INPUT])], [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(value, name))
        return name

    for name, sp in SPELLINGS.items():
        attrs = dict(sp["attrs"], hidden_size=H)
        dirs = 2 if attrs["direction"] == "bidirectional" else 1
        batch_first = attrs.get("layout", 0) == 1
        w = lambda *shape, s=0.4: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
        args = ["xb" if batch_first else "x", const(f"{name}_W", w(dirs, G * H, INPUT))]
        args += [const(f"{name}_R", w(dirs, G * H, H)), const(f"{name}_B", w(dirs, 2 * G * H, s=0.2))]
        lens = sp.get("lens")
        if lens == "input":
            inputs.append(helper.make_tensor_value_info(LENS_INPUT, TensorProto.INT32, [BATCH]))
            args.append(LENS_INPUT)
        else:
            args.append(const(f"{name}_lens", np.array(lens, np.int32)) if lens else "")
        for state in ("h0", "c0") if op == "LSTM" else ("h0",):
            if sp.get("h0"):
                inputs.append(_vi(f"{name}_{state}", [BATCH, dirs, H] if batch_first else [dirs, BATCH, H]))
            args.append(f"{name}_{state}" if sp.get("h0") else "")
        if "activations" in sp:
            attrs.update(activations=sp["activations"][op], activation_alpha=sp["alpha"])
            if "beta" in sp:
                attrs["activation_beta"] = sp["beta"]
        if op == "GRU" and "lbr" in sp:
            attrs["linear_before_reset"] = sp["lbr"]
        outs = [f"{name}_{o}" for o in ("y", "yh", "yc")[: 3 if op == "LSTM" else 2]]
        nodes.append(helper.make_node(op, args, outs, name=name, **attrs))
        outputs += [_vi(o, None) for o in outs]
    return onnx_model(nodes, inputs, outputs, inits)


def _time_major(model):
    """``model`` with every layout=1 recurrent layer as a layout=0 one between Transposes: onnxruntime
    runs only layout 0."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for n in model.graph.node:
        attr = next((a for a in n.attribute if a.name == "layout"), None)
        if n.op_type not in GATES or attr is None or attr.i == 0:
            nodes.append(n)
            continue
        attr.i = 0
        ins, outs = list(n.input), list(n.output)
        for k in (0, 5, 6):  # X [B,S,I], initial_h / initial_c [B,D,H]
            if k < len(ins) and ins[k]:
                nodes.append(helper.make_node("Transpose", [ins[k]], [f"{n.name}_{k}_tm"], perm=[1, 0, 2]))
                ins[k] = f"{n.name}_{k}_tm"
        for k, o in enumerate(outs):  # Y [S,D,B,H] -> [B,S,D,H]; Y_h, Y_c [D,B,H] -> [B,D,H]
            nodes.append(helper.make_node("Transpose", [o + "_tm"], [o], perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2]))
        n.ClearField("input")
        n.input.extend(ins)
        n.ClearField("output")
        n.output.extend(o + "_tm" for o in outs)
        nodes.insert(len(nodes) - len(outs), n)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    return model


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_onnx_recurrent_spellings_match_onnxruntime(op, tmp_path):
    """Initial states as model inputs, sequence_lens that differ across the batch (one bound with
    --const, one 0: zeros in Y, Y_h and Y_c), batch-first, reverse, bidirectional, GRU's
    linear_before_reset 0 and 1, clip, and non-default activations with alpha / beta, different for
    each direction: each a layer of one model, against onnxruntime (layout 1 through Transposes).
    Unbound, the sequence_lens input is refused with the --const that fixes it."""
    import onnxruntime as ort

    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.core import kernel_table
    from tvmgen.core.errors import ModelError
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    model = _spellings_model(op)
    path = save_onnx(model, tmp_path / f"{op}.onnx")
    with pytest.raises(ModelError, match=f"'initial_state_lens'.*model input '{LENS_INPUT}'") as refused:
        frontends.load(path, [])
    assert f"--const {LENS_INPUT}=" in refused.value.hint
    imported = frontends.load(path, [], consts={LENS_INPUT: LENS_BOUND})
    compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "cpu"), tmp_path / "a", True, {"name": op})
    fused = [k["name"] for k in kernel_table.load(tmp_path / "a")["kernels"] if k["name"].startswith("tvmgen_")]
    assert len(fused) == (0 if op == "RNN" else 1), fused  # "fused" only
    inputs = random_inputs(imported.inputs, seed=3)
    actual = HostModel(tmp_path / "a").run(inputs)
    lens = np.array([int(v) for v in LENS_BOUND.split(",")], np.int32)
    expected = ort.InferenceSession(_time_major(model).SerializeToString()).run(None, {**inputs, LENS_INPUT: lens})
    assert [o.name for o in model.graph.output] == imported.output_names
    for name, a, e in zip(imported.output_names, actual, expected):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-4, err_msg=name)
        assert np.abs(e).max() > 0.05, name  # the outputs carry values: the comparison means something


@pytest.mark.parametrize("family", ["generic", "adreno", "mali", "desktop"])
def test_gru_with_activations_on_opencl_matches_onnxruntime(tvmgen, tmp_path, family):
    """A layer the fused kernels cannot take (HardSigmoid / Softsign with alpha, beta; sequence_lens that
    differ; an initial state as a model input), unrolled, built for every GPU family and run on PoCL."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(2)
    G, H = 3 * HIDDEN, HIDDEN

    def w(name, *shape, s=0.4):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    node = helper.make_node(
        "GRU",
        ["x", "W", "R", "B", "lens", "h0"],
        ["y", "yh"],
        hidden_size=H,
        linear_before_reset=1,
        activations=["HardSigmoid", "Softsign"],
        activation_alpha=[0.3],
        activation_beta=[0.45],
    )
    inits = [w("W", 1, G, INPUT), w("R", 1, G, H), w("B", 1, 2 * G, s=0.2)]
    inits.append(numpy_helper.from_array(np.array([SEQ, 2, 3], np.int32), "lens"))
    model = onnx_model(
        [node], [_vi("x", [SEQ, BATCH, INPUT]), _vi("h0", [1, BATCH, H])], [_vi("y", None), _vi("yh", None)], inits
    )
    path = save_onnx(model, tmp_path / "gru.onnx")
    r = _compile_and_run_on_opencl(tvmgen, path, tmp_path, "--gpu-family", family)
    assert r["fused"] == []  # unrolled
    assert r["scale"] > 0.05 and r["err"] < 1e-5 + 1e-4 * r["scale"], r
