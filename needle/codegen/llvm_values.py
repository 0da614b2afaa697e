"""Typed values for the LLVM renderer: constants and types that follow scalar or
vector operands, casts between dtypes, powers, intrinsic calls."""
from __future__ import annotations

from llvmlite import ir

from . import vecmath
from .llvm_types import I32, TYPES, is_float


class ValueHelpers:
    """Mixin of the LLVM renderer; uses its builder `self.b` and `self._extern`."""

    def _pow(self, a, b_, dtype):
        """x ** y: vecmath's pow, evaluated in float64 and rounded once, for float32;
        llvm.pow for float64.  (The constant exponents numpy computes without pow, x ** 2
        or x ** 0.5, are rewritten by the lowering: compiler.kernel_exprs.power.)"""
        if dtype == "float32":
            self.transcendental = True  # (an innermost loop of it interleaves: llvm_statements._loop_id)
            return vecmath.pow_f32(self.b, a, b_)
        return self._call_intrinsic("llvm.pow", dtype, [a, b_])

    def cast(self, x, src: str, dst: str):
        b = self.b
        if src == dst:
            return x
        ty = self._ty(dst, x)
        if dst == "bool":
            zero = self._zero(src, x)
            return b.fcmp_unordered("!=", x, zero) if is_float(src) else b.icmp_unsigned("!=", x, zero)
        if is_float(src) and is_float(dst):
            return b.fpext(x, ty) if dst == "float64" else b.fptrunc(x, ty)
        if is_float(src):
            return b.fptosi(x, ty) if dst != "uint8" else b.trunc(b.fptosi(x, self._ty("int32", x)), ty)
        unsigned = src in ("uint8", "bool")
        if is_float(dst):
            return b.uitofp(x, ty) if unsigned else b.sitofp(x, ty)
        sw, dw = TYPES[src].width, TYPES[dst].width
        if sw > dw:
            return b.trunc(x, ty)
        return b.zext(x, ty) if unsigned else b.sext(x, ty)

    def _ty(self, dtype, like=None):
        """The LLVM type of `dtype`, as a vector when `like` is one."""
        if like is not None and isinstance(like.type, ir.VectorType):
            return ir.VectorType(TYPES[dtype], like.type.count)
        return TYPES[dtype]

    def _const(self, value, dtype, like=None):
        value = float(value) if is_float(dtype) else int(value)
        ty = self._ty(dtype, like)
        return ir.Constant(ty, [value] * ty.count if isinstance(ty, ir.VectorType) else value)

    def _zero(self, dtype, like=None):
        return self._const(0, dtype, like)

    def _lanewise(self, fn, x):
        """fn on a scalar, or on each lane of a vector (for libm calls with no vector form)."""
        if not isinstance(x.type, ir.VectorType):
            return fn(x)
        out = ir.Constant(x.type, None)
        for k in range(x.type.count):
            lane = ir.Constant(I32, k)
            out = self.b.insert_element(out, fn(self.b.extract_element(x, lane)), lane)
        return out

    def _unify(self, *values):
        """Broadcast scalars to the vector width when any operand is a vector."""
        width = next((v.type.count for v in values if isinstance(v.type, ir.VectorType)), None)
        if width is None:
            return values
        return tuple(v if isinstance(v.type, ir.VectorType) else self._splat_value(v, width) for v in values)

    def _to_memory(self, value, dtype):
        return self.b.zext(value, self._ty("uint8", value)) if dtype == "bool" else value

    def _from_memory(self, value, dtype):
        return self.b.icmp_unsigned("!=", value, self._zero("uint8", value)) if dtype == "bool" else value

    def _call_intrinsic(self, name, dtype, args, fastmath=()):
        ty = args[0].type
        scalar = {"float32": "f32", "float64": "f64"}[dtype]
        suffix = f"v{ty.count}{scalar}" if isinstance(ty, ir.VectorType) else scalar
        fn = self._extern(f"{name}.{suffix}", ty, [ty] * len(args))
        return self.b.call(fn, args, fastmath=fastmath)

    def _and(self, a, b_):
        if a is None:
            return b_
        if b_ is None:
            return a
        return self.b.and_(a, b_)
