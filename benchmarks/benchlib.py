"""What the benchmarks share: the machine description in their JSON, and plain-text tables."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def environment(packages: tuple[str, ...]) -> dict:
    """Python, CPU model and count, and the versions of ``packages``, for a benchmark's JSON."""
    from importlib.metadata import version

    def v(pkg):
        try:
            return version(pkg)
        except Exception:
            return None

    cpu = None
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu,
            "cpu_count": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "packages": {p: v(p) for p in packages}}


def table(header: list[str], body: list[list[str]], right: set[int]) -> str:
    """Aligned columns; the column indexes in ``right`` are right-aligned."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells):
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def opencl_runtime(prefix: Path | None, work: Path, log) -> Path:
    """An installed runtime prefix with libtvmgen_opencl: the one given, else built (cmake) into ``work``."""
    from tvmgen import runtime_build

    if prefix is None:
        log("building the host runtime (cmake) ...")
        prefix = runtime_build.build("host", work / "runtime", jni=False)
    if not (prefix / "lib" / "libtvmgen_opencl.so").is_file():
        raise SystemExit(f"{prefix}/lib has no libtvmgen_opencl.so")
    return prefix
