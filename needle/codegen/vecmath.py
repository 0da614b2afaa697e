"""exp, log and tanh for float32 (scalars or vectors) as inline, branch-free LLVM IR.

`llvm.exp.f32` vectorizes in IR but the backend turns it into one scalar `expf`
call per lane (slower than numpy).  These Cephes-style polynomials (about 1 ulp)
are plain arithmetic, bit casts and selects, so the loop vectorizer turns them
into full-width SIMD.  Special values follow numpy: exp(-inf)=0, exp(inf)=inf,
log(0)=-inf, log(x<0)=nan, nan stays nan.
"""
from __future__ import annotations

import math

from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)


class _Kit:
    """Constants, types and intrinsic names for scalars or vectors of float32."""

    def __init__(self, b, ty):
        self.b = b
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else 0
        self.fty = ty
        self.ity = ir.VectorType(I32, self.lanes) if self.lanes else I32
        self.suffix = f"v{self.lanes}f32" if self.lanes else "f32"

    def f(self, v: float):
        return ir.Constant(self.fty, [v] * self.lanes if self.lanes else v)

    def i(self, v: int):
        return ir.Constant(self.ity, [v] * self.lanes if self.lanes else v)

    def poly(self, x, coeffs):
        """Horner: ((c0 * x + c1) * x + c2) ..."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.b.fadd(self.b.fmul(acc, x), self.f(c))
        return acc

    def intrinsic(self, name: str, *args):
        name = f"{name}.{self.suffix}"
        module = self.b.module
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(self.fty, [self.fty] * len(args)),
                                                      name=name)
        return self.b.call(fn, list(args))


def exp_f32(b: ir.IRBuilder, x):
    """e**x: x = n ln2 + r, e**r by a degree-6 polynomial, 2**n built in the exponent
    bits (split in two factors so that n from -150 to 128 stays representable)."""
    k = _Kit(b, x.type)
    _f, _i, _poly = k.f, k.i, (lambda b_, x_, c: k.poly(x_, c))
    is_nan = b.fcmp_unordered("uno", x, x)
    xc = b.select(b.fcmp_ordered(">", x, _f(88.8)), _f(88.8), x)
    xc = b.select(b.fcmp_ordered("<", xc, _f(-104.0)), _f(-104.0), xc)
    xc = b.select(is_nan, _f(0.0), xc)
    fx = k.intrinsic("llvm.floor", b.fadd(b.fmul(xc, _f(1.44269504088896341)), _f(0.5)))
    r = b.fsub(xc, b.fmul(fx, _f(0.693359375)))
    r = b.fsub(r, b.fmul(fx, _f(-2.12194440e-4)))
    z = b.fmul(r, r)
    y = _poly(b, r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                     4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1])
    y = b.fadd(b.fadd(b.fmul(y, z), r), _f(1.0))
    n = b.fptosi(fx, k.ity)
    n1 = b.ashr(n, _i(1))
    n2 = b.sub(n, n1)
    p1 = b.bitcast(b.shl(b.add(n1, _i(127)), _i(23)), k.fty)
    p2 = b.bitcast(b.shl(b.add(n2, _i(127)), _i(23)), k.fty)
    out = b.fmul(b.fmul(y, p1), p2)
    out = b.select(b.fcmp_ordered(">", x, _f(88.7228394)), _f(math.inf), out)
    out = b.select(b.fcmp_ordered("<", x, _f(-103.972084)), _f(0.0), out)
    return b.select(is_nan, x, out)


def log_f32(b: ir.IRBuilder, x):
    """ln x: x = m 2**e with m in [sqrt(1/2), sqrt(2)), ln(m) by a degree-9
    polynomial; subnormal inputs are scaled by 2**23 first."""
    k = _Kit(b, x.type)
    _f, _i, _poly = k.f, k.i, (lambda b_, x_, c: k.poly(x_, c))
    tiny = b.fcmp_ordered("<", x, _f(1.17549435e-38))
    xs = b.select(tiny, b.fmul(x, _f(8388608.0)), x)
    bits = b.bitcast(xs, k.ity)
    e = b.sub(b.lshr(bits, _i(23)), _i(126))
    e = b.select(tiny, b.sub(e, _i(23)), e)
    m = b.bitcast(b.or_(b.and_(bits, _i(0x007FFFFF)), _i(0x3F000000)), k.fty)
    small = b.fcmp_ordered("<", m, _f(0.707106781186547524))
    e = b.select(small, b.sub(e, _i(1)), e)
    m = b.select(small, b.fsub(b.fadd(m, m), _f(1.0)), b.fsub(m, _f(1.0)))
    ef = b.sitofp(e, k.fty)
    z = b.fmul(m, m)
    y = _poly(b, m, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                     1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                     3.3333331174e-1])
    y = b.fmul(b.fmul(y, m), z)
    y = b.fadd(y, b.fmul(ef, _f(-2.12194440e-4)))
    y = b.fadd(y, b.fmul(z, _f(-0.5)))
    out = b.fadd(b.fadd(m, y), b.fmul(ef, _f(0.693359375)))
    out = b.select(b.fcmp_ordered("==", x, _f(math.inf)), _f(math.inf), out)
    out = b.select(b.fcmp_ordered("==", x, _f(0.0)), _f(-math.inf), out)
    out = b.select(b.fcmp_ordered("<", x, _f(0.0)), _f(math.nan), out)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


def tanh_f32(b: ir.IRBuilder, x):
    """tanh x: an odd polynomial for |x| < 0.625, else 1 - 2 / (e**(2|x|) + 1)."""
    k = _Kit(b, x.type)
    _f, _poly = k.f, (lambda b_, x_, c: k.poly(x_, c))
    ax = k.intrinsic("llvm.fabs", x)
    z = b.fmul(x, x)
    small = _poly(b, z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                         1.33314422036e-1, -3.33332819422e-1])
    small = b.fadd(b.fmul(b.fmul(small, z), x), x)
    t = exp_f32(b, b.fmul(ax, _f(2.0)))
    large = b.fsub(_f(1.0), b.fdiv(_f(2.0), b.fadd(t, _f(1.0))))
    large = k.intrinsic("llvm.copysign", large, x)
    return b.select(b.fcmp_ordered("<", ax, _f(0.625)), small, large)
