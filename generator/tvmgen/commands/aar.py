"""`tvmgen aar`: a model-specific Android library (AAR) from artifact directories and Android runtime builds."""

from __future__ import annotations

from pathlib import Path

import click

from tvmgen.core import log as logs
from tvmgen.core.errors import InputError


def _native(values: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for v in values:
        abi, sep, directory = v.partition("=")
        if not sep or not directory:
            raise InputError(
                f"--native {v!r} is not ABI=DIR",
                "e.g. --native arm64-v8a=build/runtime-android-arm64/install/lib, the lib/ of the prefix "
                "`tvmgen runtime build --platform android-arm64` prints",
            )
        out[abi] = Path(directory)
    return out


@click.command()
@click.argument("artifact_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--native",
    "native",
    multiple=True,
    metavar="ABI=DIR",
    help="The Android (NDK) build of the tvmgen runtime for one ABI: the lib/ of the prefix that "
    "`tvmgen runtime build --platform android-arm64` (android-armv7, android-x86_64) prints, holding "
    "libtvmgen_jni.so, libtvmgen_jni_bridge.so, libtvmgen_runtime.so, libtvm_runtime.so, libtvm_ffi.so (and "
    "libtvmgen_opencl.so for OpenCL models). Repeat for each ABI.",
)
@click.option(
    "-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="The .aar to write."
)
@click.option(
    "--package", default="org.tvmgen.model", show_default=True, help="The library's Android package (its namespace)."
)
def aar(artifact_dirs, native, out, package):
    """Package Android artifacts as an AAR: classes.jar (org.tvmgen), jni/<abi>/ libraries (the runtime's and
    each model's, loaded in place from the APK), the models' manifests and weights under assets/tvmgen/,
    consumer R8 rules and the manifest. A model compiled to objects (--objects-only, or no NDK) ships its objects
    and tvmgen/tvmgen-model.cmake, which the app's CMake includes to link its library. Every native library is
    checked for 16 KB pages."""
    from tvmgen.android.aar import CMAKE_FILE, build_aar

    built = build_aar(list(artifact_dirs), _native(native), out, package)
    logs.console.print(f"[green]wrote[/] {built.path}: ABIs {', '.join(built.abis)}")
    for name, library in built.libraries.items():
        logs.console.print(f"  assets/tvmgen/{name}/ (load: ArtifactData.readPackaged), its library {library}")
        if name in built.linked_by_app:
            logs.console.print(
                f"    linked by the app's CMake: include {CMAKE_FILE} from the AAR (target {built.linked_by_app[name]})"
            )
    for r in built.pages:
        logs.console.print(f"  {r.summary()}")
