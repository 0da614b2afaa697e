"""backward() in eager compiled mode builds the pass as one graph and computes the
leaves' gradients together when it ends (docs/architecture.md): one schedule, not a
kernel per gradient op; values against numpy, intermediates' .grad computed when read,
lazy mode off again afterwards, also when a gradient raises."""
import numpy as np
import pytest

import needle as ndl
from needle import autograd, ops
from needle.runtime.counters import COUNTERS

pytestmark = pytest.mark.skipif(autograd.BACKEND != "nd", reason="the compiled backend's eager mode")


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_one_schedule_for_the_pass_and_gradients_against_numpy():
    xv, wv, vv = data(8, 5), data(5, 3, seed=1), data(3, seed=2)
    with ndl.lazy(False):
        x = ndl.Tensor(xv, requires_grad=False)
        w, v = ndl.Tensor(wv), ndl.Tensor(vv)
        h = ops.relu(x @ w)
        loss = (ops.exp(h * 0.5) * ops.broadcast_to(ops.reshape(v, (1, 3)), (8, 3))).sum()
        assert not getattr(h.cached_data, "is_lazy", False)  # the forward ran op by op
        before = COUNTERS["schedules"]
        loss.backward()
        assert COUNTERS["schedules"] - before == 1  # the whole pass, both leaves' gradients
        assert not getattr(w.grad._cached_data, "is_lazy", False) and not autograd.LAZY_MODE
        got_w, got_v, got_h = w.grad.numpy(), v.grad.numpy(), h.grad.numpy()  # (h's: computed now)
    x64, w64, v64 = xv.astype(np.float64), wv.astype(np.float64), vv.astype(np.float64)
    pre = x64 @ w64
    hv = np.maximum(pre, 0)
    dh = 0.5 * np.exp(0.5 * hv) * v64
    np.testing.assert_allclose(got_h, dh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_v, np.exp(0.5 * hv).sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_w, x64.T @ (dh * (pre > 0)), rtol=1e-5, atol=1e-5)


def test_eager_and_lazy_backward_agree_on_a_training_step():
    from needle import nn, optim

    def train(lazy):
        np.random.seed(3)
        with ndl.lazy(lazy):
            model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.BatchNorm1d(16), nn.Linear(16, 4))
            opt = optim.Adam(model.parameters(), lr=0.01)
            x, y = ndl.Tensor(data(32, 20, seed=4)), ndl.Tensor(np.arange(32) % 4)
            losses = []
            for _ in range(5):
                opt.reset_grad()
                loss = nn.SoftmaxLoss()(model(x), y)
                loss.backward()
                opt.step()
                losses.append(float(loss.numpy()))
            return losses, [p.numpy() for p in model.parameters()]
    (eager_losses, eager_params), (lazy_losses, lazy_params) = train(False), train(True)
    # the same graph either way, compiled into the same fused kernels: float32 rounding only
    np.testing.assert_allclose(eager_losses, lazy_losses, rtol=1e-5)
    for a, b in zip(eager_params, lazy_params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


class _Raising(autograd.TensorOp):
    def compute(self, a):
        return a * 2.0

    def gradient(self, out_grad, node):
        raise RuntimeError("no gradient here")


def test_lazy_mode_is_off_again_when_a_gradient_raises():
    with ndl.lazy(False):
        w = ndl.Tensor(data(4))
        loss = _Raising()(w).sum()
        with pytest.raises(RuntimeError, match="no gradient here"):
            loss.backward()
        assert not autograd.LAZY_MODE
        assert not getattr((w * 3.0).cached_data, "is_lazy", False)
