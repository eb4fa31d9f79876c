"""OpenCL kernels whose unrolled loops stay loops, under ``#pragma unroll``: the driver unrolls them.

TVM's GPU schedules (dlight) ask for their inner loops to be unrolled in TIR (the
``pragma_unroll_explicit`` annotation, over the ``tirx.UnrollLoop`` setting), so the OpenCL source
spells out every iteration: a convolution's 4 x 4 tile, 8-deep reduction step and guarded loads are
~45 KB of C per kernel, 1.5 MB for an int8 MobileNetV2. The driver compiles that text on the
phone at the first launch (and on NVIDIA in one build at a time per process), and its compile time
grows with it. Kept as loops under ``#pragma unroll``, the source is ten times smaller and the
compiler unrolls them itself into the same code.

On NVIDIA's OpenCL (docs/benchmarks.md, the GPU's cold start) the int8 MobileNetV2's 51 kernels
build in 3.7 s instead of 5.0-5.6 s (one process), its cold first run is about a fifth shorter,
its steady run the same and its outputs identical.

How: before TVM's lowering, each loop's ``pragma_unroll_explicit`` is set to 0 (and the build's
``tirx.UnrollLoop`` config ``explicit_unroll`` to False), so ``UnrollLoop`` marks the loops it
would have expanded as unrolled loops instead; after the lowering, those loops' variables are
renamed with a marker, and the source hook TVM calls for each OpenCL function
(``tvm_callback_opencl_postproc``) puts ``#pragma unroll`` before each marked loop. A driver that
does not know the pragma ignores it (OpenCL C: unknown pragmas are ignored); the loops stay
correct either way. ``TVMGEN_OPENCL_UNROLL=text`` at compile time builds TVM's unrolled text
instead.
"""

from __future__ import annotations

import contextlib
import os
import re

MARK = "_unrl"  # the loop variables of the loops to unroll: "for (int ax1_3_unrl = 0; ..."
_LOOP = re.compile(r"^(\s*)for \(\w+ \w*" + MARK + r"\w* = ")


def enabled() -> bool:
    """Loops (the default) or TVM's unrolled text (``TVMGEN_OPENCL_UNROLL=text``)."""
    return os.environ.get("TVMGEN_OPENCL_UNROLL", "loops") != "text"


def tir_pipeline(base: str) -> str:
    """The TIR pipeline ``base`` (a registered name, e.g. "default") with the loops kept: its name,
    registered on first use."""
    from tvm.tirx import compilation_pipeline as tir

    name = f"{base}+tvmgen-loops"
    if name not in tir.PIPELINE_MAP:

        def factory():
            import tvm

            lowering, host, device = tir.get_tir_pipeline(base)
            return tvm.transform.Sequential([KeepUnrolledLoops(), lowering, MarkUnrolledLoops()]), host, device

        tir.register_tir_pipeline(name, factory)
    return name


@contextlib.contextmanager
def build_context():
    """The pass context of an OpenCL build: the current one with ``explicit_unroll`` off, and the
    source hook installed."""
    import tvm
    import tvm_ffi

    tvm_ffi.register_global_func("tvm_callback_opencl_postproc", postproc, override=True)
    cur = tvm.transform.PassContext.current()
    config = dict(cur.config)
    config["tirx.UnrollLoop"] = {**dict(config.get("tirx.UnrollLoop", {}) or {}), "explicit_unroll": False}
    with tvm.transform.PassContext(
        opt_level=cur.opt_level,
        required_pass=list(cur.required_pass),
        disabled_pass=list(cur.disabled_pass),
        instruments=list(cur.instruments),
        config=config,
    ):
        yield


def postproc(source: str, _target=None) -> str:
    """``#pragma unroll`` before each loop whose variable carries the marker."""
    if MARK not in source:
        return source
    out = []
    for line in source.split("\n"):
        m = _LOOP.match(line)
        if m:
            out.append(m.group(1) + "#pragma unroll")
        out.append(line)
    return "\n".join(out)


def KeepUnrolledLoops():  # noqa: N802 - a pass, named like TVM's
    """Each loop's ``pragma_unroll_explicit`` annotation (dlight's) set to 0."""
    import tvm_ffi
    from tvm import tirx

    zero = tirx.IntImm("int32", 0)

    def on_for(stmt):
        if "pragma_unroll_explicit" not in stmt.annotations:
            return stmt
        ann = {**stmt.annotations, "pragma_unroll_explicit": zero}
        return tirx.For(
            stmt.loop_var, stmt.min, stmt.extent, stmt.kind, stmt.body, stmt.thread_binding, ann, stmt.step, stmt.span
        )

    @tirx.transform.prim_func_pass(opt_level=0, name="TvmgenKeepUnrolledLoops")
    def _pass(func, _mod, _ctx):  # before the lowering: the pragmas are still loop annotations
        return tvm_ffi.structural_map(func, [(tirx.For, on_for)])

    return _pass


def MarkUnrolledLoops():  # noqa: N802
    """The variables of the loops ``UnrollLoop`` left as unrolled loops renamed with ``MARK``."""
    import tvm_ffi
    from tvm import tirx

    @tirx.transform.prim_func_pass(opt_level=0, name="TvmgenMarkUnrolledLoops")
    def _pass(func, _mod, _ctx):
        loop_vars = []

        def collect(stmt):
            if stmt.kind == tirx.ForKind.UNROLLED:
                loop_vars.append(stmt.loop_var)
            return stmt

        tvm_ffi.structural_map(func, [(tirx.For, collect)])
        if not loop_vars:
            return func
        renamed = [tirx.Var(v.name + MARK, v.ty) for v in loop_vars]

        def on_var(v):
            for old, new in zip(loop_vars, renamed):
                if v.same_as(old):
                    return new
            return v

        return tvm_ffi.structural_map(func, [(tirx.Var, on_var)])

    return _pass
