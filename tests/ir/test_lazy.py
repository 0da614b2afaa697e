"""Lazy mode: nothing runs until data is needed, graphs are freed, one realize per
training step (needle/ir/lazy.py, needle/realize.py, needle/runtime)."""
import gc

import numpy as np
import pytest

import needle as ndl
from needle import autograd, nn, optim, runtime


@pytest.fixture(autouse=True)
def lazy_mode():
    with ndl.lazy(True):
        yield


def test_lazy_is_the_default():
    assert ndl.config.LAZY is True or ndl.config.LAZY == 1


def test_building_launches_nothing_until_numpy():
    a = ndl.Tensor(np.random.randn(8, 5))
    w = ndl.Tensor(np.random.randn(5, 3))
    b = ndl.Tensor(np.random.randn(1, 3))
    runtime.reset_stats()
    y = ndl.relu(a @ w + b)
    assert runtime.stats()["kernels_launched"] == 0 and runtime.stats()["schedules"] == 0
    assert y.shape == (8, 3) and y.dtype == "float32"  # known without computing
    assert runtime.stats()["schedules"] == 0
    got = y.numpy()
    assert runtime.stats()["schedules"] == 1
    np.testing.assert_allclose(got, np.maximum(a.numpy() @ w.numpy() + b.numpy(), 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", [ndl.cpu(), ndl.cpu_numpy()], ids=str)
def test_realize_several_outputs_computes_shared_work_once(device):
    x = ndl.Tensor(np.random.randn(6, 4), device=device)
    shared = ndl.exp(x) * 2.0
    s1, s2 = shared.sum((0,)), (shared + 1.0).sum((1,))
    runtime.reset_stats()
    ndl.realize(s1, s2)
    assert runtime.stats()["schedules"] == 1
    ref = np.exp(x.numpy()) * 2
    np.testing.assert_allclose(s1.numpy(), ref.sum(0), rtol=1e-5)
    np.testing.assert_allclose(s2.numpy(), (ref + 1).sum(1), rtol=1e-5)
    assert runtime.stats()["schedules"] == 1  # both were realized together


def test_realized_nodes_drop_their_inputs():
    x = ndl.Tensor(np.random.randn(4, 4), requires_grad=False)
    y = (x * 3.0).exp()
    node = y._cached_data
    assert node.srcs  # pending: knows its inputs
    y.numpy()
    assert node.op == "buffer" and node.srcs == ()


def test_leaf_data_is_read_at_realize_time_not_baked():
    x = ndl.Tensor(np.zeros(5))
    y = x + 1.0
    x.realize_cached_data().flat[2] += 10.0
    np.testing.assert_allclose(y.numpy(), [1, 1, 11, 1, 1])


def test_shape_errors_raise_when_the_op_is_built():
    a = ndl.Tensor(np.zeros((2, 3)))
    b = ndl.Tensor(np.zeros((4, 5)))
    runtime.reset_stats()
    with pytest.raises(ndl.errors.ShapeError, match=r"\(2, 3\).*\(4, 5\)"):
        a + b
    with pytest.raises(ndl.errors.ShapeError, match="matmul"):
        a @ b
    assert runtime.stats()["schedules"] == 0


def _mlp_step(model, opt, loss_fn, x, y):
    opt.reset_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_one_training_step_is_one_realize_and_the_graph_does_not_grow():
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    x = ndl.Tensor(np.random.randn(32, 10), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 3, 32), requires_grad=False)
    for step in range(6):
        runtime.reset_stats()
        loss = _mlp_step(model, opt, loss_fn, x, y)
        loss.numpy()  # computed with the step (backward registered it), no new schedule
        stats = runtime.stats()
        assert stats["schedules"] == 1, f"step {step}: {stats['schedules']} realizes"
        if step >= 2:  # same structure every step: the graph does not grow
            assert stats["schedule_cache_hits"] == 1 and stats["kernels_compiled"] == 0


def test_long_lazy_training_loop_keeps_live_tensors_bounded():
    np.random.seed(1)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Linear(8, 2))
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    x = ndl.Tensor(np.random.randn(16, 8), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 2, 16), requires_grad=False)
    counts, losses = [], []
    for step in range(1000):
        loss = _mlp_step(model, opt, loss_fn, x, y)
        if step % 100 == 99:
            losses.append(float(loss.numpy()))
            gc.collect()
            counts.append(autograd.TENSOR_COUNTER)
    assert max(counts) - min(counts) <= 2, counts
    assert losses[-1] < losses[0]


def test_backward_in_lazy_mode_builds_gradients_lazily():
    x = ndl.Tensor(np.random.randn(3, 4))
    w = ndl.Tensor(np.random.randn(4, 2))
    runtime.reset_stats()
    (x @ w).sum().backward()
    assert runtime.stats()["schedules"] == 0  # gradients are pending graphs
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ np.ones((3, 2)), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), np.ones((3, 2)) @ w.numpy().T, rtol=1e-5)


def test_lazy_context_switches_modes():
    x = ndl.Tensor(np.ones(3))
    with ndl.lazy(False):
        y = x + 1.0
        assert not getattr(y._cached_data, "is_lazy", False)
    z = x + 1.0
    assert getattr(z._cached_data, "is_lazy", False)
    np.testing.assert_allclose(y.numpy(), z.numpy())
