"""exp, log, tanh, sigmoid and pow for float32 (scalars or vectors) as inline,
branch-free LLVM IR.

`llvm.exp.f32` vectorizes in IR but the backend turns it into one scalar `expf`
call per lane (slower than numpy).  These functions are plain arithmetic, bit
casts and selects, so the loop vectorizer turns them into full-width SIMD.

Accuracy, measured against float64 rounded to float32 (tests/codegen/
test_vecmath_accuracy.py; exhaustively over every float32 of exp's and tanh's
working ranges): within 1 ulp of the correctly rounded result everywhere.

- exp, log, tanh: Cephes-style float32 polynomials, at the float32 vector
  width; about 3% of results are 1 ulp off (exp(float32(4.55)) = 94.63242 is
  correctly rounded).  (A float64 evaluation rounded once was correctly rounded
  but for 3e-6 of inputs, and cost 1.2x-1.6x in fused kernels: half the lanes.)
- pow, sigmoid: evaluated in float64 (relative error below 2**-34) and rounded
  once: correctly rounded but for rare 1-ulp cases.  float32 pow has no cheap
  accurate float32 form (y ln x needs more than float32's bits), and sigmoid's
  1 / (1 + e**-x) in float32 loses up to 3 ulp to its roundings.

Special values follow C99 / numpy: exp(-inf)=0, exp(inf)=inf, log(0)=-inf,
log(x<0)=nan, nan stays nan, and pow's table (pow(x, 0)=1, pow(1, y)=1, ...).
"""
from __future__ import annotations

import math

from llvmlite import ir

F32, F64 = ir.FloatType(), ir.DoubleType()
I32, I64 = ir.IntType(32), ir.IntType(64)

# (e**r - 1 - r) / r**2 on |r| <= ln2/2, e**r to 2**-39 (weighted least squares on Chebyshev nodes)
_EXP_POLY = (2.4637704429239042e-05, 1.990964423332857e-04, 1.3889376119634702e-03, 8.333280615446132e-03,
             4.1666662995569675e-02, 1.6666666789187648e-01, 5.000000000760393e-01)
# log(1+f) = s * (2 + s**2 Q(s**2)) with s = f / (2 + f), |s| <= 0.1716: Q to 2**-36, log to 2**-44
_LOG_POLY = (1.9363786631253382e-01, 2.2191344719715966e-01, 2.8571755373368757e-01, 3.99999987935541e-01,
             6.666666666737752e-01)
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: t + SHIFTER rounds t to an integer held in the low bits
# exp's argument is clamped to where float32 results are surely 0 or inf (and 2**n stays a normal double)
_EXP_LO, _EXP_HI = -160.0, 100.0


class _Kit:
    """Constants, intrinsics and conversions for scalars or vectors of one float type."""

    def __init__(self, b: ir.IRBuilder, fty, lanes: int):
        self.b, self.lanes = b, lanes
        self.fty = ir.VectorType(fty, lanes) if lanes else fty
        ity = I64 if fty == F64 else I32
        self.ity = ir.VectorType(ity, lanes) if lanes else ity

    @classmethod
    def like(cls, b: ir.IRBuilder, x, fty=F32) -> "_Kit":
        return cls(b, fty, x.type.count if isinstance(x.type, ir.VectorType) else 0)

    def f(self, v: float):
        return ir.Constant(self.fty, [v] * self.lanes if self.lanes else v)

    def i(self, v: int):
        return ir.Constant(self.ity, [v] * self.lanes if self.lanes else v)

    def intrinsic(self, name: str, *args):
        suffix = f"v{self.lanes}f{self.fty_bits}" if self.lanes else f"f{self.fty_bits}"
        name = f"{name}.{suffix}"
        module = self.b.module
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(self.fty, [self.fty] * len(args)),
                                                      name=name)
        return self.b.call(fn, list(args))

    @property
    def fty_bits(self) -> int:
        element = self.fty.element if self.lanes else self.fty
        return 64 if element == F64 else 32

    def fma(self, a, b, c):
        return self.intrinsic("llvm.fma", a, b, c)

    def horner(self, x, coeffs):
        """((c0 x + c1) x + c2) ... with separately rounded products and sums (the
        float32 functions' accuracy was measured so; fma would change their results)."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.b.fadd(self.b.fmul(acc, x), self.f(c))
        return acc

    def poly(self, x, coeffs):
        """Horner with fma: ((c0 x + c1) x + c2) ..."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fma(acc, x, self.f(c))
        return acc

    def lt(self, a, c: float):
        return self.b.fcmp_ordered("<", a, self.f(c))

    def clamp(self, x, lo: float, hi: float):
        """min(max(x, lo), hi), with nan -> lo (callers restore nan themselves)."""
        x = self.b.select(self.b.fcmp_ordered(">", x, self.f(lo)), x, self.f(lo))
        return self.b.select(self.lt(x, hi), x, self.f(hi))


