"""The one way a model becomes an artifact.

Every command that compiles (compile, app, bench, the iOS app, embed through compile) and the --check
path go through here: ``load_model`` unpacks a built-in model, imports the file and records what it was
(name, source, format, sha256); ``compile_model`` partitions it where the device takes parts of it
(NNAPI), builds it for a ``BuildTarget`` and writes the artifact. Nothing else calls the build directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import BuildTarget
from tvmgen.core import artifact
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError
from tvmgen.frontends.base import ImportedModel, InputOverride


@dataclass(frozen=True)
class NnapiOptions:
    """How --device nnapi splits a model (compile/app --feature-level, --strategy, --cost-table)."""

    feature_level: int | None = None  # None: the highest the code generator knows
    strategy: str = "patterns"
    cost_table: Path | None = None


@dataclass
class LoadedModel:
    """A model as the user named it (a file, a SavedModel folder or builtin:NAME), imported."""

    ref: str
    path: Path
    imported: ImportedModel
    info: dict = field(default_factory=dict)  # what the manifest records under "model"

    @property
    def name(self) -> str:
        return self.info["name"]


def model_name(ref: str) -> str:
    """The name artifacts and apps take from a model reference: builtin:NAME's NAME, else the file's stem."""
    return ref.split(":", 1)[1] if ref.startswith("builtin:") else Path(ref).stem


def model_digest(path: Path) -> str:
    """sha256 of a model file, or of a SavedModel folder's files (each relative name and content hash, in
    order): the manifest's record of which model was compiled."""
    path = Path(path)
    if path.is_file():
        return artifact.sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(artifact.sha256_file(f).encode())
    return h.hexdigest()


def load_model(
    ref: str | Path,
    scratch: Path,
    inputs: list | tuple = (),
    *,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    consts: dict[str, str] | None = None,
) -> LoadedModel:
    """Import ``ref`` (a built-in model is written into ``scratch`` first) with ``inputs`` (--input
    NAME:SHAPE[:DTYPE] flags, or InputOverrides), printing the importer's notes."""
    from tvmgen import frontends
    from tvmgen.frontends import builtin

    ref = str(ref)
    is_builtin = ref.startswith("builtin:")
    path = builtin.materialize(ref, Path(scratch)) if is_builtin else Path(ref)
    overrides = [f if isinstance(f, InputOverride) else InputOverride.parse(f) for f in inputs]
    with logs.step(f"Importing {ref if is_builtin else path.name}"):
        imported = frontends.load(path, overrides, input_names=input_names, output_names=output_names, consts=consts)
    for note in imported.notes:
        logs.console.print(f"  [dim]{note}[/]")
    info: dict[str, Any] = {
        "name": model_name(ref),
        "source": ref if is_builtin else str(path.resolve()),
        "format": imported.format,
        "sha256": model_digest(path),
    }
    if imported.constants:
        info["constants"] = imported.constants  # inputs bound by --const: not inputs of the artifact
    return LoadedModel(ref, path, imported, info)


def check_build_options(target: BuildTarget, **build_options) -> None:
    """Options that do not apply to the target, said before any work (compile_model checks them too)."""
    if not target.kind.partitions:
        return
    if build_options.get("separate_params"):
        raise InputError(
            f"--separate-params does not apply to --device {target.device}: the NNAPI parts take the weights "
            "as constants",
            "leave out --separate-params",
        )
    precision = build_options.get("precision", "fp32")
    if precision != "fp32":
        raise InputError(
            f"--precision {precision} does not apply to --device {target.device}: the NNAPI parts keep the "
            "model's float32 (NNAPI drivers choose their own precision)",
            "leave out --precision",
        )


def compile_model(
    model: LoadedModel | ImportedModel,
    target: BuildTarget,
    out: Path,
    *,
    info: dict | None = None,
    nnapi: NnapiOptions | None = None,
    force: bool = True,
    verify: Callable[[Path, BuildOptions], None] | None = None,
    **build_options,
) -> artifact.Manifest:
    """Build ``model`` for ``target`` into the artifact directory ``out``.

    ``info`` is what the manifest records about the model (a LoadedModel brings its own). Where the
    device takes parts of the model itself (NNAPI), they are partitioned and generated first, with
    ``nnapi``'s options. ``build_options`` are BuildOptions' (separate_params, objects_only, tuning_db,
    schedules, precision). ``verify(staged_dir, options)`` runs before the artifact is moved into place:
    if it raises, nothing is left at ``out``."""
    if isinstance(model, LoadedModel):
        imported, info = model.imported, {**model.info, **(info or {})}
    else:
        imported, info = model, dict(info or {"name": "model"})
    check_build_options(target, **build_options)
    to_build, needs = imported, None
    if target.kind.partitions:
        from tvmgen.compiler import nnapi as nnapi_codegen

        n = nnapi or NnapiOptions()
        to_build, needs = nnapi_codegen.partition_and_generate(imported, n.feature_level, n.strategy, n.cost_table)
    opts = BuildOptions.for_target(target, runtime_needs=needs, **build_options)
    check = None
    if verify is not None:

        def check(staged: Path) -> None:
            verify(staged, opts)

    return compile_to_artifact(to_build, opts, Path(out), force, info, verify=check)
