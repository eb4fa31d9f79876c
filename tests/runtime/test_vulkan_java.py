"""The Java API (org.tvmgen.Model over libtvmgen_jni, host JVM, -Xcheck:jni) on Vulkan, on Mesa's lavapipe:
RunModel's outputs against the CPU build's, Model.profile and Model.prepare, the errors where Vulkan is
missing, and libtvmgen_vulkan's recorded runs replayed with new inputs.

Needs glslang-tools and spirv-tools to compile and validate, and the Vulkan loader with a driver to run
(libvulkan1, mesa-vulkan-drivers; the runtime build needs libvulkan-dev): all installed by
scripts/bootstrap.sh. Without them the tests are skipped (failed under CI=true).
The Java API is built with CMake and javac (conftest's ``java_build``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import save_onnx
from vulkan_support import MODELS, kernels_of, module_fixtures
from vulkan_support import vk_commands as _vk_commands

# whole models compiled for Vulkan, the host runtime and the Java API built with CMake
pytestmark = pytest.mark.slow


tools, arts, runtime = module_fixtures()


def _java_env(runtime, **extra) -> dict:
    """A JVM's environment for a Vulkan model: the runtime's lib/ on LD_LIBRARY_PATH (libtvmgen_vulkan sits
    beside libtvmgen_runtime there, where LoadBackend looks first; the path serves a JNI build without it),
    and the JDK's libjsig preloaded so that lavapipe's LLVM chains its signal handlers as the JVM asks (or
    -Xcheck:jni reports them)."""
    import os
    from pathlib import Path

    jdk = Path(shutil.which("java") or "java").resolve().parent.parent
    path = os.pathsep.join(filter(None, [str(runtime / "lib"), os.environ.get("LD_LIBRARY_PATH")]))
    env = {**os.environ, "LD_LIBRARY_PATH": path, **{k: str(v) for k, v in extra.items()}}
    if (jdk / "lib" / "libjsig.so").is_file():
        env["LD_PRELOAD"] = str(jdk / "lib" / "libjsig.so")
    return env


def _java(java_build, *args, env, lib_dir=None, fails=False, timeout=300) -> subprocess.CompletedProcess:
    """java -Xcheck:jni ARGS, which must not have complained (``fails``: a failing run, whose error TVM's
    allocator logs as a warning first)."""
    lib_dir = lib_dir or java_build["dir"]
    cmd = ["java", "-Xcheck:jni", f"-Djava.library.path={lib_dir}", "-cp", java_build["classpath"]]
    p = subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    if not fails:
        assert "warning" not in (p.stdout + p.stderr).lower(), f"-Xcheck:jni complained:\n{p.stdout}\n{p.stderr}"
    return p


@pytest.mark.parametrize("model", MODELS)
def test_java_api_on_lavapipe_matches_cpu(arts, runtime, java_build, tmp_path, model):
    """org.tvmgen.RunModel (Model over libtvmgen_jni) on the Vulkan build: device vulkan, outputs equal to
    the Python VM's on the CPU build, and Model.profile's kernels timed by Vulkan timestamps."""
    from tvmgen.core import artifact
    from tvmgen.runtime.runner import HostModel

    art = arts[(model, "vulkan")]
    m = artifact.load(art)
    rng = np.random.default_rng(11)
    inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in m.inputs}
    flags = []
    for name, x in inputs.items():
        x.astype(x.dtype.newbyteorder("<")).tofile(tmp_path / f"{name}.bin")
        flags += ["--input", f"{name}={tmp_path / f'{name}.bin'}"]
    env = _java_env(runtime, TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache")
    prof = tmp_path / "profile.json"
    p = _java(
        java_build,
        "org.tvmgen.RunModel",
        art,
        *flags,
        "--repeat",
        "2",
        "-o",
        tmp_path / "out",
        "--profile",
        prof,
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["device"] == "vulkan" and summary["timings"]["runs"] == 3, summary
    assert "on vulkan: " in p.stderr, p.stderr
    want = HostModel(arts[(model, "cpu")]).run(inputs)
    for spec, ref in zip(m.outputs, want):
        ref = np.asarray(ref)
        got = np.fromfile(tmp_path / "out" / f"{spec.name}.bin", ref.dtype).reshape(ref.shape)
        print(
            f"{model}/{spec.name}: Java on Vulkan vs the Python VM (CPU build): max abs error "
            f"{float(np.abs(got - ref).max()):.3g}",
            file=sys.stderr,
        )
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    profile = json.loads(prof.read_text())
    assert profile["device"] == "vulkan", profile
    p = profile["profile"]
    assert p["runs"] == 2 and p["clock"] == "device (Vulkan timestamps)", p
    names = {k["name"] for k in kernels_of(art)}
    launched = p["vulkan_kernels"]
    assert set(launched) <= names and len(launched) >= len(names) - 1, (sorted(launched), sorted(names))
    # dispatches over the 2 runs: a kernel shared by two layers is dispatched twice a run
    assert all(c[0] >= 2 and c[0] % 2 == 0 and c[1] > 0 for c in launched.values()), launched


def test_java_prepare_on_lavapipe(arts, runtime, java_build, tmp_path):
    """Model.prepare() over JNI on Vulkan (tests/java/PrepareCheck.java): every pipeline created before the
    first run (built, then from the pipeline cache in the next JVM), the output equal to the CPU build's."""
    from tvmgen.runtime.runner import HostModel

    art, cpu = arts[("tiny", "vulkan")], arts[("tiny", "cpu")]
    n = len(kernels_of(art))
    env = _java_env(runtime, TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache")
    seen = []
    for tag in ("cold", "warm"):
        out = tmp_path / f"{tag}.bin"
        p = _java(java_build, "PrepareCheck", art, cpu, out, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        line = next(ln for ln in p.stdout.splitlines() if ln.startswith("prepared "))
        seen.append(json.loads(line.removeprefix("prepared ")))
        model = HostModel(cpu)  # PrepareCheck's inputs: sin(0.37 i) in each
        x = {
            i.name: np.sin(np.arange(int(np.prod(i.shape))) * 0.37).astype(np.float32).reshape(i.shape)
            for i in model.manifest.inputs
        }
        np.testing.assert_allclose(np.fromfile(out, "<f4"), np.asarray(model.run(x)[0]).ravel(), rtol=1e-4, atol=1e-5)
    assert [(s["kernels"], s["built"], s["cached"]) for s in seen] == [(n, n, 0), (n, 0, n)], seen


def test_java_reports_missing_vulkan(arts, runtime, java_build, tmp_path):
    """Where Vulkan is missing, Model.load's TvmgenException names the cause and the fix: no libtvmgen_vulkan
    beside the runtime, no Vulkan loader, a loader without a driver."""
    import os

    art = arts[("tiny", "vulkan")]
    bare = tmp_path / "lib"  # the JNI libraries (hard links) without libtvmgen_vulkan
    bare.mkdir()
    for f in java_build["dir"].iterdir():
        if f.is_file() and f.name != "libtvmgen_vulkan.so" and ".so" in f.name:
            os.link(f, bare / f.name)
    none = tmp_path / "none.json"
    cases = {
        "backend": ({**_java_env(runtime), "LD_LIBRARY_PATH": ""}, bare, ["libtvmgen_vulkan.so", "libvulkan-dev"]),
        "loader": (
            _java_env(runtime, TVMGEN_VULKAN_LIBRARY=tmp_path / "x.so"),
            None,
            ["no Vulkan loader", "libvulkan1"],
        ),
        "driver": (_java_env(runtime, VK_ICD_FILENAMES=none, VK_DRIVER_FILES=none), None, ["mesa-vulkan-drivers"]),
    }
    for case, (env, lib_dir, words) in cases.items():
        p = _java(java_build, "org.tvmgen.RunModel", art, "--repeat", "1", env=env, lib_dir=lib_dir, fails=True)
        assert p.returncode == 1, (case, p.stdout + p.stderr)
        assert "RunModel: error: " in p.stderr and all(w in p.stderr for w in words), (case, p.stderr)


def _if_on_data_model():
    """y = x * 2 where sum(x) > 0, else x - 1: the VM reads the condition from the device in the middle of
    the run, so the run cannot be recorded and replayed."""
    from onnx import TensorProto as T
    from onnx import helper as h

    def branch(tag, op, const):
        c = h.make_tensor(f"c{tag}", T.FLOAT, [], [const])
        node = h.make_node(op, ["x", f"c{tag}"], [f"y{tag}"])
        return h.make_graph([node], tag, [], [h.make_tensor_value_info(f"y{tag}", T.FLOAT, [1, 8])], [c])

    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["positive"]),
        h.make_node(
            "If", ["positive"], ["y"], then_branch=branch("a", "Mul", 2.0), else_branch=branch("b", "Sub", 1.0)
        ),
    ]
    zero = h.make_tensor("zero", T.FLOAT, [], [0.0])
    graph = h.make_graph(
        nodes,
        "if_on_data",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 8])],
        initializer=[zero],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_recorded_runs_follow_new_inputs_on_lavapipe(arts, runtime, java_build, compiled, tmp_path):
    """Model::Run records the third run's commands and submits them again after (libtvmgen_vulkan's
    recorded runs) instead of running the VM. Through the Java API, a new input at every run, each output
    against the CPU build's for that input: one model (recorded once, replayed from the fourth run on); two
    instances of a model taking turns (each replays or runs its VM again where the other took its
    buffers, never the other's results); a model whose VM reads a condition from the device mid-run
    (recording fails, saying why; every run on the VM)."""
    from tvmgen.runtime.runner import HostModel

    path = save_onnx(_if_on_data_model(), tmp_path / "if.onnx")
    branchy = {d: compiled(path, "host", d, name="if_on_data") for d in ("cpu", "vulkan")}
    cases = [
        ("mobilenet", arts[("mobilenet", "vulkan")], arts[("mobilenet", "cpu")], "0" * 7),
        ("tiny, two instances", arts[("tiny", "vulkan")], arts[("tiny", "cpu")], "0000" + "10" * 4),
        ("If on data", branchy["vulkan"], branchy["cpu"], "0" * 7),
    ]
    rng = np.random.default_rng(21)
    seen = {}
    for tag, art, cpu, order in cases:
        runs = len(order)
        ref = HostModel(cpu)
        specs = ref.manifest.inputs
        inputs = [{s.name: rng.standard_normal(s.shape).astype(np.float32) for s in specs} for _ in range(runs)]
        if tag == "If on data":  # both branches, alternately
            inputs = [{"x": np.abs(x["x"]) * (1 if k % 2 else -1)} for k, x in enumerate(inputs)]
        d = tmp_path / tag.replace(" ", "_").replace(",", "")
        (d / "in").mkdir(parents=True)
        for k, x in enumerate(inputs):
            for name, a in x.items():
                a.tofile(d / "in" / f"{name}_{k}.bin")
        env = _java_env(runtime, TVMGEN_VULKAN_LOG="1", TVMGEN_VULKAN_CACHE_DIR=tmp_path / "vk-cache")
        p = _java(java_build, "ReplayCheck", art, d / "in", d / "out", order, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        seen[tag] = _vk_commands(p.stderr)["recorded_runs"]
        print(f"{tag}: {runs} runs; recorded runs {seen[tag]}", file=sys.stderr)
        for k, x in enumerate(inputs):
            for j, want in enumerate(ref.run(x)):
                want = np.asarray(want)
                got = np.fromfile(d / "out" / f"out_{k}_{j}.bin", want.dtype).reshape(want.shape)
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{tag}: run {k}, output {j}")
    assert seen["mobilenet"] == {"captured": 1, "failed": 0, "replays": 4, "invalidated": 0, "last_failure": ""}
    two = seen["tiny, two instances"]
    assert two["failed"] == 0 and two["captured"] >= 2 and two["replays"] + 2 * two["captured"] + 4 >= 10, two
    branch = seen["If on data"]
    assert branch["captured"] == branch["replays"] == 0 and branch["failed"] == 5, branch
    assert "a copy to the host" in branch["last_failure"], branch
    # said once, with what it costs
    assert p.stderr.count("tvmgen-vulkan: a run could not be recorded for replay (the run needed") == 1, p.stderr
