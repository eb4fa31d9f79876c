"""An ONNX If computes only the branch it takes (compiler.branches, issue 37's vad_scalar): TVM's
importer computes both branches' subgraphs before the If; tvmgen moves each binding that one
branch alone reads into that branch, gives each branch the storages it uses (TVM's memory plan
shared them between the branches: the false branch crashed), and keeps the kernels that read a
model input inside a branch reading it in place (element alignment). Checked on the zoo's
vad_scalar (one LSTM per sample rate) against onnxruntime, both branches, in one loaded model."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import tvm
from tvm.script import relax as R

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.fixture(scope="module")
def vad(tmp_path_factory):
    import zoo

    return zoo.build("vad_scalar", tmp_path_factory.mktemp("vad-branches"))[0]


def _main_calls(mod):
    """(kernel names called in main outside any If, [kernel names called in each If branch])."""
    from tvm import relax

    outside, inside = [], []

    def calls(seq, into):
        for block in seq.blocks:
            for b in block.bindings:
                v = b.value
                if isinstance(v, relax.If):
                    for br in (v.true_branch, v.false_branch):
                        inside.append([])
                        calls(br, inside[-1])
                elif isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                    into.append(v.args[0].name_hint)

    calls(mod["main"].body, outside)
    return outside, inside


def test_each_branch_computes_its_own_lstm_and_nothing_runs_for_the_other(vad):
    from tvm import relax

    from tvmgen import frontends
    from tvmgen.compiler import cpu, recurrent
    from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

    imported = frontends.load(vad, [])
    mod = relax.transform.BindParams(
        "main", dict(zip(imported.mod["main"].params[len(imported.inputs) :], imported.params))
    )(imported.mod)
    mod = recurrent.lower(mod)  # the fused LSTMs as the build gives them to the CPU pipeline
    target = make_target(PLATFORMS["host"].cpu_target())
    with target:
        mod = tvm.transform.Sequential(cpu.prepare_passes(target))(mod)
    relax.analysis.well_formed(mod)
    outside, branches = _main_calls(mod)
    assert not any("lstm" in k for k in outside), outside  # before: both LSTMs ran before the If
    assert len(branches) == 2 and all(sum("lstm" in k for k in br) == 1 for br in branches), branches


def test_both_branches_match_onnxruntime_in_one_loaded_model(vad, compiled):
    """Alternating branches in one VM: each uses storages of its own (the false branch read the
    true branch's unbound storage and crashed), and the input is read in place (4-byte alignment,
    not a copy into a 64-byte aligned tensor on every call)."""
    import zoo
    from tvmgen.runtime.runner import HostModel

    art = compiled(vad, "host", "cpu", name="vad_scalar")
    assert json.loads((art / "manifest.json").read_text())["vm"]["input_alignment"] == [4, 8]
    model = HostModel(art, threads=1)
    reference = zoo.reference_runner(vad, {})
    rng = np.random.default_rng(7)
    for sr in (8000, 16000, 8000, 16000, 12345):
        inputs = {"x": rng.standard_normal((16, 1, 64)).astype(np.float32), "sr": np.array(sr, np.int64)}
        got, want = model.run(inputs), reference(inputs)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_binding_read_after_the_if_stays_before_it():
    """What a branch and the code after the If both read is computed once, before the If; a
    binding read by both branches too."""
    from tvm import relax

    from tvmgen.compiler.cpu import branches

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((4,), "float32"), c: R.Tensor((), "bool")) -> R.Tensor((4,), "float32"):  # noqa: N805
            a = R.exp(x)  # only the true branch
            b = R.sin(x)  # both branches
            d = R.cos(x)  # the true branch and after the If
            if c:  # noqa: SIM108 - TVMScript: an If with two branches
                y = R.add(R.add(a, b), d)
            else:
                y = R.multiply(b, b)
            z = R.add(y, d)
            return z

    mod = branches.sink_into_branches(Module)
    relax.analysis.well_formed(mod)
    text = mod["main"].script()
    before_if = text.split("if c:")[0]
    assert "R.exp" not in before_if and "R.sin" in before_if and "R.cos" in before_if, text
    true_branch = text.split("if c:")[1].split("else:")[0]
    assert "R.exp" in true_branch, text
