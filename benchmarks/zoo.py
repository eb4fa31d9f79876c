#!/usr/bin/env python3
"""The project's model zoo: real mobile architectures, built here with random weights, compiled,
checked against their reference runtime and timed against it.

Nothing is downloaded: the PyTorch classifiers are defined in zoo_nets.py (exported to ONNX),
keras.applications builds the Keras ones (weights=None, converted to TFLite; zoo_tflite.py), the
heads and the audio models are defined in zoo_models.py. Each model is
imported, compiled for every target asked for, checked on seeded inputs against its reference
(onnxruntime for ONNX, LiteRT for TFLite) and, on host/cpu, timed against that reference at one
thread (medians, round robin, in one child process per model).

Targets: host (host/cpu; timed), aarch64 (linux-aarch64/cpu run by tvmgen-run under qemu-aarch64;
checked, not timed: emulated), opencl (host/opencl run by tvmgen-run on the machine's OpenCL
driver, PoCL here; checked), vulkan (host/vulkan run by tvmgen-run with libtvmgen_vulkan on the
machine's Vulkan driver, Mesa's lavapipe here; checked), opencl-adreno, opencl-mali, opencl-desktop
(host/opencl compiled with that --gpu-family: its tiles, work-group limits and, for adreno, texture
memory; run like opencl).

    .venv/bin/python benchmarks/zoo.py                          # every model, host (~15 min on 2 cores)
    .venv/bin/python benchmarks/zoo.py --targets host,aarch64,opencl
    .venv/bin/python benchmarks/zoo.py --targets host,vulkan
    .venv/bin/python benchmarks/zoo.py --targets opencl-adreno,opencl-mali,opencl-desktop
    .venv/bin/python benchmarks/zoo.py --models seg_head,audio_rnn --json zoo.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
import zoo_state_pairs
from zoo_models import MODELS, build, build_flags

TARGETS = {
    "host": ("host", "cpu"),
    "aarch64": ("linux-aarch64", "cpu"),
    "opencl": ("host", "opencl"),
    "vulkan": ("host", "vulkan"),
    # the other OpenCL GPU families (`--gpu-family`: their tiles, limits, Adreno's texture memory), run on PoCL
    "opencl-adreno": ("host", "opencl"),
    "opencl-mali": ("host", "opencl"),
    "opencl-desktop": ("host", "opencl"),
}
FAMILY = {t: t.split("-", 1)[1] for t in TARGETS if t.startswith("opencl-")}
# what each model adds to the coverage (the table's last column)
WHAT = {
    "mobilenet_v3_small": "hard-swish, squeeze-excitation",
    "efficientnet_b0": "SiLU, squeeze-excitation",
    "shufflenet_v2_x1_0": "channel shuffle, split",
    "squeezenet1_1": "concat, ceil-mode pooling",
    "keras_mobilenet_v2_int8": "full-integer TFLite",
    "seg_head": "ConvTranspose, Resize, PRelu, SE",
    "det_head_tflite": "TRANSPOSE_CONV, RESIZE_BILINEAR, PRELU",
    "audio_rnn": "Conv1d, GRU, LSTM",
    "text_recognizer": "GELU (Erf) conv epilogues, LayerNorm, attention, 1x7 conv",
    "byte_cnn": "Conv1d, [C,L,1] and [C,1,L] Conv, Max(x,0)",
    "mobilevit_xxs": "ViT hybrid: patches, attention, 4000 classes",
    "text_encoder": "embeddings, attention with a padding mask",
    "vad_if": "LSTM in If, --const sr=16000",
    "vad_scalar": "scalar input into If and arithmetic, scalar output",
    "selfie_seg_fp16": "fp16 weights (DEQUANTIZE), MediaPipe Convolution2DTransposeBias",
    "tflite_computed_slice": "STRIDED_SLICE bounds from SHAPE arithmetic (folded), EXPAND_DIMS axis -1",
    "tflite_dynamic_batch": "batch -1 in shape_signature (taken at 1), Keras Conv1D over 16000 samples",
    "gru_scorer_opset9": "opset 9: attribute Slice on a GRU state input, dynamic batch and frames",
    "gru_scorer_opset11": "opset 11: GRU state from the batch size (Shape, ConstantOfShape), 0-d output",
    "stream_gru": "state held by the runtime (--state h0=hn, frames_in=frames_out), checked over 20 steps",
    "streaming_kws_int8": "TFLite resource variables (int8 ring buffer) as state, quantized STRIDED_SLICE, SPLIT_V",
    "ctc_recognizer_6k": "CTC head: matmul [1,40,120] x [120,6625] (3 MB of weights), softmax",
    "ctc_recognizer_8k": "CTC head: matmul [1,64,1024] x [1024,8210] (34 MB of weights), softmax",
    "ctc_recognizer_18k": "CTC head: matmul [1,40,120] x [120,18385] (9 MB of weights), softmax",
    "tiny_dense_head": "a few microseconds: the cost of a call",
    "mel_frontend": "STFT as a Conv1d (hop 160), power, mel matmul, log",
    "yolov8n_320": "detector: C2f, SPPF, PAN neck, DFL decode; 320x320",
    "yolov8n_640": "the same detector at 640x640 (8,400 anchors)",
    "raw_audio_cnn": "144,000 raw samples framed by a strided Conv1d, strided Conv1d blocks, scores per segment",
}
# Models checked on set values of some inputs (one check per set; the rest seeded random): an If
# on a scalar must be checked down each branch.
INPUT_VALUES = {"vad_scalar": ({"sr": 16000}, {"sr": 8000})}


# =========================================================================== one model (child process)


def reference_runner(path: Path, consts: dict, threads: int = 1):
    """The reference runtime, loaded once: inputs -> outputs."""
    if path.suffix == ".tflite":
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=str(path), num_threads=threads)
        interp.allocate_tensors()
        ins, outs = interp.get_input_details(), interp.get_output_details()

        def run_litert(inputs):
            for d in ins:
                interp.set_tensor(d["index"], inputs[d["name"]])
            interp.invoke()
            return [interp.get_tensor(d["index"]) for d in outs]

        return run_litert
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return lambda inputs: sess.run(None, {**inputs, **consts})


def _consts(flags: list[str], path: Path) -> dict:
    """--const flags as the reference's extra inputs (dtype from the model)."""
    import onnx

    flags, _ = split_flags(flags)
    if not flags:
        return {}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in onnx.load(str(path)).graph.input}
    from onnx.helper import tensor_dtype_to_np_dtype

    return {n: np.array(float(v), tensor_dtype_to_np_dtype(types[n])) for n, v in (f.split("=", 1) for f in flags)}


