#!/usr/bin/env python3
"""Peak resident memory of tvmgen against onnxruntime and LiteRT, on the zoo's models.

Each engine runs each model in a process of its own, which reads the kernel's own accounting
(VmRSS, and its high-water mark VmHWM, in /proc/self/status) before the model is loaded, once it
is loaded and ready, and after the runs, as LiteRT's benchmark_model reports its init and overall
peaks. The figure compared is what the model added to the process: the peak minus the resident
memory before loading, so the interpreter and the libraries' own code do not count.

Engines: tvmgen's C++ runner (`tvmgen-run`, what a device runs), tvmgen through Python
(`HostModel`), and the model's reference runtime (onnxruntime for ONNX, LiteRT for TFLite), each
with one thread.

    .venv/bin/python benchmarks/memory.py                               # the default models (~5 min)
    .venv/bin/python benchmarks/memory.py --models mobilenet_v2 --json mem.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

MODELS = (
    "mobilenet_v2",
    "efficientnet_b0",
    "resnet18",
    "keras_mobilenet_v2",
    "keras_mobilenet_v2_int8",
    "det_head_tflite",
    "audio_rnn",
)
RUNS = 10
MB = 1024 * 1024


def measure_in_this_process(engine: str, model: Path, artifact: Path) -> dict:
    """Load and run one engine here (a child process of its own); the three readings
    (``tvmgen.memory.ResidentMemory``, as ``tvmgen run`` takes them)."""
    import zoo
    from tvmgen.core.artifact import load as load_manifest
    from tvmgen.core.model import random_inputs
    from tvmgen.reports.memory import ResidentMemory

    inputs = random_inputs(load_manifest(artifact).inputs, seed=0)
    # the engine's libraries are loaded before the first reading: only the model's memory counts
    if engine == "tvmgen (Python)":
        import tvm

        from tvmgen.runtime.runner import HostModel

        tvm.runtime.tensor(np.zeros(1, np.float32), tvm.cpu())
    elif model.suffix == ".tflite":
        import ai_edge_litert.interpreter  # noqa: F401
    else:
        import onnxruntime  # noqa: F401
    memory = ResidentMemory()
    memory.mark_before_load()
    run = HostModel(artifact).run if engine == "tvmgen (Python)" else zoo.reference_runner(model, {}, threads=1)
    memory.mark_loaded()
    for _ in range(RUNS):
        run(inputs)
    memory.mark_end()
    readings = memory.to_json()
    return {k: readings[k] for k in ("before_load_bytes", "after_load_peak_bytes", "overall_peak_bytes")}


def measure_cpp(runner: Path, artifact: Path, work: Path) -> dict:
    """tvmgen-run's own readings (its timings JSON: the same /proc/self/status fields)."""
    from tvmgen.core.artifact import load as load_manifest
    from tvmgen.core.model import random_inputs

    args = []
    for i, (name, arr) in enumerate(random_inputs(load_manifest(artifact).inputs, seed=0).items()):
        np.save(work / f"in{i}.npy", arr)
        args += ["--input", f"{name}={work / f'in{i}.npy'}"]
    timings = work / "timings.json"
    args += ["--repeat", str(RUNS), "--threads", "1", "--timings", str(timings), "-o", str(work / "out")]
    one_thread([str(runner), str(artifact), *args], "tvmgen-run")
    mem = json.loads(timings.read_text())["memory"]
    return {k: mem[k] for k in ("before_load_bytes", "after_load_peak_bytes", "overall_peak_bytes")}


def child(engine: str, model: str, artifact: str) -> None:
    print(json.dumps(measure_in_this_process(engine, Path(model), Path(artifact))))


