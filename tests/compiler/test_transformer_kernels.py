"""Transformer kernels on CPUs (issue 37): erf and tanh in vectors (fast_math.vector_erf /
vector_tanh, accurate to float32 over the whole range), layer normalisation and softmax scheduled
by the rows rule (schedule_rules.schedule_rows), attention's reshape / transpose / split with
several outputs scheduled by the injective rule; for AVX-512, AVX2 and NEON targets, whatever
CPU runs the tests, and against onnxruntime here."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from helpers import CPU_TARGETS, assert_close, compile_and_run, prepared_and_scheduled


def test_vector_erf_and_tanh_match_scipy():
    """Max absolute error under 5e-7 over the float32 range (the tails and infinities included),
    relative error under 1e-6 near 0 (down to 1e-30: the products nearer FLT_MIN are denormal),
    odd, never beyond [-1, 1]."""
    import tvm
    from scipy.special import erf
    from tvm import te

    from tvmgen.compiler.cpu.fast_math import vector_erf, vector_tanh
    from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

    tiny = np.logspace(-30, 0, 4000)
    values = np.concatenate(
        [
            np.linspace(-12, 12, 1 << 16),
            np.random.default_rng(0).standard_normal(1 << 14) * 3,
            tiny,
            -tiny,
            [0.0, 3.9, 4.0, 4.1, 7.9, 8.0, 1e4, 1e30, 3.4e38, np.inf, -1e30, -np.inf],
        ]
    ).astype(np.float32)
    n = len(values)
    x = te.placeholder((n,), "float32", name="x")
    e = te.compute((n,), lambda i: vector_erf(x[i]), name="e")
    t = te.compute((n,), lambda i: vector_tanh(x[i]), name="t")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, e, t]))
    for name in ("e", "t"):
        _, inner = sch.split(sch.get_loops(sch.get_sblock(name))[0], [None, 8])
        sch.vectorize(inner)
    f = tvm.compile(sch.mod, target=make_target(PLATFORMS["host"].cpu_target()))
    out_e, out_t = (tvm.runtime.tensor(np.zeros(n, np.float32)) for _ in range(2))
    f(tvm.runtime.tensor(values), out_e, out_t)
    exact64 = values.astype(np.float64)
    for got, exact in ((out_e.numpy(), erf(exact64)), (out_t.numpy(), np.tanh(exact64))):
        assert np.all(np.isfinite(got)) and np.all(np.abs(got) <= 1)
        assert np.max(np.abs(got - exact)) < 5e-7
        small = (np.abs(values) > 0) & (np.abs(values) < 1)
        assert np.max(np.abs(got[small] / exact[small] - 1)) < 1e-6
        assert got[values == 0][0] == 0
        np.testing.assert_array_equal(got[-len(tiny) - 12 : -12], -got[-2 * len(tiny) - 12 : -len(tiny) - 12])


def transformer_block(tokens: int = 32, width: int = 64, heads: int = 4, classes: int = 1000):
    """LayerNorm -> fused q/k/v projection -> reshape / transpose / split into heads -> scaled
    softmax attention -> Erf GELU MLP -> tanh -> a classifier's softmax over rows of ``classes``."""
    rng = np.random.default_rng(5)
    head = width // heads

    def w(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def const(name, value, dtype=np.float32):
        return numpy_helper.from_array(np.array(value, dtype), name)

    node = helper.make_node
    nodes = [
        node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
        node("MatMul", ["n", "Wqkv"], ["qkv"]),
        node("Reshape", ["qkv", "s5"], ["qkv5"]),
        node("Transpose", ["qkv5"], ["qkvt"], perm=[2, 0, 3, 1, 4]),  # [3, 1, heads, tokens, head]
        node("Split", ["qkvt"], ["q5", "k5", "v5"], axis=0),
        *[node("Squeeze", [f"{a}5", "z0"], [a]) for a in "qkv"],
        node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        node("MatMul", ["q", "kt"], ["qk"]),
        node("Mul", ["qk", "scale"], ["qks"]),
        node("Softmax", ["qks"], ["p"], axis=-1),
        node("MatMul", ["p", "v"], ["o4"]),
        node("Transpose", ["o4"], ["o4t"], perm=[0, 2, 1, 3]),
        node("Reshape", ["o4t", "s3"], ["o"]),
        node("Add", ["o", "x"], ["r"]),
        node("LayerNormalization", ["r", "g2", "b2"], ["n2"], axis=-1, epsilon=1e-5),
        node("MatMul", ["n2", "W1"], ["h"]),
        node("Div", ["h", "sqrt2"], ["hs"]),
        node("Erf", ["hs"], ["he"]),
        node("Add", ["he", "one"], ["he1"]),
        node("Mul", ["h", "he1"], ["hg"]),
        node("Mul", ["hg", "half"], ["g1"]),
        node("MatMul", ["g1", "W2"], ["m"]),
        node("Tanh", ["m"], ["mt"]),
        node("MatMul", ["mt", "Wc"], ["logits"]),
        node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [
        w("g", width, scale=1.0),
        w("b", width),
        w("g2", width, scale=1.0),
        w("b2", width),
        w("Wqkv", width, 3 * width),
        const("s5", [1, tokens, 3, heads, head], np.int64),
        const("s3", [1, tokens, width], np.int64),
        const("z0", [0], np.int64),
        const("scale", 1 / np.sqrt(head)),
        w("W1", width, 4 * width),
        const("sqrt2", np.sqrt(2)),
        const("one", 1.0),
        const("half", 0.5),
        w("W2", 4 * width, width, scale=0.1),
        w("Wc", width, classes),
    ]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, classes])],
        inits,
    )


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_transformer_block_is_scheduled(cpu, tmp_path):
    """Every kernel gets a tvmgen schedule; no erf / tanh call is left (each would be a libm call
    per element); layer normalisation and both softmaxes run rows in parallel with vectors of
    partial sums, as many lanes as the target's vector holds and the row divides (rows of 64:
    16 AVX-512, 8 AVX2, 4 NEON; rows of 1000: 8, 8, 4)."""
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    path = save_onnx(transformer_block(), tmp_path / "block.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    scripts = {f: mod[f].script() for f in done}
    assert not [f for f, s in scripts.items() if re.search(r"T\.(erf|tanh)\(", s)], "erf / tanh left as calls"
    assert any("erf" in f for f in done) and any("tanh" in f for f in done), done
    rows = {f: s for f, s in scripts.items() if "layer_norm" in f or "softmax" in f}
    assert len(rows) == 3, done  # the two layer norms share a function
    for f, s in rows.items():
        assert "T.parallel" in s and "T.vectorized" in s, f
    partials = {
        f: sorted({int(d) for d in re.findall(r"_rf = T\.sblock_alloc_buffer\(\(.*T\.int64\((\d+)\)\)\)", s)})
        for f, s in rows.items()
    }
    (norm,) = [p for f, p in partials.items() if "layer_norm" in f]
    assert norm == [min(lanes, 16)], partials
    assert [min(lanes, 8)] in partials.values(), partials  # the classifier's rows of 1000
    splits = [f for f in done if "split" in f]
    assert splits and all("T.vectorized" in scripts[f] for f in splits), done


def test_transformer_block_matches_onnxruntime(tmp_path):
    path = save_onnx(transformer_block(), tmp_path / "block.onnx")
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-6, rtol=1e-4)


