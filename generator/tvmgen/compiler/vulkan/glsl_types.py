"""The GLSL side of tvmgen's GLSL code generator (``compiler.glsl``): TVM's types as GLSL types
(``SCALARS``), storage buffers of each element type and how they are packed (``BUFFER_LAYOUTS``,
``Buf``), TVM's math calls and intrinsics as GLSL functions (``MATH``, ``INTRINSICS``), the helper
functions every shader carries (``HELPERS``), operators and literals."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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


class UnsupportedError(Exception):
    pass


def dtype_of(node) -> str:
    ty = getattr(node, "ty", None)
    dtype = getattr(ty, "dtype", None)
    if dtype is None:
        raise UnsupportedError(f"an expression without a primitive type ({type(node).__name__}: {str(node)[:60]})")
    return str(dtype)


def split_lanes(dtype: str) -> tuple[str, int]:
    """("float32x4") -> ("float32", 4); scalars have 1 lane."""
    m = re.fullmatch(r"([a-z]+[0-9]*)x([0-9]+)", dtype)
    return (m.group(1), int(m.group(2))) if m else (dtype, 1)


def lanes_of(node) -> int:
    return split_lanes(dtype_of(node))[1]


def scalar_type(dtype: str) -> str:
    elem = split_lanes(dtype)[0]
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


def const_int(e) -> int:
    if type(e).__name__ != "IntImm":
        raise UnsupportedError(f"a non-constant extent ({str(e)[:60]})")
    return int(e.value)


def float_literal(v: float) -> str:
    if math.isnan(v):
        return "uintBitsToFloat(0x7fc00000u)"
    if math.isinf(v):
        return "uintBitsToFloat(0x7f800000u)" if v > 0 else "uintBitsToFloat(0xff800000u)"
    text = repr(float(v))
    if "e" not in text and "." not in text:
        text += ".0"
    return text


def buffer_dtype(buf) -> str:
    return str(buf.ty.dtype.dtype) if hasattr(buf.ty.dtype, "dtype") else str(buf.ty.dtype)
