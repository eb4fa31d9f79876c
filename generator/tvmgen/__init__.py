"""tvmgen: put a deep-learning model on a phone with Apache TVM.

The package's folders follow the path a model takes: core (shared types, errors, the artifact
manifest), frontends, compiler, runtime, remote, reports, apps, android, ios, and commands (the CLI).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tvmgen")  # one source: pyproject.toml
except PackageNotFoundError:  # pragma: no cover - running from a checkout that was never installed
    __version__ = "0+unknown"


def load_tvm_without_torch() -> None:
    """tvm_ffi and tvm.relax import PyTorch as they load, only to exchange tensors with it, which tvmgen
    never does: about 2 s of CPU on every command that uses TVM (1.9 of a command's 2.8 s).
    Unless torch is already loaded, their own imports see it as absent; torch stays importable afterwards,
    for the PyTorch frontend (which hands TVM its weights through NumPy).

    Called by the command line's entry point only (``cli.entry``), and not for a PyTorch model: tvm_ffi
    imports torch first on purpose (the two libraries' symbols can clash when tvm_ffi's load first), so a
    process that will use both keeps that order."""
    import importlib.abc
    import importlib.machinery
    import sys

    blind = {"tvm_ffi", "tvm", "tvm.relax"}  # each module's first import runs without torch

    class TorchLater(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in blind:
                return None
            blind.discard(name)
            if not blind:
                sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None or "torch" in sys.modules:
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                nested = "torch" in sys.modules  # an outer import already hides it
                sys.modules["torch"] = None  # `import torch` raises ImportError
                try:
                    run(module)
                finally:
                    if not nested and sys.modules.get("torch", 0) is None:
                        del sys.modules["torch"]

            spec.loader.exec_module = exec_module
            return spec

    if "tvm_ffi" not in sys.modules and "torch" not in sys.modules:
        sys.meta_path.insert(0, TorchLater())
