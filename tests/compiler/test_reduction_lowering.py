"""Reduction lowering: softmax computes exp once per element, column reductions
take several rows per pass over the output row; values against numpy (float64)."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler import column_reduce, split_reductions
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes


@pytest.fixture(autouse=True)
def lazy():
    with ndl.lazy():
        yield


def kernels_of(*tensors) -> list:
    schedule, _ = plan(output_nodes(list(tensors)), cpu_target())
    return [call.kernel for call in schedule.calls]


def softmax(t):
    e = ops.exp(t - ops.broadcast_to(t.max((1,), keepdims=True), t.shape))
    return e / ops.broadcast_to(e.sum((1,), keepdims=True), t.shape)


def test_softmax_is_one_kernel_with_one_exp_per_element():
    x = np.random.randn(37, 300).astype(np.float32) * 10
    x[3] = -1e30  # a constant row: max = the row's value, every exp = 1
    x[5, 7] = 80.0  # exp(x) alone would overflow; exp(x - max) does not
    y = softmax(ndl.Tensor(x, requires_grad=False))
    (kernel,) = kernels_of(y)
    assert kernel.text().count("exp(") == 1, kernel.text()
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_logsoftmax_unchanged_by_the_reuse():
    x = np.random.randn(9, 70).astype(np.float32)
    y = ops.logsoftmax(ndl.Tensor(x, requires_grad=False), axis=1)
    x64 = x.astype(np.float64)
    m = x64.max(1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), x64 - m - np.log(np.exp(x64 - m).sum(1, keepdims=True)), rtol=1e-5,
                               atol=1e-6)



@pytest.mark.parametrize("shape", [(64, 1000), (5, 3)])
def test_a_cross_entropy_and_its_gradient_sum_the_exps_once(shape):
    """Loss and gradient in one graph (a training step): logsumexp's backward builds
    the forward's own shifted sum, so the graph holds one sum of exps, computed once
    and read by both (an exp per element for it and one for the softmax), where its
    own copy had cost a third pass of exps."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    y = rng.integers(0, shape[1], shape[0])
    logits = ndl.Tensor(x, requires_grad=True)
    loss = ndl.nn.SoftmaxLoss()(logits, ndl.Tensor(y, dtype="float32", requires_grad=False))
    loss.backward()
    kernels = kernels_of(loss, logits.grad)
    assert sum(k.text().count("exp(") for k in kernels) == 2, [k.text() for k in kernels]
    x64 = x.astype(np.float64)
    lse = np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + x64.max(1)
    np.testing.assert_allclose(loss.numpy(), (lse - x64[np.arange(shape[0]), y]).mean(), rtol=1e-5)
    softmax = np.exp(x64 - lse[:, None])
    softmax[np.arange(shape[0]), y] -= 1
    np.testing.assert_allclose(logits.grad.numpy(), softmax / shape[0], rtol=1e-4, atol=1e-7)

