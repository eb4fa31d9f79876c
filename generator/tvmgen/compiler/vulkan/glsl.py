"""tvmgen's GLSL code generator: TVM's lowered GPU kernels (TIR after the GPU passes, the form TVM's
own OpenCL and SPIR-V code generators receive) as GLSL 4.50 compute shaders for Vulkan.

TVM 0.27's wheel has no Vulkan code generator (``target.build.vulkan`` is missing); ``compiler.vulkan``
registers one that prints each kernel with this module and compiles it to SPIR-V with glslang
(``glslangValidator``). One shader per kernel:

- each buffer parameter is a storage buffer (``set = 0, binding = i``, ``std430``, element type from the
  parameter's pointer type), each scalar parameter a member of one push-constant block, in parameter
  order, 4 bytes each (64-bit integers are passed as 32-bit ones: the runtime narrows them);
- ``blockIdx.*`` is ``gl_WorkGroupID``, ``threadIdx.*`` ``gl_LocalInvocationID``; the work-group size is
  the kernel's constant ``threadIdx`` extents (``local_size_*``);
- ``shared`` allocations are module-scope ``shared`` arrays, ``local`` ones arrays in the function;
  ``tvm_storage_sync("shared")`` is ``barrier();`` alone: in a Vulkan compute shader it is
  ``OpControlBarrier`` at work-group scope with work-group memory semantics, which orders shared memory
  as OpenCL's ``barrier(CLK_LOCAL_MEM_FENCE)`` does (``memoryBarrierShared()`` before it added an
  ``OpMemoryBarrier`` at *device* scope, which NVIDIA's compiler turned into a GPU-wide fence);
- integer division and remainder keep TIR's meaning (truncating ``Div`` / ``Mod``; ``FloorDiv`` /
  ``FloorMod``) through helper functions, not GLSL's ``%`` (undefined for negative operands);
- C math calls left by TVM's intrinsic lowering (``expf``, ``sqrtf``, ``tanhf``, ``erff``...) map to
  GLSL.std.450 functions, or to helpers where GLSL has none (``erf``).

- vector expressions (``Ramp``, ``Broadcast``, ``Shuffle``, vector loads, stores and ``Bind``) are
  printed lane by lane as scalars (any lane count; drivers schedule scalars anyway), a vector store's
  lanes all computed before any is stored (an array of vector-typed elements is declared as its scalars,
  lane l of element i at i * lanes + l: ``ExprPrinter.element``); except a 4-lane float load or store of a storage buffer at a
  stride-1 ramp whose first index is provably a multiple of 4: one ``vec4`` access through a second
  declaration of the same binding (``vec4 data[]``), as TVM's OpenCL code has ``float4`` vload/vstore;
- ``&&`` / ``||`` whose right operand loads nothing are ``all(bvec2(a, b))`` / ``any(...)``: both
  evaluated, no branch (glslang makes a branch of every ``&&``; NVIDIA's Vulkan compiler kept them in
  the padding conditions of convolutions: SqueezeNet's 2-3x slower than their OpenCL build);
- a loop of constant extent (a multiple of 4, at least 8) whose body is straight-line code is printed
  with the body 4 times per iteration (NVVM unrolls such loops, NVIDIA's SPIR-V compiler did not: a
  transposed convolution 3x slower than with it);
- ``Let`` expressions are declared as temporaries before the statement that holds them, or printed
  inline (their value substituted: the values are pure) inside a branch of ``?:`` / ``if_then_else``,
  the right side of ``&&`` / ``||`` and a ``while`` condition, which may not be evaluated;
- storage buffers of types GLSL 4.50 core lacks are packed into 32-bit words, so no device feature is
  needed: ``int64`` / ``uint64`` as ``ivec2`` (the low word read: values must fit 32 bits, as everywhere
  here; stored sign-extended), ``float16`` two to a word (``unpackHalf2x16``, arithmetic in float32),
  ``int8`` / ``uint8`` / ``bool`` four to a word (``bitfieldExtract``); stores of 8- and 16-bit elements
  are ``atomicAnd`` + ``atomicOr`` on their word (each thread changes only its own bits, so neighbours
  stored by other threads at the same time are kept). Shared and local arrays use 32-bit types.

Not supported yet (a ``CompileError`` names the kernel and the construct): dynamic shared memory,
64-bit integer values outside 32-bit range (64-bit integers are printed as 32-bit ones), predicated
loads and stores, non-constant work-group sizes (dynamic shapes).

This module holds the statements and the shader around them; the expressions are ``glsl_exprs``, the
GLSL types, buffer layouts, functions and helpers ``glsl_types``.
"""

