"""The tuning database `compile` reads (written by `tvmgen tune`): a directory per target under one
root, each a MetaSchedule JSONDatabase.

    ROOT/<target name>/target.json              the target, as TVM's JSON dict
    ROOT/<target name>/database_workload.json   MetaSchedule's JSONDatabase
    ROOT/<target name>/database_tuning_record.json
    ROOT/<target name>/cost_model.tar             the XGBoost cost model, for the next run

GPU target names carry their host's name (``opencl-host-llvm-mattr=+neon-mtriple=aarch64-linux-android``):
the kernels of a phone's GPU and those of this machine's OpenCL are timed on different devices.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tvmgen.compiler.targets.platforms import BuildTarget, tunable
from tvmgen.core.errors import InputError


def meta_schedule():
    """tvm.s_tir.meta_schedule, with only the CPU tensor intrinsics registered.

    MetaSchedule imports tvm.s_tir.tensor_intrin, which parses every GPU intrinsic written in
    TVMScript: about a minute on these machines. CPU schedules use only the x86 and Arm ones, so
    the package is registered without its GPU modules.
    """
    import importlib
    import importlib.util
    import sys
    import types

    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        import tvm.s_tir

        spec = importlib.util.find_spec(name)
        package = types.ModuleType(name, "Tensor intrinsics (CPU only, loaded by tvmgen)")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        package.__package__ = name
        sys.modules[name] = package
        tvm.s_tir.tensor_intrin = package
        for sub in ("x86", "arm_cpu"):
            importlib.import_module(f"{name}.{sub}")
    from tvm.s_tir import meta_schedule as ms

    return ms


def default_root() -> Path:
    """$TVMGEN_TUNING_DIR, else ~/.local/state/tvmgen/tuning."""
    base = os.environ.get("TVMGEN_TUNING_DIR")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) if base else Path(state) / "tvmgen" / "tuning"


def is_gpu(target) -> bool:
    return target.kind.name != "llvm"


def _kind_defaults(kind: str) -> dict:
    from tvm.target import Target

    return dict(Target({"kind": kind}).export())


def target_spec(target) -> dict:
    """The target as the dict `compile` builds it from (no num-cores: that is a tuning-only attribute).
    A GPU target leaves out the attributes its kind has anyway and keeps its host (a nested dict)."""
    spec: dict[str, Any] = {}
    defaults = _kind_defaults(target.kind.name) if is_gpu(target) else {}
    for k, v in dict(target.export()).items():
        if k in ("tag", "keys", "num-cores", "host") or k.startswith("feature."):  # derived or tuning-only
            continue
        if k != "kind" and k in defaults and str(defaults[k]) == str(v):
            continue
        spec[k] = [str(x) for x in v] if not isinstance(v, (str, int, float, bool)) else v
    if is_gpu(target) and target.host is not None:
        spec["host"] = target_spec(target.host)
    return spec


def target_name(target) -> str:
    """A directory name for the target, e.g. llvm-mcpu=znver4 or llvm-mattr=+neon-mtriple=aarch64-linux-gnu;
    a GPU's ends with its host's: opencl-host-llvm-mcpu=znver4."""
    spec = target_spec(target)
    spec.pop("host", None)
    parts = [str(spec.pop("kind"))]
    for k in sorted(spec):
        v = spec[k]
        parts.append(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}")
    if is_gpu(target) and target.host is not None:
        parts += ["host", target_name(target.host)]
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", "-".join(parts))


def targets_in(root: Path) -> list[str]:
    """The targets a database root holds records for."""
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if (d / "database_tuning_record.json").is_file())


def open_database(path: Path, target, create: bool = False):
    """The MetaSchedule database for ``target`` under the root ``path``."""
    ms = meta_schedule()
    root = Path(path)
    directory = root / target_name(target)
    if not create and not (directory / "database_tuning_record.json").is_file():
        have = targets_in(root)
        raise InputError(
            f"the tuning database {root} has no records for target {target_name(target)}"
            + (f"; it has records for: {', '.join(have)}" if have else " (it holds no records at all)"),
            f"tune for this target first: tvmgen tune MODEL --platform ... --db {root}",
        )
    if create:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "target.json").write_text(json.dumps(target_spec(target), indent=2) + "\n")
    if target.kind.name == "llvm":  # records of 8-bit matmuls name tvmgen's dot-product intrinsics
        from tvmgen.compiler import int8

        int8.register_intrinsics(target)
    return ms.database.JSONDatabase(work_dir=str(directory), module_equality="structural")


def database_target(target: BuildTarget):
    """The TVM target whose records a build for ``target`` looks up, or None where a database does not
    apply (Metal, CUDA, Adreno's texture pipeline)."""
    if not target.kind.tunable:
        return None
    tvm_target = target.tvm
    return tvm_target if not is_gpu(tvm_target) or tunable(tvm_target) else None


def has_records(root: Path, target) -> bool:
    return (Path(root) / target_name(target) / "database_tuning_record.json").is_file()


def checked_database(root: Path | None, targets: Sequence[BuildTarget]) -> Path | None:
    """--tuning-db checked before the model is imported: it must hold records for the first target, or
    for one of the others where the command builds for several (`app` adds a CPU build to a GPU one)."""
    if root is None:
        return None
    usable = [t for t in map(database_target, targets) if t is not None]
    if not usable:
        first = targets[0]
        family = f" --gpu-family {first.gpu_family}" if first.kind.target_kind == "opencl" else ""
        raise InputError(
            f"--tuning-db holds CPU and OpenCL kernels; --device {first.device}{family} has none to take from it",
            "leave out --tuning-db, or use --device cpu, or --device opencl with --gpu-family generic or mali",
        )
    if not any(has_records(root, t) for t in usable):
        open_database(root, usable[0])  # says which targets it has
    return root


def database_for(root: Path | None, target: BuildTarget) -> Path | None:
    """``root`` where it holds records for ``target``, else None: for commands that build for several
    devices from one database (`app`: the GPU build and its CPU fallback)."""
    if root is None:
        return None
    tvm_target = database_target(target)
    return root if tvm_target is not None and has_records(root, tvm_target) else None
