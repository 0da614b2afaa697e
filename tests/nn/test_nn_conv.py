"""nn.Conv and nn.MaxPool2d against loop-based numpy references and finite differences."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.errors import ShapeError
from nn_helpers import DEVICE_IDS, DEVICES, conv_nchw, grad_check, kaiming_bound, maxpool_nchw, tensor, uniform_draw

devices = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


# ---- Conv ---------------------------------------------------------------------------------
def test_conv_init_shapes_bounds_and_draw_order():
    np.random.seed(1)
    fan_in = 3 * 5 * 5
    w = uniform_draw((5, 5, 3, 4), -kaiming_bound(fan_in), kaiming_bound(fan_in))
    b = uniform_draw((4,), -1 / np.sqrt(fan_in), 1 / np.sqrt(fan_in))
    np.random.seed(1)
    conv = nn.Conv(3, 4, 5)
    assert conv.weight.shape == (5, 5, 3, 4) and conv.bias.shape == (4,) and conv.padding == 2
    np.testing.assert_allclose(conv.weight.numpy(), w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(conv.bias.numpy(), b, rtol=1e-6, atol=1e-7)
    assert conv.num_parameters() == 5 * 5 * 3 * 4 + 4
    assert nn.Conv(3, 4, 3, bias=False).bias is None


@devices
@pytest.mark.parametrize("k,stride,hw", [(3, 1, (6, 6)), (3, 2, (7, 5)), (1, 1, (4, 4)), (5, 2, (8, 8)),
                                          (4, 1, (5, 5))])
def test_conv_forward_matches_numpy(device, k, stride, hw):
    conv = nn.Conv(3, 2, k, stride=stride, device=device)
    x = np.random.randn(2, 3, *hw).astype(np.float32)
    expected = conv_nchw(x.astype(np.float64), conv.weight.numpy().astype(np.float64),
                         conv.bias.numpy().astype(np.float64), stride, k // 2)
    got = conv(tensor(x, device))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_conv_same_padding_keeps_size_and_accepts_tuples():
    conv = nn.Conv(2, 3, (3, 3), stride=(1, 1), bias=False)
    x = np.random.randn(1, 2, 5, 5).astype(np.float32)
    got = conv(tensor(x))
    assert got.shape == (1, 3, 5, 5)
    np.testing.assert_allclose(got.numpy(), conv_nchw(x, conv.weight.numpy(), None, 1, 1), rtol=1e-4, atol=1e-5)


@devices
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_gradients(device, stride):
    conv = nn.Conv(2, 2, 3, stride=stride, device=device, dtype="float64")
    x = tensor(np.random.randn(2, 2, 4, 5), device, "float64")
    grad_check(lambda: conv(x), [x, conv.weight, conv.bias])


def test_conv_rejects_bad_input():
    with pytest.raises(ShapeError, match="Conv"):
        nn.Conv(3, 2, 3)(tensor(np.zeros((1, 2, 5, 5))))
    with pytest.raises(ShapeError, match="Conv"):
        nn.Conv(3, 2, 3)(tensor(np.zeros((3, 5, 5))))


# ---- MaxPool2d ----------------------------------------------------------------------------
@devices
@pytest.mark.parametrize("kernel,stride,hw", [(2, None, (4, 6)), (2, None, (5, 7)), (3, 2, (7, 7)),
                                               (2, 1, (4, 5)), (3, None, (7, 8)), ((2, 3), (1, 2), (5, 7))])
def test_maxpool_matches_loops(device, kernel, stride, hw):
    x = np.random.randn(2, 3, *hw).astype(np.float32)
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    s = kernel if stride is None else stride
    sh, sw = s if isinstance(s, tuple) else (s, s)
    got = nn.MaxPool2d(kernel, stride)(tensor(x, device))
    expected = maxpool_nchw(x, kh, kw, sh, sw)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)


@devices
@pytest.mark.parametrize("kernel,stride", [(2, None), (3, 2), (2, 1)])
def test_maxpool_gradients(device, kernel, stride):
    # distinct values so that no window has a tie and differences stay on one side
    values = np.random.permutation(2 * 2 * 5 * 5).reshape(2, 2, 5, 5) * 0.1
    x = tensor(values, device, "float64")
    grad_check(lambda: nn.MaxPool2d(kernel, stride)(x), [x], eps=1e-4)


def test_maxpool_gradient_routes_to_each_window_max():
    x = np.random.randn(1, 1, 4, 4)
    t = tensor(x, dtype="float64")
    nn.MaxPool2d(2)(t).sum().backward()
    expected = np.zeros_like(x)
    for i in range(2):
        for j in range(2):
            window = x[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            a, b = np.unravel_index(np.argmax(window), (2, 2))
            expected[0, 0, 2 * i + a, 2 * j + b] = 1.0
    np.testing.assert_array_equal(t.grad.numpy(), expected)


def test_maxpool_rejects_bad_input():
    with pytest.raises(ShapeError, match="MaxPool2d"):
        nn.MaxPool2d(3)(tensor(np.zeros((1, 1, 2, 5))))
    with pytest.raises(ShapeError, match="MaxPool2d"):
        nn.MaxPool2d(2)(tensor(np.zeros((4, 4))))
    with pytest.raises(ValueError, match="MaxPool2d"):
        nn.MaxPool2d(0)


def test_conv_pool_network_trains_end_to_end():
    """A small CNN: forward shape and a gradient for every parameter."""
    model = nn.Sequential(nn.Conv(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 3 * 3, 5))
    x = tensor(np.random.randn(3, 1, 6, 6))
    loss = nn.SoftmaxLoss()(model(x), ndl.Tensor([0, 3, 4], requires_grad=False))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert np.all(np.isfinite(p.grad.numpy())), name