# ruff: noqa: N802 - the printer dispatches on TVM node class names (s_SeqStmt)

from __future__ import annotations

import os
from dataclasses import dataclass

from tvmgen.compiler.vulkan.glsl_exprs import ExprPrinter, has_load, multiple_of, uses_any, walk_expr
from tvmgen.compiler.vulkan.glsl_types import (
    BUFFER_LAYOUTS,
    HELPERS,
    THREAD_AXES,
    Buf,
    UnsupportedError,
    buffer_dtype,
    const_int,
    dtype_of,
    lanes_of,
    scalar_type,
    split_lanes,
)
from tvmgen.core.errors import CompileError

# Switches of the printer's optimizations, to compare them on a device (docs/vulkan.md; glsl_exprs has the others):
# constant loops of straight-line bodies: the body this many times per iteration (s_For); 1: not unrolled
UNROLL = int(os.environ.get("TVMGEN_GLSL_UNROLL", "4"))
# constant loops of at most this many iterations whose bodies have no loops: printed out whole (s_For),
# as NVVM unrolls them for OpenCL (a depthwise convolution's 3 or 5 window columns); 0: not unrolled
FULL_UNROLL = int(os.environ.get("TVMGEN_GLSL_FULL_UNROLL", "8"))
# tvm_storage_sync("shared") as barrier() alone; TVMGEN_GLSL_SHARED_FENCE=1: memoryBarrierShared() before it
SHARED_FENCE = os.environ.get("TVMGEN_GLSL_SHARED_FENCE", "0") == "1"


@dataclass
class Kernel:
    """One kernel as a GLSL compute shader and what the runtime needs to launch it."""

    name: str
    source: str
    arg_types: list[str]  # TVM dtype of each parameter, "handle" for buffers
    launch_tags: list[str]  # the extents the host passes after the arguments (blockIdx.*, threadIdx.*)
    workgroup: tuple[int, int, int]
    buffers: int  # storage buffers, bindings 0..buffers-1, in parameter order
    push_constants: int  # bytes of the push-constant block


