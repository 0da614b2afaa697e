"""The compiled float32 exp, log, tanh, sigmoid and pow are within 1 ulp of the
correctly rounded result over the whole float32 range.

Reference: the float64 numpy function rounded to float32 (float64 is accurate to
far below a float32 ulp, so this is the correctly rounded value but for
double-rounding ties).  Inputs: 2**24 bit patterns spread over all 2**32 (every
sign, exponent, subnormal, infinity and nan), plus 2**22 more over each
function's working interval.  Each function runs as one kernel call per vector
width: the kernel IR's `vector` loops of 8 lanes (AVX2) and 16 (AVX-512) — LLVM
splits a vector wider than the host's registers, so both run on any host — and
a scalar loop, each compiled for the host and for the host limited to 32-byte
vectors (AVX2 code: other instructions, no mask registers), plus a smaller sample
for 16-byte SSE code without fma instructions (llvm.fma becomes a libm call).
Special values are compared exactly with numpy's float32 results (signs of
zeros included).
"""
import numpy as np
import pytest

import needle as ndl
from needle.codegen import kernel_ir as K
from needle.codegen import llvm
from needle.engine.schedule_cache import cpu_target
from needle.runtime import jit

WIDTHS = (1, 8, 16)  # scalar loop, AVX2, AVX-512
VECTOR_BYTES = (64, 32)  # the host (AVX-512 where it has it) and AVX2


def target_for(vector_bytes: int):
    host = cpu_target()
    target = host if vector_bytes == 64 else host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    return target


def compiled(op: str, width: int, *inputs: np.ndarray, target=None) -> np.ndarray:
    """op over float32 `inputs` by one kernel whose innermost loop is `width` lanes,
    compiled for `target` (the host's by default)."""
    i, v = K.Var("i"), K.Var("v")
    at = K.affine([(i, width), (v, 1)])
    loads = [K.Load(f"in{n}", at, "float32") for n in range(len(inputs))]
    value = K.Unary(op, loads[0], "float32") if len(loads) == 1 else K.Binary(op, *loads, "float32")
    bufs = [K.Buf(f"in{n}", "float32", "in") for n in range(len(inputs))] + [K.Buf("out0", "float32", "out")]
    inner = K.Loop("v", width, [K.Store("out0", at, value)], "vector" if width > 1 else "serial")
    count = inputs[0].size // width
    kernel = K.Kernel(f"T_{op}_w{width}", bufs, 0, [K.Loop("i", count, [inner], "parallel")], ("i", count))
    arrays = [np.ascontiguousarray(x, dtype=np.float32) for x in inputs]
    assert all(a.size % width == 0 for a in arrays)
    out = np.empty_like(arrays[0])
    table = np.array([a.ctypes.data for a in arrays + [out]], dtype=np.int64)
    err = np.zeros(1, dtype=np.int32)
    fn = jit.compile_kernels([kernel], target or cpu_target(), llvm)[0].cfunc
    fn(table.ctypes.data, None, 0, count, None, err.ctypes.data)
    return out


def within_one_ulp(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """got is want or one of its float32 neighbours (nan matches nan only): the bit
    patterns mapped to ordered integers differ by at most 1 (mod 2**32, which
    cannot wrap onto -1, 0 or 1: the ordered range spans 2**32 - 1 values)."""
    def ordered(a):
        i = a.view(np.int32)
        return np.where(i < 0, np.int32(-(2 ** 31)) - i, i).view(np.uint32)  # -0 -> 0, -tiny -> -1, ...
    close = (ordered(got) - ordered(want) + np.uint32(1)) <= np.uint32(2)
    return np.where(np.isnan(want), np.isnan(got), close & ~np.isnan(got))


def all_patterns(n: int = 1 << 24) -> np.ndarray:
    """n bit patterns spread evenly over all 2**32, the low bits varying too."""
    shift = 32 - n.bit_length() + 1
    k = np.arange(n, dtype=np.uint32)
    return ((k << np.uint32(shift)) | ((k * np.uint32(2654435761)) >> np.uint32(32 - shift))).view(np.float32)


def interval(lo: float, hi: float, n: int = 1 << 22) -> np.ndarray:
    return np.random.default_rng(0).uniform(lo, hi, n).astype(np.float32)


def sigmoid_reference(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-widened(x, -120, 120)))  # float64 keeps it accurate: 1 + e**-x does not cancel


