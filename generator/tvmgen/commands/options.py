"""Options several commands share, declared once: the same flag, type, default and help text
everywhere. A command that supports only some devices or GPU families names them; they must be
among the compiler's (``compiler.platforms.DEVICES`` / ``GPU_FAMILIES``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from tvmgen.compiler import precision as precisions
from tvmgen.compiler.targets.platforms import DEVICES, GPU_FAMILIES, PLATFORMS

INPUT_HELP = (
    "Set or override an input's shape/dtype, e.g. input:1x224x224x3:float32 (a 0-d input: sr:scalar:int64). Repeatable."
)
GPU_FAMILY_HELP = (
    "OpenCL GPU family (with --device opencl): adreno keeps tensors in texture (image) memory "
    "with TVM's Adreno schedules; mali and generic use buffers; desktop (NVIDIA/AMD/Intel PC "
    "GPUs) uses the larger convolution tiles TVM gives CUDA."
)


def _subset(given: Sequence[str], known: Sequence[str], what: str) -> list[str]:
    unknown = [c for c in given if c not in known]
    if unknown:  # a programming error in a command's declaration, found at import
        raise ValueError(f"{what} {unknown} are not among {list(known)}")
    return list(given)


def _prefixed(prefix: str, body: str) -> str:
    """A help text after ``prefix`` ("--check: "), or the body alone, capitalised."""
    return prefix + body if prefix else body[0].upper() + body[1:]


def device(choices: Sequence[str] = DEVICES, help: str = "Processor on the platform that runs the model."):
    """--device: ``choices`` are the devices the command supports."""
    return click.option(
        "--device",
        default="cpu",
        show_default=True,
        type=click.Choice(_subset(choices, DEVICES, "devices")),
        help=help,
    )


def gpu_family(choices: Sequence[str] = GPU_FAMILIES, help: str = GPU_FAMILY_HELP):
    return click.option(
        "--gpu-family",
        default="generic",
        show_default=True,
        type=click.Choice(_subset(choices, GPU_FAMILIES, "GPU families")),
        help=help,
    )


RUNTIME_PLATFORMS = ["host", "linux-aarch64"]  # where tvmgen builds and runs its own runtime (CMake here)
ANDROID_PLATFORMS = [p.name for p in PLATFORMS.values() if p.exporter == "ndk"]


class PlatformChoice(click.Choice):
    """One --platform vocabulary for every command: the platform table's names. An OS or ABI name
    (android, ios, arm64-v8a) is answered with the table's name for it."""

    def convert(self, value, param, ctx):
        if value in self.choices:
            return value
        if value == "android" or value.startswith("android-"):
            names = [n for n in ANDROID_PLATFORMS if n in self.choices]
        else:
            names = [
                p.name for p in PLATFORMS.values() if value in (p.abi, p.name.split("-")[0]) and p.name in self.choices
            ]
        if names:
            self.fail(f"{value!r} is not a platform name: use --platform {' or '.join(names)}", param, ctx)
        return super().convert(value, param, ctx)


def platform(
    choices: Sequence[str] = tuple(PLATFORMS),
    help: str = "Where the model runs.",
    default: str | Sequence[str] | None = "host",
    multiple: bool = False,
):
    """--platform: ``choices`` are the platform table's names the command supports."""
    return click.option(
        "--platform",
        "platforms" if multiple else "platform",
        multiple=multiple,
        default=default,
        show_default=default is not None,
        required=default is None and not multiple,
        type=PlatformChoice(_subset(choices, list(PLATFORMS), "platforms")),
        help=help,
    )


def runtime_platform(help: str, android: bool = False):
    """--platform for the runtime built here: the host, or linux-aarch64 (cross-built, run under qemu); with
    ``android`` also the Android ABIs (built with the NDK against a TVM source tree)."""
    return platform([*RUNTIME_PLATFORMS, *(ANDROID_PLATFORMS if android else ())], help=help)


def inputs(help: str = INPUT_HELP):
    return click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]", help=help)