class _Printer(ExprPrinter):
    """The GLSL of one kernel's statements (``ExprPrinter`` prints their expressions)."""

    # ----------------------------------------------------------------- statements
    def stmt(self, s) -> None:
        self.vec4_loads = {}  # a vec4 load's temporary holds only within the statement that read it
        kind = type(s).__name__
        method = getattr(self, "s_" + kind, None)
        if method is None:
            raise UnsupportedError(f"statement {kind}")
        method(s)

    def block(self, s) -> None:
        self.indent += 1
        self.stmt(s)
        self.indent -= 1

    def s_SeqStmt(self, s) -> None:
        for x in s.seq:
            self.stmt(x)

    def s_DeclBuffer(self, s) -> None:
        data = s.data
        base = data
        if type(data).__name__ == "Call" and str(getattr(data.op, "name", "")) == "tirx.buffer_data":
            base = data.args[0]  # a view of another buffer (an allocation's)
        if base not in self.buffers:
            raise UnsupportedError(f"a buffer declared over {str(data)[:60]}")
        under = self.buffers[base]
        elem = buffer_dtype(s.buffer)
        if elem != under.dtype:
            raise UnsupportedError(f"buffer {s.buffer.name} of {elem} over a {under.dtype} buffer")
        offset, aligned4 = under.offset, under.aligned4
        eo = getattr(s.buffer, "elem_offset", None)
        if eo is not None and not (type(eo).__name__ == "IntImm" and int(eo.value) == 0):
            o = self.expr(eo)
            offset = o if offset is None else f"({offset} + {o})"
            aligned4 = aligned4 and multiple_of(eo, 4)
        self.buffers[s.buffer] = Buf(under.array, under.dtype, under.layout, offset, aligned4)

    def s_AllocBuffer(self, s) -> None:
        buf = s.buffer
        scope = str(buf.ty.storage_scope)
        elem = buffer_dtype(buf)
        size = 1
        for d in buf.ty.shape:
            size *= const_int(d)
        size *= split_lanes(elem)[1]  # a vector-typed array (float32x2 registers): stored as its lanes
        name = self.fresh(str(buf.name))
        if scope == "shared":
            self.shared.append(f"shared {scalar_type(elem)} {name}[{size}];")
        elif scope == "local":
            self.emit(f"{scalar_type(elem)} {name}[{size}];")
        else:
            raise UnsupportedError(f"memory scope {scope!r} ({buf.name})")
        self.buffers[buf] = Buf(name, elem)

    def s_AttrStmt(self, s) -> None:
        if s.attr_key == "thread_extent":
            iv = s.node
            tag = str(iv.thread_tag)
            scope, _, axis = tag.partition(".")
            if axis not in THREAD_AXES or scope not in ("blockIdx", "threadIdx"):
                raise UnsupportedError(f"thread tag {tag}")
            i = THREAD_AXES[axis]
            if scope == "threadIdx":
                self.workgroup[i] = const_int(s.value)
                source = f"gl_LocalInvocationID.{axis}"
            else:
                source = f"gl_WorkGroupID.{axis}"
            name = self.bind(iv.var, tag)
            self.emit(f"int {name} = int({source});")
        self.stmt(s.body)

    def s_BufferStore(self, s) -> None:
        if len(s.indices) != 1:
            raise UnsupportedError(f"a store with {len(s.indices)} indices (not flattened)")
        if getattr(s, "predicate", None) is not None:
            raise UnsupportedError("a predicated store")
        buf, index, n = self.ref(s.buffer), s.indices[0], lanes_of(s.value)
        self.stored.add(buf.array)
        if n == 1:
            self.scalar_access.add(buf.array)
            i = self.expr(index)
            if (buf, i) in self.registers:  # promoted over an enclosing loop (promote)
                self.emit(f"{self.registers[(buf, i)]} = {self.expr(s.value)};")
                return
            for line in buf.store(i, self.expr(s.value)):
                self.emit(line)
            return
        # a vector store, lane by lane: every lane's value first (they may read what is stored)
        t = scalar_type(dtype_of(s.value))
        v4 = self.vector4(buf, index, n)
        if v4 is not None:  # one 128-bit store
            values = [self.expr(s.value, lane) for lane in range(n)]
            self.emit(f"{v4[0]}[{v4[1]}] = vec4({', '.join(values)});")
            return
        self.emit("{")
        self.indent += 1
        names = [self.fresh("lane") for _ in range(n)]
        for lane, name in enumerate(names):
            self.emit(f"{t} {name} = {self.expr(s.value, lane)};")
        for lane, name in enumerate(names):
            for line in buf.store(self.element(buf, index, lane), name):
                self.emit(line)
        self.indent -= 1
        self.emit("}")

    def s_For(self, s) -> None:
        if s.step is not None and not (type(s.step).__name__ == "IntImm" and int(s.step.value) == 1):
            raise UnsupportedError("a loop step other than 1")
        lo, ext = self.expr(s.min), self.expr(s.extent)
        promoted = self.promote(s)
        v = self.bind(s.loop_var)
        end = ext if lo == "0" else f"({lo}) + ({ext})"
        n = int(s.extent.value) if type(s.extent).__name__ == "IntImm" else 0
        if 2 <= n <= FULL_UNROLL and _unrollable(s.body):
            # every iteration printed, the loop variable a constant in each (NVIDIA's SPIR-V compiler kept a
            # 5 x 5 depthwise window as loops: its MobileNetV3 kernels 25% slower than their OpenCL builds)
            for j in range(n):
                self.names[s.loop_var] = str(j) if lo == "0" else f"({lo} + {j})"
                self.emit("{")
                self.indent += 1
                self.block(s.body)
                self.indent -= 1
                self.emit("}")
            self.names[s.loop_var] = v
        elif UNROLL > 1 and n >= 2 * UNROLL and n % UNROLL == 0 and _unrollable(s.body):
            # the body UNROLL times per iteration (NVVM unrolls such loops; NVIDIA's SPIR-V compiler did not)
            self.emit(f"for (int {v} = {lo}; {v} < {end}; {v} += {UNROLL}) {{")
            for j in range(UNROLL):
                self.names[s.loop_var] = v if j == 0 else f"({v} + {j})"
                self.indent += 1
                self.emit("{")
                self.block(s.body)
                self.emit("}")
                self.indent -= 1
            self.names[s.loop_var] = v
            self.emit("}")
        else:
            self.emit(f"for (int {v} = {lo}; {v} < {end}; ++{v}) {{")
            self.block(s.body)
            self.emit("}")
        if promoted is not None:
            key, guard, name = promoted
            del self.registers[key]
            buf, index = key
            for line in buf.store(index, name):
                self.emit(f"if ({guard}) {line}" if guard else line)

    def promote(self, loop):
        """A storage-buffer element that ``loop`` reads and writes at one loop-invariant index (an
        accumulation into the output, as dlight's fallback schedules and TVM's reductions without a
        local cache write): kept in a register over the loop, read before it and stored after it, under
        the same loop-invariant conditions as its stores. Drivers do not do this themselves through
        buffer stores (NVIDIA's Vulkan compiler kept a transposed convolution's 384 read-modify-writes
        in memory: 12x its OpenCL build). Returns (key, guard, register) or None."""
        if type(loop.extent).__name__ != "IntImm" or int(loop.extent.value) < 1:
            return None
        accesses: list = []  # (buffer, index, guards, is_store)
        inner: set = set()  # variables bound inside the loop
        if not _collect(loop.body, [], accesses, inner) or not accesses:
            return None
        inner.add(loop.loop_var)
        stores = [a for a in accesses if a[3]]
        if not stores:
            return None
        target = stores[0][0]
        if target not in self.buffers:
            return None
        buf = self.buffers[target]
        if buf.layout != "native" or buf.array not in self.global_arrays:
            return None
        from tvm_ffi import structural_equal

        index, guards = stores[0][1], stores[0][2]
        same_array = [a for a in accesses if a[0] in self.buffers and self.buffers[a[0]].array == buf.array]
        for b, i, g, st in same_array:
            if self.buffers[b] != buf or not structural_equal(i, index):
                return None
            # stores under exactly the first store's conditions, loads under those and maybe more
            if len(g) < len(guards) or (st and len(g) != len(guards)):
                return None
            if not all(structural_equal(x, y) for x, y in zip(g, guards)):
                return None
        if uses_any(index, inner) or any(uses_any(c, inner) for c in guards) or has_load(index):
            return None
        if any(has_load(c) for c in guards):
            return None
        # every other access of the loop must not reach this array through another buffer
        if any(a[0] not in self.buffers for a in accesses):
            return None
        idx = self.expr(index)
        if (buf, idx) in self.registers:  # already kept in a register over an enclosing loop
            return None
        guard = " && ".join(f"({self.expr(c)})" for c in guards)
        name = self.fresh(f"{target.name}_acc")
        self.emit(f"{scalar_type(buf.dtype)} {name};")
        load = buf.load(idx)
        self.emit(f"if ({guard}) {name} = {load};" if guard else f"{name} = {load};")
        key = (buf, idx)
        self.registers[key] = name
        return key, guard, name

    def s_While(self, s) -> None:
        self.emit(f"while ({self.conditional(s.condition)}) {{")  # evaluated at every iteration
        self.block(s.body)
        self.emit("}")

    def s_IfThenElse(self, s) -> None:
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.block(s.then_case)
        if s.else_case is not None:
            self.emit("} else {")
            self.block(s.else_case)
        self.emit("}")

    def s_Bind(self, s) -> None:
        t, n = scalar_type(dtype_of(s.value)), lanes_of(s.value)
        if n == 1:
            value = self.expr(s.value)
            self.emit(f"{t} {self.bind(s.var)} = {value};")
            return
        names = [self.fresh(f"{s.var.name}_{i}") for i in range(n)]
        for i, name in enumerate(names):
            self.emit(f"{t} {name} = {self.expr(s.value, i)};")
        self.names[s.var] = names

    def s_Evaluate(self, s) -> None:
        v = s.value
        if type(v).__name__ == "Call" and str(v.op.name) == "tirx.tvm_storage_sync":
            scope = str(v.args[0].value)
            if scope != "shared":
                raise UnsupportedError(f"tvm_storage_sync({scope!r})")
            if SHARED_FENCE:
                self.emit("memoryBarrierShared();")
            self.emit("barrier();")
            return
        if type(v).__name__ in ("IntImm",):
            return
        self.emit(f"{self.expr(v)};")

    def s_Break(self, s) -> None:
        self.emit("break;")

    def s_Continue(self, s) -> None:
        self.emit("continue;")


