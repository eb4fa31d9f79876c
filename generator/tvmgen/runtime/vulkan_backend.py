"""tvmgen's Vulkan backend (libtvmgen_vulkan) in this Python process, for ``tvmgen run`` and ``--check``.

Loading the library registers TVM's ``device_api.vulkan`` and the loader of the SPIR-V kernels that
``tvmgen compile --device vulkan`` embeds (``ffi.Module.load_from_bytes.vulkan``); the wheel's runtime
has neither. ``$TVMGEN_VULKAN_BACKEND`` names the library; otherwise the cached host runtime build.
"""

from __future__ import annotations

import json


def load() -> None:
    from tvmgen.runtime import runtime_build

    runtime_build.load_backend(
        "vulkan",
        "Vulkan",
        "the runtime build needs the Vulkan headers (apt-get install libvulkan-dev), then "
        "`tvmgen runtime build --platform host`",
    )


def info() -> dict:
    """The Vulkan device the backend uses (``available``, ``device``, ``api``...), or ``error``."""
    import tvm

    load()
    return json.loads(tvm.get_global_func("tvmgen.vulkan.info")())
