"""Sequences of runs for streaming models: the sequence directory `run --sequence` reads, the reference run
step by step with its state threaded through, and the step-by-step comparison `--check` makes.

A sequence directory holds one folder per step, ``000000/``, ``000001/``, ... (six digits, from 0 with no
gap), each with one ``NAME.npy`` per input of the model's own (the state inputs are the runtime's); the
outputs go to ``OUT/000000/NAME.npy`` and so on. Files are named as `tvmgen run -o` names them
(``runner.output_file_name``: "Identity:0" -> "Identity_0.npy").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tvmgen.core.errors import InputError
from tvmgen.core.model import ImportedModel, StateSpec, TensorSpec, random_inputs

STEPS_CHECKED = 20  # --check on a stateful model: steps run in order, every one compared
_STEP = re.compile(r"\d{6}")


def step_name(k: int) -> str:
    return f"{k:06d}"


def file_name(name: str) -> str:
    """The file a tensor named ``name`` is read from or written to (one rule for inputs and outputs)."""
    from tvmgen.runtime.runner import output_file_name

    return output_file_name(name)


def read_sequence(directory: Path, specs: Sequence[TensorSpec], state_inputs: Sequence[str] = ()) -> list[dict]:
    """Every step's inputs by name, in order, each checked against ``specs`` (the model's own inputs) before
    anything runs: a missing step, a step without an input's file, a file of another shape or dtype, or a
    file for a state input (which the runtime feeds) is an error naming the step and the input."""
    directory = Path(directory)
    layout = (
        f"a folder per step, {step_name(0)}/, {step_name(1)}/, ... (six digits, from 0), each holding "
        + ", ".join(file_name(s.name) for s in specs)
    )
    if not directory.is_dir():
        raise InputError(f"sequence directory {directory} does not exist", f"give a directory with {layout}")
    found = sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and _STEP.fullmatch(p.name))
    if not found:
        raise InputError(f"{directory} has no step folder ({step_name(0)}/ ...)", f"give a directory with {layout}")
    missing = next((k for k, got in enumerate(found) if k != got), None)
    if missing is not None:
        raise InputError(
            f"{directory} has no step {step_name(missing)} (its steps run {step_name(found[0])}..{step_name(found[-1])}; "
            f"{len(found)} folders): the steps of a sequence are numbered from {step_name(0)} with no gap",
            f"add {directory / step_name(missing)}/ or renumber the steps after it",
        )
    expected = {file_name(s.name): s for s in specs}
    held = {file_name(n): n for n in state_inputs}
    steps = []
    for k in found:
        folder = directory / step_name(k)
        for extra in sorted(p.name for p in folder.glob("*.npy") if p.name not in expected):
            if extra in held:
                raise InputError(
                    f"{folder / extra} gives the state input {held[extra]!r}: the runtime holds the state and "
                    "feeds it itself, from its initial value at step 0",
                    f"leave {extra} out of the steps",
                )
            raise InputError(
                f"{folder / extra} is not an input of the model",
                f"each step holds {', '.join(expected)} (the model's inputs: {', '.join(map(str, specs))})",
            )
        arrays = {}
        for fname, spec in expected.items():
            path = folder / fname
            if not path.is_file():
                raise InputError(
                    f"step {step_name(k)} has no {fname} (input {spec.name!r}): {path} is missing",
                    f"each step folder holds {', '.join(expected)}",
                )
            try:
                a = np.load(path, allow_pickle=False)
            except Exception as e:
                raise InputError(f"cannot read {path} as .npy ({e})", "save each input with numpy.save") from e
            if a.shape != tuple(spec.shape) or str(a.dtype) != spec.dtype:
                raise InputError(
                    f"step {step_name(k)}: {path.name} is {a.dtype}{list(a.shape)}, input {spec.name!r} is "
                    f"{spec.dtype}{list(spec.shape)}",
                    f"save it as np.save(path, x.astype('{spec.dtype}')) with shape {tuple(spec.shape)}",
                )
            arrays[spec.name] = a
        steps.append(arrays)
    return steps


def write_outputs(out_dir: Path, names: Sequence[str], steps: Sequence[Sequence[np.ndarray]]) -> None:
    """Each step's outputs as ``out_dir/<step>/NAME.npy``."""
    for k, outputs in enumerate(steps):
        folder = Path(out_dir) / step_name(k)
        folder.mkdir(parents=True, exist_ok=True)
        for name, a in zip(names, outputs):
            np.save(folder / file_name(name), a)