def max_error(actual, expected) -> float:
    return max(
        float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64)))) if a.size else 0.0
        for a, e in zip(actual, expected)
    )


def run_one(name: str, targets: list[str], work: Path, runs: int, runtimes: dict, compile=None) -> dict:
    """Build, compile, check (and time) one zoo model on each target. ``compile(path, flags, platform,
    device)``, when given, returns the artifact instead of a `tvmgen compile` run (the tests pass their
    session's shared build, so no model is compiled twice in one test run)."""
    row = {"model": name, "what": WHAT.get(name, "classifier"), "targets": {}}
    t0 = time.perf_counter()
    path, flags = build(name, work)
    row["format"] = "tflite" if path.suffix == ".tflite" else "onnx"
    row["build_s"] = time.perf_counter() - t0
    consts = _consts(flags, path)
    for target in targets:
        platform, device = TARGETS[target]
        target_flags = [*flags, *(("--gpu-family", FAMILY[target]) if target in FAMILY else ())]
        out = work / f"{name}-{target}"
        t0 = time.perf_counter()
        if compile is not None:
            out = compile(path, target_flags, platform, device)
            row["targets"][target] = {"compile_s": time.perf_counter() - t0}
            _check_target(name, target, out, path, consts, work, runs, runtimes, row["targets"][target])
            continue
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tvmgen",
                "compile",
                str(path),
                "--platform",
                platform,
                "--device",
                device,
                "-o",
                str(out),
                "--force",
                *target_flags,
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, COLUMNS="200"),
        )
        cell = {"compile_s": time.perf_counter() - t0}
        if target == "host":
            cell["remedy"] = remedy_summary(proc.stdout + proc.stderr)
        row["targets"][target] = cell
        if proc.returncode != 0:
            cell.update(status="compile failed", error=_last_error(proc))
            continue
        _check_target(name, target, out, path, consts, work, runs, runtimes, cell)
    return row


