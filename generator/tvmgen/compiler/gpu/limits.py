"""What a GPU kernel needs of a work-group, against what its GPU family gives one (``platforms.GPU_LIMITS``).

A schedule that asks a work-group for more local (shared) memory or more threads than the device has does
not fail in tvmgen: the driver refuses the program when the app loads it (NVIDIA's OpenCL compiler: "uses
too much shared data"), or a Vulkan dispatch loses the device. ``apply_rules`` measures each kernel a rule
schedules (``needs``) and passes a kernel over its family's limits to the next rule, which says so in the
compile output.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Needs:
    shared_bytes: int  # local memory (OpenCL), shared (Vulkan, CUDA), threadgroup (Metal): every buffer summed
    threads: int  # the work-group's threads: the product of the thread axes' extents

    def over(self, limits) -> str:
        """Why these needs exceed ``limits`` (a ``platforms.GpuLimits``), or ``""``."""
        why = []
        if self.shared_bytes > limits.shared_bytes:
            why.append(
                f"{_kb(self.shared_bytes)} of shared memory per work-group, the {limits.name} limit is "
                f"{_kb(limits.shared_bytes)}"
            )
        if self.threads > limits.threads:
            why.append(f"{self.threads} threads per work-group, the {limits.name} limit is {limits.threads}")
        return "; ".join(why)


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n % 1024 else f"{n // 1024} KB"


def needs(func) -> Needs:
    """What the scheduled TIR function ``func`` asks of a work-group: the bytes of its buffers in shared scope
    once lowered as TVM lowers it (a schedule's staging buffer has the whole tensor's shape until each is
    compacted to the region its block touches) and the most threads a launch of it asks for (the thread axes
    threadIdx.x/y/z around a block, multiplied)."""
    import tvm
    from tvm import s_tir, tirx

    # TVM's own lowering of a scheduled function (s_tir.pipeline), up to the flat allocations: the buffers
    # compacted, padded as the schedule aligns them, and doubled where a software pipeline stages them
    t = s_tir.transform
    lower = tvm.transform.Sequential(
        [
            t.CanonicalizeLoop(),
            t.LowerCrossThreadReduction(),
            t.LowerInitBlock(),
            t.PlanAndUpdateBufferAllocationLocation(),
            t.ConvertBlocksToOpaque(),
            t.LiftThreadBinding(),
            t.ManifestSharedMemoryLocalStage(),
            t.CompactBufferAllocation(),
            t.LowerAutoCopy(),
            t.UnifyThreadBinding(),
            t.LowerMatchBuffer(),
            t.StmtSimplify(),
            t.InjectPermutedLayout(),
            t.AnnotateIrregularLoop(),
            t.InjectSoftwarePipeline(),
            t.TransformMmaBufferLayout(),
            t.LowerOpaqueBlock(),
            tirx.transform.FlattenBuffer(),
        ]
    )
    with tvm.transform.PassContext(opt_level=3):
        lowered = lower(tvm.IRModule({"main": func}))
    scopes = s_tir.analysis.calculate_allocated_bytes(lowered)["main"]
    shared = sum(int(v) for k, v in scopes.items() if str(k).startswith("shared"))
    # threads: per block, the thread axes of the loops around it (one launch: a function may hold several, each
    # a kernel of its own, as the Adreno convolution's two do), multiplied; the largest over the blocks
    sch = s_tir.Schedule(func)
    threads = 1
    stack = list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        rv = stack.pop()
        extents: dict[str, int] = {}
        for loop_rv in sch.get_loops(rv):
            loop = sch.get(loop_rv)
            binding = loop.thread_binding
            if binding is not None and isinstance(loop.extent, tirx.IntImm):
                tag = str(binding.thread_tag)
                if tag.startswith("threadIdx"):
                    extents[tag] = max(extents.get(tag, 1), int(loop.extent))
        product = 1
        for n in extents.values():
            product *= n
        threads = max(threads, product)
        stack += list(sch.get_child_blocks(rv))
    return Needs(shared, threads)
