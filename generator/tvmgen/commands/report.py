"""`tvmgen report`: result files (run, bench, the deploy app, the benchmarks) into one HTML page."""

from __future__ import annotations

from pathlib import Path

import click

from tvmgen.core import log as logs

console = logs.console


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML page to write (self-contained: styles and charts inline, works offline).",
)
@click.option(
    "--markdown", "markdown_path", type=click.Path(path_type=Path), help="Also write a Markdown summary here."
)
@click.option(
    "--artifact",
    "artifact_dir",
    type=click.Path(path_type=Path),
    help="The artifact directory the results ran: its target, precision, sizes and hash go in the report.",
)
@click.option(
    "--threshold",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Comparing runs: a change beyond this many percent against the first, and beyond the runs' spread "
    "(a rank test over the steady runs), is flagged.",
)
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Comparing runs: exit with code 5 when a change is flagged as a regression (the report is written first).",
)
@click.option("--title", help="The page's title. [default: the model and device, or the number of runs]")
def report(results, out, markdown_path, artifact_dir, threshold, fail_on_regression, title):
    """A QA report of one run, or several runs side by side (the first is the baseline).

    \b
    RESULTS are JSON files from: tvmgen run --json [--profile], tvmgen bench --json,
    the deploy app (tvmgen app --run pulls tvmgen-results.json), benchmarks/gpu.py or speed.py --json.
    \b
      tvmgen run out/mobilenet-host-cpu --json --profile > run.json && tvmgen report run.json -o report.html
      tvmgen report base.json new.json -o compare.html --markdown summary.md --threshold 10
      tvmgen report base.json new.json -o compare.html --fail-on-regression   # in CI: exit 5 on a regression
    """
    runs = write(list(results), out, markdown_path, artifact_dir, threshold / 100, title)
    if fail_on_regression:
        from tvmgen.core.errors import CheckError
        from tvmgen.reports.results import METRICS, column_names, regressions

        found = regressions(runs, threshold / 100)
        if found:
            names = dict(zip(map(id, runs), column_names(runs)))
            listed = "; ".join(f"{names[id(r)]}: {METRICS[c.metric][0]} {c.change:+.1%} ({c.test})" for r, c in found)
            raise CheckError(
                f"{len(found)} regression{'s' if len(found) != 1 else ''} beyond {threshold:g}% and beyond the runs' "
                f"spread against {names[id(runs[0])]}: {listed}",
                f"see {out}; if the change is expected, raise --threshold or leave out --fail-on-regression",
            )


def write(
    results: list[Path],
    out: Path,
    markdown_path: Path | None = None,
    artifact_dir: Path | None = None,
    threshold: float = 0.05,
    title: str | None = None,
) -> list:
    """Read every result first, render, then write: bad input leaves no file behind. Returns the runs."""
    from tvmgen.reports import html
    from tvmgen.reports import results as result_files

    runs = [r for path in results for r in result_files.load(path, artifact_dir)]
    result_files.distinct_labels(runs)
    page = html.render(runs, threshold, title)
    summary = html.markdown(runs, threshold) if markdown_path else None
    html.write_atomic(out, page)
    console.print(f"[green]✓[/] report: [bold]{out}[/] ({len(runs)} run{'s' if len(runs) != 1 else ''})")
    if markdown_path and summary:
        html.write_atomic(markdown_path, summary)
        console.print(f"[green]✓[/] summary: [bold]{markdown_path}[/]")
    return runs