def _check_target(name, target, out, path, consts, work, runs, runtimes, cell) -> None:
    """Run the artifact ``out`` against the reference on the zoo's inputs; the verdict goes in ``cell``."""
    from tvmgen.core.artifact import load

    manifest = load(out)
    reference = reference_runner(path, consts)
    try:
        checks = []
        timing = None
        if manifest.state:  # a streaming model: steps in order, the state carried on both sides
            checks.append(zoo_state_pairs.sequence_check(target, out, path, consts, work, runtimes, reference_runner))
        for values in () if manifest.state else INPUT_VALUES.get(name, ({},)):
            inputs = model_inputs(manifest.inputs, 0, values)
            actual, timing = _run_target(target, out, inputs, work, runs, runtimes)
            checks.append((actual, reference(inputs), reference(model_inputs(manifest.inputs, 1, values))))
    except Exception as e:
        cell.update(status="run failed", error=f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")
        return
    if "int8" in name:
        cell.update(_int8_check(*checks[0]))
    else:
        err = max(max_error(actual, expected) for actual, expected, _ in checks)
        tol = min(tolerance(expected) for _, expected, _ in checks)
        # the check means something only if another input moves the outputs well beyond the tolerance
        moved = min(max_error(other, expected) for _, expected, other in checks)
        status = "VACUOUS" if moved <= 10 * tol else "ok" if err <= tol else "MISMATCH"
        cell.update(status=status, max_error=err, tolerance=tol, input_sensitivity=moved)
    if timing is not None:
        cell.update(timing)


def remedy_summary(output: str) -> str:
    """What `compile`'s slow-kernel guard and remedy did to a host build, from its output: "-" (no slow
    kernel), or the slow kernels and the remedy's verdict with the whole model's median runs."""
    import re

    text = " ".join(output.split())  # the console wraps long lines
    slow = re.findall(r"! slow kernel (\S+):", text)
    if not slow:
        return "-"
    m = re.search(
        r"remedy: (rebuilt with the schedules found|kept the first build \(not faster\)): the model runs in "
        r"([\d.]+) ms against ([\d.]+) ms",
        text,
    )
    if m:
        verdict = "rebuilt" if m.group(1).startswith("rebuilt") else "kept first"
        what = f"{verdict} {float(m.group(3)):.3g} -> {float(m.group(2)):.3g} ms"
    elif "nothing faster than tvmgen's schedules found" in text:
        what = "nothing faster"
    elif "its schedule is not what makes it slow there" in text:
        what = "not its schedule"
    elif "remedy: the build with the schedules found failed" in text:
        what = "rebuild failed"
    else:
        what = "not remedied"
    return f"{len(slow)} slow: {what}"


def model_inputs(specs, seed: int, values: dict) -> dict:
    """Seeded random inputs, with ``values`` (name -> number) set as arrays of the input's dtype."""
    from tvmgen.core.model import random_inputs

    inputs = random_inputs(specs, seed=seed)
    for s in specs:
        if s.name in values:
            inputs[s.name] = np.full(s.shape, values[s.name], s.dtype)
    return inputs


def tolerance(expected) -> float:
    """The float models' tolerance: that of `tvmgen compile --check` (1e-4 + 1e-3 x the largest output)."""
    return 1e-4 + 1e-3 * (max(float(np.max(np.abs(e))) for e in expected) or 1.0)


def int8_difference(actual, expected) -> tuple[float, float, bool]:
    """(mean difference, one output quantum (range / 255), same top class) of a full-integer model."""
    q = max(float(e.max() - e.min()) for e in expected) / 255 or 1.0
    mean_err = max(float(np.mean(np.abs(a.astype(np.float64) - e))) for a, e in zip(actual, expected))
    top1 = all(int(np.argmax(a)) == int(np.argmax(e)) for a, e in zip(actual, expected))
    return mean_err, q, top1


def _int8_check(actual, expected, other) -> dict:
    """Full-integer models. TVM 0.27's TFLite importer runs them as dequantize -> float operator ->
    quantize, LiteRT with integer kernels: the two round differently at every layer, and over a deep
    network the outputs drift apart by a few output quanta (quantum = the output's range / 255).
    Passing: the mean difference is at most 2 quanta and the top class is the same; the check is
    VACUOUS when another input moves the reference by no more than that."""
    mean_err, q, top1 = int8_difference(actual, expected)
    moved = max(float(np.mean(np.abs(o.astype(np.float64) - e))) for o, e in zip(other, expected))
    status = "VACUOUS" if moved <= 2 * q else "ok" if mean_err <= 2 * q and top1 else "MISMATCH"
    return {
        "status": status,
        "max_error": max_error(actual, expected),
        "mean_error_quanta": mean_err / q,
        "same_top1": top1,
        "tolerance": 2 * q,
        "input_sensitivity_quanta": moved / q,
    }


def _last_error(proc) -> str:
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip().startswith("error:")]
    return (lines[-1] if lines else (proc.stderr.strip().splitlines() or ["?"])[-1])[:300]


