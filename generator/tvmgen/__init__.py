"""tvmgen: put a deep-learning model on a phone with Apache TVM.

The package's folders follow the path a model takes: core (shared types, errors, the artifact
manifest), frontends, compiler, runtime, remote, reports, apps, android, ios, and commands (the CLI).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tvmgen")  # one source: pyproject.toml
except PackageNotFoundError:  # pragma: no cover - running from a checkout that was never installed
    __version__ = "0+unknown"