def _wide(b: ir.IRBuilder, x):
    """(float32 kit, float64 kit, x as float64)."""
    k32 = _Kit.like(b, x)
    k64 = _Kit(b, F64, k32.lanes)
    return k32, k64, b.fpext(x, k64.fty)


def _exp_core(k: _Kit, t):
    """e**t in float64 for t in [_EXP_LO, _EXP_HI]: t = n ln2 + r, |r| <= ln2/2,
    e**r by the polynomial, 2**n written into the exponent bits."""
    b = k.b
    shifted = k.fma(t, k.f(1.4426950408889634), k.f(_SHIFTER))
    n = b.fsub(shifted, k.f(_SHIFTER))
    r = k.fma(n, k.f(-math.log(2.0)), t)  # |n| <= 231: off by 231 * 2**-54 at most, 2**-46 of e**t
    p = k.poly(r, _EXP_POLY)
    er = k.fma(b.fmul(r, r), p, r)                    # e**r - 1
    er = b.fadd(er, k.f(1.0))
    # the low bits of `shifted` hold n; (n + 1023) << 52 is 2**n (n + 1023 is in 0..2047)
    scale = b.bitcast(b.shl(b.add(b.bitcast(shifted, k.ity), k.i(1023)), k.i(52)), k.fty)
    return b.fmul(er, scale)


def _log_core(k: _Kit, a):
    """ln a in float64 for a positive normal double: a = m 2**e with m in
    [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m-1)/(m+1)) by the odd series."""
    b = k.b
    bits = b.bitcast(a, k.ity)
    m = b.bitcast(b.or_(b.and_(bits, k.i(0x000FFFFFFFFFFFFF)), k.i(0x3FF0000000000000)), k.fty)  # [1, 2)
    # e + 2**52 as a double: the biased exponent under the exponent bits of 2**52
    e = b.fsub(b.bitcast(b.or_(b.lshr(bits, k.i(52)), k.i(0x4330000000000000)), k.fty), k.f(4503599627371519.0))
    big = b.fcmp_ordered(">", m, k.f(math.sqrt(2.0)))
    m = b.select(big, b.fmul(m, k.f(0.5)), m)
    e = b.select(big, b.fadd(e, k.f(1.0)), e)
    f = b.fsub(m, k.f(1.0))
    s = b.fdiv(f, b.fadd(f, k.f(2.0)))
    s2 = b.fmul(s, s)
    log_m = k.fma(b.fmul(s, s2), k.poly(s2, _LOG_POLY), b.fadd(s, s))
    return k.fma(e, k.f(math.log(2.0)), log_m)


def exp_f32(b: ir.IRBuilder, x):
    """e**x: x = n ln2 + r, e**r by a degree-6 polynomial, 2**n built in the exponent
    bits (split in two factors so that n from -150 to 128 stays representable)."""
    k = _Kit.like(b, x)
    _f, _i, _poly = k.f, k.i, (lambda b_, x_, c: k.horner(x_, c))
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
    k = _Kit.like(b, x)
    _f, _i, _poly = k.f, k.i, (lambda b_, x_, c: k.horner(x_, c))
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
    k = _Kit.like(b, x)
    _f, _poly = k.f, (lambda b_, x_, c: k.horner(x_, c))
    ax = k.intrinsic("llvm.fabs", x)
    z = b.fmul(x, x)
    small = _poly(b, z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                         1.33314422036e-1, -3.33332819422e-1])
    small = b.fadd(b.fmul(b.fmul(small, z), x), x)
    t = exp_f32(b, b.fmul(ax, _f(2.0)))
    large = b.fsub(_f(1.0), b.fdiv(_f(2.0), b.fadd(t, _f(1.0))))
    # the sign from x last: the polynomial gives +0 for -0 (-0 + -0 * ... * -0 = -0 + 0)
    return k.intrinsic("llvm.copysign", b.select(b.fcmp_ordered("<", ax, _f(0.625)), small, large), x)


