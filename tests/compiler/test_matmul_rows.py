"""Matmuls of few rows or few columns, or too small to tile (compiler/matmul_rows.py):
which kernel each shape plans (the row stream, its transposed form, dot products, the
register tiles, the plain nest), the chunk widths, and values against float64 numpy
within the dot products' error bound — for AVX-512 and AVX2 code where the host runs it,
lazy and eager, with fused epilogues, batches, ragged chunks and tails of K, and
gradients."""
import dataclasses

import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler import matmul_rows
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
EPS = np.finfo(np.float32).eps


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def target_for(vector_bytes: int, threads: int = 2):
    host = cpu_target()
    target = dataclasses.replace(host.with_vector_bytes(vector_bytes), threads=threads)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot execute {vector_bytes}-byte SIMD code")
    return target


def run_planned(outputs, target) -> tuple:
    """(kernel names, texts, output arrays) of `outputs` planned for `target` and run."""
    nodes = output_nodes(outputs)
    signature = structure(nodes)
    schedule, _ = plan(nodes, target, signature)
    names = [c.kernel.name for c in schedule.calls]
    texts = [c.kernel.text() for c in schedule.calls]
    got = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, CPU)
    return names, texts, [g.numpy() for g in got]


def bound(a, b, extra=0.0):
    """|float32 result - exact| for sums of k products (then `extra`, e.g. a bias,
    added): (k + 2) eps (|a| |b| + |extra|)."""
    k = a.shape[-1]
    return (k + 2) * EPS * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(extra)) + 1e-30


# ---- which kernel ------------------------------------------------------------------------------
@pytest.mark.parametrize("vector_bytes", [64, 32])
@pytest.mark.parametrize("m, k, n, path", [
    (1, 1024, 1024, "rows"),     # a vector times a matrix: tiles would pack B and compute 6-8 rows for 1
    (4, 784, 256, "rows"),
    (32, 512, 2048, "rows"),     # B's rows 8 KB apart: the tiles would pack it on every call
    (48, 300, 1024, "rows"),
    (64, 1024, 1024, "tiles"),   # enough rows to pay for packing B
    (16, 32, 256, "tiles"),      # a small B read in place by the tiles
    (12, 32, 256, "rows"),       # too small to tile, deep enough (SMALL_DEPTH) to stream
    (60, 30, 60, "rows"),
    (16, 8, 700, "naive"),       # too small to tile and shallow: the plain nest
    (100, 100, 10, "rows"),      # 8 to 15 columns: the stream on AVX-512 too, as on AVX2
])
def test_which_kernel_a_matmul_plans(m, k, n, path, vector_bytes):
    a, b = data(m, k), data(k, n, seed=1)
    c = ndl.Tensor(a) @ ndl.Tensor(b)
    names, texts, (got,) = run_planned([c], target_for(vector_bytes))
    if path == "rows":  # one kernel, no packing, the four-step K loop
        assert len(names) == 1 and not names[0].startswith("PB_") and "for k4 in" in texts[0], texts
    else:
        assert "for k4 in" not in "".join(texts)
        assert ("var acc" in texts[-1]) == (path == "naive")  # the plain nest's dot products
    assert np.all(np.abs(got - a.astype(np.float64) @ b) <= bound(a, b))


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_the_plain_nest_sums_in_order_and_dot_products_vectorize(vector_bytes):
    """The plain nest's dot product sums k = 0, 1, ... (no reassociation), as the tiles and
    the row stream do, so its value does not depend on what its kernel fuses with it; the
    jammed dot products of contiguous runs (W @ x) keep a vectorized sum: their K loop is
    the work.  Both within the bound of a sum of k products."""
    target = target_for(vector_bytes)
    a, b = data(6, 20), data(20, 3, seed=1)
    names, texts, (got,) = run_planned([ndl.Tensor(a) @ ndl.Tensor(b)], target)
    assert "(in order)" in texts[-1] and "*c" in texts[-1], texts
    assert np.all(np.abs(got - a.astype(np.float64) @ b) <= bound(a, b))
    w, x = data(300, 260), data(260, 1, seed=1)
    names, texts, (got,) = run_planned([ndl.Tensor(w) @ ndl.Tensor(x)], target)
    assert "acc_3" in texts[0] and "(in order)" not in texts[0], texts
    assert np.all(np.abs(got - w.astype(np.float64) @ x) <= bound(w, x))


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_matrix_vector_products_plan_dot_products_or_a_transposed_stream(vector_bytes):
    """W @ x and x @ W.T: each output a dot product of contiguous runs, four outputs at
    a time (the jammed plain nest); W.T @ x: the row stream of C^T = x^T W."""
    w, x = data(300, 260), data(260, 1, seed=1)
    target = target_for(vector_bytes)
    W, X = ndl.Tensor(w), ndl.Tensor(x)
    names, texts, (got,) = run_planned([W @ X], target)
    assert len(names) == 1 and "acc_3" in texts[0] and "for k4 in" not in texts[0]
    assert np.all(np.abs(got - w.astype(np.float64) @ x) <= bound(w, x))

    xt, w2 = data(1, 300, seed=2), data(260, 300, seed=3)
    names, texts, (got,) = run_planned([ndl.Tensor(xt) @ ops.transpose(ndl.Tensor(w2))], target)
    assert len(names) == 1 and "acc_3" in texts[0]
    assert np.all(np.abs(got - xt.astype(np.float64) @ w2.T) <= bound(xt, w2.T))

    x3 = data(300, 2, seed=4)
    names, texts, (got,) = run_planned([ops.transpose(W) @ ndl.Tensor(x3)], target)
    assert len(names) == 1 and "for k4 in" in texts[0] and not names[0].startswith("PB_")
    assert np.all(np.abs(got - w.T.astype(np.float64) @ x3) <= bound(w.T, x3))


