"""Where the memory and the bytes go: what an artifact needs, and what a run took.

- :func:`footprint`: the artifact's weight bytes, code bytes and the VM's planned workspace
  (the ``alloc_storage`` sizes of ``main``, recorded at compile time in ``kernels.json``);
- :func:`size_report`: what makes the library big, weights by tensor and code by kernel (the
  library's own ELF symbol table);
- :class:`ResidentMemory`: the process's resident memory from the kernel (``VmRSS`` and its peak
  ``VmHWM`` in /proc/self/status, on Linux and Android), read before load, after load and at the end,
  as LiteRT's benchmark reports its init and overall peaks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tvmgen.core import kernel_table

MB = 1024 * 1024


# ------------------------------------------------------------------ the process, measured


def proc_status(path: str = "/proc/self/status") -> dict[str, int]:
    """VmRSS and VmHWM in bytes ({} where /proc does not exist, e.g. macOS)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024  # the kernel writes kB
    except OSError:
        return {}
    return out


@dataclass
class ResidentMemory:
    """Resident memory at three moments; peaks are the kernel's high-water mark (VmHWM)."""

    before_load: int = 0  # VmRSS before the model is loaded
    after_load_peak: int = 0  # VmHWM once the model is loaded and the VM initialised
    overall_peak: int = 0  # VmHWM after the runs

    def mark_before_load(self) -> None:
        self.before_load = proc_status().get("VmRSS", 0)

    def mark_loaded(self) -> None:
        self.after_load_peak = proc_status().get("VmHWM", 0)

    def mark_end(self) -> None:
        self.overall_peak = proc_status().get("VmHWM", 0)

    def to_json(self) -> dict:
        return {
            "source": "/proc/self/status",
            "before_load_bytes": self.before_load,
            "after_load_peak_bytes": self.after_load_peak,
            "overall_peak_bytes": self.overall_peak,
            "model_after_load_bytes": max(0, self.after_load_peak - self.before_load),
            "model_overall_bytes": max(0, self.overall_peak - self.before_load),
        }

    def line(self) -> str:
        if not self.overall_peak:
            return "peak memory: not available here (no /proc/self/status)"
        return (
            f"peak resident memory (VmHWM): after load {self.after_load_peak / MB:.1f} MB, overall "
            f"{self.overall_peak / MB:.1f} MB (the model added {(self.after_load_peak - self.before_load) / MB:.1f}"
            f" and {(self.overall_peak - self.before_load) / MB:.1f} MB to the {self.before_load / MB:.1f} MB "
            "resident before loading)"
        )


# ------------------------------------------------------------------ the artifact, from its files


def footprint(directory: Path, manifest) -> dict:
    """Weights, code and planned workspace of an artifact, in bytes (None where not recorded)."""
    directory = Path(directory)
    table = kernel_table.load(directory)
    lib = directory / manifest.export["library"]
    elf = read_elf(lib) if lib.is_file() else None
    code = elf.code_bytes() if elf else None
    if manifest.params:
        weights, where = manifest.files.get(manifest.params["file"], {}).get("bytes"), manifest.params["file"]
    else:
        weights = sum(c["bytes"] for c in table["constants"]) if table else None
        where = "inside the library"
    plan = (table or {}).get("memory_plan")
    return {
        "library_bytes": lib.stat().st_size if lib.is_file() else None,
        "code_bytes": code,
        "weights_bytes": weights,
        "weights_in": where,
        "embedded_blob_bytes": elf.symbol_size("__tvm_ffi__library_bin") if elf else None,
        "planned_workspace_bytes": plan["bytes"] if plan else None,
        "planned_storages": len(plan["storages"]) if plan else None,
        "source_weights": (table or {}).get("source_weights"),
    }


def folded_growth(table: dict | None, weights_bytes: int | None) -> dict | None:
    """How much bigger the compiled weights are than the model file (TVM folds fp16 weights to fp32:
    the importer's casts, TFLite's ``DEQUANTIZE``); None when the file's size was not recorded."""
    src = (table or {}).get("source_weights") or {}
    if not weights_bytes or not src.get("model_file_bytes"):
        return None
    return {
        "model_file_bytes": src["model_file_bytes"],
        "compiled_bytes": weights_bytes,
        "imported_by_dtype": src.get("by_dtype", {}),
        "ratio": weights_bytes / src["model_file_bytes"],
    }


