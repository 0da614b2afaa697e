"""Advanced indexing (gather / scatter_add) and index assignment, against numpy's own
indexing and finite differences, in every mode (lazy and eager, on cpu() and
cpu_numpy())."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)

SHAPE = (3, 4, 5)
A = np.arange(60.0).reshape(SHAPE)
READ_CASES = [
    ([0, 2],),
    ([2, 0, 2],),                            # repeated rows: their gradients add up
    (slice(None), [3, -1]),                  # negative positions count from the end
    (1, slice(None), [0, 4]),                # an int next to an array is an index array too
    ([[0], [2]], [1, 3]),                    # broadcast index arrays
    (Ellipsis, [4, 0, 1]),
    ([1, 0], slice(1, 3), [2, 4]),           # arrays apart: their dims go first (numpy's rule)
    (None, [1], slice(0, 4, 2)),
    (np.array([True, False, True]),),
    (slice(None), A[0] > 10),                # a 2-d mask over axes 1 and 2
    (A > 30,),
    (np.array([], dtype=np.int64),),
    ([1, 0], slice(None), Ellipsis, [4, 2]),  # an ellipsis of no axes separates arrays too (numpy)
    (slice(0, 2), 0, Ellipsis, [4, 2]),
    (slice(0, 0), [1, 0], Ellipsis, [4, 2]),  # (empty: the shape shows where the dims went)
    ([2, 1], Ellipsis, [0, 3], [4, 2]),
]
IDS = [str(i) for i in range(len(READ_CASES))]


def _positions_hit(shape, idx):
    counts = np.zeros(shape)
    np.add.at(counts, idx, 1.0)
    return counts


@pytest.mark.parametrize("idx", READ_CASES, ids=IDS)
def test_read_matches_numpy_and_gradient_counts_hits(device, idx):
    idx = idx if len(idx) > 1 else idx[0]
    x = tensor(A, device)
    out = x[idx]
    expected = A[idx]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    if expected.size:
        w = np.random.uniform(0.5, 1.5, size=expected.shape)
        out.backward(ndl.Tensor(w, device=device, dtype="float64", requires_grad=False))
        grad = np.zeros(SHAPE)
        np.add.at(grad, idx, w)
        np.testing.assert_allclose(x.grad.numpy(), grad)


@pytest.mark.parametrize("idx", [([2, 0, 2],), (slice(None), [[1, 0], [3, 3]])], ids=["rows", "2d"])
def test_gradient_matches_finite_differences(device, idx):
    idx = idx if len(idx) > 1 else idx[0]
    gradient_check(lambda t: ops.exp(t[idx]) * 2, randn((3, 4), device))


def test_tensor_index_is_used_on_the_device(device):
    # integer ids index without host reads (float ids raise, as in numpy: test_ops_compare)
    w = randn((6, 3), device)
    ids = tensor([[5, 0], [2, 2]], device, dtype="int64", requires_grad=False)
    out = w[ids]
    np.testing.assert_array_equal(out.numpy(), w.numpy()[[[5, 0], [2, 2]]])
    gradient_check(lambda t: t[ids] * t[ids], w)


def test_rows_and_labels_pick_one_entry_per_row(device):
    logits = randn((4, 3), device)
    labels = tensor([2, 0, 1, 2], device, dtype="int64", requires_grad=False)
    out = logits[np.arange(4), labels]
    np.testing.assert_array_equal(out.numpy(), logits.numpy()[np.arange(4), [2, 0, 1, 2]])
    gradient_check(lambda t: t[np.arange(4), labels], logits)


def test_computed_out_of_range_indices_are_clamped(device, execution_mode):
    # a Tensor index still pending is not computed to be checked: the kernels wrap negatives
    # once and clamp the rest; one already computed (eager mode) is checked
    w = tensor(np.arange(5.0), device)
    ids = tensor([-1.0, 7.0, -9.0, 1.0], device, requires_grad=False) * 1.0
    if execution_mode == "lazy":
        np.testing.assert_array_equal(ops.gather(w, ids, 0).numpy(), [4.0, 4.0, 0.0, 1.0])
    else:
        with pytest.raises(ndl.errors.IndexingError, match="gather: index 7 is out of bounds.*Tensor"):
            ops.gather(w, ids, 0)


def test_gather_and_scatter_add_are_adjoint(device):
    x = randn((2, 5, 3), device)
    idx = tensor([[4, 0], [1, 4]], device, dtype="int64", requires_grad=False)
    out = ops.gather(x, idx, 1)
    np.testing.assert_array_equal(out.numpy(), np.take(x.numpy(), [[4, 0], [1, 4]], axis=1))
    gradient_check(lambda t: ops.gather(t, idx, 1), x)
    v = randn((2, 2, 2, 3), device)
    s = ops.scatter_add(v, idx, 1, (5,))
    expected = np.zeros((2, 5, 3))
    np.add.at(expected, (slice(None), np.array([[4, 0], [1, 4]])), v.numpy())
    np.testing.assert_allclose(s.numpy(), expected)
    gradient_check(lambda t: ops.scatter_add(t, idx, 1, (5,)), v)


def test_two_index_arrays_gather_pairs(device):
    x = randn((3, 4, 2), device)
    rows, cols = [0, 2, 2], [3, 0, 3]
    out = ops.gather(x, (rows, cols), 0)
    np.testing.assert_array_equal(out.numpy(), x.numpy()[rows, cols])
    gradient_check(lambda t: ops.gather(t, (rows, cols), 0), x)


def test_gather_fuses_with_elementwise_readers(device):
    w = randn((6, 4), device)
    out = ops.exp(w[[1, 5, 1]] * 2.0) + 1.0
    np.testing.assert_allclose(out.numpy(), np.exp(w.numpy()[[1, 5, 1]] * 2.0) + 1.0, rtol=1e-12)


def test_gathered_rows_feed_a_matmul(device):
    w, m = randn((7, 5), device), randn((5, 3), device)
    ids = tensor([6, 0, 3, 3], device, dtype="int64", requires_grad=False)
    out = w[ids] @ m
    np.testing.assert_allclose(out.numpy(), w.numpy()[[6, 0, 3, 3]] @ m.numpy(), rtol=1e-12)
    gradient_check(lambda a, b: a[ids] @ b, w, m)


# ---- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("idx,match", [
    (([0, 3],), "out of bounds"),
    (([-4],), "out of bounds"),
    ((np.array([True, False]),), "mask of shape"),
    ((slice(None), np.ones((4, 4), dtype=bool)), "mask of shape"),
    (([0.5, 1.0],), "integers"),
    (([[0, 1]], [[0, 1, 2]]), "broadcast"),
    (([0], [0], [0], [0]), "too many"),
], ids=["high", "low", "mask-short", "mask-2d", "floats", "broadcast", "too-many"])
def test_bad_index_is_a_clear_error(device, idx, match):
    with pytest.raises(ndl.errors.IndexingError, match=match):
        randn(SHAPE, device)[idx if len(idx) > 1 else idx[0]]


def test_gather_index_out_of_range_names_the_op(device):
    with pytest.raises(ndl.errors.IndexingError, match="gather"):
        ops.gather(randn((3, 2), device), [0, 3], 0)


# ---- writing -----------------------------------------------------------------------------
WRITE_CASES = [
    ((1, slice(1, 3)), (2, 5)),
    (([0, 2, 0], 1), (3, 5)),                 # position (0, 1) written twice: the last value wins
    ((A > 40,), None),
    ((Ellipsis, [4, 0]), (3, 4, 2)),
    ((slice(None), 0), ()),                   # a scalar broadcast over the slice
]


@pytest.mark.parametrize("idx,value_shape", WRITE_CASES, ids=[str(i) for i in range(len(WRITE_CASES))])
def test_write_matches_numpy_with_gradients(device, idx, value_shape):
    idx = idx if len(idx) > 1 else idx[0]
    base = randn(SHAPE, device)
    if value_shape is None:
        value_shape = (int(np.count_nonzero(A > 40)),)
    value = randn(value_shape, device)
    x = base * 1.0
    x[idx] = value
    expected = base.numpy().copy()
    expected[idx] = value.numpy()
    np.testing.assert_array_equal(x.numpy(), expected)
    w = np.random.uniform(0.5, 1.5, size=SHAPE)
    x.backward(ndl.Tensor(w, device=device, dtype="float64", requires_grad=False))
    written = np.zeros(SHAPE, dtype=bool)
    written[idx] = True
    np.testing.assert_allclose(base.grad.numpy(), np.where(written, 0.0, w))
    # the value's gradient: w at the position each element landed on, 0 where overwritten
    positions = np.arange(60).reshape(SHAPE)[idx]
    flat = np.broadcast_to(positions, positions.shape).reshape(-1)
    last = {p: k for k, p in enumerate(flat)}
    per_element = np.array([w.reshape(-1)[p] if last[p] == k else 0.0 for k, p in enumerate(flat)])
    expected_value_grad = per_element.reshape(positions.shape)
    if value.shape != positions.shape:  # broadcast value: its gradient sums over the copies
        expected_value_grad = expected_value_grad.sum().reshape(value.shape)
    np.testing.assert_allclose(value.grad.numpy(), expected_value_grad)


def test_write_with_python_scalar_and_mask_tensor(device):
    x = randn((4, 3), device) * 1.0
    expected = x.numpy().copy()
    x[x < 0] = 0.0
    expected[expected < 0] = 0.0
    np.testing.assert_array_equal(x.numpy(), expected)


def test_write_to_a_leaf_that_requires_grad_is_refused_outside_no_grad(device):
    w = randn((3,), device)
    with pytest.raises(ndl.errors.GraphError, match="no_grad"):
        w[0] = 1.0
    with ndl.no_grad():
        w[0] = 1.0
    assert w.is_leaf() and w.numpy()[0] == 1.0


def test_a_write_after_a_use_leaves_that_use_its_values(device):
    # torch's semantics: y used x before x[0] = 5, and its gradient uses x as it was then
    w = randn((3,), device)
    before = w.numpy().copy()
    x = w * 1.0
    y = x * x          # uses x before the write
    x[0] = 5.0
    (y + x).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * before + np.array([0, 1, 1]), rtol=1e-6)


@pytest.mark.parametrize("write", ["add_in_place", "mask_scale", "copy_row", "scale_row"])
def test_read_then_write_then_backward(device, write):
    a = np.arange(6, dtype="float32").reshape(3, 2) - 2
    w = tensor(a, device)
    y = w * 1.0
    if write == "add_in_place":
        y[0] += 2.0
        expected = a.copy(); expected[0] += 2
    elif write == "mask_scale":
        y[y > 0] *= 2.0
        expected = np.where(a > 0, 2 * a, a)
    elif write == "copy_row":
        y[1] = y[0]
        expected = a.copy(); expected[1] = a[0]
    else:
        y[0] = y[0] * 2.0
        expected = a.copy(); expected[0] *= 2
    np.testing.assert_allclose(y.numpy(), expected)
    (y * y).sum().backward()
    # d/dw sum(y_i^2) with y = A(w) linear: 2 * A^T y, A's entries read off `expected`
    dy = 2 * expected
    grad = {"add_in_place": dy, "mask_scale": np.where(a > 0, 2 * dy, dy),
            "copy_row": np.stack([dy[0] + dy[1], np.zeros(2, "float32"), dy[2]]),
            "scale_row": np.stack([2 * dy[0], dy[1], dy[2]])}[write]
    np.testing.assert_allclose(w.grad.numpy(), grad, rtol=1e-6)


def test_a_leaf_written_under_no_grad_after_use_makes_backward_fail_clearly(device):
    w = randn((3,), device)
    y = w * w
    with ndl.no_grad():
        w[0] = 5.0
    with pytest.raises(ndl.errors.GraphError, match="written in place after the op used it"):
        y.sum().backward()


def test_bad_write_is_a_clear_error(device):
    x = randn((3, 4), device) * 1.0
    with pytest.raises(ndl.errors.ShapeError, match="setitem"):
        x[0] = randn((3,), device)
    with pytest.raises(ndl.errors.IndexingError, match="setitem"):
        x[[0, 5]] = 1.0


# ---- pick: one entry of the last axis per row ----------------------------------------------
def test_pick_takes_one_entry_per_row_with_gradient(device):
    x = randn((2, 3, 4), device)
    idx = np.array([[3, 0, 3], [1, 1, 2]])
    out = ops.pick(x, idx)
    np.testing.assert_array_equal(out.numpy(), np.take_along_axis(x.numpy(), idx[..., None], -1)[..., 0])
    gradient_check(lambda t: ops.pick(t, idx), x)
    labels = tensor(idx, device, dtype="int64", requires_grad=False)  # on the device, not read back
    np.testing.assert_array_equal(ops.pick(x, labels).numpy(),
                                  np.take_along_axis(x.numpy(), idx[..., None], -1)[..., 0])
    gradient_check(lambda t: ops.pick(t * t, labels), x)


def test_pick_backward_is_one_differentiable_op(device):
    """The gradient of a pick (a classification loss's backward, every step) is one
    PickGrad: g[r] at column labels[r] of row r, exactly, zeros elsewhere; labels as
    floats (course-style) or ints; its own gradient picks (finite differences)."""
    x = randn((4, 5), device)
    labels = np.array([4, 0, 2, 2])
    g = randn((4,), device)
    for dtype in ("float64", "int64"):
        want = np.zeros((4, 5))
        want[np.arange(4), labels] = g.numpy()  # (gradient_check below moves g by rounding errors)
        y = tensor(labels, device, dtype=dtype, requires_grad=False)
        out = ops.pick(x, y)
        (grad, none) = out.op.gradient_as_tuple(g, out)
        assert type(grad.op).__name__ == "PickGrad" and none is None
        np.testing.assert_array_equal(grad.numpy(), want)
        w = randn((4, 5), device, requires_grad=False)
        gradient_check(lambda t: ops.summation(type(grad.op)(5)(t, y) * w), g)


def test_pick_bad_input(device):
    x = randn((3, 4), device)
    with pytest.raises(ndl.errors.ShapeError, match="pick"):
        ops.pick(x, [0, 1])
    with pytest.raises(ndl.errors.IndexingError, match="pick: index 4 is out of bounds"):
        ops.pick(x, [0, 4, 1])


@pytest.mark.parametrize("dtype", ["bool", "int64", "float32"])
def test_a_write_through_a_tensor_index_matches_numpy_for_each_dtype(dtype, device):
    # (written by kernels: repeated positions, the last wins; a bool tensor as numbers)
    rng = np.random.default_rng(3)
    base = (rng.random((6, 2)) > 0.5) if dtype == "bool" else rng.integers(-5, 5, (6, 2)).astype(dtype)
    index = np.array([4, -1, 4, 0])
    values = (rng.random((4, 2)) > 0.5) if dtype == "bool" else rng.integers(-5, 5, (4, 2)).astype(dtype)
    want = base.copy()
    want[index] = values
    a = ndl.Tensor(base, dtype=dtype, device=device, requires_grad=False)
    a[ndl.Tensor(index, dtype="int64", device=device, requires_grad=False)] = \
        ndl.Tensor(values, dtype=dtype, device=device, requires_grad=False)
    np.testing.assert_array_equal(a.numpy(), want)
