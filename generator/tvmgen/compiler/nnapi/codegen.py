"""The chosen placement as a module for an ordinary CPU build, through TVM's NNAPI code generator
(present only in a TVM built with USE_NNAPI_CODEGEN=ON)."""

from __future__ import annotations

from tvmgen.compiler.nnapi.placement import load_costs, partition
from tvmgen.compiler.nnapi.report import Report, format_report
from tvmgen.core.errors import TvmgenError


class NnapiBuildError(TvmgenError):
    exit_code = 4


# TVM registers its NNAPI code generator under this name (src/relax/backend/contrib/nnapi/codegen.cc,
# built with USE_NNAPI_CODEGEN=ON); RunCodegen calls it for every function marked Codegen="nnapi".
CODEGEN = "relax.ext.nnapi"

# What a phone needs to run an NNAPI artifact: the manifest records it, the apps check it.
RUNTIME_NEEDS = {
    "library": "libtvm_runtime_extra.so",  # TVM's runtime built with USE_NNAPI_RUNTIME=ON holds the loader
    "loader": "ffi.Module.load_from_bytes.nnapi",
    "tvm_build_option": "USE_NNAPI_RUNTIME=ON",
    "system_library": "libneuralnetworks.so",  # an NDK public library: no manifest declaration needed
    "min_android_api": 27,  # NNAPI arrived in Android 8.1
}


def has_codegen() -> bool:
    import tvm

    return tvm.get_global_func(CODEGEN, allow_missing=True) is not None


def _nnapi_calls(mod) -> list:
    """The calls of NNAPI partition functions in main, in execution order (as `analyse` numbers them)."""
    from tvm import ir, relax

    calls = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and isinstance(v.op, ir.GlobalVar):
                fn = mod[v.op]
                if isinstance(fn, relax.Function) and fn.attrs is not None and "Codegen" in fn.attrs:
                    calls.append(v)
    return calls


def _plain_function(fn):
    """An NNAPI partition function as an ordinary Relax function: composites inlined, no Codegen."""
    import tvm
    from tvm import relax

    lifted = relax.transform.LambdaLift()(tvm.IRModule({"partition": fn.without_attr("Codegen")}))
    inner = {g: lifted[g].without_attr("Composite") for g in lifted.get_global_vars() if g.name_hint != "partition"}
    return lifted["partition"].inline_functions(inner).without_attr("global_symbol")


def keep_on_tvm(partitioned, report: Report):
    """The partitioned module with the NNAPI calls that ``report`` placed on TVM (the cost strategy's
    choice) computed by TVM instead; partition functions no call uses any more are dropped."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    calls = _nnapi_calls(partitioned)
    candidates = [o for o in report.ops if o.composites]  # what a pattern matched, in the same order
    if len(candidates) != len(calls):
        raise TvmgenError(
            f"the NNAPI placement names {len(candidates)} partition calls, the module has {len(calls)}",
            "a bug in tvmgen: report it with the log file",
        )
    kept = [c for c, o in zip(calls, candidates) if o.side == "tvm"]
    if not kept:
        return partitioned
    mod, plain = partitioned, {}
    for call in kept:
        if call.op not in plain:  # one TVM copy per shared partition function
            bb = relax.BlockBuilder(mod)
            name = call.op.name_hint.removesuffix("_nnapi") + "_tvm"
            plain[call.op] = bb.add_func(_plain_function(mod[call.op]), name)
            mod = bb.get()

    @mutator
    class Redirect(PyExprMutator):
        def visit_call_(self, call):
            if any(call.same_as(k) for k in kept):
                return relax.Call(plain[call.op], [self.visit_expr(a) for a in call.args])
            return super().visit_call_(call)

    mod["main"] = Redirect(mod).visit_expr(mod["main"])
    used = {c.op for c in _nnapi_calls(mod)}
    return tvm.IRModule(
        {
            g: f
            for g, f in mod.functions.items()
            if g in used or not (isinstance(f, relax.Function) and f.attrs is not None and "Codegen" in f.attrs)
        },
        attrs=mod.attrs,
    )


def generate(imported, partitioned, report: Report):
    """Run TVM's NNAPI code generator on the NNAPI parts of ``partitioned`` placed as ``report`` says.

    Returns an ImportedModel whose module holds the generated NNAPI modules, ready for an ordinary
    CPU build; its weights are bound (the NNAPI parts take them as constants)."""
    import dataclasses

    from tvm import relax

    require_codegen()
    mod = relax.transform.RunCodegen()(keep_on_tvm(partitioned, report))
    return dataclasses.replace(imported, mod=mod, params=[])


def runtime_needs(report: Report) -> dict:
    """The manifest's record of what running this artifact takes."""
    return {
        "nnapi": {
            **RUNTIME_NEEDS,
            "partitions": report.partitions,
            "strategy": report.strategy,
            "feature_level": report.feature_level,
        }
    }


def require_codegen() -> None:
    """NNAPI code generation needs a TVM built with it; say exactly which options when it is not."""
    if not has_codegen():
        raise NnapiBuildError(
            "this TVM build has no NNAPI code generator (relax.ext.nnapi): the PyPI apache-tvm is built with "
            "USE_NNAPI_CODEGEN=OFF and USE_NNAPI_RUNTIME=OFF",
            "build TVM from source with USE_NNAPI_CODEGEN=ON for compiling, and the Android runtime with "
            "USE_NNAPI_RUNTIME=ON (tvmgen's jni/ CMake: -DTVMGEN_NNAPI=ON); `tvmgen partition MODEL --nnapi` "
            "shows the placement meanwhile",
        )


def partition_and_generate(imported, feature_level, strategy, cost_table):
    """--device nnapi: partition, print the placement, generate the NNAPI parts with TVM's NNAPI code
    generator (or stop with exit 4 naming the TVM build options). Returns the model to build for
    the CPU and what the manifest records the runtime needs."""
    from tvmgen.core import log as logs

    costs = load_costs(cost_table)
    with logs.step(f"Partitioning for NNAPI ({strategy})"):
        partitioned, report = partition(
            imported.mod, imported.params, len(imported.inputs), feature_level, strategy, costs
        )
    logs.console.print(format_report(report))
    with logs.step("Generating the NNAPI parts (relax.ext.nnapi)"):
        generated = generate(imported, partitioned, report)
    return generated, runtime_needs(report)
