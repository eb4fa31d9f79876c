"""runtime_overhead.py's native paths: the runtime it links against, the C++ and Java harnesses compiled
here and run on the host artifact, and the stripped sizes of what an app ships."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import benchlib
from benchlib import StepError, last_json

THREADS = 1
STRIP = {"host": "strip", "linux-aarch64": "aarch64-linux-gnu-strip"}

# A tiny harness over the C++ API (jni/include/tvmgen/runtime.h), timed like the Java and Python
# paths: std::chrono::steady_clock before SetInput, after it, after Run(), after GetOutput(); the
# four durations in nanoseconds go to a file as native int64.
CPP_HARNESS = r"""
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

// Usage: overhead_bench ARTIFACT WARMUP CALLS OUT.times INPUT.bin...
int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  auto ns = [](Clock::time_point a, Clock::time_point b) {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
  };
  try {
    auto model = tvmgen::Model::Load(argv[1]);
    int warmup = std::stoi(argv[2]), calls = std::stoi(argv[3]);
    size_t nin = model->inputs().size(), nout = model->outputs().size();
    std::vector<std::vector<char>> in(nin), out(nout);
    for (size_t k = 0; k < nin; ++k) {
      std::ifstream f(argv[5 + k], std::ios::binary);
      in[k].assign(std::istreambuf_iterator<char>(f), {});
    }
    for (size_t k = 0; k < nout; ++k) out[k].resize(model->outputs()[k].nbytes);
    std::vector<int64_t> t(4 * static_cast<size_t>(calls));
    for (int r = 0; r < warmup + calls; ++r) {
      auto t0 = Clock::now();
      for (size_t k = 0; k < nin; ++k) model->SetInput(static_cast<int>(k), in[k].data(), in[k].size());
      auto t1 = Clock::now();
      model->Run();
      auto t2 = Clock::now();
      for (size_t k = 0; k < nout; ++k) model->GetOutput(static_cast<int>(k), out[k].data(), out[k].size());
      auto t3 = Clock::now();
      if (r >= warmup) {
        size_t i = 4 * static_cast<size_t>(r - warmup);
        t[i] = ns(t0, t1); t[i + 1] = ns(t1, t2); t[i + 2] = ns(t2, t3); t[i + 3] = ns(t0, t3);
      }
    }
    std::ofstream f(argv[4], std::ios::binary);
    f.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * sizeof(int64_t)));
    std::printf("{\"arch\": \"%s\"}\n", tvmgen::RuntimeArch());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "overhead_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
"""

# A tiny harness over the Java API: per call, System.nanoTime() before setInput, after it, after
# run(), after getOutput(); the four durations go to a file as big-endian longs. One mode per JVM
# (buffer: Tensor / direct ByteBuffers; floats: float[]), so neither inherits the other's JIT state.
JAVA_HARNESS = r"""
import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import org.tvmgen.Model;
import org.tvmgen.Tensor;
import org.tvmgen.TensorInfo;

/** Usage: OverheadBench buffer|floats ARTIFACT WARMUP CALLS OUT_PREFIX INPUT.bin... */
public final class OverheadBench {
  public static void main(String[] args) throws IOException {
    String mode = args[0];
    String[] a = java.util.Arrays.copyOfRange(args, 1, args.length);
    String dir = a[0];
    int warmup = Integer.parseInt(a[1]);
    int calls = Integer.parseInt(a[2]);
    String prefix = a[3];
    List<String> modes = new ArrayList<String>();
    try (Model m = Model.load(dir)) {
      int nin = m.inputs().size();
      int nout = m.outputs().size();
      Tensor[] in = new Tensor[nin];
      float[][] inF = new float[nin][];
      boolean allFloat = true;
      for (int k = 0; k < nin; ++k) {
        TensorInfo info = m.inputs().get(k);
        byte[] bytes = Files.readAllBytes(Paths.get(a[4 + k]));
        in[k] = Tensor.allocate(info).copyFrom(bytes);
        allFloat &= info.isFloat32();
        inF[k] = info.isFloat32() ? in[k].toFloatArray() : null;
      }
      Tensor[] out = new Tensor[nout];
      float[][] outF = new float[nout][];
      for (int k = 0; k < nout; ++k) {
        out[k] = m.allocateOutput(k);
        allFloat &= m.outputs().get(k).isFloat32();
        outF[k] = new float[(int) m.outputs().get(k).elementCount()];
      }
      if (mode.equals("buffer")) {  // Tensor (direct ByteBuffers): the zero-copy path
        long[] t = time(m, warmup, calls, nin, k -> m.setInput(k, in[k]), nout, k -> m.getOutput(k, out[k]));
        write(t, prefix + "-buffer.times");
        modes.add("\"buffer\"");
        for (int k = 0; k < nout; ++k) {
          Files.write(Paths.get(prefix + "-out" + k + ".bin"), out[k].toByteArray());
        }
      } else if (!mode.equals("floats")) {
        throw new IllegalArgumentException("mode is buffer or floats, not " + mode);
      } else if (allFloat) {  // float[] in and out
        long[] t = time(m, warmup, calls, nin, k -> m.setInput(k, inF[k]), nout, k -> m.getOutput(k, outF[k]));
        write(t, prefix + "-floats.times");
        modes.add("\"floats\"");
      }
    }
    System.out.println("{\"java\": \"" + System.getProperty("java.version") + "\", \"vm\": \""
        + System.getProperty("java.vm.name") + "\", \"arch\": \"" + Model.runtimeArch() + "\", \"modes\": "
        + modes + "}");
  }

