"""A streaming model benched on an RPC device: its state inputs fed their initial values, and a sequence of
steps run with the state carried on the device (each step's state outputs passed, as the device's own
tensors, to the next step: nothing copied through the host)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tvmgen.core import artifact
from tvmgen.core.latency import Latency


def initial_inputs(manifest: artifact.Manifest, directory: Path) -> dict[str, np.ndarray]:
    """The state inputs by name, at their initial values (the artifact's .npy files, else zeros)."""
    from tvmgen.runtime.state import initial_values

    return {s["input"]: v for s, v in zip(manifest.state, initial_values(manifest, directory))}


def own_outputs(manifest: artifact.Manifest, outputs: list) -> list:
    """The model's own outputs among every output of main (in the manifest's order)."""
    held = manifest.state_outputs
    return [o for s, o in zip(manifest.outputs, outputs) if s.name not in held]


def carried_steps(
    main, args: list, params: list, manifest: artifact.Manifest, dev, steps: list[dict], flatten: Callable, to_device
) -> tuple[list[list[np.ndarray]], list[float]]:
    """``steps`` (own inputs by name) run in order through main on the device from the state in ``args``
    (main's inputs, the state ones at their initial values): each step's own outputs, copied to the host
    after its timing, and each step's time (the call, its RPC round trip included). ``flatten(out)``: the
    call's outputs as a flat list in the manifest's order; ``to_device(array)``: a tensor on the device."""
    position = {s.name: i for i, s in enumerate(manifest.inputs)}
    out_position = {s.name: i for i, s in enumerate(manifest.outputs)}
    args = list(args)
    outputs, step_ms = [], []
    for inputs in steps:
        for name, a in inputs.items():
            args[position[name]] = to_device(a)
        t0 = time.perf_counter()
        out = main(*args, *params)
        dev.sync()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        flat = flatten(out)
        for s in manifest.state:
            held = flat[out_position[s["output"]]]
            args[position[s["input"]]] = held if not hasattr(held, "value") else to_device(held.numpy())
        outputs.append([o.numpy() for o in own_outputs(manifest, flat)])
    return outputs, step_ms


def sequence_record(step_ms: list[float]) -> dict:
    """`bench --json`'s ``sequence``: the steps' times and their statistics."""
    return {
        "steps": len(step_ms),
        "state_carried": True,
        "step_ms": [round(t, 4) for t in step_ms],
        "timed": "each step's call from the host, its RPC round trip included",
        **Latency.from_samples(step_ms).flat(("median", "p90", "max"), "_ms", digits=4),
    }