def sigmoid_f32(b: ir.IRBuilder, x):
    """1 / (1 + e**-x) with z = e**-|x| in (0, 1]: 1 / (1 + z) for x >= 0, z / (1 + z)
    below, so it neither overflows nor loses relative precision for negative x."""
    k32, k64, xd = _wide(b, x)
    z = _exp_core(k64, k64.clamp(b.fneg(k64.intrinsic("llvm.fabs", xd)), _EXP_LO, 0.0))
    p = b.fdiv(k64.f(1.0), b.fadd(z, k64.f(1.0)))
    out = b.select(b.fcmp_ordered(">=", xd, k64.f(0.0)), p, b.fmul(z, p))
    return b.select(b.fcmp_unordered("uno", x, x), x, b.fptrunc(out, k32.fty))


def pow_f32(b: ir.IRBuilder, x, y):
    """x**y = ±e**(y ln|x|), the sign negative for x < 0 (or -0) and an odd integer y;
    nan for a finite x < 0 and a non-integer y; then C99's table: pow(x, ±0) = 1,
    pow(1, y) = 1, pow(-1, ±inf) = 1.  Zeros and infinities of x need no case of their
    own: ln|x| = ∓inf, and e**(±inf) gives 0 or inf."""
    k32, k64, xd = _wide(b, x)
    yd = b.fpext(y, k64.fty)
    ax = k64.intrinsic("llvm.fabs", xd)
    finite_nonzero = b.and_(b.fcmp_ordered(">", ax, k64.f(0.0)), k64.lt(ax, math.inf))
    log_ax = _log_core(k64, b.select(finite_nonzero, ax, k64.f(1.0)))
    log_ax = b.select(b.fcmp_ordered("==", ax, k64.f(0.0)), k64.f(-math.inf), log_ax)
    log_ax = b.select(b.fcmp_ordered("==", ax, k64.f(math.inf)), k64.f(math.inf), log_ax)
    t = b.fmul(yd, log_ax)
    magnitude = _exp_core(k64, k64.clamp(t, _EXP_LO, _EXP_HI))
    # y's parity: float32 values of magnitude 2**24 and above are even integers
    ay = k32.intrinsic("llvm.fabs", y)
    integer = b.fcmp_ordered("==", k32.intrinsic("llvm.roundeven", y), y)
    y_small = b.select(k32.lt(ay, 16777216.0), y, k32.f(0.0))
    odd = b.and_(b.trunc(b.fptosi(y_small, k32.ity), _bool_type(k32)), integer)
    negative = b.icmp_signed("<", b.bitcast(x, k32.ity), k32.i(0))
    out = b.fptrunc(magnitude, k32.fty)
    out = b.select(b.and_(negative, odd), b.fneg(out), out)
    nan = b.or_(b.fcmp_unordered("uno", x, y),
                b.and_(b.and_(b.fcmp_ordered("<", x, k32.f(0.0)), b.fcmp_ordered(">", x, k32.f(-math.inf))),
                       b.xor(integer, _true(k32))))
    out = b.select(nan, k32.f(math.nan), out)
    one = b.or_(b.fcmp_ordered("==", y, k32.f(0.0)), b.fcmp_ordered("==", x, k32.f(1.0)))
    one = b.or_(one, b.and_(b.fcmp_ordered("==", k32.intrinsic("llvm.fabs", x), k32.f(1.0)),
                            b.fcmp_ordered("==", ay, k32.f(math.inf))))
    return b.select(one, k32.f(1.0), out)


def _bool_type(k: _Kit):
    return ir.VectorType(ir.IntType(1), k.lanes) if k.lanes else ir.IntType(1)


def _true(k: _Kit):
    return ir.Constant(_bool_type(k), [1] * k.lanes if k.lanes else 1)
