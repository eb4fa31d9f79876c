"""Numerics against the reference runtime: `compile --check`, and the reference `bench` compares with."""

from __future__ import annotations

from pathlib import Path

from tvmgen import log as logs
from tvmgen.errors import CheckError, TvmgenError

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


def check_against_reference(imported, staged: Path, opts, rtol: float | None, atol: float | None, seed: int,
                            scratch) -> None:
    """`compile --check`: run the staged artifact (or, when it cannot run here, a host build of the
    same model) and the reference runtime on seeded inputs; raising keeps the artifact from being written.
    ``rtol`` / ``atol`` None: the defaults for the build's precision (TOLERANCES)."""
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import PLATFORMS
    from tvmgen.frontends.base import random_inputs
    from tvmgen.runner import HostModel, compare

    from tvmgen.compiler.platforms import missing_cpu_features, target_dict

    host_dir = staged
    if opts.platform.name != "host" or opts.device not in ("cpu", "cuda") or \
            missing_cpu_features(target_dict(opts.platform, opts.device)):
        # The artifact cannot run here: check the same imported module built for this machine.
        host_dir = Path(scratch) / "host-check"
        console.print(f"  [dim]{opts.platform.name}/{opts.device} ({opts.platform.cpu_target().get('mcpu', 'generic')}) cannot run here; "
                      "checking a host/cpu build of the same model[/]")
        host_opts = build.BuildOptions(PLATFORMS["host"], "cpu", separate_params=opts.separate_params,
                                       precision=getattr(opts, "precision", "fp32"))  # fp16: x86 emulates it
        build.compile_to_artifact(imported, host_opts, host_dir, True, {"name": "check"})
    precision = getattr(opts, "precision", "fp32")
    rtol, atol = tolerances(precision, rtol, atol)
    inputs = random_inputs(imported.inputs, seed)
    suffix = f" ({precision} build)" if precision != "fp32" else ""
    with logs.step(f"Checking against {imported.reference_name}{suffix}"):
        actual = HostModel(host_dir).run(inputs)
        expected = imported.reference(inputs)
    rows = compare(actual, expected, imported.output_names)
    failed = []
    for r in rows:
        if "shape_mismatch" in r:
            failed.append(f"{r['name']}: shape {r['shape_mismatch']}")
            continue
        limit = atol + rtol * r["ref_max"]
        ok = r["max_abs"] <= limit
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAIL[/]'} {r['name']}: max abs error {r['max_abs']:.3g}, "
                      f"max rel error {r['max_rel']:.3g} (tolerance: atol {atol:g} + rtol {rtol:g})")
        if not ok:
            failed.append(r["name"])
    if len(actual) != len(expected):
        failed.append(f"TVM gave {len(actual)} outputs, the reference {len(expected)}")
    if failed:
        raise CheckError(f"outputs differ from {imported.reference_name} beyond tolerance: {', '.join(failed)}; "
                         "no artifact was written",
                         "this is a compiler bug or a precision issue; raise --atol/--rtol only if the error is expected")


def artifact_reference(manifest, scratch: Path):
    """The reference runtime for an artifact's source model, when that model can still be read."""
    from tvmgen import builtin, frontends
    from tvmgen.frontends.base import InputOverride

    src = manifest.model.get("source", "")
    path = builtin.materialize(src, scratch) if src.startswith("builtin:") else Path(src)
    if not src or not path.exists():
        console.print(f"  [dim]no numerics check: the source model {src or '(unknown)'} is not here[/]")
        return None, None
    overrides = [InputOverride(s.name, s.shape, s.dtype) for s in manifest.inputs]
    if manifest.model.get("format") in ("tensorflow", "savedmodel"):
        overrides = []  # TF tensor names carry ':0'; the shapes were fixed at conversion
    try:
        imported = frontends.load(path, overrides)
    except TvmgenError as e:
        console.print(f"  [dim]no numerics check: cannot import {src} ({e.message})[/]")
        return None, None
    return imported.reference, imported.reference_name
