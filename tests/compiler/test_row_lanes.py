"""Short rows in SIMD lanes (compiler/row_lanes.py): a transcendental row reduction over
rows of at most LANES_MAX_ROW elements computes one row a lane, the rows' elements
copied transposed to a local tile first.  Which kernels are planned so, for 32- and
64-byte vectors; which are not; values (cross-entropy, logsumexp; tails of leftover
rows; infinite and NaN rows) against float64 numpy, lazy and eager, and run for each
SIMD width the host can execute."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, ops
from needle.compiler import row_jam, row_lanes
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
U = 2.0 ** -24


def planned(tensor, vector_bytes):
    nodes = output_nodes([tensor])
    signature = structure(nodes)
    target = cpu_target().with_vector_bytes(vector_bytes)
    schedule, _ = plan(nodes, target, signature)
    return schedule, signature, target


def lse64(z):
    z = z.astype(np.float64)
    m = z.max(1, keepdims=True)
    return np.log(np.exp(z - m).sum(1)) + m[:, 0]


@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("rows, n", [(256, 10), (1027, 4), (515, 16)])
def test_a_short_row_cross_entropy_is_planned_in_lanes(vector_bytes, rows, n):
    lanes = vector_bytes // 4
    with ndl.lazy(True):
        loss = nn.SoftmaxLoss()(ndl.Tensor(np.zeros((rows, n), np.float32), device=CPU),
                                ndl.Tensor(np.zeros(rows, np.int64), device=CPU))
        schedule, _, _ = planned(loss, vector_bytes)
    text = schedule.calls[0].kernel.text()
    steps = -(-rows // lanes)
    assert f"parallel for k0l in {steps}:" in text and f"register tile0: float32[{n * lanes}]" in text
    assert f"vector for k0c in {lanes}:" in text and "exp((tile0[" in text
    assert (f"if (k0l < {rows // lanes}):" in text) == bool(rows % lanes)  # leftover rows: the jammed body


def test_what_is_not_planned_in_lanes():
    with ndl.lazy(True):
        def kernel(shape, f):
            x = ndl.Tensor(np.zeros(shape, np.float32), device=CPU)
            return planned(f(x), 32)[0].calls[0].kernel.text()
        assert "k0l" not in kernel((4096, 10), lambda x: x.sum((1,)))  # no transcendental: the copy would not pay
        assert "k0l" not in kernel((4096, row_lanes.LANES_MAX_ROW + 1), lambda x: ops.logsumexp(x, (1,)))
        few = 8 * row_jam.MIN_PARALLEL_STEPS - 8  # the only loop keeps MIN_PARALLEL_STEPS steps
        assert "k0l" not in kernel((few, 10), lambda x: ops.logsumexp(x, (1,)))
        assert "k0l" in kernel((few + 8, 10), lambda x: ops.logsumexp(x, (1,)))
        # a row of results (a softmax) would be a scatter: its rows stay as they were
        assert not any("k0l" in c.kernel.text() for c in planned(ops.logsoftmax(
            ndl.Tensor(np.zeros((4096, 10), np.float32), device=CPU), axis=1), 32)[0].calls)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("rows, n", [(256, 10), (1027, 10), (1029, 3), (4099, 16)])
def test_cross_entropy_in_lanes_matches_numpy(lazy, rows, n):
    """The loss against float64 numpy: exp and log within 1 ulp, sums of n and of `rows`
    terms, a few ulp of the terms' size."""
    rng = np.random.default_rng(rows + n)
    z = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    y = rng.integers(0, n, rows)
    with ndl.lazy(lazy):
        got = nn.SoftmaxLoss()(ndl.Tensor(z, device=CPU), ndl.Tensor(y, device=CPU)).numpy()
    want = (lse64(z) - z.astype(np.float64)[np.arange(rows), y]).mean()
    assert abs(got - want) <= 8 * (n + rows) * U * (np.abs(z).max() + np.log(n))


@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_logsumexp_in_lanes_for_each_vector_width(vector_bytes):
    """Rows with infinities and NaNs keep numpy's answers: a row of -inf gives -inf, one
    with +inf gives inf, one with a NaN NaN; finite rows within 2 (n + 2) ulp of their
    size.  Run for each width the host can execute (63 rows: a tail for both)."""
    target = cpu_target().with_vector_bytes(vector_bytes)
    if not target.can_run_on(cpu_target()):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    rng = np.random.default_rng(vector_bytes)
    rows, n = 16 * row_jam.MIN_PARALLEL_STEPS + 15, 12
    z = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    z[3] = -np.inf
    z[5, 7] = np.inf
    z[9, 2] = np.nan
    z[10, :6] = -np.inf
    with ndl.lazy(True):
        out = ops.logsumexp(ndl.Tensor(z, device=CPU, requires_grad=False), (1,))
        schedule, signature, _ = planned(out, vector_bytes)
    assert "k0l" in schedule.calls[0].kernel.text()
    (got,) = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, CPU)
    got = got.numpy().reshape(rows)
    assert got[3] == -np.inf and got[5] == np.inf and np.isnan(got[9])
    finite = np.isfinite(z).all(1) | (np.arange(rows) == 10)
    with np.errstate(invalid="ignore"):
        want = lse64(np.where(np.isinf(z), -np.inf, z))
    bound = 2 * (n + 2) * U * (np.abs(np.where(np.isfinite(z), z, 0)).max(1) + np.log(n))
    assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite])


def _exp_sum_body(n, shift=None):
    """acc = 0; for r in n: acc += exp(x[k * n + r (+ shift)]); out[k] = acc"""
    from needle.codegen import kernel_ir as K
    at = K.affine([(K.Var("k"), n), (K.Var("r"), 1)])
    if shift is not None:
        at = K.Binary("add", at, K.Var(shift), K.INDEX)
    fold = K.Binary("add", K.Var("acc", "float32"), K.Unary("exp", K.Load("x", at, "float32"), "float32"), "float32")
    body = [K.Declare("acc", "float32", K.Const(0.0, "float32")), K.Loop("r", n, [K.Assign("acc", fold)]),
            K.Store("out", K.Var("k"), K.Var("acc", "float32"))]
    return ([K.Let("s", K.Const(1, K.INDEX))] if shift else []) + body


def test_only_loads_whose_row_start_is_known_before_the_body_are_tiled():
    """x[k * n + r] is copied to a tile before the body; x[k * n + r + s], s a value the
    body lets, stays a load (a gather) of its own."""
    from needle.codegen import kernel_ir as K
    _, body = row_lanes.lane_rows([("k", 128)], _exp_sum_body(10), 10, 8)
    text = K.print_kernel(K.Kernel("k", [], 0, body))
    assert "register tile0: float32[80]" in text and "exp(tile0[" in text
    _, body = row_lanes.lane_rows([("k", 128)], _exp_sum_body(10, "s"), 10, 8)
    text = K.print_kernel(K.Kernel("k", [], 0, body))
    assert "tile0" not in text and "exp(x[" in text
