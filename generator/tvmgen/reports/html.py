"""The QA report: one self-contained HTML page (styles and SVG charts inline), and a Markdown summary.

The charts are SVG drawn here, so the page needs no script and no network, and a test can count
their bars: the histogram of the steady runs (``svg.histogram rect.bar``, one per bin), the slowest
kernels (``svg.kernels rect.bar``), time by kind (``svg.kinds rect.bar``) and, comparing runs,
the steady p50 of each (``svg.p50 rect.bar``). Every figure shown carries ``data-value`` with the
number it was written from, unrounded; every number shown is rounded (:func:`sig`).
"""

from __future__ import annotations

import math
import os
import tempfile
from html import escape
from pathlib import Path

import jinja2
import numpy as np

from tvmgen.core import resources
from tvmgen.reports.results import KINDS, METRICS, Change, Run, column_names, compare, file_name

NOT_REPORTED = "not reported"
TOP_KERNELS = 12


def sig(v, digits: int = 4) -> str:
    """A number for a person: at most ``digits`` significant digits, trailing zeros dropped, no exponent between
    1e-4 and 1e9 (0.0009999999310821295 reads 0.001, 1234567.8 reads 1235000); anything not a float as it is."""
    if isinstance(v, bool) or not isinstance(v, float | np.floating):
        return str(v)
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    v = float(f"{v:.{digits - 1}e}")  # rounded first: 0.00099999 has one digit more before it than 0.001
    if not 1e-4 <= abs(v) < 1e9:
        return f"{v:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_ms(v: float | None) -> str:
    if v is None:
        return NOT_REPORTED
    return f"{v:.1f} ms" if v >= 100 else f"{v:.3f} ms" if v >= 0.1 else f"{sig(float(v), 3)} ms"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return NOT_REPORTED
    return f"{v / 1e6:.1f} MB"


def fmt_metric(key: str, v: float | None) -> str:
    if v is None:
        return NOT_REPORTED
    unit = METRICS[key][1]
    return fmt_ms(v) if unit == "ms" else fmt_bytes(v) if unit == "bytes" else sig(float(v), 3)


def histogram_bins(samples: list[float]) -> tuple[list[int], list[float]]:
    """Counts and edges: about sqrt(n) bins (5 to 20), equal width from the fastest to the slowest run."""
    n = len(samples)
    bins = min(20, max(5, round(math.sqrt(n))))
    lo, hi = min(samples), max(samples)
    if hi == lo:
        hi = lo + max(abs(lo) * 1e-3, 1e-6)
    counts, edges = np.histogram(samples, bins=bins, range=(lo, hi))
    return [int(c) for c in counts], [float(e) for e in edges]


def histogram_svg(samples: list[float], marks: dict[str, float | None]) -> str:
    """The steady runs as a histogram, with vertical lines at p50/p90/p99 labelled in a band above the bars."""
    counts, edges = histogram_bins(samples)
    w, left, bottom, plot_h = 560, 40, 30, 160
    plot_w = w - left - 10
    span = edges[-1] - edges[0]
    placed = [(left + plot_w * (v - edges[0]) / span, name, v) for name, v in marks.items() if v is not None]
    labels = _label_positions([x for x, _, _ in placed], w - 10)
    top = 6 + 12 * max((row for _, row, _ in labels), default=-1) + 12 + 4  # the labels' rows, then the bars
    h = top + plot_h + bottom
    peak = max(counts)
    bar_w = plot_w / len(counts)
    parts = [
        f'<svg class="chart histogram" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'data-bins="{len(counts)}" data-samples="{len(samples)}" aria-label="histogram of {len(samples)} steady runs">'
    ]
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{w - 10}" y2="{top + plot_h}" class="axis"/>')
    for i, c in enumerate(counts):
        bh = plot_h * c / peak
        parts.append(
            f'<rect class="bar" x="{left + i * bar_w + 1:.1f}" y="{top + plot_h - bh:.1f}" width="{bar_w - 2:.1f}" '
            f'height="{bh:.1f}" data-count="{c}"><title>{edges[i]:.3f}–{edges[i + 1]:.3f} ms: {c} run(s)</title></rect>'
        )
    for (x, name, v), (lx, row, anchor) in zip(placed, labels):
        parts.append(
            f'<line class="mark" x1="{x:.1f}" y1="{6 + 12 * row + 2}" x2="{x:.1f}" y2="{top + plot_h}"><title>{name} '
            f"{v:.3f} ms</title></line>"
            f'<text class="mark-label" x="{lx:.1f}" y="{6 + 12 * row + 10}" text-anchor="{anchor}">{name}</text>'
        )
    parts.append(f'<text x="{left}" y="{h - 8}">{edges[0]:.3f} ms</text>')
    parts.append(f'<text x="{w - 10}" y="{h - 8}" text-anchor="end">{edges[-1]:.3f} ms</text>')
    parts.append(f'<text x="4" y="{top + 10}">{peak}</text>')
    parts.append("</svg>")
    return "".join(parts)