def test_chunk_widths():
    # (rows, columns, lanes, itemsize, threads): whole vectors, the accumulators within
    # ACC_BYTES, a chunk per thread where the columns allow
    assert matmul_rows.ACC_BYTES == 8192
    assert matmul_rows.chunk_width(1, 1024, 8, 4, 2) == 512
    assert matmul_rows.chunk_width(32, 2048, 8, 4, 2) == 64      # 8192 / (4 * 32)
    assert matmul_rows.chunk_width(48, 1024, 16, 4, 2) == 32     # 42 rounded down to whole vectors
    assert matmul_rows.chunk_width(4, 100, 8, 4, 2) == 56        # 50 per thread, rounded up
    assert matmul_rows.chunk_width(1, 8, 8, 4, 2) == 8           # never under one vector
    assert matmul_rows.chunk_width(2, 1000, 8, 8, 1) == 512      # float64: 8192 / (8 * 2)


# ---- values -----------------------------------------------------------------------------------
@pytest.mark.parametrize("vector_bytes", [64, 32])
@pytest.mark.parametrize("m, k, n", [
    (1, 1, 16), (1, 7, 33), (2, 4, 100), (3, 5, 17), (4, 257, 1000), (5, 64, 96), (31, 33, 40),
    (48, 3, 160), (2, 1023, 24), (40, 40, 40), (60, 17, 9),
])
def test_row_stream_with_bias_and_relu_matches_numpy(m, k, n, vector_bytes):
    """relu(A @ B + b) in one kernel: ragged last chunks, K tails of 0-3 steps, odd row
    counts (a row left after the pairs)."""
    a, b, bias = data(m, k), data(k, n, seed=1), data(1, n, seed=2)
    A, B, Bias = ndl.Tensor(a), ndl.Tensor(b), ndl.Tensor(bias)
    y = ops.relu(A @ B + ops.broadcast_to(Bias, (m, n)))
    _, _, (got,) = run_planned([y], target_for(vector_bytes))
    exact = a.astype(np.float64) @ b + bias
    assert np.all(np.abs(got - np.maximum(exact, 0)) <= bound(a, b, bias))


@pytest.mark.parametrize("lazy", [True, False])
def test_batched_and_fused_operands(lazy):
    """A stack of few-row products (attention's single query) and an A computed in the
    kernel (relu of a view), through the API in lazy and eager mode."""
    a, b = data(2, 3, 2, 40), data(2, 3, 40, 70, seed=1)
    with ndl.lazy(lazy):
        got = (ndl.Tensor(a) @ ndl.Tensor(b)).numpy()
        fused = (ops.relu(ndl.Tensor(a)) @ ndl.Tensor(b)).numpy()
    assert np.all(np.abs(got - a.astype(np.float64) @ b) <= bound(a, b))
    r = np.maximum(a, 0)
    assert np.all(np.abs(fused - r.astype(np.float64) @ b) <= bound(r, b))


@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("m", [1, 3])
def test_gradients_of_a_few_row_linear_layer(lazy, m):
    """L = sum(relu(x W + b) * g): dx = (r' g) W^T (dot products), dW = x^T (r' g),
    db = sum over rows, against the float64 formulas."""
    x, w, bias, g = data(m, 300), data(300, 200, seed=1), data(1, 200, seed=2), data(m, 200, seed=3)
    with ndl.lazy(lazy):
        X, W, Bias = ndl.Tensor(x), ndl.Tensor(w), ndl.Tensor(bias)
        z = X @ W + ops.broadcast_to(Bias, (m, 200))
        (ops.relu(z) * ndl.Tensor(g)).sum().backward()
        dx, dw, db = X.grad.numpy(), W.grad.numpy(), Bias.grad.numpy()
    z64 = x.astype(np.float64) @ w + bias
    # (an element of z within its error bound of 0 could take either side of relu: these
    # seeds give none)
    assert np.all(np.abs(z64) > bound(x, w, bias))
    dz = np.where(z64 > 0, g, 0.0)
    assert np.all(np.abs(dx - dz @ w.T) <= bound(dz, w.T))
    assert np.all(np.abs(dw - x.T.astype(np.float64) @ dz) <= bound(x.T, dz))
    assert np.all(np.abs(db - dz.sum(0, keepdims=True)) <= (m + 2) * EPS * np.abs(dz).sum(0, keepdims=True))


@pytest.mark.parametrize("m, k, n", [(0, 48, 48), (3, 0, 16), (2, 16, 0), (0, 0, 0), (40, 0, 40)])
def test_empty_products(m, k, n):
    """Empty rows, depth or columns: the shapes numpy gives, zeros where the depth is 0."""
    a, b = data(m, k), data(k, n, seed=1)
    with ndl.lazy(True):
        got = (ndl.Tensor(a) @ ndl.Tensor(b)).numpy()
    assert got.shape == (m, n)
    np.testing.assert_array_equal(got, np.zeros((m, n), np.float32))