def _run_target(target: str, artifact: Path, inputs: dict, work: Path, runs: int, runtimes: dict):
    if target == "host":
        from tvmgen.runtime.runner import HostModel

        model = HostModel(artifact)
        actual = model.run(inputs)
        return actual, None
    runner = runtimes[target]
    tmp = Path(tempfile.mkdtemp(dir=work))
    args = []
    for n, arr in inputs.items():
        np.save(tmp / f"in{len(args)}.npy", arr)
        args += ["--input", f"{n}={tmp / f'in{len(args)}.npy'}"]
    cmd = [str(runner), str(artifact), *args, "-o", str(tmp / "out")]
    if target == "aarch64":
        cmd = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"exit {proc.returncode}")
    manifest = json.loads((artifact / "manifest.json").read_text())
    from tvmgen.runtime.runner import output_file_name

    return [np.load(tmp / "out" / output_file_name(o["name"])) for o in manifest["outputs"]], None


def time_host(name: str, work: Path, runs: int) -> dict:
    """tvmgen vs the reference at one thread, round robin, medians (in this child: TVM_NUM_THREADS=1)."""
    from tvmgen.runtime.runner import HostModel

    path = next(p for p in work.iterdir() if p.stem == name and p.suffix in (".onnx", ".tflite"))
    flags = build_flags(name)
    model = HostModel(work / f"{name}-host")
    inputs = model_inputs(model.inputs, 0, INPUT_VALUES.get(name, ({},))[0])  # a streaming model's own: each run a step
    ref = zoo_state_pairs.reference_stepper(
        path, model.manifest, model.directory, reference_runner(path, _consts(flags, path))
    )
    timed = [benchlib.Timed("tvmgen", lambda: model.run(inputs)), benchlib.Timed("reference", lambda: ref(inputs))]
    benchlib.round_robin(timed, warmup=3, runs=runs, rounds=3, min_time=0.2)
    return {t.key: benchlib.median(t.times_ms) for t in timed}


def split_flags(flags) -> tuple[list[str], list[str]]:
    """A model's flags as (the --const values, the --input values)."""
    pairs = list(zip(flags[::2], flags[1::2], strict=True))
    return [v for f, v in pairs if f == "--const"], [v for f, v in pairs if f == "--input"]


# =========================================================================== table


def format_table(rows: list[dict], targets: list[str]) -> str:
    header = ["model", "format", "adds", *[f"{t}" for t in targets], "max error (host)", "tvmgen ms", "ref ms", "ratio"]
    header.insert(len(header) - 3, "slow kernels (host)")
    body = []
    for r in rows:
        cells = [r["model"], r.get("format", "-"), r.get("what", "")]
        for t in targets:
            c = r.get("targets", {}).get(t, {})
            cells.append(c.get("status", "-"))
        host = r.get("targets", {}).get("host", {})
        cells.append(f"{host['max_error']:.1e}" if "max_error" in host else "-")
        cells.append(host.get("remedy", "-"))
        tv, ref = r.get("tvmgen_ms"), r.get("reference_ms")
        cells += [
            benchlib.fmt_num(tv) if tv else "-",
            benchlib.fmt_num(ref) if ref else "-",
            benchlib.fmt_ratio(benchlib.ratio(tv, ref)) if tv and ref else "-",
        ]
        body.append(cells)
    return benchlib.table(header, body, right={len(header) - 4, len(header) - 3, len(header) - 2, len(header) - 1})


