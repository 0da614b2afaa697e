"""nn.Embedding, RNNCell/RNN and LSTMCell/LSTM against the textbook equations in numpy."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.errors import ShapeError
from nn_helpers import DEVICE_IDS, DEVICES, grad_check, lstm_cell, rnn_cell, tensor

devices = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


def weights(cell):
    """The cell's parameters as float64 numpy arrays (biases None when absent)."""
    get = lambda p: None if p is None else p.numpy().astype(np.float64)  # noqa: E731
    return get(cell.W_ih), get(cell.W_hh), get(cell.bias_ih), get(cell.bias_hh)


# ---- Embedding ----------------------------------------------------------------------------
@devices
def test_embedding_looks_up_rows(device):
    emb = nn.Embedding(7, 3, device=device)
    ids = np.random.randint(0, 7, size=(4, 2))
    got = emb(tensor(ids, device, requires_grad=False))
    assert got.shape == (4, 2, 3)
    np.testing.assert_allclose(got.numpy(), emb.weight.numpy()[ids], rtol=1e-6)


def test_embedding_gradient_accumulates_per_id():
    emb = nn.Embedding(5, 2)
    ids = np.array([[0, 3], [3, 3], [1, 0]])
    upstream = np.random.randn(3, 2, 2)
    emb(tensor(ids, requires_grad=False)).backward(tensor(upstream, requires_grad=False))
    expected = np.zeros((5, 2))
    np.add.at(expected, ids.ravel(), upstream.reshape(-1, 2))
    np.testing.assert_allclose(emb.weight.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_embedding_init_is_standard_normal_draw():
    np.random.seed(2)
    expected = np.random.randn(6, 4)
    np.random.seed(2)
    np.testing.assert_allclose(nn.Embedding(6, 4).weight.numpy(), expected, rtol=1e-6)


# ---- RNNCell / RNN ------------------------------------------------------------------------
def test_rnn_cell_init_bounds_and_shapes():
    cell = nn.RNNCell(5, 4)
    shapes = {n: p.shape for n, p in cell.named_parameters()}
    assert shapes == {"W_ih": (5, 4), "W_hh": (4, 4), "bias_ih": (4,), "bias_hh": (4,)}
    bound = np.sqrt(1 / 4)
    for p in cell.parameters():
        assert np.all(np.abs(p.numpy()) <= bound)
    assert len(nn.RNNCell(5, 4, bias=False).parameters()) == 2
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNNCell(2, 2, nonlinearity="gelu")


@devices
@pytest.mark.parametrize("nonlinearity,bias", [("tanh", True), ("relu", True), ("tanh", False)])
def test_rnn_cell_matches_numpy(device, nonlinearity, bias):
    cell = nn.RNNCell(3, 4, bias=bias, nonlinearity=nonlinearity, device=device)
    x, h = np.random.randn(2, 3), np.random.randn(2, 4)
    got = cell(tensor(x, device), tensor(h, device))
    np.testing.assert_allclose(got.numpy(), rnn_cell(x, h, *weights(cell), nonlinearity), rtol=1e-5, atol=1e-6)
    zero_h = cell(tensor(x, device))  # h defaults to zeros
    np.testing.assert_allclose(zero_h.numpy(), rnn_cell(x, np.zeros((2, 4)), *weights(cell), nonlinearity),
                               rtol=1e-5, atol=1e-6)


@devices
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("with_h0", [False, True])
def test_rnn_matches_numpy_unrolled(device, num_layers, with_h0):
    seq_len, bs, n_in, hidden = 4, 3, 2, 5
    rnn = nn.RNN(n_in, hidden, num_layers, device=device)
    x = np.random.randn(seq_len, bs, n_in)
    h0 = np.random.randn(num_layers, bs, hidden) if with_h0 else np.zeros((num_layers, bs, hidden))
    out, h_n = rnn(tensor(x, device), tensor(h0, device) if with_h0 else None)
    layer_in = x
    expected_h = []
    for layer, cell in enumerate(rnn.rnn_cells):
        h, outs = h0[layer], []
        for t in range(seq_len):
            h = rnn_cell(layer_in[t], h, *weights(cell))
            outs.append(h)
        layer_in = np.stack(outs)
        expected_h.append(h)
    assert out.shape == (seq_len, bs, hidden) and h_n.shape == (num_layers, bs, hidden)
    np.testing.assert_allclose(out.numpy(), layer_in, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h_n.numpy(), np.stack(expected_h), rtol=1e-5, atol=1e-5)


@devices
def test_rnn_cell_gradients(device):
    cell = nn.RNNCell(3, 2, device=device, dtype="float64")
    x, h = tensor(np.random.randn(2, 3), device, "float64"), tensor(np.random.randn(2, 2), device, "float64")
    grad_check(lambda: cell(x, h), [x, h] + cell.parameters())


def test_rnn_gradients_through_time_and_layers():
    rnn = nn.RNN(2, 3, num_layers=2, nonlinearity="tanh", dtype="float64")
    x = tensor(np.random.randn(3, 2, 2), dtype="float64")
    h0 = tensor(np.random.randn(2, 2, 3), dtype="float64")

    def run():
        out, h_n = rnn(x, h0)
        return out.sum((0,)) + h_n.sum((0,))
    grad_check(run, [x, h0, rnn.rnn_cells[0].W_hh, rnn.rnn_cells[1].W_ih])


def test_rnn_rejects_bad_shapes():
    rnn = nn.RNN(3, 4, num_layers=2)
    with pytest.raises(ShapeError, match="RNN"):
        rnn(tensor(np.zeros((5, 2, 4))))
    with pytest.raises(ShapeError, match="RNN"):
        rnn(tensor(np.zeros((5, 3))))
    with pytest.raises(ShapeError, match="h0"):
        rnn(tensor(np.zeros((5, 2, 3))), tensor(np.zeros((1, 2, 4))))
    with pytest.raises(ShapeError, match="RNNCell"):
        nn.RNNCell(3, 4)(tensor(np.zeros((2, 3))), tensor(np.zeros((2, 5))))


# ---- LSTMCell / LSTM ----------------------------------------------------------------------
def test_lstm_cell_parameter_shapes():
    cell = nn.LSTMCell(5, 3)
    shapes = {n: p.shape for n, p in cell.named_parameters()}
    assert shapes == {"W_ih": (5, 12), "W_hh": (3, 12), "bias_ih": (12,), "bias_hh": (12,)}
    assert all(np.all(np.abs(p.numpy()) <= np.sqrt(1 / 3)) for p in cell.parameters())
    lstm = nn.LSTM(5, 3, num_layers=2)
    assert lstm.num_parameters() == (5 * 12 + 3 * 12 + 24) + (3 * 12 + 3 * 12 + 24)


@devices
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_matches_numpy(device, bias):
    cell = nn.LSTMCell(3, 4, bias=bias, device=device)
    x, h, c = np.random.randn(2, 3), np.random.randn(2, 4), np.random.randn(2, 4)
    got_h, got_c = cell(tensor(x, device), (tensor(h, device), tensor(c, device)))
    exp_h, exp_c = lstm_cell(x, h, c, *weights(cell))
    np.testing.assert_allclose(got_h.numpy(), exp_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_c.numpy(), exp_c, rtol=1e-5, atol=1e-6)
    zero_h, zero_c = cell(tensor(x, device))
    exp_h, exp_c = lstm_cell(x, np.zeros((2, 4)), np.zeros((2, 4)), *weights(cell))
    np.testing.assert_allclose(zero_h.numpy(), exp_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(zero_c.numpy(), exp_c, rtol=1e-5, atol=1e-6)


@devices
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_matches_numpy_unrolled(device, num_layers, with_state):
    seq_len, bs, n_in, hidden = 3, 2, 4, 3
    lstm = nn.LSTM(n_in, hidden, num_layers, device=device)
    x = np.random.randn(seq_len, bs, n_in)
    zeros = np.zeros((num_layers, bs, hidden))
    h0 = np.random.randn(num_layers, bs, hidden) if with_state else zeros
    c0 = np.random.randn(num_layers, bs, hidden) if with_state else zeros
    state = (tensor(h0, device), tensor(c0, device)) if with_state else None
    out, (h_n, c_n) = lstm(tensor(x, device), state)
    layer_in, hs, cs = x, [], []
    for layer, cell in enumerate(lstm.lstm_cells):
        h, c, outs = h0[layer], c0[layer], []
        for t in range(seq_len):
            h, c = lstm_cell(layer_in[t], h, c, *weights(cell))
            outs.append(h)
        layer_in = np.stack(outs)
        hs.append(h)
        cs.append(c)
    np.testing.assert_allclose(out.numpy(), layer_in, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h_n.numpy(), np.stack(hs), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c_n.numpy(), np.stack(cs), rtol=1e-5, atol=1e-5)


@devices
def test_lstm_cell_gradients(device):
    cell = nn.LSTMCell(2, 2, device=device, dtype="float64")
    x = tensor(np.random.randn(2, 2), device, "float64")
    h, c = tensor(np.random.randn(2, 2), device, "float64"), tensor(np.random.randn(2, 2), device, "float64")

    def run():
        h1, c1 = cell(x, (h, c))
        return h1 * 2.0 + c1
    grad_check(run, [x, h, c] + cell.parameters())


def test_lstm_gradients_through_time_and_layers():
    lstm = nn.LSTM(2, 2, num_layers=2, dtype="float64")
    x = tensor(np.random.randn(3, 2, 2), dtype="float64")

    def run():
        out, (h_n, c_n) = lstm(x)
        return out.sum((0,)) + c_n.sum((0,))
    grad_check(run, [x, lstm.lstm_cells[0].W_ih, lstm.lstm_cells[1].W_hh, lstm.lstm_cells[1].bias_ih])


def test_lstm_rejects_bad_shapes():
    lstm = nn.LSTM(3, 4)
    x = tensor(np.zeros((2, 5, 3)))
    with pytest.raises(ShapeError, match="LSTM"):
        lstm(tensor(np.zeros((2, 5, 2))))
    with pytest.raises(ShapeError, match="c0"):
        lstm(x, (tensor(np.zeros((1, 5, 4))), tensor(np.zeros((1, 4, 4)))))
    with pytest.raises(ValueError):
        nn.LSTM(3, 4, num_layers=0)


def test_sequence_training_step_reaches_every_parameter():
    emb, lstm, head = nn.Embedding(6, 3), nn.LSTM(3, 4), nn.Linear(4, 6)
    ids = np.random.randint(0, 6, size=(5, 2))
    out, _ = lstm(emb(tensor(ids, requires_grad=False)))
    logits = head(out.reshape((10, 4)))
    nn.SoftmaxLoss()(logits, ndl.Tensor(ids.ravel(), requires_grad=False)).backward()
    for module in (emb, lstm, head):
        for name, p in module.named_parameters():
            assert p.grad is not None and p.grad.shape == p.shape, name