def _vectorised(fn, values: np.ndarray) -> np.ndarray:
    """``fn`` (a float32 TIR expression builder) on ``values``, in a loop vectorised by 8, on this CPU."""
    import tvm
    from tvm import te

    from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

    n = len(values)
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: fn(x[i]), name="y")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, y]))
    _, inner = sch.split(sch.get_loops(sch.get_sblock("y"))[0], [None, 8])
    sch.vectorize(inner)
    f = tvm.compile(sch.mod, target=make_target(PLATFORMS["host"].cpu_target()))
    out = tvm.runtime.tensor(np.zeros(n, np.float32))
    f(tvm.runtime.tensor(values), out)
    return out.numpy()


def test_vector_log_and_exp_match_numpy():
    """log: within 1 ulp of float64's over the normal floats (measured 0.73), log(0) = -inf, negatives
    and NaN NaN, log(inf) = inf, subnormals as the smallest normal; exp: relative error under 1e-7
    over [-87, 88], saturating beyond."""
    from tvmgen.compiler.cpu.fast_math import vector_exp, vector_log

    rng = np.random.default_rng(0)
    positive = np.concatenate(
        [
            np.logspace(-37.9, 38.5, 1 << 16),
            rng.uniform(0.5, 2, 1 << 14),
            1 + np.linspace(-1e-3, 1e-3, 4001),
            [1.0, 2.0, 0.5, np.sqrt(0.5), 3.4e38, 1.1754944e-38],
        ]
    ).astype(np.float32)
    special = np.array([0.0, -0.0, -1.0, -1e-30, np.inf, -np.inf, np.nan, 1e-40], np.float32)
    got = _vectorised(vector_log, np.concatenate([positive, special]))
    exact = np.log(positive.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[: len(positive)] - exact) / ulp) <= 1.0
    tail = got[len(positive) :]
    assert tail[:2].tolist() == [-np.inf, -np.inf] and np.isnan(tail[[2, 3, 5, 6]]).all() and tail[4] == np.inf
    assert tail[7] == pytest.approx(np.log(1.1754944e-38))

    x = np.concatenate([np.linspace(-87, 88, 1 << 16), rng.standard_normal(1 << 14) * 10]).astype(np.float32)
    e, exact = _vectorised(vector_exp, x), np.exp(x.astype(np.float64))
    assert np.max(np.abs(e - exact) / exact) < 1e-7
    big = _vectorised(vector_exp, np.array([-np.inf, -100, 100, np.inf] * 2, np.float32))
    assert np.all(big[[0, 1]] < 2e-38) and np.all(np.isfinite(big)) and np.all(big[[2, 3]] > 1e38)


