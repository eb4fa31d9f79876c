#!/usr/bin/env python3
"""GPU benchmark: cold / warm first run, steady run, copies and output error per model, device, precision.

Every artifact runs through the C++ runner tvmgen-run, each start a fresh process:

  cold first run   the first inference of a process whose OpenCL kernel cache (TVMGEN_OPENCL_CACHE_DIR),
                   Vulkan pipeline cache (TVMGEN_VULKAN_CACHE_DIR) and driver caches (PoCL's POCL_CACHE_DIR,
                   NVIDIA's CUDA_CACHE_PATH and __GL_SHADER_DISK_CACHE_PATH, Mesa's MESA_SHADER_CACHE_DIR)
                   are empty: the kernels' programs (Vulkan: pipelines) start building when the model loads
                   and the first run waits for what is left, so most of their compile lands here
                   (tvmgen-run --prepare would move OpenCL's out)
  warm first run   the same, with the caches the cold start filled
  init             VM initialisation with OpenCL context / CUDA context creation (median of all starts)
  kernels          programs (up to 8 kernels each) built from source in a cold start (by this process or its
                   helper processes, TVMGEN_OPENCL_BUILD_PROCESSES) / loaded from tvmgen's cache in a warm
                   one; Vulkan: pipelines created without / with tvmgen's pipeline cache
  steady           median of --runs timed runs (after one warm-up) in one warm process; "run" waits for
                   the kernels; copy-in / copy-out are the host<->device copies (medians)
  max abs err      against the CPU (LLVM) build of the same model, on one fixed random input (seed 0)

Rows: each model x device (cpu for reference; opencl, the generic GPU family, always; opencl-adreno
with --gpu-family adreno and/or desktop; cuda with --cuda; vulkan with --vulkan) x precision (fp32; fp16 too with --precision fp16). A row
whose build or run fails says why and the benchmark goes on.

Two phases, since the GPU machine has no TVM Python package (python3 + numpy only):

    # here (TVM): compile everything, the CPU reference outputs and a self-contained runtime
    .venv/bin/python benchmarks/gpu.py --build-only --work gpuwork [--zoo [--models a,b]] [--cuda] ...
    # on the GPU machine (python3 + numpy): run all that the work directory holds, print the table
    python3 benchmarks/gpu.py --run-only --work gpuwork [--repeat 3] [--runs 20] [--json out.json]
    # both, here (PoCL)
    .venv/bin/python benchmarks/gpu.py [--quick]
    # a runtime setting against the default: cold first runs interleaved over rounds (GPU machine)
    python3 benchmarks/gpu.py --run-only --work gpuwork --compare cap16:TVMGEN_OPENCL_MAX_PROGRAMS=16 --rounds 6

The --run-only path imports neither tvm nor tvmgen. The OpenCL library comes from the environment
(TVMGEN_OPENCL_LIBRARY, OCL_ICD_VENDORS ... are passed through). TVM 0.27 keeps CUDA kernels as source
in the library and compiles them when it is loaded, through a Python hook; for the C++ runner the build
phase compiles them here with nvcc (--cuda-arch) and carries a small library that serves them
(runtime/lib/libtvmgen_cuda_kernels.so, preloaded for cuda rows).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

import benchlib

HERE = Path(__file__).resolve().parent
PLAN = "plan.json"
WIDTH = 100  # the status column: longer errors are printed in full below the table
STATS = re.compile(r"tvmgen-(?:opencl|vulkan): cache (\{.*\})")
PLATFORM = re.compile(r"tvmgen-opencl: (.*)")
VULKAN_DEVICE = re.compile(r"tvmgen-vulkan: (device .*)")
VULKAN_COMMANDS = re.compile(r"tvmgen-vulkan: commands (\{.*\})")
RUNTIME_LIBS = ("libtvmgen_runtime.so", "libtvm_runtime.so", "libtvm_ffi.so", "libtvmgen_opencl.so")
OPTIONAL_LIBS = ("libtvmgen_vulkan.so",)  # built where the Vulkan headers are
CUDA_SHIM = "libtvmgen_cuda_kernels.so"

# Registers tvm_callback_cuda_compile in a process without TVM's Python package: the CUDA module loader
# of libtvm_runtime_cuda calls it with the kernels' CUDA source when the library is loaded; this returns
# the binary nvcc made from that source in the build phase ($TVMGEN_CUDA_KERNELS_DIR/<fnv1a-64>.fatbin).
CUDA_SHIM_SOURCE = r"""
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
namespace ffi = tvm::ffi;
static ffi::Bytes Serve(ffi::String source) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < source.size(); ++i) { h ^= static_cast<unsigned char>(source.data()[i]); h *= 1099511628211ULL; }
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx.fatbin", static_cast<unsigned long long>(h));
  const char* dir = std::getenv("TVMGEN_CUDA_KERNELS_DIR");
  std::string path = std::string(dir ? dir : ".") + "/" + name;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    TVM_FFI_THROW(RuntimeError) << "no precompiled CUDA kernels for this library: " << path
                                << " (benchmarks/gpu.py --build-only --cuda compiles them)";
  }
  std::stringstream s;
  s << f.rdbuf();
  return ffi::Bytes(s.str());
}
namespace {
struct Registration {
  Registration() { ffi::Function::SetGlobal("tvm_callback_cuda_compile", ffi::Function::FromTyped(Serve), true); }
} registration;
}  // namespace
"""


def fnv1a(data: bytes) -> str:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def log(msg: str) -> None:
    benchlib.progress(msg)


def variants(args) -> list[dict]:
    """The rows per model: cpu (the reference), then the GPU devices asked for, in each precision."""
    precisions = ["fp32"] + (["fp16"] if "fp16" in args.precision.split(",") else [])
    gpus = [("opencl", "generic")]
    for family in args.gpu_family.split(","):
        if family in ("adreno", "desktop"):
            gpus.append(("opencl", family))
        elif family != "generic":
            raise SystemExit(f"--gpu-family: unknown family {family!r} (generic, adreno, desktop)")
    if args.cuda:
        gpus.append(("cuda", None))
    if args.vulkan:
        gpus.append(("vulkan", None))
    out = [] if args.no_cpu else [{"id": "cpu", "device": "cpu", "family": None, "precision": "fp32"}]
    for device, family in gpus:
        for p in precisions:
            vid = device + (f"-{family}" if family and family != "generic" else "") + ("" if p == "fp32" else f"-{p}")
            out.append({"id": vid, "device": device, "family": family, "precision": p})
    return out


def label(v: dict) -> str:
    return v["device"] + (f" ({v['family']})" if v.get("family") and v["family"] != "generic" else "")


# =========================================================================== build phase (TVM here)


def _last_error(text: str) -> str:
    """A failed command's last "error:" line (tvmgen's, with the line after it: the cause), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    at = [i for i, ln in enumerate(lines) if ln.lower().startswith("error:") or "Error:" in ln[:40]]
    if not at:
        return (lines or ["?"])[-1][:300]
    return " | ".join(lines[at[-1] : at[-1] + 2]).removeprefix("error: ")[:300]


