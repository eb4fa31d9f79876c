"""The GLSL and SPIR-V tools behind ``--device vulkan``: glslang compiles each kernel's GLSL to SPIR-V,
spirv-val checks the result against the Vulkan 1.0 rules."""

from __future__ import annotations

from tvmgen.core.toolchains.seam import Tool


class Glslang(Tool):
    """glslang's ``glslangValidator`` (Debian ``glslang-tools``): GLSL -> SPIR-V."""

    name = "glslangValidator"
    env_var = "TVMGEN_GLSLANG"
    commands = ("glslangValidator",)
    install = "apt-get install glslang-tools"
    missing = "--device vulkan needs glslang's glslangValidator (GLSL -> SPIR-V), which is not installed"
    version_argv = ("--version",)
    version_re = r"Glslang Version: (\S+)"


class SpirvVal(Tool):
    """SPIRV-Tools' validator (Debian ``spirv-tools``)."""

    name = "spirv-val"
    commands = ("spirv-val",)
    install = "apt-get install spirv-tools"
    missing = "spirv-val is not installed"
    version_argv = ("--version",)
    version_re = r"SPIRV-Tools (\S+)"
