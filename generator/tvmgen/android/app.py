"""`tvmgen app` and `tvmgen rpc-app`: model -> Android project -> signed APK -> phone.

Each step runs only when the tools for it are here: compile, render, Gradle build (SDK + NDK +
TVM source tree), zipalign, apksigner (v2 + v3), verify, install, launch, results back. Where a
tool is missing the command stops after rendering and says what is missing and what finishes
the job.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tvmgen.android import adb, doctor, downloads, signing, tools
from tvmgen.core import toolchains
from tvmgen.core.errors import InputError, TvmgenError
from tvmgen.core.log import step
from tvmgen.reports import agreement


@dataclass
class AppOptions:
    kind: str  # deploy | rpc
    package: str
    app_name: str
    abis: list[str]
    release: bool = False
    keystore: Path | None = None
    key_alias: str | None = None
    install: bool = False
    run: bool = False
    serial: str | None = None
    iterations: int = 10
    warmup: int = 2
    usb: bool = False
    rpc: dict = field(default_factory=dict)  # mode, address, port, key for the RPC app
    report: Path | None = None  # --run --report: the HTML QA report of the results, written here


def missing_for_apk() -> list[doctor.Check]:
    """The checks `tvmgen doctor` marks as needed for an APK that are not usable here."""
    return [c for c in doctor.checks() if c.required and not c.usable]


def build_apk(project: Path, opts: AppOptions) -> Path:
    """Gradle build, zipalign, the 16 KB page check, sign (v2 + v3), verify: the signed APK's path."""
    gradle = tools.Gradle(project).verify()
    task = "assembleRelease"
    env = build_env()
    with step(f"Building the APK with Gradle ({task})"):
        proc = toolchains.run([str(gradle), "--no-daemon", "-p", str(project), task], cwd=project, check=False, env=env)
        if proc.returncode != 0:
            raise TvmgenError(
                f"the Gradle build failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}",
                "see the log file for Gradle's full output",
            )
    built = sorted((project / "app" / "build" / "outputs" / "apk" / "release").glob("*.apk"))
    if not built:
        raise TvmgenError(
            "Gradle finished but wrote no APK under app/build/outputs/apk/release",
            "check the Gradle output in the log file",
        )
    out_dir = project / "apk"
    out_dir.mkdir(exist_ok=True)
    aligned = signing.zipalign(built[0], out_dir / "aligned.apk")
    signing.check_pages(aligned)  # every library linked for 16 KB pages and placed on a 16 KB boundary
    if not opts.release:
        key = signing.debug_key()
    elif opts.keystore is not None and opts.key_alias is not None:
        key = signing.release_key(opts.keystore, opts.key_alias)
    else:
        raise InputError(
            "a release build needs a keystore and a key alias", "pass --keystore FILE and --key-alias ALIAS"
        )
    final = out_dir / f"{opts.app_name.replace(' ', '-')}-{'release' if opts.release else 'debug-signed'}.apk"
    with step(f"Signing with apksigner ({'release' if opts.release else 'debug'} key, v2 + v3)"):
        signing.sign(aligned, key, final)
        aligned.unlink(missing_ok=True)
        result = signing.verify(final)
        if not result.verified:
            raise TvmgenError(f"apksigner verify rejected {final}: {result}", "see the log file")
    return final


def install_and_run(apk: Path, opts: AppOptions, results_dir: Path, assets: Path | None = None) -> dict | None:
    """Install; for the deploy app with --run also launch it headless, wait for its results and pull them,
    adding the phone's properties and, where the artifact it ran is in ``assets`` with its source model
    readable here, its outputs checked against the host's reference on the same inputs."""
    phone = adb.choose_device(opts.serial)
    with step(f"Installing on {phone.serial}"):
        phone.install(apk, package=opts.package)
    if opts.kind == "rpc":
        if opts.usb:
            phone.reverse(int(opts.rpc["port"]))
        extras = {
            "mode": opts.rpc["mode"],
            "address": opts.rpc["address"],
            "port": int(opts.rpc["port"]),
            "key": opts.rpc["key"],
            "start": True,
        }
        phone.start(f"{opts.package}/.RpcActivity", extras)
        return None
    if not opts.run:
        return None
    remote = f"/sdcard/Android/data/{opts.package}/files/tvmgen-results.json"
    started = time.time()
    # fresh: the deploy app's run belongs to its process (it survives rotation), so a run left going from
    # an earlier launch would be joined instead of a new one started
    phone.start(
        f"{opts.package}/.MainActivity",
        {"iterations": opts.iterations, "warmup": opts.warmup, "exit": True},
        fresh=True,
    )
    with step("Waiting for the app's results"):
        deadline = started + 600
        while time.time() < deadline:
            lines = [ln for ln in phone.logcat("tvmgen") if "results {" in ln]
            if lines:
                break
            time.sleep(2)
        else:
            raise TvmgenError("the app wrote no results within 10 minutes", "look at `adb logcat -s tvmgen`")
    local = phone.pull(remote, results_dir / "tvmgen-results.json")
    results = json.loads(local.read_text())
    results["phone"] = phone.properties()  # the app does not know its phone's name; the QA report shows it
    if assets is not None and results.get("artifact"):
        with step(f"Checking the outputs against the host's reference ({results['artifact']})"):
            skipped = agreement.check_app_results(results, assets / results["artifact"])
        if skipped:
            results["check_skipped"] = skipped
    local.write_text(json.dumps(results, indent=2))
    return results


def build_env() -> dict[str, str]:
    """What Gradle needs to find: the SDK, the JDK and the TVM source, yours or tvmgen's download."""
    sdk, tvm = tools.sdk_root(), downloads.tvm_source_dir()
    env = {"TVM_SOURCE_DIR": str(tvm or "")}
    if sdk is not None and not any(os.environ.get(v) for v in tools.SDK_ENV_VARS):
        env["ANDROID_HOME"] = str(sdk)
    if not os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = str(tools.Jdk().verify())
    return env


def summary_of_missing(missing: list[doctor.Check], project: Path) -> str:
    lines = [f"  - {c.name}: {c.detail or 'not found'}" + (f"\n    fix: {c.fix}" if c.fix else "") for c in missing]
    finish = (
        f"cd {project} && ANDROID_HOME=... TVM_SOURCE_DIR=... gradle assembleRelease   "
        "(or run this tvmgen command again with --yes: tvmgen downloads what is missing; "
        "`tvmgen doctor --install` does only that)"
    )
    return (
        "the project is rendered but no APK was built; missing here:\n" + "\n".join(lines) + f"\n  to finish: {finish}"
    )
