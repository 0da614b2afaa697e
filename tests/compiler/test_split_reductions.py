"""Pass 0b (CPU), full reductions in two steps (compiler/split_reductions.py): a sum or
max of a whole large array (or to a few values, or to the columns of a tall matrix)
becomes partial reductions over slices of its leading reduced axis, run in parallel,
then one over the partials.  The rewrite on small graphs with a known result, the
graphs it leaves alone, and values (lazy and eager, transposed sources, fused producers
and epilogues, gradients) against float64 numpy within the sum's error bound, n u sum |x|."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler import split_reductions as S
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.nodes import toposort
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
U = 2.0 ** -24


def tensor(x, requires_grad=False):
    return ndl.Tensor(x, device=CPU, requires_grad=requires_grad)


def test_a_full_sum_becomes_partial_sums_of_its_leading_axis_then_one_sum():
    with ndl.lazy(True):
        total = tensor(np.ones((4096, 512), np.float32)).sum()
        (root,) = S.split_reductions(output_nodes([total]), threads=2)
        graph = [(n.op, n.shape) for n in toposort([root])]
    # (chunks of S.BLOCK elements: 512 of 4096, each accumulator adding a few hundred values)
    assert graph == [("buffer", (4096, 512)), ("reshape", (512, 8, 512)), ("reduce_sum", (512, 1, 1)),
                     ("reduce_sum", (1, 1, 1)), ("reshape", (1, 1)), ("reshape", ())]
    assert [n.arg for n in toposort([root]) if n.op == "reduce_sum"] == [(1, 2), (0,)]
    with ndl.lazy(True):
        kernels = [c.kernel for c in plan(output_nodes([total]), cpu_target())[0].calls]
    assert kernels[0].parallel is not None and kernels[1].parallel is None, [k.text() for k in kernels]


@pytest.mark.parametrize("shape,threads", [((1 << 18, 4), 2), ((1 << 16, 16), 4), ((1000, 1000), 2)])
def test_column_sums_of_a_tall_matrix_are_split(shape, threads):
    """Columns of many rows (the column path shares columns out in blocks of 1024: one
    task): COLUMN_CHUNKS_PER_THREAD partial column sums a thread, in parallel, then
    theirs."""
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal(shape).astype(np.float32)
    chunks = S.COLUMN_CHUNKS_PER_THREAD * threads
    with ndl.lazy(True):
        cols = tensor(x).sum((0,))
        (root,) = S.split_reductions(output_nodes([cols]), threads)
        assert [n.shape for n in toposort([root]) if n.op == "reduce_sum"] == [(chunks, 1, shape[1]),
                                                                                (1, 1, shape[1])]
        got = cols.numpy()
    want = x.astype(np.float64).sum(0)
    assert np.all(np.abs(got - want) <= x.shape[0] * U * np.abs(x.astype(np.float64)).sum(0))


def test_chunks_divide_the_axis():
    assert [S._chunks(n) for n in (4096, 1000, 8, 97, 6, 1 << 24)] == [64, 50, 4, None, None, 64]
    assert S._chunks(320, most=19) == 16  # (at most `most`: a chunk reads MIN_CHUNK elements)


def test_small_partial_and_indivisible_reductions_stay():
    with ndl.lazy(True):
        small = tensor(np.ones(S.SPLIT_MIN - 1, np.float32)).sum()
        rows = tensor(np.ones((4096, 512), np.float32)).sum((1,))  # 4096 values: threads split those
        few = tensor(np.ones((S.SMALL_OUTPUT + 1, 1 << 14), np.float32)).sum((1,))  # 9 rows: shared out
        narrow = tensor(np.ones((S.SPLIT_MIN_COLUMNS // 16 - 16, 16), np.float32)).sum((0,))  # too few rows
        prime = tensor(np.ones((3, 65537), np.float32)).sum()  # no axis splits in 4 or more
        outputs = output_nodes([small, rows, few, narrow, prime])
        assert S.split_reductions(outputs, threads=2) == outputs


def sum_bound(x) -> float:
    return x.size * U * np.abs(x.astype(np.float64)).sum()


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("shape", [(1 << 20,), (4096, 300), (7, 9000), (2, 3, 128, 100)])
def test_split_sums_and_maxima_match_numpy(lazy, shape):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[12345] = 9.5  # the maximum, somewhere in one chunk
    with ndl.lazy(lazy):
        t = tensor(x)
        total, top, mean = t.sum(), ops.max(t, tuple(range(len(shape)))), ops.mean(t)
        got = (float(total.numpy()), float(top.numpy()), float(mean.numpy()))
    want = x.astype(np.float64).sum()
    assert abs(got[0] - want) <= sum_bound(x)
    assert got[1] == 9.5
    assert abs(got[2] - want / x.size) <= (sum_bound(x) + abs(want) * U) / x.size


def test_a_transposed_fused_source_and_its_gradient():
    """sum(exp(x^T) * 0.5) over a permuted view, and d/dx sum(x * x) = 2 x."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((512, 300)).astype(np.float32)
    with ndl.lazy(True):
        t = tensor(x, requires_grad=True)
        value = (ops.exp(ops.transpose(t)) * 0.5).sum()
        square = (t * t).sum()
        square.backward()
        got, grad = float(value.numpy()), t.grad.numpy()
    terms = np.exp(x.astype(np.float64)) * 0.5
    # each term's exp is within 1 ulp and its product exact: n u sum plus 2 u per term
    assert abs(got - terms.sum()) <= (x.size + 2) * U * terms.sum()
    np.testing.assert_array_equal(grad, 2 * x)


def test_a_split_variance_reads_its_split_mean_without_storing_its_input():
    """var = sum((x - mean)^2) / n over the rows of a tall matrix, both sums split: the
    variance's partial sums compute (x - mean)^2 themselves (fusion does not store it so
    that the mean's reductions could fuse into its kernel: they cannot, being over
    another shape), so the plan is the two partial sums and the two totals; against
    numpy within the bound of the two float32 sums."""
    rng = np.random.default_rng(8)
    rows, cols = 1 << 16, 16
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
    with ndl.lazy(True):
        t = tensor(x)
        mean = ops.broadcast_to((t.sum((0,)) / rows).reshape((1, cols)), t.shape)
        var = ((t - mean) ** 2).sum((0,)) / rows
        target = cpu_target()
        names = [c.kernel.name for c in plan(output_nodes([var]), target)[0].calls]
        got = var.numpy()
    k = S.COLUMN_CHUNKS_PER_THREAD * target.threads
    assert sorted(names) == sorted([f"R_{k}_{rows // k}_16", f"R_{k}_1_16"] * 2), names
    x64 = x.astype(np.float64)
    want = ((x64 - x64.mean(0)) ** 2).mean(0)
    # the mean's error (rows u mean|x|) enters each square twice; the sum adds rows u
    bound = 2 * rows * U * np.abs(x64).mean(0) * np.abs(x64 - x64.mean(0)).mean(0) + rows * U * want
    assert np.all(np.abs(got - want) <= bound + 4 * U * want)
