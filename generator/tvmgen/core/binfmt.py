"""Read a binary's headers: which machine it was built for (before anything loads it), and whether its
LOAD segments, and its place inside an APK or AAR, suit Android's 16 KB pages."""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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


# ------------------------------------------------------------------ page sizes (Android 15's 16 KB pages)

# Google Play asks every 64-bit native library to run on 16 KB-page phones (Android 15+): each LOAD
# segment must be aligned to at least 16 KB (p_align), and an uncompressed library inside an APK must
# start at a 16 KB boundary of the file so that it can be mapped from the APK in place.
ANDROID_PAGE_SIZE = 16384
PT_LOAD = 1


@dataclass(frozen=True)
class LoadSegment:
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    flags: str  # "R E", "RW ", as readelf prints them
    align: int


@dataclass(frozen=True)
class PageReport:
    """Whether one ELF library is ready for ``page_size``-byte pages: every LOAD segment's p_align."""

    name: str
    arch: str
    segments: tuple[LoadSegment, ...]
    page_size: int = ANDROID_PAGE_SIZE
    zip_offset: int | None = None  # where the library's bytes start inside an APK/AAR (stored entries)
    compressed: bool = False  # a compressed entry is extracted at install time: its offset does not matter

    @property
    def min_align(self) -> int:
        return min((s.align for s in self.segments), default=0)

    @property
    def ok(self) -> bool:
        aligned = bool(self.segments) and self.min_align >= self.page_size
        placed = self.compressed or self.zip_offset is None or self.zip_offset % self.page_size == 0
        return aligned and placed

    def problem(self) -> str:
        """Empty when ok; else what is wrong, in words."""
        if self.ok:
            return ""
        parts = []
        if not self.segments:
            parts.append("no LOAD segments (not a shared library?)")
        elif self.min_align < self.page_size:
            parts.append(
                f"LOAD segments aligned to {self.min_align} bytes ({self.min_align // 1024} KB), "
                f"need {self.page_size} ({self.page_size // 1024} KB)"
            )
        if not self.compressed and self.zip_offset is not None and self.zip_offset % self.page_size:
            parts.append(f"stored at offset {self.zip_offset} of the archive, not a multiple of {self.page_size}")
        return "; ".join(parts)

    def summary(self) -> str:
        aligns = ", ".join(sorted({f"{s.align:#x}" for s in self.segments})) or "none"
        where = (
            ""
            if self.zip_offset is None
            else ("  compressed in the archive" if self.compressed else f"  at archive offset {self.zip_offset}")
        )
        state = "16 KB-ready" if self.ok and self.page_size == ANDROID_PAGE_SIZE else ("ok" if self.ok else "NOT ready")
        return f"{self.name} ({self.arch}): p_align {aligns}{where}: {state}" + (
            f": {self.problem()}" if not self.ok else ""
        )


def _program_headers(head: bytes) -> tuple[bool, str, int, int, int]:
    """(64-bit, byte order, e_phoff, e_phentsize, e_phnum) from an ELF header."""
    is64, endian = head[4] == 2, "<" if head[5] == 1 else ">"
    phoff = struct.unpack_from(endian + ("Q" if is64 else "I"), head, 32 if is64 else 28)[0]
    phentsize, phnum = struct.unpack_from(endian + "HH", head, 54 if is64 else 42)
    return is64, endian, phoff, phentsize, phnum


def load_segments(data: bytes) -> list[LoadSegment]:
    """The PT_LOAD program headers of an ELF file (32- or 64-bit, either byte order)."""
    if data[:4] != b"\x7fELF" or len(data) < 52:
        raise ValueError("not an ELF file")
    is64, endian, phoff, phentsize, phnum = _program_headers(data)
    segments = []
    for i in range(phnum):
        at = phoff + i * phentsize
        if is64:
            p_type, p_flags, off, vaddr, _paddr, filesz, memsz, align = struct.unpack_from(
                endian + "IIQQQQQQ", data, at
            )
        else:
            p_type, off, vaddr, _paddr, filesz, memsz, p_flags, align = struct.unpack_from(
                endian + "IIIIIIII", data, at
            )
        if p_type == PT_LOAD:
            flags = ("R" if p_flags & 4 else " ") + ("W" if p_flags & 2 else " ") + ("E" if p_flags & 1 else " ")
            segments.append(LoadSegment(off, vaddr, filesz, memsz, flags, align))
    return segments


def _elf_head(f: IO[bytes]) -> bytes:
    """The ELF header and program headers of an open file (they sit at its start in every linker's output)."""
    head = f.read(64)
    if head[:4] != b"\x7fELF" or len(head) < 52:
        return head
    _, _, phoff, phentsize, phnum = _program_headers(head)
    return head + f.read(max(0, phoff + phentsize * phnum - len(head)))


def page_report(path: Path, page_size: int = ANDROID_PAGE_SIZE) -> PageReport:
    """The program headers of the ELF library at ``path``, checked against ``page_size``."""
    with open(path, "rb") as f:
        data = _elf_head(f)
    return PageReport(Path(path).name, describe(data)[1], tuple(load_segments(data)), page_size)


def zip_data_offsets(path: Path) -> list[tuple[zipfile.ZipInfo, int]]:
    """Each entry of a zip (APK, AAR) with the file offset its bytes start at: after the local header
    (30 bytes + name + extra), whose extra field can differ from the central directory's."""
    out = []
    with zipfile.ZipFile(path) as z, open(path, "rb") as raw:
        for info in z.infolist():
            raw.seek(info.header_offset)
            name_len, extra_len = struct.unpack_from("<HH", raw.read(30), 26)
            out.append((info, info.header_offset + 30 + name_len + extra_len))
    return out


def zip_aligned(path: Path, align: int = 4, page_size: int = ANDROID_PAGE_SIZE) -> bool:
    """What zipalign makes of an APK: stored entries start at multiples of ``align``, stored .so files
    at multiples of ``page_size``."""
    return all(
        offset % (page_size if info.filename.endswith(".so") else align) == 0
        for info, offset in zip_data_offsets(path)
        if info.compress_type == zipfile.ZIP_STORED and not info.is_dir()
    )


def archive_page_reports(path: Path, page_size: int = ANDROID_PAGE_SIZE) -> list[PageReport]:
    """Every ``.so`` inside an APK or AAR: its LOAD alignment and, for a stored (uncompressed) entry,
    where its bytes start in the file (the offset Android maps it from)."""
    reports = []
    with zipfile.ZipFile(path) as z:
        for info, data_offset in zip_data_offsets(path):
            if not info.filename.endswith(".so") or info.is_dir():
                continue
            with z.open(info) as member:
                head = _elf_head(member)
            try:
                segments = tuple(load_segments(head))
            except ValueError:
                segments = ()
            reports.append(
                PageReport(
                    info.filename,
                    describe(head)[1],
                    segments,
                    page_size,
                    zip_offset=data_offset,
                    compressed=info.compress_type != zipfile.ZIP_STORED,
                )
            )
    return reports
