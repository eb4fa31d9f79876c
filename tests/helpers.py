"""Plain helpers the test modules share (conftest.py holds the fixtures): the CLI in a subprocess from a
module-scoped fixture, environment variables set for a block, and RPC servers on 127.0.0.1 that stop
when the block ends."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import cli_forks
from conftest import REPO


def python_c(code: str) -> list[str]:
    """``python -c CODE`` for a snippet that uses TVM but not PyTorch: TVM is loaded as the CLI loads it
    (tvmgen.load_tvm_without_torch), which saves each such process about 1.7 s of CPU."""
    return [sys.executable, "-c", "import tvmgen; tvmgen.load_tvm_without_torch()\n" + code]


def run_tvmgen(
    *args, env: dict | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`python -m tvmgen ARGS` in a process of its own (tests/cli_forks.py), with the environment as it is now
    plus ``env``. (The ``tvmgen`` fixture is for tests; this one also serves module-scoped fixtures.)"""
    return cli_forks.run(args, dict(os.environ, **(env or {})), cwd=cwd, timeout=timeout)


@contextlib.contextmanager
def environment(**values) -> Iterator[None]:
    """os.environ with ``values`` set inside the block (restored after it); for module-scoped fixtures,
    which cannot take ``monkeypatch``."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, str(value))
        yield


@contextlib.contextmanager
def stopping(*servers) -> Iterator[None]:
    """Stops the rpc servers given (started by tvmgen.remote.rpc), last first, when the block ends."""
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.callback(server.stop)
        yield


@contextlib.contextmanager
def device_behind(via: str, platform: str, key: str, work_dir: Path, port: int, port_end: int, **device_options):
    """A tracker (``via`` "tracker") or a proxy ("proxy") on a free port in [port, port_end], with one of
    tvmgen's device servers for ``platform`` registered on it under ``key``; yields (that tracker or
    proxy, the device). Both are stopped when the block ends."""
    from tvmgen.remote import rpc

    start = rpc.start_tracker if via == "tracker" else rpc.start_proxy
    server = start(port=port, port_end=port_end)
    with stopping(server):
        device = rpc.start_device(platform, key, work_dir=work_dir, **{via: server.address}, **device_options)
        with stopping(device):
            yield server, device


def bench_on_a_gpu_device(model, tmp_path: Path, *flags, ports: tuple[int, int] = (20200, 20290)) -> dict:
    """`tvmgen bench MODEL FLAGS --repeat 2` on tvmgen's host device server ("gpu", behind a tracker started
    for it on a port in ``ports``: each test module its own range; its state, logs and OpenCL / Vulkan kernel
    caches under ``tmp_path``), which must succeed: its JSON."""
    out = tmp_path / "r.json"
    with (
        environment(
            TVMGEN_STATE_DIR=tmp_path / "state",
            TVMGEN_OPENCL_CACHE_DIR=tmp_path / "cl-cache",
            TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache",
        ),
        device_behind("tracker", "host", "gpu", tmp_path / "w", *ports) as (tracker, _),
    ):
        via = ["--key", "gpu", "--tracker", tracker.address]
        r = run_tvmgen(
            "bench", model, *via, *flags, "--repeat", "2", "--json", out, env={"TVMGEN_LOG_DIR": str(tmp_path / "logs")}
        )
        assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


def load_benchmark(name: str):
    """The module benchmarks/NAME.py, imported (its sibling benchlib importable while it loads)."""
    import importlib.util

    folder = str(REPO / "benchmarks")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def run_benchmark(
    script: str,
    *args,
    python: tuple | list = (sys.executable,),
    env: dict | None = None,
    cwd=REPO,
    timeout=900,
    succeed: bool = True,
) -> subprocess.CompletedProcess:
    """benchmarks/SCRIPT ARGS run by ``python``, which must succeed (the end of its stderr shown if not) unless
    ``succeed`` is False: the finished process."""
    proc = subprocess.run(
        [*python, str(REPO / "benchmarks" / script), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    assert proc.returncode == 0 or not succeed, proc.stderr[-3000:]
    return proc


# where tvmgen looks for the Android SDK and NDK, the TVM source tree and Gradle before its own downloads
TOOL_LOCATION_VARS = (
    "ANDROID_HOME",
    "ANDROID_SDK_ROOT",
    "ANDROID_NDK_HOME",
    "ANDROID_NDK_ROOT",
    "TVM_NDK_CC",
    "TVM_SOURCE_DIR",
    "GRADLE_HOME",
)


def environ_without_tools(*more: str) -> dict:
    """os.environ less TOOL_LOCATION_VARS and the variables ``more``: a machine whose tools tvmgen has
    to find (or download) itself."""
    drop = {*TOOL_LOCATION_VARS, *more}
    return {k: v for k, v in os.environ.items() if k not in drop}


def cmake_configure(source: Path, build: Path, *definitions: str, aarch64: bool = False) -> Path:
    """Configure ``source`` into ``build`` with Makefiles against the pip-installed TVM (the host's, or the
    linux-aarch64 one with the cross toolchain and the host JDK's jni.h); a failure shows CMake's output.

    Unoptimized, with asserts (``CMAKE_BUILD_TYPE=None``: -O0, no NDEBUG) unless ``definitions`` set a build
    type: these projects are built to test their CMake, links and behaviour, not their speed, and -O0 halves
    the CPU a runtime build takes (the runtime the benchmarks and tvmgen-run use is the Release build)."""
    from tvmgen.runtime import runtime_build

    args = [
        "-G",
        "Unix Makefiles",
        *([] if any(d.startswith("-DCMAKE_BUILD_TYPE=") for d in definitions) else ["-DCMAKE_BUILD_TYPE=None"]),
        f"-DTVMGEN_TVM_PREBUILT={runtime_build.tvm_prebuilt('linux-aarch64' if aarch64 else 'host')}",
    ]
    if aarch64:
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'jni' / 'cmake' / 'aarch64-linux-gnu.cmake'}")
        args.append(f"-DTVMGEN_JNI_INCLUDE_DIRS={';'.join(map(str, runtime_build.host_jni_include_dirs()))}")
    r = subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build), *args, *definitions], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return build


def cmake_build(build: Path, *targets: str) -> None:
    """Build ``targets`` (all when none) of a configured tree; a failure shows the compiler's output."""
    r = subprocess.run(
        ["cmake", "--build", str(build), "-j2", *(["--target", *targets] if targets else [])],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def assert_kernels_add_up(p, low: float = 0.85, high: float = 1.2) -> None:
    """A profile's kernels add up to the whole run, within 15-20% (``low``/``high``: the least/most share
    they may take), on the fastest runs or on the medians. On a shared machine noise only adds time, and
    which of the two it spares differs: a loaded run's medians differed by 20-30% while the fastest runs
    agreed, and a 0.09 ms run's fastest runs differed by 15% while its medians agreed within 1%; under a
    suite's load the built-in model's ~60 kernels, each between two clock reads, summed to 1.12x its fastest
    whole run. A kernel lost or counted twice is caught by the call counts the tests compare first; this
    catches a wrong clock or unit. ``p``: a reports.profile.Profile or its JSON."""
    get = (lambda k: p[k]) if isinstance(p, dict) else (lambda k: getattr(p, k))
    fastest = (get("kernels_min_ms"), get("whole_run_min_ms"))
    medians = (get("kernels_median_ms"), get("whole_run_ms"))
    assert min(*fastest, *medians) > 0, (fastest, medians)
    shares = [kernels / whole for kernels, whole in (fastest, medians)]
    assert any(low <= share <= high for share in shares), (
        f"kernels / whole run: fastest runs {fastest[0]} / {fastest[1]} ms, medians {medians[0]} / {medians[1]} ms"
    )


# ----------------------------------------------------------------------------- models compiled and checked
# (shared by several test modules)


def compile_and_run(path, tmp_path, overrides=(), separate_params=False, **names):
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.frontends.base import InputOverride

    imported = frontends.load(path, [InputOverride.parse(o) for o in overrides], **names)
    out = tmp_path / "artifact"
    compile_to_artifact(
        imported,
        BuildOptions(PLATFORMS["host"], "cpu", separate_params=separate_params),
        out,
        True,
        {"name": path.stem},
    )
    return (imported, *run_against_reference(imported, out))


def run_against_reference(imported, artifact):
    """(inputs, the artifact's outputs, the reference runtime's) on seeded random inputs."""
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    inputs = random_inputs(imported.inputs, seed=3)
    return inputs, HostModel(artifact).run(inputs), imported.reference(inputs)


def assert_close(actual, expected, atol=1e-4, rtol=1e-4):
    import numpy as np

    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol)


# Explicit CPU targets, whatever this machine is: expectations come from the target, never the host.
# (lanes of float32, vector registers) follow from each target's vector width, and the classifier's
# (1, 512) x (512, 1000) matrix-vector product is tiled from them: the widest vector tile dividing
# 1000 (8 floats; two NEON vectors), then as many such vectors per task as the registers allow
# (registers - 4: 28 with AVX-512, 12 with AVX2) and divide 125: 1000 = tasks x vectors x 8.
CPU_TARGETS = {
    "avx512": ({"kind": "llvm", "mcpu": "skylake-avx512"}, (16, 32), {"tasks": 5, "vectors": 25}),
    "avx2": ({"kind": "llvm", "mcpu": "haswell"}, (8, 16), {"tasks": 25, "vectors": 5}),
    "neon": (
        {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
        (4, 32),
        {"tasks": 25, "vectors": 5},  # 5 x 2 vectors a task: 10 chains of multiply-adds, not 2
    ),
}


def prepared_and_scheduled(path, platform="host", target_spec=None):
    """The fused TIR functions of a model, scheduled as `compile` does; (module, scheduled, left)."""
    import tvm
    from tvm import relax

    from tvmgen import frontends
    from tvmgen.compiler import cpu
    from tvmgen.compiler.cpu import schedules
    from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

    imported = frontends.load(path, [])
    mod = imported.mod
    weights = mod["main"].params[len(imported.inputs) :]
    mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    target = make_target(target_spec or PLATFORMS[platform].cpu_target())
    with target:
        mod = tvm.transform.Sequential(cpu.prepare_passes(target))(mod)
    done, left = schedules.schedule_module(mod, schedules.cpu_shape(target))
    return mod, done, left


def keras_int8_model(tmp_path, stem: bool = False):
    """A small full-integer TFLite model as the TFLite converter writes one (int8 weights and
    activations, float interface): 1x1 convolutions with 48 and 24 (not a whole AVX-512 vector)
    output channels, a depthwise convolution, a residual add, a 10-way dense layer. ``stem``: a
    1x1 convolution first, so that the residual block's input is a convolution's 8-bit output (as
    in MobileNetV2) rather than the model's quantised input."""
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    x = tf.keras.Input((14, 14, 24), batch_size=1)
    s = tf.keras.layers.Conv2D(24, 1)(x) if stem else x
    h = tf.keras.layers.Conv2D(48, 1, activation=tf.nn.relu6)(s)
    h = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation=tf.nn.relu6)(h)
    h = tf.keras.layers.Conv2D(24, 1)(h)
    h = tf.keras.layers.Add()([s, h])
    h = tf.keras.layers.GlobalAveragePooling2D()(h)
    y = tf.keras.layers.Dense(10)(h)
    keras_model = tf.keras.Model(x, y)
    rng = np.random.default_rng(0)
    for layer in keras_model.layers:
        ws = layer.get_weights()
        if ws:
            layer.set_weights([rng.normal(0, 0.5, v.shape).astype(np.float32) for v in ws])
    converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: (
        [rng.uniform(-1, 1, (1, 14, 14, 24)).astype(np.float32)] for _ in range(16)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    path = tmp_path / ("q-stem.tflite" if stem else "q.tflite")
    path.write_bytes(converter.convert())
    return path


STATS = re.compile(r"tvmgen-opencl: cache (\{.*\})")


def run_tool(runtime: Path, artifact: Path, tmp_path: Path, inputs: dict, cache=None, env=None, tag="out", extra=()):
    """tvmgen-run with .npy inputs (kernel cache ``cache``, environment ``env``, arguments ``extra``); returns
    (returncode, outputs, stats dict or None, stderr)."""
    from conftest import run_native

    full_env = {"TVMGEN_OPENCL_LOG": "1", **(env or {})}
    if cache is not None:
        full_env["TVMGEN_OPENCL_CACHE_DIR"] = str(cache)
    proc, outputs = run_native(runtime, artifact, inputs, tmp_path, *extra, env=full_env, tag=tag)
    m = STATS.search(proc.stderr)
    return proc.returncode, outputs, json.loads(m.group(1)) if m else None, proc.stderr


def vulkan_device(host_runtime: Path) -> dict:
    """The Vulkan device the host runtime's libtvmgen_vulkan finds, asked in another process (a driver that
    crashes takes only that one down): its tvmgen.vulkan.info. Unavailable (a failure under CI) where the
    runtime was built without the backend or no device is found."""
    from conftest import unavailable

    lib = host_runtime / "lib" / "libtvmgen_vulkan.so"
    if not lib.is_file():
        unavailable("the host runtime was built without libtvmgen_vulkan (apt-get install libvulkan-dev)")
    code = f"import ctypes, tvm; ctypes.CDLL({str(lib)!r}, ctypes.RTLD_GLOBAL); print(tvm.get_global_func('tvmgen.vulkan.info')())"
    proc = subprocess.run(python_c(code), capture_output=True, text=True, timeout=120)
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-500:]}
    if not info.get("available"):
        unavailable(f"no Vulkan device: {info.get('error')} (apt-get install libvulkan1 mesa-vulkan-drivers)")
    return info


