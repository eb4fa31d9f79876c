"""gpu.py's build phase (TVM here): every artifact the rows need, the CPU reference outputs, and a runtime
the work directory carries to the GPU machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import benchlib
from gpu_run import CUDA_SHIM, PLAN, log, variants

HERE = Path(__file__).resolve().parent
RUNTIME_LIBS = ("libtvmgen_runtime.so", "libtvm_runtime.so", "libtvm_ffi.so", "libtvmgen_opencl.so")
OPTIONAL_LIBS = ("libtvmgen_vulkan.so",)  # built where the Vulkan headers are

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
    table = out / "kernels.json"  # the largest work-group's needs, against the family's limits (compile's)
    if table.is_file():
        res["work_groups"] = json.loads(table.read_text()).get("work_groups")
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
    keep = {"manifest.json", *(Path(f).parts[0] for f in manifest.get("files", {}))}  # state/0.npy: keep state/
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
                    model.update(reference_outputs(art, work / "ref" / slug, np))
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


def reference_outputs(cpu_art: Path, dest: Path, np) -> dict:
    """Seeded inputs and the CPU build's outputs as .npy under DEST (paths relative to the work dir). A streaming
    model's state is held by the runtime from its initial values: the caller's own inputs and outputs of the
    first step."""
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel, output_file_name

    dest.mkdir(parents=True, exist_ok=True)
    m = HostModel(cpu_art)
    inputs = random_inputs(m.inputs, seed=0)
    outs = m.run(inputs)
    work = dest.parent.parent
    ins = []
    for k, (n, a) in enumerate(inputs.items()):
        np.save(dest / f"in{k}.npy", np.asarray(a, order="C"))  # ascontiguousarray makes a 0-d input [1]
        ins.append({"name": n, "file": str((dest / f"in{k}.npy").relative_to(work))})
    refs = []
    for k, (o, a) in enumerate(zip(m.outputs, outs)):
        np.save(dest / f"out{k}.npy", np.asarray(a))
        name = o["name"] if isinstance(o, dict) else o.name
        refs.append(
            {"name": name, "file": output_file_name(name), "ref": str((dest / f"out{k}.npy").relative_to(work))}
        )
    return {"inputs": ins, "outputs": refs}


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20