def geomean(values):
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def main() -> None:
    p = benchlib.parser(__doc__)
    benchlib.models_option(p, MODELS)
    p.add_argument(
        "--targets",
        default="host",
        help="comma-separated: host, aarch64, opencl, vulkan, opencl-adreno, opencl-mali, opencl-desktop [default: host]",
    )
    p.add_argument("--runs", type=int, default=20, help="timed runs per engine and round [default: 20]")
    p.add_argument("--keep", type=Path, help="work directory to keep (models, artifacts)")
    p.add_argument("--one", help=argparse_hidden())
    p.add_argument("--runtimes", help=argparse_hidden())
    p.add_argument("--build-only", help=argparse_hidden())  # benchmarks/speed.py: make one model file in --keep
    benchlib.json_option(p)
    args = p.parse_args()
    if args.one:
        return _child(args)
    if args.build_only:
        print(build(args.build_only, Path(args.keep))[0])
        return
    models = benchlib.pick_models(args.models, MODELS, p.error)
    targets = [t for t in args.targets.split(",") if t]
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        p.error(f"unknown target(s) {', '.join(bad)}; choose from {', '.join(TARGETS)}")
    work = Path(args.keep or tempfile.mkdtemp(prefix="tvmgen-zoo-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    runtimes = _runtimes(targets, work)
    rows = []
    for i, name in enumerate(models, 1):
        benchlib.progress(f"[{i}/{len(models)}] {name}: build, compile ({', '.join(targets)}), check")
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                name,
                "--targets",
                ",".join(targets),
                "--keep",
                str(work),
                "--runs",
                str(args.runs),
                "--runtimes",
                json.dumps({k: str(v) for k, v in runtimes.items()}),
            ],
            capture_output=True,
            text=True,
            env=benchlib.thread_env(1),
        )
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row = {
                "model": name,
                "targets": {t: {"status": "crashed"} for t in targets},
                "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300],
            }
        rows.append(row)
        for t, c in row.get("targets", {}).items():
            if c.get("status") != "ok":
                benchlib.log(f"  {name} {t}: {c.get('status')}: {c.get('error', '')}")
    print(format_table(rows, targets))
    ratios = [r["tvmgen_ms"] / r["reference_ms"] for r in rows if r.get("tvmgen_ms") and r.get("reference_ms")]
    gm = geomean(ratios)
    passed = sum(all(c.get("status") == "ok" for c in r["targets"].values()) for r in rows)
    print(
        f"\n{passed}/{len(rows)} models pass on every target; tvmgen / reference at 1 thread, geometric mean: {gm:.2f}x"
        if gm
        else f"\n{passed}/{len(rows)} models pass on every target"
    )
    if args.json:
        benchlib.write_json(args.json, "zoo", {"targets": targets, "rows": rows, "geomean_ratio": gm})
    sys.exit(0 if passed == len(rows) else 1)


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


def _runtimes(targets: list[str], work: Path) -> dict:
    from tvmgen.runtime import runtime_build

    found = {}
    if "aarch64" in targets:
        benchlib.progress(
            "the aarch64 runtime (cmake, cross g++; reused from the user cache while jni/ is unchanged) ..."
        )
        found["aarch64"] = runtime_build.cached_build("linux-aarch64") / "bin" / "tvmgen-run"
    opencl = [t for t in targets if TARGETS.get(t, ("", ""))[1] == "opencl"]
    if opencl:
        runner = benchlib.opencl_runtime(None, work, benchlib.progress) / "bin" / "tvmgen-run"
        found.update(dict.fromkeys(opencl, runner))
    if "vulkan" in targets:
        prefix = runtime_build.cached_build("host")
        if not (prefix / "lib" / "libtvmgen_vulkan.so").is_file():
            raise SystemExit(f"{prefix}/lib has no libtvmgen_vulkan.so (the runtime build needs libvulkan-dev)")
        found["vulkan"] = prefix / "bin" / "tvmgen-run"
    return found


def _child(args) -> None:
    work = Path(args.keep)
    runtimes = {k: Path(v) for k, v in json.loads(args.runtimes or "{}").items()}
    targets = [t for t in args.targets.split(",") if t]

    def compute():
        row = run_one(args.one, targets, work, args.runs, runtimes)
        if row["targets"].get("host", {}).get("status") == "ok":
            t = time_host(args.one, work, args.runs)
            row.update(tvmgen_ms=t["tvmgen"], reference_ms=t["reference"])
        return row

    print(json.dumps(compute()))


if __name__ == "__main__":
    main()
