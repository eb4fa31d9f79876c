"""`tvmgen app`, `tvmgen rpc-app` and `tvmgen doctor`: Android and iOS apps, and the tools they need."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import tempfile
from pathlib import Path

import click

from tvmgen.android import downloads as pins
from tvmgen.commands import options
from tvmgen.compiler import precision as precisions
from tvmgen.compiler.targets import database
from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.core import artifact
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError, ToolMissingError, TvmgenError

console = logs.console


_ABI_PLATFORMS = {name: PLATFORMS[name].abi for name in options.ANDROID_PLATFORMS}


@dataclasses.dataclass(frozen=True)
class _AppCommon:
    """The options of _app_common that app and rpc-app take alike (--platform aside), as one argument."""

    package: str | None
    name: str | None
    out: Path | None
    force: bool
    release: bool
    keystore: Path | None
    key_alias: str | None
    install: bool
    serial: str | None
    team_id: str | None
    yes: bool


def _app_options(kind, common, platforms, run_app, **kw):
    from tvmgen.android.app import AppOptions

    if common.release and not (common.keystore and common.key_alias):
        raise InputError(
            "--release needs --keystore FILE and --key-alias ALIAS",
            "the passwords come from TVMGEN_KEYSTORE_PASSWORD / TVMGEN_KEY_PASSWORD or a prompt",
        )
    return AppOptions(
        kind=kind,
        package=common.package,
        app_name=common.name,
        abis=[_ABI_PLATFORMS[p] for p in platforms],
        release=common.release,
        keystore=common.keystore,
        key_alias=common.key_alias,
        install=common.install or run_app,
        run=run_app,
        serial=common.serial,
        **kw,
    )


def _finish_app(project: Path, opts):
    """Build, sign, install and run when the tools are here; otherwise say what is missing."""
    from tvmgen.android import app as android_app

    missing = android_app.missing_for_apk()
    if missing:
        console.print(f"[yellow]![/] {android_app.summary_of_missing(missing, project)}")
        if opts.install or opts.run:
            raise ToolMissingError(
                "cannot install or run: the APK could not be built here",
                "install what is missing (tvmgen doctor), then run this command again",
            )
        return
    apk = android_app.build_apk(project, opts)
    console.print(f"[green]✓[/] APK: [bold]{apk}[/]")
    if opts.install:
        results = android_app.install_and_run(apk, opts, project / "results", project / "app/src/main/assets")
        if results is not None:
            click.echo(json.dumps(results, indent=2))
        if results is not None and opts.report:
            from tvmgen.commands import report

            report.write([project / "results" / "tvmgen-results.json"], opts.report)


def _interactive() -> bool:
    """A person at a terminal can answer a question (never in CI, tests or a pipe)."""
    return sys.stdin.isatty() and console.is_terminal


def _show_plan(plan) -> None:
    console.print(f"The APK build lacks these; tvmgen downloads them into {pins.data_dir()}:")
    for line in plan.lines():
        console.print(f"  - {line}", markup=False)


def _set_up_android(yes: bool) -> None:
    """Before an Android app is made: download what the APK build lacks, with --yes or after asking once.

    Without --yes and without a terminal to ask on, nothing is downloaded: the command goes on and,
    after rendering, lists what is missing with the fix for each (as before).
    """
    from tvmgen.android import install

    try:
        plan = install.make_plan()
    except TvmgenError:
        if yes:
            raise
        return  # e.g. ANDROID_HOME names no directory: reported with its fix after rendering
    if plan.empty():
        return
    if not yes:
        if not _interactive():
            return
        _show_plan(plan)
        if not click.confirm(
            "Download them now? (`tvmgen doctor --install` does the same later)", default=True, err=True
        ):
            return
    else:
        _show_plan(plan)
    install.install(plan, yes=yes, interactive=_interactive())


def _android_only(platforms=(), release=False, run=False):
    """Flags the iOS app does not take, refused with what to do instead."""
    if any(p != "ios-arm64" for p in platforms):
        raise InputError("--platform ios-arm64 cannot be mixed with Android ABIs", "make one app per platform")
    if release:
        raise InputError(
            "--release, --keystore and --key-alias sign Android apps",
            "iOS apps are signed by Xcode with --team-id (automatic signing)",
        )
    if run:
        raise InputError(
            "--run is Android's headless mode",
            "the iOS deploy app runs the model at launch and logs "
            "'tvmgen results {...}' (Console.app, or xcrun devicectl device process launch --console)",
        )


def _ios_app(kind, model, device, input_flags, common, rpc):
    """The iOS app (templates/ios_rpc): compile as a system library, render, and build where Xcode is."""
    from tvmgen.ios import app as ios_app

    stem = ios_app.model_stem(model)
    opts = ios_app.IosAppOptions(
        kind=kind,
        model=model,
        device=device,
        input_flags=tuple(input_flags),
        bundle_id=common.package or f"org.tvmgen.{''.join(c for c in stem.lower() if c.isalnum()) or 'model'}",
        app_name=common.name or f"{stem} (tvmgen)",
        team_id=common.team_id or "",
        install=common.install,
        device_id=common.serial,
        rpc=rpc,
    )
    default_out = Path("out") / ("ios-rpc-app" if kind == "rpc" else f"{stem}-ios-{device}-app")
    result = ios_app.create(opts, common.out or default_out, common.force)
    ios_app.report(result, int(rpc.get("port", 9090)))


_platforms_option = options.platform(
    [*_ABI_PLATFORMS, "ios-arm64"],
    help="Android ABI(s) to build for (repeatable), or ios-arm64: the iOS app (Xcode project).",
    default=["android-arm64"],
    multiple=True,
)
_app_common = [
    _platforms_option,
    click.option("--package", default=None, help="Application id. [default: org.tvmgen.<model> / org.tvmgen.rpc]"),
    click.option("--name", default=None, help="App name shown on the phone."),
    click.option("-o", "--out", type=click.Path(path_type=Path), help="Project directory to write."),
    click.option("--force", is_flag=True, help="Replace the project directory if it exists."),
    click.option("--release", is_flag=True, help="Sign with your release key instead of tvmgen's debug key."),
    click.option("--keystore", type=click.Path(path_type=Path), help="--release: the keystore file."),
    click.option(
        "--key-alias",
        help="--release: the key's alias. Passwords: TVMGEN_KEYSTORE_PASSWORD / "
        "TVMGEN_KEY_PASSWORD, or a prompt; never on the command line.",
    ),
    click.option("--install", is_flag=True, help="Install on the phone with adb."),
    click.option("--serial", help="The phone, when several are attached (adb devices; iOS: the devicectl device id)."),
    click.option(
        "--team-id",
        help="iOS: the Apple developer team that signs the app (DEVELOPMENT_TEAM); "
        "needed where it is built (macOS with Xcode).",
    ),
    click.option(
        "-y",
        "--yes",
        is_flag=True,
        help="Android: download whatever the APK build lacks (as `tvmgen doctor --install`) without "
        "asking, accepting the Android SDK licences. Without it tvmgen asks once at a terminal, "
        "and elsewhere only lists what is missing.",
    ),
]


def _app_common_options(*decorators):
    """``decorators`` (those of _app_common a command takes), the command receiving the options of
    _AppCommon as one argument, ``common``."""
    fields = [f.name for f in dataclasses.fields(_AppCommon)]

    def apply(f):
        @functools.wraps(f)
        def command(**kwargs):
            return f(common=_AppCommon(**{k: kwargs.pop(k) for k in fields}), **kwargs)

        return options.combine(*decorators)(command)

    return apply


@click.command()
@click.option(
    "--model", "model", required=True, help="The model (as for compile), e.g. mobilenet.pb or builtin:mobilenet."
)
@options.device(
    ["cpu", "opencl", "vulkan", "nnapi", "metal"],
    help="Where the model runs on the phone (opencl and vulkan fall back to CPU on the phone when absent; metal: iOS).",
)
@options.gpu_family(
    ["adreno", "mali", "generic", "desktop"],
    help="OpenCL GPU family (with --device opencl): adreno uses texture (image) memory.",
)
@options.inputs()
@click.option(
    "--kind",
    default="deploy",
    show_default=True,
    type=click.Choice(["deploy", "rpc"]),
    help="deploy: the model app; rpc: the RPC app (as tvmgen rpc-app).",
)
@click.option("--run", "run_app", is_flag=True, help="Install, launch headless, wait for the results and print them.")
@click.option("--iterations", default=10, show_default=True, help="--run: timed runs on the phone.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path),
    help="--run: also write the results as an HTML QA report here (as tvmgen report).",
)
@options.nnapi()
@options.tuning_db(
    help="CPU or OpenCL kernels tuned by `tvmgen tune` on the phone (as for compile); each build uses "
    "the kernels the database has for its target."
)
@options.precision(help=precisions.HELP + " Applies to the --device build; the CPU fallback of a GPU app stays fp32.")
@_app_common_options(*_app_common)
def app(
    model,
    device,
    gpu_family,
    input_flags,
    kind,
    run_app,
    iterations,
    report_path,
    strategy,
    feature_level,
    cost_table,
    tuning_db,
    platforms,
    common,
    precision="fp32",
):
    """Model -> Android app project -> signed APK -> phone (or, with --platform ios-arm64, an iOS app).

    Compiles the model for each ABI (and a CPU fallback for --device opencl or nnapi), renders the app from
    templates/android_deploy, and where the Android SDK, NDK and a TVM source tree are present builds
    it with Gradle, zipaligns, signs (apksigner v2 + v3), verifies, installs and launches it.
    What is missing (command-line tools, SDK platform and build-tools, NDK, CMake, Gradle, the TVM
    source) tvmgen downloads into its data directory: with --yes, or after asking once at a terminal.
    Otherwise it stops after rendering and says what is missing (`tvmgen doctor` lists it all).

    \b
      tvmgen app --model mobilenet.pb --device opencl --yes
      tvmgen app --model mobilenet.pb --input input:1x224x224x3 --device opencl
      tvmgen app --model builtin:mobilenet --install --run --serial R58M123 --report report.html
      tvmgen app --platform ios-arm64 --model builtin:mobilenet --device metal --team-id AB12CD34EF
    """
    from tvmgen.android import project as android_project
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import app_targets
    from tvmgen.core.toolchains import AndroidNdk

    if kind == "rpc":
        raise InputError(
            "--kind rpc builds the RPC app, which takes no model", "use `tvmgen rpc-app --platform android-arm64`"
        )
    if report_path and not run_app:
        raise InputError("--report writes the report of the phone's results", "add --run")
    precision_error = InputError(
        f"--precision {precision} is for Android --device cpu, opencl or vulkan builds "
        "(NNAPI drivers choose their own precision; the iOS app builds fp32)",
        "leave out --precision",
    )
    if "ios-arm64" in platforms:
        if precision != "fp32":
            raise precision_error
        _android_only(platforms, release=common.release, run=run_app)
        if tuning_db:
            raise InputError(
                "--tuning-db has no ios-arm64 kernels to give: tuning times candidates on the device, "
                "and an iOS app cannot load uploaded code (it serves only the models linked into it)",
                "leave it out for --platform ios-arm64: the iOS build uses the default CPU schedules",
            )
        return _ios_app("deploy", model, device, input_flags, common, {})
    # each device's build resolved once: the device, then its fallback (a GPU / NNAPI app runs on the CPU
    # of a phone without it), on the first --platform (one ABI's models ship)
    targets = app_targets(platforms, device, gpu_family)
    if targets[0].kind.partitions:
        options.nnapi_notice()
        if precision != "fp32":
            raise precision_error
    stem = pipeline.model_name(model)
    common = dataclasses.replace(
        common,
        package=common.package or f"org.tvmgen.{''.join(c for c in stem.lower() if c.isalnum()) or 'model'}",
        name=common.name or f"{stem} (tvmgen)",
        out=common.out or Path("out") / f"{stem}-android-{targets[0].device}-app",
    )
    out = common.out
    android_project.check_package(common.package)
    tuning_db = database.checked_database(tuning_db, targets)
    artifact.refuse_existing(out, common.force)
    opts = _app_options("deploy", common, platforms, run_app, iterations=iterations, report=report_path)
    _set_up_android(common.yes)  # before compiling: a downloaded NDK links the model
    try:
        AndroidNdk().verify()
        linked = True
    except TvmgenError:
        linked = False
    with tempfile.TemporaryDirectory(prefix="tvmgen-app-") as scratch:
        scratch = Path(scratch)
        loaded = pipeline.load_model(model, scratch, input_flags)
        artifacts = {}
        for i, target in enumerate(targets):
            artifacts[target.device] = scratch / f"model-{target.device}"
            # NNAPI stops here (exit 4) when this TVM has no NNAPI code generator
            pipeline.compile_model(
                loaded,
                target,
                artifacts[target.device],
                info={"name": stem, "source": model},
                nnapi=pipeline.NnapiOptions(feature_level, strategy, cost_table),
                objects_only=not linked,  # then the app's CMake links the objects (android/project.py)
                tuning_db=database.database_for(tuning_db, target),
                # the CPU fallback of a GPU app: fp32, runs anywhere
                precision=precision if i == 0 else "fp32",
            )

        with artifact.staging(out, common.force) as staged:
            ctx = android_project.android_context(
                "deploy",
                common.package,
                common.name,
                stem,
                [t.device for t in targets],
                opts.abis,
                tvm_source_dir=_tvm_source_dir(),
            )
            with logs.step("Rendering the Android project (templates/android_deploy)"):
                android_project.create_android_project("deploy", staged, ctx, artifacts)
    console.print(f"[green]✓[/] Android project: [bold]{out}[/]")
    _finish_app(out, opts)


@click.command("rpc-app")
@click.option(
    "--mode",
    type=click.Choice(["proxy", "tracker", "standalone"]),
    help="The app's default server mode (standalone: iOS only). [default: android proxy, ios standalone]",
)
@click.option(
    "--address",
    help="The tracker/proxy address the app uses (standalone: the address it listens on). "
    "[default: android 127.0.0.1, ios 0.0.0.0]",
)
@click.option(
    "--port", default=9090, show_default=True, help="The tracker/proxy port (standalone: the port it listens on)."
)
@click.option("--key", help="The device key. [default: android / iphone]")
@click.option(
    "--model",
    default="builtin:mobilenet",
    show_default=True,
    help="iOS: the model linked into the app, which it serves (iOS cannot load uploaded code).",
)
@options.device(["cpu", "metal"], help="iOS: where the linked model runs.")
@click.option(
    "--usb",
    is_flag=True,
    help="Reach the host's proxy over the cable: adb reverse tcp:PORT tcp:PORT, then start the app "
    "in proxy mode on 127.0.0.1 (no shared Wi-Fi needed).",
)
@_app_common_options(*_app_common)
def rpc_app(
    platforms,
    mode,
    address,
    port,
    key,
    model,
    device,
    usb,
    common,
):
    """The RPC app: the phone becomes a device for `tvmgen bench`.

    Renders templates/android_rpc (the native device server from jni/, packaged and watched by a
    service that restarts it), builds, signs and installs it where the tools are present.
    """
    from tvmgen.android import project as android_project

    common = dataclasses.replace(common, package=common.package or "org.tvmgen.rpc", name=common.name or "tvmgen RPC")
    if "ios-arm64" in platforms:
        _android_only(platforms, release=common.release)
        rpc = {
            "mode": "standalone" if usb else mode or "standalone",
            "address": address or "0.0.0.0",
            "port": port,
            "key": key or "iphone",
        }
        return _ios_app("rpc", model, device, (), common, rpc)
    if mode == "standalone":
        raise InputError("standalone mode is the iOS app's", "use --mode proxy or tracker for Android")
    mode, address, key = mode or "proxy", address or "127.0.0.1", key or "android"
    android_project.check_package(common.package)
    if usb:
        mode, address = "proxy", "127.0.0.1"
    out = common.out or Path("out") / "android-rpc-app"
    artifact.refuse_existing(out, common.force)
    opts = _app_options(
        "rpc", common, platforms, False, usb=usb, rpc={"mode": mode, "address": address, "port": port, "key": key}
    )
    _set_up_android(common.yes)
    with artifact.staging(out, common.force) as staged:
        ctx = android_project.android_context(
            "rpc",
            common.package,
            common.name,
            "-",
            ["cpu"],
            opts.abis,
            tvm_source_dir=_tvm_source_dir(),
            rpc_mode=mode,
            rpc_address=address,
            rpc_port=port,
            rpc_key=key,
        )
        with logs.step("Rendering the Android RPC app (templates/android_rpc)"):
            android_project.create_android_project("rpc", staged, ctx, {})
    console.print(f"[green]✓[/] Android project: [bold]{out}[/]")
    if usb:
        console.print(
            f"  USB mode: start a proxy here (tvmgen rpc proxy --port {port}); the app reaches it through "
            f"`adb reverse tcp:{port} tcp:{port}`"
        )
    _finish_app(out, opts)


def _tvm_source_dir() -> str:
    return str(pins.tvm_source_dir() or "")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON on stdout.")
@click.option(
    "--install",
    "install_missing",
    is_flag=True,
    help="First download what the APK build lacks into tvmgen's data directory ($TVMGEN_DATA_DIR, "
    f"default ~/.local/share/tvmgen): the Android command-line tools; with their sdkmanager "
    f"{', '.join(pins.SDK_PACKAGES)}; Gradle {pins.GRADLE_VERSION}; the TVM {pins.TVM_TAG} source "
    "(git, shallow, with submodules). Downloads are checked against pinned "
    "SHA-256 values and resume after an interruption; what is here and usable is not fetched again; "
    "your ANDROID_HOME, ANDROID_NDK_HOME, TVM_SOURCE_DIR and GRADLE_HOME are used as they are.",
)
@click.option(
    "-y",
    "--yes",
    is_flag=True,
    help="With --install: accept the Android SDK licences without showing them (they are written to the "
    "log file). Without it, --install shows them and asks at a terminal, and stops elsewhere.",
)
def doctor(as_json, install_missing, yes):
    """Check the tools the Android app build needs, with the fix for each one missing.

    Each row says where the tool came from (yours: an environment variable, PATH or a known
    place; or tvmgen's download) and its version.

    \b
    Exit code: 0 when `tvmgen app` can build an APK here (JDK, Gradle 8.7 or newer, Android
    SDK platform and build-tools, NDK, TVM source tree, apksigner, zipalign, aapt all usable);
    3 (missing tool) otherwise, also when a download fails. CMake, adb, qemu, the cross
    compiler, OpenCL and Xcode are reported but do not change the exit code.
    """
    from tvmgen.android import doctor as doc
    from tvmgen.android import install
    from tvmgen.core.errors import ToolMissingError
    from tvmgen.ios import doctor as ios_doctor

    if yes and not install_missing:
        raise InputError("--yes answers the questions --install asks", "use `tvmgen doctor --install --yes`")
    if install_missing:
        plan = install.make_plan()
        if plan.empty():
            console.print("[green]✓[/] nothing to download: what the APK build needs is here")
        else:
            _show_plan(plan)
            install.install(plan, yes=yes, interactive=_interactive())
            console.print("[green]✓[/] installed")
    found = doc.checks() + ios_doctor.checks()  # iOS: Xcode, SDK, identities; "not macOS" elsewhere
    if as_json:
        click.echo(json.dumps(doc.as_json(found), indent=2))
    else:
        click.echo(doc.table(found))
    if not doc.ready(found):
        sys.exit(ToolMissingError.exit_code)
