"""What the Vulkan test modules (test_vulkan.py, test_vulkan_runtime.py, test_vulkan_java.py) share: the models
they compile for Vulkan, their ``tools``, ``arts`` and ``runtime`` fixtures (``module_fixtures``), and readers of a
Vulkan artifact's kernels and of the command counts libtvmgen_vulkan logs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import unavailable
from helpers import vulkan_device

MODELS = ("tiny", "mobilenet")


def require_tools() -> None:
    """glslangValidator and spirv-val, or the module's tests are unavailable (the ``tools`` fixture)."""
    for tool, package in (("glslangValidator", "glslang-tools"), ("spirv-val", "spirv-tools")):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install {package}; scripts/bootstrap.sh)")


def vulkan_artifacts(tmp_path_factory, builtin_onnx, compiled) -> dict:
    """(model, device) -> artifact dir (conftest's ``compiled``: once per session, shared by the modules)."""
    from tvmgen.frontends.builtin import materialize

    paths = {"mobilenet": builtin_onnx, "tiny": materialize("builtin:tiny", tmp_path_factory.mktemp("vk-models"))}
    return {(m, d): compiled(paths[m], "host", d, name=m) for m in MODELS for d in ("cpu", "vulkan")}


def vulkan_runtime(host_runtime: Path) -> Path:
    """The host runtime with libtvmgen_vulkan, after checking (in another process) that it finds a device."""
    info = vulkan_device(host_runtime)
    print(f"Vulkan device: {info['device']} (Vulkan {info['api']})", file=sys.stderr)
    return host_runtime


def kernels_of(art) -> list[dict]:
    from tvmgen.compiler import vulkan

    return vulkan.read_payload((art / "model.so").read_bytes())


def vk_commands(stderr: str) -> dict:
    """The command counts libtvmgen_vulkan logs (TVMGEN_VULKAN_LOG=1) at the end of a process."""
    line = next(ln for ln in stderr.splitlines() if ln.startswith("tvmgen-vulkan: commands {"))
    return json.loads(line.removeprefix("tvmgen-vulkan: commands "))


def module_fixtures():
    """The module-scoped ``tools``, ``arts`` and ``runtime`` fixtures, made for the module that assigns them
    (``tools, arts, runtime = module_fixtures()``: pytest finds fixtures among a module's names)."""

    @pytest.fixture(scope="module")
    def tools():
        require_tools()

    @pytest.fixture(scope="module")
    def arts(tools, tmp_path_factory, builtin_onnx, compiled) -> dict:
        """(model, device) -> artifact dir (conftest's ``compiled``: once per session, shared)."""
        return vulkan_artifacts(tmp_path_factory, builtin_onnx, compiled)

    @pytest.fixture(scope="module")
    def runtime(host_runtime):
        """The host runtime with libtvmgen_vulkan, after checking (in another process) that it finds a device."""
        return vulkan_runtime(host_runtime)

    return tools, arts, runtime
