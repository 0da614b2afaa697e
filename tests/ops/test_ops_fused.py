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
