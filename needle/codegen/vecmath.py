"""exp, log, tanh, sigmoid and pow for float32 (scalars or vectors) as inline,
branch-free LLVM IR.

`llvm.exp.f32` vectorizes in IR but the backend turns it into one scalar `expf`
call per lane (slower than numpy).  These functions are plain arithmetic, bit
casts and selects, so the loop vectorizer turns them into full-width SIMD.

Accuracy, measured against float64 rounded to float32 (tests/codegen/
test_vecmath_accuracy.py, on dense samples for AVX-512, AVX2 and SSE code; and
once over all 2**32 inputs of exp, log, tanh and sigmoid in AVX-512 and in AVX2
code): within 1 ulp of the correctly rounded result everywhere.

- exp, log, tanh, sigmoid: float32 polynomials with fma (Horner), at the float32
  vector width; 2% (exp), 5% (log), 0.6% (tanh) and 1.4% (sigmoid; 0.14% of all
  2**32 inputs) of the test's results are 1 ulp off (exp(float32(4.55)) = 94.63242
  is correctly rounded; exp's AVX-512 form, see exp_f32, was checked over all 2**32
  again).  fma is required for the error bounds (exp's reduction relies on an exact
  fma); on a CPU without it llvm.fma is a libm call: correct, slow.  (A float64
  evaluation rounded once was correctly rounded but for 3e-6 of inputs, and cost
  more in fused kernels: half the lanes.)  sigmoid's plain 1 / (1 + e**-x) in float32 loses up to 3 ulp
  to its roundings: it tracks them (error-free transformations) and corrects its
  one division.
- pow: evaluated in float64 (relative error below 2**-34) and rounded once:
  correctly rounded but for rare 1-ulp cases.  float32 pow has no cheap accurate
  float32 form (y ln x needs more than float32's bits).

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
# float32 e**r = 1 + r + r**2 P(r) on |r| <= ln2/2: relative error 2**-28 (near-minimax, float32 coefficients)
_EXP_POLY32 = (1.3814596459269524e-03, 8.3687175065279e-03, 4.166838899254799e-02, 1.666652113199234e-01,
               4.999999403953552e-01)
# float32 ln(1 + f) = f + f**2 Q(f) on [sqrt(1/2) - 1, sqrt(2) - 1]: relative error 2**-27.4
_LOG_POLY32 = (-0.0762307345867157, 0.1290602833032608, -0.13243234157562256, 0.14181570708751678,
               -0.166090190410614, 0.20001986622810364, -0.25001585483551025, 0.33333325386047363,
               -0.49999988079071045)
# tanh x = x + x**3 P(x**2) for |x| < 0.625 (Cephes)
_TANH_POLY32 = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
_SQRT_HALF_BITS = 0x3F3504F3  # float32 sqrt(1/2)
_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.6931471824645996, -1.904654323148236e-09  # float32(ln2), float32(ln2 - _LN2_HI)
_SHIFTER32 = 12582912.0  # 1.5 * 2**23: the float32 sum t + SHIFTER32 is t rounded to an integer
_EXP32_LO, _EXP32_HI = -104.0, 89.0
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


def _exp_split(k: _Kit, x, one_step: bool = False):
    """(z, n, r) with x = n ln2 + r for float32 x with |x| <= 105 (nan passes
    through): n = roundeven(x log2e) as a float by the shifter trick (z = n + the
    shifter, whose low bits hold n), |r| <= ln2/2 by a two-constant Cody-Waite step
    (the first fma is exact: n ln2_hi and x are multiples of 2**-25 and r needs 24 bits).
    `one_step`: r = x - n float32(ln2) in one fma, off by n 1.9e-9 (for callers whose
    result damps e**x's relative error, as tanh's does)."""
    b = k.b
    z = k.fma(x, k.f(_LOG2E), k.f(_SHIFTER32))
    n = b.fsub(z, k.f(_SHIFTER32))
    if one_step:
        return z, n, k.fma(n, k.f(-math.log(2.0)), x)
    r = k.fma(n, k.f(-_LN2_HI), x)
    return z, n, k.fma(n, k.f(-_LN2_LO), r)


def _exp_reduce(k: _Kit, x, one_step: bool = False):
    """(z, q) with e**x = 2**n (1 + q) for float32 x with |x| <= 105 (nan passes
    through): z and r from _exp_split (`one_step`: its one-fma reduction), q = e**r - 1
    by r + r**2 P(r)."""
    z, _, r = _exp_split(k, x, one_step)
    return z, k.fma(k.b.fmul(r, r), k.poly(r, _EXP_POLY32), r)


def _pow2(k: _Kit, z, bias):
    """The float32 with bits (n << 23) + bias, for n in `_exp_reduce`'s z: 2**n times
    the power of two whose bits are `bias` (while the sum stays a normal float's
    exponent).  z's bits << 23 are n << 23: the shifter's bits shift out."""
    b = k.b
    return b.bitcast(b.add(b.shl(b.bitcast(z, k.ity), k.i(23)), bias), k.fty)


def exp_f32(b: ir.IRBuilder, x, scalef: bool = False):
    """e**x = (s + s q) c with one clamp that makes the special values fall out: x is
    clamped to [-104, 89] (nan passes), where e**-104 rounds to 0 and e**89 overflows.
    2**n = s c with c = 2 for x > 0 and 2**-24 below keeps s a normal float32 for n
    from -151 to 128.  s + s q is one fma (one rounding); the product with c is exact
    but for subnormal results, which it rounds a second time (the first rounding is
    then at most 1/4 of a subnormal ulp: still within 1 ulp).

    With `scalef` (AVX-512 targets, where llvm.ldexp is one `vscalefps`), e**r is
    the polynomial by Horner to its constant 1 and 2**n is applied by ldexp, which
    overflows, underflows and rounds subnormals itself: 18 vector instructions instead
    of 21, and 6.3% of results on [-87, 88] 1 ulp off instead of 9.5% (its last step,
    1 + r p, rounds once).  (Elsewhere ldexp is a libm call per lane.)"""
    k = _Kit.like(b, x)
    xc = b.select(k.lt(x, _EXP32_LO), k.f(_EXP32_LO), x)
    xc = b.select(b.fcmp_ordered(">", xc, k.f(_EXP32_HI)), k.f(_EXP32_HI), xc)
    if scalef:
        _, n, r = _exp_split(k, xc)
        return _ldexp(k, k.poly(r, _EXP_POLY32 + (1.0, 1.0)), b.fptosi(n, k.ity))
    z, q = _exp_reduce(k, xc)
    positive = b.fcmp_ordered(">", xc, k.f(0.0))
    s = _pow2(k, z, b.select(positive, k.i((127 - 1) << 23), k.i((127 + 24) << 23)))
    return b.fmul(k.fma(s, q, s), b.select(positive, k.f(2.0), k.f(2.0 ** -24)))


def _ldexp(k: _Kit, v, n):
    """v * 2**n for float32 v and int32 n (llvm.ldexp)."""
    suffix = f"v{k.lanes}f32.v{k.lanes}i32" if k.lanes else "f32.i32"
    module = k.b.module
    name = "llvm.ldexp." + suffix
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(k.fty, [k.fty, k.ity]), name=name)
    return k.b.call(fn, [v, n])


def log_f32(b: ir.IRBuilder, x):
    """ln x = n ln2 + ln(1 + f) with x = (1 + f) 2**n, 1 + f in [sqrt(1/2), sqrt(2)): n and
    f come from one integer subtraction of sqrt(1/2)'s bits; ln(1 + f) = f + f**2 Q(f).
    Subnormal inputs are scaled by 2**23 first.  n ln2 and ln(1 + f) add in one fma,
    with ln2 rounded to float32 (relative error 2.7e-9, 0.05 ulp) rather than split in
    two: the low part's extra rounding would cost more when n = +-1."""
    k = _Kit.like(b, x)
    _f, _i = k.f, k.i
    tiny = k.lt(x, 1.17549435e-38)  # subnormals (and zero and negatives, which are replaced below)
    xs = b.select(tiny, b.fmul(x, _f(8388608.0)), x)
    u = b.sub(b.bitcast(xs, k.ity), _i(_SQRT_HALF_BITS))
    n = b.ashr(u, _i(23))
    n = b.select(tiny, b.sub(n, _i(23)), n)
    f = b.fsub(b.bitcast(b.add(b.and_(u, _i(0x007FFFFF)), _i(_SQRT_HALF_BITS)), k.fty), _f(1.0))
    out = k.fma(b.sitofp(n, k.fty), _f(_LN2_HI), k.fma(b.fmul(f, f), k.poly(f, _LOG_POLY32), f))
    out = b.select(b.fcmp_ordered("==", x, _f(math.inf)), _f(math.inf), out)
    out = b.select(b.fcmp_ordered("==", x, _f(0.0)), _f(-math.inf), out)
    return b.select(b.fcmp_unordered("<", x, _f(0.0)), _f(math.nan), out)  # x < 0 or nan