def in_child(engine: str, model: Path, artifact: Path) -> dict:
    proc = one_thread([sys.executable, __file__, "--child", engine, str(model), str(artifact)], engine)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one_thread(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """``cmd`` run with one thread (benchlib.thread_env); RuntimeError with the last line of its stderr if
    it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=benchlib.thread_env(1), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:300]}")
    return proc


def added(reading: dict, key: str) -> float:
    return (reading[key] - reading["before_load_bytes"]) / MB


def reusable(artifact: Path, model: Path) -> bool:
    """A host artifact in the --keep directory compiled from this very model file (its manifest's sha256):
    a rerun measures it again instead of compiling it again."""
    from tvmgen.core import artifact as artifacts

    try:
        manifest = artifacts.load(artifact)
    except Exception:  # none there, or not a whole artifact: compile
        return False
    return manifest.platform == "host" and manifest.model.get("sha256") == artifacts.sha256_file(model)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        return child(*sys.argv[2:])
    import zoo

    p = benchlib.parser(__doc__)
    benchlib.models_option(p, MODELS)
    p.add_argument("--keep", type=Path, help="work directory to keep (models, artifacts)")
    benchlib.json_option(p)
    args = p.parse_args()
    models = benchlib.pick_models(args.models, zoo.MODELS, p.error)
    work = Path(args.keep or tempfile.mkdtemp(prefix="tvmgen-memory-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    benchlib.progress("the host runtime (cmake, reused from the user cache while jni/ is unchanged) ...")
    from tvmgen.runtime import runtime_build

    runner = runtime_build.cached_build("host") / "bin" / "tvmgen-run"
    rows, results = [], []
    for i, name in enumerate(models, 1):
        benchlib.progress(f"[{i}/{len(models)}] {name}: build, compile, measure")
        # a model file already in --keep is measured as it is (its artifact beside it is reused when
        # compiled from those very bytes): a rebuilt Keras model's layer names can differ by process
        kept = next((f for f in work.glob(f"{name}.*") if f.suffix in (".onnx", ".tflite")), None)
        path, flags = (kept, zoo.build_flags(name)) if kept else zoo.build(name, work)
        artifact = work / f"{name}-host"
        if reusable(artifact, path):
            benchlib.log(f"  {name}: reusing {artifact} (compiled from this model file)")
        else:
            proc = subprocess.run(
                [sys.executable, "-m", "tvmgen", "compile", str(path), "-o", str(artifact), "--force", *flags],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                benchlib.log(f"  {name}: compile failed: {zoo._last_error(proc)}")
                continue
        if flags:  # a --const input: the reference would need it too; tvmgen alone is not a comparison
            benchlib.log(f"  {name}: skipped (compiled with {' '.join(flags)})")
            continue
        reference = "LiteRT" if path.suffix == ".tflite" else "onnxruntime"
        readings = {
            "tvmgen-run (C++)": measure_cpp(runner, artifact, Path(tempfile.mkdtemp(dir=work))),
            "tvmgen (Python)": in_child("tvmgen (Python)", path, artifact),
            reference: in_child(reference, path, artifact),
        }
        weights = sum(f.stat().st_size for f in artifact.iterdir() if f.suffix in (".so", ".params"))
        results.append({"model": name, "reference": reference, "artifact_bytes": weights, "readings": readings})
        ref = readings[reference]
        for engine, r in readings.items():
            rows.append(
                [
                    name,
                    engine,
                    f"{added(r, 'after_load_peak_bytes'):.1f}",
                    f"{added(r, 'overall_peak_bytes'):.1f}",
                    benchlib.fmt_ratio(
                        benchlib.ratio(added(r, "overall_peak_bytes"), added(ref, "overall_peak_bytes"))
                    ),
                ]
            )
        rows.append(None)
    header = ["model", "engine", "after load MB", "overall MB", "overall / ref"]
    print(
        "tvmgen peak resident memory (what loading and running the model added to its process: VmHWM minus "
        f"VmRSS before loading, /proc/self/status; 1 thread, {RUNS} runs)"
    )
    print(benchlib.table(header, rows[:-1] if rows and rows[-1] is None else rows, right={2, 3, 4}))
    if args.json:
        benchlib.write_json(args.json, "memory", {"runs": RUNS, "rows": results})


if __name__ == "__main__":
    main()
