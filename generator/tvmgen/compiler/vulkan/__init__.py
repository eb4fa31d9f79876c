"""``--device vulkan``: tvmgen's own Vulkan code generator for the pip-installed TVM.

TVM 0.27's wheel is built without Vulkan (no ``target.build.vulkan``, no Vulkan runtime), and no registry
serves TVM's source. tvmgen therefore registers ``target.build.vulkan`` itself, the function TVM's
``codegen::Build`` looks up for a ``{"kind": "vulkan"}`` target once its GPU passes have run: each
lowered kernel is printed as a GLSL compute shader (``compiler.glsl``) and compiled to SPIR-V 1.0
(Vulkan 1.0) by glslang's ``glslangValidator`` (Debian ``glslang-tools``).

The kernels reach the model library as a TVM module of kind ``vulkan`` (loaded at run time by tvmgen's
runtime, ``libtvmgen_vulkan``: ``ffi.Module.load_from_bytes.vulkan``). TVM's Python API cannot create a
module of a new kind, so the code generator returns a placeholder module (a ``const_loader`` holding the
payload) and the export replaces it in the packed import tree with a ``vulkan`` entry holding the same
payload (``pack_imports``, TVM's ``fpack_imports`` hook of ``export_library``).

Payload (little-endian; str = u64 length + bytes):
  ``TVMGENVK`` u64 total_length u32 version u32 kernels, then per kernel: str name, u32 args,
  args x (u8 code, u8 bits, u16 lanes), u32 tags, tags x str, u32 workgroup[3], u32 buffers,
  u32 push_constant_bytes, str spirv, str glsl.
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tvmgen.compiler.vulkan import glsl
from tvmgen.core import toolchains
from tvmgen.core.errors import CompileError

log = logging.getLogger("tvmgen.compiler")

MAGIC = b"TVMGENVK"
VERSION = 1
PLACEHOLDER_KEY = "__tvmgen_vulkan_payload"
TARGET_ENV = "vulkan1.0"
DTYPE_CODES = {"int": 0, "uint": 1, "float": 2, "bool": 6}


def optimizer_flags() -> list[str]:
    """glslang's ``-Os``: its SPIR-V optimizer (SPIRV-Tools: inlining of the helper functions, local
    variables and constant-indexed local arrays to SSA values, dead code and common subexpressions
    removed) before the driver sees the kernel; glslang runs none for GLSL without it.
    ``TVMGEN_GLSLANG_OPT=0`` leaves it out (glslang's plain output)."""
    return [] if os.environ.get("TVMGEN_GLSLANG_OPT", "1") == "0" else ["-Os"]


def compile_glsl(kernels: list[glsl.Kernel]) -> list[bytes]:
    """SPIR-V of each kernel (glslangValidator, in parallel, optimized: ``optimizer_flags``); a
    CompileError names the kernel and shows glslang's message."""
    tool = toolchains.Glslang()
    tool.verify()  # once, before the threads: a missing glslang is one ToolMissingError naming the fix
    opt = optimizer_flags()
    with tempfile.TemporaryDirectory(prefix="tvmgen-glsl-") as tmp:

        def one(i_k):
            i, k = i_k
            src, out = Path(tmp) / f"k{i}.comp", Path(tmp) / f"k{i}.spv"
            src.write_text(k.source)
            r = tool.run("-V", "--target-env", TARGET_ENV, *opt, "-S", "comp", "-o", out, src, check=False)
            if r.returncode != 0:
                raise CompileError(
                    f"glslang rejected tvmgen's GLSL for kernel {k.name}: "
                    + " ".join((r.stdout + r.stderr).split())[:600],
                    "this is a bug in tvmgen's Vulkan code generator: report it with the log file (-vv has the shader)",
                )
            return out.read_bytes()

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            return list(pool.map(one, enumerate(kernels)))


def _str(b: bytes | str) -> bytes:
    data = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(data)) + data


def _dtype_bytes(t: str) -> bytes:
    if t == "handle":
        return struct.pack("<BBH", 3, 64, 1)
    if t == "bool":
        return struct.pack("<BBH", 6, 8, 1)
    for prefix in ("uint", "int", "float"):
        if t.startswith(prefix):
            return struct.pack("<BBH", DTYPE_CODES[prefix], int(t[len(prefix) :]), 1)
    raise CompileError(f"tvmgen's Vulkan code generator: unknown argument type {t}")


def payload(kernels: list[glsl.Kernel], spirv: list[bytes]) -> bytes:
    body = struct.pack("<II", VERSION, len(kernels))
    for k, code in zip(kernels, spirv):
        body += _str(k.name) + struct.pack("<I", len(k.arg_types))
        body += b"".join(_dtype_bytes(t) for t in k.arg_types)
        body += struct.pack("<I", len(k.launch_tags)) + b"".join(_str(t) for t in k.launch_tags)
        body += struct.pack("<5I", *k.workgroup, k.buffers, k.push_constants)
        body += _str(code) + _str(k.source)
    return MAGIC + struct.pack("<Q", len(MAGIC) + 8 + len(body)) + body


