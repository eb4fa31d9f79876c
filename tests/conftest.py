"""Shared fixtures: models made inside the tests (nothing downloaded), a CLI runner, the device runtime
built once per session and platform, and compiled artifacts cached per session.

Two ways to run the suite (from the repository root):

    .venv/bin/python -m pytest                  # everything, on every core (pytest-xdist; -n0: one process)
    .venv/bin/python -m pytest -m "not slow"    # the quick subset: no end-to-end compiles of whole models,
                                                # RPC, qemu, CMake builds or tuning (tests marked slow)

Tests that take more than about 15 seconds are marked ``@pytest.mark.slow``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"  # the recorded outputs (recorded/) and the Java checks (java/) the test folders share


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: two workers a core. Half of a worker's time goes to waiting (on RPC servers, qemu,
    subprocesses, another worker's compile of a shared artifact): with one worker a core, a 2-core run
    kept one core busy on average (24 min wall for 25 min of CPU)."""
    return 2 * len(os.sched_getaffinity(0))


TVMGEN = [sys.executable, "-m", "tvmgen"]

# The modules that take longest, heaviest first (their wall time in a CI run with 4 workers on 2 cores,
# measured with TVMGEN_TEST_TIMES). With --dist loadfile each module runs whole on one worker, handed out
# in collection order (pyproject's --no-loadscope-reorder: xdist would otherwise order the modules by their
# number of tests, which says little about their time): a long module handed out late is the suite's tail.
# Only the order changes; modules not listed keep their places after these.
HEAVY_FIRST = (
    "test_tune.py",  # 377 s
    "test_schedules.py",  # 298
    "test_templates.py",  # 275
    "test_nnapi.py",  # 272
    "test_parallel.py",  # 271
    "test_coverage.py",  # 234
    "test_vulkan.py",  # 219
    "test_cli.py",  # 207
    "test_int8.py",  # 180
    "test_zoo.py",  # 179
    "test_opencl_zoo.py",  # 156
    "test_recurrent.py",  # 150
    "test_opencl.py",  # 147
    "test_frontends.py",  # 141
    "test_precision.py",  # 140
    "test_tune_opencl.py",  # 139
    "test_benchmarks.py",  # 118
    "test_rpc.py",  # 111
    "test_profile.py",  # 107
    "test_mediapipe_ops.py",  # 101
    "test_check_arm.py",  # 100
)


def pytest_configure(config):
    """Every build of the run is logged ($TVMGEN_COMPILE_LOG, compiler/build.py; the workers and the CLI
    subprocesses inherit it), so the summary can name the builds that repeat: a model compiled twice is
    suite time spent twice."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("TVMGEN_COMPILE_LOG"):
        return
    import tempfile

    fd, path = tempfile.mkstemp(prefix="tvmgen-builds-", suffix=".jsonl")
    os.close(fd)
    os.environ["TVMGEN_COMPILE_LOG"] = path
    config._tvmgen_build_log = Path(path)


def pytest_terminal_summary(terminalreporter, config):
    log = getattr(config, "_tvmgen_build_log", None)
    if log is None or not log.is_file():
        return
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    log.unlink()
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["module"], r["target"], json.dumps(r["options"], sort_keys=True)), []).append(r)
    again = sorted(((sum(r["seconds"] for r in g[1:]), g) for g in groups.values() if len(g) > 1), key=lambda x: -x[0])
    write = terminalreporter.write_line
    write(
        f"builds: {len(rows)} ({sum(r['seconds'] for r in rows):.0f} s), {len(groups)} distinct; "
        f"{sum(len(g) - 1 for _, g in again)} repeated a build of the same module, target and options "
        f"({sum(s for s, _ in again):.0f} s)"
    )
    for seconds, g in again[:10]:
        tests = sorted({r["test"].split(" ")[0] for r in g})
        write(f"  {seconds:5.1f} s  x{len(g)} {g[0]['target']}: {', '.join(tests)[:300]}")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's order is kept


def _timed_phase(item, phase: str):
    """With TVMGEN_TEST_TIMES=FILE, append one JSON line per test phase: wall and CPU seconds (this
    worker's own, and its waited-for children's), the start time and the worker. Where the suite's
    time goes: a phase with much wall and little CPU is waiting (a timeout, a sleep, another process)."""
    out = os.environ.get("TVMGEN_TEST_TIMES")
    if not out:
        yield
        return
    import time

    t0, c0 = time.time(), os.times()
    yield
    c1 = os.times()
    row = {
        "test": item.nodeid,
        "phase": phase,
        "start": round(t0, 3),
        "wall": round(time.time() - t0, 3),
        "cpu": round(c1.user + c1.system - c0.user - c0.system, 3),
        "children": round(c1.children_user + c1.children_system - c0.children_user - c0.children_system, 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed_phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed_phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _timed_phase(item, "teardown")


def unavailable(reason: str) -> None:
    """A tool a test needs is missing: skip with the reason printed; under CI=true fail instead,
    since scripts/bootstrap.sh installs every tool the tests use."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: scripts/bootstrap.sh should have installed it)")
    print(f"skipping: {reason}", file=sys.stderr)
    pytest.skip(reason)


