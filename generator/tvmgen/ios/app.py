"""`tvmgen rpc-app --platform ios-arm64` and `tvmgen app --platform ios-arm64`: model -> Xcode project -> device.

Steps, each only where its tools are here: compile the model for ios-arm64 (system lib: arm64
Mach-O objects), render templates/ios_rpc with the model archive linked in (staged, then moved
into place), and on a Mac with Xcode build with xcodebuild and install/launch with devicectl.
Elsewhere it stops after rendering and prints the exact commands that finish the job on a Mac.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.compiler import pipeline
from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget, check_pair
from tvmgen.core import artifact
from tvmgen.core.errors import InputError, ToolMissingError
from tvmgen.core.log import console, step
from tvmgen.core.toolchains import xcode
from tvmgen.ios import project


@dataclass
class IosAppOptions:
    kind: str  # deploy | rpc
    model: str
    device: str = "cpu"
    input_flags: tuple = ()
    bundle_id: str = ""
    app_name: str = ""
    team_id: str = ""
    install: bool = False
    device_id: str | None = None  # devicectl's device identifier
    rpc: dict = field(default_factory=dict)  # mode, address, port, key


@dataclass
class IosAppResult:
    project: Path
    symbols: list[str]
    built: Path | None  # the .app, when built here
    commands: list[str]  # what finishes the job on a Mac, when not built here
    not_built_because: str = ""


def model_stem(model: str) -> str:
    return pipeline.model_name(model)


def check_options(opts: IosAppOptions, builds_here: bool) -> None:
    """Bad input fails before anything is compiled or written.

    ``builds_here``: the app is built here (macOS with Xcode, and TVM_SOURCE_DIR set)."""
    check_pair(PLATFORMS["ios-arm64"], opts.device)
    project.check_bundle_id(opts.bundle_id)
    if opts.team_id:
        project.check_team_id(opts.team_id)
    elif builds_here:
        raise InputError(
            "building the iOS app needs a signing team: --team-id is missing",
            "pass --team-id (10 characters; `security find-identity -v -p codesigning` shows it in "
            "parentheses, e.g. 'Apple Development: Jane Doe (AB12CD34EF)')",
        )
    if opts.install and not builds_here:
        raise ToolMissingError(
            "cannot install on an iPhone/iPad: the app cannot be built here (that needs macOS with "
            "Xcode and TVM_SOURCE_DIR)",
            "leave out --install to render the project, then build it on "
            "a Mac with the printed commands (`tvmgen doctor` shows what is here)",
        )
    if opts.install and not opts.device_id:
        raise InputError("--install needs the device: --serial DEVICE_ID", "`xcrun devicectl list devices` lists them")


def create(opts: IosAppOptions, out: Path, force: bool) -> IosAppResult:
    xcodebuild = xcode.Xcodebuild()
    tvm_source_dir = os.environ.get("TVM_SOURCE_DIR", "")
    try:
        xcodebuild.verify()
        not_built_because = (
            ""
            if tvm_source_dir
            else ("TVM_SOURCE_DIR is not set (the app's build compiles the TVM runtime for iOS from a TVM source tree)")
        )
    except ToolMissingError as e:
        not_built_because = e.message
    check_options(opts, builds_here=not not_built_because)
    artifact.refuse_existing(out, force)
    rpc = {"mode": "standalone", "address": "0.0.0.0", "port": 9090, "key": "iphone", **opts.rpc}
    with tempfile.TemporaryDirectory(prefix="tvmgen-ios-") as scratch_name:
        scratch = Path(scratch_name)
        loaded = pipeline.load_model(opts.model, scratch, opts.input_flags)
        art = scratch / "artifact"
        pipeline.compile_model(
            loaded, BuildTarget(PLATFORMS["ios-arm64"], opts.device), art, info={"source": opts.model}
        )
        ctx = project.context(
            opts.kind,
            opts.bundle_id,
            opts.app_name,
            model_stem(opts.model),
            opts.device,
            opts.team_id,
            tvm_source_dir,
            rpc["mode"],
            rpc["address"],
            int(rpc["port"]),
            rpc["key"],
        )
        with artifact.staging(out, force) as staged:
            with step("Rendering the Xcode project (templates/ios_rpc)"):
                symbols = project.create_project(staged, ctx, art)
    out = out.absolute()
    if not_built_because:
        return IosAppResult(out, symbols, None, ctx["mac_commands"], not_built_because)
    with step("Building with xcodebuild (Release, iphoneos)"):
        app = xcodebuild.build_app(out, opts.team_id, tvm_source_dir)
    if opts.install:
        assert opts.device_id  # check_options refuses --install without it
        ctl = xcode.Devicectl()
        with step(f"Installing on {opts.device_id} (devicectl)"):
            ctl.install_app(app, opts.device_id)
            ctl.launch(opts.bundle_id, opts.device_id)
    return IosAppResult(out, symbols, app, [])


def report(result: IosAppResult, port: int) -> None:
    console.print(
        f"[green]✓[/] Xcode project: [bold]{result.project}[/] (model archive Models/libmodel.a: "
        f"{len(result.symbols)} symbols indexed)"
    )
    if result.built:
        console.print(f"[green]✓[/] app: [bold]{result.built}[/]")
        console.print(f"  USB: iproxy {port} {port}, then connect to 127.0.0.1:{port}")
        return
    console.print(f"[yellow]![/] not built here: {result.not_built_because}")
    console.print("  on a Mac with Xcode 15+, to finish:")
    console.print(f"  cd {result.project}")
    for command in result.commands:
        console.print(f"  {command}")