def read_payload(data: bytes) -> list[dict]:
    """The kernels of a payload (for tests and ``kernels``): name, arg_types, launch_tags, workgroup,
    buffers, push_constants, spirv, glsl."""
    pos = data.find(MAGIC)
    if pos < 0:
        raise ValueError("no Vulkan payload")
    (total,) = struct.unpack_from("<Q", data, pos + 8)
    p = pos + 16
    end = pos + total

    def u32():
        nonlocal p
        (v,) = struct.unpack_from("<I", data, p)
        p += 4
        return v

    def s():
        nonlocal p
        (n,) = struct.unpack_from("<Q", data, p)
        p += 8
        p += n
        return data[p - n : p]

    version, count = u32(), u32()
    if version != VERSION:
        raise ValueError(f"Vulkan payload version {version}")
    out = []
    for _ in range(count):
        name = s().decode()
        args = [struct.unpack_from("<BBH", data, p + 4 * i) for i in range(u32())]
        p += 4 * len(args)
        tags = [s().decode() for _ in range(u32())]
        wg = (u32(), u32(), u32())
        buffers, push = u32(), u32()
        out.append(
            dict(
                name=name,
                arg_types=args,
                launch_tags=tags,
                workgroup=wg,
                buffers=buffers,
                push_constants=push,
                spirv=s(),
                glsl=s().decode(),
            )
        )
    assert p <= end
    return out


def build(mod, target):
    """``target.build.vulkan``: the device IRModule (lowered kernels) -> a placeholder module holding the
    payload (replaced by a ``vulkan`` module at export, ``pack_imports``)."""
    import numpy as np
    import tvm

    kernels = [glsl.generate(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    for k in kernels:
        log.debug("GLSL of %s:\n%s", k.name, k.source)
    spirv = compile_glsl(kernels)
    blob = payload(kernels, spirv)
    log.info("Vulkan: %d kernels, %d bytes of SPIR-V", len(kernels), sum(len(s) for s in spirv))
    tensor = tvm.runtime.tensor(np.frombuffer(blob, dtype="uint8"))
    placeholder = tvm.get_global_func("ffi.Module.create.const_loader")({PLACEHOLDER_KEY: tensor}, {})
    _placeholders.add(placeholder.__chandle__())
    return placeholder


_placeholders: set[int] = set()  # the placeholder modules made in this process (their handles)


def register() -> None:
    """Make TVM build ``vulkan`` targets with tvmgen's code generator (also where TVM has its own: the
    artifact's kernels are then always in the form tvmgen's runtime loads)."""
    import tvm

    tvm.register_global_func("target.build.vulkan", build, override=True)


# ------------------------------------------------------------------ export: the packed import tree


def _read_vec(b: bytes, p: int) -> tuple[list[int], int]:
    (n,) = struct.unpack_from("<Q", b, p)
    return list(struct.unpack_from(f"<{n}Q", b, p + 8)), p + 8 + 8 * n


def repack(blob: bytes) -> tuple[bytes, int]:
    """TVM's packed import tree (u64 size, then row_ptr, child_indices, and per module its kind and,
    unless ``_lib``, its bytes) with each placeholder replaced by a ``vulkan`` module holding its payload;
    returns (blob, modules replaced)."""
    (size,) = struct.unpack_from("<Q", blob, 0)
    bin_ = blob[8 : 8 + size]
    row_ptr, p = _read_vec(bin_, 0)
    _, p = _read_vec(bin_, p)
    out = bytearray(bin_[:p])
    replaced = 0
    for _ in range(len(row_ptr) - 1):
        (n,) = struct.unpack_from("<Q", bin_, p)
        kind = bin_[p + 8 : p + 8 + n]
        p += 8 + n
        if kind == b"_lib":
            out += _str(kind)
            continue
        (m,) = struct.unpack_from("<Q", bin_, p)
        data = bin_[p + 8 : p + 8 + m]
        p += 8 + m
        if kind == b"const_loader" and PLACEHOLDER_KEY.encode() in data and MAGIC in data:
            start = data.find(MAGIC)
            (total,) = struct.unpack_from("<Q", data, start + 8)
            out += _str(b"vulkan") + _str(data[start : start + total])
            replaced += 1
        else:
            out += _str(kind) + _str(data)
    if p != len(bin_):
        raise CompileError("tvmgen: TVM's packed module format is not the one this tvmgen knows (TVM 0.27)")
    return struct.pack("<Q", len(out)) + bytes(out), replaced


def pack_imports(mod, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
    """TVM's ``fpack_imports``: the library's import blob as TVM packs it, with tvmgen's Vulkan modules
    in place of their placeholders, compiled to an object file for the host module's LLVM target."""
    import tvm

    blob = bytes(tvm.get_global_func("runtime.ModulePackImportsToTensor")(mod).numpy().tobytes())
    blob, replaced = repack(blob)
    log.info("Vulkan: %d kernel module(s) packed into the library", replaced)
    llvm = mod._collect_from_import_tree(lambda m: m.kind == "llvm")
    if not llvm:
        raise CompileError("tvmgen: a Vulkan build without an LLVM host module cannot be exported")
    triple = llvm[0].get_function("_get_target_string")()
    obj = tvm.get_global_func("codegen.codegen_blob")(blob, is_system_lib, triple, prefix)
    path = os.path.join(workspace_dir, f"{prefix}devc.o")
    obj.write_to_file(path)
    return path


def export_options(ex) -> dict:
    """Extra ``export_library`` arguments for an executable with Vulkan kernels ({} otherwise)."""
    mod = getattr(ex, "mod", ex)
    if not mod._collect_from_import_tree(lambda m: m.__chandle__() in _placeholders):
        return {}
    return {"fpack_imports": pack_imports}


def spirv_val(code: bytes) -> str | None:
    """``spirv-val --target-env vulkan1.0`` on one kernel: None when valid, else its message."""
    tool = toolchains.SpirvVal()
    tool.verify()
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(code)
        f.flush()
        r = tool.run("--target-env", TARGET_ENV, f.name, check=False)
    return None if r.returncode == 0 else (r.stdout + r.stderr).strip()
