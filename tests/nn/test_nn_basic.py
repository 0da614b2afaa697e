"""needle.nn basic layers against numpy formulas and finite differences."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.errors import NeedleError, ShapeError
from nn_helpers import DEVICE_IDS, DEVICES, batchnorm_train, grad_check, kaiming_bound, tensor, uniform_draw

devices = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


# ---- Module machinery ---------------------------------------------------------------------
class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(ndl.Tensor(np.ones(2)))
        self.plain = ndl.Tensor(np.ones(3))  # not a Parameter, not a buffer: ignored
        self.items = [nn.Linear(2, 3), (nn.Parameter(ndl.Tensor(np.zeros(4))),)]
        self.table = {"x": nn.Parameter(ndl.Tensor(np.zeros(5))), "sub": nn.ReLU()}
        self.shared = self.items[0]  # the same Linear again: counted once
        self.number = 3


def test_parameters_walk_attributes_lists_tuples_dicts():
    m = Holder()
    shapes = [tuple(p.shape) for p in m.parameters()]
    assert shapes == [(2,), (2, 3), (1, 3), (4,), (5,)]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())


def test_named_parameters_use_dotted_names():
    names = [n for n, _ in Holder().named_parameters()]
    assert names == ["a", "items.0.weight", "items.0.bias", "items.1.0", "table.x"]


def test_children_and_train_eval_reach_every_submodule():
    m = nn.Sequential(nn.Linear(2, 2), nn.Residual(nn.Sequential(nn.Dropout(0.1), nn.ReLU())))
    kinds = sorted(type(c).__name__ for c in m._children())
    assert kinds == ["Dropout", "Linear", "ReLU", "Residual", "Sequential"]
    assert m.training and all(c.training for c in m._children())
    assert m.eval() is m
    assert not m.training and not any(c.training for c in m._children())
    m.train()
    assert m.training and all(c.training for c in m._children())


def test_call_runs_forward():
    class Twice(nn.Module):
        def forward(self, x, scale=2.0):
            return x * scale

    x = tensor([1.0, 2.0])
    np.testing.assert_allclose(Twice()(x, scale=3.0).numpy(), [3.0, 6.0])


def test_subclass_without_init_still_has_training_flag():
    class Bare(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ndl.Tensor([1.0]))

    m = Bare()
    assert m.training and len(m.parameters()) == 1
    m.eval()
    assert not m.training


# ---- Linear -------------------------------------------------------------------------------
def test_linear_init_reproduces_course_draw_order():
    np.random.seed(3)
    w = uniform_draw((5, 4), -kaiming_bound(5), kaiming_bound(5))
    b = uniform_draw((4, 1), -kaiming_bound(4), kaiming_bound(4)).reshape(1, 4)
    np.random.seed(3)
    layer = nn.Linear(5, 4)
    np.testing.assert_allclose(layer.weight.numpy(), w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(layer.bias.numpy(), b, rtol=1e-6, atol=1e-7)
    assert layer.weight.dtype == "float32" and layer.bias.shape == (1, 4)


@devices
def test_linear_forward_matches_numpy(device):
    layer = nn.Linear(5, 3, device=device)
    x = np.random.randn(7, 5).astype(np.float32)
    expected = x @ layer.weight.numpy() + layer.bias.numpy()
    np.testing.assert_allclose(layer(tensor(x, device)).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_linear_without_bias_and_batched_input():
    layer = nn.Linear(4, 2, bias=False)
    assert layer.bias is None and len(layer.parameters()) == 1
    x = np.random.randn(3, 6, 4).astype(np.float32)
    np.testing.assert_allclose(layer(tensor(x)).numpy(), x @ layer.weight.numpy(), rtol=1e-5, atol=1e-6)


@devices
def test_linear_gradients(device):
    layer = nn.Linear(3, 2, device=device, dtype="float64")
    x = tensor(np.random.randn(4, 3), device, "float64")
    grad_check(lambda: layer(x), [x, layer.weight, layer.bias])


def test_linear_rejects_wrong_feature_count():
    with pytest.raises(ShapeError, match="Linear"):
        nn.Linear(3, 2)(tensor(np.zeros((4, 5))))


# ---- simple layers ------------------------------------------------------------------------
@devices
def test_activations_and_flatten(device):
    x = np.random.randn(2, 3, 4).astype(np.float32)
    t = tensor(x, device)
    np.testing.assert_allclose(nn.ReLU()(t).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(nn.Tanh()(t).numpy(), np.tanh(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.Sigmoid()(t).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.Identity()(t).numpy(), x)
    np.testing.assert_allclose(nn.Flatten()(t).numpy(), x.reshape(2, 12))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_numpy_and_is_stable(dim):
    x = np.random.randn(3, 4).astype(np.float32)
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    np.testing.assert_allclose(nn.Softmax(dim)(tensor(x)).numpy(), e / e.sum(axis=dim, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    big = nn.Softmax()(tensor([[1e10, 0.0, -1e10]])).numpy()
    np.testing.assert_allclose(big, [[1.0, 0.0, 0.0]])


def test_sequential_and_residual_compose():
    lin1, lin2 = nn.Linear(3, 3), nn.Linear(3, 3)
    model = nn.Sequential(lin1, nn.ReLU(), nn.Residual(lin2))
    x = np.random.randn(2, 3).astype(np.float32)
    h = np.maximum(x @ lin1.weight.numpy() + lin1.bias.numpy(), 0)
    expected = h @ lin2.weight.numpy() + lin2.bias.numpy() + h
    np.testing.assert_allclose(model(tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert len(model.parameters()) == 4


# ---- losses -------------------------------------------------------------------------------
def softmax_loss_ref(z, y):
    z = z.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - m).sum(axis=1)) + m[:, 0]
    return np.mean(lse - z[np.arange(len(y)), y])


@devices
@pytest.mark.parametrize("loss", [nn.SoftmaxLoss, nn.CrossEntropyLoss])
def test_softmax_loss_matches_numpy(device, loss):
    z = np.random.randn(6, 5).astype(np.float32)
    y = np.random.randint(0, 5, size=6)
    got = loss()(tensor(z, device), tensor(y, device, requires_grad=False))
    assert got.shape == ()
    np.testing.assert_allclose(got.numpy(), softmax_loss_ref(z, y), rtol=1e-5)


def test_softmax_loss_is_stable_for_huge_logits():
    z = np.array([[1e10, 0.0, -1e10], [0.0, 1e10, 0.0]], dtype=np.float32)
    got = nn.SoftmaxLoss()(tensor(z), tensor([1, 1], requires_grad=False)).numpy()
    assert np.isfinite(got)
    np.testing.assert_allclose(got, 0.5e10, rtol=1e-6)  # row 0 pays 1e10, row 1 pays 0


@devices
def test_softmax_loss_gradient(device):
    z = tensor(np.random.randn(4, 3), device, "float64")
    y = tensor([0, 2, 1, 2], device, "float64", requires_grad=False)
    grad_check(lambda: nn.SoftmaxLoss()(z, y), [z])


def test_softmax_loss_rejects_bad_shapes():
    with pytest.raises(ShapeError, match="SoftmaxLoss"):
        nn.SoftmaxLoss()(tensor(np.zeros((4, 3))), tensor([0, 1, 2], requires_grad=False))
    with pytest.raises(ShapeError, match="CrossEntropyLoss"):
        nn.CrossEntropyLoss()(tensor(np.zeros(3)), tensor([0], requires_grad=False))


@devices
def test_mse_loss(device):
    p, t = np.random.randn(3, 4), np.random.randn(3, 4)
    got = nn.MSELoss()(tensor(p, device), tensor(t, device)).numpy()
    np.testing.assert_allclose(got, np.mean((p - t) ** 2), rtol=1e-5)
    pred = tensor(p, device, "float64")
    target = tensor(t, device, "float64", requires_grad=False)
    grad_check(lambda: nn.MSELoss()(pred, target), [pred])
    with pytest.raises(ShapeError, match="MSELoss"):
        nn.MSELoss()(tensor(p, device), tensor(t[:2], device))


# ---- BatchNorm1d --------------------------------------------------------------------------
@devices
def test_batchnorm1d_training_forward_and_running_stats(device):
    bn = nn.BatchNorm1d(4, momentum=0.2, device=device)
    running_mean, running_var = np.zeros(4), np.ones(4)
    for _ in range(3):
        x = (np.random.randn(8, 4) * 3 + 1).astype(np.float32)
        expected, mean, var = batchnorm_train(x.astype(np.float64), 1.0, 0.0, 1e-5)
        np.testing.assert_allclose(bn(tensor(x, device)).numpy(), expected, rtol=1e-4, atol=1e-5)
        running_mean = 0.8 * running_mean + 0.2 * mean
        running_var = 0.8 * running_var + 0.2 * var  # biased batch variance, as in the course
    np.testing.assert_allclose(bn.running_mean.numpy(), running_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), running_var, rtol=1e-5, atol=1e-6)
    assert not bn.running_mean.requires_grad and not bn.running_var.requires_grad


@devices
def test_batchnorm1d_eval_uses_running_stats(device):
    bn = nn.BatchNorm1d(3, device=device)
    bn.weight.data = tensor([1.0, 2.0, 0.5], device)
    bn.bias.data = tensor([0.0, -1.0, 3.0], device)
    train_x = np.random.randn(5, 3).astype(np.float32)
    bn(tensor(train_x, device))
    mean, var = train_x.mean(0), train_x.var(0)
    rm, rv = 0.1 * mean, 0.9 + 0.1 * var
    bn.eval()
    x = np.random.randn(2, 3).astype(np.float32)
    expected = np.array([1.0, 2.0, 0.5]) * (x - rm) / np.sqrt(rv + 1e-5) + np.array([0.0, -1.0, 3.0])
    np.testing.assert_allclose(bn(tensor(x, device)).numpy(), expected, rtol=1e-5, atol=1e-5)
    before = bn.running_mean.numpy()
    bn(tensor(x, device))
    np.testing.assert_array_equal(bn.running_mean.numpy(), before)  # eval does not update


def test_batchnorm1d_running_stats_do_not_stay_pending():
    """Lazy mode: nothing in the loss graph reads the running statistics, so they are
    computed along with the next realization instead of chaining every step's update
    (and its input batch) forever.  Eagerly this holds trivially."""
    bn = nn.BatchNorm1d(3)
    for _ in range(3):
        bn(tensor(np.random.randn(4, 3))).numpy()
        assert not ndl.autograd.is_pending(bn.running_mean._cached_data)
        assert not ndl.autograd.is_pending(bn.running_var._cached_data)


def test_batchnorm1d_buffers_are_not_parameters():
    bn = nn.BatchNorm1d(3)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var"]
    assert sorted(bn.state_dict()) == ["bias", "running_mean", "running_var", "weight"]


@devices
def test_batchnorm1d_gradients(device):
    bn = nn.BatchNorm1d(3, device=device, dtype="float64")
    bn.weight.data = tensor([1.5, -0.5, 2.0], device, "float64")
    x = tensor(np.random.randn(5, 3), device, "float64")
    grad_check(lambda: bn(x), [x, bn.weight, bn.bias])
    bn.eval()
    grad_check(lambda: bn(x), [x, bn.weight, bn.bias])


def test_batchnorm1d_rejects_bad_input():
    with pytest.raises(ShapeError, match="BatchNorm1d"):
        nn.BatchNorm1d(3)(tensor(np.zeros((4, 2))))
    with pytest.raises(ShapeError, match="BatchNorm1d"):
        nn.BatchNorm1d(3)(tensor(np.zeros((4, 3, 1))))


# ---- BatchNorm2d --------------------------------------------------------------------------
@devices
def test_batchnorm2d_normalizes_each_channel_over_n_h_w(device):
    bn = nn.BatchNorm2d(3, device=device)
    bn.weight.data = tensor([1.0, 2.0, -1.0], device)
    bn.bias.data = tensor([0.5, 0.0, 1.0], device)
    x = (np.random.randn(2, 3, 4, 5) * 2 + 1).astype(np.float64)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    w, b = np.array([1.0, 2.0, -1.0]).reshape(1, 3, 1, 1), np.array([0.5, 0.0, 1.0]).reshape(1, 3, 1, 1)
    out = bn(tensor(x, device))
    assert out.shape == (2, 3, 4, 5)
    np.testing.assert_allclose(out.numpy(), w * (x - mean) / np.sqrt(var + 1e-5) + b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var.ravel(), rtol=1e-5)
    with pytest.raises(ShapeError, match="BatchNorm2d"):
        bn(tensor(np.zeros((2, 4, 3, 3)), device))


# ---- LayerNorm1d --------------------------------------------------------------------------
@devices
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 5)])
def test_layernorm_matches_numpy(device, shape):
    ln = nn.LayerNorm1d(5, device=device)
    w, b = np.random.randn(5), np.random.randn(5)
    ln.weight.data = tensor(w, device)
    ln.bias.data = tensor(b, device)
    x = (np.random.randn(*shape) * 3 + 2).astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    expected = w * (x - mean) / np.sqrt(var + 1e-5) + b
    np.testing.assert_allclose(ln(tensor(x, device)).numpy(), expected, rtol=1e-4, atol=1e-5)


@devices
def test_layernorm_gradients(device):
    ln = nn.LayerNorm1d(4, device=device, dtype="float64")
    ln.weight.data = tensor([1.0, -2.0, 0.5, 3.0], device, "float64")
    x = tensor(np.random.randn(3, 4), device, "float64")
    grad_check(lambda: ln(x), [x, ln.weight, ln.bias])


def test_layernorm_rejects_wrong_width():
    with pytest.raises(ShapeError, match="LayerNorm1d"):
        nn.LayerNorm1d(4)(tensor(np.zeros((2, 5))))


# ---- Dropout ------------------------------------------------------------------------------
@devices
def test_dropout_mask_comes_from_randb_and_scales(device):
    x = np.random.randn(20, 30).astype(np.float32)
    np.random.seed(5)
    keep = np.random.rand(20, 30) <= 0.7  # init.randb(p=1 - 0.3): the course's draw
    np.random.seed(5)
    got = nn.Dropout(0.3)(tensor(x, device)).numpy()
    np.testing.assert_allclose(got, np.where(keep, x / 0.7, 0.0), rtol=1e-6, atol=1e-7)


def test_dropout_mask_statistics():
    got = nn.Dropout(0.25)(tensor(np.ones((200, 200)))).numpy()
    np.testing.assert_allclose(np.unique(got), [0.0, 1 / 0.75], rtol=1e-6)
    assert abs((got == 0).mean() - 0.25) < 0.01
    assert abs(got.mean() - 1.0) < 0.02  # scaling keeps the expectation


def test_dropout_is_identity_in_eval_and_edge_probabilities():
    x = np.random.randn(5, 6).astype(np.float32)
    drop = nn.Dropout(0.9)
    drop.eval()
    np.testing.assert_array_equal(drop(tensor(x)).numpy(), x)
    np.testing.assert_allclose(nn.Dropout(0.0)(tensor(x)).numpy(), x)
    np.testing.assert_array_equal(nn.Dropout(1.0)(tensor(x)).numpy(), np.zeros_like(x))
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


def test_dropout_gradient_is_the_scaled_mask():
    x = tensor(np.random.randn(10, 10))
    out = nn.Dropout(0.5)(x)
    out.sum().backward()
    kept = out.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 2.0, 0.0))


# ---- errors are NeedleErrors --------------------------------------------------------------
def test_shape_errors_are_needle_errors():
    with pytest.raises(NeedleError):
        nn.Linear(2, 2)(tensor(np.zeros((1, 3))))
    assert issubclass(ShapeError, ValueError)