def _collect(s, guards: list, accesses: list, inner: set) -> bool:
    """The buffer accesses of a statement (buffer, index, enclosing conditions, is_store) and the
    variables it binds; False where it holds what promotion does not follow (barriers, while loops,
    vector or predicated accesses, anything unknown)."""
    kind = type(s).__name__

    def loads(e) -> bool:
        ok = [True]

        def f(x):
            if type(x).__name__ == "TensorLoad":
                if len(x.indices) != 1 or lanes_of(x) > 1 or getattr(x, "predicate", None) is not None:
                    ok[0] = False
                else:
                    accesses.append((x.source, x.indices[0], list(guards), False))
            elif type(x).__name__ == "Let":
                inner.add(x.var)
            elif type(x).__name__ == "Call" and "storage_sync" in str(getattr(x.op, "name", "")):
                ok[0] = False

        walk_expr(e, f)
        return ok[0]

    if kind == "SeqStmt":
        return all(_collect(x, guards, accesses, inner) for x in s.seq)
    if kind == "For":
        inner.add(s.loop_var)
        return loads(s.min) and loads(s.extent) and _collect(s.body, guards, accesses, inner)
    if kind == "IfThenElse":
        if not loads(s.condition):
            return False
        ok = _collect(s.then_case, [*guards, s.condition], accesses, inner)
        if s.else_case is not None:
            from tvm import tirx

            ok = ok and _collect(s.else_case, [*guards, tirx.Not(s.condition)], accesses, inner)
        return ok
    if kind == "BufferStore":
        if len(s.indices) != 1 or lanes_of(s.value) > 1 or getattr(s, "predicate", None) is not None:
            return False
        accesses.append((s.buffer, s.indices[0], list(guards), True))
        return loads(s.indices[0]) and loads(s.value)
    if kind == "Bind":
        inner.add(s.var)
        return loads(s.value)
    if kind == "Evaluate":
        return loads(s.value)
    if kind == "AttrStmt" and s.attr_key != "thread_extent":
        return _collect(s.body, guards, accesses, inner)
    return False


