"""Read a binary's header to say which machine it was built for, before anything loads it."""

from __future__ import annotations

import struct
from pathlib import Path

ELF_MACHINES = {0x03: "x86", 0x28: "arm", 0x3E: "x86_64", 0xB7: "aarch64", 0xF3: "riscv"}
MACHO_CPUS = {0x0100000C: "aarch64", 0x01000007: "x86_64", 0x0000000C: "arm"}


def describe(data: bytes) -> tuple[str, str]:
    """(format, arch) of an object or library from its first bytes: ("elf", "aarch64"), ("macho", "aarch64")."""
    if data[:4] == b"\x7fELF" and len(data) >= 20:
        endian = "<" if data[5] == 1 else ">"
        (machine,) = struct.unpack(endian + "H", data[18:20])
        return "elf", ELF_MACHINES.get(machine, f"elf-machine-{machine:#x}")
    if data[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe") and len(data) >= 8:
        (cpu,) = struct.unpack("<I", data[4:8])
        return "macho", MACHO_CPUS.get(cpu, f"macho-cpu-{cpu:#x}")
    return "unknown", "unknown"


def describe_file(path: Path) -> tuple[str, str]:
    with open(path, "rb") as f:
        return describe(f.read(64))