def tanh_f32(b: ir.IRBuilder, x):
    """tanh x: an odd polynomial for |x| < 0.625, else 1 - 2 / (e**(2|x|) + 1) with |x|
    clamped to 9.5 (tanh rounds to 1 from 9.02 on); the sign from x last.  e**(2|x|) is
    reduced with one constant: its relative error n 1.9e-9 (n <= 28) reaches the result
    times 2e / (e + 1)**2 <= 0.35 and shrinks as e**-2|x|, under 0.04 ulp; one fma less
    an element (the results 1 ulp off the same).  The doubling of |x| is folded into
    the reduction's constants and the polynomial's (powers of two: the same values),
    and the sign is or-ed in (both branches are positive).  Every operation of the two
    branches counts: both run for every vector."""
    k = _Kit.like(b, x)
    _f = k.f
    ax = k.intrinsic("llvm.fabs", x)
    z = b.fmul(ax, ax)
    small = k.fma(b.fmul(ax, z), k.poly(z, _TANH_POLY32), ax)
    # e**(2a) for a = min(|x|, 9.5) with the doubling folded into the reduction: n =
    # roundeven(2a log2e), h = a - n ln2/2 (one fma), r = 2h, and e**r - 1 = r + r**2 P(r)
    # = 2h + h**2 (4 P(2h)): the coefficients scaled by powers of two (exact)
    a = b.select(b.fcmp_ordered(">", ax, _f(9.5)), _f(9.5), ax)
    z2 = k.fma(a, _f(2 * _LOG2E), _f(_SHIFTER32))
    n = b.fsub(z2, _f(_SHIFTER32))
    h = k.fma(n, _f(-math.log(2.0) / 2), a)
    scaled = tuple(c * 4 * 2.0 ** (len(_EXP_POLY32) - 1 - i) for i, c in enumerate(_EXP_POLY32))
    q = k.fma(b.fmul(h, h), k.poly(h, scaled), b.fadd(h, h))
    s = _pow2(k, z2, k.i(127 << 23))  # e**(2a) = s + s q, and e**(2a) + 1 one fma
    large = b.fsub(_f(1.0), b.fdiv(_f(2.0), k.fma(s, q, b.fadd(s, _f(1.0)))))
    # both branches are >= 0: x's sign bit is or-ed in (llvm.copysign also clears the bit)
    t = b.select(k.lt(ax, 0.625), small, large)
    sign = b.and_(b.bitcast(x, k.ity), k.i(-(1 << 31)))
    return b.bitcast(b.or_(b.bitcast(t, k.ity), sign), k.fty)


