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
  lanes all computed before any is stored; except a 4-lane float load or store of a storage buffer at a
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
"""

# ruff: noqa: N802 - the printer dispatches on TVM node class names (s_SeqStmt, e_Call)

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from tvmgen.core.errors import CompileError

SCALARS = {
    "float32": "float",
    "float16": "float",  # computed in float32: stored as half in packed buffers
    "int32": "int",
    "int64": "int",
    "int16": "int",
    "int8": "int",
    "uint8": "int",
    "uint16": "int",
    "uint32": "uint",
    "uint64": "uint",
    "bool": "bool",
}
# storage buffer element type -> (GLSL array element, layout): "native" one element per array entry,
# "i64" an ivec2 per element, "half" two per uint, "byte" four per uint
BUFFER_LAYOUTS = {
    "float32": ("float", "native"),
    "int32": ("int", "native"),
    "uint32": ("uint", "native"),
    "int64": ("ivec2", "i64"),
    "uint64": ("ivec2", "i64"),
    "float16": ("uint", "half"),
    "int8": ("uint", "byte"),
    "uint8": ("uint", "byte"),
    "bool": ("uint", "byte"),
}

# Switches of the printer's optimizations, to compare them on a device (docs/vulkan.md):
# 128-bit loads and stores of 4-lane float vectors (_Printer.vector4); TVMGEN_GLSL_VEC4=0: lane by lane
VEC4 = os.environ.get("TVMGEN_GLSL_VEC4", "1") != "0"
# && / || with a right operand that loads nothing: both evaluated, no branch; TVMGEN_GLSL_EAGER=0: && / ||
EAGER = os.environ.get("TVMGEN_GLSL_EAGER", "1") != "0"
# constant loops of straight-line bodies: the body this many times per iteration (s_For); 1: not unrolled
UNROLL = int(os.environ.get("TVMGEN_GLSL_UNROLL", "4"))
# constant loops of at most this many iterations whose bodies have no loops: printed out whole (s_For),
# as NVVM unrolls them for OpenCL (a depthwise convolution's 3 or 5 window columns); 0: not unrolled
FULL_UNROLL = int(os.environ.get("TVMGEN_GLSL_FULL_UNROLL", "8"))
# tvm_storage_sync("shared") as barrier() alone; TVMGEN_GLSL_SHARED_FENCE=1: memoryBarrierShared() before it
SHARED_FENCE = os.environ.get("TVMGEN_GLSL_SHARED_FENCE", "0") == "1"

# C math functions (TVM's default intrinsic lowering, call_pure_extern) -> GLSL
MATH = {
    "expf": "exp",
    "exp2f": "exp2",
    "logf": "log",
    "log2f": "log2",
    "sqrtf": "sqrt",
    "fabsf": "abs",
    "floorf": "floor",
    "ceilf": "ceil",
    "truncf": "trunc",
    "roundf": "tvm_round",
    "nearbyintf": "roundEven",
    "rintf": "roundEven",
    "sinf": "sin",
    "cosf": "cos",
    "tanf": "tan",
    "asinf": "asin",
    "acosf": "acos",
    "atanf": "atan",
    "atan2f": "atan",
    "sinhf": "sinh",
    "coshf": "cosh",
    "tanhf": "tvm_tanh",
    "powf": "pow",
    "fmaxf": "max",
    "fminf": "min",
    "fmodf": "tvm_fmod",
    "erff": "tvm_erf",
    "log10f": "tvm_log10",
    "log1pf": "tvm_log1p",
    "expm1f": "tvm_expm1",
    "copysignf": "tvm_copysign",
}
# TIR intrinsics that reach the code generator unlowered -> GLSL
INTRINSICS = {
    "tirx.exp": "exp",
    "tirx.exp2": "exp2",
    "tirx.log": "log",
    "tirx.log2": "log2",
    "tirx.sqrt": "sqrt",
    "tirx.rsqrt": "inversesqrt",
    "tirx.fabs": "abs",
    "tirx.floor": "floor",
    "tirx.ceil": "ceil",
    "tirx.trunc": "trunc",
    "tirx.round": "tvm_round",
    "tirx.nearbyint": "roundEven",
    "tirx.sin": "sin",
    "tirx.cos": "cos",
    "tirx.tan": "tan",
    "tirx.asin": "asin",
    "tirx.acos": "acos",
    "tirx.atan": "atan",
    "tirx.atan2": "atan",
    "tirx.sinh": "sinh",
    "tirx.cosh": "cosh",
    "tirx.tanh": "tvm_tanh",
    "tirx.pow": "pow",
    "tirx.fmod": "tvm_fmod",
    "tirx.erf": "tvm_erf",
    "tirx.log10": "tvm_log10",
    "tirx.log1p": "tvm_log1p",
    "tirx.expm1": "tvm_expm1",
    "tirx.copysign": "tvm_copysign",
    "tirx.isnan": "isnan",
    "tirx.isinf": "isinf",
}

HELPERS = """int tvm_tdiv(int a, int b) { return a / b; }
int tvm_tmod(int a, int b) { return a - (a / b) * b; }
int tvm_fdiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
int tvm_fmod_i(int a, int b) { int r = a - (a / b) * b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
float tvm_half_at(uint w, int i) { return unpackHalf2x16(w >> ((uint(i) & 1u) * 16u)).x; }
float tvm_fmod(float a, float b) { return a - b * trunc(a / b); }
float tvm_ffloormod(float a, float b) { return a - b * floor(a / b); }
float tvm_round(float x) { return sign(x) * floor(abs(x) + 0.5); }
float tvm_tanh(float x) { return tanh(clamp(x, -15.0, 15.0)); }
float tvm_log10(float x) { return log(x) * 0.4342944819032518; }
float tvm_log1p(float x) { return abs(x) < 1e-4 ? x - 0.5 * x * x : log(1.0 + x); }
float tvm_expm1(float x) { return abs(x) < 1e-4 ? x + 0.5 * x * x : exp(x) - 1.0; }
float tvm_copysign(float a, float b) { return (b < 0.0 || (b == 0.0 && floatBitsToInt(b) < 0)) ? -abs(a) : abs(a); }
float tvm_erf(float x) {
  // Abramowitz & Stegun 7.1.26 refined: |error| < 1.2e-7 (W. J. Cody's rational form is not needed at fp32)
  float t = 1.0 / (1.0 + 0.5 * abs(x));
  float y = 1.0 - t * exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
            t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
            t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0.0 ? y : -y;
}
"""

BINARY = {
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "EQ": "==",
    "NE": "!=",
    "LT": "<",
    "LE": "<=",
    "GT": ">",
    "GE": ">=",
    "And": "&&",
    "Or": "||",
    "LShift": "<<",
    "RShift": ">>",
    "BitwiseAnd": "&",
    "BitwiseOr": "|",
    "BitwiseXor": "^",
}
THREAD_AXES = {"x": 0, "y": 1, "z": 2}


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


class UnsupportedError(Exception):
    pass


def _dtype(node) -> str:
    ty = getattr(node, "ty", None)
    dtype = getattr(ty, "dtype", None)
    if dtype is None:
        raise UnsupportedError(f"an expression without a primitive type ({type(node).__name__}: {str(node)[:60]})")
    return str(dtype)


def _split(dtype: str) -> tuple[str, int]:
    """("float32x4") -> ("float32", 4); scalars have 1 lane."""
    m = re.fullmatch(r"([a-z]+[0-9]*)x([0-9]+)", dtype)
    return (m.group(1), int(m.group(2))) if m else (dtype, 1)


def _lanes(node) -> int:
    return _split(_dtype(node))[1]


def _scalar(dtype: str) -> str:
    elem = _split(dtype)[0]
    if elem not in SCALARS:
        raise UnsupportedError(f"type {dtype}")
    return SCALARS[elem]


@dataclass(frozen=True)
class Buf:
    """How a TIR buffer is reached in GLSL."""

    array: str  # the GLSL array
    dtype: str  # element dtype
    layout: str = "native"  # see BUFFER_LAYOUTS; shared and local arrays are "native"
    offset: str | None = None  # element offset of a view
    aligned4: bool = True  # the view's offset is a multiple of 4 elements (vec4 accesses)

    def index(self, i: str) -> str:
        return i if self.offset is None else f"({i} + {self.offset})"

    def load(self, i: str) -> str:
        i = self.index(i)
        a = self.array
        if self.layout == "native":
            return f"{a}[{i}]"
        if self.layout == "i64":
            return f"{a}[{i}].x" if self.dtype == "int64" else f"uint({a}[{i}].x)"
        if self.layout == "half":
            return f"tvm_half_at({a}[({i}) >> 1], {i})"
        signed = self.dtype == "int8"
        word = f"int({a}[({i}) >> 2])" if signed else f"{a}[({i}) >> 2]"
        v = f"bitfieldExtract({word}, (({i}) & 3) * 8, 8)"
        if self.dtype == "bool":
            return f"({v} != 0u)"
        return v if signed else f"int({v})"

    def store(self, i: str, value: str) -> list[str]:
        i = self.index(i)
        a = self.array
        if self.layout == "native":
            return [f"{a}[{i}] = {value};"]
        if self.layout == "i64":
            return [f"{{ int v_ = int({value}); {a}[{i}] = ivec2(v_, v_ >> 31); }}"]
        if self.layout == "half":
            bits, width, shift = f"(packHalf2x16(vec2({value}, 0.0)) & 0xffffu)", "0xffffu", f"(uint({i}) & 1u) * 16u"
        else:
            v = f"uint({value})" if self.dtype != "bool" else f"(({value}) ? 1u : 0u)"
            bits, width, shift = f"({v} & 0xffu)", "0xffu", f"(uint({i}) & 3u) * 8u"
        word = f"{a}[({i}) >> {1 if self.layout == 'half' else 2}]"
        return [f"{{ uint s_ = {shift}; atomicAnd({word}, ~({width} << s_)); atomicOr({word}, {bits} << s_); }}"]


def _const_int(e) -> int:
    if type(e).__name__ != "IntImm":
        raise UnsupportedError(f"a non-constant extent ({str(e)[:60]})")
    return int(e.value)


def _float_literal(v: float) -> str:
    if math.isnan(v):
        return "uintBitsToFloat(0x7fc00000u)"
    if math.isinf(v):
        return "uintBitsToFloat(0x7f800000u)" if v > 0 else "uintBitsToFloat(0xff800000u)"
    text = repr(float(v))
    if "e" not in text and "." not in text:
        text += ".0"
    return text


@dataclass
class _Printer:
    name: str
    lines: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    names: dict = field(default_factory=dict)  # Var -> GLSL name
    used: set = field(default_factory=set)
    buffers: dict = field(default_factory=dict)  # buffer or parameter Var -> Buf
    lets: dict = field(default_factory=dict)  # Let variable -> its value (printed inline)
    stored: set = field(default_factory=set)  # the arrays the kernel stores into
    let_names: dict = field(default_factory=dict)  # (Let variable, lane) -> its declared temporary
    in_branch: int = 0  # > 0 while printing what may not be evaluated (Let values then inline)
    registers: dict = field(default_factory=dict)  # (Buf, index) -> the register it is kept in (promote)
    global_arrays: set = field(default_factory=set)  # the storage buffers' arrays
    workgroup: list = field(default_factory=lambda: [1, 1, 1])
    indent: int = 1
    vec4: dict = field(default_factory=dict)  # storage array -> its vec4 view's array (vector4)
    no_vec4: set = field(default_factory=set)  # arrays kept scalar (stored and also reached as scalars)
    scalar_access: set = field(default_factory=set)  # arrays reached element by element
    vec4_loads: dict = field(default_factory=dict)  # (array, vec4 index) -> temporary, this statement

    # ----------------------------------------------------------------- names
    def fresh(self, hint: str) -> str:
        base = "v_" + "".join(c if c.isalnum() else "_" for c in hint)
        while "__" in base:
            base = base.replace("__", "_")
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def bind(self, var, hint: str | None = None) -> str:
        name = self.fresh(hint or str(var.name))
        self.names[var] = name
        return name

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

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
        elem = _dtype_of_buffer(s.buffer)
        if elem != under.dtype:
            raise UnsupportedError(f"buffer {s.buffer.name} of {elem} over a {under.dtype} buffer")
        offset, aligned4 = under.offset, under.aligned4
        eo = getattr(s.buffer, "elem_offset", None)
        if eo is not None and not (type(eo).__name__ == "IntImm" and int(eo.value) == 0):
            o = self.expr(eo)
            offset = o if offset is None else f"({offset} + {o})"
            aligned4 = aligned4 and _multiple_of(eo, 4)
        self.buffers[s.buffer] = Buf(under.array, under.dtype, under.layout, offset, aligned4)

    def s_AllocBuffer(self, s) -> None:
        buf = s.buffer
        scope = str(buf.ty.storage_scope)
        elem = _dtype_of_buffer(buf)
        size = 1
        for d in buf.ty.shape:
            size *= _const_int(d)
        name = self.fresh(str(buf.name))
        if scope == "shared":
            self.shared.append(f"shared {_scalar(elem)} {name}[{size}];")
        elif scope == "local":
            self.emit(f"{_scalar(elem)} {name}[{size}];")
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
                self.workgroup[i] = _const_int(s.value)
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
        buf, index, n = self.ref(s.buffer), s.indices[0], _lanes(s.value)
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
        t = _scalar(_dtype(s.value))
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
            for line in buf.store(self.expr(index, lane), name):
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
        if _uses(index, inner) or any(_uses(c, inner) for c in guards) or _has_load(index):
            return None
        if any(_has_load(c) for c in guards):
            return None
        # every other access of the loop must not reach this array through another buffer
        if any(a[0] not in self.buffers for a in accesses):
            return None
        idx = self.expr(index)
        if (buf, idx) in self.registers:  # already kept in a register over an enclosing loop
            return None
        guard = " && ".join(f"({self.expr(c)})" for c in guards)
        name = self.fresh(f"{target.name}_acc")
        self.emit(f"{_scalar(buf.dtype)} {name};")
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
        t, n = _scalar(_dtype(s.value)), _lanes(s.value)
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

    # ----------------------------------------------------------------- expressions
    def ref(self, buf) -> Buf:
        if buf not in self.buffers:
            raise UnsupportedError(f"buffer {getattr(buf, 'name', buf)} used before its declaration")
        return self.buffers[buf]

    def vector4(self, buf: Buf, index, lanes: int):
        """(the vec4 view's array, its index) where a 4-lane access of a float storage buffer can be one
        128-bit access: a stride-1 ramp whose first element is provably a multiple of 4 (the buffers are
        bound at offset 0), as TVM's OpenCL code has float4 vload/vstore; None otherwise (lane by lane)."""
        if (
            lanes != 4
            or not VEC4
            or buf.dtype != "float32"
            or buf.layout != "native"
            or buf.array not in self.global_arrays
            or buf.array in self.no_vec4
            or not buf.aligned4
            or type(index).__name__ != "Ramp"
            or type(index.stride).__name__ != "IntImm"
            or int(index.stride.value) != 1
            or not _multiple_of(index.base, 4)
        ):
            self.scalar_access.add(buf.array)
            return None
        if buf.array not in self.vec4:
            self.vec4[buf.array] = self.fresh(buf.array[: -len(".data")] + "_v4") + ".data"
        view = self.vec4[buf.array]
        if buf.offset is None:
            quarter = _quarter(index.base)
            if quarter is not None:
                return view, self.expr(quarter)
        i = self.expr(index.base)
        if buf.offset is not None:
            i = f"({i} + {buf.offset})"
        return view, f"({i}) >> 2"

    def expr(self, e, lane: int | None = None) -> str:
        """``e`` in GLSL; of a vector expression, lane ``lane`` (vectors are printed lane by lane)."""
        kind = type(e).__name__
        if kind in ("And", "Or"):
            if EAGER and not _has_load(e.b):
                # both operands evaluated (they are pure): no branch, as glslang makes of && / ||
                return f"{'all' if kind == 'And' else 'any'}(bvec2({self.expr(e.a, lane)}, {self.expr(e.b, lane)}))"
            # the right operand only where the left does not decide
            return f"({self.expr(e.a, lane)} {BINARY[kind]} {self.conditional(e.b, lane)})"
        if kind in BINARY:
            return f"({self.expr(e.a, lane)} {BINARY[kind]} {self.expr(e.b, lane)})"
        method = getattr(self, "e_" + kind, None)
        if method is None:
            raise UnsupportedError(f"expression {kind} ({str(e)[:60]})")
        if lane is None and kind not in ("Ramp", "Broadcast", "Shuffle") and _lanes(e) > 1:
            raise UnsupportedError(f"a vector expression where a scalar is needed ({str(e)[:60]})")
        return method(e, lane)

    def e_Ramp(self, e, lane) -> str:
        if lane is None:
            raise UnsupportedError(f"a vector index outside a vector access ({str(e)[:60]})")
        if lane == 0:
            return self.expr(e.base)
        return f"({self.expr(e.base)} + {lane} * {self.expr(e.stride)})"

    def e_Broadcast(self, e, lane) -> str:
        return self.expr(e.value, lane)

    def e_Shuffle(self, e, lane) -> str:
        if lane is None:
            raise UnsupportedError(f"a shuffle outside a vector access ({str(e)[:60]})")
        k = int(e.indices[lane].value)
        for v in e.vectors:
            n = _lanes(v)
            if k < n:
                return self.expr(v, k if n > 1 else None)
            k -= n
        raise UnsupportedError(f"a shuffle index out of range ({str(e)[:60]})")

    def conditional(self, e, lane: int | None = None) -> str:
        """``e`` where it may not be evaluated (a branch of ``?:``, the right side of ``&&``): its Let
        values are printed inline, not declared before the statement."""
        self.in_branch += 1
        try:
            return self.expr(e, lane)
        finally:
            self.in_branch -= 1

    def e_Let(self, e, lane) -> str:
        key = (e.var, lane if _lanes(e.value) > 1 else None)
        if self.in_branch:
            self.let_names.pop(key, None)
            self.lets[e.var] = e.value  # inline: substituted where it is used
        else:
            # declared before the statement being printed (its value is pure and evaluated anyway):
            # printed inline, a value used n times would be computed n times (tanh's x*x: 20)
            value = self.expr(e.value, key[1])
            name = self.fresh(str(e.var.name))
            self.emit(f"{_scalar(_dtype(e.value))} {name} = {value};")
            self.let_names[key] = name
        return self.expr(e.body, lane)

    def e_IntImm(self, e, lane=None) -> str:
        dtype = _dtype(e)
        v = int(e.value)
        if dtype == "bool":
            return "true" if v else "false"
        if dtype in ("int32", "int64", "int16", "int8", "uint8", "uint16"):
            if not -(2**31) <= v < 2**31:
                raise UnsupportedError(f"the 64-bit constant {v}")
            return str(v) if v != -(2**31) else "(-2147483647 - 1)"
        if dtype in ("uint32", "uint64"):
            if not 0 <= v < 2**32:
                raise UnsupportedError(f"the 64-bit constant {v}")
            return f"{v}u"
        raise UnsupportedError(f"a constant of type {dtype}")

    def e_FloatImm(self, e, lane=None) -> str:
        if _dtype(e) not in ("float32", "float16"):
            raise UnsupportedError(f"a constant of type {_dtype(e)}")
        return _float_literal(float(e.value))

    def e_Var(self, e, lane=None) -> str:
        for key in ((e, lane), (e, None)):
            if key in self.let_names:
                return self.let_names[key]
        if e in self.lets:
            return f"({self.expr(self.lets[e], lane)})"
        if e in self.names:
            name = self.names[e]
            if isinstance(name, list):  # a vector variable: one scalar per lane
                if lane is None:
                    raise UnsupportedError(f"the vector variable {e.name} where a scalar is needed")
                return name[lane]
            return name
        raise UnsupportedError(f"variable {e.name} used before its definition")

    def e_Cast(self, e, lane=None) -> str:
        elem = _split(_dtype(e))[0]
        value = f"{_scalar(elem)}({self.expr(e.value, lane)})"
        # narrow integers are ints here: keep the low bits as TIR's cast does
        if elem in ("int8", "int16"):
            return f"bitfieldExtract({value}, 0, {elem[3:]})"
        if elem in ("uint8", "uint16"):
            return f"({value} & {255 if elem == 'uint8' else 65535})"
        return value

    def e_Div(self, e, lane=None) -> str:
        if _dtype(e).startswith("float"):
            return f"({self.expr(e.a, lane)} / {self.expr(e.b, lane)})"
        if _split(_dtype(e))[0].startswith("uint"):
            return f"({self.expr(e.a, lane)} / {self.expr(e.b, lane)})"
        return f"tvm_tdiv({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_Mod(self, e, lane=None) -> str:
        if _dtype(e).startswith("float"):
            return f"tvm_fmod({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"
        if _split(_dtype(e))[0].startswith("uint"):
            return f"({self.expr(e.a, lane)} % {self.expr(e.b, lane)})"
        return f"tvm_tmod({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_FloorDiv(self, e, lane=None) -> str:
        if _dtype(e).startswith("float"):
            return f"floor({self.expr(e.a, lane)} / {self.expr(e.b, lane)})"
        return f"tvm_fdiv({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_FloorMod(self, e, lane=None) -> str:
        if _dtype(e).startswith("float"):
            return f"tvm_ffloormod({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"
        return f"tvm_fmod_i({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_Min(self, e, lane=None) -> str:
        return f"min({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_Max(self, e, lane=None) -> str:
        return f"max({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_Not(self, e, lane=None) -> str:
        return f"(!{self.expr(e.a, lane)})"

    def e_BitwiseNot(self, e, lane=None) -> str:
        return f"(~{self.expr(e.a, lane)})"

    def e_Select(self, e, lane=None) -> str:
        c = self.expr(e.condition, lane)
        return f"({c} ? {self.conditional(e.true_value, lane)} : {self.conditional(e.false_value, lane)})"

    def e_TensorLoad(self, e, lane=None) -> str:
        if len(e.indices) != 1:
            raise UnsupportedError(f"a load with {len(e.indices)} indices (not flattened)")
        if getattr(e, "predicate", None) is not None:
            raise UnsupportedError("a predicated load")
        _scalar(_dtype(e))
        index = e.indices[0]
        buf = self.ref(e.source)
        if lane is not None and _lanes(e) == 4 and not self.in_branch:
            v4 = self.vector4(buf, index, 4)
            if v4 is not None:  # one 128-bit load per statement, its lanes taken from a temporary
                key = v4
                if key not in self.vec4_loads:
                    name = self.fresh("v4")
                    self.emit(f"vec4 {name} = {v4[0]}[{v4[1]}];")
                    self.vec4_loads[key] = name
                return f"{self.vec4_loads[key]}.{'xyzw'[lane]}"
        elif buf.array in self.global_arrays:
            self.scalar_access.add(buf.array)
        i = self.expr(index, lane if _lanes(index) > 1 else None)
        return self.registers.get((buf, i)) or buf.load(i)

    def e_Call(self, e, lane=None) -> str:
        op = str(e.op.name) if hasattr(e.op, "name") else str(e.op)
        args = list(e.args)
        if op in ("prim.if_then_else", "tirx.if_then_else"):
            c = self.expr(args[0], lane if _lanes(args[0]) > 1 else None)
            a, b = (self.conditional(x, lane if _lanes(x) > 1 else None) for x in args[1:])
            return f"({c} ? {a} : {b})"
        if op == "tirx.likely":
            return self.expr(args[0], lane)
        if op == "tirx.call_pure_extern" or op == "tirx.call_extern":
            fname = str(args[0].value)
            if fname not in MATH:
                raise UnsupportedError(f"the C function {fname}")
            return f"{MATH[fname]}({', '.join(self.expr(x, lane if _lanes(x) > 1 else None) for x in args[1:])})"
        if op in INTRINSICS:
            return f"{INTRINSICS[op]}({', '.join(self.expr(x, lane if _lanes(x) > 1 else None) for x in args)})"
        if op == "tirx.reinterpret":
            src, dst = _dtype(args[0]), _dtype(e)
            conv = {
                ("float32", "int32"): "floatBitsToInt",
                ("float32", "uint32"): "floatBitsToUint",
                ("int32", "float32"): "intBitsToFloat",
                ("uint32", "float32"): "uintBitsToFloat",
            }.get((src, dst))
            if conv is None:
                raise UnsupportedError(f"reinterpret {src} -> {dst}")
            return f"{conv}({self.expr(args[0], lane)})"
        raise UnsupportedError(f"the intrinsic {op}")


_EXPR_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body")


def _exprs(e):
    """The sub-expressions of an expression."""
    for f in _EXPR_FIELDS:
        x = getattr(e, f, None)
        if x is not None and not isinstance(x, (int, float, str)):
            yield x
    for f in ("args", "indices", "vectors"):
        for x in getattr(e, f, None) or ():
            yield x


def _walk_expr(e, fn) -> None:
    fn(e)
    if type(e).__name__ in ("Var", "IntImm", "FloatImm", "StringImm"):
        return
    for x in _exprs(e):
        _walk_expr(x, fn)


def _uses(e, variables: set) -> bool:
    found = []
    _walk_expr(e, lambda x: found.append(x) if type(x).__name__ == "Var" and x in variables else None)
    return bool(found)


def _has_load(e) -> bool:
    found = []
    _walk_expr(e, lambda x: found.append(x) if type(x).__name__ == "TensorLoad" else None)
    return bool(found)


def _collect(s, guards: list, accesses: list, inner: set) -> bool:
    """The buffer accesses of a statement (buffer, index, enclosing conditions, is_store) and the
    variables it binds; False where it holds what promotion does not follow (barriers, while loops,
    vector or predicated accesses, anything unknown)."""
    kind = type(s).__name__

    def loads(e) -> bool:
        ok = [True]

        def f(x):
            if type(x).__name__ == "TensorLoad":
                if len(x.indices) != 1 or _lanes(x) > 1 or getattr(x, "predicate", None) is not None:
                    ok[0] = False
                else:
                    accesses.append((x.source, x.indices[0], list(guards), False))
            elif type(x).__name__ == "Let":
                inner.add(x.var)
            elif type(x).__name__ == "Call" and "storage_sync" in str(getattr(x.op, "name", "")):
                ok[0] = False

        _walk_expr(e, f)
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
        if len(s.indices) != 1 or _lanes(s.value) > 1 or getattr(s, "predicate", None) is not None:
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


def _dtype_of_buffer(buf) -> str:
    return str(buf.ty.dtype.dtype) if hasattr(buf.ty.dtype, "dtype") else str(buf.ty.dtype)


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


def _multiple_of(e, n: int) -> bool:
    """Whether the integer expression ``e`` is provably a multiple of ``n`` (TVM's modular analysis)."""
    from tvm.sym.analyzer import Analyzer

    try:
        m = Analyzer().modular_set(e)
    except Exception:  # an expression the analysis does not take: not proven
        return False
    return int(m.coeff) % n == 0 and int(m.base) % n == 0


def _quarter(e):
    """``e / 4`` simplified (``e`` a multiple of 4), or None where it keeps a division."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    def divisions(x) -> int:
        found = []
        _walk_expr(x, lambda y: found.append(y) if type(y).__name__ in ("FloorDiv", "Div", "FloorMod", "Mod") else None)
        return len(found)

    try:
        q = Analyzer().simplify(tirx.floordiv(e, 4))
    except Exception:  # not simplified: the caller shifts
        return None
    return q if divisions(q) <= divisions(e) else None


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
            members.append(f"{_scalar(dtype)} {member};")
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
