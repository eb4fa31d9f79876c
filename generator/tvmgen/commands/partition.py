"""`tvmgen partition --nnapi`: where a model's operators would run with NNAPI, and why."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from tvmgen.commands import options
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError

console = logs.console


@click.command()
@click.argument("model")
@click.option(
    "--nnapi",
    "backend",
    flag_value="nnapi",
    required=True,
    help="Partition for Android's NNAPI (the only backend so far; NNAPI is deprecated since Android 15).",
)
@options.nnapi(prefix="")
@options.inputs()
@options.json_file("Write the report as JSON here.")
@click.option(
    "--measure",
    is_flag=True,
    help="--strategy cost: measure the TVM-side cost of each op kind on a device over RPC (--key and "
    "--tracker or --proxy) instead of the table's TVM column.",
)
@options.remote_device("--measure: the device's key.", prefix="--measure: ")
@click.option("--platform", help="--measure: compile for this platform. [default: what the device reports]")
def partition(
    model, backend, feature_level, strategy, cost_table, input_flags, json_path, measure, key, tracker, proxy, platform
):
    """Report how MODEL would be split between NNAPI and TVM: partitions, operators on each side with
    their share of FLOPs, what splits partitions and why, and the transitions per inference. NNAPI is
    deprecated since Android 15: for the phone's GPU, compile with --device opencl.

    \b
      tvmgen partition mobilenet.tflite --nnapi --feature-level 3
      tvmgen partition model.onnx --nnapi --strategy cost --json report.json
      tvmgen partition model.onnx --nnapi --strategy cost --measure --key phone --tracker 127.0.0.1:9190
    """
    from tvmgen.compiler import nnapi, pipeline
    from tvmgen.remote import bench, nnapi_costs

    options.nnapi_notice()
    if measure and (strategy != "cost" or not key or (tracker is None) == (proxy is None)):
        raise InputError(
            "--measure times operators on a device for the cost strategy",
            "pass --strategy cost --key K and one of --tracker HOST:PORT or --proxy HOST:PORT",
        )
    costs = nnapi.load_costs(cost_table)
    measured = []
    with tempfile.TemporaryDirectory(prefix="tvmgen-") as scratch:
        imported = pipeline.load_model(model, Path(scratch), input_flags).imported
        with logs.step(f"Partitioning for NNAPI ({strategy})"):
            partitioned, report = nnapi.partition(
                imported.mod, imported.params, len(imported.inputs), feature_level, "patterns", costs
            )
        if measure:
            measured = nnapi_costs.measure_tvm_costs(
                partitioned, bench.Target(key, tracker, proxy), platform, costs, Path(scratch)
            )
            costs = nnapi.with_measured(costs, measured)
        if strategy == "cost":
            report = nnapi.cost_strategy(report, costs)
            report.tvm_costs = measured
    if measured:
        click.echo(nnapi.format_costs(measured))
    click.echo(nnapi.format_report(report))
    if json_path:
        json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        console.print(f"report: {json_path}")
