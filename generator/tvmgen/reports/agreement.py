"""Outputs against the host reference: max error and top-k agreement.

A run's outputs reach the host whole (``tvmgen run --check`` holds the arrays) or as the summaries a
results file keeps (the deploy app's ``outputs``: every value of a small output, the top-5 classes and
their values of a classifier's). Either way each output gets one row: the largest absolute and relative
error over the values compared, and for a classifier (shape ``[1, N]`` or ``[N]``) whether the top class
is the reference's (``top1_match``) and how many of the top 5 the two share (``top5_overlap``).

The deploy app's inputs are the deterministic pseudo-random values its results name (``inputs``:
seed per input), which :func:`tvmgen.core.model.pseudo_random` makes again here, so the reference
runs on exactly what the phone ran.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tvmgen.core import artifact
from tvmgen.core.model import pseudo_random

TOP_K = 5


def is_classifier(shape) -> bool:
    """Scores of N > 1 classes: ``[1, N]`` or ``[N]`` (as org.tvmgen.OutputSummary.isClassifier)."""
    s = list(shape)
    return (len(s) == 2 and s[0] == 1 and s[1] > 1) or (len(s) == 1 and s[0] > 1)


def top_k(values: np.ndarray, k: int = TOP_K) -> list[int]:
    """The indices of the k largest values, the largest first, ties by the lower index, NaN never large."""
    flat = np.asarray(values, np.float64).reshape(-1)
    order = np.lexsort((np.arange(flat.size), -np.nan_to_num(flat, nan=-np.inf)))
    return [int(i) for i in order[:k]]


def _row(name: str, expected: np.ndarray, values=None, top=None, top_values=None) -> dict:
    """One output's row from what is known of the device's output: all values, or its top-k and their values."""
    e = np.asarray(expected, np.float64)
    scale = max(float(np.abs(e).max()) if e.size else 0.0, 1e-12)
    row: dict = {"name": name, "shape": list(e.shape), "ref_max": scale}
    if values is not None:
        a = np.asarray([np.nan if v is None else v for v in np.asarray(values, object).reshape(-1)], np.float64)
        if a.size != e.size:
            return {**row, "shape_mismatch": f"{a.size} values vs the reference's {e.size}", "max_abs": None}
        diff = np.abs(a - e.reshape(-1))
        row.update(compared=f"all {a.size} values", max_abs=float(np.max(diff)) if diff.size else 0.0)
        if is_classifier(e.shape):
            top = top_k(a)
    elif top is not None and top_values is not None:
        picked = e.reshape(-1)[list(top)]
        diff = np.abs(np.asarray([np.nan if v is None else v for v in top_values], np.float64) - picked)
        row.update(compared=f"the top-{len(top)} entries", max_abs=float(np.max(diff)))
    else:
        row.update(compared="none (the result keeps only min, max and mean)", max_abs=None)
    if row["max_abs"] is not None:
        row["max_abs"] = float("inf") if np.isnan(row["max_abs"]) else row["max_abs"]  # a NaN output: worst error
        row["max_rel"] = row["max_abs"] / scale
    if top is not None and is_classifier(e.shape):
        ref_top = top_k(e, len(top))
        row.update(
            top5=list(top)[:TOP_K],
            top5_reference=ref_top[:TOP_K],
            top1_match=bool(top[0] == ref_top[0]),
            top5_overlap=len(set(top[:TOP_K]) & set(ref_top[:TOP_K])),
        )
    return row


def compare_arrays(actual: list[np.ndarray], expected: list[np.ndarray], names: list[str]) -> list[dict]:
    """Outputs held whole (tvmgen run --check) against the reference's."""
    return [
        _row(n, e, values=a, top=top_k(a) if is_classifier(np.shape(e)) else None)
        for n, a, e in zip(names, actual, expected)
    ]


def compare_summaries(outputs: list[dict], expected: list[np.ndarray]) -> list[dict]:
    """Output summaries of a results file (the deploy app's) against the reference's outputs."""
    rows = []
    for o, e in zip(outputs, expected):
        name = o.get("name", "?") if isinstance(o, dict) else str(o)
        o = o if isinstance(o, dict) else {}
        rows.append(_row(name, e, values=o.get("values"), top=o.get("top5"), top_values=o.get("top5_values")))
    return rows


def app_inputs(results: dict) -> dict[str, np.ndarray] | str:
    """The inputs the deploy app ran, made again here; or why they cannot be (an input file on the phone)."""
    inputs = results.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        return "the results do not say which inputs the app used (an app from an older tvmgen)"
    out = {}
    for i in inputs:
        if i.get("fill") == "pseudo-random":
            out[i["name"]] = pseudo_random(i["shape"], i["dtype"], int(i["seed"]))
        elif i.get("fill") == "zeros":
            out[i["name"]] = np.zeros(i["shape"], i["dtype"])
        else:
            return f"input {i.get('name')} came from a file on the phone ({i.get('file', '?')}), which is not here"
    return out


def check_app_results(results: dict, asset_dir: Path) -> str | None:
    """Adds ``check`` (one row per output) and ``reference`` to the deploy app's results, running the reference
    of the artifact's source model on the app's inputs. Returns why it could not, or None."""
    from tvmgen.runtime.check import artifact_reference

    if results.get("error") or not results.get("outputs"):
        return "the results hold no outputs"
    inputs = app_inputs(results)
    if isinstance(inputs, str):
        return inputs
    if not (asset_dir / artifact.MANIFEST).is_file():
        return f"the artifact the app ran is not here ({asset_dir})"
    manifest = artifact.load(asset_dir, verify=False)
    if manifest.state:
        return "a streaming model's outputs depend on every run before (its state): one run cannot be checked alone"
    with tempfile.TemporaryDirectory(prefix="tvmgen-reference-") as scratch:
        reference, name = artifact_reference(manifest, Path(scratch))
        if reference is None:
            return f"the source model {manifest.model.get('source') or '(unknown)'} is not here"
        expected = reference(inputs)
    results["check"] = compare_summaries(results["outputs"], expected)
    results["reference"] = f"{name} on the host, same inputs"
    return None
