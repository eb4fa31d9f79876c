"""Latency statistics: the one type every timer, result reader and report in tvmgen shares.

:class:`Latency` is built from samples (one per timed run, in ms, or in whatever unit the caller
keeps throughout) and gives their count, mean, std, min, max, median and any percentile (numpy's
linear interpolation, the same as the Java API's ``RunStats``). Its canonical JSON form is

    {"count": 40, "mean": ..., "std": ..., "min": ..., "p50": ..., "p90": ..., "p99": ..., "max": ...}

(``{"count": 0}`` with no samples; ``"samples": [...]`` added on request), the form ``tvmgen bench
--json`` writes for ``warm_ms`` and the copies. :meth:`Latency.read` also reads every other shape
tvmgen and its apps have written, so results recorded by any of them still read:

- ``tvmgen run --json``'s ``timings``: ``runs``, ``median_ms``, ``min_ms``, ``max_ms``, and ``runs_ms``;
- ``tvmgen bench --json``: the canonical form, and ``warm_samples_ms``;
- the Android deploy app (``RunStats.writeTo``): ``runs_ms``, ``median_run_ms``, ``p90_run_ms``,
  ``p99_run_ms``, ``min_run_ms``, ``max_run_ms``, ``mean_run_ms``, ``iterations``;
- the iOS app: ``median_run_ms`` and ``runs``;
- ``tvmgen-run --timings``: ``median``, ``mean``, ``min``, ``max``;
- the benchmarks (``benchlib.stats``): ``median_ms``, ``mean_ms``, ``min_ms``, ``p90_ms``, ``max_ms``
  (or ``_us``);
- the QA report's own records: ``p50_ms``, ``p90_ms``, ``p99_ms``, ``min_ms``, ``max_ms``, ``mean_ms``, ``runs``.

A result that holds only some statistics (an older app's median and min) reads as a Latency that
knows those: the others are None, never made up.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

# The percentiles the canonical form carries: the report's steady p50 / p90 / p99.
CANONICAL_PERCENTILES = (50, 90, 99)

_COUNT_NAMES = ("count", "runs", "iterations")
_SAMPLE_NAMES = ("samples", "samples_{unit}", "runs_{unit}", "warm_samples_{unit}")
_PERCENTILE = re.compile(r"p(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Latency:
    """Statistics of timed runs. ``count`` is None where a result did not say how many runs it timed."""

    count: int | None = None
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    # Percentiles known without the samples (read from a result that kept only them): (percent, value), by percent.
    known: tuple[tuple[float, float], ...] = ()
    samples: tuple[float, ...] = field(default=(), repr=False)

    @classmethod
    def from_samples(cls, values: Iterable[float] | np.ndarray) -> Latency:
        """The statistics of ``values`` (NaN samples are dropped: a run that was not timed)."""
        a = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64).reshape(-1)
        a = a[~np.isnan(a)]
        if a.size == 0:
            return cls(count=0)
        return cls(
            count=int(a.size),
            mean=float(a.mean()),
            std=float(a.std()),
            min=float(a.min()),
            max=float(a.max()),
            samples=tuple(float(x) for x in a),
        )

    # ------------------------------------------------------------------ statistics

    @cached_property
    def _array(self) -> np.ndarray:
        return np.asarray(self.samples, dtype=np.float64)

    @property
    def empty(self) -> bool:
        """No statistic at all: no runs were timed, or the result reported none."""
        return not self.samples and self.count in (0, None) and self.median is None and self.min is None

    @property
    def median(self) -> float | None:
        return self.percentile(50)

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0 to 100) of the samples; without them, the one the result reported (or
        min / max for 0 / 100); None when neither is known."""
        if not 0 <= p <= 100:
            raise ValueError(f"a percentile is between 0 and 100, not {p}")
        if self.samples:
            return float(np.percentile(self._array, p))
        for q, value in self.known:
            if q == p:
                return value
        return self.min if p == 0 else self.max if p == 100 else None

    def stat(self, name: str) -> float | int | None:
        """One statistic by name: count, mean, std, min, max, median or pNN (p50, p90, p99.9...)."""
        if name in ("count", "mean", "std", "min", "max"):
            return getattr(self, name)
        if name == "median":
            return self.median
        m = _PERCENTILE.fullmatch(name)
        if m is None:
            raise ValueError(f"no statistic {name!r}: count, mean, std, min, max, median or pNN")
        return self.percentile(float(m.group(1)))

    def flat(self, names: Sequence[str], suffix: str = "", digits: int | None = None) -> dict[str, Any]:
        """``{name + suffix: stat(name)}`` in the order of ``names``: the flat keys a command or benchmark
        prints (``median_ms``, ``p90_us``); ``digits`` rounds the floats."""
        out: dict[str, Any] = {}
        for name in names:
            v = self.stat(name)
            out[f"{name}{suffix}"] = round(v, digits) if digits is not None and isinstance(v, float) else v
        return out

    # ------------------------------------------------------------------ JSON

    def to_json(self, samples: bool = False) -> dict[str, Any]:
        """The canonical form: count (null where a result did not say), mean, std, min, p50, p90, p99, max
        (those known), and with ``samples`` the samples themselves."""
        names = ("count", "mean", "std", "min", *(f"p{p}" for p in CANONICAL_PERCENTILES), "max")
        out = {k: v for k, v in self.flat(names).items() if v is not None or k == "count"}
        for q, value in self.known:  # a percentile read from a result beyond the canonical three
            out.setdefault(f"p{q:g}", value)
        if samples:
            out["samples"] = list(self.samples)
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Latency:
        """The canonical form back (what :meth:`to_json` wrote); ValueError on anything else."""
        if not isinstance(doc, Mapping) or "count" not in doc or not isinstance(doc["count"], int | None):
            raise ValueError(f"not latency statistics (no count): {doc!r}")
        if isinstance(doc.get("samples"), list):
            lat = cls.from_samples(doc["samples"])
            if lat.count != doc["count"]:
                raise ValueError(f"count {doc['count']} but {lat.count} samples")
            return lat
        if doc["count"] == 0:
            return cls(count=0)
        return cls(
            count=doc["count"],
            mean=_number(doc.get("mean")),
            std=_number(doc.get("std")),
            min=_number(doc.get("min")),
            max=_number(doc.get("max")),
            known=_known({k: v for k, v in doc.items() if _PERCENTILE.fullmatch(k)}),
        )

    @classmethod
    def read(cls, doc: Mapping[str, Any] | Sequence[float] | None, unit: str = "ms") -> Latency:
        """Latency statistics from any shape tvmgen or its apps wrote (the module's docstring lists them), or
        from a list of samples. The samples win where a result has both; a key missing or null is not known."""
        if doc is None:
            return cls()
        if not isinstance(doc, Mapping):
            return cls.from_samples(doc)
        suffixes = ("", f"_{unit}", f"_run_{unit}")
        for name in _SAMPLE_NAMES:
            values = doc.get(name.format(unit=unit))
            if isinstance(values, list) and values:
                return cls.from_samples(values)
        stats: dict[str, float] = {}
        for key, value in doc.items():
            v = _number(value)
            if v is None:
                continue
            for suffix in suffixes:
                if not key.endswith(suffix):
                    continue
                name = key[: len(key) - len(suffix)] if suffix else key
                if name == "median":
                    name = "p50"
                if name in ("mean", "std", "min", "max") or _PERCENTILE.fullmatch(name):
                    stats.setdefault(name, v)
        count = next((int(doc[k]) for k in _COUNT_NAMES if isinstance(doc.get(k), int | float)), None)
        if count == 0:
            return cls(count=0)
        return cls(
            count=count,
            mean=stats.get("mean"),
            std=stats.get("std"),
            min=stats.get("min"),
            max=stats.get("max"),
            known=_known({k: v for k, v in stats.items() if k.startswith("p")}),
        )


def _number(value: Any) -> float | None:
    """A JSON number as a float; None for null, NaN (a median of no runs) and anything not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def _known(percentiles: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
    """{"p50": v, "p90": w} -> ((50.0, v), (90.0, w)), sorted by percent, nulls left out."""
    out = [(float(k[1:]), _number(v)) for k, v in percentiles.items()]
    return tuple(sorted((p, v) for p, v in out if v is not None and p <= 100))


__all__ = ["CANONICAL_PERCENTILES", "Latency"]
