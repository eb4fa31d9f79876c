"""tvmgen's parallel launcher (jni/src/parallel/parallel_pool.cc), linked into every model library.

The launcher is called the way TVM's generated code calls it (a lambda, its closure, num_task), here
through ctypes with Python lambdas; then models run on it from Python and from tvmgen-run, against
one thread and against TVM's own pool. How it holds up when other processes hold the cores is
measured by benchmarks/zoo.py --contended (timing, so not here).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import QEMU_AARCH64, REPO, onnx_model, require_tool, run_native, save_onnx, single_op_models
from helpers import python_c
from tvmgen.compiler.targets.export import POOL_FLAGS, parallel_pool_source

ENV = ctypes.c_void_p  # TVMParallelGroupEnv*: {void* sync_handle; int32_t num_task}
LAMBDA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ENV, ctypes.c_void_p)
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, LAMBDA, ctypes.c_void_p, ctypes.c_int)
# chunks per thread (the launcher's default, TVMGEN_PARALLEL_CHUNKS unset)
CHUNKS = int(re.search(r"kChunksPerThread = (\d+);", parallel_pool_source().read_text()).group(1))


def num_task(penv) -> int:
    return ctypes.cast(penv, ctypes.POINTER(ctypes.c_int32))[2]  # after the 8-byte pointer


@pytest.fixture(scope="module")
def pool_library(tmp_path_factory):
    """The launcher alone, built with the flags tvmgen links it into model libraries with."""
    require_tool("g++")
    out = tmp_path_factory.mktemp("pool") / "libpool.so"
    subprocess.run(["g++", "-shared", "-fPIC", *POOL_FLAGS, "-o", str(out), str(parallel_pool_source())], check=True)
    return out


_copies = itertools.count()


def launcher(pool_library, threads, min_us=0, **settings):
    """A fresh copy of the launcher (its settings are read when it loads), installed into a stand-in
    slot (what __TVMBackendParallelLaunch is in a model library). ``min_us`` 0: every loop is split;
    ``settings``: more of its environment variables (None: unset)."""
    copy = pool_library.with_name(f"libpool-{next(_copies)}.so")
    shutil.copyfile(pool_library, copy)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"TVMGEN_PARALLEL_MIN_US": str(min_us), **settings}.items():
            if value is None:
                mp.delenv(name, raising=False)
            else:
                mp.setenv(name, value)
        lib = ctypes.CDLL(str(copy))
    lib.tvmgen_parallel_install.restype = ctypes.c_int
    slot = ctypes.c_void_p(0)
    n = lib.tvmgen_parallel_install(ctypes.byref(slot), threads)
    assert slot.value, "install did not set the slot"
    return n, ctypes.cast(slot, LAUNCH)


def test_library_needs_only_libc(pool_library):
    needed = subprocess.run(["readelf", "-d", str(pool_library)], capture_output=True, text=True).stdout
    libs = sorted(line.split("[")[1].rstrip("]") for line in needed.splitlines() if "(NEEDED)" in line)
    assert not [n for n in libs if "stdc++" in n or "gcc_s" in n], libs
    exported = subprocess.run(["nm", "-D", "--defined-only", str(pool_library)], capture_output=True, text=True).stdout
    # the launcher's install, and the Python runtime's replay of a model's calls and its copy of a tensor
    assert sorted(line.split()[-1] for line in exported.splitlines()) == [
        "__tvm_ffi_tvmgen_copy",
        "__tvm_ffi_tvmgen_replay",
        "tvmgen_parallel_install",
    ]


@pytest.mark.parametrize("threads", [2, 3])
def test_every_chunk_runs_once_per_launch(pool_library, threads):
    n, launch = launcher(pool_library, threads)
    assert n == threads
    seen, tids = [], set()
    lock = threading.Lock()

    caller = threading.get_native_id()

    @LAMBDA
    def body(task_id, penv, cdata):
        with lock:
            seen.append((task_id, num_task(penv), cdata))
            tids.add(threading.get_native_id())
        time.sleep(0.0005)  # a chunk worth sharing: a worker woken by the launch finds some left
        # Until a worker has run a chunk, the caller's first chunk waits for one (at most 50 ms): a worker
        # does not run on the caller's CPU, and where the other cores are busy (CI's other workers) it could
        # otherwise find every chunk taken in all 100 launches.
        deadline = time.monotonic() + 0.05
        while task_id == 0 and tids == {caller} and time.monotonic() < deadline:
            time.sleep(0.001)
        return 0

    for i in range(100):
        seen.clear()
        assert launch(body, ctypes.c_void_p(1000 + i), 0) == 0
        assert sorted(t for t, _, _ in seen) == list(range(CHUNKS * threads)), i
        assert {(k, c) for _, k, c in seen} == {(CHUNKS * threads, 1000 + i)}
    assert len(tids) >= 2, "the workers never ran a chunk"


@pytest.mark.parametrize("setting", [None, "keep"])
def test_chunks_flush_subnormals_and_the_caller_gets_its_mode_back(pool_library, setting):
    """A subnormal float costs an x86 core a microcode assist per operation, about a hundred cycles: every
    chunk runs with subnormals flushed to zero (FTZ and DAZ; Arm's FZ), on the caller and on the workers,
    unless TVMGEN_DENORMALS=keep; after the launch the caller computes with IEEE subnormals again. NumPy's
    float32 product in the chunk runs under the thread's mode as a kernel's does."""
    _, launch = launcher(pool_library, 2, TVMGEN_DENORMALS=setting)
    tiny = np.float32(1e-40)  # subnormal (the smallest normal float32 is 1.2e-38)
    products, tids = [], set()
    caller = threading.get_native_id()

    @LAMBDA
    def body(task_id, penv, cdata):
        products.append(float(tiny * np.float32(1.0)))
        tids.add(threading.get_native_id())
        deadline = time.monotonic() + 0.05  # the caller's first chunk waits for a worker's (as above)
        while task_id == 0 and tids == {caller} and time.monotonic() < deadline:
            time.sleep(0.001)
        return 0

    for _ in range(50):
        assert launch(body, None, 0) == 0
    flushed = setting is None
    assert products and all((p == 0.0) == flushed for p in products), (setting, sorted(set(products)))
    assert float(tiny * np.float32(1.0)) == pytest.approx(1e-40, rel=1e-3)  # the caller's mode, as it was
    assert len(tids) >= 2, "the workers never ran a chunk"  # what they computed is checked above


def test_error_sync_and_nested_launches(pool_library):
    _, launch = launcher(pool_library, 2)

    @LAMBDA
    def failing(task_id, penv, cdata):
        return -1 if task_id == 3 else 0

    assert launch(failing, None, 0) != 0
    inner = []

    @LAMBDA
    def leaf(task_id, penv, cdata):
        inner.append((task_id, num_task(penv)))
        return 0

    @LAMBDA
    def outer(task_id, penv, cdata):
        return launch(leaf, None, 0)  # a launch inside a chunk runs there, as one task

    assert launch(outer, None, 0) == 0
    assert sorted(inner) == [(0, 1)] * (2 * CHUNKS)
    inner.clear()
    # a launch asking for a task count (code that may synchronise its tasks) runs as one task
    assert launch(leaf, None, 2) == 0 and inner == [(0, 1)]


def test_small_loops_run_on_the_caller(pool_library):
    """Each loop's first two calls run alone and are timed; one under TVMGEN_PARALLEL_MIN_US stays alone."""
    # 20 ms, not the default 5 us: a Python callback takes tens of microseconds, and on a loaded machine
    # (CI, load 6) both timed calls of the "small" loop were once preempted past a 1 ms bound
    _, launch = launcher(pool_library, 2, min_us=20000)
    calls = {"small": [], "large": []}

    def body(kind, pause_s):
        @LAMBDA
        def run(task_id, penv, cdata):
            calls[kind].append((task_id, num_task(penv), threading.get_native_id()))
            if num_task(penv) == 1:
                time.sleep(pause_s)  # the loop's whole work, alone
            return 0

        return run

    small, large = body("small", 0), body("large", 0.05)  # well under and over 20 ms alone
    for _ in range(5):
        assert launch(small, None, 0) == 0 and launch(large, None, 0) == 0
    me = threading.get_native_id()
    assert calls["small"] == [(0, 1, me)] * 5
    assert calls["large"][:2] == [(0, 1, me)] * 2  # measured
    assert sorted(t for t, _, _ in calls["large"][2:]) == sorted(list(range(2 * CHUNKS)) * 3)  # then split
    assert {k for _, k, _ in calls["large"][2:]} == {2 * CHUNKS}


def test_one_thread_runs_on_the_caller(pool_library):
    n, launch = launcher(pool_library, 1)
    tids = []

    @LAMBDA
    def body(task_id, penv, cdata):
        tids.append((threading.get_native_id(), task_id, num_task(penv)))
        return 0

    assert n == 1 and launch(body, None, 0) == 0
    assert tids == [(threading.get_native_id(), 0, 1)]


@pytest.fixture
def pinned_caller():
    """Pins this thread to its current CPU, returns that CPU, and gives the thread its CPUs back afterwards."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("sched_setaffinity is Linux's: no CPU to pin to elsewhere")
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("this machine gives the process one CPU: nothing to leave the caller's CPU for")
    cpu = ctypes.CDLL(None).sched_getcpu()
    try:
        yield lambda: os.sched_setaffinity(0, {cpu}) or cpu
    finally:
        os.sched_setaffinity(0, before)


# A chunk body in C: where it started (task, thread, CPU), then 0.5 ms of work. A Python body would measure
# the GIL instead: a worker blocked on it is woken by the caller and, on a busy machine, put on the
# caller's CPU (seen in CI), after the launcher's check and outside its control.
RECORDER = r"""
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static int record[4096][3];
static int count;
int body(int task_id, void* penv, void* cdata) {
  const int i = __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED);
  if (i < 4096) {
    record[i][0] = task_id;
    record[i][1] = (int)syscall(SYS_gettid);
    record[i][2] = sched_getcpu();
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 500000L);
  return 0;
}
int take(int* out, int max) {
  const int n = count < max ? count : max;
  for (int i = 0; i < 3 * n; ++i) out[i] = record[i / 3][i % 3];
  count = 0;
  return n;
}
"""


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    require_tool("gcc")
    d = tmp_path_factory.mktemp("recorder")
    (d / "recorder.c").write_text(RECORDER)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(d / "librec.so"), str(d / "recorder.c")], check=True)
    return ctypes.CDLL(str(d / "librec.so"))


def _chunks_after_idle_gaps(launch, recorder, launches=20):
    """Launches of a loop whose chunks take 0.5 ms, each after a gap longer than the workers' spin (they
    sleep in between, as between a paced app's frames): every chunk's (task, thread, CPU)."""
    body = ctypes.cast(recorder.body, LAMBDA)
    out = (ctypes.c_int * (3 * 4096))()
    ran = []
    for _ in range(launches):
        time.sleep(0.003)
        assert launch(body, None, 0) == 0
        n = recorder.take(out, 4096)
        ran += [tuple(out[3 * i : 3 * i + 3]) for i in range(n)]
    assert sorted(t for t, _, _ in ran) == sorted(list(range(2 * CHUNKS)) * launches)
    return ran


def test_workers_leave_the_callers_cpu(pool_library, pinned_caller, recorder):
    """A worker woken on the launching thread's CPU (Linux wakes a sleeper beside its waker when the other
    cores are busy) would take that CPU from the caller: it moves to another CPU before running a chunk."""
    _, launch = launcher(pool_library, 2)  # the worker starts with every CPU allowed
    cpu = pinned_caller()
    me = threading.get_native_id()
    workers = [(tid, c) for _, tid, c in _chunks_after_idle_gaps(launch, recorder) if tid != me]
    assert all(c != cpu for _, c in workers), workers


def test_workers_that_cannot_leave_the_callers_cpu_leave_the_chunks_to_it(pool_library, pinned_caller, recorder):
    """A process on one CPU: the worker, pinned there too, runs no chunk; the caller runs them all."""
    pinned_caller()
    _, launch = launcher(pool_library, 2)  # the worker inherits the one CPU
    assert {tid for _, tid, _ in _chunks_after_idle_gaps(launch, recorder)} == {threading.get_native_id()}


def test_default_thread_count_follows_tvm_num_threads(pool_library):
    code = (
        "import ctypes,sys; lib=ctypes.CDLL(sys.argv[1]); s=ctypes.c_void_p(0); "
        "print(lib.tvmgen_parallel_install(ctypes.byref(s), 0))"
    )
    for env, want in (({"TVM_NUM_THREADS": "3"}, 3), ({"OMP_NUM_THREADS": "5"}, 5)):
        out = subprocess.run(
            [sys.executable, "-c", code, str(pool_library)],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **env},
            check=True,
        ).stdout
        assert int(out) == want


# ------------------------------------------------------------------ models on it


@pytest.fixture(scope="module")
def mobilenet(builtin_onnx, compiled):
    """The built-in model for host/cpu (compiled once per session, conftest's ``compiled``)."""
    return compiled(builtin_onnx, "host", "cpu", name="mobilenet")


def _run_in_child(artifact: Path, threads: int, extra: str = "") -> dict:
    """HostModel in a process of its own (TVM's pool reads its size once per process)."""
    code = f"""
import json, os, sys
import numpy as np
from tvmgen.runtime.runner import HostModel
from tvmgen.core.model import random_inputs
cpus = os.sched_getaffinity(0)
m = HostModel(sys.argv[1], threads={threads})
{extra}
x = random_inputs(m.manifest.inputs, seed=3)
out = m.run(x)[0]
np.save(sys.argv[2], out)
print(json.dumps({{"pool": m.parallel, "threads": m.threads, "cpus_kept": os.sched_getaffinity(0) == cpus}}))
"""
    npy = artifact.parent / f"out-{threads}-{abs(hash(extra))}.npy"
    proc = subprocess.run([*python_c(code), str(artifact), str(npy)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "out": np.load(npy)}


@pytest.mark.slow
def test_model_outputs_equal_on_one_two_and_three_threads(mobilenet):
    runs = {t: _run_in_child(mobilenet, t) for t in (1, 2, 3)}
    for t, r in runs.items():
        assert (r["pool"], r["threads"]) == ("tvmgen", t)
    # the same chunks of the same loops, whoever runs them: bit-identical
    np.testing.assert_array_equal(runs[2]["out"], runs[1]["out"])
    np.testing.assert_array_equal(runs[3]["out"], runs[1]["out"])


@pytest.mark.slow
def test_library_without_the_launcher_uses_tvms_pool(compiled, tmp_path, monkeypatch):
    """An artifact from a tvmgen before the launcher: its library has no tvmgen_parallel_install. A 3x3
    convolution (parallel loops, built twice here in a second each; the session's build first, before the
    export is replaced)."""
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets import export
    from tvmgen.compiler.targets.platforms import PLATFORMS

    model = save_onnx(single_op_models()["conv3x3"], tmp_path / "conv3x3.onnx")
    new = compiled(model, "host", "cpu", name="conv3x3")

    def tvms_own_export(ex, platform, directory, objects_only):
        ex.export_library(str(directory / "model.so"))
        return export.Exported("shared", "model.so")

    monkeypatch.setattr(export, "export", tvms_own_export)
    old = tmp_path / "old"
    compile_to_artifact(
        frontends.load(model, []), BuildOptions(PLATFORMS["host"], "cpu"), old, True, {"name": "conv3x3"}
    )
    nm = subprocess.run(["nm", "-D", str(old / "model.so")], capture_output=True, text=True).stdout
    assert "tvmgen_parallel_install" not in nm and "__TVMBackendParallelLaunch" in nm
    r = _run_in_child(old, 2)
    # TVM's pool binds the thread that creates it to a subset of the CPUs (one, with one worker): the
    # caller gets its CPUs back, or everything it starts later would share them
    assert r["pool"] == "tvm" and r["cpus_kept"]
    fresh = _run_in_child(new, 2)
    assert fresh["pool"] == "tvmgen"
    np.testing.assert_array_equal(r["out"], fresh["out"])


@pytest.mark.slow
def test_models_unloaded_while_workers_wait(mobilenet):
    """Dropping a model unloads its library: its pool's workers must stop before their code goes."""
    code = """
import gc, sys
from tvmgen.runtime.runner import HostModel
from tvmgen.core.model import random_inputs
for i in range(8):
    m = HostModel(sys.argv[1], threads=2)
    m.run(random_inputs(m.manifest.inputs, seed=i))
    del m
    gc.collect()
print("ok")
"""
    proc = subprocess.run([*python_c(code), str(mobilenet)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.slow
def test_tvmgen_run_reports_the_pool(mobilenet, host_runtime, tmp_path):
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs

    want = _run_in_child(mobilenet, 1)["out"]
    (spec,) = artifact.load(mobilenet).inputs
    inputs = random_inputs([spec], seed=3)  # the child's input
    for extra, pool, threads in (
        (["--threads", "2"], "tvmgen", 2),
        (["--threads", "3"], "tvmgen", 3),
        (["--threads", "1", "--affinity", "big"], "tvm", 1),
    ):
        proc, outputs = run_native(host_runtime, mobilenet, inputs, tmp_path, *extra, tag="-".join(extra), repeat=2)
        assert proc.returncode == 0, proc.stderr
        timings = json.loads(proc.stdout)
        assert (timings["thread_pool"], timings["threads"]) == (pool, threads), extra
        assert f"threads: {threads})" in proc.stderr
        (got,) = outputs
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


SUBNORMAL = np.float32(1e-40)  # the smallest normal float32 is 1.2e-38
SCALED = np.full((1, 1 << 16), SUBNORMAL, np.float32)  # enough elements for a parallel loop
# TVMGEN_DENORMALS's environment (unset: the default) -> what x * 2^100 gives for a subnormal x: 0 where the
# kernels flush, IEEE's 1.27e-10 where they keep subnormals
EXPECTED = [({}, 0.0), ({"TVMGEN_DENORMALS": "keep"}, float(SUBNORMAL * np.float32(2.0**100)))]


def scale_by_2_100(path: Path) -> Path:
    """y = x * 2^100 on SCALED's shape."""
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    value_info = [oh.make_tensor_value_info(n, TensorProto.FLOAT, SCALED.shape) for n in ("x", "y")]
    scale = numpy_helper.from_array(np.array(2.0**100, np.float32), "s")
    return save_onnx(
        onnx_model([oh.make_node("Mul", ["x", "s"], ["y"])], value_info[:1], value_info[1:], [scale]), path
    )


def distinct(array) -> list[float]:
    return sorted({float(v) for v in np.asarray(array).ravel()})


@pytest.mark.slow
def test_models_flush_subnormals_in_python_and_in_tvmgen_run(compiled, host_runtime, tmp_path):
    """A model's kernels run with subnormals flushed (the launcher's mode): x * 2^100 of a subnormal x is 0,
    through HostModel and tvmgen-run alike; TVMGEN_DENORMALS=keep gives IEEE's 1.27e-10. The caller's own
    arithmetic keeps subnormals after the run."""
    art = compiled(scale_by_2_100(tmp_path / "scale.onnx"), "host", "cpu", name="scale")
    np.save(tmp_path / "x.npy", SCALED)
    code = """
import json, sys
import numpy as np
from tvmgen.runtime.runner import HostModel
(y,) = HostModel(sys.argv[1], threads=2).run({"x": np.load(sys.argv[2])})
print(json.dumps({"y": sorted({float(v) for v in y.ravel()}), "after": float(np.float32(1e-40) * np.float32(2))}))
"""
    for setting, want in EXPECTED:
        env = {**os.environ, **setting}
        proc = subprocess.run(
            [*python_c(code), str(art), str(tmp_path / "x.npy")], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        assert r["y"] == [pytest.approx(want)] and r["after"] == pytest.approx(2e-40, rel=1e-3), (setting, r)
        native, outputs = run_native(
            host_runtime,
            art,
            {"x": SCALED},
            tmp_path,
            "--threads",
            "2",
            tag=f"run-{len(setting)}",
            env=setting,
            repeat=2,
        )
        assert native.returncode == 0, native.stderr
        assert distinct(outputs[0]) == [pytest.approx(want)], setting


@pytest.mark.slow
def test_aarch64_kernels_flush_subnormals_under_qemu(compiled, aarch64_runtime, tmp_path):
    """The same on Arm (FPCR's FZ): the linux-aarch64 build under qemu-aarch64, which emulates the mode."""
    for tool in ("qemu-aarch64", "aarch64-linux-gnu-g++"):
        require_tool(tool)
    art = compiled(scale_by_2_100(tmp_path / "scale.onnx"), "linux-aarch64", "cpu", name="scale")
    for setting, want in EXPECTED:
        proc, outputs = run_native(
            aarch64_runtime,
            art,
            {"x": SCALED},
            tmp_path,
            "--threads",
            "2",
            "--warmup",
            "0",
            launcher=QEMU_AARCH64,
            env=setting,
            tag=f"a64-{len(setting)}",
        )
        assert proc.returncode == 0, proc.stderr
        assert distinct(outputs[0]) == [pytest.approx(want)], setting


ZOO_AT_TWO_THREADS = ["shufflenet_v2_x1_0", "mobilenet_v3_small", "seg_head"]


@pytest.fixture(scope="module")
def zoo_artifacts(tmp_path_factory, compiled):
    """The zoo models' host builds: the session's shared ones (test_zoo compiles the same models)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo

    work = tmp_path_factory.mktemp("zoo2")
    built = {}
    for name in ZOO_AT_TWO_THREADS:
        path, flags = zoo.build(name, work)
        assert not flags, flags  # none of these needs --const
        built[name] = (path, compiled(path, "host", "cpu", name=name))
    return built


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["tvmgen", "tvm"])
@pytest.mark.parametrize("name", ZOO_AT_TWO_THREADS)
def test_zoo_models_on_two_threads_match_the_reference(zoo_artifacts, name, pool):
    """Parallel kernels that race show only on more than one thread: ShuffleNet's depthwise
    convolutions, padded to whole vectors, were right on one thread and off by 224 on two, with
    either pool (the zoo times one thread). Five runs each, every one within the zoo's tolerance."""
    model_file, artifact = zoo_artifacts[name]
    code = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[3])
        import zoo
        from tvmgen.runtime.runner import HostModel
        from tvmgen.core.model import random_inputs
        m = HostModel(sys.argv[1], threads=2)
        x = random_inputs(m.manifest.inputs, seed=0)
        want = zoo.reference_runner(Path(sys.argv[2]), {})(x)
        tol = zoo.tolerance(want)
        print(json.dumps({"pool": m.parallel, "threads": m.threads, "tol": tol,
                          "errors": [zoo.max_error(m.run(x), want) for _ in range(5)]}))
    """)
    env = dict(os.environ, TVM_NUM_THREADS="2", TVMGEN_THREAD_POOL=pool)
    proc = subprocess.run(
        [
            *python_c(code),
            str(artifact),
            str(model_file),
            str(REPO / "benchmarks"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["pool"] == pool and (pool == "tvm" or r["threads"] == 2), r
    assert max(r["errors"]) <= r["tol"], r
