"""needle.init: values drawn from numpy's global RNG in the course's order, shapes,
dtypes, devices and bounds."""
import math

import numpy as np
import pytest

import needle as ndl
from needle import init

DEVICES = [ndl.cpu(), ndl.cpu_numpy()]


def draws(seed, fn):
    np.random.seed(seed)
    return fn()


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_rand_and_randn_follow_the_course_draws(device):
    t = draws(3, lambda: init.rand(3, 4, low=-2.0, high=3.0, device=device))
    want = draws(3, lambda: np.random.rand(3, 4).astype(np.float32) * 5.0 - 2.0)
    assert t.shape == (3, 4) and t.dtype == "float32" and t.device == device and not t.requires_grad
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    t = draws(4, lambda: init.randn(2, 5, mean=1.0, std=2.0, device=device, requires_grad=True))
    want = draws(4, lambda: np.random.randn(2, 5).astype(np.float32) * 2.0 + 1.0)
    assert t.requires_grad
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    assert init.rand((2, 3), device=device).shape == (2, 3)  # a shape tuple works too


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_constant_ones_zeros_like(device):
    np.testing.assert_array_equal(init.constant(2, 3, c=2.5, device=device).numpy(), np.full((2, 3), 2.5))
    np.testing.assert_array_equal(init.ones(4, device=device).numpy(), np.ones(4))
    np.testing.assert_array_equal(init.zeros(2, 2, dtype="float64", device=device).numpy(), np.zeros((2, 2)))
    assert init.zeros(2, dtype="float64").dtype == "float64"
    a = ndl.Tensor(np.ones((3, 2)), device=device, dtype="float64")
    z, o = init.zeros_like(a), init.ones_like(a)
    assert z.shape == o.shape == (3, 2) and z.dtype == o.dtype == "float64" and z.device == device
    np.testing.assert_array_equal(z.numpy(), np.zeros((3, 2)))
    np.testing.assert_array_equal(o.numpy(), np.ones((3, 2)))
    assert not z.requires_grad and init.ones_like(a, requires_grad=True).requires_grad


def test_randb():
    t = draws(5, lambda: init.randb(4, 5, p=0.3))
    want = draws(5, lambda: np.random.rand(4, 5) <= 0.3)
    assert t.dtype == "bool"
    np.testing.assert_array_equal(t.numpy(), want)
    f = draws(5, lambda: init.randb(4, 5, p=0.3, dtype="float32"))
    np.testing.assert_array_equal(f.numpy(), want.astype(np.float32))


def test_one_hot():
    t = init.one_hot(4, ndl.Tensor([2, 0, 3], dtype="int32"))
    np.testing.assert_array_equal(t.numpy(), np.eye(4)[[2, 0, 3]])
    assert t.dtype == "float32"
    np.testing.assert_array_equal(init.one_hot(3, np.array([1])).numpy(), [[0, 1, 0]])
    with pytest.raises(IndexError, match="one_hot"):
        init.one_hot(3, np.array([3]))


def test_xavier_and_kaiming():
    t = draws(6, lambda: init.xavier_uniform(5, 3, gain=2.0))
    a = 2.0 * math.sqrt(6 / 8)
    want = draws(6, lambda: np.random.rand(5, 3).astype(np.float32) * (2 * a) - a)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    t = draws(7, lambda: init.xavier_normal(5, 3))
    want = draws(7, lambda: np.random.randn(5, 3).astype(np.float32) * math.sqrt(2 / 8))
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    t = draws(8, lambda: init.kaiming_uniform(6, 4))
    bound = math.sqrt(2) * math.sqrt(3 / 6)
    want = draws(8, lambda: np.random.rand(6, 4).astype(np.float32) * (2 * bound) - bound)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    assert np.all(np.abs(t.numpy()) <= bound)
    t = draws(9, lambda: init.kaiming_normal(6, 4))
    want = draws(9, lambda: np.random.randn(6, 4).astype(np.float32) * (math.sqrt(2) / math.sqrt(6)))
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    # convolution kernels: the shape overrides (fan_in, fan_out); fan_in = k * k * C_in
    t = draws(10, lambda: init.kaiming_uniform(3 * 3 * 2, 4, shape=(3, 3, 2, 4), device=ndl.cpu_numpy()))
    assert t.shape == (3, 3, 2, 4) and t.device == ndl.cpu_numpy()
    bound = math.sqrt(2) * math.sqrt(3 / 18)
    want = draws(10, lambda: np.random.rand(3, 3, 2, 4).astype(np.float32) * (2 * bound) - bound)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    with pytest.raises(ValueError, match="relu"):
        init.kaiming_uniform(3, 3, nonlinearity="tanh")