def state(
    help: str = "Declare a streaming state pair: the input that takes the state and the output that returns its "
    "next value, e.g. --state h0=hn. The runtime then holds the state from run to run (from zeros; reset, read "
    "and set through its API) and callers give and get only the other inputs and outputs. Repeatable.",
):
    return click.option("--state", "state_flags", multiple=True, metavar="INPUT=OUTPUT", help=help)


def precision(help: str = precisions.HELP):
    return click.option(
        "--precision", default="fp32", show_default=True, type=click.Choice(precisions.PRECISIONS), help=help
    )


def tuning_db(help: str):
    return click.option("--tuning-db", type=click.Path(path_type=Path), help=help)


NNAPI_DEPRECATED = (
    "NNAPI is deprecated since Android 15 (developer.android.com/ndk/guides/neuralnetworks/migration-guide): "
    "it still runs, but Google expects most phones to run it on NNAPI's own CPU implementation rather than an "
    "accelerator, and recommends other paths for fast inference. For the phone's GPU use --device opencl "
    "(--gpu-family adreno|mali), which tvmgen compiles and checks itself; --device cpu runs everywhere."
)


def nnapi_notice() -> None:
    """Said by every command that targets NNAPI (compile and app --device nnapi, partition), before its work."""
    from tvmgen.core.log import console

    console.print(f"[yellow]![/] {NNAPI_DEPRECATED}")


def nnapi(prefix: str = "--device nnapi: "):
    """--strategy, --feature-level and --cost-table: how operators are placed on NNAPI. ``prefix`` starts
    each help text (the condition under which the option counts)."""

    def text(body: str) -> str:
        return _prefixed(prefix, body)

    return combine(
        click.option(
            "--strategy",
            default="patterns",
            show_default=True,
            type=click.Choice(["patterns", "cost"]),
            help=text(
                "patterns: TVM's greedy pattern partitioner; cost: keep a piece on TVM when its "
                "transitions cost more than NNAPI saves (static cost table)."
            ),
        ),
        click.option(
            "--feature-level", type=click.IntRange(1, 8), help=text("highest NNAPI feature level the phones have.")
        ),
        click.option(
            "--cost-table",
            type=click.Path(path_type=Path),
            help=text("JSON overriding the static cost table (--strategy cost)."),
        ),
    )


def combine(*decorators):
    """One decorator applying ``decorators`` so that their options show in the given order."""

    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def remote_device(key_help: str, prefix: str = "", key_required: bool = False, session_timeout: int | None = None):
    """--key, --tracker and --proxy (and --session-timeout where the command holds a session): which RPC
    device, and where it is reached. ``prefix`` starts each help text (e.g. "--measure: ")."""
    decorators = [
        click.option("--key", required=key_required, help=key_help),
        click.option(
            "--tracker",
            metavar="HOST:PORT",
            help=_prefixed(prefix, "get the device from this tracker (waits while it is busy)."),
        ),
        click.option("--proxy", metavar="HOST:PORT", help=_prefixed(prefix, "reach the device through this proxy.")),
    ]
    if session_timeout is not None:
        decorators.append(
            click.option(
                "--session-timeout",
                default=session_timeout,
                show_default=True,
                help=_prefixed(prefix, "seconds the device gives each session."),
            )
        )
    return combine(*decorators)


def tolerances(prefix: str = ""):
    """--atol and --rtol: how far outputs may be from the reference runtime's (runtime.check.tolerances)."""
    return combine(
        click.option(
            "--atol",
            type=float,
            default=None,
            help=_prefixed(
                prefix, "absolute tolerance against the reference. [default: 1e-4; 1e-3 with --precision fp16]"
            ),
        ),
        click.option(
            "--rtol",
            type=float,
            default=None,
            help=_prefixed(
                prefix, "tolerance relative to the largest reference value. [default: 1e-3; 1e-2 with --precision fp16]"
            ),
        ),
    )


def seed(help: str = "Seed of the random inputs (the same wherever they are made)."):
    return click.option("--seed", default=0, show_default=True, help=help)


def json_file(help: str = "Write the results as JSON here."):
    return click.option("--json", "json_path", type=click.Path(path_type=Path), help=help)