@pytest.mark.parametrize("shape", [(4099, 7), (13, 1030), (8, 2500), (3, 9), (1, 40)])
def test_column_sum_and_max(shape):
    """Rows not a multiple of the rows per pass, widths across several column blocks."""
    x = np.random.randn(*shape).astype(np.float32)
    t = ndl.Tensor(x, requires_grad=False)
    s, m = t.sum((0,)), t.max((0,))
    np.testing.assert_allclose(s.numpy(), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(m.numpy(), x.max(0))


def test_column_reduction_over_two_axes_with_an_epilogue():
    x = np.random.randn(6, 5, 33).astype(np.float32)
    y = ops.exp(ndl.Tensor(x, requires_grad=False).sum((0, 1)) * 0.1)
    (kernel,) = kernels_of(y)
    assert f"r1q in {5 // column_reduce.ROWS_PER_PASS}" in kernel.text(), kernel.text()
    np.testing.assert_allclose(y.numpy(), np.exp(x.astype(np.float64).sum((0, 1)) * 0.1), rtol=1e-5)


def test_wide_column_sum_splits_into_column_blocks():
    x = np.ones((16, 3 * column_reduce.COLUMN_BLOCK + 5), np.float32)
    y = ndl.Tensor(x, requires_grad=False).sum((0,))
    (kernel,) = kernels_of(y)
    assert kernel.parallel == ("kb", 4)
    np.testing.assert_array_equal(y.numpy(), np.full(x.shape[1], 16.0, np.float32))


@pytest.mark.parametrize("shape", [(16, 256), (7, 1030), (4099, 24), (3, 9), (5, 3000, 40)])
def test_several_column_sums_in_one_kernel_accumulate_in_local_rows(shape):
    """The sum of column sums of several inputs (an LSTM's bias gradient over its time
    steps) is one kernel whose stages each keep a local row, the inner loops along
    memory; odd row counts, widths past one block of rows, a leading kept axis."""
    xs = [np.random.randn(*shape).astype(np.float32) for _ in range(5)]
    ts = [ndl.Tensor(x, requires_grad=False) for x in xs]
    y = ts[0].sum((len(shape) - 2,))
    for t in ts[1:]:
        y = y + t.sum((len(shape) - 2,))
    (kernel,) = kernels_of(y)
    assert "register row4" in kernel.text()
    want = sum(x.astype(np.float64).sum(len(shape) - 2) for x in xs)
    scale = sum(np.abs(x.astype(np.float64)).sum(len(shape) - 2) for x in xs)
    assert np.all(np.abs(y.numpy() - want) <= 5 * shape[-2] * np.finfo(np.float32).eps * scale)


def test_column_logsumexp_reads_its_max_from_the_first_stage_row():
    """log(sum(exp(x - max))) + max over axis 0: two dependent stages on local rows."""
    x = (np.random.randn(300, 70) * 20).astype(np.float32)
    t = ndl.Tensor(x, requires_grad=False)
    m = t.max((0,))
    y = ops.log(ops.exp(t - ops.broadcast_to(m.reshape((1, 70)), t.shape)).sum((0,))) + m
    (kernel,) = kernels_of(y)
    assert "register row1" in kernel.text()
    x64 = x.astype(np.float64)
    m64 = x64.max(0)
    np.testing.assert_allclose(y.numpy(), np.log(np.exp(x64 - m64).sum(0)) + m64, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, cols", [(65536, 16), (20001, 24)])
def test_column_normalization_broadcast_back_runs_along_memory(rows, cols, monkeypatch):
    """(x - mean) / std over axis 0, a batch norm over N x H x W of NHWC data: the
    stages accumulate in local rows, the per-column 1 / std is computed once per
    column (a local row, not per element), and the result is stored row by row;
    against numpy float64.  (From split_reductions.SPLIT_MIN_COLUMNS elements its sums
    are split first, into partial sums the threads share: held off here.)"""
    monkeypatch.setattr(split_reductions, "SPLIT_MIN_COLUMNS", 1 << 60)
    assert rows * cols * 4 >= column_reduce.COLUMN_BROADCAST_BYTES
    x = (np.random.randn(rows, cols) * 3 + 1).astype(np.float32)
    t = ndl.Tensor(x, requires_grad=False)
    mean = ops.broadcast_to((t.sum((0,)) / rows).reshape((1, cols)), t.shape)
    centered = t - mean
    var = ops.broadcast_to(((centered ** 2).sum((0,)) / rows).reshape((1, cols)), t.shape)
    y = centered / (var + 1e-5) ** 0.5
    (kernel,) = kernels_of(y)
    text = kernel.text()
    assert "register row1" in text and "register cr_0" in text, text
    assert "sqrt" not in text.split("for r0 in")[-1]  # the store pass reads the column's term
    x64 = x.astype(np.float64)
    c = x64 - x64.mean(0)
    want = c / np.sqrt((c ** 2).mean(0) + 1e-5)
    # float32 sums of `rows` terms: relative error of the variance and mean ~ rows * eps
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=4 * rows * np.finfo(np.float32).eps * np.abs(want).max())


def test_kept_loops_follow_the_input_in_memory():
    """A 2 x 2 max pool in NCHW order over NHWC data (a conv's output): the channel loop,
    whose step moves one element in memory, is the innermost kept loop (outermost it
    made every channel a pass over all of the input's cache lines; the batch loop, 8
    iterations, is parallel with the next one, spread_parallel.py); against numpy."""
    x = np.random.randn(8, 12, 12, 16).astype(np.float32)
    t = ndl.Tensor(x, requires_grad=False)
    y = ops.permute(t, (0, 3, 1, 2)).reshape((8, 16, 6, 2, 6, 2)).max((3, 5))
    (kernel,) = kernels_of(y)
    loops = [line.strip().replace("parallel ", "").split()[1] for line in kernel.text().splitlines()
             if line.strip().startswith(("for ", "parallel for"))]
    assert loops == ["k0k2", "k4", "k1", "r3", "r5"], kernel.text()
    want = x.transpose(0, 3, 1, 2).reshape(8, 16, 6, 2, 6, 2).max((3, 5))
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("shape,axis", [((4, 8), 0), ((3, 16), 0), ((2, 5, 9), 1), ((6, 8), 1), ((4, 3, 16), 0)])
@pytest.mark.parametrize("inner,outer", [("max", "sum"), ("mean", "sum"), ("sum", "max"), ("max", "mean")])
def test_a_reduction_of_what_reads_a_reduction_over_the_same_axis(shape, axis, inner, outer):
    # (lowering: "cannot inline reduce_sum (it should have been stored)" when the axis is
    # not the last and the last axis is 8 or more: the column strategy's last stage is its root)
    a = np.random.default_rng(len(shape) + axis).standard_normal(shape).astype("float32")
    with ndl.lazy(True):
        x = ndl.Tensor(a, requires_grad=False)
        m = getattr(x, inner)((axis,), keepdims=True).broadcast_to(shape)
        got = getattr(x - m, outer)((axis,)).numpy()
    want = getattr(np, outer)(a - getattr(np, inner)(a, axis=axis, keepdims=True), axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_column_softmax_and_a_variance_over_axis_0():
    a = np.random.default_rng(3).standard_normal((5, 12)).astype("float32")
    with ndl.lazy(True):
        x = ndl.Tensor(a, requires_grad=False)
        e = ndl.ops.exp(x - x.max((0,), keepdims=True).broadcast_to(x.shape))
        softmax = (e / e.sum((0,), keepdims=True).broadcast_to(x.shape)).numpy()
        var = ((x - x.mean((0,), keepdims=True).broadcast_to(x.shape)) ** 2).sum((0,)).numpy()
    ref = np.exp(a - a.max(0)) / np.exp(a - a.max(0)).sum(0)
    np.testing.assert_allclose(softmax, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, ((a - a.mean(0)) ** 2).sum(0), rtol=1e-5, atol=1e-5)
