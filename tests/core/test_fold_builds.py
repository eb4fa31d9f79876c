"""core.fold_builds: FoldConstant builds each distinct TIR function once in a process, with the same result."""

from __future__ import annotations

import numpy as np


def _module(weight: np.ndarray, scale: np.ndarray):
    """x + transpose(w) * s, with w and s constants: legalized, the transpose and multiply fold."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(weight.shape[::-1], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(relax.const(weight)))
            m = bb.emit(relax.op.multiply(t, relax.const(scale)))
            out = bb.emit_output(relax.op.add(x, m))
        bb.emit_func_output(out)
    return relax.transform.LegalizeOps()(bb.get())


def _folded(mod) -> np.ndarray:
    """The constant the folded module adds to x."""
    from tvm import ir, relax

    folded = relax.transform.FoldConstant()(mod)
    consts = []

    def visit(expr):
        if isinstance(expr, ir.expr.GenericConst):
            consts.append(expr.value.numpy())

    relax.analysis.post_order_visit(folded["main"], visit)
    assert len(consts) == 1, f"expected one folded constant, got {len(consts)}: {folded}"
    return consts[0]


def test_a_second_fold_of_the_same_functions_builds_nothing_and_gives_the_same_bits():
    from tvmgen.core import fold_builds

    fold_builds.install()
    fold_builds.install()  # idempotent
    rng = np.random.default_rng(0)
    w, s = rng.standard_normal((4, 8)).astype("float32"), rng.standard_normal((8, 4)).astype("float32")
    w2 = rng.standard_normal((4, 8)).astype("float32")
    before = dict(fold_builds.stats)
    first = _folded(_module(w, s))
    after_first = dict(fold_builds.stats)
    # a new module (new function objects, which TVM's own per-pass cache would build again) with other weights
    second = _folded(_module(w2, s))
    after_second = dict(fold_builds.stats)

    np.testing.assert_array_equal(first, w.T * s)
    np.testing.assert_array_equal(second, w2.T * s)
    # the first fold may reuse builds an earlier test in this process made; the second builds nothing new
    assert after_first["built"] + after_first["reused"] - before["built"] - before["reused"] == 2
    assert after_second["built"] == after_first["built"], (after_first, after_second)
    assert after_second["reused"] - after_first["reused"] == 2


def test_folded_functions_are_built_without_llvm_optimisations(monkeypatch):
    """A folded function runs once: it is built at LLVM's opt-level 0, and gives the same values."""
    from tvmgen.core import fold_builds

    fold_builds.install()
    targets = []
    tvm_build = fold_builds._installed[0]
    monkeypatch.setattr(fold_builds, "_installed", [lambda f, t, *rest: targets.append(t) or tvm_build(f, t, *rest)])
    rng = np.random.default_rng(1)
    w, s = rng.standard_normal((5, 7)).astype("float32"), rng.standard_normal((7, 5)).astype("float32")
    np.testing.assert_array_equal(_folded(_module(w, s)), w.T * s)  # shapes no other test folds: built here
    assert len(targets) == 2 and all(t.kind.name == "llvm" and int(t.attrs["opt-level"]) == 0 for t in targets)