def _unrollable(s) -> bool:
    """A loop body to print several times per iteration: no loops, barriers or allocations inside."""
    kind = type(s).__name__
    if kind == "SeqStmt":
        return all(_unrollable(x) for x in s.seq)
    if kind == "IfThenElse":
        return _unrollable(s.then_case) and (s.else_case is None or _unrollable(s.else_case))
    if kind == "Evaluate":
        return not (type(s.value).__name__ == "Call" and "storage_sync" in str(getattr(s.value.op, "name", "")))
    return kind in ("BufferStore", "Bind")


def kernel_name(gv, func) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else str(gv.name_hint)


def generate(gv, func) -> Kernel:
    """The GLSL compute shader of one lowered device kernel (a PrimFunc with ``calling_conv`` 2)."""
    name = kernel_name(gv, func)
    try:
        return _generate(name, func)
    except UnsupportedError as e:
        raise CompileError(
            f"tvmgen's Vulkan code generator cannot compile kernel {name} yet: {e} is not supported",
            "build this model with --device opencl or --device cpu, and report it (docs/gpu.md#vulkan lists "
            "what the Vulkan code generator covers)",
        ) from None


def _generate(name: str, func, no_vec4: frozenset = frozenset()) -> Kernel:
    p = _Printer(name)
    p.no_vec4 = set(no_vec4)
    bindings: list[tuple[str, str]] = []  # (array, declaration after the layout and qualifiers)
    members: list[str] = []
    arg_types: list[str] = []
    for param in func.params:
        ty = param.ty
        if type(ty).__name__ == "PointerType":
            elem = str(ty.element_type.dtype)
            if elem not in BUFFER_LAYOUTS:
                raise UnsupportedError(f"a buffer of {elem}")
            glsl_elem, layout = BUFFER_LAYOUTS[elem]
            block = p.fresh(f"B_{param.name}")
            var = p.fresh(str(param.name))
            bindings.append((f"{var}.data", f"buffer {block} {{ {glsl_elem} data[]; }} {var};"))
            p.buffers[param] = Buf(f"{var}.data", elem, layout)
            p.global_arrays.add(f"{var}.data")
            arg_types.append("handle")
        else:
            dtype = str(ty.dtype)
            member = p.fresh(str(param.name))
            members.append(f"{scalar_type(dtype)} {member};")
            p.names[param] = f"pc.{member}"
            arg_types.append(dtype)
    p.stmt(func.body)
    # a stored array reached both as vec4 and element by element stays scalar (its two restrict views
    # would alias): printed again without its vec4 view
    mixed = {a for a in p.vec4 if a in p.stored and a in p.scalar_access}
    if mixed:
        return _generate(name, func, no_vec4 | mixed)
    tags = func.attrs.get("tirx.kernel_launch_params") if func.attrs is not None else None
    launch = [str(t) for t in tags] if tags is not None else []
    head = ["#version 450", f"// Function: {name}"]
    wg = tuple(p.workgroup)
    head.append(f"layout(local_size_x = {wg[0]}, local_size_y = {wg[1]}, local_size_z = {wg[2]}) in;")
    # TVM's kernels' buffers do not alias (tirx.noalias): restrict, and readonly where the kernel stores
    # nothing, as TVM's OpenCL code has restrict / const. Without them the driver must keep every load
    # after every store and cannot use its read-only cache path (NVIDIA: LSTM and transposed-convolution
    # kernels several times slower than their OpenCL builds).
    noalias = bool(func.attrs.get("tirx.noalias")) if func.attrs is not None else False
    for i, (array, decl) in enumerate(bindings):
        quals = ("restrict " if noalias else "") + ("" if array in p.stored else "readonly ")
        head.append(f"layout(std430, set = 0, binding = {i}) {quals}{decl}")
        if array in p.vec4:  # the same buffer as vec4s, for 128-bit loads and stores (vector4)
            view = p.vec4[array][: -len(".data")]
            decl4 = f"buffer B{view} {{ vec4 data[]; }} {view};"
            head.append(f"layout(std430, set = 0, binding = {i}) {quals}{decl4}")
    if members:
        head.append("layout(push_constant) uniform PushConstants { " + " ".join(members) + " } pc;")
    head += p.shared
    source = "\n".join(head) + "\n" + HELPERS + "void main() {\n" + "\n".join(p.lines) + "\n}\n"
    return Kernel(
        name=name,
        source=source,
        arg_types=arg_types,
        launch_tags=launch,
        workgroup=(wg[0], wg[1], wg[2]),
        buffers=len(bindings),
        push_constants=4 * len(members),
    )