# run in a child: tvmgen compile with the CUDA target's arch set, dumping each CUDA module's source
_CUDA_COMPILE = r"""
import sys, json, pathlib
arch, dump = sys.argv[1], pathlib.Path(sys.argv[2])
from tvmgen.compiler.targets import platforms
from tvmgen.compiler import build
_orig = platforms.target_dict
def target_dict(platform, device, gpu_family="generic"):
    d = _orig(platform, device, gpu_family)
    return {**d, "arch": arch} if device == "cuda" else d
platforms.target_dict = build.target_dict = target_dict
import tvm
from tvm import relax
_build = relax.build
def dumping_build(*a, **kw):
    ex = _build(*a, **kw)
    seen, n = set(), 0
    def walk(m):
        nonlocal n
        if id(m) in seen: return
        seen.add(id(m))
        if m.kind == "cuda":
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"k{n}.cu").write_text(m.inspect_source(""))
            n += 1
        for i in m.imports: walk(i)
    walk(ex.mod)
    return ex
relax.build = dumping_build
from tvmgen.cli import main
sys.argv = ["tvmgen", *sys.argv[3:]]
main()
"""


def _compile(source: str, flags: list[str], v: dict, out: Path, work: Path, args) -> dict:
    """One `tvmgen compile` (a child process); {"ok", "error", "compile_s"}."""
    cmd = ["compile", source, "--platform", "host", "--device", v["device"], "-o", str(out), "--force", *flags]
    if v["family"] and v["device"] == "opencl":
        cmd += ["--gpu-family", v["family"]]
    if v["precision"] != "fp32":
        cmd += ["--precision", v["precision"]]
    env = dict(os.environ, COLUMNS="200")
    dump = work / "build" / f"cuda-src-{out.name}"
    if v["device"] == "cuda":
        shutil.rmtree(dump, ignore_errors=True)
        argv = [sys.executable, "-c", _CUDA_COMPILE, args.cuda_arch, str(dump), *cmd]
    else:
        argv = [sys.executable, "-m", "tvmgen", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work / "build")
    res = {"compile_s": round(time.perf_counter() - t0, 1)}
    if proc.returncode != 0 or not (out / "manifest.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        return {**res, "error": "build failed: " + _last_error(proc.stdout + "\n" + proc.stderr)}
    if v["device"] == "cuda":
        err = _nvcc_kernels(dump, out, work / "cuda-kernels", args.cuda_arch)
        if err:
            return {**res, "error": "build failed: " + err}
    _prune(out)
    return res


def _nvcc_kernels(dump: Path, artifact: Path, dest: Path, arch: str) -> str | None:
    """Compile each dumped CUDA module with nvcc into DEST/<fnv1a(source)>.fatbin; an error or None."""
    nvcc = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
    if nvcc is None:
        return "nvcc not found (the CUDA kernels are compiled here, for --cuda-arch)"
    sources = sorted(dump.glob("*.cu"))
    if not sources:
        return "no CUDA module in the build"
    lib = b"".join(p.read_bytes() for p in artifact.glob("*.so"))
    dest.mkdir(parents=True, exist_ok=True)
    num = arch.split("_", 1)[1]
    for src in sources:
        code = src.read_bytes()
        if code not in lib:  # what the loader will hand the hook must be this exact source
            return f"the CUDA source of {src.name} is not stored verbatim in the library"
        target = dest / f"{fnv1a(code)}.fatbin"
        if target.is_file():
            continue
        proc = subprocess.run(
            [
                nvcc,
                "--fatbin",
                "-O3",
                "-gencode",
                f"arch=compute_{num},code=sm_{num}",
                "-gencode",
                f"arch=compute_{num},code=compute_{num}",
                "-o",
                str(target),
                str(src),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            target.unlink(missing_ok=True)
            return "nvcc: " + _last_error(proc.stderr or proc.stdout)
    return None


def _prune(artifact: Path) -> None:
    """Keep only what the runner needs: manifest.json and the files it lists (no .o, kernels.json ...)."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    keep = {"manifest.json", *manifest.get("files", {})}
    for p in artifact.iterdir():
        if p.name not in keep:
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def _runtime(work: Path, args) -> dict:
    """WORK/runtime: tvmgen-run and the libraries it loads, copied from a built runtime prefix."""
    from tvmgen.runtime import runtime_build

    prefix = Path(args.runtime) if args.runtime else runtime_build.cached_build("host")
    rt = work / "runtime"
    (rt / "bin").mkdir(parents=True, exist_ok=True)
    (rt / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copy2(prefix / "bin" / "tvmgen-run", rt / "bin" / "tvmgen-run")
    if (prefix / "bin" / "tvmgen-clbuild").is_file():  # OpenCL's build helper (NVIDIA's cold start)
        shutil.copy2(prefix / "bin" / "tvmgen-clbuild", rt / "bin" / "tvmgen-clbuild")
    for name in RUNTIME_LIBS:
        shutil.copy2(prefix / "lib" / name, rt / "lib" / name)
    for name in OPTIONAL_LIBS:
        if (prefix / "lib" / name).is_file():
            shutil.copy2(prefix / "lib" / name, rt / "lib" / name)
        elif args.vulkan and name == "libtvmgen_vulkan.so":
            sys.exit(f"gpu.py: {prefix}/lib has no {name} (the runtime build needs the Vulkan headers: libvulkan-dev)")
    info = {"prefix": str(prefix), "cuda": False}
    if args.cuda:
        info["cuda"] = _cuda_runtime(rt / "lib")
    return info


def _cuda_runtime(lib: Path) -> bool | str:
    """libtvm_runtime_cuda.so, the libcudart it needs, and the kernel-serving library, into LIB."""
    tvm_lib = Path(runtime_tvm_prebuilt()) / "tvm" / "lib"
    cuda = tvm_lib / "libtvm_runtime_cuda.so"
    if not cuda.is_file():
        return "this apache-tvm wheel has no libtvm_runtime_cuda.so"
    shutil.copy2(cuda, lib / cuda.name)
    ldd = subprocess.run(["ldd", str(cuda)], capture_output=True, text=True).stdout
    for m in re.finditer(r"(libcudart\.so\S*) => (\S+)", ldd):  # RUNPATH $ORIGIN: found beside it
        shutil.copy2(Path(m.group(2)).resolve(), lib / m.group(1))
    from tvmgen.runtime import runtime_build

    ffi = Path(runtime_build.tvm_prebuilt("host")) / "tvm_ffi"
    src = lib.parent.parent / "build" / "cuda_kernels.cc"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(CUDA_SHIM_SOURCE)
    proc = subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O2",
            "-shared",
            "-fPIC",
            f"-I{ffi / 'include'}",
            str(src),
            "-o",
            str(lib / CUDA_SHIM),
            f"-L{ffi / 'lib'}",
            "-ltvm_ffi",
            "-Wl,-rpath,$ORIGIN",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return "building the CUDA kernel library failed: " + _last_error(proc.stderr)
    return True


def runtime_tvm_prebuilt() -> Path:
    from tvmgen.runtime import runtime_build

    return Path(runtime_build.tvm_prebuilt("host"))


def _model_sources(args, work: Path) -> list[tuple[str, str, list[str]]]:
    """(name, what `tvmgen compile` takes, extra flags) per model."""
    if not args.zoo:
        return [(args.model, args.model, [])]
    import zoo  # torch, keras ... only here

    names = benchlib.pick_models(args.models or ",".join(zoo.MODELS), zoo.MODELS, lambda m: sys.exit(f"gpu.py: {m}"))
    out = []
    src = work / "build" / "models"
    src.mkdir(parents=True, exist_ok=True)
    for name in names:
        model = next((p for p in src.glob(f"{name}.*") if p.suffix in (".onnx", ".tflite")), None)
        if model is None:
            log(f"{name}: building the model file (zoo.py) ...")
            proc = subprocess.run(
                [sys.executable, str(HERE / "zoo.py"), "--build-only", name, "--keep", str(src)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                out.append((name, None, [_last_error(proc.stderr)]))
                continue
            model = next(p for p in src.glob(f"{name}.*") if p.suffix in (".onnx", ".tflite"))
        out.append((name, str(model), zoo.build_flags(name)))
    return out


def build_all(args, work: Path) -> None:
    """Compile every artifact, the CPU reference outputs and the runtime into WORK; write WORK/plan.json."""
    import numpy as np

    (work / "build").mkdir(parents=True, exist_ok=True)
    log("runtime: tvmgen-run and its libraries ...")
    rt = _runtime(work, args)
    plan = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cuda_arch": args.cuda_arch if args.cuda else None,
        "runtime": rt,
        "models": [],
        "rows": [],
    }
    vs = variants(args)
    if "cpu" not in [v["id"] for v in vs]:
        vs_build = [{"id": "cpu", "device": "cpu", "family": None, "precision": "fp32"}, *vs]
    else:
        vs_build = vs
    for name, source, flags in _model_sources(args, work):
        slug = name.replace("builtin:", "builtin-")
        model = {"name": name, "slug": slug}
        plan["models"].append(model)
        if source is None:
            for v in vs:
                plan["rows"].append({"model": name, **v, "error": "build failed: model file: " + flags[0]})
            continue
        for v in vs_build:
            art = work / "artifacts" / f"{slug}--{v['id']}"
            stamp = art.parent / f"{art.name}.build.json"
            key = {"source": source, "flags": flags, "variant": v, "cuda_arch": args.cuda_arch}
            prev = json.loads(stamp.read_text()) if stamp.is_file() else None
            if prev and prev.get("key") == key and ("error" in prev or (art / "manifest.json").is_file()):
                res = prev["result"]
                log(f"{name} {v['id']}: reused")
            else:
                log(f"{name} {v['id']}: compiling ...")
                res = _compile(source, flags, v, art, work, args)
                stamp.write_text(json.dumps({"key": key, "result": res}))
                if "error" in res:
                    log(f"  {res['error']}")
            row = {"model": name, **v, **res}
            if "error" not in res:
                row["artifact"] = str(art.relative_to(work))
                row["size_mb"] = round(sum(p.stat().st_size for p in art.iterdir()) / 2**20, 2)
            if v["id"] == "cpu":
                model["cpu_error"] = res.get("error")
                if "error" not in res:
                    model.update(_reference(art, work / "ref" / slug, np))
                if v not in vs:  # built for the reference only
                    shutil.rmtree(art, ignore_errors=True)
                    continue
            plan["rows"].append(row)
    (work / PLAN).write_text(json.dumps(plan, indent=2) + "\n")
    shutil.rmtree(work / "build", ignore_errors=True)  # model files, CUDA sources, the shim's source
    total = _size_mb(work)
    plan["size_mb"] = round(total, 1)
    (work / PLAN).write_text(json.dumps(plan, indent=2) + "\n")
    log(
        f"work directory {work}: {total:.1f} MB (carry it whole: runtime/, artifacts/, ref/, "
        f"{'cuda-kernels/, ' if args.cuda else ''}plan.json)"
    )
    if total > 64:
        log(f"note: {total:.1f} MB is over a 64 MiB carry limit; split the models (--models) across work dirs")


def _reference(cpu_art: Path, dest: Path, np) -> dict:
    """Seeded inputs and the CPU build's outputs as .npy under DEST (paths relative to the work dir)."""
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel, output_file_name

    dest.mkdir(parents=True, exist_ok=True)
    m = HostModel(cpu_art)
    inputs = random_inputs(m.manifest.inputs, seed=0)
    outs = m.run(inputs)
    work = dest.parent.parent
    ins = []
    for k, (n, a) in enumerate(inputs.items()):
        np.save(dest / f"in{k}.npy", np.asarray(a, order="C"))  # ascontiguousarray makes a 0-d input [1]
        ins.append({"name": n, "file": str((dest / f"in{k}.npy").relative_to(work))})
    refs = []
    for k, (o, a) in enumerate(zip(m.manifest.outputs, outs)):
        np.save(dest / f"out{k}.npy", np.asarray(a))
        name = o["name"] if isinstance(o, dict) else o.name
        refs.append(
            {"name": name, "file": output_file_name(name), "ref": str((dest / f"out{k}.npy").relative_to(work))}
        )
    return {"inputs": ins, "outputs": refs}


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


# =========================================================================== run phase (python3 + numpy)


def _start(
    runner: Path, art: Path, env: dict, ins: list[str], warmup: int, runs: int, tmp: Path, out_dir: Path | None = None
) -> dict:
    """One tvmgen-run process: its timings JSON plus wall time, cache counters and platform line."""
    timings = tmp / "timings.json"
    timings.unlink(missing_ok=True)
    cmd = [str(runner), str(art), *ins, "--warmup", str(warmup), "--repeat", str(runs), "--timings", str(timings)]
    if out_dir is not None:
        cmd += ["-o", str(out_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0 or not timings.is_file():
        raise RuntimeError(_run_error(proc))
    t = json.loads(timings.read_text())
    t["wall_ms"] = wall
    m = STATS.search(proc.stderr)
    t["cache"] = json.loads(m.group(1)) if m else None
    p = [
        ln
        for ln in (PLATFORM.match(x) for x in proc.stderr.splitlines())
        if ln and "cache {" not in ln.group(1) and "rebuil" not in ln.group(1) and "platform" in ln.group(1)
    ]
    t["platform_line"] = p[0].group(1) if p else None
    v = VULKAN_DEVICE.search(proc.stderr)
    if v:
        t["vulkan_device"] = v.group(1)
    c = VULKAN_COMMANDS.search(proc.stderr)
    if c:
        t["vulkan_commands"] = json.loads(c.group(1))
    return t


def _run_error(proc) -> str:
    """tvmgen-run's error (its "tvmgen-run: error:" line and the two after it), else its last line."""
    lines = [
        ln.strip()
        for ln in proc.stderr.splitlines()
        if ln.strip() and not ln.startswith(("tvmgen-opencl: cache", "tvmgen-vulkan: ")) and "Warning:" not in ln
    ]
    at = next((i for i, ln in enumerate(lines) if ln.startswith("tvmgen-run: error:")), None)
    if at is None:
        return (lines[-1] if lines else f"exit {proc.returncode}")[:400]
    return " | ".join(lines[at : at + 3]).replace("tvmgen-run: error: ", "")[:400]


def _fresh(*dirs: Path) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)


def _start_env(row: dict, work: Path, tmp: Path) -> tuple[dict, list[Path]]:
    """The environment of a row's starts (its caches under TMP, logs on) and those caches (emptied: a cold start)."""
    caches = [tmp / "kernel-cache", tmp / "pocl-cache", tmp / "nv-cache", tmp / "vk-cache", tmp / "nv-gl-cache"]
    caches.append(tmp / "mesa-cache")
    env = dict(
        os.environ,
        TVMGEN_OPENCL_CACHE_DIR=str(caches[0]),
        TVMGEN_OPENCL_LOG="1",
        POCL_CACHE_DIR=str(caches[1]),
        CUDA_CACHE_PATH=str(caches[2]),
        TVMGEN_VULKAN_CACHE_DIR=str(caches[3]),
        TVMGEN_VULKAN_LOG="1",
        __GL_SHADER_DISK_CACHE_PATH=str(caches[4]),  # NVIDIA's Vulkan driver's own cache
        MESA_SHADER_CACHE_DIR=str(caches[5]),  # lavapipe's
    )
    if row["device"] == "cuda":
        shim = work / "runtime" / "lib" / CUDA_SHIM
        env["LD_PRELOAD"] = ":".join(x for x in (str(shim), os.environ.get("LD_PRELOAD", "")) if x)
        env["TVMGEN_CUDA_KERNELS_DIR"] = str(work / "cuda-kernels")
    return env, caches


def _inputs(model: dict, work: Path) -> list[str]:
    return [a for i in model.get("inputs", []) for a in ("-i", f"{i['name']}={work / i['file']}")]


def run_row(row: dict, model: dict, work: Path, args, runner: Path) -> dict:
    import numpy as np

    art = work / row["artifact"]
    tmp = work / "run" / Path(row["artifact"]).name
    _fresh(tmp)
    env, caches = _start_env(row, work, tmp)
    ins = _inputs(model, work)
    out = {"cold": [], "warm": []}
    for r in range(args.repeat):
        _fresh(*caches)
        log(f"  cold start {r + 1}/{args.repeat} ...")
        out["cold"].append(_start(runner, art, env, ins, 0, 1, tmp))
    for r in range(args.repeat):
        log(f"  warm start {r + 1}/{args.repeat} ...")
        out["warm"].append(_start(runner, art, env, ins, 0, 1, tmp))
    log(f"  steady: {args.runs} runs ...")
    out["steady"] = _start(runner, art, env, ins, 1, args.runs, tmp, tmp / "out")
    if row["device"] == "vulkan":  # the same without recorded runs: the VM launches every run's kernels
        log(f"  steady, the VM every run (TVMGEN_VULKAN_REPLAY=0): {args.runs} runs ...")
        out["steady_vm"] = _start(runner, art, {**env, "TVMGEN_VULKAN_REPLAY": "0"}, ins, 1, args.runs, tmp)
    errs = []
    for o in model.get("outputs", []):
        a = np.load(tmp / "out" / o["file"]).astype(np.float64)
        e = np.load(work / o["ref"]).astype(np.float64)
        errs.append(float(np.max(np.abs(a - e))) if a.size else 0.0)
    out["max_abs_error"] = max(errs) if errs else None
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _load_plan(work: Path) -> dict:
    plan_file = work / PLAN
    if not plan_file.is_file():
        sys.exit(f"gpu.py: {plan_file} not found: make it with --build-only --work {work}")
    return json.loads(plan_file.read_text())


def run_all(args, work: Path) -> int:
    plan = _load_plan(work)
    runner = work / "runtime" / "bin" / "tvmgen-run"
    models = {m["name"]: m for m in plan["models"]}
    results = []
    for k, row in enumerate(plan["rows"], 1):
        log(f"[{k}/{len(plan['rows'])}] {row['model']} {row['id']}")
        res = dict(row)
        if "error" not in row:
            try:
                res.update(run_row(row, models[row["model"]], work, args, runner))
            except Exception as e:
                res["error"] = f"run failed: {e}"
                log(f"  {res['error']}")
        results.append(res)
    print(report(plan, results, args))
    if args.json:
        benchlib.write_json(
            args.json,
            "gpu",
            {
                "plan": {k: v for k, v in plan.items() if k != "rows"},
                "rows": results,
                "repeat": args.repeat,
                "runs": args.runs,
                "machine": _machine(),
            },
        )
    return 0


def _compare_variants(specs: list[str], error) -> list[tuple[str, dict]]:
    """--compare NAME:VAR=VALUE[,VAR=VALUE...] -> [("default", {}), (NAME, {VAR: VALUE, ...}), ...]."""
    out: list[tuple[str, dict]] = [("default", {})]
    for spec in specs:
        name, sep, assigns = spec.partition(":")
        pairs = [a.partition("=") for a in assigns.split(",") if a]
        if not sep or not name or not pairs or any(not k or not eq for k, eq, _ in pairs):
            error(
                f"--compare takes NAME:VAR=VALUE[,VAR=VALUE...], e.g. cap16:TVMGEN_OPENCL_MAX_PROGRAMS=16; not {spec!r}"
            )
        if name in [n for n, _ in out]:
            error(f"--compare: the name {name!r} is used twice")
        out.append((name, {k: v for k, _, v in pairs}))
    return out


def compare_cold_starts(args, work: Path, variants: list[tuple[str, dict]]) -> int:
    """Cold first runs of each GPU row under each variant's environment, interleaved: every round starts each
    row once under every variant, in an order rotated by the round, so a drift of the machine (shared, noisy)
    falls on all of them alike. Each start is logged as measured; the table gives medians and each variant's
    ratio to the default."""
    plan = _load_plan(work)
    runner = work / "runtime" / "bin" / "tvmgen-run"
    models = {m["name"]: m for m in plan["models"]}
    wanted = set(args.models.split(",")) if args.models else None
    rows = [
        r
        for r in plan["rows"]
        if r["device"] != "cpu" and "error" not in r and (wanted is None or r["model"] in wanted)
    ]
    if not rows:
        sys.exit(
            f"gpu.py: no GPU row of {work / PLAN} to compare" + (f" among --models {args.models}" if wanted else "")
        )
    starts: dict[tuple[str, str, str], list[dict]] = {}
    for rnd in range(args.rounds):
        for row in rows:
            k = rnd % len(variants)
            for name, extra in variants[k:] + variants[:k]:
                tmp = work / "run" / f"{Path(row['artifact']).name}--{name}"
                env, caches = _start_env(row, work, tmp)
                _fresh(tmp, *caches)
                try:
                    t = _start(
                        runner, work / row["artifact"], {**env, **extra}, _inputs(models[row["model"]], work), 0, 1, tmp
                    )
                except RuntimeError as e:  # e.g. a setting the runtime refuses: say which start, and why
                    sys.exit(f"gpu.py: {row['model']} {row['id']} under {name}: tvmgen-run failed: {e}")
                shutil.rmtree(tmp, ignore_errors=True)
                starts.setdefault((row["model"], row["id"], name), []).append(t)
                log(
                    f"round {rnd + 1}/{args.rounds} {row['model']} {row['id']} {name}: cold first run "
                    f"{t['first_run_ms']:.0f} ms"
                )
    body: list[list[str] | None] = []
    for row in rows:
        base = _med([t["first_run_ms"] for t in starts[(row["model"], row["id"], "default")]])
        for name, extra in variants:
            ts = starts[(row["model"], row["id"], name)]
            xs = [t["first_run_ms"] for t in ts]
            here = _med([(t.get("cache") or {}).get("source_builds") for t in ts])
            helpers = _med([(t.get("cache") or {}).get("helper_builds") for t in ts])
            env_text = ",".join(f"{k}={v}" for k, v in extra.items()) or "-"
            ratio = "-" if name == "default" else benchlib.fmt_ratio(benchlib.ratio(_med(xs), base))
            body.append(
                [
                    row["model"],
                    row["id"],
                    name,
                    env_text,
                    str(len(xs)),
                    _fmt(_med(xs)),
                    f"{_fmt(min(xs))}-{_fmt(max(xs))}",
                    ratio,
                    "-" if here is None else f"{here:g} / {helpers or 0:g}",
                ]
            )
        body.append(None)
    header = [
        "model",
        "device",
        "variant",
        "environment",
        "starts",
        "cold first run ms",
        "range",
        "x default",
        "programs built here / by helpers",
    ]
    print(
        f"GPU cold starts compared: {args.rounds} rounds, variants interleaved (each round in a rotated order); "
        "medians; cold: every cache emptied before each start"
    )
    print(benchlib.table(header, body[:-1], {4, 5, 6, 7, 8}))
    if args.json:
        benchlib.write_json(
            args.json,
            "gpu-compare",
            {
                "variants": dict(variants),
                "rounds": args.rounds,
                "starts": [{"model": m, "id": i, "variant": v, "runs": ts} for (m, i, v), ts in starts.items()],
                "machine": _machine(),
            },
        )
    return 0


def _machine() -> dict:
    import platform

    cpu = None
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    gpu = None
    if shutil.which("nvidia-smi"):
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        gpu = p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(), "nvidia_smi": gpu}


def _med(xs):
    xs = [x for x in xs if x is not None]
    return benchlib.median(xs) if xs else None


def _fmt_cold_warm(r) -> str:
    """cold / warm first run: one decimal, two below 1 (a CPU row's, about 1, can be 0.04 on a loaded
    machine: 0.0x would read as nothing)."""
    return benchlib.fmt_ratio(r, 1 if r is None or r >= 1 else 2)


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 10 else f"{x:.3f}"


COLUMNS = [  # the table's
    "model",
    "device",
    "precision",
    "cold first run ms",
    "warm first run ms",
    "cold/warm",
    "init ms",
    "kernels built / hits",
    "steady ms",
    "copy-in ms",
    "copy-out ms",
    "steady x cpu",
    "max abs err",
    "status",
]


def report(plan: dict, results: list[dict], args) -> str:
    steady = {(r["model"], r["id"]): r["steady"]["run_ms"]["median"] for r in results if "steady" in r}
    body, notes = [], []
    for r in results:
        cells = [r["model"], label(r), r["precision"]]
        if "error" in r:
            short = r["error"] if len(r["error"]) <= WIDTH else r["error"][: WIDTH - 6] + f" ... [{len(notes) + 1}]"
            if len(r["error"]) > WIDTH:
                notes.append(f"[{len(notes) + 1}] {r['model']} {r['id']}: {r['error']}")
            body.append(cells + ["-"] * 10 + [short])
            continue
        cold = _med(s["first_run_ms"] for s in r["cold"])
        warm = _med(s["first_run_ms"] for s in r["warm"])
        init = _med(s["init_ms"] for s in r["cold"] + r["warm"])
        kern = "-"
        if r["cold"][0].get("cache") and r["warm"][0].get("cache"):
            c, w = r["cold"][0]["cache"], r["warm"][0]["cache"]
            built = (c["source_builds"] or c["misses"]) + c.get("helper_builds", 0)  # helpers': loaded as hits
            kern = f"{built} / {w.get('pipelines_cached', w['hits'])}"
        st = r["steady"]
        run = st["run_ms"]["median"]
        cpu = steady.get((r["model"], "cpu"))
        err = r["max_abs_error"]
        body.append(
            cells
            + [
                _fmt(cold),
                _fmt(warm),
                _fmt_cold_warm(benchlib.ratio(cold, warm)),
                _fmt(init),
                kern,
                _fmt(run),
                _fmt(st["copy_in_ms"]["median"]),
                _fmt(st["copy_out_ms"]["median"]),
                "-" if r["id"] == "cpu" else benchlib.fmt_ratio(benchlib.ratio(run, cpu)),
                "-" if err is None else f"{err:.1e}",
                "ok",
            ]
        )
    lines = [
        f"GPU benchmark: tvmgen-run, fresh process per start; cold/warm: median of {args.repeat} starts each "
        f"(first inference); steady: median of {args.runs} runs after 1 warm-up; max abs err vs the CPU build"
    ]
    platforms = sorted({s["platform_line"] for r in results for s in r.get("cold", []) if s.get("platform_line")})
    for p in platforms:
        lines.append(f"OpenCL: {p}")
    for d in sorted({s["vulkan_device"] for r in results for s in r.get("cold", []) if s.get("vulkan_device")}):
        lines.append(f"Vulkan: {d}")
    m = _machine()
    if m["nvidia_smi"] or plan.get("cuda_arch"):
        lines.append(f"CUDA: kernels built for {plan.get('cuda_arch')}; nvidia-smi: {m['nvidia_smi'] or 'not found'}")
    lines.append(
        f"host: {m['cpu']} ({m['cpus']} CPUs); work directory built {plan.get('created')}, "
        f"{plan.get('size_mb', '?')} MB"
    )
    lines.append(benchlib.table(COLUMNS, body, set(range(3, 13))))
    extra = []
    for model in plan["models"]:
        for p in ("fp32", "fp16"):
            sfx = "" if p == "fp32" else f"-{p}"
            o, c = steady.get((model["name"], "opencl" + sfx)), steady.get((model["name"], "cuda" + sfx))
            v = steady.get((model["name"], "vulkan" + sfx))
            if o and c:
                extra.append(f"{model['name']} {p}: opencl / cuda steady = {o / c:.2f}x")
            if v and o:
                extra.append(f"{model['name']} {p}: vulkan / opencl steady = {v / o:.2f}x")
            if v and c:
                extra.append(f"{model['name']} {p}: vulkan / cuda steady = {v / c:.2f}x")
            vk = next((r for r in results if r["model"] == model["name"] and r["id"] == "vulkan" + sfx), None)
            if v and vk and vk.get("steady_vm"):
                vm = vk["steady_vm"]["run_ms"]["median"]
                rec = (vk["steady"].get("vulkan_commands") or {}).get("recorded_runs") or {}
                how = (
                    f"{rec['replays']} runs replayed"
                    if rec.get("replays")
                    else f"not recorded: {rec.get('last_failure') or 'no recorded runs in this runtime'}"
                )
                extra.append(
                    f"{model['name']} {p}: vulkan steady {_fmt(v)} ms ({how}); the VM every run "
                    f"(TVMGEN_VULKAN_REPLAY=0) {_fmt(vm)} ms: recorded / VM = {v / vm:.2f}x"
                )
    lines += extra + notes
    return "\n".join(lines)


# =========================================================================== main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--zoo", action="store_true", help="the zoo's models (benchmarks/zoo.py) instead of builtin:mobilenet"
    )
    ap.add_argument("--models", help="with --zoo: comma-separated subset (with --compare: the rows of these models)")
    ap.add_argument(
        "--model",
        default="builtin:mobilenet",
        help="without --zoo: the built-in model to measure (builtin:mobilenet, or builtin:tiny for a quick check)",
    )
    ap.add_argument(
        "--gpu-family",
        default="generic",
        help="comma-separated: adreno and/or desktop add opencl rows compiled with that --gpu-family",
    )
    ap.add_argument("--precision", default="fp32", help="fp16: add rows compiled with --precision fp16")
    ap.add_argument("--cuda", action="store_true", help="add cuda rows (nvcc compiles the kernels here)")
    ap.add_argument("--cuda-arch", default="sm_90", help="with --cuda: the GPU architecture [sm_90: H100/H200]")
    ap.add_argument("--vulkan", action="store_true", help="add vulkan rows (tvmgen's GLSL/SPIR-V kernels)")
    ap.add_argument("--no-cpu", action="store_true", help="no cpu rows (the CPU build is still the reference)")
    ap.add_argument("--repeat", type=int, default=3, help="cold starts and warm starts, each [3]")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of the steady process [20]")
    ap.add_argument("--quick", action="store_true", help="builtin model, 1 start each, 1 timed run")
    ap.add_argument("--work", type=Path, help="work directory (kept; reused by later builds)")
    ap.add_argument("--runtime", help="an installed runtime prefix (bin/tvmgen-run, lib/) instead of building one")
    ap.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE[,...]",
        help="with --run-only: instead of the table, compare the GPU rows' cold first runs under this environment "
        "against the default, interleaved over --rounds (repeatable; e.g. cap16:TVMGEN_OPENCL_MAX_PROGRAMS=16)",
    )
    ap.add_argument("--rounds", type=int, default=5, help="with --compare: cold starts of each row and variant [5]")
    phase = ap.add_mutually_exclusive_group()
    phase.add_argument("--build-only", action="store_true", help="compile into --work (needs TVM)")
    phase.add_argument("--run-only", action="store_true", help="run what --work holds (python3 + numpy only)")
    benchlib.json_option(ap)
    args = ap.parse_args()
    if args.quick:
        args.zoo, args.repeat, args.runs = False, 1, 1
    if not args.model.startswith("builtin:"):
        ap.error(
            f"--model takes a built-in model (builtin:mobilenet, builtin:tiny), not {args.model}; --zoo for others"
        )
    if (args.build_only or args.run_only) and not args.work:
        ap.error("--build-only and --run-only need --work DIR")
    if args.compare and not args.run_only:
        ap.error("--compare runs what a work directory holds: add --run-only --work DIR")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    variants = _compare_variants(args.compare, ap.error)
    if args.cuda and not re.fullmatch(r"sm_\d+[a-z]?", args.cuda_arch):
        ap.error("--cuda-arch takes sm_XX, e.g. sm_90")
    import tempfile

    work = (args.work or Path(tempfile.mkdtemp(prefix="tvmgen-gpu-bench-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    if not args.run_only:
        build_all(args, work)
    if args.build_only:
        return 0
    if args.compare:
        return compare_cold_starts(args, work, variants)
    try:
        return run_all(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
