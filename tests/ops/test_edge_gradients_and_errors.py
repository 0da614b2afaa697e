"""Edge cases an independent differential check against torch found wrong (issue 36),
each run lazily and eagerly (tests/ops/conftest.py):
gradients at points where the naive formula is 0/0 or 0*inf, and ops that accepted or
misreported bad input — each against an independent reference (torch's documented
values, numpy, finite differences)."""
import os
import stat

import numpy as np
import pytest

import needle as ndl
from needle import nn, ops
from needle.errors import IndexingError, ShapeError


def test_std_gradient_at_zero_variance_is_zero():
    # (was nan: sqrt's gradient 1 / (2 * 0) times the zero gradient of the variance)
    x = ndl.Tensor(np.full((2, 4), 3.0, "float32"))
    x.std((1,)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 4)))
    y = ndl.Tensor(np.array([1.0, 2.0, 4.0], "float32"))
    y.std().backward()
    v = np.array([1.0, 2.0, 4.0])
    want = (v - v.mean()) / (len(v) - 1) / v.std(ddof=1)  # d std / dx, where std > 0
    np.testing.assert_allclose(y.grad.numpy(), want, rtol=1e-5)


def test_power_gradients_at_a_zero_base_follow_torch():
    # d(a^b)/da = b a^(b-1) with no gradient where b == 0; d(a^b)/db = a^b log a with none
    # where a == 0 and b >= 0 (was nan and -inf)
    a_np, b_np = np.array([0.0, 0.0, 1.0, 2.0, 3.0]), np.array([2.0, 0.0, 0.0, 0.5, 1.5])
    a, b = ndl.Tensor(a_np.astype("float32")), ndl.Tensor(b_np.astype("float32"))
    ops.power(a, b).sum().backward()
    ga, gb = a.grad.numpy(), b.grad.numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        want_a = np.where(b_np == 0, 0.0, b_np * a_np ** (b_np - 1))
        want_b = np.where(a_np == 0, 0.0, a_np ** b_np * np.log(np.where(a_np == 0, 1, a_np)))
    np.testing.assert_allclose(ga, want_a, rtol=1e-5)
    np.testing.assert_allclose(gb, want_b, rtol=1e-5, atol=1e-7)


def test_where_selects_and_routes_the_gradient():
    c = np.array([True, False, True])
    a, b = ndl.Tensor(np.array([1.0, 2.0, 3.0], "float32")), ndl.Tensor(np.array([9.0, 8.0, 7.0], "float32"))
    out = ops.where(ndl.Tensor(c), a, b)
    (out * ndl.Tensor(np.array([1.0, 2.0, 3.0], "float32"))).sum().backward()
    np.testing.assert_array_equal(out.numpy(), np.where(c, [1, 2, 3], [9, 8, 7]))
    np.testing.assert_array_equal(a.grad.numpy(), [1, 0, 3])
    np.testing.assert_array_equal(b.grad.numpy(), [0, 2, 0])


def test_scatter_add_with_a_negative_axis_and_bad_shapes():
    values = np.arange(12, dtype="float32").reshape(3, 4)
    idx = np.array([0, 2, 2, 1])
    v = ndl.Tensor(values)
    out = ops.scatter_add(v, idx, -1, (3,))  # (eager gave a (3, 3, 4)-shaped result)
    want = np.zeros((3, 3))
    np.add.at(want, (slice(None), idx), values)
    assert out.shape == (3, 3)
    np.testing.assert_array_equal(out.numpy(), want)
    with pytest.raises(ShapeError, match=r"scatter_add: .*\(3, 4\).*\(4,\)"):
        ops.scatter_add(v, idx, 0, (3,))


def test_embedding_refuses_bool_ids_and_pick_a_0d_tensor():
    with pytest.raises(IndexingError, match="Embedding.*integers.*bool"):
        nn.Embedding(5, 3)(ndl.Tensor(np.array([True, False])))
    with pytest.raises(ShapeError, match="pick: a 0-d tensor"):
        ops.pick(ndl.Tensor(np.float32(3.0)), 0)


