#!/usr/bin/env python3
"""Streaming models per step: tvmgen's C++ Model and Python runner against LiteRT / onnxruntime, the state carried.

A streaming step takes tens of microseconds, so what a call costs besides the kernels decides the ratio. For each
streaming zoo model (benchmarks/zoo.py builds them: ``streaming_kws_int8``, a full-integer TFLite keyword spotter
with an int8 ring buffer in a resource variable; ``stream_gru``, ONNX with the pairs h0=hn and
frames_in=frames_out) compiled once for host/cpu (``tvmgen compile``, with ``--state`` for stream_gru; untuned),
and each thread count N, one child process (TVM_NUM_THREADS = N) times one step of four contenders, each holding
the state from step to step and fed a cycle of 20 seeded inputs:

  reference    LiteRT (ai_edge_litert Interpreter, num_threads=N), which keeps the TFLite model's variables
               itself: set_tensor, invoke, get_tensor; or onnxruntime (intra_op_num_threads=N) with the state
               threaded in Python (each step's state outputs fed back as the next step's inputs), as an app
               uses it (zoo_state_pairs.reference_stepper)
  tvmgen C++   tvmgen::Model (jni/include/tvmgen/runtime.h, the path the JNI bridge and the apps use) in a small
               harness compiled here with g++ against the host runtime (runtime_build.cached_build("host")), as
               runtime_overhead.py's: per step SetInput, Run, GetOutput, the state held by the runtime, timed
               with steady_clock inside the harness. The harness is a process of its own that runs steps on
               requests over a pipe from the child, so it takes its turn in the same round robin as the
               others: back to back 50 steps per request (steps are not a pipe round trip apart), paced one
               step per request after the child's sleep; the round trip is never in its timing. Main runs
               as direct calls (LoadOptions::direct_calls, the default on the CPU: the kernel calls recorded
               on the first run, made again)
  tvmgen C++ VM  the same harness with LoadOptions::direct_calls = false: the Relax VM on every step
  tvmgen Py    tvmgen.runtime.runner.HostModel.run per step (the state held by the runner), each step's values
               copied into the same input arrays first (an app's buffer, refilled)

both back to back (benchlib.round_robin: rounds of blocks, the contender going first rotating; medians) and
paced (benchlib.paced: a sleep of 33 ms before each step, as an app fed one frame per camera or audio buffer;
the cores idle and the caches cool in between). Before timing, the four run the same 20 steps from the
initial state and their outputs are compared (the zoo's criterion). Ratios are tvmgen / reference, measured in
the same child: above 1 tvmgen is slower. Below the table: the C++ step's stages (SetInput, Run, GetOutput) and
the kernels' share of a run (Model::Profile), which show where a step's time goes.

    .venv/bin/python benchmarks/streaming.py                     # both models, 1 and 2 threads (~2 min on 2 cores)
    .venv/bin/python benchmarks/streaming.py --quick             # smoke test: 1 thread, 2 rounds, ~15 s
    .venv/bin/python benchmarks/streaming.py --models stream_gru --json out.json
    .venv/bin/python benchmarks/streaming.py --work DIR          # keep (and reuse) the models and artifacts

The table goes to stdout, progress to stderr. Needs the host g++, the `tensorflow` extra (the spotter) and
torch (stream_gru); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
import speed
import zoo
import zoo_state_pairs
from benchlib import progress

MODELS = ("streaming_kws_int8", "stream_gru")
MODES = ("back-to-back", "paced")
STEPS = 20  # the seeded inputs each contender cycles through (and the steps of the output check)
PACE_MS = 33.0
BATCH = 50  # the C++ harness's steps per request back to back

# A harness over the C++ API, timed as runtime_overhead.py's: steady_clock around SetInput, Run, GetOutput.
# It runs one step per request so that it takes its turn in the child's round robin (benchlib), reading
# requests on stdin and answering on stdout:
#   s N       N steps back to back (each on the next of the STEPS inputs): per step "TOTAL SET RUN GET" (ns)
#   c FILE    the state reset, STEPS steps written to FILE (every own output of each step, raw), the state
#             reset again: "ok"
#   p N       Model::Profile(N) (the kernels' share of a run): its JSON ({} without the profiler)
CPP_HARNESS = r"""
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

