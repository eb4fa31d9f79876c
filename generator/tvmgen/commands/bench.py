"""`tvmgen bench`: a model or a GEMM timed on an RPC device, its outputs checked against the reference."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from tvmgen.commands import options
from tvmgen.core import log as logs
from tvmgen.core.errors import CheckError, InputError
from tvmgen.runtime import check as numerics

console = logs.console


@click.command()
@click.argument("source", metavar="MODEL|ARTIFACT", required=False)
@options.remote_device("The device's key.", key_required=True)
@click.option("--platform", help="Compile for this platform. [default: what the device reports]")
@options.device(
    ["cpu", "opencl", "vulkan", "cuda", "metal"],
    help="Processor on the device (vulkan: tvmgen's Vulkan backend, libtvmgen_vulkan, in the device server; "
    "metal: the iOS app, benching the model linked into it).",
)
@options.inputs()
@options.state()
@click.option(
    "--gemm",
    type=click.IntRange(min=1),
    metavar="N",
    help="Instead of a model: time an N x N x N float32 matmul built for the device (GFLOPS).",
)
@click.option("--repeat", default=10, show_default=True, help="Timed repeats on the device.")
@click.option("--number", default=1, show_default=True, help="Runs averaged in each repeat.")
@click.option("--min-repeat-ms", default=0, show_default=True, help="Stretch each repeat to at least this long.")
@options.seed("Seed of the inputs (the same on host and device).")
@options.tolerances("Outputs checked (exit 5 beyond): ")
@click.option("--session-timeout", default=600, show_default=True, help="Seconds the device gives this session.")
@options.json_file()
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    help="Write a latency histogram (PNG) here; with --profile, the slowest kernels' bar chart.",
)
@click.option(
    "--profile",
    is_flag=True,
    help="Also time each kernel on the device (--repeat runs): a table per kernel and kind (JSON: profile).",
)
@click.option("--usb", is_flag=True, help="The phone reaches the proxy over USB: adb reverse tcp:PORT tcp:PORT first.")
@click.option("--serial", help="--usb: the phone, when several are attached.")
def bench(
    source,
    key,
    tracker,
    proxy,
    platform,
    device,
    input_flags,
    gemm,
    repeat,
    number,
    min_repeat_ms,
    seed,
    atol,
    rtol,
    session_timeout,
    json_path,
    plot_path,
    usb,
    serial,
    profile,
    state_flags=(),
):
    """Run and time a model (or --gemm N) on a remote device over TVM RPC.

    Given a model, it is compiled for the device's platform first; given an artifact, its
    architecture must match the device (checked before anything is uploaded). Cold start and
    warm runs are timed on the device, copy-in and copy-out apart, and the outputs compared with
    the reference runtime on the host on the same seeded inputs. A streaming model (compiled with --state, or
    with resource variables) is timed per step, then run as a sequence with its state carried on the device,
    every step compared with the reference.

    \b
      tvmgen bench builtin:mobilenet --key phone --tracker 127.0.0.1:9190
      tvmgen bench out/mobilenet-linux-aarch64-cpu --key phone --proxy 127.0.0.1:9090 --json r.json
      tvmgen bench --gemm 1024 --key phone --tracker 127.0.0.1:9190
    """
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import BuildTarget, check_pair, get_device, get_platform
    from tvmgen.core import artifact
    from tvmgen.remote import bench as benching

    if (source is None) == (gemm is None):
        raise InputError("give a MODEL or ARTIFACT to bench, or --gemm N", "tvmgen bench builtin:mobilenet --key K ...")
    if profile and gemm:
        raise InputError(
            "--profile times a model's kernels; --gemm is one kernel, timed already", "leave out --profile"
        )
    if gemm and not get_device(device).tvm_codegen:
        raise InputError(
            "--gemm is built with TVM's own GPU code generators; --device vulkan kernels come from tvmgen's "
            "(compile_to_artifact), which builds models only",
            "bench a model on Vulkan (tvmgen bench builtin:mobilenet --device vulkan ...), or --gemm N on opencl",
        )
    if usb:
        from tvmgen.android import adb
        from tvmgen.remote.rpc import parse_address

        if not proxy:
            raise InputError("--usb works through a proxy on this machine", "pass --proxy 127.0.0.1:PORT")
        phone = adb.choose_device(serial)
        phone.reverse(parse_address(proxy, "proxy")[1])
        console.print(f"  [dim]{phone.serial} reaches {proxy} over USB (adb reverse)[/]")
    target = benching.Target(key, tracker, proxy, session_timeout)
    with tempfile.TemporaryDirectory(prefix="tvmgen-bench-") as scratch:
        scratch = Path(scratch)
        reference = reference_name = reference_steps = imported = None
        artifact_dir = None
        if source and (Path(source) / "manifest.json").is_file():
            artifact_dir = Path(source)
            manifest = artifact.load(artifact_dir)  # a broken artifact fails here, before any device is taken
            imported = numerics.artifact_model(manifest, scratch)
        elif source:
            loaded = pipeline.load_model(source, scratch, input_flags, state=state_flags)
            imported = loaded.imported
        if imported is not None:
            reference, reference_name = numerics.reference_of(imported)
            if imported.state:  # checked step by step, the state carried
                from tvmgen.runtime.sequence import reference_steps as stepper

                reference_steps = stepper(imported)
        with logs.step(benching.connecting(target)):
            remote, info = benching.connect(target)
        if info:
            console.print(
                f"  [dim]device: {info.get('platform')} ({info.get('arch')}), devices {info.get('devices')}[/]"
            )
        benching.say_emulated(
            key, info, "its times are the emulator's, many times a CPU's and not in the same proportions"
        )
        plat = get_platform(platform or info.get("platform") or "host")
        if gemm:
            check_pair(plat, device)
            report = benching.bench_gemm(remote, info, gemm, plat, device, repeat, number, min_repeat_ms, scratch)
        else:
            if artifact_dir is None:
                artifact_dir = scratch / "artifact"
                pipeline.compile_model(loaded, BuildTarget(plat, device), artifact_dir, info={"source": source})
            report = benching.bench_model(
                remote,
                info,
                artifact_dir,
                key,
                repeat,
                number,
                min_repeat_ms,
                seed,
                reference,
                reference_name,
                profile=profile,
                reference_steps=reference_steps,
            )
    benching.print_report(report)
    kernel_profile = None
    if "profile" in report.extra:
        from tvmgen.reports.profile import Profile

        kernel_profile = Profile.from_json(report.extra["profile"])
        click.echo(kernel_profile.table())
    if json_path:
        json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        console.print(f"results: {json_path}")
    if plot_path:
        if kernel_profile:
            kernel_profile.plot(plot_path)
        else:
            benching.plot(report, plot_path)
        console.print(f"plot: {plot_path}")
    from tvmgen.runtime.check import tolerances

    precision = "fp32"  # of the artifact benched (bench compiles models at fp32)
    if artifact_dir is not None and (artifact_dir / "manifest.json").is_file():
        precision = json.loads((artifact_dir / "manifest.json").read_text()).get("precision", "fp32")
    rtol, atol = tolerances(precision, rtol, atol)
    bad = [r["name"] for r in report.check or [] if r["max_abs"] > atol + rtol * r.get("ref_max", 0.0)]
    if bad:
        raise CheckError(
            f"device outputs differ from {report.reference} beyond tolerance: {', '.join(bad)}",
            "a compiler or device problem; compare with `tvmgen compile --check` on the host",
        )
