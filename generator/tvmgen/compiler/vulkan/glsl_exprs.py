"""The expression half of tvmgen's GLSL printer (``compiler.glsl``): ``ExprPrinter`` holds the printer's
state (names, buffers, Let temporaries, vec4 views) and prints TIR expressions, lane by lane for vectors,
with 128-bit ``vec4`` accesses where provably aligned; and the TIR expression walks both halves use
(``walk_expr``, ``uses_any``, ``has_load``, ``multiple_of``, ``quarter_of``). ``glsl._Printer`` adds the
statements."""

# ruff: noqa: N802 - the printer dispatches on TVM node class names (e_Call)

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tvmgen.compiler.vulkan.glsl_types import (
    BINARY,
    INTRINSICS,
    MATH,
    Buf,
    UnsupportedError,
    dtype_of,
    float_literal,
    lanes_of,
    scalar_type,
    split_lanes,
)

# Switches of the printer's optimizations, to compare them on a device (docs/vulkan.md; glsl has the others):
# 128-bit loads and stores of 4-lane float vectors (ExprPrinter.vector4); TVMGEN_GLSL_VEC4=0: lane by lane
VEC4 = os.environ.get("TVMGEN_GLSL_VEC4", "1") != "0"
# && / || with a right operand that loads nothing: both evaluated, no branch; TVMGEN_GLSL_EAGER=0: && / ||
EAGER = os.environ.get("TVMGEN_GLSL_EAGER", "1") != "0"


@dataclass
class ExprPrinter:
    """One kernel's printer state, and its expressions in GLSL."""

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

    # ----------------------------------------------------------------- expressions
    def ref(self, buf) -> Buf:
        if buf not in self.buffers:
            raise UnsupportedError(f"buffer {getattr(buf, 'name', buf)} used before its declaration")
        return self.buffers[buf]

    def element(self, buf: Buf, index, lane: int | None) -> str:
        """The scalar element ``lane`` of an access at ``index``: a ramp's lane, or, where the array's type is
        itself a vector (``float32x2`` registers a vectorised schedule keeps) and the index counts its
        vectors, that vector's lane among the scalars the array is declared as."""
        vector = split_lanes(buf.dtype)[1]
        if vector > 1 and lanes_of(index) == 1:
            return f"(({self.expr(index)}) * {vector} + {lane or 0})"
        return self.expr(index, lane if lanes_of(index) > 1 else None)

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
            or not multiple_of(index.base, 4)
        ):
            self.scalar_access.add(buf.array)
            return None
        if buf.array not in self.vec4:
            self.vec4[buf.array] = self.fresh(buf.array[: -len(".data")] + "_v4") + ".data"
        view = self.vec4[buf.array]
        if buf.offset is None:
            quarter = quarter_of(index.base)
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
            if EAGER and not has_load(e.b):
                # both operands evaluated (they are pure): no branch, as glslang makes of && / ||
                return f"{'all' if kind == 'And' else 'any'}(bvec2({self.expr(e.a, lane)}, {self.expr(e.b, lane)}))"
            # the right operand only where the left does not decide
            return f"({self.expr(e.a, lane)} {BINARY[kind]} {self.conditional(e.b, lane)})"
        if kind in BINARY:
            return f"({self.expr(e.a, lane)} {BINARY[kind]} {self.expr(e.b, lane)})"
        method = getattr(self, "e_" + kind, None)
        if method is None:
            raise UnsupportedError(f"expression {kind} ({str(e)[:60]})")
        if lane is None and kind not in ("Ramp", "Broadcast", "Shuffle") and lanes_of(e) > 1:
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
            n = lanes_of(v)
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
        key = (e.var, lane if lanes_of(e.value) > 1 else None)
        if self.in_branch:
            self.let_names.pop(key, None)
            self.lets[e.var] = e.value  # inline: substituted where it is used
        else:
            # declared before the statement being printed (its value is pure and evaluated anyway):
            # printed inline, a value used n times would be computed n times (tanh's x*x: 20)
            value = self.expr(e.value, key[1])
            name = self.fresh(str(e.var.name))
            self.emit(f"{scalar_type(dtype_of(e.value))} {name} = {value};")
            self.let_names[key] = name
        return self.expr(e.body, lane)

    def e_IntImm(self, e, lane=None) -> str:
        dtype = dtype_of(e)
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
        if dtype_of(e) not in ("float32", "float16"):
            raise UnsupportedError(f"a constant of type {dtype_of(e)}")
        return float_literal(float(e.value))

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
        elem = split_lanes(dtype_of(e))[0]
        value = f"{scalar_type(elem)}({self.expr(e.value, lane)})"
        # narrow integers are ints here: keep the low bits as TIR's cast does
        if elem in ("int8", "int16"):
            return f"bitfieldExtract({value}, 0, {elem[3:]})"
        if elem in ("uint8", "uint16"):
            return f"({value} & {255 if elem == 'uint8' else 65535})"
        return value

    def e_Div(self, e, lane=None) -> str:
        if dtype_of(e).startswith("float"):
            return f"({self.expr(e.a, lane)} / {self.expr(e.b, lane)})"
        if split_lanes(dtype_of(e))[0].startswith("uint"):
            return f"({self.expr(e.a, lane)} / {self.expr(e.b, lane)})"
        return f"tvm_tdiv({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_Mod(self, e, lane=None) -> str:
        if dtype_of(e).startswith("float"):
            return f"tvm_fmod({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"
        if split_lanes(dtype_of(e))[0].startswith("uint"):
            return f"({self.expr(e.a, lane)} % {self.expr(e.b, lane)})"
        return f"tvm_tmod({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_FloorDiv(self, e, lane=None) -> str:
        if dtype_of(e).startswith("float"):
            return f"floor({self.expr(e.a, lane)} / {self.expr(e.b, lane)})"
        return f"tvm_fdiv({self.expr(e.a, lane)}, {self.expr(e.b, lane)})"

    def e_FloorMod(self, e, lane=None) -> str:
        if dtype_of(e).startswith("float"):
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
        scalar_type(dtype_of(e))
        index = e.indices[0]
        buf = self.ref(e.source)
        if lane is not None and lanes_of(e) == 4 and not self.in_branch:
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
        i = self.element(buf, index, lane)
        return self.registers.get((buf, i)) or buf.load(i)

    def e_Call(self, e, lane=None) -> str:
        op = str(e.op.name) if hasattr(e.op, "name") else str(e.op)
        args = list(e.args)
        if op in ("prim.if_then_else", "tirx.if_then_else"):
            c = self.expr(args[0], lane if lanes_of(args[0]) > 1 else None)
            a, b = (self.conditional(x, lane if lanes_of(x) > 1 else None) for x in args[1:])
            return f"({c} ? {a} : {b})"
        if op == "tirx.likely":
            return self.expr(args[0], lane)
        if op == "tirx.call_pure_extern" or op == "tirx.call_extern":
            fname = str(args[0].value)
            if fname not in MATH:
                raise UnsupportedError(f"the C function {fname}")
            return f"{MATH[fname]}({', '.join(self.expr(x, lane if lanes_of(x) > 1 else None) for x in args[1:])})"
        if op in INTRINSICS:
            return f"{INTRINSICS[op]}({', '.join(self.expr(x, lane if lanes_of(x) > 1 else None) for x in args)})"
        if op == "tirx.reinterpret":
            src, dst = dtype_of(args[0]), dtype_of(e)
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


