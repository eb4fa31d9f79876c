"""Check tvmgen's x86-64 builds on another machine's CPU, without TVM installed there.

    python scripts/cpu_matrix.py bundle DIR     # here: artifacts for every x86-64 level + runtime + references
    python3 DIR/cpu_matrix.py check DIR         # there: run each artifact the CPU can run, compare (stdlib only)

The bundle holds the built-in MobileNet and an 8-bit matmul (u8 x s8, the product onnxruntime gets
wrong without VNNI), each built for x86-64 (SSE2), haswell (AVX2), skylake-avx512 and cascadelake
(AVX-512 + VNNI: the int8 dot-product kernel), tvmgen-run with the TVM runtime it links, seeded
inputs and the expected outputs (onnxruntime for floats, an exact int64 product for integers).
`check` reads /proc/cpuinfo, runs every artifact whose instructions the CPU has, and fails if an
output differs (floats beyond 1e-4 relative to the largest value, integers at all).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

CPUS = {  # LLVM CPU: the /proc/cpuinfo flags its code needs
    "x86-64": ["sse2"],
    "haswell": ["avx2", "fma"],
    "skylake-avx512": ["avx512f", "avx512bw", "avx512vl", "avx512dq"],
    "cascadelake": ["avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"],
}


def bundle(out: Path, names=("mobilenet", "int8")) -> None:
    import numpy as np

    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path[:0] = [str(tests), str(tests / "compiler")]  # conftest, and the int8 tests' model maker
    from test_int8 import exact_product, matmul_integer  # the tests' own model maker
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.core.model import random_inputs
    from tvmgen.frontends.builtin import materialize
    from tvmgen.runtime import runtime_build

    out.mkdir(parents=True, exist_ok=False)
    shutil.copytree(runtime_build.cached_build("host"), out / "runtime", ignore=shutil.ignore_patterns("include"))
    shutil.copy(__file__, out / "cpu_matrix.py")
    int8 = matmul_integer("uint8", "int8", (16, 64), 32, a_zero=3)
    import onnx

    models = {}
    if "mobilenet" in names:
        models["mobilenet"] = materialize("builtin:mobilenet", out)
    if "int8" in names:
        models["int8"] = out / "int8.onnx"
        onnx.save(int8, str(models["int8"]))
    cases = []
    for name, path in models.items():
        imported = frontends.load(path, [])
        inputs = random_inputs(imported.inputs, seed=1)
        if name == "int8":
            inputs = {"a": np.random.default_rng(1).integers(0, 256, (16, 64)).astype("uint8")}
            expected = [exact_product(int8, inputs["a"])]
        else:
            expected = imported.reference(inputs)
        for k, v in inputs.items():
            np.save(out / f"{name}.in.{k}.npy", v)
        for spec, v in zip(imported.output_names, expected):
            np.save(out / f"{name}.want.{spec}.npy", np.asarray(v))
        for cpu in CPUS:
            art = out / f"{name}-{cpu}"
            compile_to_artifact(
                imported, BuildOptions(PLATFORMS["host"].with_cpu(cpu), "cpu"), art, True, {"name": name}
            )
            cases.append(
                {
                    "artifact": art.name,
                    "cpu": cpu,
                    "inputs": {k: f"{name}.in.{k}.npy" for k in inputs},
                    "outputs": {o: f"{name}.want.{o}.npy" for o in imported.output_names},
                    "exact": name == "int8",
                }
            )
        path.unlink()
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    print(f"bundle: {out} ({sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1e6:.1f} MB)")


def read_npy(path: Path) -> tuple[str, list]:
    """(dtype, flat values) of a little-endian .npy file, with the standard library only."""
    data = path.read_bytes()
    header_len = struct.unpack("<H", data[8:10])[0]
    header = eval(data[10 : 10 + header_len].decode())
    code = {"<f4": "f", "<i4": "i", "|u1": "B", "|i1": "b", "<i8": "q"}[header["descr"]]
    count = 1
    for d in header["shape"]:
        count *= d
    return header["descr"], list(struct.unpack(f"<{count}{code}", data[10 + header_len :]))


def check(root: Path) -> int:
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    print(f"CPU: {model}; AVX2 {'avx2' in flags}, AVX-512 {'avx512f' in flags}, VNNI {'avx512_vnni' in flags}")
    env = dict(os.environ, LD_LIBRARY_PATH=str(root / "runtime" / "lib"))
    failed = 0
    for case in json.loads((root / "cases.json").read_text()):
        missing = [f for f in CPUS[case["cpu"]] if f not in flags]
        if missing:
            print(f"  {case['artifact']:28s} not run: this CPU lacks {', '.join(missing)}")
            continue
        outdir = root / "got" / case["artifact"]
        args = [
            str(root / "runtime" / "bin" / "tvmgen-run"),
            str(root / case["artifact"]),
            "-o",
            str(outdir),
            "--repeat",
            "20",
            "--warmup",
            "2",
        ]
        for k, f in case["inputs"].items():
            args += ["--input", f"{k}={root / f}"]
        proc = subprocess.run(args, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(f"  {case['artifact']:28s} FAILED to run: {proc.stderr.strip().splitlines()[-1:]}")
            failed += 1
            continue
        median = json.loads(proc.stdout)["run_ms"]["median"]
        worst = 0.0
        for name, want_file in case["outputs"].items():
            _, want = read_npy(root / want_file)
            _, got = read_npy(outdir / f"{name}.npy")
            scale = max(abs(v) for v in want) or 1.0
            worst = max(worst, max(abs(a - b) for a, b in zip(got, want)) / (1 if case["exact"] else scale))
        ok = worst == 0 if case["exact"] else worst <= 1e-4
        failed += not ok
        print(
            f"  {case['artifact']:28s} {'ok  ' if ok else 'FAIL'} {'max abs error' if case['exact'] else 'max error / max |want|'}"
            f" {worst:.3g}, run {median:.3f} ms (median of 20)"
        )
    print(f"{'all ran cases match' if not failed else f'{failed} case(s) FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("bundle", "check"):
        sys.exit(__doc__)
    sys.exit(bundle(Path(sys.argv[2])) if sys.argv[1] == "bundle" else check(Path(sys.argv[2])))