def write_sequence(directory: Path, steps: Sequence[dict]) -> Path:
    """``steps`` (inputs by name) as a sequence directory, for a runtime that reads one (tvmgen-run --sequence)."""
    for k, inputs in enumerate(steps):
        folder = Path(directory) / step_name(k)
        folder.mkdir(parents=True, exist_ok=True)
        for name, a in inputs.items():
            np.save(folder / file_name(name), np.asarray(a))
    return Path(directory)


def seeded_steps(specs: Sequence[TensorSpec], seed: int, n: int = STEPS_CHECKED) -> list[dict]:
    """``n`` steps of seeded random inputs (step k: seed ``seed + k``)."""
    return [random_inputs(specs, seed + k) for k in range(n)]


# ------------------------------------------------------------------ the reference, step by step


def own_inputs(imported: ImportedModel) -> list[TensorSpec]:
    held = {s.input for s in imported.state}
    return [s for s in imported.inputs if s.name not in held]


def own_output_names(imported: ImportedModel) -> list[str]:
    held = {s.output for s in imported.state}
    return [n for n in imported.output_names if n not in held]


def threaded(
    reference: Callable[[dict], list], state: Sequence[StateSpec], output_names: Sequence[str]
) -> Callable[[list[dict]], list[list[np.ndarray]]]:
    """A functional reference (every input by name -> every output in ``output_names`` order) run over a
    sequence from the initial state: each step is fed the state outputs of the one before; each step's
    own outputs (the others) in order."""
    held = {s.output for s in state}
    own = [n for n in output_names if n not in held]

    def run(steps: list[dict]) -> list[list[np.ndarray]]:
        values = {s.input: np.zeros(s.shape, s.dtype) if s.initial is None else s.initial for s in state}
        results = []
        for inputs in steps:
            outs = dict(zip(output_names, reference({**inputs, **values})))
            values = {s.input: np.asarray(outs[s.output]) for s in state}
            results.append([np.asarray(outs[n]) for n in own])
        return results

    return run


def reference_steps(imported: ImportedModel) -> Callable[[list[dict]], list[list[np.ndarray]]]:
    """The model's reference over a sequence from its initial state: its own sequence runner where it has
    one (a runtime that holds the state itself, as LiteRT does), else ``reference`` threaded."""
    if imported.reference_sequence is not None:
        return imported.reference_sequence
    return threaded(imported.reference, imported.state, imported.output_names)


def compare_steps(
    actual: Sequence[Sequence[np.ndarray]],
    expected: Sequence[Sequence[np.ndarray]],
    names: Sequence[str],
    rtol: float,
    atol: float,
) -> list[dict]:
    """Per output, ``compare``'s row of the step with its largest error, with ``step``, ``steps`` and
    ``beyond``: the steps whose error passes their limit (atol + rtol x that step's largest reference value).
    A step with another shape is reported at once."""
    from tvmgen.runtime.runner import compare

    worst: dict[str, dict] = {}
    for k, (a, e) in enumerate(zip(actual, expected)):
        for row in compare(list(a), list(e), list(names)):
            prev = worst.get(row["name"])
            if prev is not None and "shape_mismatch" in prev:
                continue
            row = {**row, "step": k, "steps": len(expected), "beyond": prev["beyond"] if prev else []}
            if "shape_mismatch" not in row and row["max_abs"] > atol + rtol * row["ref_max"]:
                row["beyond"] = [*row["beyond"], k]
            if prev is None or "shape_mismatch" in row or row["max_abs"] > prev["max_abs"]:
                worst[row["name"]] = row
            else:
                prev["beyond"] = row["beyond"]
    return [worst[n] for n in names if n in worst]
