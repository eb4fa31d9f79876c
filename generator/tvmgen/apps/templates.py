"""App templates (templates/<name>/) rendered into a project directory.

Rules, as in Cookiecutter / Copier: rendering is strict (a missing variable is an error, never
an empty string); only files ending in `.jinja` are rendered (the suffix is dropped); every other
file is copied byte for byte with its mode; `{{ ... }}` in a path is rendered too; output is
deterministic. Logic lives here, in the context, not in the templates.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import jinja2

from tvmgen.core import resources
from tvmgen.core.errors import InputError, TvmgenError

TEMPLATES = ("android_deploy", "android_rpc", "ios_rpc")
PACKAGE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def check_package(package: str) -> None:
    if not PACKAGE_RE.match(package):
        raise InputError(f"{package!r} is not a valid Android application id",
                         "use lower-case dotted words, e.g. org.example.mobilenet")


def render(template: str, out_dir: Path, context: dict, filters: dict | None = None) -> list[Path]:
    """Render templates/<template> into ``out_dir`` (which must not exist); returns the files written.

    ``filters``: extra Jinja filters a template needs (the iOS project file's quoting)."""
    src = resources.templates_dir() / template
    if not src.is_dir():
        raise TvmgenError(f"the app template {template!r} is missing from {resources.templates_dir()}",
                          "reinstall tvmgen")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             loader=jinja2.FileSystemLoader(str(src)), autoescape=False)
    env.filters.update(filters or {})
    written = []
    for path in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = path.relative_to(src).as_posix()
        try:
            rel = env.from_string(rel).render(context) if "{{" in rel else rel
            if rel.endswith(".jinja"):
                rel = rel[: -len(".jinja")]
                text = env.get_template(path.relative_to(src).as_posix()).render(context)
                dest = out_dir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)
            else:
                dest = out_dir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
            shutil.copymode(path, dest)
        except jinja2.UndefinedError as e:
            raise TvmgenError(f"template {template}/{path.relative_to(src)}: {e}",
                              "a template uses a value tvmgen does not provide: a bug in tvmgen") from e
        written.append(dest)
    return written


def android_context(kind: str, package: str, app_name: str, model_name: str, device: str, abis: list[str],
                    tvm_source_dir: str = "", rpc_mode: str = "proxy", rpc_address: str = "127.0.0.1",
                    rpc_port: int = 9090, rpc_key: str = "android") -> dict:
    """Everything the Android templates use: the only place their values are decided."""
    from tvmgen import __version__
    from tvmgen.android.downloads import AGP_VERSION, COMPILE_SDK, GRADLE_VERSION, NDK_VERSION

    check_package(package)
    return {
        "kind": kind, "package": package, "package_path": package.replace(".", "/"), "app_name": app_name,
        "model_name": model_name, "device": device,
        "model_devices": [device] + (["cpu"] if device != "cpu" else []),
        "abis": abis, "min_sdk": 24, "compile_sdk": COMPILE_SDK, "target_sdk": COMPILE_SDK,
        "agp_version": AGP_VERSION, "gradle_version": GRADLE_VERSION, "ndk_version": NDK_VERSION,
        "version_code": 1, "version_name": "1.0", "tvm_source_dir": tvm_source_dir, "tvmgen_version": __version__,
        # the RPC app's defaults (what `tvmgen rpc-app` was given)
        "default_mode": rpc_mode, "default_address": rpc_address, "default_port": rpc_port, "default_key": rpc_key,
    }


def create_android_project(kind: str, out_dir: Path, context: dict, artifacts: dict[str, Path]) -> None:
    """Render templates/android_<kind> into ``out_dir``, with the runtime sources and the artifacts.

    ``artifacts`` maps a device name to an artifact directory, shipped as assets/model-<device>/.
    """
    render(f"android_{kind}", out_dir, context)
    shutil.copytree(resources.jni_dir(), out_dir / "tvmgen-jni",
                    ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    for device, directory in artifacts.items():
        shutil.copytree(directory, out_dir / "app" / "src" / "main" / "assets" / f"model-{device}")
