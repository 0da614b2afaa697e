"""standardize: (x - mean) / sqrt(var + eps) along one axis, the biased variance, as
one op with a one-op gradient (BatchNorm's and LayerNorm's core).  Values against
float64 numpy, gradients against finite differences, the second order against
finite differences of the first (test_ops_higher_order.py's check)."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor
from tests.ops.test_ops_higher_order import second_order_check

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)

CASES = [((6, 4), 0), ((6, 4), 1), ((6, 4), -1), ((2, 3, 5), 2), ((2, 3, 5), 1), ((1, 7), 1), ((9, 1), 0)]


def reference(x, axis, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps), mean, var


@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_standardize_values_and_statistics(device, shape, axis, dtype):
    x = np.random.randn(*shape) * 3 + 1
    op = ops.Standardize(axis, 1e-5)
    out = op(tensor(x, device, dtype=dtype))
    expected, mean, var = reference(x.astype(dtype), axis, 1e-5)
    # float32: each value is a few roundings of terms of size |x|, over std
    rtol, atol = (1e-5, 1e-5) if dtype == "float32" else (1e-12, 1e-12)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol)
    # the statistics: arrays of the device (numpy, NDArray or a pending lazy array)
    to_numpy = lambda a: np.asarray(a.numpy() if hasattr(a, "numpy") else a, dtype=np.float64)  # noqa: E731
    np.testing.assert_allclose(to_numpy(op.mean), mean, rtol=rtol, atol=atol * 10)
    np.testing.assert_allclose(to_numpy(op.var), var, rtol=rtol * 10, atol=atol * 10)


@pytest.mark.parametrize("shape,axis", CASES[:5])
def test_standardize_gradient(device, shape, axis):
    gradient_check(lambda t: ops.standardize(t, axis, 1e-3), randn(shape, device))


def test_standardize_gradient_is_one_op(device):
    x = randn((5, 3), device)
    ops.standardize(x, 0).backward(tensor(np.random.randn(5, 3), device, requires_grad=False))
    assert isinstance(x.grad.op, ops.FusedGradient) and isinstance(x.grad.op.fused, ops.Standardize)


@pytest.mark.parametrize("axis", [0, 1])
def test_standardize_second_derivative(device, axis):
    # through the gradient op's reference: exact, like every op's second order
    second_order_check(lambda t: ops.standardize(t * t + t, axis, 1e-2) * ops.exp(t), randn((3, 4), device))


def test_standardize_constant_rows_stay_finite(device):
    x = tensor(np.ones((4, 3)), device)
    out = ops.standardize(x, 1, 1e-5)
    out.backward()
    assert np.all(out.numpy() == 0) and np.all(np.isfinite(x.grad.numpy()))


@pytest.mark.parametrize("bad", [1.5, True, "0"])
def test_standardize_rejects_bad_axis(device, bad):
    with pytest.raises(ndl.errors.ArgumentError, match="standardize"):
        ops.Standardize(bad, 1e-5)


def test_standardize_rejects_axis_out_of_range(device):
    with pytest.raises(ndl.errors.AxisError, match="standardize"):
        ops.standardize(randn((2, 3), device), 2)


def test_one_standardize_instance_called_twice_differentiates_each_call(device):
    op = ops.Standardize(1, 1e-3)
    a, b = randn((3, 4), device), randn((3, 4), device)
    out = op(a) * 2 + op(b)
    w = np.random.randn(3, 4)
    out.backward(tensor(w, device, requires_grad=False))
    for x, scale in ((a, 2.0), (b, 1.0)):
        x0 = x.numpy().astype(np.float64)
        def f(v):
            return np.sum(w * scale * reference(v, 1, 1e-3)[0])
        num = np.zeros_like(x0)
        for j in range(x0.size):
            e = np.zeros_like(x0); e.flat[j] = 1e-6
            num.flat[j] = (f(x0 + e) - f(x0 - e)) / 2e-6
        np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-5, atol=1e-6)