def widened(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """x as float64, clipped where the float32 result no longer changes (float64
    underflow to subnormals is slow)."""
    return np.clip(x.astype(np.float64), lo, hi)


UNARY = {
    "exp": (lambda x: np.exp(widened(x, -110, 100)), (-104.0, 89.0)),
    "log": (lambda x: np.log(x.astype(np.float64)), (0.0, 4.0)),
    "tanh": (lambda x: np.tanh(x.astype(np.float64)), (-10.0, 10.0)),
    "sigmoid": (sigmoid_reference, (-105.0, 20.0)),
}


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_within_one_ulp_of_correct_rounding(op, vector_bytes):
    target = target_for(vector_bytes)
    reference, (lo, hi) = UNARY[op]
    x = np.concatenate([all_patterns(), interval(lo, hi)])
    with np.errstate(all="ignore"):
        want = reference(x).astype(np.float32)
    for width in WIDTHS:
        got = compiled(op, width, x, target=target)
        ok = within_one_ulp(got, want)
        assert ok.all(), f"{op} (width {width}): {list(zip(x[~ok], got[~ok], want[~ok]))[:5]}"


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_pow_within_one_ulp_of_correct_rounding(vector_bytes):
    target = target_for(vector_bytes)
    rng = np.random.default_rng(1)
    x = all_patterns(1 << 23)
    n = x.size // 4
    y = np.concatenate([rng.integers(-6, 7, n), rng.integers(-12, 13, n) / 2, rng.uniform(-10, 10, n),
                        rng.standard_normal(n) * 100]).astype(np.float32)
    rng.shuffle(y)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    for width in WIDTHS:
        got = compiled("pow", width, x, y, target=target)
        ok = within_one_ulp(got, want)
        assert ok.all(), f"pow (width {width}): {list(zip(x[~ok], y[~ok], got[~ok], want[~ok]))[:5]}"
        exact = (got == want) | (np.isnan(got) & np.isnan(want))  # one rounding of a float64 value
        assert exact.mean() > 0.999, f"pow (width {width}): too few correctly rounded results"


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                    3e38, -3e38, 88.72283, 88.72284, -87.33654, -103.97208, -103.9721, 2.0 ** 24, 2.0 ** 24 + 2,
                    -(2.0 ** 25), 0.015625, -0.015625, 20.0, -20.0, 1e-20], dtype=np.float32)


