"""Generated kernels against the reference executor (and numpy), op family by op
family: odd sizes, non-contiguous inputs, special values, every dtype.

Graphs are built from IR primitives (`needle.ir.build`) over NDArray leaves on
`cpu()`, or from Tensor ops in lazy mode; the reference executor evaluates the
same graph with numpy before the compiled runtime realizes it.  Shapes are few
and small on purpose: every distinct kernel costs a compile.
"""
import numpy as np
import pytest

import needle as ndl
import needle.runtime as rt
from needle import config, ops
from needle.backend_ndarray.ndarray import NDArray
from needle.compiler.schedule import plan
from needle.engine import schedule_cache
from needle.engine.realize import realize_nodes
from needle.ir import build, reference
from needle.ir.lazy import LazyArray
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
DTYPES = ("float32", "float64", "int32", "int64", "uint8", "bool")

F32_EXACT = dict(rtol=0, atol=0)


# ---- helpers -----------------------------------------------------------------------------------
def nd(x, dtype=None):
    x = np.asarray(x)
    return NDArray(x, device=CPU, dtype=dtype or x.dtype.name)


def leaf(x, dtype=None):
    return build.buffer(x if isinstance(x, NDArray) else nd(x, dtype))


def const(value, like, dtype=None):
    return build.const(value, like.shape, dtype or like.dtype, CPU)


def realize(*nodes):
    """Reference values of `nodes`, then the compiled values (one schedule)."""
    expected = reference.evaluate(list(nodes))
    realize_nodes(list(nodes))
    got = [n.arg.numpy() for n in nodes]
    for g, e, n in zip(got, expected, nodes):
        assert g.shape == e.shape == n.shape
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
    return got, expected


def check(*nodes, rtol=1e-6, atol=0.0):
    got, expected = realize(*nodes)
    for g, e in zip(got, expected):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)
    return got


