"""Gradients are themselves differentiable: the gradient of x.grad (a graph built
from ops) against finite differences of the first gradient."""
import numpy as np
import pytest

from needle import ops
from needle.ops.ops_reduce import MatMul
from tests.gradcheck import DEVICE_IDS, DEVICES, away_from_zero, positive, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


def first_gradient(f, x, w):
    """d sum(w * f(x)) / dx, as numpy, from backward()."""
    x.grad = None
    f(x).backward(w)
    return x.grad


def second_order_check(f, x, eps=1e-6, atol=1e-5, rtol=1e-4):
    """d/dx sum(v * grad(x)) from x.grad.backward(v), against central differences."""
    out = f(x)
    w = tensor(np.random.uniform(0.5, 1.5, out.shape), x.device, requires_grad=False)
    v = np.random.uniform(0.5, 1.5, x.shape)
    storage = x.realize_cached_data()
    expected = np.zeros(x.shape)
    for j in range(expected.size):
        storage.flat[j] += eps
        plus = float(np.sum(first_gradient(f, x, w).numpy() * v))
        storage.flat[j] -= 2 * eps
        minus = float(np.sum(first_gradient(f, x, w).numpy() * v))
        storage.flat[j] += eps
        expected.flat[j] = (plus - minus) / (2 * eps)
    g = first_gradient(f, x, w)
    g.backward(tensor(v, x.device, requires_grad=False))
    np.testing.assert_allclose(x.grad.numpy(), expected, atol=atol, rtol=rtol)


CASES = {
    "exp": (ops.exp, randn),
    "log": (ops.log, positive),
    "tanh": (ops.tanh, randn),
    "sigmoid": (ops.sigmoid, randn),
    "sqrt": (ops.sqrt, positive),
    "power_scalar": (lambda t: ops.power_scalar(t, 3), randn),
    "power_scalar_frac": (lambda t: t ** -1.5, positive),
    "reciprocal": (lambda t: 2 / t, positive),
    "multiply_self": (lambda t: t * t * t, randn),
    "divide": (lambda t: ops.divide(ops.exp(t), t), positive),
    "power": (lambda t: ops.power(t, t), positive),
    "relu": (lambda t: ops.relu(t) * t, away_from_zero),
    "matmul": (lambda t: ops.matmul(t, ops.transpose(t)), randn),
    "matmul_transposed_a": (lambda t: MatMul(True, False)(t, ops.exp(t)), randn),
    "matmul_transposed_b": (lambda t: MatMul(False, True)(t, ops.exp(t)), randn),
    "matmul_transposed_both": (lambda t: MatMul(True, True)(t, ops.reshape(ops.exp(t), (3, 2))), randn),
    "logsumexp": (lambda t: ops.logsumexp(t, (1,)), randn),
    "logsoftmax": (lambda t: ops.logsoftmax(t), randn),
    "max": (lambda t: ops.max(t * t, (1,)), away_from_zero),
    "mean_broadcast": (lambda t: ops.exp(ops.mean(t, (0,), keepdims=True) * t), randn),
    "getitem": (lambda t: ops.exp(t[::-1, 1:]) * t[:, :-1], randn),
    "stack_split": (lambda t: ops.stack([ops.exp(p) * p for p in ops.split(t, 0).tuple()], 1), randn),
    "conv": (lambda t: ops.conv(ops.reshape(t, (1, 2, 3, 1)), ops.reshape(ops.exp(t), (2, 3, 1, 1)) * 0.5,
                                padding=1), randn),
    "conv_strided": (lambda t: ops.conv(ops.reshape(t, (1, 2, 3, 1)), ops.reshape(ops.exp(t), (3, 2, 1, 1)) * 0.5,
                                        stride=2, padding=1), randn),
    "conv_padding_only_taps": (lambda t: ops.conv(ops.reshape(t, (1, 1, 2, 3)),
                                                  ops.reshape(ops.exp(ops.concatenate([t] * 9, 0)) * 0.5, (3, 3, 3, 2)),
                                                  padding=1), randn),
}


@pytest.mark.parametrize("name", list(CASES))
def test_second_derivative(device, name):
    f, make = CASES[name]
    second_order_check(f, make((2, 3), device))
