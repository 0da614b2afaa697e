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
        assert not getattr(w.grad._cached_data, "is_lazy", False) and not autograd.lazy_mode()
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
        assert not autograd.lazy_mode()
        assert not getattr((w * 3.0).cached_data, "is_lazy", False)


def _graphs():
    """name -> (input shapes, fn(*tensors) -> scalar loss): the op families of a step."""
    return {
        "elementwise": ([(6, 7), (6, 7)], lambda a, b: (ops.exp(a * 0.3) * ops.tanh(b) + ops.sigmoid(a - b)
                                                         / (ops.relu(b) + 1.5) + (a * a) ** 1.5).sum()),
        "log_sqrt_pow": ([(5, 4)], lambda a: (ops.log(a * a + 1.0) + ops.sqrt(a * a + 0.5) + ops.power_scalar(a, 3)).sum()),
        "reductions": ([(4, 6, 5)], lambda a: (ops.logsumexp(a, axes=(1,)) * ops.max(a, axes=(2,)).sum()).sum()
                       + ops.summation(a, axes=(0, 2)).sum()),
        "matmul_broadcast": ([(3, 8, 5), (5, 4), (4,)], lambda x, w, b: ops.relu(
            x @ ops.broadcast_to(w, (3, 5, 4)) + ops.broadcast_to(ops.reshape(b, (1, 1, 4)), (3, 8, 4))).sum()),
        "movement": ([(4, 6)], lambda a: (ops.transpose(ops.reshape(a, (2, 3, 4)), (0, 2)) * 2.0).sum()
                     + (ops.flip(a, (1,)) * ops.broadcast_to(ops.reshape(ops.summation(a, axes=(1,)), (4, 1)), (4, 6))).sum()),
        "indexing": ([(5, 6)], lambda a: (a[1:4, ::2] * a[0:3, 1::2]).sum() + ops.stack([a, a * 2.0], axis=0).sum()),
        "split_stack": ([(3, 4, 2)], lambda a: sum((t * float(i + 1)).sum() for i, t in enumerate(ops.split(a, axis=1)))),
        "conv_pad": ([(2, 6, 6, 3), (3, 3, 3, 4)], lambda x, w: (ops.conv(x, w, stride=1, padding=1) ** 2).sum()),
        "logsoftmax": ([(5, 7)], lambda a: ops.logsoftmax(a).sum() + (ops.logsoftmax(a) * a).sum()),
        # fused ops, whose gradients read the values the forward kept
        "lstm_cell": ([(3, 8), (3, 2)], lambda g, c: (ops.lstm_cell(g, c)[0] * ops.lstm_cell(g, c)[1]
                                                      * ops.tanh(c)).sum()),
        "norm_affine": ([(6, 4), (4, 3), (3,), (3,), (3,)], lambda x, w, b, s, t: (ops.scale_shift(
            ops.standardize(ops.matmul_bias(x, w, b), 0, 1e-5), s, t) ** 2 * 0.5).sum()),
    }


@pytest.mark.parametrize("name", list(_graphs()))
def test_fused_eager_gradients_equal_the_op_by_op_ones(name, monkeypatch):
    """Each op family's gradients from the fused eager pass against the kernel-per-op pass,
    and against directional derivatives of the float64 forward by central differences."""
    shapes, fn = _graphs()[name]
    inputs = [data(*s, seed=i + 10) for i, s in enumerate(shapes)]

    def grads(fused):
        monkeypatch.setattr(ndl.config, "EAGER_FUSED_BACKWARD", fused)
        with ndl.lazy(False):
            ts = [ndl.Tensor(v) for v in inputs]
            loss = fn(*ts)
            before = COUNTERS["schedules"]
            loss.backward()
            if fused:  # (also what a fused op's gradient reads of its forward: no kernel of its own)
                assert COUNTERS["schedules"] - before == 1
            return [t.grad.numpy() for t in ts]
    fused, by_op = grads(True), grads(False)
    for a, b in zip(fused, by_op):
        # the same float32 arithmetic, grouped into other kernels: sums may round differently
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(b).max()))

    def loss64(values):
        with ndl.lazy(False):
            return float(fn(*[ndl.Tensor(v, dtype="float64", requires_grad=False) for v in values]).numpy())
    rng = np.random.default_rng(99)
    for _ in range(3):  # directional derivatives by central differences, in float64
        direction = [rng.standard_normal(v.shape) for v in inputs]
        eps = 1e-5
        up = loss64([v + eps * d for v, d in zip(inputs, direction)])
        down = loss64([v - eps * d for v, d in zip(inputs, direction)])
        numeric = (up - down) / (2 * eps)
        analytic = sum(float((g.astype(np.float64) * d).sum()) for g, d in zip(fused, direction))
        scale = sum(float((np.abs(g.astype(np.float64)) * np.abs(d)).sum()) for g, d in zip(fused, direction))
        # float32 gradients: relative error ~1e-6 of the summed magnitudes; the difference
        # quotient's own error is O(eps^2) plus float64 rounding over eps
        assert abs(numeric - analytic) <= 1e-4 * scale + 1e-6, (numeric, analytic)


def test_two_threads_backward_at_once():
    """Lazy mode is per thread: one thread's fused pass turns it on for that thread only
    while another thread's eager ops and passes run (when it was process-wide, an
    NDArray @ a LazyArray had raised TypeError and passes had returned pending
    gradients): no error, no gradient left pending, the values of a pass run alone, and
    a third thread in lazy mode meanwhile keeps its own.  (Python switches threads
    every 10 us here.)"""
    import sys
    import threading
    rng = np.random.default_rng(5)
    wv = [rng.standard_normal((32, 32)).astype(np.float32) * 0.2 for _ in range(2)]
    xv = [rng.standard_normal((16, 32)).astype(np.float32) for _ in range(2)]

    def grad(k):
        w, h = ndl.Tensor(wv[k]), ndl.Tensor(xv[k], requires_grad=False)
        for _ in range(6):
            h = ops.tanh(h @ w)
        h.sum().backward()
        return w
    with ndl.lazy(False):
        alone = [grad(k).grad.numpy() for k in range(2)]
        errors, pending, wrong = [], [0, 0], [0, 0]

        def worker(k):
            try:
                with ndl.lazy(False):  # (a thread starts in the process's mode: lazy)
                    for _ in range(150):
                        w = grad(k)
                        pending[k] += getattr(w.grad._cached_data, "is_lazy", False)
                        wrong[k] += not np.allclose(w.grad.numpy(), alone[k], rtol=1e-5, atol=1e-6)
            except Exception as e:  # (reported below)
                errors.append(repr(e))

        def lazy_worker():
            with ndl.lazy(True):
                for _ in range(300):
                    y = ndl.Tensor(xv[0], requires_grad=False) * 2.0
                    if not getattr(y._cached_data, "is_lazy", False):
                        errors.append("an op of the lazy thread ran eagerly")
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
            threads.append(threading.Thread(target=lazy_worker))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        assert not errors and pending == [0, 0] and wrong == [0, 0], (errors, pending, wrong)
        assert not autograd.lazy_mode()
