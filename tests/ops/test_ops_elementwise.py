"""Elementwise ops: forward against numpy, gradients against finite differences."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import (DEVICE_IDS, DEVICES, away_from_zero, gradient_check, positive, randn,
                             tensor)

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)

# (shape of a, shape of b): equal shapes, broadcasting in both directions, size-1 axes, 0-d
BINARY_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((4,), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 1, 3), (4, 1)),
    ((1,), (2, 3)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((), ()),
    ((5,), (5,)),
]
BINARY_IDS = [f"{a}-{b}" for a, b in BINARY_SHAPES]

BINARY_OPS = {
    "add": (ops.add, np.add),
    "subtract": (ops.subtract, np.subtract),
    "multiply": (ops.multiply, np.multiply),
    "divide": (ops.divide, np.divide),
    "power": (ops.power, np.power),
}
OPERATORS = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "power": lambda a, b: a ** b,
}


def _operands(name, sa, sb, device, dtype="float64"):
    if name in ("divide", "power"):  # positive bases and divisors
        return positive(sa, device, dtype=dtype), positive(sb, device, dtype=dtype)
    return randn(sa, device, dtype), randn(sb, device, dtype)


@pytest.mark.parametrize("name", list(BINARY_OPS))
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=BINARY_IDS)
def test_binary_forward(device, name, shapes):
    op, ref = BINARY_OPS[name]
    a, b = _operands(name, *shapes, device, dtype="float32")
    expected = ref(a.numpy(), b.numpy())
    for out in (op(a, b), OPERATORS[name](a, b)):
        assert out.shape == expected.shape
        assert out.dtype == "float32"
        assert out.device == device
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(BINARY_OPS))
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=BINARY_IDS)
def test_binary_gradient(device, name, shapes):
    a, b = _operands(name, *shapes, device)
    gradient_check(BINARY_OPS[name][0], a, b)


def test_binary_same_tensor_twice(device):
    # x * x and x - x: the adjoints of both uses accumulate into one gradient
    x = randn((2, 3), device)
    gradient_check(lambda t: ops.multiply(t, t), x)
    ops.multiply(x, x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-12)
    out = ops.subtract(x, x)
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.zeros((2, 3)))


# ---- scalar ops --------------------------------------------------------------------------
SCALARS = [2.5, -1.5, 0.0, 3]
SCALAR_SHAPES = [(3, 4), (5,), (), (1, 1, 3)]


@pytest.mark.parametrize("shape", SCALAR_SHAPES, ids=str)
@pytest.mark.parametrize("scalar", SCALARS)
def test_scalar_ops_forward(device, shape, scalar):
    x = positive(shape, device, dtype="float32")
    xn = x.numpy()
    cases = [
        (ops.add_scalar(x, scalar), xn + np.float32(scalar)),
        (ops.mul_scalar(x, scalar), xn * np.float32(scalar)),
        (ops.power_scalar(x, scalar), xn ** np.float32(scalar)),
        (x + scalar, xn + np.float32(scalar)),
        (scalar + x, xn + np.float32(scalar)),
        (x - scalar, xn - np.float32(scalar)),
        (scalar - x, np.float32(scalar) - xn),
        (x * scalar, xn * np.float32(scalar)),
        (scalar * x, xn * np.float32(scalar)),
        (x ** scalar, xn ** np.float32(scalar)),
    ]
    if scalar != 0:
        cases += [(ops.divide_scalar(x, scalar), xn / np.float32(scalar)),
                  (x / scalar, xn / np.float32(scalar))]
    cases += [(scalar / x, np.float32(scalar) / xn)]
    for out, expected in cases:
        assert out.shape == shape
        assert out.dtype == "float32"
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", SCALAR_SHAPES, ids=str)
@pytest.mark.parametrize("scalar", SCALARS)
def test_scalar_ops_gradient(device, shape, scalar):
    x = positive(shape, device)
    gradient_check(lambda t: ops.add_scalar(t, scalar), x)
    gradient_check(lambda t: ops.mul_scalar(t, scalar), x)
    gradient_check(lambda t: ops.power_scalar(t, scalar), x)
    gradient_check(lambda t: scalar - t, x)
    gradient_check(lambda t: scalar / t, x)
    if scalar != 0:
        gradient_check(lambda t: ops.divide_scalar(t, scalar), x)


def test_power_scalar_negative_fractional(device):
    # the course's `a ** -1.5`
    x = positive((2, 3), device)
    out = x ** -1.5
    np.testing.assert_allclose(out.numpy(), x.numpy() ** -1.5, rtol=1e-12)
    gradient_check(lambda t: t ** -1.5, x)


@pytest.mark.parametrize("exponent", [2, 3, -1, 0])
def test_power_scalar_integer_exponent_of_negative_bases(device, exponent):
    x = away_from_zero((2, 3), device, margin=0.5)
    np.testing.assert_allclose(ops.power_scalar(x, exponent).numpy(), x.numpy() ** float(exponent), rtol=1e-12)
    gradient_check(lambda t: ops.power_scalar(t, exponent), x)


def test_scalar_to_the_tensor(device):
    x = randn((3,), device)
    np.testing.assert_allclose((2 ** x).numpy(), 2.0 ** x.numpy(), rtol=1e-12)
    gradient_check(lambda t: 2 ** t, x)


def test_scalar_ops_reject_non_numbers(device):
    x = randn((2,), device)
    with pytest.raises(TypeError, match="add_scalar"):
        ops.add_scalar(x, "1")
    with pytest.raises(TypeError, match="mul_scalar"):
        ops.mul_scalar(x, [1, 2])


# ---- unary ops ---------------------------------------------------------------------------
UNARY_SHAPES = [(3, 4), (6,), (), (2, 1, 3)]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY_OPS = {
    # name: (op, numpy reference, input maker)
    "negate": (ops.negate, np.negative, randn),
    "exp": (ops.exp, np.exp, randn),
    "log": (ops.log, np.log, positive),
    "relu": (ops.relu, lambda x: np.maximum(x, 0), away_from_zero),
    "tanh": (ops.tanh, np.tanh, randn),
    "sigmoid": (ops.sigmoid, _sigmoid, randn),
    "sqrt": (ops.sqrt, np.sqrt, positive),
}
METHODS = {
    "negate": lambda t: -t, "exp": lambda t: t.exp(), "log": lambda t: t.log(),
    "relu": lambda t: t.relu(), "tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(),
    "sqrt": lambda t: t.sqrt(),
}


@pytest.mark.parametrize("name", list(UNARY_OPS))
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
def test_unary_forward(device, name, shape):
    op, ref, make = UNARY_OPS[name]
    x = make(shape, device, dtype="float32")
    expected = ref(x.numpy())
    for out in (op(x), METHODS[name](x)):
        assert out.shape == shape
        assert out.dtype == "float32"
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(UNARY_OPS))
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
def test_unary_gradient(device, name, shape):
    op, _, make = UNARY_OPS[name]
    gradient_check(op, make(shape, device))


def test_relu_gradient_values(device):
    x = tensor([[-2.0, -0.5, 0.5], [3.0, -1.0, 1e-3]], device)
    ops.relu(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 1], [1, 0, 1]])


def test_sigmoid_and_tanh_saturate_without_overflow(device):
    x = tensor([-1e4, -50.0, 0.0, 50.0, 1e4], device, dtype="float32")
    with np.errstate(over="raise"):
        expected = np.array([0.0, _sigmoid(-50.0), 0.5, 1.0, 1.0])
    np.testing.assert_allclose(ops.sigmoid(x).numpy(), expected, atol=1e-7)
    np.testing.assert_allclose(ops.tanh(x).numpy(), [-1, -1, 0, 1, 1], atol=1e-7)
    assert np.all(np.isfinite(ops.sigmoid(x).numpy()))


def test_exp_log_edge_values(device):
    x = tensor([0.0, 1.0, np.inf], device, dtype="float32")
    np.testing.assert_array_equal(ops.log(x).numpy(), [-np.inf, 0.0, np.inf])
    np.testing.assert_allclose(ops.exp(tensor([-np.inf, 0.0, 1.0], device, "float32")).numpy(),
                               [0.0, 1.0, np.e], rtol=1e-6)


# ---- astype ------------------------------------------------------------------------------
@pytest.mark.parametrize("src,dst", [("float32", "float64"), ("float64", "float32"), ("float32", "int32"),
                                     ("int64", "float32"), ("float64", "int64")])
def test_astype_forward(device, src, dst):
    values = np.array([[1.75, -2.25, 0.0], [3.5, 7.0, -0.5]])
    x = tensor(values.astype(src), device, dtype=src)
    out = ops.astype(x, dst)
    assert out.dtype == dst
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out.numpy(), values.astype(src).astype(dst))
    assert x.astype(dst).dtype == dst


def test_astype_same_dtype_is_identity(device):
    x = randn((2,), device, dtype="float32")
    assert ops.astype(x, "float32") is x
    assert ops.astype(x, np.float32) is x


def test_astype_gradient(device):
    x = randn((2, 3), device)
    # float64 -> float32 -> float64: the gradient comes back in float64
    out = ops.astype(ops.astype(x, "float32") * 3.0, "float64")
    out.backward()
    assert x.grad.dtype == "float64"
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 3.0))


def test_dtypes_are_preserved(device):
    for dtype in ("float32", "float64"):
        x = positive((2, 2), device, dtype=dtype)
        for out in (x + x, x * 2, x / x, x ** 2, ops.exp(x), ops.log(x), ops.sigmoid(x), ops.relu(x),
                    ops.tanh(x), ops.sqrt(x), -x, x - 1, 1 / x):
            assert out.dtype == dtype


def test_bad_shapes_raise_at_build_time(device):
    a, b = randn((2, 3), device), randn((4,), device)
    for fn in (ops.add, ops.subtract, ops.multiply, ops.divide, ops.power):
        with pytest.raises(ndl.errors.ShapeError, match=r"\(2, 3\).*\(4,\)"):
            fn(a, b)


def test_mixed_dtypes_raise(device):
    a, b = randn((2,), device, dtype="float32"), randn((2,), device, dtype="float64")
    with pytest.raises(ndl.errors.DTypeError, match="float32.*float64"):
        a + b
    with pytest.raises(ndl.errors.DTypeError):
        ops.multiply(a, b)
