"""Numerics against the reference runtime: `compile --check`, and the reference `bench` compares with."""

from __future__ import annotations

from pathlib import Path

from tvmgen.core import log as logs
from tvmgen.core.errors import CheckError, ToolTimeoutError, TvmgenError

console = logs.console


# --check's tolerances when --rtol/--atol are not given: (rtol, atol), the limit on the largest error
# being atol + rtol * (largest reference value). fp16 builds are compared with the same fp32
# reference (onnxruntime...), so their limit is sized for half precision: float16 keeps 11
# significant bits (a rounding error of up to 2^-11 ~ 4.9e-4 of a value each time a value is
# stored), and every stored activation and weight rounds again, so a few layers deep the error is a
# few times that: rtol 1e-2 is ~20 float16 roundings of the largest output; atol 1e-3 covers
# outputs that are all near 0. A wrong kernel is still caught: its errors are of the order of the
# values themselves. (Convolutions and matmuls sum in float32: the error does not grow with K.)
TOLERANCES = {"fp32": (1e-3, 1e-4), "fp16": (1e-2, 1e-3)}


def tolerances(precision: str, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for an artifact of ``precision``: the user's where given, else TOLERANCES'."""
    default_rtol, default_atol = TOLERANCES.get(precision, TOLERANCES["fp32"])
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def check_against_reference(
    imported, staged: Path, opts, rtol: float | None, atol: float | None, seed: int, scratch
) -> tuple | None:
    """`compile --check`: run the staged artifact (linux-aarch64: under qemu-aarch64; android-arm64: a
    linux-aarch64 build with the same CPU target; where neither can run here, a host build of the same
    model) and the reference runtime on seeded inputs; raising keeps the artifact from being written.
    ``rtol`` / ``atol`` None: the defaults for the build's precision (TOLERANCES). Returns (HostModel,
    inputs) when the code checked is the artifact itself, run here on its CPU (for the slow-kernel
    guard), else None."""
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import compare

    run = checked_code(imported, staged, opts, Path(scratch))
    precision = getattr(opts, "precision", "fp32")
    rtol, atol = tolerances(precision, rtol, atol)
    suffix = f" ({precision} build)" if precision != "fp32" else ""
    if imported.state:
        inputs = check_sequence(imported, run, rtol, atol, seed, suffix)
        return _checked_here(run, staged, inputs)
    inputs = random_inputs(imported.inputs, seed)
    with logs.step(f"Checking against {imported.reference_name}{suffix}"):
        actual = run(inputs)
        expected = imported.reference(inputs)
    rows = compare(actual, expected, imported.output_names)
    failed = []
    for r in rows:
        if "shape_mismatch" in r:
            failed.append(f"{r['name']}: shape {r['shape_mismatch']}")
            continue
        limit = atol + rtol * r["ref_max"]
        ok = r["max_abs"] <= limit
        console.print(
            f"  {'[green]ok[/]' if ok else '[red]FAIL[/]'} {r['name']}: max abs error {r['max_abs']:.3g}, "
            f"max rel error {r['max_rel']:.3g} (tolerance: atol {atol:g} + rtol {rtol:g})"
        )
        if not ok:
            failed.append(r["name"])
    if len(actual) != len(expected):
        failed.append(f"TVM gave {len(actual)} outputs, the reference {len(expected)}")
    if failed:
        raise CheckError(
            f"outputs differ from {imported.reference_name} beyond tolerance: {', '.join(failed)}; "
            "no artifact was written",
            "this is a compiler bug or a precision issue; raise --atol/--rtol only if the error is expected",
        )
    return _checked_here(run, staged, inputs)


def _checked_here(run, staged: Path, inputs: dict) -> tuple | None:
    """(the artifact's own HostModel, inputs it ran) where the check ran the artifact itself here on its CPU."""
    from tvmgen.compiler.targets.platforms import get_device

    model = getattr(run, "__self__", None)  # the artifact's own HostModel where it runs here
    if (
        model is not None
        and model.directory == Path(staged)
        and get_device(model.manifest.device).target_kind == "llvm"
    ):
        return model, inputs  # for the slow-kernel guard (commands/compile.py)
    return None


def check_sequence(imported, run, rtol: float, atol: float, seed: int, suffix: str = "") -> dict:
    """--check of a streaming model: STEPS_CHECKED seeded steps run in order through the checked code
    (``run``: checked_code's) and through the reference, the state carried on both sides from its initial
    value, every step compared. Returns the first step's inputs; raises CheckError beyond tolerance."""
    from tvmgen.runtime import sequence

    steps = sequence.seeded_steps(sequence.own_inputs(imported), seed)
    names = sequence.own_output_names(imported)
    pairs = ", ".join(f"{s.input} -> {s.output}" for s in imported.state)
    with logs.step(f"Checking {len(steps)} steps in order against {imported.reference_name}{suffix}, state carried"):
        actual = run_steps(run, steps)
        expected = sequence.reference_steps(imported)(steps)
    rows = sequence.compare_steps(actual, expected, names, rtol, atol)
    failed = []
    for r in rows:
        if "shape_mismatch" in r:
            failed.append(f"{r['name']}: shape {r['shape_mismatch']} at step {r['step']}")
            continue
        ok = not r["beyond"]
        beyond = "" if ok else f"; {len(r['beyond'])} step(s) beyond tolerance, the first {r['beyond'][0]}"
        console.print(
            f"  {'[green]ok[/]' if ok else '[red]FAIL[/]'} {r['name']}: max abs error {r['max_abs']:.3g} at step "
            f"{r['step']} of {r['steps']}, max rel error {r['max_rel']:.3g} (tolerance: atol {atol:g} + rtol "
            f"{rtol:g}, every step){beyond}"
        )
        if not ok:
            failed.append(f"{r['name']} (from step {r['beyond'][0]})")
    if any(len(a) != len(e) for a, e in zip(actual, expected)):
        failed.append(f"TVM gave {len(actual[0])} outputs a step, the reference {len(expected[0])}")
    worst = max((r for r in rows if "shape_mismatch" not in r), key=lambda r: r["max_abs"], default=None)
    if worst is not None:
        console.print(
            f"  checked {len(steps)} steps in order, state carried ({pairs}): max |diff| {worst['max_abs']:.3g} "
            f"at step {worst['step']} ({worst['name']})"
        )
    if failed:
        raise CheckError(
            f"outputs differ from {imported.reference_name} beyond tolerance over {len(steps)} steps with the "
            f"state carried: {', '.join(failed)}; no artifact was written",
            "this is a compiler bug or a precision issue; raise --atol/--rtol only if the error is expected",
        )
    return steps[0]


def run_steps(run, steps: list[dict]) -> list[list]:
    """The steps through checked_code's ``run`` from the initial state: a HostModel's, reset first, or a
    runner of a sequence (tvmgen-run --sequence)."""
    model = getattr(run, "__self__", None)
    if model is not None and hasattr(model, "reset_state"):
        model.reset_state()
        return [model.run(inputs) for inputs in steps]
    return run.sequence(steps)


# ------------------------------------------------------------------ which code --check runs

QEMU = "qemu-aarch64"
# Debian's aarch64 C library (libc6-arm64-cross, installed with g++-aarch64-linux-gnu): qemu-aarch64 -L
# loads tvmgen-run's dynamic loader and libraries from it.
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")
# CPU builds whose code (or the same code linked for glibc) runs here under qemu-aarch64
AARCH64_PLATFORMS = ("linux-aarch64", "android-arm64")


def checked_code(imported, staged: Path, opts, scratch: Path):
    """The function --check runs the model with (inputs dict -> list of outputs), after printing which
    code that is: the artifact itself where it runs here (host CPU builds; host OpenCL and Vulkan builds
    through the host tvmgen-run where this machine has such a device; linux-aarch64 under qemu-aarch64),
    for android-arm64 a linux-aarch64 build with the same CPU target under qemu-aarch64, else (or where
    the device, qemu-aarch64 or the aarch64 runner is missing) a host/cpu build of the same model."""
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import (
        PLATFORMS,
        BuildTarget,
        get_device,
        host_cpu_target,
        missing_cpu_features,
        target_dict,
    )
    from tvmgen.runtime.runner import HostModel

    plat, device = opts.platform, opts.device
    dev = get_device(device)
    name = f"{plat.name}/{device}"
    mcpu = plat.cpu_target().get("mcpu", "generic")
    if plat.name == "host" and dev.not_checked is None:
        missing = missing_cpu_features(target_dict(plat, device))
        if not missing:
            console.print(f"  [dim]checking the artifact itself: the {name} build, run here[/]")
            return HostModel(staged).run  # check_against_reference profiles this model (the guard)
        why = f"its code uses {', '.join(missing)}, which this CPU lacks"
    elif plat.name == "host" and dev.backend is not None:
        runner, found, why = gpu_runner(dev, getattr(opts, "precision", "fp32"))
        if runner is not None:
            console.print(f"  checking the artifact itself: the {name} build on {found}")
            return ArtifactRun(runner, staged, scratch, code=f"the {name} build on {found}")
    elif plat.name in AARCH64_PLATFORMS and dev.not_checked is None and dev.target_kind == "llvm":
        runner, why = aarch64_runner()
        if runner is not None:
            if plat.name == "linux-aarch64":
                console.print(
                    f"  checking the linux-aarch64 build under {QEMU}: the artifact's own code "
                    f"({mcpu}, {_features(plat)})"
                )
                return Aarch64Run(runner, staged, scratch)
            stand_in = linux_stand_in(plat)
            console.print(
                f"  checking a linux-aarch64 build under {QEMU}: {name} links with the Android NDK's "
                f"C library, which {QEMU} cannot run, so the same model is built for linux-aarch64 with "
                f"the same CPU target ({mcpu}, {_features(plat)}: the same NEON schedules) and run"
            )
            out = scratch / "aarch64-check"
            pipeline.compile_model(
                imported,
                BuildTarget(stand_in, "cpu"),
                out,
                info={"name": "check"},
                separate_params=opts.separate_params,
                schedules=opts.schedules,
                precision=getattr(opts, "precision", "fp32"),
                tuning_db=_stand_in_database(opts.tuning_db, plat, stand_in, scratch),
            )
            return Aarch64Run(runner, out, scratch)
    else:
        why = _not_here(plat, dev)
    # The artifact cannot run here: check the same imported module built for this machine.
    host_dir = scratch / "host-check"
    console.print(
        f"  [dim]{name} ({mcpu}) cannot run here; checking a host/cpu build of the same model "
        f"({host_cpu_target()['mcpu']}), not the {name} code[/]"
    )
    console.print(f"  [dim]  why: {why}[/]")
    pipeline.compile_model(
        imported,
        BuildTarget(PLATFORMS["host"], "cpu"),
        host_dir,
        info={"name": "check"},
        separate_params=opts.separate_params,
        precision=getattr(opts, "precision", "fp32"),  # fp16: x86 emulates it
    )
    return HostModel(host_dir).run


def _features(plat) -> str:
    mattr = plat.cpu_target().get("mattr") or []
    return f"mattr {','.join(mattr)}" if mattr else "no extra CPU features"


def _not_here(plat, dev) -> str:
    """Why ``plat``'s build for the device ``dev`` cannot run here: the device's reason (the device table),
    then the platform's."""
    reasons = [dev.not_checked] if dev.not_checked else []
    if plat.exporter == "xcode":
        reasons.append("an iOS static library runs only inside an app on an Apple device")
    elif plat.exporter == "ndk":
        runs = f"which {QEMU} cannot run" if plat.arch == "aarch64" else "which no emulator here runs"
        reasons.append(f"its {plat.arch} code links with the Android NDK's C library, {runs}")
    elif plat.name == "linux-aarch64":
        reasons.append(f"{QEMU}, which runs linux-aarch64 code here, has no GPU")
    return "; ".join(reasons) or f"{plat.name} code has no way to run here"


def aarch64_runner() -> tuple[Path | None, str]:
    """(tvmgen-run built for linux-aarch64, "") where it can run here, else (None, why not and what to install)."""
    from tvmgen.compiler.targets.platforms import _host_arch
    from tvmgen.core.toolchains import Qemu
    from tvmgen.runtime import runtime_build

    if _host_arch() != "aarch64":
        if not Qemu().available():
            return None, (
                f"{QEMU} is not on PATH; install Debian's qemu-user (apt-get install qemu-user) and "
                "--check runs the aarch64 code itself"
            )
        if not (AARCH64_SYSROOT / "lib" / "ld-linux-aarch64.so.1").is_file():
            return None, (
                f"{AARCH64_SYSROOT}/lib has no aarch64 C library for {QEMU} to load tvmgen-run with; "
                "install Debian's g++-aarch64-linux-gnu (apt-get install g++-aarch64-linux-gnu)"
            )
    try:
        prefix = runtime_build.cached_build("linux-aarch64")
    except TvmgenError as e:
        fix = f" (fix: {e.hint})" if e.hint else ""
        return None, f"the aarch64 tvmgen-run could not be built: {e.message}{fix}"
    runner = prefix / "bin" / "tvmgen-run"
    if not runner.is_file():
        return None, f"the aarch64 runtime build at {prefix} has no bin/tvmgen-run"
    return runner, ""


# The backend's own device listing (tvmgen.<backend>.info), run in a process of its own: a driver that hangs
# or crashes while it starts costs --check this time limit and a fallback, not the compile. tvm_ffi loads
# without PyTorch (it would import it for nothing: 1.7 s of CPU).
_LISTING = (
    "import ctypes, sys, tvmgen; tvmgen.load_tvm_without_torch(); import tvm_ffi; "
    "ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); "
    "print(tvm_ffi.get_global_func(sys.argv[2])())"
)
LISTING_TIMEOUT_S = 60
# what to install, or set, where a backend finds no device
_NO_DEVICE = {
    "opencl": ("no OpenCL platform found", "install pocl-opencl-icd or set TVMGEN_OPENCL_LIBRARY"),
    "vulkan": ("no Vulkan driver found", "install mesa-vulkan-drivers for lavapipe, or the GPU's Vulkan driver"),
}


def gpu_runner(dev, precision: str = "fp32") -> tuple[Path | None, str, str]:
    """(the host tvmgen-run, the device it will run ``dev``'s kernels on, "") where this machine has a device
    of ``dev``'s API (OpenCL, Vulkan) that runs this build, found as the runtime finds it (the ICD loader or
    $TVMGEN_OPENCL_LIBRARY, the Vulkan loader and its drivers); else (None, "", why not and what to install)."""
    import json
    import sys

    from tvmgen.core import toolchains
    from tvmgen.runtime import runtime_build

    title = {"opencl": "OpenCL", "vulkan": "Vulkan"}.get(dev.name, dev.name)
    try:
        prefix = runtime_build.cached_build("host")
    except TvmgenError as e:
        fix = f" (fix: {e.hint})" if e.hint else ""
        return None, "", f"the host tvmgen-run could not be built: {e.message}{fix}"
    runner, lib = prefix / "bin" / "tvmgen-run", prefix / "lib" / f"libtvmgen_{dev.backend}.so"
    if not runner.is_file():
        return None, "", f"the host runtime build at {prefix} has no bin/tvmgen-run"
    if not lib.is_file():
        headers = " (apt-get install libvulkan-dev)" if dev.name == "vulkan" else ""
        return (
            None,
            "",
            (
                f"the host runtime build at {prefix} has no {lib.name}: its build found no {title} headers{headers}, "
                "then `tvmgen runtime build --platform host`"
            ),
        )
    argv = [sys.executable, "-c", _LISTING, str(lib), f"tvmgen.{dev.backend}.info"]
    try:
        proc = toolchains.run(argv, check=False, timeout=LISTING_TIMEOUT_S, tool=f"the {title} device listing")
    except ToolTimeoutError:
        return (
            None,
            "",
            f"the {title} device listing did not finish within {LISTING_TIMEOUT_S} s (a driver that hangs as it starts)",
        )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " / ".join(ln.strip() for ln in proc.stderr.splitlines()[-3:] if ln.strip()) or "no message"
        return None, "", f"the {title} device listing through {lib.name} failed (exit {proc.returncode}): {tail}"
    info = json.loads(lines[-1])
    missing, install = _NO_DEVICE[dev.name]
    if not info.get("available"):
        # the runtime's own message, less its lines of advice: `install` says what to do here
        error = " ".join(ln.strip() for ln in info.get("error", "").splitlines() if not ln.startswith("("))
        return None, "", f"{missing} ({error or 'no error given'}; {install})"
    if dev.name == "opencl":
        if not info.get("devices"):
            return None, "", f"{missing}: the platform {info.get('platform')} lists no device ({install})"
        first = info["devices"][0]  # the device tvmgen-run uses
        if precision == "fp16" and not first.get("fp16"):
            return (
                None,
                "",
                f"the OpenCL device {first['name']} lacks cl_khr_fp16, which this fp16 build's kernels need",
            )
        return runner, f"{first['name']} ({info['platform']} {first['driver']}, through {info['library']})", ""
    return runner, f"{info['device']} (Vulkan {info['api']}, through {info['library']})", ""


def linux_stand_in(plat):
    """linux-aarch64 with ``plat``'s CPU target (mcpu, mattr, --cpu, --cpu-features): only the triple differs,
    so the schedules (chosen from the architecture and the CPU features) and the NEON code are the same."""
    import dataclasses

    from tvmgen.compiler.targets.platforms import PLATFORMS

    llvm = tuple((k, "aarch64-linux-gnu" if k == "mtriple" else v) for k, v in plat.llvm)
    return dataclasses.replace(PLATFORMS["linux-aarch64"], llvm=llvm, cpu=plat.cpu, features=plat.features)


def _stand_in_database(root: Path | None, plat, stand_in, scratch: Path) -> Path | None:
    """A copy of --tuning-db's records for ``plat`` filed under the stand-in's target (the database keeps
    one directory per target, named with its triple), so the stand-in uses the same tuned kernels."""
    import shutil

    from tvmgen.compiler.targets.database import target_name
    from tvmgen.compiler.targets.platforms import make_target, target_dict

    if root is None:
        return None
    src = Path(root) / target_name(make_target(target_dict(plat, "cpu")))
    if not src.is_dir():
        return None
    copy = scratch / "check-tuning-db"
    shutil.copytree(src, copy / target_name(make_target(target_dict(stand_in, "cpu"))), dirs_exist_ok=True)
    return copy


class ArtifactRun:
    """checked_code's runner of an artifact through tvmgen-run (``runner``), under ``launcher`` where one is
    needed: one run (a call), or a sequence of steps. ``code`` names what runs, in its errors."""

    def __init__(self, runner: Path, artifact: Path, scratch: Path, launcher: tuple = (), code: str = "the artifact"):
        self.runner, self.artifact, self.scratch = runner, artifact, scratch
        self.launcher, self.code = launcher, code

    def __call__(self, inputs: dict) -> list:
        return self.run(inputs)

    def sequence(self, steps: list[dict]) -> list[list]:
        return self.run(steps)

    def run(self, inputs: dict | list[dict]):
        """Once (no warm-up: emulated code is slow, a GPU's first run builds its kernels) given ``inputs`` by
        name, the outputs in the manifest's order; given a list of steps, as a sequence (``--sequence``, the
        state carried), each step's outputs."""
        import json
        import tempfile

        import numpy as np

        from tvmgen.core import artifact as artifacts
        from tvmgen.core import toolchains
        from tvmgen.runtime import sequence

        manifest = artifacts.Manifest.from_json(json.loads((self.artifact / "manifest.json").read_text()))
        work = Path(tempfile.mkdtemp(prefix="check-run-", dir=self.scratch))
        if isinstance(inputs, list):
            args = ["--sequence", str(sequence.write_sequence(work / "steps", inputs))]
        else:
            args = ["--warmup", "0", "--repeat", "1", "--timings", "timings.json"]
            for k, spec in enumerate(manifest.own_inputs):  # in the model's order, so no NAME= is needed
                np.save(work / f"in{k}.npy", np.asarray(inputs[spec.name]))
                args += ["--input", f"in{k}.npy"]
        base = [*self.launcher, str(self.runner)]
        cmd = [*base, str(Path(self.artifact).resolve()), *args, "-o", "out"]
        proc = toolchains.run(cmd, cwd=work, check=False)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
            raise CheckError(
                f"{self.code} failed under {Path(cmd[0]).name} (exit {proc.returncode}): "
                f"{' / '.join(lines[-3:]) or 'no message'}; no artifact was written",
                f"compile without --check, then run the artifact by hand to see everything: {' '.join(base)} ARTIFACT_DIR",
            )
        names = [sequence.file_name(o.name) for o in manifest.own_outputs]
        if isinstance(inputs, list):
            return [[np.load(work / "out" / sequence.step_name(k) / n) for n in names] for k in range(len(inputs))]
        return [np.load(work / "out" / n) for n in names]


class Aarch64Run(ArtifactRun):
    """A linux-aarch64 artifact run by the aarch64 tvmgen-run: under qemu-aarch64 (loading Debian's aarch64
    C library) unless this machine is aarch64."""

    def __init__(self, runner: Path, artifact: Path, scratch: Path):
        from tvmgen.compiler.targets.platforms import _host_arch
        from tvmgen.core import toolchains

        launcher: tuple = ()
        if _host_arch() != "aarch64":
            launcher = (str(toolchains.Qemu().verify()), "-L", str(AARCH64_SYSROOT))
        super().__init__(runner, artifact, scratch, launcher, code="the aarch64 code")


def artifact_model(manifest, scratch: Path):
    """The artifact's source model imported again as it was compiled (its inputs' shapes, its --state pairs),
    for its reference runtime; None (the reason printed) when it is not here or no longer imports alike."""
    from tvmgen.compiler import pipeline
    from tvmgen.frontends import state_pairs
    from tvmgen.frontends.base import InputOverride

    src = manifest.model.get("source", "")
    if not src or not (src.startswith("builtin:") or Path(src).exists()):
        console.print(f"  [dim]no numerics check: the source model {src or '(unknown)'} is not here[/]")
        return None
    declared = list(manifest.model.get("state_pairs") or [])
    # a state input the importer made (a TFLite resource variable) is not an input of the model file
    made = manifest.state_inputs - {state_pairs.parse(f)[0] for f in declared}
    overrides = [InputOverride(s.name, s.shape, s.dtype) for s in manifest.inputs if s.name not in made]
    if manifest.model.get("format") in ("tensorflow", "savedmodel"):
        overrides = []  # TF tensor names carry ':0'; the shapes were fixed at conversion
    try:
        imported = pipeline.load_model(src, scratch, overrides, state=declared, propose_state=False).imported
    except TvmgenError as e:
        console.print(f"  [dim]no numerics check: cannot import {src} ({e.message})[/]")
        return None
    pairs = [(s.input, s.output) for s in imported.state]
    if pairs != [(s["input"], s["output"]) for s in manifest.state]:
        console.print(
            f"  [dim]no numerics check: {src} imports with the state {pairs or 'none'}, the artifact carries "
            f"{[(s['input'], s['output']) for s in manifest.state] or 'none'}[/]"
        )
        return None
    return imported


def artifact_reference(manifest, scratch: Path):
    """The reference runtime for an artifact's source model, when that model can still be read: see
    ``reference_of``; (None, None) when it cannot."""
    imported = artifact_model(manifest, scratch)
    return (None, None) if imported is None else reference_of(imported)


def reference_of(imported):
    """(inputs by name -> outputs, the reference's name). A streaming model's reference runs one step from
    the initial state on the model's own inputs and gives its own outputs."""
    if imported.state:
        from tvmgen.runtime import sequence

        steps = sequence.reference_steps(imported)
        return (lambda inputs: steps([inputs])[0]), imported.reference_name
    return imported.reference, imported.reference_name
