"""Explicit state pairs: an input that takes the state and an output that returns its next value.

A streaming ONNX (or PyTorch, TensorFlow) model passes its state explicitly (``h0`` in, ``hn`` out);
``--state IN=OUT`` declares such a pair so that the runtime carries the state from one run to the next
instead of the app copying it out and back in. Pairs are never guessed silently: ``propose`` names the
ones the model's names and shapes make obvious, for the command to print.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tvmgen.core.errors import InputError
from tvmgen.core.model import ImportedModel, StateSpec, TensorSpec, output_specs
from tvmgen.frontends.base import refuse_state_consts


def parse(text: str) -> tuple[str, str]:
    """One --state flag, ``IN=OUT``, as (input name, output name)."""
    name_in, sep, name_out = text.partition("=")
    if not sep or not name_in.strip() or not name_out.strip():
        raise InputError(
            f"cannot read --state {text!r}",
            "write it as INPUT=OUTPUT, the input that takes the state and the output that returns its next "
            "value, e.g. --state h0=hn",
        )
    return name_in.strip(), name_out.strip()


def _signature(specs: Sequence[TensorSpec]) -> str:
    return ", ".join(map(str, specs)) or "(none)"


def apply(imported: ImportedModel, flags: Sequence[str]) -> ImportedModel:
    """``imported`` with the --state pairs ``flags`` added to its state (initial value: zeros), each checked:
    an input and an output of the model, of the same shape and dtype, not paired twice."""
    if not flags:
        return imported
    pairs = [parse(f) for f in flags]
    refuse_state_consts(imported.constants, pairs)  # ONNX binds --const before the import: gone from the inputs
    inputs = {s.name: s for s in imported.inputs}
    outputs = {s.name: s for s in output_specs(imported.mod, imported.output_names)}
    listing = f"the model's inputs: {_signature(imported.inputs)}; its outputs: {_signature(list(outputs.values()))}"
    taken_in = {s.input for s in imported.state}
    taken_out = {s.output for s in imported.state}
    added = []
    for (name_in, name_out), text in zip(pairs, flags):
        for name, own, other, what in (
            (name_in, inputs, outputs, "input"),
            (name_out, outputs, inputs, "output"),
        ):
            if name not in own:
                swapped = (
                    f" ({name!r} is an {'output' if what == 'input' else 'input'}: write --state INPUT=OUTPUT)"
                    if name in other
                    else ""
                )
                raise InputError(f"--state {text}: the model has no {what} {name!r}{swapped}", listing)
        a, b = inputs[name_in], outputs[name_out]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise InputError(
                f"--state {text}: input {a} and output {b} differ in {'shape' if a.shape != b.shape else 'dtype'} "
                f"({_shape(a)} vs {_shape(b)}{'' if a.dtype == b.dtype else f', {a.dtype} vs {b.dtype}'}); the "
                "runtime feeds the output's value back to the input, so they must match",
                f"pair the input with the output that returns its next value; {listing}",
            )
        if name_in in taken_in or name_out in taken_out:
            raise InputError(
                f"--state {text}: {name_in if name_in in taken_in else name_out!r} is already in a state pair",
                "give each input and each output in one --state at most",
            )
        taken_in.add(name_in)
        taken_out.add(name_out)
        added.append(StateSpec(name_in, name_out, a.shape, a.dtype, None))
    imported.state = [*imported.state, *added]
    return imported


def _shape(s: TensorSpec | StateSpec) -> str:
    return "x".join(map(str, s.shape)) or "scalar"


# How a streaming model's exporters name a state's next value, from the input's name (lower case).
_NEXT_NAMES = (
    lambda n: [f"{n}n", f"{n}_n", f"{n}_out", f"{n}_new", f"{n}_next", f"new_{n}", f"next_{n}", f"out_{n}"],
    lambda n: [n[:-1] + s for s in ("n", "_n", "_out", "1")] if re.search(r"[a-z_]0$", n) else [],
    lambda n: [n[:-3] + "_out", n[:-3] + "_new"] if n.endswith("_in") else [],
    lambda n: ["out_" + n[3:]] if n.startswith("in_") else [],
    lambda n: [n.replace("past_key_values", "present", 1), n.replace("past", "present", 1)] if "past" in n else [],
    lambda n: [n.replace("prev", "next", 1)] if "prev" in n else [],
)


def propose(imported: ImportedModel) -> list[StateSpec]:
    """The state pairs the names and shapes make obvious (``state`` -> ``stateN``, ``h0`` -> ``hn``,
    ``*_in`` -> ``*_out``, ``past_*`` -> ``present_*``...): an input and an output of the same shape and
    dtype, neither in a pair already. For the user to confirm with --state; never applied here."""
    taken_in = {s.input for s in imported.state}
    taken_out = {s.output for s in imported.state}
    by_lower = {n.lower(): n for n in imported.output_names if n not in taken_out}
    candidates = []
    for spec in imported.inputs:
        if spec.name in taken_in:
            continue
        lower = spec.name.lower()
        names = [by_lower[c] for rule in _NEXT_NAMES for c in rule(lower) if c in by_lower and c != lower]
        if names:
            candidates.append((spec, names))
    if not candidates:
        return []
    try:
        outputs = {s.name: s for s in output_specs(imported.mod, imported.output_names)}
    except Exception:  # an output of unknown shape: nothing is obvious, and the build says why
        return []
    proposals = []
    for spec, names in candidates:
        match = next(
            (
                n
                for n in names
                if n not in taken_out and (outputs[n].shape, outputs[n].dtype) == (spec.shape, spec.dtype)
            ),
            None,
        )
        if match is not None:
            taken_out.add(match)
            proposals.append(StateSpec(spec.name, match, spec.shape, spec.dtype, None))
    return proposals


def proposal_text(proposals: Sequence[StateSpec]) -> str:
    """What `tvmgen compile` prints about ``propose``'s pairs."""
    pairs = ", ".join(f"{p.input} -> {p.output} ({_shape(p)} {p.dtype})" for p in proposals)
    flags = " ".join(f"--state {p.input}={p.output}" for p in proposals)
    return (
        f"this model looks streaming: {pairs} look like a state passed from one run to the next. To let the "
        f"runtime carry it (no copy out and back in per run), add {flags}. Not applied: the artifact takes "
        "and returns it as an ordinary input and output."
    )
