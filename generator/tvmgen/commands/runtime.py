"""`tvmgen runtime build` and `tvmgen embed`: the device runtime, built here or bundled for an app."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from tvmgen.commands import options
from tvmgen.core import log as logs
from tvmgen.core.errors import ToolMissingError, TvmgenError

console = logs.console


@click.group()
def runtime():
    """Build the device runtime (libtvmgen_runtime, tvmgen-run, JNI bridge) from jni/."""


@runtime.command("build")
@options.runtime_platform(
    help="Where the runtime runs. android-* builds it with the NDK's CMake toolchain against the TVM source tree "
    "the app build uses (TVM_SOURCE_DIR or tvmgen's clone); its lib/ is what `tvmgen aar --native` takes.",
    android=True,
)
@click.option(
    "-o", "--out", type=click.Path(path_type=Path), help="Build directory. [default: build/runtime-<platform>]"
)
def runtime_build_cmd(platform, out):
    """Build the runtime with CMake; prints the install prefix (bin/tvmgen-run, lib/, include/)."""
    from tvmgen.compiler.targets.platforms import get_platform
    from tvmgen.runtime import runtime_build

    android = runtime_build.is_android(platform)
    tvm_source = _android_prerequisites(platform) if android else None
    prefix = runtime_build.build(platform, out or Path("build") / f"runtime-{platform}", tvm_source=tvm_source)
    console.print(f"[green]✓[/] runtime for {platform}: [bold]{prefix}[/]")
    if android:
        abi = get_platform(platform).abi
        console.print(f"  [dim]for an AAR: tvmgen aar ARTIFACT --native {abi}={prefix / 'lib'} -o model.aar[/]")
    click.echo(prefix)


def _android_prerequisites(platform: str) -> Path:
    """The TVM source tree of an Android runtime build, once the NDK and it are found as `tvmgen app` and
    `tvmgen doctor` find them; what is missing is said at once, each with its fix, before anything is written."""
    from tvmgen.android import doctor
    from tvmgen.compiler.targets.platforms import get_platform
    from tvmgen.runtime import runtime_build

    missing = []
    try:
        runtime_build.ndk_toolchain_file(get_platform(platform).abi)
    except ToolMissingError as e:
        missing.append(e)
    tvm = doctor.tvm_source()
    if not tvm.usable:
        missing.append(
            ToolMissingError(
                f"no usable TVM source tree ({tvm.detail}): the Android runtime builds TVM's from it", tvm.fix
            )
        )
    if len(missing) == 1:
        raise missing[0]
    if missing:
        raise ToolMissingError(
            "the Android runtime build needs the NDK and a TVM source tree:\n    - "
            + "\n    - ".join(e.message for e in missing),
            "one for each:\n    - " + "\n    - ".join(e.hint or "" for e in missing),
        )
    return Path(tvm.path)


@click.command()
@click.argument("source", metavar="ARTIFACT|MODEL")
@options.platform(
    [*options.RUNTIME_PLATFORMS, *options.ANDROID_PLATFORMS],
    help="Where the app runs (android-*: the Android ABI; the app's Gradle build compiles the runtime).",
    default=None,
)
@options.device(["cpu", "opencl", "cuda"], help="When SOURCE is a model: the device to compile for.")
@options.inputs(help="When SOURCE is a model: input shapes, as for compile.")
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Bundle directory to write.")
@click.option("--force", is_flag=True, help="Replace the bundle directory if it exists.")
def embed(source, platform, device, input_flags, out, force):
    """Make a bundle that adds the model and the runtime to an existing app.

    SOURCE is an artifact directory from `tvmgen compile`, or a model file (compiled first).
    The bundle holds the artifact, the runtime libraries and tvmgen-run where they can be built here
    (host, linux-aarch64), else (Android) the runtime sources and the exact build command, the C++
    header, the Java API, a CMake package config and a README with the lines to add to your project.
    """
    from tvmgen.compiler.targets.platforms import get_platform
    from tvmgen.core import artifact
    from tvmgen.runtime import embed as embedding

    artifact.refuse_existing(out, force)
    src = Path(source)
    with tempfile.TemporaryDirectory(prefix="tvmgen-embed-") as scratch:
        scratch = Path(scratch)
        if (src / "manifest.json").is_file():
            artifact_dir = src
            embedding.check_artifact(artifact.load(src), platform)
        else:
            artifact_dir = scratch / "artifact"
            objects_only = embedding.is_android(platform)
            if objects_only:
                try:
                    from tvmgen.core.toolchains import AndroidNdk

                    AndroidNdk(get_platform(platform).abi).verify()
                    objects_only = False
                except TvmgenError:
                    console.print(
                        "  [dim]no Android NDK here: the bundle gets the object archive (model.tar) "
                        "and the command that links it[/]"
                    )
            from tvmgen.commands.compile import compile as compile_cmd

            ctx = click.get_current_context()
            ctx.invoke(
                compile_cmd,
                model_arg=source,
                platform=platform,
                device=device,
                input_flags=input_flags,
                out=artifact_dir,
                force=True,
                objects_only=objects_only,
            )
        with artifact.staging(out, force) as staged:
            notes = embedding.write_bundle(artifact_dir, platform, staged)
    for note in notes:
        console.print(f"  [dim]{note}[/]")
    console.print(f"[green]✓[/] bundle: [bold]{out}[/] (see {out}/README.md)")