LABEL_W = 24  # a mark's label ("p99") at 11px, in SVG units


def _label_positions(xs: list[float], right: float) -> list[tuple[float, int, str]]:
    """Where each mark's label goes, above the bars: beside its line, on the first row where it overlaps no
    label already placed (marks close together, as p50 and p90 of steady runs with one slow outlier, stack
    instead of overlapping); at the right edge, on the line's left. Returns (x, row, text-anchor) per mark."""
    rows: list[list[tuple[float, float]]] = []
    out = []
    for x in xs:
        start, anchor = (x - 2 - LABEL_W, "end") if x + 2 + LABEL_W > right else (x + 2, "start")
        span = (start, start + LABEL_W)
        row = next(
            (i for i, taken in enumerate(rows) if all(span[1] + 3 < a or span[0] > b + 3 for a, b in taken)), len(rows)
        )
        if row == len(rows):
            rows.append([])
        rows[row].append(span)
        out.append((x - 2 if anchor == "end" else x + 2, row, anchor))
    return out


def hbars_svg(css: str, rows: list[tuple[str, float, str]]) -> str:
    """Horizontal bars: (label, value, value as text), longest first as given."""
    w, row_h, label_w = 720, 20, 300
    h = row_h * len(rows) + 6
    peak = max((v for _, v, _ in rows), default=0) or 1
    parts = [f'<svg class="chart {css}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">']
    for i, (label, v, text) in enumerate(rows):
        y = 3 + i * row_h
        bw = (w - label_w - 110) * v / peak
        short = label if len(label) <= 44 else label[:41] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end"><title>{escape(label)}</title>{escape(short)}</text>'
            f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{max(bw, 1):.1f}" height="{row_h - 5}" '
            f'data-value="{v}"/>'
            f'<text x="{label_w + bw + 6:.1f}" y="{y + 14}">{escape(text)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resources.templates_dir() / "report"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters.update(
        ms=fmt_ms,
        mb=fmt_bytes,
        metric=fmt_metric,
        metric_name=lambda k: METRICS[k][0],
        kind_name=KINDS.__getitem__,
        filename=lambda p: file_name(str(p)),
        sig=sig,
        pct=lambda v: f"{v * 100:.1f}%",
    )
    env.globals.update(NOT_REPORTED=NOT_REPORTED, METRICS=METRICS)
    return env


def _charts(run: Run) -> dict:
    lat = run.latency
    charts = {
        "histogram": histogram_svg(run.samples_ms, {k: lat.get(f"{k}_ms") for k in ("p50", "p90", "p99")})
        if len(run.samples_ms) >= 2
        else None
    }
    p = run.profile
    if p and p["kernels"]:
        top = p["kernels"][:TOP_KERNELS]
        charts["kernels"] = hbars_svg("kernels", [(k["name"], k["total_ms"], fmt_ms(k["total_ms"])) for k in top])
        charts["kinds"] = hbars_svg(
            "kinds", [(k["kind"], k["total_ms"], f"{fmt_ms(k['total_ms'])} · {k['share']:.1%}") for k in p["kinds"]]
        )
    return charts