  /** Copies one input or one output (its index) in or out of the model. */
  private interface Copy {
    void apply(int k);
  }

  /** WARMUP + CALLS calls (every input set, run, every output read), each timed in four parts
   *  (inputs, run, outputs, the whole call; ns): those of the CALLS timed calls, in order. */
  private static long[] time(Model m, int warmup, int calls, int nin, Copy setInput, int nout, Copy getOutput) {
    long[] t = new long[4 * calls];
    for (int r = 0; r < warmup + calls; ++r) {
      long t0 = System.nanoTime();
      for (int k = 0; k < nin; ++k) setInput.apply(k);
      long t1 = System.nanoTime();
      m.run();
      long t2 = System.nanoTime();
      for (int k = 0; k < nout; ++k) getOutput.apply(k);
      long t3 = System.nanoTime();
      if (r >= warmup) {
        int i = 4 * (r - warmup);
        t[i] = t1 - t0; t[i + 1] = t2 - t1; t[i + 2] = t3 - t2; t[i + 3] = t3 - t0;
      }
    }
    return t;
  }

  private static void write(long[] t, String path) throws IOException {
    try (DataOutputStream out = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(path)))) {
      for (long v : t) out.writeLong(v);
    }
  }
}
"""


def stage_stats(ns) -> dict:
    """ns: (calls, 4) array of copy-in, run, copy-out, total in nanoseconds -> microsecond statistics."""
    import numpy as np

    a = np.asarray(ns, dtype=np.float64) / 1e3
    out = {k: benchlib.stats(a[:, j], "us") for j, k in enumerate(("copy_in", "run", "copy_out", "total"))}
    out["calls"] = int(a.shape[0])
    return out


def run_proc(argv: list, verbose: bool, what: str, **kw) -> subprocess.CompletedProcess:
    return benchlib.run_step(argv, benchlib.thread_env(THREADS), verbose, what, **kw)


def build_runtime(plat: str, work: Path, verbose: bool) -> Path:
    from tvmgen.runtime import runtime_build

    prefix = None
    try:
        if verbose:
            prefix = runtime_build.build(plat, work / f"runtime-{plat}")
        else:  # cmake's chatter goes to a log file
            log = work / f"runtime-{plat}.log"
            with open(log, "w") as f:
                saved = os.dup(1), os.dup(2)
                os.dup2(f.fileno(), 1)
                os.dup2(f.fileno(), 2)
                try:
                    prefix = runtime_build.build(plat, work / f"runtime-{plat}")
                finally:
                    os.dup2(saved[0], 1)
                    os.dup2(saved[1], 2)
                    os.close(saved[0])
                    os.close(saved[1])
    except Exception as e:  # TvmgenError and anything cmake raised
        raise StepError(f"runtime_build.build({plat!r}) failed: {e}") from e
    return Path(prefix)


def bench_cpp(
    prefix: Path, model: dict, name: str, warmup: int, calls: int, work: Path, rnd: int, verbose: bool
) -> dict:
    out_dir = work / f"{name}-cpp-out"
    out_dir.mkdir(exist_ok=True)
    timings = work / f"{name}-cpp-{rnd}.json"
    argv = [prefix / "bin" / "tvmgen-run", model["artifact"]]
    for f in model["input_files"]:
        argv += ["-i", f]
    argv += ["--warmup", warmup, "--repeat", calls, "-o", out_dir, "--timings", timings]
    run_proc(argv, verbose, "tvmgen-run")
    t = json.loads(timings.read_text())
    # tvmgen-run reports per-stage statistics only; the total is the sum of the stage medians.
    stages = {
        k: {
            "median_us": t[f"{k}_ms"]["median"] * 1e3,
            "mean_us": t[f"{k}_ms"]["mean"] * 1e3,
            "min_us": t[f"{k}_ms"]["min"] * 1e3,
            "max_us": t[f"{k}_ms"]["max"] * 1e3,
        }
        for k in ("copy_in", "run", "copy_out")
    }
    stages["total"] = {
        "median_us": sum(stages[k]["median_us"] for k in ("copy_in", "run", "copy_out")),
        "note": "sum of the stage medians",
    }
    stages["calls"] = t["runs"]
    stages["raw"] = t
    return stages


def compile_cpp_harness(prefix: Path, work: Path, verbose: bool) -> Path:
    return benchlib.build_cpp_harness(
        prefix, work, "overhead_bench", CPP_HARNESS, verbose, benchlib.thread_env(THREADS)
    )


def bench_cpp_api(exe: Path, model: dict, name: str, warmup: int, calls: int, work: Path, verbose: bool) -> dict:
    import numpy as np

    times = work / f"{name}-cpp-api.times"
    run_proc([exe, model["artifact"], warmup, calls, times, *model["input_files"]], verbose, "overhead_bench")
    return stage_stats(np.fromfile(times, dtype=np.int64).reshape(-1, 4))


def compile_java_harness(prefix: Path, work: Path, verbose: bool) -> Path:
    javac = shutil.which("javac")
    if javac is None:
        raise StepError("javac not found: the Java harness cannot be compiled (install a JDK)")
    src_dir, cls_dir = work / "java-src", work / "java-classes"
    src_dir.mkdir(exist_ok=True)
    cls_dir.mkdir(exist_ok=True)
    (src_dir / "OverheadBench.java").write_text(JAVA_HARNESS)
    jar = prefix / "share" / "java" / "tvmgen.jar"
    if not jar.is_file():
        raise StepError(f"{jar} was not built (no javac/jar when the runtime was configured?)")
    run_proc([javac, "-cp", jar, "-d", cls_dir, src_dir / "OverheadBench.java"], verbose, "javac")
    return cls_dir


def bench_java(
    prefix: Path, classes: Path, model: dict, name: str, warmup: int, calls: int, work: Path, verbose: bool
) -> dict:
    import numpy as np

    jar = prefix / "share" / "java" / "tvmgen.jar"
    out_prefix = work / f"{name}-java"
    res = {}
    for mode in ("buffer", "floats"):
        f = Path(f"{out_prefix}-{mode}.times")
        f.unlink(missing_ok=True)
        argv = [
            "java",
            f"-Dtvmgen.library.path={prefix / 'lib'}",
            "-cp",
            f"{jar}{os.pathsep}{classes}",
            "OverheadBench",
            mode,
            model["artifact"],
            warmup,
            calls,
            out_prefix,
            *model["input_files"],
        ]
        info = last_json(run_proc(argv, verbose, f"java OverheadBench {mode}"), "java OverheadBench")
        res["jvm"] = f"{info['vm']} {info['java']}"
        if f.is_file():  # floats: only for float32 models
            res[f"java_{mode}"] = stage_stats(np.fromfile(f, dtype=">i8").reshape(-1, 4))
    return res


def strip_sizes(plat: str, prefix: Path, work: Path, verbose: bool) -> dict:
    tool = shutil.which(STRIP[plat])
    dest = work / f"stripped-{plat}"
    dest.mkdir(exist_ok=True)
    files = {}
    for so in sorted((prefix / "lib").glob("*.so")):
        copy = dest / so.name
        shutil.copyfile(so, copy)
        if tool:
            run_proc([tool, copy], verbose, f"{STRIP[plat]} {so.name}")
        files[so.name] = {"unstripped": so.stat().st_size, "stripped": copy.stat().st_size}
    jar = prefix / "share" / "java" / "tvmgen.jar"
    return {
        "strip": tool and f"{STRIP[plat]} (default: --strip-all)",
        "stripped": bool(tool),
        "files": files,
        "tvmgen.jar": jar.stat().st_size if jar.is_file() else None,
        "tvmgen-run": (prefix / "bin" / "tvmgen-run").stat().st_size
        if (prefix / "bin" / "tvmgen-run").is_file()
        else None,
    }
