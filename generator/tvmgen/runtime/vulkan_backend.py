"""tvmgen's Vulkan backend (libtvmgen_vulkan) in this Python process, for ``tvmgen run`` and ``--check``.

Loading the library registers TVM's ``device_api.vulkan`` and the loader of the SPIR-V kernels that
``tvmgen compile --device vulkan`` embeds (``ffi.Module.load_from_bytes.vulkan``); the wheel's runtime
has neither. ``$TVMGEN_VULKAN_BACKEND`` names the library; otherwise the cached host runtime build.
"""

from __future__ import annotations

import json
import os

from tvmgen.core.errors import TvmgenError


def load() -> None:
    import ctypes

    import tvm

    if tvm.get_global_func("device_api.vulkan", allow_missing=True) is not None:
        return
    path = os.environ.get("TVMGEN_VULKAN_BACKEND")
    if not path:
        from tvmgen.runtime import runtime_build

        path = str(runtime_build.cached_build("host") / "lib" / "libtvmgen_vulkan.so")
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise TvmgenError(
            f"cannot load tvmgen's Vulkan backend {path}: {e}",
            "the runtime build needs the Vulkan headers (apt-get install libvulkan-dev), then "
            "`tvmgen runtime build --platform host`",
        ) from e


def info() -> dict:
    """The Vulkan device the backend uses (``available``, ``device``, ``api``...), or ``error``."""
    import tvm

    load()
    return json.loads(tvm.get_global_func("tvmgen.vulkan.info")())
