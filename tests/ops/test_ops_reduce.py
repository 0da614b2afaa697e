"""Reductions (summation, mean, max), logsumexp and logsoftmax."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)

# (input shape, axes): None, ints, tuples, negative axes, size-1 axes, 0-d inputs, empty tuple
REDUCE_CASES = [
    ((3, 4), None),
    ((3, 4), 0),
    ((3, 4), 1),
    ((3, 4), -1),
    ((3, 4), (0, 1)),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (-1, -3)),
    ((2, 3, 4), (1,)),
    ((2, 1, 4), 1),
    ((1, 1), None),
    ((5,), 0),
    ((), None),
    ((2, 3), ()),
]
REDUCE_IDS = [f"{s}-{a}" for s, a in REDUCE_CASES]


def _np_axes(axes):
    return tuple(axes) if isinstance(axes, (tuple, list)) else axes


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=REDUCE_IDS)
def test_summation_forward(device, shape, axes, keepdims):
    x = randn(shape, device, dtype="float32")
    expected = np.sum(x.numpy(), axis=_np_axes(axes), keepdims=keepdims)
    for out in (ops.summation(x, axes, keepdims=keepdims), x.sum(axes, keepdims=keepdims)):
        assert out.shape == expected.shape
        assert out.dtype == "float32"
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=REDUCE_IDS)
def test_summation_gradient(device, shape, axes, keepdims):
    gradient_check(lambda t: ops.summation(t, axes, keepdims=keepdims), randn(shape, device))


def test_summation_default_axes(device):
    x = randn((2, 3), device)
    assert ops.summation(x).shape == ()
    np.testing.assert_allclose(ops.summation(x).numpy(), x.numpy().sum())


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=REDUCE_IDS)
def test_mean(device, shape, axes, keepdims):
    x = randn(shape, device, dtype="float32")
    expected = np.mean(x.numpy(), axis=_np_axes(axes), keepdims=keepdims)
    for out in (ops.mean(x, axes, keepdims=keepdims), x.mean(axes, keepdims=keepdims)):
        assert out.shape == expected.shape
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    gradient_check(lambda t: ops.mean(t, axes, keepdims=keepdims), randn(shape, device))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=REDUCE_IDS)
def test_max_forward(device, shape, axes, keepdims):
    x = randn(shape, device, dtype="float32")
    expected = np.max(x.numpy(), axis=_np_axes(axes), keepdims=keepdims)
    for out in (ops.max(x, axes, keepdims=keepdims), x.max(axes, keepdims=keepdims)):
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=REDUCE_IDS)
def test_max_gradient(device, shape, axes, keepdims):
    # distinct values spaced far apart, so a perturbation never changes the argmax
    n = int(np.prod(shape))
    values = np.random.permutation(n).reshape(shape).astype(np.float64)
    gradient_check(lambda t: ops.max(t, axes, keepdims=keepdims), tensor(values, device))


def test_max_ties_share_the_gradient(device):
    x = tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0], [-1.0, -2.0, -3.0, -4.0]], device)
    ops.max(x, 1).backward(tensor([1.0, 3.0, 2.0], device, requires_grad=False))
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5, 0], [1, 1, 1, 0], [2, 0, 0, 0]])
    y = tensor([[2.0, 2.0], [2.0, 1.0]], device)
    ops.max(y).backward()
    np.testing.assert_allclose(y.grad.numpy(), [[1 / 3, 1 / 3], [1 / 3, 0]])


def test_max_with_infinities(device):
    x = tensor([[-np.inf, 1.0], [np.inf, 0.0], [-np.inf, -np.inf]], device, dtype="float32")
    np.testing.assert_array_equal(ops.max(x, 1).numpy(), [1.0, np.inf, -np.inf])


def test_reduce_bad_axes(device):
    x = randn((2, 3), device)
    for fn in (ops.summation, ops.max, ops.mean, ops.logsumexp):
        with pytest.raises(ndl.errors.AxisError, match=r"\(2, 3\)"):
            fn(x, 2)
        with pytest.raises(ndl.errors.AxisError):
            fn(x, (-3,))
        with pytest.raises(ndl.errors.AxisError, match="repeated"):
            fn(x, (0, 0))


# ---- logsumexp ---------------------------------------------------------------------------
def _np_logsumexp(x, axes):
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return np.squeeze(out, axis=axes) if axes is not None else out.reshape(())


LSE_CASES = [((3, 4), (1,)), ((3, 4), (0,)), ((3, 4), None), ((2, 3, 4), (0, 2)), ((2, 3, 4), (-1,)),
             ((5,), (0,)), ((1, 3), (0,)), ((3, 1), 1), ((2, 3), -2)]


@pytest.mark.parametrize("shape,axes", LSE_CASES, ids=[f"{s}-{a}" for s, a in LSE_CASES])
def test_logsumexp(device, shape, axes):
    x = randn(shape, device)
    np_axes = (axes,) if isinstance(axes, int) else axes
    expected = _np_logsumexp(x.numpy(), np_axes)
    out = ops.logsumexp(x, axes)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    gradient_check(lambda t: ops.logsumexp(t, axes), x)


def test_logsumexp_hand_values(device):
    x = tensor([[0.0, 0.0], [np.log(2.0), np.log(6.0)]], device)
    np.testing.assert_allclose(ops.logsumexp(x, (1,)).numpy(), [np.log(2.0), np.log(8.0)], rtol=1e-12)
    ops.logsumexp(x, (1,)).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.5, 0.5], [0.25, 0.75]], rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logsumexp_is_stable_for_large_inputs(device, dtype):
    x = tensor([[1e10, 1e10, 0.0], [-1e10, -1e10, -1e10]], device, dtype=dtype)
    out = ops.logsumexp(x, (1,))
    expected = np.array([1e10 + np.log(2.0), -1e10 + np.log(3.0)])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-5, atol=1e-7)
    assert np.isfinite(ops.logsumexp(x).numpy())
    np.testing.assert_allclose(ops.logsumexp(x).numpy(), 1e10 + np.log(2.0), rtol=1e-6)


def test_logsumexp_with_minus_infinity(device):
    x = tensor([[-np.inf, 0.0, 0.0], [-np.inf, -np.inf, -np.inf], [-np.inf, 1e10, -np.inf]], device)
    out = ops.logsumexp(x, (1,))
    np.testing.assert_allclose(out.numpy(), [np.log(2.0), -np.inf, 1e10])
    y = tensor([[-np.inf, 0.0, 0.0], [-np.inf, 3.0, -np.inf]], device)
    ops.logsumexp(y, (1,)).backward()
    np.testing.assert_allclose(y.grad.numpy(), [[0.0, 0.5, 0.5], [0.0, 1.0, 0.0]])


# ---- logsoftmax --------------------------------------------------------------------------
def _np_logsoftmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@pytest.mark.parametrize("shape,axis", [((3, 4), -1), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1), ((5,), 0),
                                        ((4, 1), 1)])
def test_logsoftmax(device, shape, axis):
    x = randn(shape, device)
    out = ops.logsoftmax(x, axis)
    np.testing.assert_allclose(out.numpy(), _np_logsoftmax(x.numpy(), axis), rtol=1e-12, atol=1e-12)
    gradient_check(lambda t: ops.logsoftmax(t, axis), x)


def test_logsoftmax_default_axis_is_last(device):
    x = randn((2, 3), device)
    np.testing.assert_allclose(ops.logsoftmax(x).numpy(), _np_logsoftmax(x.numpy(), 1), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_loss_is_stable(device, dtype):
    # the course's softmax loss: mean(logsumexp(Z) - Z[y]) with huge logits
    z = tensor([[1e10, 0.0, -1e10], [0.0, 1e10, 1e10]], device, dtype=dtype)
    y_one_hot = tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], device, dtype=dtype, requires_grad=False)
    loss = ops.summation(ops.logsumexp(z, (1,)) - ops.summation(z * y_one_hot, (1,))) / 2
    np.testing.assert_allclose(loss.numpy(), (0.0 + 1e10 + np.log(2.0)) / 2, rtol=1e-6)
    loss.backward()
    expected = (np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]) - y_one_hot.numpy()) / 2
    np.testing.assert_allclose(z.grad.numpy(), expected, atol=1e-7)
    lsm = ops.logsoftmax(z)
    np.testing.assert_allclose(lsm.numpy(), [[0.0, -1e10, -2e10], [-1e10 - np.log(2.0), -np.log(2.0), -np.log(2.0)]],
                               rtol=1e-6)


def test_logsoftmax_with_minus_infinity(device):
    x = tensor([[-np.inf, 0.0, 0.0], [1.0, -np.inf, 1.0]], device)
    out = ops.logsoftmax(x)
    np.testing.assert_allclose(out.numpy(), [[-np.inf, -np.log(2), -np.log(2)], [-np.log(2), -np.inf, -np.log(2)]])
    out_grad = tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]], device, requires_grad=False)
    out.backward(out_grad)
    # d/dz_i sum_j g_j lsm_j = g_i - softmax_i * sum_j g_j
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 1.0 - 1.5, 2.0 - 1.5], [0.5, 0.0, -0.5]])


@pytest.mark.parametrize("dtype", ["uint8", "int32", "bool"])
def test_integer_and_bool_sums_are_int64_and_do_not_wrap(device, dtype):
    # (uint8: 100 nines summed to 132; torch and numpy sum small integers in 64 bits)
    a = np.full((100, 3), True if dtype == "bool" else 9, dtype=dtype)
    if dtype == "int32":
        a[:, 1] = 2 ** 30
    t = ndl.Tensor(a, device=device, dtype=dtype, requires_grad=False)
    for axes in (None, (0,), (1,)):
        got = t.sum(axes)
        assert got.dtype == "int64"
        np.testing.assert_array_equal(got.numpy(), np.sum(a.astype(np.int64), axis=axes))


def test_mean_over_nothing_is_nan(device):
    # (it was 0: the sum divided by max(count, 1)); numpy and torch give nan
    x = tensor(np.zeros((0, 3)), device)
    assert np.all(np.isnan(ndl.ops.mean(x, (0,)).numpy())) and ndl.ops.mean(x, (0,)).shape == (3,)
    assert np.isnan(ndl.ops.mean(x).numpy())
    np.testing.assert_array_equal(ndl.ops.mean(x, (1,)).numpy(), np.zeros((0,)))


def test_backward_through_a_sum_of_integers(device):
    # a masked mean with an integer mask that (by default) requires grad: the sum's int64
    # gradient is cast back to the mask's dtype
    err = tensor(np.array([1.0, 2.0, 5.0, 4.0]), device, dtype="float32")
    mask = ndl.Tensor(np.array([1, 1, 0, 1], np.uint8), device=device, dtype="uint8")
    loss = (err * mask.astype("float32")).sum() / mask.sum().astype("float32")
    loss.backward()
    np.testing.assert_allclose(err.grad.numpy(), [1 / 3, 1 / 3, 0, 1 / 3], rtol=1e-6)


def _bn_max_sum(x):
    """float64 numpy reference: sum over rows of max over features of BatchNorm1d(x) (training)."""
    z = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    return z.max(1).sum()


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_max_gradient_after_the_forward_was_read_is_finite_and_right(lazy, device):
    # (lazy: max's gradient compared the stored max with a recomputed operand that rounded
    # otherwise, matched nowhere, and divided 0 by 0: every gradient was nan)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 33))
    with ndl.lazy(lazy):
        np.random.seed(0)
        x = ndl.Tensor(a.astype("float32"), device=device)
        y = ndl.nn.BatchNorm1d(33, device=device)(x).max((1,))
        y.numpy()  # (the forward read first: stored in its own schedule)
        y.sum().backward()
        got = x.grad.numpy()
    eps, want = 1e-6, np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[idx] += eps
        down[idx] -= eps
        want[idx] = (_bn_max_sum(up) - _bn_max_sum(down)) / (2 * eps)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("backward_first", [False, True])
def test_a_reduction_fused_with_its_gradient_rounds_products_as_unfused(device, backward_first):
    """A product feeding a sum or a centring is rounded as the eager kernel and numpy round
    it, whichever kernels the lazy graph fuses (found by an independent fuzz): with the
    backward built before the value was read, the sum of x*c had been an fma chain
    (unrounded products: constant rows got a variance of 3e5, not 0) and x*x - mean, with
    the mean hoisted into a local column, an fma (an overflowed square gave inf, not nan).
    Only a matmul's products contract, which every lowering of a matmul does alike."""
    a = np.array([1.1, 2.3, 3.7, 0.3], np.float32)
    rows, c = np.repeat(a[:, None], 4, axis=1), float(np.float32(1e10 / 3))
    z = np.ones((16, 4), np.float32)
    z[0, 2] = 1e30
    with np.errstate(all="ignore"):
        scaled, squared = rows * np.float32(c), (z * z).T
        cases = [(rows, lambda t: (t * c).var(axes=(1,)), scaled.var(axis=1)),
                 (rows, lambda t: (t * c).std(axes=(1,)), scaled.std(axis=1)),
                 (z, lambda t: (t * t).transpose().var(axes=(0,)), squared.var(axis=0))]
    for data, f, ref in cases:
        t = ndl.Tensor(data, device=device, requires_grad=True)
        y = f(t)
        if backward_first:
            y.sum().backward()
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(y.numpy(), ref.astype(np.float32))
