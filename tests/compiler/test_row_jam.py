"""Unroll-and-jam of a row reduction (compiler/row_jam.py): four rows reduced in the
same loops.  The rewrite on hand-written bodies with a known result; the bodies it
must leave alone; planned kernels' loops; values of jammed kernels (tails of 0 to 3
rows, several kept axes, a root broadcast back over the row, a layer norm and its
gradient) against float64 numpy within the sums' error bounds, lazy and eager."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, ops
from needle.codegen import kernel_ir as K
from needle.compiler import row_jam
from needle.compiler.row_jam import jam, jam_rows
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
U = 2.0 ** -24
F32 = "float32"


def row_sum_body(n: int, kept: str = "k") -> list:
    """acc = 0; for r in n: acc += x[kept * n + r]; out[kept] = acc"""
    acc = K.Var("acc", F32)
    at = K.affine([(K.Var(kept), n), (K.Var("r"), 1)])
    return [K.Declare("acc", F32, K.Const(0.0, F32)),
            K.Loop("r", n, [K.Assign("acc", K.Binary("add", acc, K.Load("x", at, F32), F32))]),
            K.Store("out", K.Var(kept), acc)]


def text(body) -> str:
    return K.print_kernel(K.Kernel("k", [], 0, body))


def test_jam_repeats_statements_inside_one_loop_and_renames_locals():
    q = K.Var("q")
    rows = [K.affine([(q, 2)]), K.affine([(q, 2)], 1)]
    assert text(jam(row_sum_body(8), "k", rows)).splitlines()[1:] == [
        "  var acc_0: float32 = 0.0",
        "  var acc_1: float32 = 0.0",
        "  for r in 8:",
        "    acc_0 = (acc_0 + x[(((q * 2) * 8) + r)])",
        "    acc_1 = (acc_1 + x[((((q * 2) + 1) * 8) + r)])",
        "  out[(q * 2)] = acc_0",
        "  out[((q * 2) + 1)] = acc_1"]


def test_jam_rows_steps_by_four_and_takes_the_tail_under_an_if():
    loops, body = jam_rows([("b", 2), ("k", 10)], row_sum_body(512), 512)
    assert loops == [("b", 2), ("kq", 3)]
    lines = text(body).splitlines()
    assert lines[1] == "  if (kq < 2):" and "  if not((kq < 2)):" in lines
    tail = lines[lines.index("  if not((kq < 2)):") + 1:]
    assert tail[:2] == ["    var acc_0: float32 = 0.0", "    var acc_1: float32 = 0.0"]  # rows 8 and 9
    assert "      acc_1 = (acc_1 + x[((9 * 512) + r)])" in tail and not any("acc_2" in t for t in tail)
    assert len([t for t in lines[:lines.index("  if not((kq < 2)):")] if "var acc_" in t]) == 4


def test_jam_rows_leaves_alone_what_it_cannot_or_need_not_jam():
    assert jam_rows([("k", 64)], row_sum_body(row_jam.JAM_MIN_ROW - 1), row_jam.JAM_MIN_ROW - 1) is None
    assert jam_rows([("b", 2), ("k", 3)], row_sum_body(512), 512) is None  # not one group of four rows
    # the only loop, so the parallel one: it keeps MIN_PARALLEL_STEPS iterations
    assert jam_rows([("k", 4 * row_jam.MIN_PARALLEL_STEPS - 1)], row_sum_body(512), 512) is None
    assert jam_rows([("k", 4 * row_jam.MIN_PARALLEL_STEPS)], row_sum_body(512), 512) is not None
    assert jam_rows([], row_sum_body(512), 512) is None
    ragged = [K.Loop("r", K.Var("k"), [K.Store("out", K.Var("r"), K.Const(0.0, F32))])]  # the row's extent
    assert jam_rows([("k", 64)], ragged, 512) is None
    outer = [K.Loop("r", 512, [K.Assign("total", K.Const(1.0, F32))])]  # a scalar declared outside
    assert jam_rows([("k", 64)], outer, 512) is None
    body = row_sum_body(512)
    body[1].body[0] = K.Assign("acc", K.Unary("exp", body[1].body[0].expr, F32))  # compute-bound
    assert jam_rows([("k", 64)], body, 512) is None


@pytest.mark.parametrize("row", [1, 10, row_jam.JAM_MAX_TRANSCENDENTAL_ROW - 1])
def test_short_rows_with_a_transcendental_are_jammed(row):
    """Below JAM_MAX_TRANSCENDENTAL_ROW a transcendental body is jammed at any length
    (its scalar tails overlap), where a plain one needs JAM_MIN_ROW elements a row."""
    body = row_sum_body(row)
    body[1].body[0] = K.Assign("acc", K.Unary("exp", body[1].body[0].expr, F32))
    loops, jammed = jam_rows([("k", 64)], body, row)
    assert loops == [("kq", 16)] and "acc_3" in text(jammed)
    assert (jam_rows([("k", 64)], row_sum_body(row), row) is None) == (row < row_jam.JAM_MIN_ROW)


def kernel_texts(*tensors) -> list:
    return [c.kernel.text() for c in plan(output_nodes(list(tensors)), cpu_target())[0].calls]


def test_a_long_row_sum_is_planned_four_rows_at_a_time():
    x = ndl.Tensor(np.ones((4099, 300), np.float32), device=CPU, requires_grad=False)
    with ndl.lazy(True):
        (kernel,) = kernel_texts(x.sum((1,)))
    assert "parallel for k0q in 1025:" in kernel and "if (k0q < 1024):" in kernel and "acc0_3" in kernel
    with ndl.lazy(True):
        (short,) = kernel_texts(ndl.Tensor(np.ones((4099, row_jam.JAM_MIN_ROW - 1), np.float32),
                                           device=CPU).sum((1,)))
    assert "k0q" not in short
    with ndl.lazy(True):  # rows of 100: short, and jammed (a layer norm over them 0.59x the time)
        (hundred,) = kernel_texts(ndl.Tensor(np.ones((4099, 100), np.float32), device=CPU).sum((1,)))
    assert "k0q" in hundred


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("rows, n", [(256, 20), (1027, 20), (4099, 37)])
def test_a_short_row_cross_entropy_is_jammed_and_matches_numpy(lazy, rows, n):
    """Softmax loss over rows of 20 and 37 logits (a transcendental body under
    JAM_MAX_TRANSCENDENTAL_ROW, above row_lanes.LANES_MAX_ROW): planned four rows at a
    time, tails of 0-3 rows; the loss against float64 numpy."""
    rng = np.random.default_rng(rows)
    z = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    y = rng.integers(0, n, rows)
    with ndl.lazy(lazy):
        logits, labels = ndl.Tensor(z, device=CPU), ndl.Tensor(y, device=CPU)
        if lazy:
            texts = kernel_texts(nn.SoftmaxLoss()(logits, labels))
            assert any("k0q" in t and "exp" in t for t in texts), texts
        got = nn.SoftmaxLoss()(logits, labels).numpy()
    z64 = z.astype(np.float64)
    m = z64.max(1, keepdims=True)
    want = (np.log(np.exp(z64 - m).sum(1)) + m[:, 0] - z64[np.arange(rows), y]).mean()
    # exp and log within 1 ulp, sums of n and of `rows` terms: a few ulp of the terms' size
    assert abs(got - want) <= 8 * (n + rows) * U * (np.abs(z64).max() + np.log(n))


def sum_bound(x, axes):
    """|float32 sum - exact| <= n u sum |x| (recursive summation, any order)."""
    n = np.prod([x.shape[a] for a in axes])
    return n * U * np.abs(x.astype(np.float64)).sum(axis=axes)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("shape,axes", [((4096, 300), (1,)), ((4097, 300), (1,)), ((4098, 257), (1,)),
                                        ((4099, 512), (1,)), ((7, 3, 517), (2,)), ((2, 9, 4, 300), (2, 3)),
                                        ((4097, 16), (1,)), ((1001, 100), (1,))])
def test_jammed_reductions_match_numpy(lazy, shape, axes):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    with ndl.lazy(lazy):
        t = ndl.Tensor(x, device=CPU, requires_grad=False)
        total, top = t.sum(axes), ops.max(t, axes)
        kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
        centered = t - ops.broadcast_to(ops.reshape(total, kept), shape)  # the root over the whole row
        got_sum, got_max, got_centered = total.numpy(), top.numpy(), centered.numpy()
    want = x.astype(np.float64).sum(axis=axes)
    assert np.all(np.abs(got_sum - want) <= sum_bound(x, axes))
    np.testing.assert_array_equal(got_max, x.max(axis=axes))
    # x - s, s as computed above: one more rounding of the difference
    want_centered = x.astype(np.float64) - want.reshape(kept)
    err = np.abs(got_centered - want_centered)
    assert np.all(err <= sum_bound(x, axes).reshape(kept) + U * np.abs(want_centered) * 1.0001)


@pytest.mark.parametrize("rows, n", [(513, 384), (1027, 16), (258, 100)])
def test_layer_norm_and_its_gradient_through_jammed_rows(rows, n):
    """LayerNorm1d over rows of 384, 16 and 100 (its mean, variance and gradient sums are
    row reductions) against the float64 formulas; y = (x - m) / sqrt(v + eps),
    dx = (g - mean(g) - y mean(g y)) / sqrt(v + eps) for the weight 1, bias 0."""
    rng = np.random.default_rng(3)
    x, g = (rng.standard_normal((rows, n)).astype(np.float32) for _ in range(2))
    with ndl.lazy(True):
        t = ndl.Tensor(x, device=CPU, requires_grad=True)
        out = nn.LayerNorm1d(n, device=CPU)(t)
        out.backward(ndl.Tensor(g, device=CPU))
        got, grad = out.numpy(), t.grad.numpy()
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    m, v = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
    y = (xd - m) / np.sqrt(v + 1e-5)
    dx = (gd - gd.mean(1, keepdims=True) - y * (gd * y).mean(1, keepdims=True)) / np.sqrt(v + 1e-5)
    # each value passes through a few row sums of n terms: errors of order n u times the
    # magnitudes summed, relative to the row's spread (|y| and |dx| are of order 1 here,
    # the smallest spread of 16 normal samples above 0.3), and a few roundings of its own
    spread = np.sqrt(v).min()
    np.testing.assert_allclose(got, y, atol=(n + 8) * U * 8 / spread, rtol=0)
    np.testing.assert_allclose(grad, dx, atol=(n + 8) * U * 32 / spread ** 2, rtol=0)