def test_save_makes_files_as_open_would_under_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        ndl.save({"w": ndl.Tensor(np.ones(2, "float32"))}, tmp_path / "m.npz")
        os.umask(0o077)
        ndl.save({"w": 1}, tmp_path / "private.npz")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "m.npz").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "private.npz").st_mode) == 0o600


def test_an_infinite_gradient_stays_where_relu_where_and_setitem_send_it():
    # torch selects these gradients (where(mask, g, 0)); multiplying by a 0/1 mask made
    # inf * 0 = nan at the positions the op did not take from (an overflowing branch
    # downstream of a relu gave nan gradients)
    inf = np.inf
    x = ndl.Tensor(np.array([-1.0, 2.0], "float32"))
    (ops.relu(x) * ndl.Tensor(np.array([inf, 1.0], "float32"), requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0])
    x, b = ndl.Tensor(np.array([-1.0, 2.0], "float32")), ndl.Tensor(np.array([5.0, 6.0], "float32"))
    (ops.where(x > 0, x, b) * ndl.Tensor(np.array([1.0, inf], "float32"), requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, inf])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 0.0])
    a, v = ndl.Tensor(np.zeros((3, 2), "float32")), ndl.Tensor(np.ones((1, 2), "float32"))
    z = a * 1.0
    z[1:2] = v
    (z * ndl.Tensor(np.array([[1, 1], [inf, inf], [1, 1]], "float32"), requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[1, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(v.grad.numpy(), [[inf, inf]])


@pytest.mark.parametrize("logits", [[20.0, 10.0], [1000.0, 990.0], [1e4, 1e4 - 12], [3000.3, 3000.3]])
def test_cross_entropy_near_zero_keeps_float32_precision(logits):
    # logsumexp(z) - z[y] rounded logsumexp to an ulp of the largest logit (a loss of 0
    # for [1e4, 9988] instead of 6e-6).  Computed as log(sum(exp(z - max))) - (z[y] - max),
    # the error is that of the sum of exponentials in [1, 2] rounded to float32 (an ulp
    # of 1, ~1.2e-7) and of exp and log: within 2.5e-7 of the exact loss.
    z = np.array([logits], "float32")
    exact = float(np.logaddexp.reduce(z.astype(np.float64), axis=1)[0] - z.astype(np.float64)[0, 0])
    labels = ndl.Tensor(np.array([0.0], "float32"), requires_grad=False)
    for loss in (nn.SoftmaxLoss()(ndl.Tensor(z), labels), nn.functional.cross_entropy(ndl.Tensor(z), labels)):
        assert abs(float(loss.numpy()) - exact) <= 2.5e-7, (float(loss.numpy()), exact)


def test_log_softmax_and_logsumexp_over_an_empty_axis_follow_torch():
    # (logsumexp raised a ShapeError; torch gives log(0) = -inf, and its gradient is empty)
    z = ndl.Tensor(np.zeros((3, 0), "float32"), requires_grad=True)
    np.testing.assert_array_equal(z.logsumexp(axes=(1,)).numpy(), np.full(3, -np.inf, "float32"))
    assert ops.logsoftmax(z, axis=1).shape == (3, 0) and nn.functional.softmax(z, 1).shape == (3, 0)
    z.logsumexp(axes=(1,)).sum().backward()
    assert z.grad.shape == (3, 0)
    w = ndl.Tensor(np.array([[1.0, 2.0], [3.0, -1.0]], "float32"))  # (and a nonempty axis beside an empty one)
    np.testing.assert_allclose(w.logsumexp(axes=(1,)).numpy(), np.log(np.exp([[1.0, 2.0], [3.0, -1.0]]).sum(1)),
                               rtol=1e-6)