def sigmoid_f32(b: ir.IRBuilder, x):
    """1 / (1 + z) for x >= 0 and z / (1 + z) below, z = e**-|x| in (0, 1], in float32
    with the roundings compensated, so it neither overflows nor loses relative
    precision for negative x.  z = s (1 + q) is kept as hi + lo (s = 2**n is exact, and
    z_hi - s is, by Sterbenz), 1 + z as hi + lo (Fast2Sum, 1 >= z_hi), and the quotient
    r = 1 / hi of the one division is corrected by its residual (each fma below is
    exact or rounds a term of a 2**-24 relative size): the result is rounded once,
    within 0.5 ulp plus the polynomial's 2**-28.  The negative side is scaled by 2**24
    (as in exp_f32), so results down to e**-104 stay normal until the last product."""
    k = _Kit.like(b, x)
    f, fma = k.f, k.fma
    ax = k.intrinsic("llvm.fabs", x)
    t = b.fneg(b.select(b.fcmp_ordered(">", ax, f(-_EXP32_LO)), f(-_EXP32_LO), ax))  # -|x|, at least -104
    zr, q = _exp_reduce(k, t)
    s = _pow2(k, zr, k.i((127 + 24) << 23))  # 2**(n + 24): normal for n >= -150
    zs_hi = fma(s, q, s)                     # z * 2**24 = zs_hi + zs_lo
    zs_lo = fma(s, q, b.fsub(s, zs_hi))
    down = f(2.0 ** -24)
    z_hi = b.fmul(zs_hi, down)
    hi = b.fadd(f(1.0), z_hi)                # 1 + z = hi + lo
    lo = b.fadd(b.fadd(b.fsub(f(1.0), hi), z_hi), b.fmul(zs_lo, down))
    r = b.fdiv(f(1.0), hi)
    # x >= 0: 1 / (hi + lo) = r + r (1 - r hi - r lo)
    positive = fma(r, fma(b.fneg(r), lo, fma(b.fneg(r), hi, f(1.0))), r)
    # x < 0, scaled: z / (hi + lo) = q0 + (z - q0 hi - q0 lo) r
    q0 = b.fmul(zs_hi, r)
    residual = fma(b.fneg(q0), lo, b.fadd(fma(b.fneg(q0), hi, zs_hi), zs_lo))
    negative = b.fmul(fma(residual, r, q0), down)
    out = b.select(b.fcmp_ordered(">=", x, f(0.0)), positive, negative)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


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
