"""The tvmgen command line: the click group, error handling and exit codes, main(). The commands
themselves live in tvmgen.commands, one module each."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import click

from tvmgen import __version__, load_tvm_without_torch
from tvmgen.core import interrupts
from tvmgen.core import log as logs
from tvmgen.core.errors import TvmgenError

log = logging.getLogger("tvmgen")
console = logs.console


class State:
    verbosity = 0
    log_path: Path | None = None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="tvmgen", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="More output: -v steps, -vv debug (also in the log file).")
@click.pass_context
def cli(ctx, verbose):
    """tvmgen: put a deep-learning model on a phone with Apache TVM.

    \b
    Quick start:
      tvmgen compile builtin:mobilenet --check       compile the built-in model for this machine
      tvmgen run out/mobilenet-host-cpu              run it and time it
      tvmgen inspect out/mobilenet-host-cpu          show what the artifact holds

    \b
    On a phone:
      tvmgen doctor                                  which Android tools are here, and the fix for the rest
      tvmgen app --model mobilenet.pb --device opencl --yes      model -> signed APK (--yes: downloads the
                                                               SDK, NDK, Gradle and TVM source it lacks)
      tvmgen rpc tracker --detach; tvmgen bench MODEL --key K --tracker 127.0.0.1:9190

    Every run writes a log file; its path is printed when something fails.
    """
    State.verbosity = verbose
    State.log_path = logs.setup(verbose, ctx.invoked_subcommand or "tvmgen")


def _register() -> None:
    """Each command lives in its own module under tvmgen.commands; this group only holds them."""
    from tvmgen.commands import aar, apps, bench, compile, partition, report, rpc, run, runtime, tune

    for command in (
        compile.compile,
        run.inspect,
        run.run,
        runtime.runtime,
        runtime.embed,
        rpc.rpc_group,
        rpc.devices,
        bench.bench,
        tune.tune,
        apps.app,
        apps.rpc_app,
        apps.doctor,
        aar.aar,
        partition.partition,
        report.report,
    ):
        cli.add_command(command)


_register()


def wants_torch(argv: list[str]) -> bool:
    """Whether this command line names a PyTorch model (.pt2): its process imports torch before TVM."""
    return any(a.endswith(".pt2") for a in argv)


def entry():
    """The `tvmgen` command: TVM loaded without PyTorch unless the command needs it (2 s of CPU saved on
    each command; tvmgen.load_tvm_without_torch), then ``main``."""
    if not wants_torch(sys.argv[1:]):
        load_tvm_without_torch()
    main()


def main():
    # TensorFlow and oneDNN print C++ log lines on import; tvmgen's own log has what matters.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    logging.captureWarnings(True)
    with interrupts.handling():  # SIGINT/SIGTERM: stop, remove the unfinished output, exit 130/143
        try:
            cli.main(standalone_mode=False)
        except KeyboardInterrupt as e:
            _interrupted(e)
        except click.exceptions.Abort as e:  # click turns a KeyboardInterrupt into Abort
            if interrupts.is_interrupt(e):
                _interrupted(e)
            console.print("aborted")
            sys.exit(130)
        except Exception as e:
            if interrupts.is_interrupt(e):  # the interrupt, come back through TVM or a wrapper as an error
                _interrupted(e)
            _failed(e)


def _interrupted(e: BaseException) -> NoReturn:
    """One line, no traceback: which signal, and the unfinished output it removed."""
    interrupts.handled()
    log.info("%s", interrupts.summary())
    log.debug("interrupted at: %s", "".join(traceback.format_exception(e)))
    console.print(interrupts.summary())
    sys.exit(interrupts.exit_code())


def _failed(e: Exception) -> NoReturn:
    if isinstance(e, click.ClickException):
        e.show()
        sys.exit(e.exit_code)
    if isinstance(e, TvmgenError):
        log.debug("error: %s", traceback.format_exc())
        console.print(f"[bold red]error:[/] {e.message}")
        if e.hint:
            console.print(f"  [bold]fix:[/] {e.hint}")
        if State.log_path:
            console.print(f"  [dim]log: {State.log_path}[/]")
        sys.exit(e.exit_code)
    # an internal error: full traceback to the log, one line to the user
    log.error("internal error: %s", traceback.format_exc())
    console.print(
        f"[bold red]internal error:[/] {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    )
    if State.log_path:
        console.print(f"  the full traceback is in the log: {State.log_path}")
    console.print("  please report it with that log attached")
    sys.exit(1)