def size_report(directory: Path, manifest, top: int = 15) -> dict:
    """Weights by tensor (constants in the library, or the detached params) and code by kernel."""
    directory = Path(directory)
    table = kernel_table.load(directory)
    weights = []
    if manifest.params:
        import tvm

        loaded = tvm.runtime.load_param_dict((directory / manifest.params["file"]).read_bytes())
        for name in manifest.params["names"]:
            a = loaded[name]
            weights.append(
                {"name": name, "shape": list(a.shape), "dtype": str(a.dtype), "bytes": int(a.numpy().nbytes)}
            )
    elif table:
        weights = [
            {"name": f"{c['kernel']} arg {c['arg']}", "shape": c["shape"], "dtype": c["dtype"], "bytes": c["bytes"]}
            for c in table["constants"]
        ]
    weights.sort(key=lambda w: -w["bytes"])
    lib = directory / manifest.export["library"]
    elf = read_elf(lib) if lib.is_file() else None
    code = elf.code_by_function() if elf else {}  # as footprint: no breakdown for a library that is not ELF
    by_kernel: dict[str, int] = {}
    for sym, size in code.items():
        by_kernel[kernel_of_symbol(sym)] = by_kernel.get(kernel_of_symbol(sym), 0) + size
    kernels = [{"kernel": k, "bytes": v} for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])]
    return {
        "weights": weights,
        "weights_total": sum(w["bytes"] for w in weights),
        "code": kernels,
        "code_total": sum(k["bytes"] for k in kernels),
        "recorded": table is not None,
    }


def kernel_of_symbol(sym: str) -> str:
    """The kernel a code symbol belongs to: ``__tvm_ffi_NAME`` (its entry) and ``NAME_compute_`` (its body)."""
    if sym.startswith("__tvm_ffi_"):
        return sym[len("__tvm_ffi_") :]
    for tail in ("_compute_",):
        if tail in sym:
            return sym[: sym.index(tail)]
    return sym


# ------------------------------------------------------------------ ELF: sections and symbols


@dataclass
class Elf:
    sections: dict[str, tuple[int, int, int]]  # name -> (address, size, flags)
    symbols: list[tuple[str, int, int, int]]  # (name, address, size, type)

    def code_bytes(self) -> int:
        """Bytes of executable sections (.text and the like)."""
        return sum(size for _, size, flags in self.sections.values() if flags & 0x4)

    def symbol_size(self, name: str) -> int | None:
        return next((size for n, _, size, _ in self.symbols if n == name), None)

    def code_by_function(self) -> dict[str, int]:
        """Each function symbol's bytes up to the next symbol in its section: code the compiler left
        without a symbol (parallel bodies, constants pools) counts for the function before it."""
        text = [(a, a + s) for a, s, f in self.sections.values() if f & 0x4]
        funcs = sorted((addr, name) for name, addr, _, typ in self.symbols if typ == 2 and addr)
        out: dict[str, int] = {}
        for i, (addr, name) in enumerate(funcs):
            section_end = next((end for start, end in text if start <= addr < end), addr)
            end = min(funcs[i + 1][0], section_end) if i + 1 < len(funcs) else section_end
            out[name] = out.get(name, 0) + max(0, end - addr)
        return out


def read_elf(path: Path) -> Elf | None:
    """Section sizes and the symbol table of an ELF file (None for other formats)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF":
        return None
    is64, e = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(e + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x3A)
    else:
        (shoff,) = struct.unpack_from(e + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x2E)
    raw = []
    for i in range(shnum):
        off = shoff + i * shentsize
        if is64:
            name, typ, flags, addr, offset, size, link, _, _, entsize = struct.unpack_from(e + "IIQQQQIIQQ", data, off)
        else:
            name, typ, flags, addr, offset, size, link, _, _, entsize = struct.unpack_from(e + "IIIIIIIIII", data, off)
        raw.append((name, typ, flags, addr, offset, size, link, entsize))
    strtab = raw[shstrndx][4] if shstrndx < len(raw) else 0

    def cstr(base: int, at: int) -> str:
        end = data.index(b"\0", base + at)
        return data[base + at : end].decode(errors="replace")

    sections, symbols = {}, []
    for name, typ, flags, addr, offset, size, link, entsize in raw:
        if typ != 0:
            sections[cstr(strtab, name)] = (addr, size if typ != 8 else 0, flags)
        if typ == 2 and entsize:  # SHT_SYMTAB (the full table; .dynsym holds only the exported part)
            names_at = raw[link][4]
            for j in range(size // entsize):
                o = offset + j * entsize
                if is64:
                    st_name, st_info, _, _, value, sz = struct.unpack_from(e + "IBBHQQ", data, o)
                else:
                    st_name, value, sz, st_info, _, _ = struct.unpack_from(e + "IIIBBH", data, o)
                if st_name:
                    symbols.append((cstr(names_at, st_name), value, sz, st_info & 0xF))
    return Elf(sections, symbols)
