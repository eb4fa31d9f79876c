"""An artifact's kernel table (``kernels.json``, written by compiler/kernels.py at compile time), read:
each kernel's Relax operators, its kind and FLOPs per call, for the profiler, the memory report and
``tvmgen inspect``. Kernels of artifacts without a table are named by what TVM calls them."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

FILE = "kernels.json"
KINDS = ("conv2d", "depthwise", "matmul", "recurrent", "elementwise", "copies/layout", "other")
# Block names (TOPI's compute names) that say what a kernel does, strongest first.
_BLOCK_KINDS = (
    ("depthwise", ("depthwise", "group_conv")),
    ("conv2d", ("conv",)),
    ("matmul", ("matmul", "dense", "T_matmul_NT", "batch_matmul", "int8_dot")),
    ("recurrent", ("recurrence",)),
)  # compiler/recurrent.py's LSTM / GRU kernels
_LAYOUT_OPS = {
    "transpose",
    "reshape",
    "layout_transform",
    "concat",
    "split",
    "strided_slice",
    "squeeze",
    "expand_dims",
    "broadcast_to",
    "flatten",
    "take",
    "gather",
    "copy",
    "pad",
    "tile",
    "repeat",
}
# tvmgen's own functions, named like operators: the 8-bit dot-product core and the folded
# requantisation (compiler.int8, compiler.requantize)
_TVMGEN_OPS = {"int8_dot", "requantize"}
_REDUCTION_OPS = {
    "mean",
    "sum",
    "max",
    "min",
    "softmax",
    "log_softmax",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "argmax",
    "argmin",
    "layer_norm",
    "prod",
    "variance",
    "std",
}


def load(directory: Path) -> dict | None:
    """The artifact's kernel table, or None for artifacts compiled before tvmgen recorded one."""
    path = Path(directory) / FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _known_ops() -> set[str]:
    import tvm

    return {n.rsplit(".", 1)[-1] for n in tvm.ir.Op.list_op_names() if n.startswith("relax.")}


_KNOWN: set[str] | None = None


def relax_ops(kernel: str) -> list[str]:
    """The Relax operators a fused kernel's name lists: ``fused_conv2d14_add7_maximum7_prepacked``
    -> conv2d, add, maximum (TVM names a fused function after its operators, each numbered)."""
    global _KNOWN
    if _KNOWN is None:
        _KNOWN = _known_ops()
    base = re.sub(r"_kernel\d*$", "", kernel)  # a GPU kernel of the function
    base = re.sub(r"^fused_", "", base)
    tokens = [t for t in base.split("_") if t]
    ops, i = [], 0
    while i < len(tokens):
        for j in range(len(tokens), i, -1):  # the longest run of tokens naming a known operator
            cand = re.sub(r"\d+$", "", "_".join(tokens[i:j]))
            if cand in _KNOWN or cand in _LAYOUT_OPS | _REDUCTION_OPS | _TVMGEN_OPS:
                ops.append(cand)
                i = j
                break
        else:  # a word that is no operator (tvmgen's "prepacked", "weight"...): skipped
            i += 1
    return ops or [re.sub(r"\d+$", "", base)]


def kernel_kind(ops: list[str], blocks: Sequence[str] = (), flops: float | None = None) -> str:
    """One of KINDS, from the kernel's compute blocks (TOPI names them) and its operators."""
    text = " ".join(blocks).lower()
    for kind, words in _BLOCK_KINDS:
        if any(w.lower() in text for w in words):
            return kind
    if any(o.startswith("conv") for o in ops):
        return "conv2d"
    if any(o in ("matmul", "dense", "linear") for o in ops):
        return "matmul"
    if ops and all(o in _LAYOUT_OPS for o in ops):
        return "copies/layout"
    if any(o in _REDUCTION_OPS for o in ops):
        return "other"
    if flops == 0:
        return "copies/layout"
    return "elementwise"


def kind_of(name: str, table: dict | None) -> tuple[list[str], str, float | None]:
    """(ops, kind, FLOPs per call) of a kernel by name: from the table when recorded, else its name."""
    for k in (table or {}).get("kernels", []):
        if k["name"] == name:
            return k["ops"], k["kind"], k["flops"]
    ops = relax_ops(name)
    return ops, kernel_kind(ops), None
