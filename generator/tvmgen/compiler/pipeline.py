"""The one way a model becomes an artifact.

Every command that compiles (compile, app, bench, the iOS app, embed through compile) and the --check
path go through here: ``load_model`` unpacks a built-in model, imports the file and records what it was
(name, source, format, sha256); ``compile_model`` partitions it where the device takes parts of it
(NNAPI), builds it for a ``BuildTarget`` and writes the artifact. Nothing else calls the build directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.targets.platforms import BuildTarget
from tvmgen.core import artifact
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError, ModelError
from tvmgen.core.model import StateSpec, output_specs
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
    state: Sequence[str] = (),
    propose_state: bool = True,
) -> LoadedModel:
    """Import ``ref`` (a built-in model is written into ``scratch`` first) with ``inputs`` (--input
    NAME:SHAPE[:DTYPE] flags, or InputOverrides), printing the importer's notes. ``state``: --state IN=OUT
    pairs the runtime carries from run to run; ``propose_state``: print the pairs the model's names make
    obvious when none is given (never applied)."""
    from tvmgen import frontends
    from tvmgen.frontends import builtin, state_pairs

    ref = str(ref)
    is_builtin = ref.startswith("builtin:")
    path = builtin.materialize(ref, Path(scratch)) if is_builtin else Path(ref)
    overrides = [f if isinstance(f, InputOverride) else InputOverride.parse(f) for f in inputs]
    with logs.step(f"Importing {ref if is_builtin else path.name}"):
        imported = frontends.load(path, overrides, input_names=input_names, output_names=output_names, consts=consts)
    for note in imported.notes:
        logs.console.print(f"  [dim]{note}[/]")
    imported = state_pairs.apply(imported, state)
    if propose_state and not imported.state:
        proposals = state_pairs.propose(imported)
        if proposals:
            logs.console.print(f"  [yellow]![/] {state_pairs.proposal_text(proposals)}")
    info: dict[str, Any] = {
        "name": model_name(ref),
        "source": ref if is_builtin else str(path.resolve()),
        "format": imported.format,
        "sha256": model_digest(path),
    }
    if imported.constants:
        info["constants"] = imported.constants  # inputs bound by --const: not inputs of the artifact
    if state:
        info["state_pairs"] = list(state)  # --state as given: a re-import (run --check) declares the same
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
    checked_state(imported)
    finished: list[artifact.Manifest] = []
    check = None
    if verify is not None or imported.state:

        def check(staged: Path) -> None:
            if imported.state:
                finished.append(write_state(staged, imported.state))
            if verify is not None:
                verify(staged, opts)

    manifest = compile_to_artifact(to_build, opts, Path(out), force, info, verify=check)
    return finished[0] if finished else manifest


def checked_state(imported: ImportedModel) -> None:
    """Each state pair names an input and an output of the model, of the pair's shape and dtype (its
    initial value too): the runtime feeds the output back to the input."""
    if not imported.state:
        return
    inputs = {s.name: s for s in imported.inputs}
    outputs = {s.name: s for s in output_specs(imported.mod, imported.output_names)}
    for s in imported.state:
        shapes = [(f"input {s.input}", inputs.get(s.input)), (f"output {s.output}", outputs.get(s.output))]
        for what, spec in shapes:
            if spec is None or spec.shape != tuple(s.shape) or spec.dtype != s.dtype:
                found = "is not one of the model's" if spec is None else f"is {spec}"
                raise ModelError(
                    f"the state {s.input} -> {s.output} ({list(s.shape)} {s.dtype}): {what} {found}",
                    "a state pair is an input and an output of the same shape and dtype; "
                    f"the model's inputs: {', '.join(map(str, inputs.values()))}; "
                    f"its outputs: {', '.join(map(str, outputs.values()))}",
                )
        if s.initial is not None and (s.initial.shape != tuple(s.shape) or str(s.initial.dtype) != s.dtype):
            raise ModelError(
                f"the state {s.input} -> {s.output} is {list(s.shape)} {s.dtype}, its initial value "
                f"{list(s.initial.shape)} {s.initial.dtype}",
                "this is an importer bug; please report it with the log file",
            )


def write_state(staged: Path, state: Sequence[StateSpec]) -> artifact.Manifest:
    """The state's initial values into the staged artifact (``state/<i>.npy``; zeros are not written) and
    its list into the manifest, which is written again with their hashes."""
    import numpy as np

    manifest = artifact.load(staged, verify=False)
    manifest.state = []
    for i, s in enumerate(state):
        initial = None
        if s.initial is not None:
            initial = f"{artifact.STATE_DIR}/{i}.npy"
            (staged / artifact.STATE_DIR).mkdir(exist_ok=True)
            np.save(staged / initial, np.ascontiguousarray(s.initial), allow_pickle=False)
        manifest.state.append({**s.to_json(), "initial": initial})
    artifact.write_manifest(staged, manifest)
    return manifest
