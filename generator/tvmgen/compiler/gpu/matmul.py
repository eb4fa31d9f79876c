"""The matrix-product rule a GPU target's build uses: dlight's Matmul, configured by GPU family.

``compiler.gpu.default_rules`` schedules with it, and ``split_k`` sizes its decision on its tiles."""

from __future__ import annotations


def is_desktop(target) -> bool:
    return target is not None and target.kind.name == "opencl" and str(target.attrs.get("device", "")) == "desktop"


def desktop_matmul():
    """dlight's Matmul rule (matmuls and convolutions), configured for an OpenCL target as dlight
    configures it for CUDA: 8 x 16 threads of 4 x 4 results, 16-deep reduction steps staged in local
    memory, pairs of values per load. For OpenCL dlight has only an Adreno configuration and a
    conservative default (8 x 8 threads, 8-deep steps, no vectors), which is what the generic family
    gets; through NVIDIA's OpenCL the CUDA configuration makes SqueezeNet's convolutions 1.5x
    faster (docs/gpu.md, GPU schedules)."""
    from tvm.s_tir import dlight as dl
    from tvm.target import Target

    class DesktopMatmul(dl.gpu.Matmul):
        def get_configs(self, target):
            if target.kind.name == "opencl":
                return super().get_configs(Target({"kind": "cuda"}))
            return super().get_configs(target)

    return DesktopMatmul()


def matmul_rule(target):
    """dlight's Matmul rule as ``target``'s build configures it: the desktop family's (``desktop_matmul``), else
    dlight's own per-target configuration."""
    from tvm.s_tir import dlight as dl

    return desktop_matmul() if is_desktop(target) else dl.gpu.Matmul()