def ulps(got, truth):
    """Error in units of the float32 spacing at the true value (float64 truth)."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf and nan are compared exactly below
        return _ulps(got, truth)


def _ulps(got, truth):
    truth32 = truth.astype(np.float32)
    both_special = (~np.isfinite(truth32)) | (~np.isfinite(got))
    assert np.array_equal(np.isnan(got), np.isnan(truth32)), "nan positions differ"
    assert np.array_equal(got[both_special & ~np.isnan(got)], truth32[both_special & ~np.isnan(got)])
    err = np.abs(got.astype(np.float64) - truth)[~both_special]
    spacing = np.spacing(np.abs(truth32))[~both_special].astype(np.float64)
    return float((err / spacing).max()) if err.size else 0.0


def randn(*shape, dtype="float32", scale=1.0):
    return (np.random.randn(*shape) * scale).astype(dtype)


# ---- unary -------------------------------------------------------------------------------------
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 88.0, 88.72, 88.8, 89.0, -87.0,
                    -103.0, -104.0, -110.0, 1e-40, -1e-40, 1e-30, 0.5, -0.5, 0.625, -0.625, 1.0,
                    9.0, -9.0, 20.0, -20.0], dtype=np.float32)


def transcendental_inputs():
    rng = np.random.RandomState(3)
    exp_x = np.concatenate([rng.uniform(-100, 88, 2000), rng.uniform(-1, 1, 500), SPECIAL]).astype(np.float32)
    log_x = np.concatenate([np.exp(rng.uniform(-87, 88, 2000)), rng.uniform(0.5, 2, 500), 1e-42 * np.arange(1, 20),
                            SPECIAL]).astype(np.float32)
    tanh_x = np.concatenate([rng.uniform(-12, 12, 2000), rng.uniform(-0.7, 0.7, 500), SPECIAL]).astype(np.float32)
    return exp_x, log_x, tanh_x


def test_exp_log_tanh_float32_within_few_ulps():
    exp_x, log_x, tanh_x = transcendental_inputs()
    outs = [build.elementwise("exp", leaf(exp_x)), build.elementwise("log", leaf(log_x)),
            build.elementwise("tanh", leaf(tanh_x))]
    got, _ = realize(*outs)
    with np.errstate(all="ignore"):
        truths = [np.exp(exp_x.astype(np.float64)), np.log(log_x.astype(np.float64)),
                  np.tanh(tanh_x.astype(np.float64))]
    for name, g, t in zip(("exp", "log", "tanh"), got, truths):
        # exp: results that are float32 subnormals carry fewer bits: compare them absolutely
        normal = (np.abs(t) >= np.finfo(np.float32).tiny) | (t == 0) | ~np.isfinite(t)
        assert ulps(g[normal], t[normal]) <= 3, name
        np.testing.assert_allclose(g[~normal], t[~normal], rtol=0, atol=2e-45 * 4)


def test_unary_float32_and_float64():
    x = randn(3, 17)
    pos = np.abs(x) + 0.1
    outs = []
    for dtype in ("float32", "float64"):
        a, p = leaf(x.astype(dtype)), leaf(pos.astype(dtype))
        outs += [build.elementwise("neg", a), build.elementwise("abs", a), build.elementwise("sqrt", p),
                 build.elementwise("exp", a), build.elementwise("log", p), build.elementwise("tanh", a)]
    check(*outs, rtol=1e-6)


def test_float64_transcendentals_are_exact_enough():
    x = np.concatenate([np.linspace(-700, 700, 101), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310]])
    outs = [build.elementwise("exp", leaf(x)), build.elementwise("log", leaf(np.abs(x))),
            build.elementwise("tanh", leaf(x / 100))]
    check(*outs, rtol=1e-14)


def test_unary_integers():
    x = np.array([[-5, 0, 7, -128, 127, 3, -1]], dtype=np.int64)
    outs = []
    for dtype in ("int32", "int64"):
        a = leaf(x.astype(dtype))
        outs += [build.elementwise("neg", a), build.elementwise("abs", a)]
    outs.append(build.elementwise("abs", leaf(np.array([0, 3, 200, 255], dtype=np.uint8))))
    check(*outs)


# ---- binary ------------------------------------------------------------------------------------
FLOAT_BINARY = ("add", "sub", "mul", "div", "max", "min", "lt", "le", "eq", "ne")


def test_binary_float32_with_special_values():
    a = np.concatenate([randn(40), SPECIAL, SPECIAL]).astype(np.float32)
    b = np.concatenate([randn(40), SPECIAL, SPECIAL[::-1]]).astype(np.float32)
    b[3] = a[3]  # some equal pairs
    A, B = leaf(a), leaf(b)
    check(*[build.elementwise(op, A, B) for op in FLOAT_BINARY], rtol=1e-7)


def test_max_min_propagate_nan():
    a = np.array([np.nan, 1.0, np.nan, -np.inf, 0.0], dtype=np.float32)
    b = np.array([1.0, np.nan, np.nan, np.nan, -0.0], dtype=np.float32)
    got = check(build.elementwise("max", leaf(a), leaf(b)), build.elementwise("min", leaf(a), leaf(b)))
    assert np.isnan(got[0][:4]).all() and np.isnan(got[1][:4]).all()


def test_binary_float64():
    a, b = randn(3, 17, dtype="float64"), np.abs(randn(3, 17, dtype="float64")) + 0.5
    A, B = leaf(a), leaf(b)
    check(*[build.elementwise(op, A, B) for op in FLOAT_BINARY + ("pow",)], rtol=1e-14)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_binary_integers(dtype):
    rng = np.random.RandomState(4)
    lo, hi = (0, 256) if dtype == "uint8" else (-1000, 1000)
    a = rng.randint(lo, hi, size=(3, 17)).astype(dtype)
    b = rng.randint(lo, hi, size=(3, 17)).astype(dtype)
    b[0, :4] = a[0, :4]
    A, B = leaf(a), leaf(b)
    # uint8 arithmetic wraps around like numpy's
    check(*[build.elementwise(op, A, B) for op in ("add", "sub", "mul", "max", "min", "lt", "le", "eq", "ne")])


def test_integer_extremes_wrap():
    a = np.array([2**31 - 1, -2**31, 2**30, -7], dtype=np.int32)
    b = np.array([1, -1, 4, 3], dtype=np.int32)
    big = np.array([2**63 - 1, -2**63, 2**40, 5], dtype=np.int64)
    check(build.elementwise("add", leaf(a), leaf(b)), build.elementwise("mul", leaf(a), leaf(b)),
          build.elementwise("add", leaf(big), leaf(big)), build.elementwise("max", leaf(big), leaf(-big)))


def test_bool_ops():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    A, B = leaf(a), leaf(b)
    check(*[build.elementwise(op, A, B) for op in ("max", "min", "lt", "le", "eq", "ne")])


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0, -2.0, -0.5, 1.5, -1.5, 0.0, 4.0, 1.0, 2.5])
def test_pow_constant_exponents(exponent):
    x = np.concatenate([np.abs(randn(20)) + 0.05, [0.0, 1.0, 2.0, 1e20, 1e-20, np.inf, np.nan]]).astype(np.float32)
    out = build.elementwise("pow", leaf(x), build.const(exponent, x.shape, "float32", CPU))
    # atol: below float32's normal range (x ** -2 is computed as 1 / (x * x), whose
    # intermediate overflows for x = 1e20: 0 instead of the subnormal 1e-40)
    tiny = float(np.finfo(np.float32).tiny)
    got = check(out, rtol=3e-6, atol=tiny)[0]
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, np.power(x.astype(np.float64), exponent).astype(np.float32), rtol=3e-6,
                                   atol=tiny)


def test_pow_negative_bases_and_tensor_exponents():
    x = np.array([-2.0, -0.5, -3.0, 2.0, 0.0, -0.0, -1.0], dtype=np.float32)
    e = np.array([2.0, 3.0, 0.5, -1.5, -1.0, 2.0, 1e9], dtype=np.float32)
    X = leaf(x)
    outs = [build.elementwise("pow", X, leaf(e))]
    outs += [build.elementwise("pow", X, build.const(c, x.shape, "float32", CPU)) for c in (2.0, 3.0, -1.0, 0.5, 4.0)]
    check(*outs, rtol=2e-6)


def test_pow_through_tensor_ops():
    x = ndl.Tensor(np.abs(randn(4, 5)) + 0.1, device=CPU)
    y = ndl.Tensor(randn(4, 5), device=CPU)
    outs = [x ** 2, x ** -1.5, x ** 0.5, ops.power(x, y), 2.0 ** y]
    nodes = output_nodes(outs)
    expected = reference.evaluate(nodes)
    ndl.realize(*outs)
    for o, e in zip(outs, expected):
        np.testing.assert_allclose(o.numpy(), e, rtol=3e-6)


# ---- where, casts ------------------------------------------------------------------------------
def test_where():
    a, b = randn(3, 17), randn(3, 17)
    cond = build.elementwise("lt", leaf(a), leaf(b))
    ints = leaf(np.arange(51, dtype=np.int32).reshape(3, 17))
    outs = [build.elementwise("where", cond, leaf(a), leaf(b)),
            build.elementwise("where", cond, ints, build.elementwise("neg", ints)),
            build.elementwise("where", leaf(np.array([True, False, True])), leaf(np.array([1.5, np.nan, 2.0])),
                              leaf(np.array([np.inf, 3.0, 4.0])))]
    check(*outs)


CAST_VALUES = {
    "float32": np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 100.9, 255.0, 3e4, np.nan, 0.25], dtype=np.float32),
    "float64": np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 100.9, 255.0, 3e4, np.nan, 1e-300], dtype=np.float64),
    "int32": np.array([0, 1, -1, 255, 256, -129, 2**31 - 1, -2**31, 70000, 3, -7], dtype=np.int32),
    "int64": np.array([0, 1, -1, 255, 256, -129, 2**40 + 3, -2**40, 2**62, 2**31, -7], dtype=np.int64),
    "uint8": np.array([0, 1, 127, 128, 255, 3, 7, 200, 64, 2, 9], dtype=np.uint8),
    "bool": np.array([True, False, True, True, False, False, True, False, True, False, True]),
}


def cast_source(src, dst):
    """Values whose conversion is defined (numpy's conversion of nan or out-of-range
    floats to integers is platform-defined, so those are left out)."""
    x = CAST_VALUES[src]
    if src.startswith("float") and dst not in ("float32", "float64", "bool"):
        x = x.copy()
        x[np.isnan(x)] = 5.0
        if dst == "uint8":
            x = np.abs(x)
            x[x > 255] = 255.0
    return x


@pytest.mark.parametrize("src", DTYPES)
def test_casts_between_all_dtypes(src):
    outs = [build.cast(leaf(cast_source(src, dst), src), dst) for dst in DTYPES if dst != src]
    with np.errstate(all="ignore"):
        check(*outs)


def test_cast_chain_in_one_kernel():
    x = np.linspace(-3, 300, 37).astype(np.float32)
    v = build.cast(build.cast(build.elementwise("abs", leaf(x)), "int32"), "uint8")
    w = build.cast(build.elementwise("lt", build.cast(v, "float64"), build.const(100.0, x.shape, "float64", CPU)),
                   "float32")
    check(build.elementwise("add", w, leaf(x)))


# ---- reductions --------------------------------------------------------------------------------
AXIS_SETS = [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max"])
def test_reductions_over_each_axis_set(op):
    x = leaf(randn(3, 17, 9))  # last axis >= 8: the column-reduction path too
    check(*[build.reduce(op, x, axes) for axes in AXIS_SETS], rtol=2e-6, atol=1e-6)


def test_reductions_small_last_axis_and_size_one():
    x = leaf(randn(5, 1, 3))
    outs = [build.reduce(op, x, axes) for op in ("reduce_sum", "reduce_max") for axes in ((0,), (1,), (0, 2))]
    check(*outs, rtol=2e-6, atol=1e-6)


def test_column_reduction_of_a_long_row():
    x = randn(7, 1100)  # more columns than one column block
    s = build.reduce("reduce_sum", leaf(x), (0,))
    m = build.reduce("reduce_max", leaf(x), (0,))
    epilogue = build.elementwise("exp", build.reduce("reduce_max", leaf(x), (0,)))
    check(s, m, epilogue, rtol=2e-6, atol=1e-6)


def test_reductions_integer_and_float64():
    i32 = leaf(np.random.randint(-100, 100, size=(4, 17)).astype(np.int32))
    u8 = leaf(np.random.randint(0, 256, size=(4, 17)).astype(np.uint8))  # sums wrap like numpy's astype
    f64 = leaf(randn(4, 17, dtype="float64"))
    outs = [build.reduce(op, x, axes) for x in (i32, u8, f64) for op in ("reduce_sum", "reduce_max")
            for axes in ((0,), (1,))]
    check(*outs, rtol=1e-12)


def test_reductions_with_special_values():
    x = np.array([[1.0, np.nan, 3.0, -1.0], [np.inf, 2.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf, -np.inf],
                  [np.inf, 1.0, 1e30, 1e30], [-0.0, -0.0, 0.0, -5.0]], dtype=np.float32)
    X = leaf(x)
    with np.errstate(invalid="ignore"):  # the reference's inf + -inf
        got = check(build.reduce("reduce_max", X, (1,)), build.reduce("reduce_sum", X, (1,)),
                    build.reduce("reduce_max", X, (0,)), build.reduce("reduce_sum", X, (0,)))
    assert np.isnan(got[0][0, 0]) and np.isnan(got[1][0, 0])  # nan propagates through max and sum
    assert np.isnan(got[1][1, 0])  # inf + -inf
    assert np.isnan(got[2][0, 1])
    # a long row: the vectorized max must still see the nan
    row = randn(1, 1000)
    row[0, 637] = np.nan
    got = check(build.reduce("reduce_max", leaf(row), (1,)), build.reduce("reduce_max", leaf(row.T.copy()), (0,)))
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all()


def test_softmax_of_large_inputs():
    x = ndl.Tensor(np.array([[1e10, 0.0, -1e10], [3.0, 3.0, 3.0], [-np.inf, 0.0, 1.0]], dtype=np.float32),
                   device=CPU)
    out = ops.logsumexp(x, axes=(1,))
    nodes = output_nodes([out])
    expected = reference.evaluate(nodes)[0]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


# ---- matmul ------------------------------------------------------------------------------------
def matmul_check(a, b, rtol=1e-4, atol=1e-4):
    out = build.matmul(leaf(a) if not isinstance(a, LazyArray) else a,
                       leaf(b) if not isinstance(b, LazyArray) else b)
    got = check(out, rtol=rtol, atol=atol)[0]
    return got


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 17, 5), (1, 17, 1), (64, 64, 64), (100, 70, 130),
                                   (257, 300, 129)])
def test_matmul_sizes(m, k, n):
    a, b = randn(m, k), randn(k, n)
    got = matmul_check(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_matmul_batched_and_broadcast():
    a, b = randn(2, 3, 17, 5), randn(2, 3, 5, 4)
    matmul_check(a, b)
    big_a, big_b = randn(3, 50, 60), randn(3, 60, 70)  # batched and tiled
    matmul_check(big_a, big_b)
    x = leaf(randn(4, 6, 5))
    w = leaf(randn(5, 3))
    out = x @ w  # LazyArray broadcasts the batch
    check(out, rtol=1e-5, atol=1e-5)


def test_matmul_transposed_operands():
    a, b = randn(130, 100), randn(70, 130)
    at = build.permute(leaf(a), (1, 0))   # (100, 130)
    bt = build.permute(leaf(b), (1, 0))   # (130, 70)
    matmul_check(at, bt)
    # non-contiguous leaves: transposed and sliced NDArrays
    a2 = nd(randn(130, 100)).permute((1, 0))
    b2 = nd(randn(260, 140))[::2, ::2]
    matmul_check(build.buffer(a2), build.buffer(b2))
    small = nd(randn(5, 3)).permute((1, 0))
    matmul_check(build.buffer(small), leaf(randn(5, 4)))


def test_matmul_with_epilogue():
    for m, k, n in ((16, 20, 12), (257, 300, 129)):  # naive, and tiled with two K blocks
        x, w, bias = randn(m, k), randn(k, n), randn(1, n)
        mm = build.matmul(leaf(x), leaf(w))
        out = build.elementwise("tanh", build.elementwise("add", mm, build.expand(leaf(bias), (m, n))))
        got = check(out, rtol=1e-4, atol=1e-4)[0]
        np.testing.assert_allclose(got, np.tanh(x.astype(np.float64) @ w + bias), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [8, 64], ids=["naive", "tiled"])
def test_matmul_epilogue_every_op(size):
    """Each elementwise op as a matmul epilogue (the tiled write-back runs it in
    vector loops)."""
    a, b, o = randn(size, 70), randn(70, size + 2), randn(size, size + 2)
    names = ("neg", "exp", "abs", "log", "sqrt", "add", "sub", "mul", "div", "max", "min", "pow2", "pow1.5", "where")
    outs = []
    for name in names:
        m = build.matmul(leaf(a), leaf(b))
        other = leaf(o)
        if name in ("neg", "exp", "abs"):
            outs.append(build.elementwise(name, build.elementwise("mul", m, const(0.1, m))))
        elif name in ("log", "sqrt"):
            outs.append(build.elementwise(name, build.elementwise("abs", m)))
        elif name == "pow2":
            outs.append(build.elementwise("pow", m, const(2.0, m)))
        elif name == "pow1.5":
            outs.append(build.elementwise("pow", build.elementwise("abs", m), const(1.5, m)))
        elif name == "where":
            outs.append(build.elementwise("where", build.elementwise("lt", m, other), m, other))
        else:
            outs.append(build.elementwise(name, m, other))
    # The kernel and the reference sum the 70 products in different orders, so m itself
    # may differ by up to K * 2^-24 * sum|a_k b_k| (a cancelling dot product has no small
    # relative error); each op passes that on scaled by its derivative, plus its own rounding.
    m64 = a.astype(np.float64) @ b
    dm = 70 * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b))
    am, ao = np.abs(m64), np.abs(o.astype(np.float64))
    slope = {"neg": 0.1, "exp": 0.1 * np.exp(0.1 * m64), "abs": 0.1, "log": 1 / am, "sqrt": 0.5 / np.sqrt(am),
             "add": 1.0, "sub": 1.0, "mul": ao, "div": 1 / ao, "max": 1.0, "min": 1.0, "pow2": 2 * am,
             "pow1.5": 1.5 * np.sqrt(am), "where": 1.0}
    got, expected = realize(*outs)
    for name, g, e in zip(names, got, expected):
        tolerance = slope[name] * dm * 1.01 + 1e-5 * np.abs(e) + 1e-6
        bad = np.abs(g.astype(np.float64) - e) > tolerance
        assert not bad.any(), f"{name}: {g[bad][:3]} vs {e[bad][:3]} (tolerance {tolerance[bad][:3]})"


@pytest.mark.parametrize("size", [8, 64], ids=["naive", "tiled"])
def test_matmul_epilogue_changing_dtype(size):
    x = ndl.Tensor(randn(size, size), device=CPU)
    w = ndl.Tensor(randn(size, size), device=CPU)
    y = ops.astype(x @ w, "float64")
    np.testing.assert_allclose(y.numpy(), x.numpy().astype(np.float64) @ w.numpy(), rtol=1e-5, atol=1e-5)
    m = build.matmul(leaf(randn(size, 70)), leaf(randn(70, size)))
    check(build.elementwise("lt", m, leaf(randn(size, size))), build.cast(
        build.matmul(leaf(randn(size, 70)), leaf(randn(70, size))), "int32"))


@pytest.mark.parametrize("size", [8, 64], ids=["naive", "tiled"])
def test_matmul_float64_tanh_epilogue(size):
    x = ndl.Tensor(randn(size, size, dtype="float64"), device=CPU, dtype="float64")
    y = ops.tanh(x @ x)
    np.testing.assert_allclose(y.numpy(), np.tanh(x.numpy() @ x.numpy()), rtol=1e-12, atol=1e-12)


def test_matmul_with_fused_operand_producers():
    a, b = randn(80, 90), randn(90, 60)
    ea = build.elementwise("exp", build.elementwise("mul", leaf(a), const(0.1, leaf(a))))
    out = build.elementwise("max", build.matmul(ea, build.elementwise("neg", leaf(b))), build.const(0.0, (80, 60),
                                                                                                    "float32", CPU))
    check(out, rtol=1e-4, atol=1e-4)


def test_matmul_float64_and_int():
    check(build.matmul(leaf(randn(65, 70, dtype="float64")), leaf(randn(70, 66, dtype="float64"))), rtol=1e-12)
    ia = np.random.randint(-5, 5, size=(9, 17)).astype(np.int32)
    ib = np.random.randint(-5, 5, size=(17, 4)).astype(np.int32)
    check(build.matmul(leaf(ia), leaf(ib)))
    check(build.matmul(leaf(ia.astype(np.int64)), leaf(ib.astype(np.int64))))


# ---- assemble, movement, conv ------------------------------------------------------------------
def test_concatenate_stack_dilate():
    a, b, c = randn(3, 4), randn(3, 2), randn(3, 4)
    A, B, C = leaf(a), leaf(b), leaf(c)
    cat = A.concatenate([A, build.elementwise("exp", B), C], axis=1)
    dil = build.elementwise("neg", A).dilate((0, 1), 2)
    check(cat, dil)
    x, y = ndl.Tensor(a, device=CPU), ndl.Tensor(c, device=CPU)
    stacked = ops.stack([x, ops.transpose(ops.transpose(y)) * 2.0, x + y], 1)
    np.testing.assert_allclose(stacked.numpy(), np.stack([a, c * 2, a + c], 1), rtol=1e-6)
    cat2 = ops.concatenate([x, y], 0)
    np.testing.assert_allclose(cat2.numpy(), np.concatenate([a, c], 0))


def test_getitem_gradient_scatter():
    x = ndl.Tensor(randn(9, 7), device=CPU, requires_grad=True)
    y = x[::-2, 1:6:2]
    w = ndl.Tensor(randn(*y.shape), device=CPU)
    (y * w).sum().backward()
    expected = np.zeros((9, 7), dtype=np.float32)
    expected[::-2, 1:6:2] = w.numpy()
    np.testing.assert_allclose(x.grad.numpy(), expected)
    g = leaf(randn(3, 2))
    check(g.scatter((7, 5), (slice(None, None, -3), slice(1, 5, 2))), build.elementwise("exp", g).scatter((4, 2), (slice(1, 4), slice(None))))


def test_pad_flip_as_strided_window():
    x = randn(5, 6)
    X = leaf(x)
    outs = [build.pad(X, ((1, 2), (0, 3))),
            build.elementwise("exp", build.pad(X, ((2, 0), (1, 1)))),   # padding is 0, not exp(0)
            build.flip(build.elementwise("neg", X), (0, 1)),
            build.elementwise("neg", build.as_strided(X, (4, 3), (6, 2), 1)),
            build.elementwise("neg", build.as_strided(build.elementwise("exp", X), (3, 3), (1, 0), 4)),
            build.elementwise("abs", build.window(build.reshape(X, (1, 5, 6, 1)), (1, 2), (2, 3), 2))]
    check(*outs, rtol=1e-6)


def test_conv_forward_and_backward():
    z = ndl.Tensor(randn(2, 7, 6, 3), device=CPU, requires_grad=True)
    w = ndl.Tensor(randn(3, 3, 3, 4), device=CPU, requires_grad=True)
    out = ops.conv(z, w, stride=2, padding=1)
    loss = (out * out).sum()
    loss.backward()
    nodes = output_nodes([out, z.grad, w.grad])
    expected = reference.evaluate(nodes)
    ndl.realize(out, z.grad, w.grad)
    for t, e in zip((out, z.grad, w.grad), expected):
        np.testing.assert_allclose(t.numpy(), e, rtol=1e-4, atol=1e-4)
    # and numpy's own convolution for the forward
    zp = np.pad(z.numpy(), ((0, 0), (1, 1), (1, 1), (0, 0))).astype(np.float64)
    cols = np.lib.stride_tricks.sliding_window_view(zp, (3, 3), axis=(1, 2))[:, ::2, ::2]
    ref = np.einsum("nhwcij,ijco->nhwo", cols, w.numpy())
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


# ---- sizes and layouts -------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 17])
def test_odd_sizes_elementwise_reduce(n):
    x, y = randn(n, n), randn(n, 1)
    X, Y = leaf(x), leaf(y)
    e = build.elementwise("tanh", build.elementwise("add", build.elementwise("mul", X, X), build.expand(Y, (n, n))))
    check(e, build.reduce("reduce_sum", build.elementwise("exp", X), (1,)), build.reduce("reduce_max", X, (0, 1)),
          rtol=2e-6, atol=1e-6)


def test_million_element_chain():
    n = 1000003
    x = np.random.uniform(-3, 3, n).astype(np.float32)
    y = np.random.uniform(0.5, 2, n).astype(np.float32)
    X, Y = leaf(x), leaf(y)
    out = build.elementwise("add", build.elementwise("mul", build.elementwise("exp", X), build.elementwise("log", Y)),
                            build.elementwise("tanh", build.elementwise("div", X, Y)))
    got = check(out, rtol=2e-6, atol=2e-6)[0]
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(got, np.exp(x64) * np.log(y64) + np.tanh(x64 / y64), rtol=1e-5, atol=1e-6)


def noncontiguous_leaves():
    base = randn(12, 10)
    return {
        "transposed": nd(base).permute((1, 0)),                        # (10, 12)
        "sliced": nd(randn(30, 37))[1:21:2, 2:38:3],                   # (10, 12) with offset
        "broadcast": nd(randn(1, 12)).broadcast_to((10, 12)),          # stride 0
        "flipped": nd(randn(10, 12)).flip((0, 1)),                     # negative strides
    }


def test_noncontiguous_inputs():
    leaves = noncontiguous_leaves()
    assert all(not arr.is_contiguous() for arr in leaves.values())
    nodes = {k: build.buffer(v) for k, v in leaves.items()}
    t, s, b, f = nodes["transposed"], nodes["sliced"], nodes["broadcast"], nodes["flipped"]
    outs = [build.elementwise("add", build.elementwise("mul", t, s), build.elementwise("sub", b, f)),
            build.elementwise("exp", f),
            build.reduce("reduce_sum", s, (0,)), build.reduce("reduce_max", t, (1,)),
            build.reduce("reduce_sum", b, (0, 1)),
            build.matmul(t, build.permute(f, (1, 0))),
            build.elementwise("neg", build.flip(s, (1,)))]
    check(*outs, rtol=1e-5, atol=1e-5)


def test_noncontiguous_tiled_matmul_operands():
    a = nd(randn(70, 130)).flip((0,)).permute((1, 0))     # (130, 70), negative strides
    b = nd(randn(140, 128))[::2, ::2]                       # (70, 64), stepped slices
    matmul_check(build.buffer(a), build.buffer(b))
    c = nd(randn(1, 64)).broadcast_to((70, 64))
    matmul_check(build.buffer(a), build.buffer(c))


def test_lazy_eager_and_numpy_device_agree():
    """The same Tensor program lazily on cpu() (fused), eagerly on cpu() (one
    compiled kernel per primitive) and on cpu_numpy() (the reference)."""
    np.random.seed(5)
    xs, ws = randn(6, 10), randn(10, 4)
    results = []
    for device, lazy in ((CPU, True), (CPU, False), (ndl.cpu_numpy(), True)):
        with ndl.lazy(lazy):
            x = ndl.Tensor(xs, device=device)
            w = ndl.Tensor(ws, device=device)
            h = ops.tanh(x @ w) + ops.broadcast_to(ops.summation(x, axes=(1,), keepdims=True), (6, 4))
            results.append([h.numpy(), ops.logsoftmax(h).numpy(), ops.flip(h, (0,))[1:5:2].numpy(),
                            ops.transpose(h).numpy() ** 2])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# ---- bounds checking ---------------------------------------------------------------------------
@pytest.fixture
def bounds_check(monkeypatch):
    monkeypatch.setattr(config, "BOUNDS_CHECK", True)
    yield


def test_bounds_check_subset(bounds_check):
    leaves = noncontiguous_leaves()
    t, s, f = (build.buffer(leaves[k]) for k in ("transposed", "sliced", "flipped"))
    a, b = randn(100, 70), randn(70, 130)
    outs = [build.elementwise("mul", t, s), build.reduce("reduce_max", f, (0,)),
            build.reduce("reduce_sum", leaf(randn(3, 17, 9)), (0, 1)),
            build.matmul(leaf(a), leaf(b)), build.matmul(t, build.permute(s, (1, 0))),
            leaf(randn(3, 4)).concatenate([leaf(randn(3, 4)), leaf(randn(3, 2))], axis=1),
            leaf(randn(2, 3)).dilate((0, 1), 1),
            build.elementwise("neg", build.as_strided(leaf(randn(5, 6)), (4, 3), (6, 2), 1))]
    check(*outs, rtol=1e-4, atol=1e-4)


def test_bounds_check_masked_reads(bounds_check):
    """Masked (padded) reads compute an out-of-range index that is never loaded."""
    x = randn(5, 6)
    outs = [build.elementwise("exp", build.pad(leaf(x), ((1, 2), (2, 0)))),
            build.elementwise("neg", leaf(x).scatter((9, 8), (slice(0, 9, 2), slice(1, 7))))]
    check(*outs, rtol=1e-6)
    z = ndl.Tensor(randn(1, 5, 5, 2), device=CPU)
    w = ndl.Tensor(randn(3, 3, 2, 3), device=CPU)
    out = ops.conv(z, w, stride=1, padding=1)
    expected = reference.evaluate(output_nodes([out]))[0]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_kernels_ask_for_the_targets_vector_width(vector_bytes):
    """LLVM vectorizes for 256-bit registers on AVX-512 CPUs unless a function asks
    for more; every function of a kernel asks for its target's width."""
    from needle.codegen import llvm as llvm_codegen
    x = ndl.Tensor(np.ones(64, np.float32), requires_grad=False)
    with ndl.lazy(True):
        y = ndl.ops.exp(x)
    kernel = plan(output_nodes([y]), schedule_cache.cpu_target())[0].calls[0].kernel
    text = llvm_codegen.render(kernel, "k_test", vector_bytes=vector_bytes)
    defines = [line for line in text.splitlines() if line.startswith("define ")]
    assert defines and all(line.endswith(f'"prefer-vector-width"="{8 * vector_bytes}"') for line in defines)
    assert "prefer-vector-width" not in llvm_codegen.render(kernel, "k_test")


@pytest.mark.parametrize("vector_bytes", [64, 32, 0])
def test_exp_uses_ldexp_only_for_avx512_targets(vector_bytes):
    """llvm.ldexp is one vscalefps with AVX-512 and a libm call per lane without it,
    so float32 exp asks for it only when rendered for 64-byte vectors (its values on
    both paths: test_vecmath_accuracy.py)."""
    from needle.codegen import llvm as llvm_codegen
    x = ndl.Tensor(np.ones(64, np.float32), requires_grad=False)
    with ndl.lazy(True):
        y = ndl.ops.exp(x)
    kernel = plan(output_nodes([y]), schedule_cache.cpu_target())[0].calls[0].kernel
    text = llvm_codegen.render(kernel, "k_test", vector_bytes=vector_bytes)
    assert ("llvm.ldexp" in text) == (vector_bytes == 64)
