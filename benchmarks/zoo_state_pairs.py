"""The zoo's streaming models: built here, and checked as a sequence of steps with the state carried.

``stream_gru`` is an ONNX keyword-spotter-style cell that passes its state explicitly: each step takes one
40-value feature frame ``x`` with the last frames (``frames_in``, a ring buffer) and the GRU state ``h0``, and
returns class scores with the new buffer (``frames_out``) and state (``hn``). Compiled with
``--state h0=hn --state frames_in=frames_out`` the runtime carries both, and the caller gives ``x`` alone.

A stateful artifact (any zoo model whose manifest lists state) is checked over STEPS steps in order from its
initial state: the artifact (HostModel on the host, ``tvmgen-run --sequence`` elsewhere) against the reference
(LiteRT keeps a TFLite model's state itself; onnxruntime is fed the state the step before returned).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np

STEPS = 20
FLAGS = ("--state", "h0=hn", "--state", "frames_in=frames_out")


def state_pairs(flags) -> list[str]:
    """The --state values among a zoo model's `tvmgen compile` flags."""
    return [v for f, v in zip(flags[::2], flags[1::2]) if f == "--state"]


def stream_gru(work: Path) -> Path:
    """The ONNX model (opset 17), weights from torch's seed (set by zoo.build)."""
    import torch
    from torch import nn

    class StreamGru(nn.Module):
        def __init__(self, feat=40, hidden=64, classes=12, context=3):
            super().__init__()
            self.conv = nn.Conv1d(feat, hidden, context)
            self.gates = nn.Linear(2 * hidden, 2 * hidden)
            self.cand_x = nn.Linear(hidden, hidden)
            self.cand_h = nn.Linear(hidden, hidden)
            self.head = nn.Linear(hidden, classes)

        def forward(self, x, frames_in, h0):  # x [1, 40]; frames_in [1, 40, 3]; h0 [1, 64]
            frames = torch.cat([frames_in[:, :, 1:], x.unsqueeze(2)], dim=2)
            f = torch.relu(self.conv(frames)).squeeze(2)
            z, r = torch.sigmoid(self.gates(torch.cat([f, h0], 1))).chunk(2, 1)
            hn = (1 - z) * torch.tanh(self.cand_x(f) + r * self.cand_h(h0)) + z * h0
            return self.head(hn), frames, hn

    path = work / "stream_gru.onnx"
    example = (torch.randn(1, 40), torch.randn(1, 40, 3), torch.randn(1, 64))
    with torch.no_grad():
        torch.onnx.export(
            StreamGru().eval(),
            example,
            str(path),
            input_names=["x", "frames_in", "h0"],
            output_names=["logits", "frames_out", "hn"],
            opset_version=17,
            dynamo=False,
        )
    return path


def reference_stepper(path: Path, manifest, directory: Path, run):
    """The reference ``run`` (zoo.reference_runner's: inputs -> outputs) as one step of a sequence from the
    initial state: own inputs in, own outputs out. LiteRT holds a TFLite model's state between invokes itself;
    an ONNX model is fed, at each step, the state outputs of the step before."""
    if path.suffix == ".tflite":
        return run
    from tvmgen.runtime.state import initial_values

    names = [o.name for o in manifest.outputs]
    own = [o.name for o in manifest.own_outputs]
    held = {s["input"]: v for s, v in zip(manifest.state, initial_values(manifest, directory))}

    def step(inputs):
        outs = dict(zip(names, run({**inputs, **held})))
        held.update({s["input"]: outs[s["output"]] for s in manifest.state})
        return [np.asarray(outs[n]) for n in own]

    return step


def sequence_check(target: str, artifact: Path, path: Path, consts: dict, work: Path, runtimes: dict, reference_runner):
    """(the artifact's outputs, the reference's, the reference's on another sequence), every step's outputs
    in one list each: the zoo's verdict (max error, tolerance, input sensitivity) then covers every step."""
    from tvmgen.core.artifact import load
    from tvmgen.core.model import random_inputs

    manifest = load(artifact)
    steps = [random_inputs(manifest.own_inputs, k) for k in range(STEPS)]
    others = [random_inputs(manifest.own_inputs, 1000 + k) for k in range(STEPS)]
    actual = run_sequence(target, artifact, steps, work, runtimes)
    expected, other = ([], [])
    for seq, into in ((steps, expected), (others, other)):
        step = reference_stepper(path, manifest, artifact, reference_runner(path, consts))  # a fresh state
        into.extend(step(x) for x in seq)
    return _flat(actual), _flat(expected), _flat(other)


def _flat(steps) -> list:
    return [np.asarray(a) for outputs in steps for a in outputs]


def run_sequence(target: str, artifact: Path, steps: list[dict], work: Path, runtimes: dict) -> list[list]:
    """The artifact over ``steps`` from a fresh state: HostModel on the host, else tvmgen-run --sequence."""
    from tvmgen.runtime import sequence

    if target == "host":
        from tvmgen.runtime.runner import HostModel

        model = HostModel(artifact)
        return [model.run(x) for x in steps]
    tmp = Path(tempfile.mkdtemp(dir=work))
    cmd = [str(runtimes[target]), str(artifact), "--sequence", str(sequence.write_sequence(tmp / "steps", steps))]
    cmd += ["-o", str(tmp / "out")]
    if target == "aarch64":
        cmd = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"exit {proc.returncode}")
    from tvmgen.core.artifact import load

    names = [sequence.file_name(o.name) for o in load(artifact).own_outputs]
    return [[np.load(tmp / "out" / sequence.step_name(k) / n) for n in names] for k in range(len(steps))]