def same_values(got, want) -> np.ndarray:
    return (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("vector_bytes", (64, 32, 16))
def test_special_values(vector_bytes):
    """The edges (overflow, underflow to subnormals and 0, signed zeros, infinities,
    nan): zeros, infinities and nan exactly, other values within 1 ulp; pow exactly,
    with C99 powf's table (pow(nan, 0) = 1, pow(-inf, 0.5) = inf, pow(-0, -3) = -inf, ...)."""
    target = target_for(vector_bytes)
    x = np.resize(SPECIAL, 64)
    for op, (reference, _) in UNARY.items():
        with np.errstate(all="ignore"):
            want = reference(x).astype(np.float32)
        ordinary = np.isfinite(want) & (want != 0)  # zeros, infinities and nan must be exact
        for width in WIDTHS:
            got = compiled(op, width, x, target=target)
            ok = same_values(got, want) | (ordinary & within_one_ulp(got, want))
            assert ok.all(), (op, width, list(zip(x[~ok], got[~ok], want[~ok])))
    xs, ys = (a.ravel() for a in np.meshgrid(SPECIAL, SPECIAL))
    with np.errstate(all="ignore"):
        want = np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(np.float32)
    for width in WIDTHS:
        got = compiled("pow", width, np.resize(xs, 960), np.resize(ys, 960), target=target)[:xs.size]
        ok = same_values(got, want)
        assert ok.all(), ("pow", width, list(zip(xs[~ok], ys[~ok], got[~ok], want[~ok]))[:10])


@pytest.fixture
def lazy():
    with ndl.lazy():
        yield


def test_lazy_ops_at_known_points(lazy):
    """Through the whole compiler at the host's vector width.  float32(4.55) is
    4.55000019073...; its exp is 94.6324263646... (mpmath), between the float32
    values 94.63242340 and 94.63243103: correctly rounded, 94.63242340.  (94.632408
    is exp of the decimal 4.55, which a float32 input cannot hold; numpy's float32
    exp gives 94.632416, 1 ulp low.)"""
    x = ndl.Tensor(np.array([4.55, 1.0, -1.0, 10.0, 0.3, 1e-3, -7.5], dtype=np.float32))
    x64 = x.numpy().astype(np.float64)
    cases = {"exp": (ndl.exp(x), np.exp(x64)), "log": (ndl.log(x * x), np.log(x64 * x64)),
             "tanh": (ndl.tanh(x), np.tanh(x64)), "sigmoid": (ndl.sigmoid(x), 1 / (1 + np.exp(-x64)))}
    for name, (got, want) in cases.items():
        assert within_one_ulp(got.numpy(), want.astype(np.float32)).all(), name
    assert ndl.exp(x).numpy()[0] == np.float32(94.6324234008789)


def test_lazy_sigmoid_within_one_ulp(lazy):
    """Lazy sigmoid is an IR primitive that the LLVM renderer computes with vecmath's
    sigmoid (the overflow-free formula spelled out in float32 ops is up to 3 ulp off)."""
    x = all_patterns()
    got = ndl.sigmoid(ndl.Tensor(x, requires_grad=False)).numpy()
    with np.errstate(all="ignore"):
        want = sigmoid_reference(x).astype(np.float32)
    ok = within_one_ulp(got, want)
    assert ok.all(), list(zip(x[~ok], got[~ok], want[~ok]))[:5]
    special = ~(np.isfinite(want) & (want != 0))
    assert same_values(got[special], want[special]).all()


@pytest.mark.parametrize("exponent", [3.0, -2.0, -0.5, 0.5, 2.5, -1.0, 1.0 / 3])
def test_lazy_power_scalar_within_one_ulp(lazy, exponent):
    """Constant exponents: 3, -2 and -0.5 were two roundings in float32 (and 1/(x*x)
    overflowed to 0 for |x| > 2e19); now one rounding of a float64 value."""
    base = np.concatenate([interval(1e-3, 1e3, 4096), np.array([3e19, 2e-20, 0.0, np.inf], np.float32)])
    got = ndl.power_scalar(ndl.Tensor(base), exponent).numpy()
    with np.errstate(all="ignore"):
        want = np.power(base.astype(np.float64), float(np.float32(exponent))).astype(np.float32)
    assert within_one_ulp(got, want).all()


@pytest.mark.parametrize("op", sorted(UNARY))
def test_sse_code_without_fma_within_one_ulp(op):
    """16-byte vectors without the fma feature: the same results (llvm.fma is then
    a call to libm's fma, correct but slow, hence the smaller sample)."""
    target = target_for(16)
    reference = UNARY[op][0]
    x = all_patterns(1 << 22)
    with np.errstate(all="ignore"):
        want = reference(x).astype(np.float32)
    for width in (1, 4):
        got = compiled(op, width, x, target=target)
        ok = within_one_ulp(got, want)
        assert ok.all(), f"{op} (width {width}): {list(zip(x[~ok], got[~ok], want[~ok]))[:5]}"
