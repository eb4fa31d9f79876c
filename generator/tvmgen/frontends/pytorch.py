"""PyTorch frontend: a saved torch.export program (.pt2) through TVM's from_exported_program."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tvmgen.core.errors import ModelError, ToolMissingError
from tvmgen.core.model import ImportedModel
from tvmgen.frontends.base import InputOverride, failing_locals, importer_failed, resolve_inputs


def load(path: Path, overrides: list[InputOverride], **_) -> ImportedModel:
    try:
        import torch
    except ImportError as e:
        raise ToolMissingError(
            "PyTorch models need the torch extra (torch is not installed)", "pip install 'tvmgen[torch]'"
        ) from e
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from tvmgen.core.log import to_file_only

    to_file_only("torch", "torch.export")  # torch.export.load logs a traceback before raising on a bad file
    import logging
    import zipfile

    logging.getLogger("torch.export").setLevel(logging.ERROR)
    if not zipfile.is_zipfile(path):  # a .pt2 is a zip archive
        raise ModelError(
            f"{path} is not a torch.export program (.pt2 files are zip archives; this one is not)",
            "save it with torch.export.save(torch.export.export(model, example_inputs), 'model.pt2')",
        )

    try:
        ep = torch.export.load(str(path))
    except Exception as e:
        raise ModelError(
            f"{path} is not a readable torch.export program ({type(e).__name__}: {str(e)[:200]})",
            "save it with torch.export.save(torch.export.export(model, example_inputs), 'model.pt2')",
        ) from e

    user_inputs = list(ep.graph_signature.user_inputs)
    metas = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    raw = []
    for name in user_inputs:
        val = metas.get(name)
        if val is None or not hasattr(val, "shape"):
            raise ModelError(
                f"input {name!r} of {path.name} is not a tensor", "export the model with tensor inputs only"
            )
        dims = [int(d) if isinstance(d, int) else None for d in val.shape]
        raw.append((name, dims, str(val.dtype).replace("torch.", "")))
    specs = resolve_inputs(raw, overrides)

    try:
        mod = from_exported_program(ep, keep_params_as_input=True)
    except Exception as e:
        raise importer_failed(
            "PyTorch",
            path.name + _failing_node(e),
            e,
            "the program uses an operator TVM 0.27 cannot import; export to ONNX and try that path",
        ) from e
    mod, detached = relax.frontend.detach_params(mod)
    mod = bind_symbolic_shapes(mod, specs)
    output_names = [str(n) for n in ep.graph_signature.user_outputs]

    def reference(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = ep.module()(*[torch.from_numpy(inputs[s.name]) for s in specs])
        flat = out if isinstance(out, (tuple, list)) else [out]
        return [o.detach().numpy() for o in flat]

    return ImportedModel(
        mod=mod,
        params=list(detached.get("main", [])),
        inputs=specs,
        output_names=output_names,
        format="pytorch",
        reference_name=f"PyTorch {torch.__version__}",
        reference=reference,
    )


def bind_symbolic_shapes(mod, specs):
    """Replace dynamic dimensions (torch.export Dims) with the sizes from --input."""
    import tvm

    main = mod["main"]
    binding = {}
    for param, spec in zip(main.params, specs):
        shape = getattr(param.ty, "shape", None)
        for dim, size in zip(getattr(shape, "values", []) or [], spec.shape):
            if isinstance(dim, tvm.tirx.Var):
                binding[dim] = size
    if not binding:
        return mod
    mod["main"] = main.bind_symbolic_vars(binding)
    return mod


def _failing_node(e: Exception) -> str:
    """ " at node NAME (TARGET; inputs: a float32[1x3], ...)": the FX node TVM's importer was converting
    when it raised, read from the frame of its node loop in the traceback; "" when it cannot be found."""
    node = failing_locals(e, "_translate_fx_graph").get("node")
    if node is None:
        return ""
    target = getattr(node.target, "__name__", str(node.target))
    inputs = []
    for arg in node.all_input_nodes:
        val = arg.meta.get("val")
        shape = "x".join(str(d) for d in getattr(val, "shape", ())) or "scalar"
        inputs.append(f"{arg.name} {str(getattr(val, 'dtype', '?')).replace('torch.', '')}[{shape}]")
    return f" at node {node.name} ({target}; inputs: {', '.join(inputs) or 'none'})"