// Usage: streaming_bench ARTIFACT THREADS direct|vm STEPS INPUT.bin... (each input's STEPS values, one after
// another); direct|vm: LoadOptions::direct_calls
int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  auto ns = [](Clock::time_point a, Clock::time_point b) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
  };
  try {
    tvmgen::LoadOptions options;
    options.threads.threads = std::stoi(argv[2]);
    options.direct_calls = std::string(argv[3]) == "direct";
    auto model = tvmgen::Model::Load(argv[1], options);
    const size_t steps = std::stoul(argv[4]), nin = model->inputs().size(), nout = model->outputs().size();
    std::vector<std::vector<char>> in(nin), out(nout);
    for (size_t k = 0; k < nin; ++k) {
      std::ifstream f(argv[5 + k], std::ios::binary);
      in[k].assign(std::istreambuf_iterator<char>(f), {});
      if (in[k].size() != steps * model->inputs()[k].nbytes) throw tvmgen::Error(std::string("bad size: ") + argv[5 + k]);
    }
    for (size_t k = 0; k < nout; ++k) out[k].resize(model->outputs()[k].nbytes);
    size_t step = 0;
    auto one = [&](long long* t) {
      auto t0 = Clock::now();
      for (size_t k = 0; k < nin; ++k) {
        const size_t n = model->inputs()[k].nbytes;
        model->SetInput(static_cast<int>(k), in[k].data() + step * n, n);
      }
      auto t1 = Clock::now();
      model->Run();
      auto t2 = Clock::now();
      for (size_t k = 0; k < nout; ++k) model->GetOutput(static_cast<int>(k), out[k].data(), out[k].size());
      auto t3 = Clock::now();
      step = (step + 1) % steps;
      t[0] = ns(t0, t3); t[1] = ns(t0, t1); t[2] = ns(t1, t2); t[3] = ns(t2, t3);
    };
    std::cout << "{\"threads\": " << model->threads() << ", \"pool\": \"" << model->thread_pool()
              << "\", \"states\": " << model->StateCount()
              << ", \"direct\": " << (model->executor() == "direct calls" ? "true" : "false") << "}" << std::endl;
    std::string cmd;
    long long t[4];
    while (std::getline(std::cin, cmd)) {
      if (cmd.rfind("s ", 0) == 0) {
        const long n = std::stol(cmd.substr(2));
        std::string reply;
        for (long i = 0; i < n; ++i) {
          one(t);
          for (long long x : t) reply += std::to_string(x) + ' ';
        }
        std::cout << reply << std::endl;
      } else if (cmd.rfind("c ", 0) == 0) {
        model->ResetState();
        step = 0;
        {  // closed before the reply: the child reads the file then
          std::ofstream f(cmd.substr(2), std::ios::binary);
          for (size_t s = 0; s < steps; ++s) {
            one(t);
            for (const auto& o : out) f.write(o.data(), static_cast<std::streamsize>(o.size()));
          }
        }
        model->ResetState();
        step = 0;
        std::cout << "ok" << std::endl;
      } else if (cmd.rfind("p ", 0) == 0) {
        std::string profile = "{}";  // a runtime built without the profiler
        try {
          profile = model->Profile(std::stoi(cmd.substr(2)));
        } catch (const tvmgen::Error&) {
        }
        std::cout << profile << std::endl;
      } else {
        throw tvmgen::Error("unknown request: " + cmd);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streaming_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
"""


# =========================================================================== the child: one model, one thread count


class Harness(benchlib.Timed):
    """The C++ harness as a round-robin contender: each call is one step, timed by the harness itself.

    With ``batch`` > 1 the harness runs that many steps back to back per request and the timed calls take
    their timings in turn, so that its steps are not a pipe round trip apart; the untimed call that starts
    each round-robin block drops what is left (those steps ran in the block before)."""

    def __init__(self, exe: Path, artifact: Path, threads: int, inputs: list[Path], executor: str = "direct"):
        argv = [str(exe), str(artifact), str(threads), executor, str(STEPS), *map(str, inputs)]
        env = benchlib.thread_env(threads)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1)
        self.info = json.loads(self._reply())
        self.stages_ns: list[list[int]] = []
        self.batch = 1
        self._ready: list[list[int]] = []
        super().__init__("cpp" if executor == "direct" else "cpp_vm", self.untimed)

    def _ask(self, request: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the C++ harness exited (status {self.proc.wait()}); its stderr says why")
        return line.strip()

    def steps(self, n: int) -> list[list[int]]:
        got = [int(x) for x in self._ask(f"s {n}").split()]
        return [got[i : i + 4] for i in range(0, len(got), 4)]

    def untimed(self) -> None:
        self._ready.clear()
        self.steps(1)

    def timed_run(self) -> None:
        if not self._ready:
            self._ready = self.steps(self.batch)
        t = self._ready.pop(0)
        self.stages_ns.append(t)
        self.times_ms.append(t[0] / 1e6)

    def sequence(self, out: Path, specs) -> list[list]:
        """Every own output of STEPS steps from the initial state (the state reset before and after)."""
        import numpy as np

        if self._ask(f"c {out}") != "ok":
            raise RuntimeError("the C++ harness did not run the sequence")
        raw, at, steps = out.read_bytes(), 0, []
        for _ in range(STEPS):
            outs = []
            for s in specs:
                n = int(np.prod(s.shape, dtype=np.int64)) * np.dtype(s.dtype).itemsize
                outs.append(np.frombuffer(raw[at : at + n], dtype=s.dtype).reshape(s.shape))
                at += n
            steps.append(outs)
        return steps

    def profile(self, runs: int) -> dict:
        return json.loads(self._ask(f"p {runs}"))

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def cycle(fn, steps: list[dict]):
    """A call of ``fn`` on the next of ``steps``, round and round."""
    state = {"k": 0}

    def call():
        k = state["k"]
        state["k"] = (k + 1) % len(steps)
        return fn(steps[k])

    return call


def refilled(fn, steps: list[dict]):
    """``cycle`` as an app feeds a stream: the next step's values copied into the same input arrays (one audio
    buffer refilled, as LiteRT's set_tensor copies into its own), which ``fn`` then reads in place."""
    import numpy as np

    arrays = {name: np.array(value) for name, value in steps[0].items()}
    state = {"k": 0}

    def call():
        k = state["k"]
        state["k"] = (k + 1) % len(steps)
        for name, value in steps[k].items():
            np.copyto(arrays[name], value)
        return fn(arrays)

    return call


def time_model(name: str, work: Path, threads: int, exe: Path, quick: bool, runs: int, rounds: int, pace_ms: float):
    """In a child with TVM_NUM_THREADS = threads: the outputs compared over STEPS steps, then the three
    contenders back to back and paced; one row per mode."""
    import numpy as np

    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    model_file, artifact = speed.prepare(name, work)
    model = HostModel(artifact, threads=threads)
    manifest = model.manifest
    steps = [random_inputs(manifest.own_inputs, seed=k) for k in range(STEPS)]
    files = []
    for k, spec in enumerate(manifest.own_inputs):  # each input's STEPS values, raw little-endian, for the harness
        f = work / f"{name}-{threads}t-in{k}.bin"
        np.concatenate([np.ascontiguousarray(s[spec.name]).ravel() for s in steps]).astype(
            np.dtype(spec.dtype).newbyteorder("<")
        ).tofile(f)
        files.append(f)

    def reference():  # a fresh one: its state from the initial value
        run = zoo.reference_runner(model_file, zoo._consts(zoo.build_flags(name), model_file), threads)
        return zoo_state_pairs.reference_stepper(model_file, manifest, artifact, run)

    harness = Harness(exe, artifact, threads, files)
    vm_harness = Harness(exe, artifact, threads, files, executor="vm")
    try:
        expected = _sequence(reference(), steps)
        python = _sequence(model.run, steps)
        model.reset_state()
        cpp = harness.sequence(work / f"{name}-{threads}t-cpp-out.bin", manifest.own_outputs)
        cpp_vm = vm_harness.sequence(work / f"{name}-{threads}t-cpp-vm-out.bin", manifest.own_outputs)

        def flat(outputs):
            return [a for step in outputs for a in step]

        outputs = {
            "python": speed.check_outputs(name, flat(python), flat(expected)),
            "cpp": speed.check_outputs(name, flat(cpp), flat(expected)),
            "cpp_vm": speed.check_outputs(name, flat(cpp_vm), flat(expected)),
        }
        ref = reference()
        timed = [
            benchlib.Timed("reference", cycle(ref, steps)),
            harness,
            vm_harness,
            benchlib.Timed("python", refilled(model.run, steps)),
        ]
        rows = []
        for mode in MODES:
            for t in timed:
                t.times_ms.clear()
            for h in (harness, vm_harness):
                h.stages_ns.clear()
                h.batch = 1 if mode == "paced" else BATCH
            if mode == "paced":
                benchlib.paced(timed, pace_ms / 1e3, runs=max(rounds, runs // 10), rounds=rounds)
            else:
                benchlib.round_robin(timed, warmup=20, runs=runs, rounds=rounds, min_time=0.1 if quick else 0.5)
            med = {t.key: benchlib.median(t.times_ms) * 1e3 for t in timed}  # microseconds
            stages = np.asarray(harness.stages_ns, dtype=np.float64) / 1e3
            rows.append(
                {
                    "model": name,
                    "threads": threads,
                    "mode": mode,
                    "reference": "litert" if model_file.suffix == ".tflite" else "onnxruntime",
                    "reference_us": med["reference"],
                    "cpp_us": med["cpp"],
                    "cpp_ratio": benchlib.ratio(med["cpp"], med["reference"]),
                    "cpp_vm_us": med["cpp_vm"],
                    "cpp_vm_ratio": benchlib.ratio(med["cpp_vm"], med["reference"]),
                    "python_us": med["python"],
                    "python_ratio": benchlib.ratio(med["python"], med["reference"]),
                    "steps_timed": {t.key: len(t.times_ms) for t in timed},
                    "stats_us": {t.key: benchlib.stats([x * 1e3 for x in t.times_ms], "us") for t in timed},
                    "cpp_stages_us": {
                        k: float(np.median(stages[:, j])) for j, k in enumerate(("set_input", "run", "get_output"), 1)
                    },
                    "outputs": outputs,
                    "tvmgen_threads": {"cpp": harness.info["threads"], "python": model.threads},
                    "thread_pool": {"cpp": harness.info["pool"], "python": model.parallel},
                    "direct_calls": {"cpp": harness.info["direct"], "cpp_vm": vm_harness.info["direct"]},
                }
            )
        prof = harness.profile(50 if quick else 300)  # the kernels' share of a run
        for r in rows:
            r["cpp_profile"] = {k: prof.get(k) for k in ("whole_run_ms", "kernels_median_ms")}
    finally:
        harness.close()
        vm_harness.close()
    return rows


def _sequence(step, steps: list[dict]) -> list[list]:
    """Every output of each of ``steps``, run in order by ``step``."""
    import numpy as np

    return [[np.asarray(a) for a in step(s)] for s in steps]


# =========================================================================== driver and table


def format_table(rows: list[dict]) -> str:
    header = ["model", "threads", "mode", "reference", "ref us", "C++ us", "C++/ref", "C++ VM us", "VM/ref"]
    header += ["Python us", "Py/ref"]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["model"], str(r["threads"]), "failed", *["-"] * 8])
            continue
        body.append(
            [
                r["model"],
                str(r["threads"]),
                r["mode"],
                r["reference"],
                benchlib.fmt_num(r["reference_us"], large=10, digits=1),
                benchlib.fmt_num(r["cpp_us"], large=10, digits=1),
                benchlib.fmt_ratio(r["cpp_ratio"]),
                benchlib.fmt_num(r["cpp_vm_us"], large=10, digits=1),
                benchlib.fmt_ratio(r["cpp_vm_ratio"]),
                benchlib.fmt_num(r["python_us"], large=10, digits=1),
                benchlib.fmt_ratio(r["python_ratio"]),
            ]
        )
    return benchlib.table(header, body, right=set(range(4, len(header))))


def notes(rows: list[dict]) -> list[str]:
    """Below the table: the outputs' check, and the C++ step's stages with the kernels' share."""
    lines = [f"{r['model']} at {r['threads']} thread(s) failed: {r['error']}" for r in rows if "error" in r]
    bad = [f"{r['model']}/{who} {v}" for r in rows if "outputs" in r for who, v in r["outputs"].items() if v != "ok"]
    checked = sorted({r["model"] for r in rows if "outputs" in r})
    if checked:
        lines.append(
            f"outputs over {STEPS} steps from the initial state, C++ (direct calls and VM) and Python against the reference: "
            + (f"MISMATCH {', '.join(sorted(set(bad)))}" if bad else "ok")
        )
    for r in rows:
        if "cpp_stages_us" not in r or r["mode"] != "back-to-back":
            continue
        s = r["cpp_stages_us"]
        line = (
            f"{r['model']} {r['threads']}t C++ step: SetInput {s['set_input']:.1f} us, Run {s['run']:.1f} us, "
            f"GetOutput {s['get_output']:.1f} us"
        )
        prof = r.get("cpp_profile") or {}
        if prof.get("kernels_median_ms") is not None:
            line += (
                f"; Model::Profile: a whole run {prof['whole_run_ms'] * 1e3:.1f} us, of it kernels "
                f"{prof['kernels_median_ms'] * 1e3:.1f} us"
            )
        lines.append(line)
    return lines


def parse_args(argv=None):
    p = benchlib.parser(__doc__)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 1 thread, 2 rounds, 100 steps back to back and 10 paced per contender",
    )
    benchlib.json_option(p)
    benchlib.models_option(p, MODELS)
    p.add_argument("--threads", help="comma-separated thread counts [default: 1,2; --quick: 1]")
    p.add_argument(
        "--runs",
        type=int,
        help="timed steps per contender back to back, at least (paced: a tenth) [default 2000, --quick 100]",
    )
    p.add_argument("--rounds", type=int, help="round-robin rounds [default 5, --quick 2]")
    p.add_argument(
        "--pace-ms", type=float, default=PACE_MS, help=f"the sleep before each paced step [default {PACE_MS:g}]"
    )
    p.add_argument("--work", type=Path, metavar="DIR", help="directory for the models and artifacts, kept and reused")
    p.add_argument(
        "--runtime", type=Path, metavar="PREFIX", help="a host runtime install prefix [default: built, cached]"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show the children's own stderr")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child: NAME:THREADS
    p.add_argument("--harness", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.models = benchlib.pick_models(args.models, MODELS, p.error)
    try:
        args.thread_counts = [int(t) for t in (args.threads or ("1" if args.quick else "1,2")).split(",") if t]
    except ValueError:
        p.error(f"--threads takes comma-separated numbers, not {args.threads!r}")
    if not args.thread_counts or min(args.thread_counts) < 1:
        p.error("--threads needs thread counts of at least 1")
    args.runs = args.runs or (100 if args.quick else 2000)
    args.rounds = args.rounds or (2 if args.quick else 5)
    if not 0 < args.pace_ms <= 1000:
        p.error(f"--pace-ms must be above 0 and at most 1000, not {args.pace_ms:g}")
    return args


def main() -> int:
    args = parse_args()
    if args.one:
        name, threads = args.one.split(":")
        benchlib.serve_worker(
            lambda: time_model(
                name, args.work, int(threads), args.harness, args.quick, args.runs, args.rounds, args.pace_ms
            )
        )
        return 0
    load = benchlib.load_at_start()
    start = time.perf_counter()
    if args.runtime is None:
        from tvmgen.runtime import runtime_build

        progress("the host runtime: built from jni/ with CMake once, cached")
        args.runtime = runtime_build.cached_build("host")
    rows: list[dict] = []
    with benchlib.work_dir(args.work, "tvmgen-streaming-") as work:
        try:
            exe = benchlib.build_cpp_harness(args.runtime, work, "streaming_bench", CPP_HARNESS, args.verbose)
        except benchlib.StepError as e:
            raise SystemExit(str(e)) from e
        for i, name in enumerate(args.models, 1):
            progress(f"[{i}/{len(args.models)}] {name}: model and host artifact")
            try:
                speed.prepare(name, work)
            except RuntimeError as e:
                rows += [{"model": name, "threads": t, "error": str(e)} for t in args.thread_counts]
                benchlib.log(f"  {e}")
                continue
            for threads in args.thread_counts:
                progress(f"[{i}/{len(args.models)}] {name}: {threads} thread(s), back to back and paced")
                argv = [sys.executable, Path(__file__).resolve(), "--one", f"{name}:{threads}", "--work", work]
                argv += ["--harness", exe, "--runs", args.runs, "--rounds", args.rounds, "--pace-ms", args.pace_ms]
                argv += ["--quick"] if args.quick else []
                before = os.getloadavg()[0]
                try:
                    proc = benchlib.run_step(argv, benchlib.thread_env(threads), args.verbose, f"{name} at {threads}")
                    got = benchlib.last_json(proc, f"{name} at {threads}")
                except benchlib.StepError as e:
                    rows.append({"model": name, "threads": threads, "error": e.summary})
                    benchlib.log(f"  {e}")
                    continue
                for r in got:
                    r["loadavg_1min_before"] = before
                rows += got
    total = time.perf_counter() - start
    progress(f"done in {total:.0f}s")
    print(
        f"tvmgen per streaming step (host/cpu, untuned; state carried on every side; medians in microseconds; "
        f"back-to-back: {args.rounds} round-robin rounds; paced: a {args.pace_ms:g} ms sleep before each step; "
        "C++: tvmgen::Model SetInput + Run + GetOutput, with direct calls (the default) and with the Relax VM "
        "(LoadOptions::direct_calls = false); Python: HostModel.run; ratio = tvmgen / reference)"
    )
    print(format_table(rows))
    print("\n".join(notes(rows)))
    print(f"load average (1 min): {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        benchlib.write_json(
            args.json,
            "streaming",
            {
                "settings": {
                    "quick": args.quick,
                    "threads": args.thread_counts,
                    "runs": args.runs,
                    "rounds": args.rounds,
                    "pace_ms": args.pace_ms,
                    "steps": STEPS,
                    "runtime": str(args.runtime),
                },
                "environment": {
                    **benchlib.environment(("apache-tvm", "apache-tvm-ffi", "onnxruntime", "ai-edge-litert")),
                    "loadavg_start": load,
                    "loadavg_end": os.getloadavg(),
                },
                "total_s": total,
                "rows": rows,
            },
        )
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