def run_as_haswell(path, tmp_path) -> None:
    """Build ``path`` for an AVX2 CPU (LLVM's haswell) and check its outputs against the reference runtime:
    natively where this CPU has AVX2, else under qemu-x86_64 emulating one."""
    import platform as host_platform

    from conftest import require_tool
    from fixtures_runtime import run_native
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS, missing_cpu_features
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime import runtime_build
    from tvmgen.runtime.runner import HostModel

    if host_platform.machine() != "x86_64":
        reason = (
            f"this host is {host_platform.machine()}: the AVX2 build's schedule was checked above, and its code runs "
            "only with an x86-64 tvmgen runtime (qemu-x86_64 needs one too)"
        )
        print(f"skipping the run: {reason}")
        pytest.skip(reason)
    plat = PLATFORMS["host"].with_cpu("haswell")
    imported = frontends.load(path, [])
    out = tmp_path / "haswell"
    compile_to_artifact(imported, BuildOptions(plat, "cpu"), out, True, {"name": path.stem})
    inputs = random_inputs(imported.inputs, seed=4)
    expected = imported.reference(inputs)
    if not missing_cpu_features(plat.cpu_target()):
        assert_close(HostModel(out).run(inputs), expected, atol=1e-4, rtol=1e-4)
        return
    require_tool("qemu-x86_64")
    proc, outs = run_native(
        runtime_build.cached_build("host"),
        out,
        inputs,
        tmp_path,
        "--warmup",
        "0",
        launcher=("qemu-x86_64", "-cpu", "Haswell-v4"),
    )
    assert proc.returncode == 0, proc.stderr
    assert_close(outs, expected, atol=1e-4, rtol=1e-4)
