"""Find the files tvmgen ships beside its code: templates/ and jni/.

In a wheel they are installed inside the package (tvmgen/templates, tvmgen/jni); in a source
checkout (editable install) they sit at the top of the repository, next to generator/ (which holds
the package, generator/tvmgen/).
Both are found the same way: the first of those two places that exists.
"""

from __future__ import annotations

import os
from pathlib import Path

from tvmgen.core.errors import TvmgenError

_PACKAGE = Path(__file__).resolve().parent.parent  # tvmgen/ (this file is tvmgen/core/resources.py)
_CHECKOUT = _PACKAGE.parent.parent  # generator/tvmgen -> the repository


def data_dir(name: str) -> Path:
    """The directory of shipped files ``name`` ("templates" or "jni")."""
    for candidate in (_PACKAGE / name, _CHECKOUT / name):
        if candidate.is_dir():
            return candidate
    raise TvmgenError(
        f"tvmgen's {name}/ directory is missing (looked in {_PACKAGE} and {_CHECKOUT})",
        "reinstall tvmgen: pip install --force-reinstall tvmgen",
    )


def templates_dir() -> Path:
    return data_dir("templates")


def jni_dir() -> Path:
    return data_dir("jni")


def cache_dir() -> Path:
    """tvmgen's user cache: $TVMGEN_CACHE_DIR itself, else $XDG_CACHE_HOME/tvmgen or ~/.cache/tvmgen."""
    base = os.environ.get("TVMGEN_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / ("" if os.environ.get("TVMGEN_CACHE_DIR") else "tvmgen")