EXPR_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body")


def sub_exprs(e):
    """The sub-expressions of an expression."""
    for f in EXPR_FIELDS:
        x = getattr(e, f, None)
        if x is not None and not isinstance(x, (int, float, str)):
            yield x
    for f in ("args", "indices", "vectors"):
        for x in getattr(e, f, None) or ():
            yield x


def walk_expr(e, fn) -> None:
    fn(e)
    if type(e).__name__ in ("Var", "IntImm", "FloatImm", "StringImm"):
        return
    for x in sub_exprs(e):
        walk_expr(x, fn)


def uses_any(e, variables: set) -> bool:
    found = []
    walk_expr(e, lambda x: found.append(x) if type(x).__name__ == "Var" and x in variables else None)
    return bool(found)


def has_load(e) -> bool:
    found = []
    walk_expr(e, lambda x: found.append(x) if type(x).__name__ == "TensorLoad" else None)
    return bool(found)


def multiple_of(e, n: int) -> bool:
    """Whether the integer expression ``e`` is provably a multiple of ``n`` (TVM's modular analysis)."""
    from tvm.sym.analyzer import Analyzer

    try:
        m = Analyzer().modular_set(e)
    except Exception:  # an expression the analysis does not take: not proven
        return False
    return int(m.coeff) % n == 0 and int(m.base) % n == 0


def quarter_of(e):
    """``e / 4`` simplified (``e`` a multiple of 4), or None where it keeps a division."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    def divisions(x) -> int:
        found = []
        walk_expr(x, lambda y: found.append(y) if type(y).__name__ in ("FloorDiv", "Div", "FloorMod", "Mod") else None)
        return len(found)

    try:
        q = Analyzer().simplify(tirx.floordiv(e, 4))
    except Exception:  # not simplified: the caller shifts
        return None
    return q if divisions(q) <= divisions(e) else None