def transcendental_epilogues():
    """Exp, Log, Softmax, Sigmoid and Pow (x^3 as GELU's tanh form has it, x^0.5, x^-0.5, x^2, x^-2,
    x^1.7) alone and after 1x1 convolutions."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 64])
    consts = {"p3": 3.0, "p05": 0.5, "pm05": -0.5, "p2": 2.0, "pm2": -2.0, "p17": 1.7}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    w = np.random.default_rng(1).standard_normal((64, 16, 1, 1)) * 0.1
    inits.append(numpy_helper.from_array(w.astype(np.float32), "w"))
    nodes = [helper.make_node("Abs", ["x"], ["ax"])]
    names = []

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        names.append(out)

    node("Exp", ["x"], "exp")
    node("Log", ["ax"], "log")
    node("Softmax", ["x"], "softmax", axis=-1)
    node("Sigmoid", ["x"], "sigmoid")
    for k in consts:
        node("Pow", ["ax", k], f"pow_{k}")
    nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]))
    node("Exp", ["c"], "conv_exp")
    nodes.append(helper.make_node("Conv", ["x", "w"], ["c2"], kernel_shape=[1, 1]))
    nodes.append(helper.make_node("Abs", ["c2"], ["c2a"]))
    node("Log", ["c2a"], "conv_log")
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]
    return onnx_model(nodes, [x], outs, inits)


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_transcendental_epilogues_leave_no_libm_call(cpu, tmp_path):
    """exp, log and pow by a whole or half exponent are written out (no T.exp / T.log / T.pow call, each
    a libm call per lane); a power by 1.7 keeps TVM's powf."""
    spec, _, _ = CPU_TARGETS[cpu]
    path = save_onnx(transcendental_epilogues(), tmp_path / "t.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    calls = {f: set(re.findall(r"T\.(exp|log|pow)\(", mod[f].script())) for f in done}
    assert [f for f, c in calls.items() if c] == [f for f, c in calls.items() if c == {"pow"}]
    assert len([f for f, c in calls.items() if c]) == 1, calls  # the x^1.7 only
    assert any(f.startswith("fused_exp") for f in done), done  # the convolution's output's exp, fused


def test_transcendental_epilogues_match_onnxruntime(tmp_path):
    path = save_onnx(transcendental_epilogues(), tmp_path / "t.onnx")
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-6, rtol=2e-6)
