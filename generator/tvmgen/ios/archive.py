"""The model's static library for an iOS app, written in Python on any OS.

An iOS artifact holds arm64 Mach-O objects (`model.tar`, TVM system-lib mode). Xcode links a
static library; making one usually takes `xcrun libtool -static`, which exists only on a Mac.
The format is simple and fixed, so tvmgen writes it itself: a BSD `ar` archive whose first
member is the `__.SYMDEF SORTED` table of contents (the external symbols each object defines,
read from its Mach-O symbol table), with long names and 8-byte aligned members, as libtool
writes them. Dates are 0, so the same objects always give the same bytes.
"""

from __future__ import annotations

import struct
import tarfile
from pathlib import Path

from tvmgen.core.errors import InputError

MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPE_ARM64 = 0x0100000C
LC_SYMTAB = 0x2
N_STAB, N_TYPE, N_EXT, N_UNDF = 0xE0, 0x0E, 0x01, 0x0
SYMDEF = b"__.SYMDEF SORTED"


def macho_header(data: bytes) -> tuple[int, int]:
    """(magic, cputype) of a 64-bit little-endian Mach-O object."""
    if len(data) < 32:
        return 0, 0
    magic, cputype = struct.unpack_from("<II", data, 0)
    return magic, cputype


def defined_symbols(data: bytes) -> list[str]:
    """The external symbols a 64-bit Mach-O object defines (from LC_SYMTAB), in table order."""
    magic, _ = macho_header(data)
    if magic != MH_MAGIC_64:
        raise InputError(
            f"not a 64-bit Mach-O object (magic {magic:#x})",
            "the iOS model archive is made from an ios-arm64 artifact's objects",
        )
    (ncmds,) = struct.unpack_from("<I", data, 16)
    offset, names = 32, []
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, offset)
        if cmd == LC_SYMTAB:
            symoff, nsyms, stroff, _strsize = struct.unpack_from("<IIII", data, offset + 8)
            for i in range(nsyms):
                strx, ntype, _sect, _desc, _value = struct.unpack_from("<IBBHQ", data, symoff + 16 * i)
                if ntype & N_STAB or not ntype & N_EXT or (ntype & N_TYPE) == N_UNDF:
                    continue
                end = data.index(b"\0", stroff + strx)
                names.append(data[stroff + strx : end].decode())
        offset += size
    return names


def _header(name: bytes, size: int) -> bytes:
    return b"%-16s%-12d%-6d%-6d%-8s%-10d`\n" % (name, 0, 0, 0, b"100644", size)


def _member(name: str, data: bytes, offset: int) -> bytes:
    """A BSD long-name member starting at ``offset``: the name padded so the data starts 8-aligned."""
    raw = name.encode()
    pad = (-(offset + 60 + len(raw))) % 8
    raw += b"\0" * pad
    data += b"\0" * ((-len(data)) % 8)
    return _header(b"#1/%d" % len(raw), len(raw) + len(data)) + raw + data


def write_static_library(objects: list[tuple[str, bytes]], path: Path) -> list[str]:
    """Write ``objects`` ([(file name, Mach-O bytes)]) as a static library; returns the symbols indexed."""
    objects = sorted(objects)
    symbols = [(sym, i) for i, (_, data) in enumerate(objects) for sym in defined_symbols(data)]
    symbols.sort()
    strtab = b"".join(s.encode() + b"\0" for s, _ in symbols)
    strtab += b"\0" * ((-len(strtab)) % 8)
    toc_size = 4 + 8 * len(symbols) + 4 + len(strtab)
    # The table of contents comes first; its size is known before the offsets it lists.
    toc_member = len(_member(SYMDEF.decode(), b"\0" * toc_size, 8))
    offsets, pos = [], 8 + toc_member
    members = []
    for name, data in objects:
        offsets.append(pos)
        m = _member(name, data, pos)
        members.append(m)
        pos += len(m)
    strx, entries = 0, b""
    for sym, i in symbols:
        entries += struct.pack("<II", strx, offsets[i])
        strx += len(sym) + 1
    toc = struct.pack("<I", 8 * len(symbols)) + entries + struct.pack("<I", len(strtab)) + strtab
    blob = b"!<arch>\n" + _member(SYMDEF.decode(), toc, 8) + b"".join(members)
    path.write_bytes(blob)
    return [s for s, _ in symbols]


def objects_from_tar(tar_path: Path) -> list[tuple[str, bytes]]:
    """The object files of an artifact's ``model.tar``, checked to be arm64 Mach-O."""
    out = []
    with tarfile.open(tar_path) as t:
        for member in t.getmembers():
            if not member.isfile() or not member.name.endswith(".o"):
                continue
            fileobj = t.extractfile(member)
            assert fileobj is not None  # a regular file (checked above) always has its data
            data = fileobj.read()
            if macho_header(data) != (MH_MAGIC_64, CPU_TYPE_ARM64):
                raise InputError(
                    f"{tar_path}: {member.name} is not an arm64 Mach-O object",
                    "compile the model with --platform ios-arm64",
                )
            out.append((Path(member.name).name, data))
    if not out:
        raise InputError(f"{tar_path} holds no object files", "compile the model again with --platform ios-arm64")
    return out


def read_static_library(path: Path) -> tuple[list[tuple[str, int]], dict[int, tuple[str, bytes]]]:
    """A BSD static library's table of contents [(symbol, member offset)] and its members {offset: (name, data)}."""
    blob = Path(path).read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise InputError(f"{path} is not a static library (no !<arch> header)", "make it again")
    pos, toc, members = 8, [], {}
    while pos + 60 <= len(blob):
        header = blob[pos : pos + 60]
        name, size = header[:16].rstrip(b" "), int(header[48:58])
        data = blob[pos + 60 : pos + 60 + size]
        if name.startswith(b"#1/"):
            n = int(name[3:])
            name, data = data[:n].rstrip(b"\0"), data[n:]
        if name.startswith(b"__.SYMDEF"):
            count = struct.unpack_from("<I", data, 0)[0] // 8
            strtab = data[8 + 8 * count :]
            for i in range(count):
                strx, off = struct.unpack_from("<II", data, 4 + 8 * i)
                toc.append((strtab[strx : strtab.index(b"\0", strx)].decode(), off))
        else:
            members[pos] = (name.decode(), data)
        pos += 60 + size + (size & 1)
    return toc, members


def archive_symbols(path: Path) -> list[str]:
    return sorted(sym for sym, _ in read_static_library(path)[0])