def opencl_info(lib: Path) -> dict:
    """`tvmgen.opencl.info()` of the libtvmgen_opencl at ``lib`` (platform, devices with their fp16 and
    image support), read in a separate process; skips (fails under CI=true) when no OpenCL device is found."""
    import json

    code = (
        "import ctypes, sys, tvm; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); "
        "print(tvm.get_global_func('tvmgen.opencl.info')())"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if not info["available"]:
        unavailable(
            f"no OpenCL platform here ({info.get('error', 'unknown')}); install PoCL: apt-get install pocl-opencl-icd"
        )
    return info


@pytest.fixture(scope="session")
def host_runtime() -> Path:
    """The host runtime (tvmgen-run, tvmgen-rpc-server, libtvmgen_runtime, libtvmgen_opencl) built from jni/
    with CMake once (runtime_build.cached_build: rebuilt when jni/'s sources or TVM's version change), shared
    by every module. Tests about building into a fresh directory build their own."""
    from tvmgen.runtime import runtime_build

    require_tool("cmake")
    return runtime_build.cached_build("host")


@pytest.fixture(scope="session")
def aarch64_runtime() -> Path:
    """The linux-aarch64 runtime (cross-compiled, run under qemu), built once like ``host_runtime``."""
    from tvmgen.runtime import runtime_build

    for tool in ("cmake", "aarch64-linux-gnu-g++", "qemu-aarch64"):
        require_tool(tool)
    return runtime_build.cached_build("linux-aarch64")


@pytest.fixture(scope="session")
def ocl_runtime(host_runtime) -> Path:
    """The host runtime, with its libtvmgen_opencl (the session's one build, see ``host_runtime``)."""
    assert (host_runtime / "lib" / "libtvmgen_opencl.so").is_file()
    return host_runtime


@pytest.fixture(scope="session")
def opencl_lib(ocl_runtime) -> Path:
    """libtvmgen_opencl, after checking (in a separate process) that it finds an OpenCL device."""
    lib = ocl_runtime / "lib" / "libtvmgen_opencl.so"
    opencl_info(lib)
    return lib


def _run_captured(cmd, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def java_build(tmp_path_factory, host_runtime) -> dict:
    """libtvmgen_jni.so + tvmgen.jar of the session's host runtime build (``host_runtime``: it has the Java
    API where CMake finds a JDK), and tests/java compiled against the jar once per run (pytest-xdist workers
    take turns, as ``compiled`` does); shared by the Java API's tests and the AAR's host run."""
    import platform
    import shutil

    from tvmgen.core.artifact import exclusive

    for tool in ("cmake", "javac", "java"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed: cannot build and test the Java API")
    lib_dir = host_runtime / "lib"
    lib, jar = lib_dir / "libtvmgen_jni.so", host_runtime / "share" / "java" / "tvmgen.jar"
    if not (lib.is_file() and jar.is_file()):
        unavailable(f"the host runtime build {host_runtime} has no Java API: CMake found no JDK (set JAVA_HOME)")
    base = tmp_path_factory.getbasetemp()
    classes = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "java-test-classes"
    with exclusive(classes.with_name("java-test-classes.lock")):
        if not (classes / "ModelCheck.class").is_file():  # not compiled by another worker of this run
            c = _run_captured(["javac", "-cp", jar, "-d", classes, *sorted((REPO / "tests" / "java").glob("*.java"))])
            assert c.returncode == 0, f"javac failed:\n{c.stdout}\n{c.stderr}"
    assert (lib_dir / "libtvmgen_jni_bridge.so").is_file(), sorted(p.name for p in lib_dir.iterdir())
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64"):
        assert (lib_dir / "libtvmgen_jni_sigguard.so").is_file(), sorted(p.name for p in lib_dir.iterdir())
    return {"prefix": host_runtime, "dir": lib_dir, "lib": lib, "jar": jar, "classpath": f"{jar}{os.pathsep}{classes}"}


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """``compiled(model_path, platform="host", device="cpu", name=None, consts=None, inputs=None, state=None,
    **BuildOptions fields)`` (``consts``: --const values, name -> text; ``inputs``: --input values; ``state``:
    --state IN=OUT values): the artifact
    directory of the model compiled through tvmgen's one seam, ``pipeline.compile_model`` (manifest name
    ``name``, default the file's stem; its source, format and sha256 recorded as `tvmgen compile` records
    them, so --check and bench find the reference), once per session for each (sha256 of the model's bytes, options). Shared: a test that changes an
    artifact copies it first. Tests about compiling itself (its output, its errors) still compile."""
    from tvmgen.core.artifact import exclusive

    # One cache for the whole run: with pytest-xdist each worker has its own basetemp below the run's, and
    # the workers share the run's folder, taking turns (a lock per key) so a model is compiled once per run.
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "compiled"
    done: dict[str, Path] = {}

    def compile_once(
        model_path, platform="host", device="cpu", name=None, consts=None, inputs=None, state=None, **options
    ) -> Path:
        from tvmgen.compiler import pipeline
        from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget

        model_path = Path(model_path)
        plat = PLATFORMS[platform] if isinstance(platform, str) else platform
        name = name or model_path.stem
        digest = pipeline.model_digest
        fields = {k: digest(v) if isinstance(v, Path) else repr(v) for k, v in sorted(options.items())}
        key_text = json.dumps([digest(model_path), plat.name, device, name, consts or {}, inputs, fields])
        key_text += json.dumps(state) if state else ""  # --state pairs: the key of a model without them is unchanged
        key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
        if key not in done:
            out = root / key / name
            with exclusive(root / f"{key}.lock"):
                if not (out / "manifest.json").is_file():  # not compiled by another worker of this run
                    loaded = pipeline.load_model(model_path, root, inputs or (), consts=consts, state=state or ())
                    target = BuildTarget(plat, device, options.pop("gpu_family", "generic"))
                    pipeline.compile_model(loaded, target, out, info={"name": name}, **options)
            done[key] = out
        return done[key]

    return compile_once


def require_tool(name: str) -> None:
    import shutil

    if not shutil.which(name):
        unavailable(f"{name} is not installed (run scripts/bootstrap.sh)")


QEMU_AARCH64 = ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")  # runs the linux-aarch64 runtime here


def run_native(
    runtime: Path,
    artifact: Path,
    inputs: dict,
    tmp_path: Path,
    *extra: str,
    launcher: tuple | list = (),
    env: dict | None = None,
    tag: str = "out",
    repeat: int | None = 1,
):
    """tvmgen-run from ``runtime`` (an install prefix) on ``artifact`` with ``inputs`` (name -> array, saved
    as .npy), under ``launcher`` (e.g. QEMU_AARCH64) if given. Returns (the finished process, the outputs in
    the manifest's order, or None when it failed). ``repeat`` None: tvmgen-run's default."""
    from tvmgen.runtime.runner import output_file_name

    args = []
    for name, arr in inputs.items():
        p = tmp_path / f"in-{tag}-{name}.npy"
        np.save(p, arr)
        args += ["--input", f"{name}={p}"]
    outdir = tmp_path / tag
    outdir.mkdir(exist_ok=True)
    cmd = [*launcher, str(runtime / "bin" / "tvmgen-run"), str(artifact), *args, "-o", str(outdir)]
    cmd += [*(["--repeat", str(repeat)] if repeat else []), *extra]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env=None if env is None else {**os.environ, **env}
    )
    if proc.returncode != 0:
        return proc, None
    manifest = json.loads((Path(artifact) / "manifest.json").read_text())
    return proc, [np.load(outdir / output_file_name(o["name"])) for o in manifest["outputs"]]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def tvmgen(tmp_path, monkeypatch):
    """Run the real CLI in a subprocess (real exit codes, real output), logs under tmp_path."""
    env = dict(os.environ, TVMGEN_LOG_DIR=str(tmp_path / "logs"), COLUMNS="200")

    def run(*args, cwd=None, extra_env=None, timeout=600) -> CliResult:
        proc = subprocess.run(
            [*TVMGEN, *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd or tmp_path,
            env={**env, **(extra_env or {})},
            timeout=timeout,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def tvmgen_inprocess(tmp_path, monkeypatch):
    """Like ``tvmgen``, but tvmgen.cli's main() runs in this process under click's CliRunner, capturing the
    file descriptors (what C++ code writes too), with the same exit codes and error output; no new Python,
    no TVM import (2-5 s each). For argument and error paths that do no TVM work; the subprocess runner
    stays for everything else."""
    import logging
    import warnings

    import click
    from click.testing import CliRunner

    from tvmgen import cli as tvmgen_cli

    @click.command(
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False, "help_option_names": []}
    )
    @click.argument("argv", nargs=-1, type=click.UNPROCESSED)
    def real_main(argv):
        sys.argv = ["tvmgen", *argv]
        tvmgen_cli.main()

    env = {"TVMGEN_LOG_DIR": str(tmp_path / "logs"), "COLUMNS": "200"}
    logger = logging.getLogger("tvmgen")

    def run(*args, cwd=None, extra_env=None) -> CliResult:
        monkeypatch.chdir(cwd or tmp_path)
        monkeypatch.setattr(sys, "argv", list(sys.argv))
        saved = (list(logger.handlers), logger.level, logger.propagate, warnings.showwarning)
        try:
            result = CliRunner(capture="fd").invoke(
                real_main, list(map(str, args)), env={**env, **(extra_env or {})}, catch_exceptions=True
            )
        finally:
            for h in logger.handlers:
                if h not in saved[0]:
                    h.close()
            logger.handlers[:] = saved[0]
            logger.setLevel(saved[1])
            logger.propagate = saved[2]
            logging.captureWarnings(False)
            warnings.showwarning = saved[3]
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run


# ----------------------------------------------------------------------------- ONNX models


def onnx_model(nodes, inputs, outputs, initializers=(), opset=17):
    from onnx import helper

    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def save_onnx(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return path


def single_op_models() -> dict:
    """Name -> ONNX model with one operator (or a short chain) that mobile models spend time in."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    F = TensorProto.FLOAT

    def vi(name, shape):
        return helper.make_tensor_value_info(name, F, shape)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    x4 = vi("x", [1, 8, 16, 16])
    models = {
        "conv3x3": onnx_model(
            [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1])],
            [x4],
            [vi("y", [1, 16, 16, 16])],
            [w("W", 16, 8, 3, 3), w("B", 16)],
        ),
        "conv_depthwise": onnx_model(
            [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], group=8, strides=[2, 2])],
            [x4],
            [vi("y", [1, 8, 8, 8])],
            [w("W", 8, 1, 3, 3)],
        ),
        "conv1x1": onnx_model(
            [helper.make_node("Conv", ["x", "W"], ["y"])], [x4], [vi("y", [1, 32, 16, 16])], [w("W", 32, 8, 1, 1)]
        ),
        "gemm": onnx_model(
            [helper.make_node("Gemm", ["a", "W", "B"], ["y"], transB=1)],
            [vi("a", [4, 64])],
            [vi("y", [4, 32])],
            [w("W", 32, 64), w("B", 32)],
        ),
        "matmul": onnx_model(
            [helper.make_node("MatMul", ["a", "b"], ["y"])],
            [vi("a", [2, 8, 16]), vi("b", [2, 16, 4])],
            [vi("y", [2, 8, 4])],
        ),
        "add_relu6": onnx_model(
            [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["y"])],
            [x4],
            [vi("y", [1, 8, 16, 16])],
            [
                w("b", 8, 1, 1),
                numpy_helper.from_array(np.array(0, np.float32), "lo"),
                numpy_helper.from_array(np.array(6, np.float32), "hi"),
            ],
        ),
        "maxpool": onnx_model(
            [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
            [x4],
            [vi("y", [1, 8, 8, 8])],
        ),
        "avgpool_global": onnx_model(
            [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [x4], [vi("y", [1, 8, 1, 1])]
        ),
        "softmax": onnx_model(
            [helper.make_node("Softmax", ["a"], ["y"], axis=-1)], [vi("a", [3, 10])], [vi("y", [3, 10])]
        ),
        "concat_transpose": onnx_model(
            [
                helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
                helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1]),
            ],
            [x4],
            [vi("y", [1, 16, 16, 16])],
        ),
        "two_outputs": onnx_model(
            [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Sigmoid", ["a"], ["s"])],
            [vi("a", [2, 5])],
            [vi("r", [2, 5]), vi("s", [2, 5])],
        ),
    }
    # MobileNetV3's depthwise block: the epilogue reads the window sum twice (last: the others' weights stay)
    models["conv_dw5_hardswish"] = onnx_model(
        [
            helper.make_node("Conv", ["x16", "W", "B"], ["c"], pads=[2, 2, 2, 2], group=16),
            helper.make_node("HardSwish", ["c"], ["y"]),
        ],
        [vi("x16", [1, 16, 12, 12])],
        [vi("y", [1, 16, 12, 12])],
        [w("W", 16, 1, 5, 5), w("B", 16)],
    )
    return models


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def builtin_onnx(models_dir) -> Path:
    from tvmgen.frontends.builtin import materialize

    return materialize("builtin:mobilenet", models_dir)


def torch_mobilenet_like():
    """A small MobileNetV2-style torch module (inverted residuals, ReLU6, 'same' padding)."""
    import torch
    from torch import nn

    def block(cin, cout, stride, expand=4):
        hidden = cin * expand
        return nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6())
            self.b1, self.b2, self.b3 = block(8, 8, 1), block(8, 16, 2), block(16, 16, 1)
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            x = self.stem(x)
            x = x + self.b1(x)
            x = self.b2(x)
            x = x + self.b3(x)
            # flatten with a shape computed in the graph: the pattern that needs simplification
            x = x.mean((2, 3)).reshape(x.shape[0], -1)
            return self.head(x)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net


@pytest.fixture(scope="session")
def torch_onnx(models_dir) -> Path:
    """The MobileNet-like torch net exported to ONNX with a dynamic batch dimension."""
    import torch

    path = models_dir / "mobilenet_like_dynamic.onnx"
    torch.onnx.export(
        torch_mobilenet_like(),
        (torch.randn(1, 3, 64, 64),),
        str(path),
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    return path


@pytest.fixture(scope="session")
def torch_pt2(models_dir) -> Path:
    import torch

    path = models_dir / "mobilenet_like.pt2"
    ep = torch.export.export(torch_mobilenet_like(), (torch.randn(1, 3, 64, 64),))
    torch.export.save(ep, str(path))
    return path


def keras_cnn():
    import tensorflow as tf

    tf.random.set_seed(0)
    return tf.keras.Sequential(
        [
            tf.keras.Input((32, 32, 3), batch_size=1, name="image"),
            tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu6"),
            tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same"),
            tf.keras.layers.Conv2D(16, 1, activation="relu"),
            tf.keras.layers.MaxPooling2D(2),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(10),
            tf.keras.layers.Softmax(),
        ]
    )


@pytest.fixture(scope="session")
def keras_model():
    """One Keras CNN shared by the TFLite, .pb and SavedModel fixtures, and their TensorFlow reference."""
    return keras_cnn()


@pytest.fixture(scope="session")
def tflite_model(models_dir, keras_model) -> Path:
    import tensorflow as tf

    path = models_dir / "cnn.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(keras_model).convert())
    return path


@pytest.fixture(scope="session")
def tflite_custom_op(models_dir) -> Path:
    """A TFLite model holding a custom operator (a TF op with no TFLite builtin)."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def f(x):
        return tf.math.bessel_i1e(x) + 1.0

    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    conv.allow_custom_ops = True
    path = models_dir / "custom.tflite"
    path.write_bytes(conv.convert())
    return path


def frozen_graph(keras_model, batch=None):
    """A frozen GraphDef of a Keras model with a Placeholder input named 'input'."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    shape = [batch, *keras_model.input_shape[1:]]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="input")])
    def f(x):
        return tf.identity(keras_model(x), name="probs")

    return convert_variables_to_constants_v2(f.get_concrete_function()).graph.as_graph_def()


@pytest.fixture(scope="session")
def pb_model(models_dir, keras_model) -> Path:
    """A frozen graph with a dynamic batch dimension (as TF exports them): needs --input."""
    path = models_dir / "mobilenet.pb"
    path.write_bytes(frozen_graph(keras_model, batch=None).SerializeToString())
    return path


@pytest.fixture(scope="session")
def saved_model(models_dir, keras_model) -> Path:
    import tensorflow as tf

    model = keras_model
    path = models_dir / "saved"

    class Wrapper(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([1, 32, 32, 3], tf.float32, name="image")])
        def serve(self, image):
            return {"probs": self.model(image)}

    w = Wrapper()
    tf.saved_model.save(w, str(path), signatures={"serving_default": w.serve})
    return path


def dynamic_pad_model():
    """Pad amounts computed from the input's shape (as torch exports 'same' padding).

    TVM's importer rejects this ("Dynamic pads are not supported yet") until the shape is
    fixed and the pad computation folded to a constant.
    """
    from onnx import TensorProto, helper, numpy_helper

    def c(name, value):
        return numpy_helper.from_array(np.array(value, dtype=np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "hw_idx"], ["hw"], axis=0),
        helper.make_node("Div", ["hw", "sixteen"], ["p"]),
        helper.make_node("Concat", ["zeros2", "p", "zeros2", "p"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant"),
        helper.make_node("Relu", ["y"], ["out"]),
    ]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, "ho", "wo"])],
        [c("hw_idx", [2, 3]), c("sixteen", 16), c("zeros2", [0, 0])],
    )
