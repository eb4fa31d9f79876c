"""App templates (templates/<name>/) rendered into a project directory.

Rules, as in Cookiecutter / Copier: rendering is strict (a missing variable is an error, never
an empty string); only files ending in `.jinja` are rendered (the suffix is dropped); every other
file is copied byte for byte with its mode; `{{ ... }}` in a path is rendered too; output is
deterministic. Logic lives here, in the context, not in the templates.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2

from tvmgen.core import resources
from tvmgen.core.errors import TvmgenError

TEMPLATES = ("android_deploy", "android_rpc", "android_aar", "ios_rpc")


def render(template: str, out_dir: Path, context: dict, filters: dict | None = None) -> list[Path]:
    """Render templates/<template> into ``out_dir`` (which must not exist); returns the files written.

    ``filters``: extra Jinja filters a template needs (the iOS project file's quoting)."""
    src = resources.templates_dir() / template
    if not src.is_dir():
        raise TvmgenError(
            f"the app template {template!r} is missing from {resources.templates_dir()}", "reinstall tvmgen"
        )
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        loader=jinja2.FileSystemLoader(str(src)),
        autoescape=False,
    )
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
            raise TvmgenError(
                f"template {template}/{path.relative_to(src)}: {e}",
                "a template uses a value tvmgen does not provide: a bug in tvmgen",
            ) from e
        written.append(dest)
    return written