def render(runs: list[Run], threshold: float, title: str | None = None) -> str:
    """The page for ``runs``: one run in full, or several side by side compared with the first."""
    changes = compare(runs, threshold) if len(runs) > 1 else [{}]
    columns = column_names(runs)
    p50 = [
        (c, r.latency["p50_ms"], fmt_ms(r.latency["p50_ms"])) for c, r in zip(columns, runs) if r.latency.get("p50_ms")
    ]
    page = (
        _environment()
        .get_template("report.html.jinja")
        .render(
            title=title or ("tvmgen QA report: " + (runs[0].label if len(runs) == 1 else f"{len(runs)} runs compared")),
            runs=[
                {
                    "run": r,
                    "charts": _charts(r),
                    "changes": c,
                    "artifact": _artifact_fields(r),
                    "device": _device_fields(r),
                    "column": name,
                }
                for r, c, name in zip(runs, changes, columns)
            ],
            comparison=len(runs) > 1,
            p50_chart=hbars_svg("p50", p50) if len(runs) > 1 and p50 else None,
            threshold=threshold,
            verdicts=_verdicts(columns, changes, ("regression", "improvement")),
            unflagged=_verdicts(columns, changes, ("noise", "untested")),
        )
    )
    return page


def _artifact_fields(run: Run) -> dict:
    """The model and artifact rows: every field the page always shows, "not reported" where missing."""
    a = run.artifact
    sha = a.get("sha256")
    return {
        "model": run.model,
        "target": a.get("target"),
        "platform": a.get("platform"),
        "device": a.get("device"),
        "precision": a.get("precision"),
        "library": f"{a['library']} ({fmt_bytes(a.get('library_bytes'))})" if a.get("library") else None,
        "artifact size": fmt_bytes(a["total_bytes"]) if a.get("total_bytes") else None,
        "library sha256": sha[:16] + "…" if sha else None,
        **({"artifact": Path(a["directory"]).name} if a.get("directory") else {}),
        **({"app asset": a["asset"]} if a.get("asset") else {}),
    }


def _device_fields(run: Run) -> dict:
    """What the result says of the device; the phone's model, SoC and Android are always listed."""
    d = {k: v for k, v in run.device.items() if v is not None}
    if run.kind in ("app", "bench"):
        for k in ("model", "SoC", "Android", "GPU", "GPU driver"):
            d.setdefault(k, None)
    if run.kind in ("run", "bench", "gpu-benchmark", "speed-benchmark"):
        d.setdefault("CPU", None)
    if run.artifact.get("device") not in (None, "cpu", "llvm"):  # it ran on a GPU: name it, or say it is not known
        for k in ("GPU", "GPU driver"):
            d.setdefault(k, None)
    return d


def _verdicts(columns: list[str], changes: list[dict[str, Change]], verdicts: tuple[str, ...]) -> list[dict]:
    """The changes with one of ``verdicts``, for the summary at the top."""
    return [
        {"run": name, "metric": METRICS[c.metric][0], "change": c}
        for name, ch in zip(columns[1:], changes[1:])
        for c in ch.values()
        if c.verdict in verdicts
    ]


def markdown(runs: list[Run], threshold: float) -> str:
    """A summary to paste into a pull request or an issue: one column per run, changes vs the first."""
    changes = compare(runs, threshold) if len(runs) > 1 else [{}]
    columns = column_names(runs)
    head = ["metric", *(c.replace("|", "/") for c in columns)]
    lines = [
        "### tvmgen QA report",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for key, (label, _unit) in METRICS.items():
        cells = []
        for r, ch in zip(runs, changes):
            cell = fmt_metric(key, r.metrics()[key])
            c = ch.get(key)
            if c is not None and c.verdict in ("regression", "improvement"):
                cell += f" ({c.change:+.1%} **{c.verdict}**, {c.test})"
            elif c is not None and c.verdict == "noise":
                cell += f" ({c.change:+.1%}, within the runs' spread: {c.test})"
            elif c is not None and c.verdict == "untested":
                cell += f" ({c.change:+.1%}, {c.test})"
            cells.append(cell)
        if any(cell != NOT_REPORTED for cell in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for r in runs:
        if r.error:
            lines.append(f"\n**{r.label} failed:** {r.error}")
    if len(runs) > 1:
        lines.append(
            f"\nChanges against {columns[0]}: flagged where beyond ±{threshold:.0%} and beyond the runs' spread "
            f"(one-sided Mann-Whitney U rank test over the steady runs, p < 0.05)."
        )
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: a failure leaves no half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
