"""The model zoo's fast subset (benchmarks/zoo.py runs all of it, on every target): each model
built here with random weights, compiled once per test run (the session's shared builds, which other
modules reuse), checked against its reference runtime."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import REPO, run_native

sys.path.insert(0, str(REPO / "benchmarks"))


# The fast subset: each model compiled once per test run for host/cpu (the session's shared builds)
FAST = [
    "seg_head",
    "audio_rnn",
    "vad_if",
    "vad_scalar",
    "det_head_tflite",
    "mobilenet_v3_small",
    "selfie_seg_fp16",
    "byte_cnn",
    "mobilevit_xxs",
    "text_encoder",
    "gru_scorer_opset9",
    "gru_scorer_opset11",
]


def shared_build(compiled, name: str):
    """zoo.run_one's ``compile``: the session's build, shared with test_parallel & co."""
    import zoo
    from tvmgen.frontends.base import parse_consts

    def build(path, flags, platform, device):
        consts, inputs = zoo.split_flags(flags)
        return compiled(path, platform, device, name=name, consts=parse_consts(consts) or None, inputs=inputs or None)

    return build


@pytest.mark.parametrize("name", FAST)
def test_zoo_model_compiles_and_matches_its_reference(name, tmp_path, compiled):
    import zoo

    row = zoo.run_one(name, ["host"], tmp_path, runs=1, runtimes={}, compile=shared_build(compiled, name))
    cell = row["targets"]["host"]
    assert cell["status"] == "ok", cell
    assert cell["max_error"] <= cell["tolerance"] < 0.01 * max(1.0, cell["tolerance"] * 1e3)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAST)
def test_zoo_model_runs_as_direct_calls_as_the_vm_does(name, tmp_path, compiled, host_runtime):
    """The C++ runtime on every model of the fast subset (its host build, the session's): main runs as direct
    calls (jni/src/direct_calls.h) unless it branches (vad_scalar's If on its sample rate, an input), and the outputs after replayed runs equal
    the Relax VM's (tvmgen-run --vm) bit for bit."""
    import zoo
    from tvmgen.runtime.runner import HostModel

    path, flags = zoo.build(name, tmp_path)
    art = shared_build(compiled, name)(path, flags, "host", "cpu")
    feeds = zoo.model_inputs(HostModel(art).inputs, 0, zoo.INPUT_VALUES.get(name, ({},))[0])
    runs = {}
    for flags_ in ((), ("--vm",)):
        timings = tmp_path / f"t{len(flags_)}.json"
        proc, outs = run_native(
            host_runtime, art, feeds, tmp_path, "--timings", timings, *flags_, tag=f"o{len(flags_)}", repeat=3
        )
        assert outs is not None, proc.stderr
        runs[flags_] = (outs, json.loads(timings.read_text())["executor"])
    (direct, executor), (vm, _) = runs[()], runs[("--vm",)]
    if name == "vad_scalar":
        assert executor == "relax vm: main branches (If): its calls can differ from run to run"
    else:
        assert executor == "direct calls", executor
    for d, v in zip(direct, vm, strict=True):
        assert d.dtype == v.dtype and np.array_equal(d, v, equal_nan=True)


@pytest.mark.parametrize(
    "name",
    [
        "vad_scalar",
        "selfie_seg_fp16",
        "gru_scorer_opset9",
        "gru_scorer_opset11",
        "tflite_computed_slice",
        "tflite_dynamic_batch",
    ],
)
def test_zoo_model_checked_as_aarch64_code_under_qemu(name, tvmgen, tmp_path):
    """The cases real models broke on as linux-aarch64 code (a 0-d input into an If; fp16 weights through
    DEQUANTIZE into MediaPipe's custom transposed convolution; GRU scorers exported at opsets 9 and 11,
    normalized before the import; TFLite slice bounds computed from SHAPE, folded before the import, and a
    dynamic batch): `--check` runs the artifact under qemu."""
    import zoo

    path, flags = zoo.build(name, tmp_path)
    r = tvmgen("compile", path, "--platform", "linux-aarch64", "--check", "-o", tmp_path / "a", *flags, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "checking the linux-aarch64 build under qemu-aarch64" in r.stderr
    from tvmgen.core import artifact

    outputs = artifact.load(tmp_path / "a").outputs
    assert "FAIL" not in r.stderr and all(f"ok {o.name}: max abs error" in r.stderr for o in outputs), r.stderr


def test_zoo_table_and_geomean():
    import zoo

    rows = [
        {
            "model": "a",
            "format": "onnx",
            "what": "x",
            "targets": {"host": {"status": "ok", "max_error": 1e-6}},
            "tvmgen_ms": 2.0,
            "reference_ms": 4.0,
        },
        {"model": "b", "format": "tflite", "what": "y", "targets": {"host": {"status": "compile failed"}}},
    ]
    text = zoo.format_table(rows, ["host"])
    assert "0.50x" in text.replace(" ", "") or "0.50" in text
    assert "compile failed" in text
    assert zoo.geomean([2.0, 0.5]) == pytest.approx(1.0)


def test_zoo_reads_what_the_guard_and_the_remedy_did():
    """The zoo's "slow kernels (host)" column, from `compile`'s output as it prints it (lines wrapped as a
    narrow console wraps them); tests/tuning/test_remedy.py checks the compile prints these lines."""
    import zoo

    flagged = (
        "  ! slow kernel conv3d_prepacked: 9.5 GFLOP/s, 2.969 ms per run, 19x below the 178.4 GFLOP/s ...\n"
        "  remedy: kernel conv3d: tvmgen's schedule 3.448 ms, best found 0.424 ms\n"
    )
    rebuilt = flagged + (
        "  ✓ remedy: rebuilt with the schedules found: the model runs in 0.472 ms\nagainst 2.943 ms (6.23x; ...)\n"
    )
    kept = (
        flagged + "  ✓ remedy: kept the first build (not faster): the model runs in 3.1 ms against 2.943 ms (0.95x)\n"
    )
    assert zoo.remedy_summary(rebuilt) == "1 slow: rebuilt 2.94 -> 0.472 ms"
    assert zoo.remedy_summary(kept) == "1 slow: kept first 2.94 -> 3.1 ms"
    assert zoo.remedy_summary(flagged + "  remedy: nothing faster than tvmgen's schedules found; ...") == (
        "1 slow: nothing faster"
    )
    isolated = flagged.split("  remedy:")[0] + (
        "  ! remedy: kernel matmul2 runs in 1.5 µs on its own against 31.6 µs a call inside the model: its schedule\n"
        "is not what makes it slow there, so it was not searched. ...\n  remedy: the build is unchanged (5 s, ...)"
    )
    assert zoo.remedy_summary(isolated) == "1 slow: not its schedule"
    assert zoo.remedy_summary("  kernel speed: no slow kernel (median of 5 profiled runs)") == "-"
    rows = [{"model": "a", "targets": {"host": {"status": "ok", "remedy": zoo.remedy_summary(rebuilt)}}}]
    assert "1 slow: rebuilt 2.94 -> 0.472 ms" in zoo.format_table(rows, ["host"])


# The published parameter counts of each architecture (torchvision's model cards, 1000 classes): a
# layer table written wrongly (a width, an expansion, a missing block) changes them.
PUBLISHED_PARAMETERS = {
    "mobilenet_v2": 3_504_872,
    "mobilenet_v3_small": 2_542_856,
    "efficientnet_b0": 5_288_548,
    "shufflenet_v2_x1_0": 2_278_604,
    "mnasnet1_0": 4_383_312,
    "squeezenet1_1": 1_235_496,
    "resnet18": 11_689_512,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_zoo_architectures_have_their_published_size(name):
    import torch

    import zoo_nets

    net = zoo_nets.build(name)
    assert sum(p.numel() for p in net.parameters()) == PUBLISHED_PARAMETERS[name]
    with torch.no_grad():
        y, z = net(torch.randn(1, 3, 224, 224)), net(torch.randn(1, 3, 224, 224))
    assert y.shape == (1, 1000) and torch.isfinite(y).all()
    # the outputs depend on the input well above the zoo's tolerance (1e-3 of the largest output),
    # so a check against the reference can fail
    assert (y - z).abs().max() > 1e-2 * y.abs().max()


def test_zoo_heads_are_built_as_described(tmp_path):
    """The zoo's models whose time is one kernel or the call (benchmarks/zoo_heads.py), built without compiling:
    each CTC recognizer's classifier is the [C, N] matmul its entry names, over T steps; the tiny head maps 64
    values to 2 probabilities; the mel front end equals a NumPy mel spectrogram (Hann-windowed frames, power,
    triangular mel filters, log) on the same audio."""
    import onnx
    import onnxruntime as ort

    import zoo_heads

    def run(name, x):
        path = zoo_heads.build(name, tmp_path)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return onnx.load(str(path)), session.run(None, {session.get_inputs()[0].name: x})[0]

    rng = np.random.default_rng(0)
    for name, (channels, classes, steps) in zoo_heads.CTC.items():
        model, y = run(name, rng.standard_normal((1, 3, 32, 4 * steps)).astype(np.float32))
        weights = {tuple(t.dims) for t in model.graph.initializer}
        assert (channels, classes) in weights or (classes, channels) in weights, name
        assert y.shape == (1, steps, classes) and np.allclose(y.sum(-1), 1, atol=1e-4)

    _, y = run("tiny_dense_head", rng.standard_normal((1, 64)).astype(np.float32))
    assert y.shape == (1, 2) and np.allclose(y.sum(-1), 1, atol=1e-5)

    audio = rng.standard_normal(zoo_heads.SAMPLES).astype(np.float32)
    _, y = run("mel_frontend", audio.reshape(1, 1, -1))
    n, hop = zoo_heads.N_FFT, zoo_heads.HOP
    frames = np.stack([audio[i : i + n] for i in range(0, len(audio) - n + 1, hop)]).astype(np.float64)
    power = np.abs(np.fft.rfft(frames * np.hanning(n + 1)[:n], axis=1)) ** 2  # the periodic Hann window
    want = np.log(power @ zoo_heads._mel_filters(n // 2 + 1, zoo_heads.MELS) + 1e-6)
    assert y.shape == (1, len(frames), zoo_heads.MELS)
    np.testing.assert_allclose(y[0], want, rtol=1e-3, atol=1e-3)


def test_the_detector_and_the_raw_audio_cnn_are_built_as_described(tmp_path):
    """benchmarks/zoo_detect.py, built without compiling: the YOLOv8n-style detector has YOLOv8n's published
    size (3,157,200 parameters) and gives [1, 84, anchors] (2,100 at 320, 8,400 at 640: strides 8, 16, 32),
    boxes of positive size inside the image's scale and class probabilities, in float32 throughout (the anchors
    too, as Ultralytics' export makes them); the audio scorer frames its 144,000 samples with a 400-sample,
    hop-160 convolution and gives a score per segment, which moves with its input."""
    import onnx
    import onnxruntime as ort

    import zoo_detect

    assert sum(p.numel() for p in zoo_detect.yolov8n().parameters()) == 3_157_200  # the DFL's 16 bins included
    rng = np.random.default_rng(0)
    for name, side in zoo_detect.YOLO.items():
        session = ort.InferenceSession(str(zoo_detect.build(name, tmp_path)), providers=["CPUExecutionProvider"])
        (y,) = session.run(None, {session.get_inputs()[0].name: rng.standard_normal((1, 3, side, side), np.float32)})
        anchors = sum((side // s) ** 2 for s in (8, 16, 32))
        assert y.shape == (1, 4 + zoo_detect.CLASSES, anchors), (name, y.shape)
        assert (y[0, 2:4] > 0).all() and (y[0, :4] < 4 * side).all()  # widths, heights; centres near the image
        assert ((y[0, 4:] >= 0) & (y[0, 4:] <= 1)).all()
        model = onnx.load(str(tmp_path / f"{name}.onnx"))
        constants = [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
        assert all(t.data_type != onnx.TensorProto.DOUBLE for t in [*constants, *model.graph.initializer])
    path = zoo_detect.build("raw_audio_cnn", tmp_path)
    (frame,) = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Conv"][:1]
    attrs = {a.name: list(a.ints) for a in frame.attribute}
    assert attrs["kernel_shape"] == [zoo_detect.FRAME] and attrs["strides"] == [zoo_detect.HOP]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    a, b = (
        session.run(
            None, {session.get_inputs()[0].name: rng.standard_normal((1, 1, zoo_detect.AUDIO_SAMPLES), np.float32)}
        )[0]
        for _ in range(2)
    )
    assert a.shape == (1, 1, 57) and np.abs(a - b).max() > 1e-2 * max(1.0, np.abs(a).max())
