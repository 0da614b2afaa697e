"""Fused ops (the LSTM cell's state and output): values against numpy, gradients
against finite differences, the second order against finite differences of the
first, one op per gradient."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor
from tests.ops.test_ops_higher_order import second_order_check

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


def sig(x):
    return 1 / (1 + np.exp(-x))


def reference(gates, c0):
    i, f, g, o = np.split(gates.astype(np.float64), 4, axis=1)
    c = sig(f) * c0 + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c), c


@pytest.mark.parametrize("batch,hidden", [(3, 2), (1, 5), (4, 1)])
def test_lstm_cell_values(device, batch, hidden):
    gates, c0 = np.random.randn(batch, 4 * hidden) * 2, np.random.randn(batch, hidden)
    h, c = ops.lstm_cell(tensor(gates, device, dtype="float32"), tensor(c0, device, dtype="float32"))
    want_h, want_c = reference(gates.astype(np.float32), c0.astype(np.float32))
    # each value a few float32 roundings of terms of size ~1
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", [ops.LSTMCellState, ops.LSTMCellOutput])
def test_lstm_cell_gradients(device, op):
    gradient_check(lambda g, c: op()(g, c), randn((3, 8), device), randn((3, 2), device))


def test_lstm_cell_through_both_ops(device):
    gradient_check(lambda g, c: ops.lstm_cell(g, c)[0] * ops.lstm_cell(g, c)[1], randn((2, 12), device),
                   randn((2, 3), device))


@pytest.mark.parametrize("which", [0, 1])
def test_lstm_cell_second_derivative(device, which):
    # through FusedGradient's reference: the gates and the state one tensor t, so every
    # input of the gradient op depends on it
    def f(t):
        gates = ops.reshape(ops.exp(t) * t, (2, 8)) if which == 0 else ops.reshape(t, (2, 8))
        return ops.lstm_cell(gates, ops.reshape(t, (2, 8))[:, :2] * 0.5)[which]
    second_order_check(f, randn((4, 4), device))


def test_a_fused_gradient_is_one_op(device):
    g, c0 = randn((3, 8), device), randn((3, 2), device)
    h, c = ops.lstm_cell(g, c0)
    (h + c).backward()
    assert isinstance(c0.grad.op, ops.FusedGradient)
    # the gates' gradient: one op from each fused op, added
    assert isinstance(g.grad.op, ops.EWiseAdd) and all(isinstance(x.op, ops.FusedGradient) for x in g.grad.inputs)


@pytest.mark.parametrize("gates,c0", [((3, 7), (3, 1)), ((3, 8), (3, 3)), ((8,), (2,))])
def test_lstm_cell_bad_shapes(device, gates, c0):
    with pytest.raises(ndl.errors.ShapeError, match="lstm cell"):
        ops.lstm_cell(randn(gates, device), randn(c0, device))


@pytest.mark.parametrize("bias_shape", [(5,), (1, 5)])
def test_matmul_bias_values_and_gradients(device, bias_shape):
    x, w, b = randn((4, 3), device), randn((3, 5), device), randn(bias_shape, device)
    np.testing.assert_allclose(ops.matmul_bias(x, w, b).numpy(), x.numpy() @ w.numpy() + b.numpy().reshape(1, 5),
                               rtol=1e-12)
    gradient_check(lambda x, w, b: ops.matmul_bias(x, w, b), x, w, b)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 3), (3,)])
def test_scale_shift_values_and_gradients(device, shape):
    x, w, b = randn(shape, device), randn((3,), device), randn((3,), device)
    np.testing.assert_allclose(ops.scale_shift(x, w, b).numpy(), x.numpy() * w.numpy() + b.numpy(), rtol=1e-12)
    gradient_check(lambda x, w, b: ops.scale_shift(x, w, b), x, w, b)


@pytest.mark.parametrize("which", ["matmul_bias", "scale_shift"])
def test_affine_second_derivative(device, which):
    # every input of the gradient ops a function of t (their references differentiate it)
    def f(t):
        if which == "matmul_bias":
            return ops.matmul_bias(ops.exp(t), ops.transpose(t) * t.sum(), t[0] * 0.5)
        return ops.scale_shift(ops.exp(t), t[0] * t[1], t[1])
    second_order_check(f, randn((2, 2), device) if which == "matmul_bias" else randn((2, 2), device))


@pytest.mark.parametrize("args", [((4, 3), (2, 5), (5,)), ((4, 3), (3, 5), (4,)), ((2, 4, 3), (3, 5), (5,)),
                                  ((4, 3), (3, 5), (2, 5))])
def test_matmul_bias_bad_shapes(device, args):
    with pytest.raises(ndl.errors.ShapeError, match="matmul_bias"):
        ops.matmul_bias(*(randn(s, device) for s in args))


def test_scale_shift_bad_shapes(device):
    with pytest.raises(ndl.errors.ShapeError, match="scale_shift"):
        ops.scale_shift(randn((4, 3), device), randn((4,), device), randn((3,), device))


@pytest.mark.parametrize("which", ["matmul_bias", "scale_shift"])
def test_one_tensor_as_two_inputs_second_derivative(device, which):
    # (each position's partial: the total gradient was counted once per position)
    def f(t):
        if which == "matmul_bias":
            return ops.matmul_bias(ops.exp(t), ops.exp(t) * 0 + ops.exp(t), t[0])  # (distinct: baseline)
        w = t[0]
        return ops.scale_shift(t * t, w, w)
    second_order_check(f, randn((2, 2), device))
    if which == "matmul_bias":
        second_order_check(lambda t: ops.matmul_bias(t, t, t[0]), randn((2, 2), device))
