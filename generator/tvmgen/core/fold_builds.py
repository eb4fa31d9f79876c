"""One LLVM build per distinct function for TVM's constant folding.

Relax's ``FoldConstant`` evaluates a ``call_tir`` whose arguments are all constants by building its TIR
function for the host (the global ``tirx.build``) and running it. Each FoldConstant pass keeps its own
cache, keyed by the function object, and a model's compile runs that pass six times or more (layout
conversion, legalization, the weights' packing, the target's pipeline), on functions that are often the
same TIR under another name (every 3x3 convolution's weight transform of one shape). So a MobileNet's
compile built 170 functions to fold 48 distinct ones: a third of its build time spent in LLVM on code
already built.

:func:`install` puts a caching ``tirx.build`` in its place, keyed by the function's structure and the
target: the same module serves every fold of the same function in this process. What it returns is what
TVM's own build returns for that function, so the folded constants are the same bits. Only calls made the
way the folder makes them (a TIR function and a target) are cached; anything else goes straight to TVM.
Failures are not cached (the folder skips a function it cannot build, and an interrupt must surface).
The folder is the only caller of the global ``tirx.build``, so its builds are made unoptimised.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

LIMIT = 512  # modules kept (least recently used dropped): a few KB of machine code each
_lock = threading.Lock()
_cache: OrderedDict = OrderedDict()
_installed: list = []  # TVM's build, once installed
stats = {"built": 0, "reused": 0}


def install() -> None:
    """Replace the global ``tirx.build`` with the caching one (once per process; idempotent)."""
    with _lock:
        if _installed:
            return
        import importlib

        import tvm

        tvm_build = importlib.import_module("tvm.tirx.build").build  # the module, not the function it exports
        _installed.append(tvm_build)
        tvm.register_global_func("tirx.build", _cached_build, override=True)


def _cached_build(func, target=None, *rest):
    from tvm import tirx

    tvm_build = _installed[0]
    if rest or target is None or not isinstance(func, tirx.PrimFunc):
        return tvm_build(func, target, *rest)
    import tvm_ffi

    key = (tvm_ffi.structural_hash(func), str(target))
    with _lock:
        hits = _cache.get(key, ())
        for known, module in hits:
            if tvm_ffi.structural_equal(known, func):
                _cache.move_to_end(key)
                stats["reused"] += 1
                return module
    module = tvm_build(func, _unoptimised(target))
    with _lock:
        _cache.setdefault(key, []).append((func, module))
        _cache.move_to_end(key)
        while len(_cache) > LIMIT:
            _cache.popitem(last=False)
        stats["built"] += 1
    return module


def _unoptimised(target):
    """The folder's target without LLVM's optimisations: a folded function runs once, on constants, so
    the time LLVM spends optimising it is never won back (about a tenth of a MobileNet compile's CPU).
    The folded values come from the same TIR in float32; at most a multiply and an add that optimised code
    would fuse are rounded separately (the built-in MobileNet's library is byte for byte the same)."""
    from tvm.target import Target

    if target.kind.name != "llvm":
        return target
    return Target({**target.export(), "opt-level": 0})
