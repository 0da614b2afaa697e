"""examples/models.py: ResNet9 and LanguageModel against numpy re-implementations."""
import os
import sys

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nn"))
from nn_helpers import batchnorm_train, conv_nchw, lstm_cell, rnn_cell  # noqa: E402

from examples.models import LanguageModel, ResNet9  # noqa: E402

# (in, out, kernel, stride) of each ConvBN, in order; "res" marks the residual pairs
RESNET9_BLOCKS = [(3, 16, 7, 4), (16, 32, 3, 2), "res", (32, 64, 3, 2), (64, 128, 3, 2), "res"]


def test_resnet9_parameter_count():
    def conv_bn(cin, cout, k):
        return k * k * cin * cout + cout + 2 * cout  # conv weight, conv bias, bn weight and bias
    expected = (conv_bn(3, 16, 7) + conv_bn(16, 32, 3) + 2 * conv_bn(32, 32, 3) + conv_bn(32, 64, 3)
                + conv_bn(64, 128, 3) + 2 * conv_bn(128, 128, 3) + (128 * 128 + 128) + (128 * 10 + 10))
    assert expected == 431946
    model = ResNet9()
    assert sum(int(np.prod(p.shape)) for p in model.parameters()) == expected
    assert len(model.parameters()) == 8 * 4 + 4


def _conv_bn_relu_ref(x, block):
    p = {n: v.numpy().astype(np.float64) for n, v in block.named_parameters()}
    y = conv_nchw(x, p["conv.weight"], p["conv.bias"], block.conv.stride, block.conv.kernel_size // 2)
    n, c, h, w = y.shape
    flat = y.transpose(0, 2, 3, 1).reshape(-1, c)
    normed, _, _ = batchnorm_train(flat, p["bn.weight"], p["bn.bias"], 1e-5)
    return np.maximum(normed.reshape(n, h, w, c).transpose(0, 3, 1, 2), 0)


def test_resnet9_forward_matches_numpy():
    model = ResNet9()
    x = np.random.randn(2, 3, 32, 32).astype(np.float32)
    got = model(ndl.Tensor(x))
    assert got.shape == (2, 10)
    layers = model.model.modules
    h = x.astype(np.float64)
    for layer in layers[:6]:
        if isinstance(layer, nn.Residual):
            inner = h
            for block in layer.fn.modules:
                inner = _conv_bn_relu_ref(inner, block)
            h = inner + h
        else:
            h = _conv_bn_relu_ref(h, layer)
    h = h.reshape(2, -1)
    lin1, lin2 = layers[7], layers[9]
    h = np.maximum(h @ lin1.weight.numpy() + lin1.bias.numpy(), 0)
    expected = h @ lin2.weight.numpy() + lin2.bias.numpy()
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-3, atol=1e-3)


def test_resnet9_training_step_gives_every_parameter_a_gradient():
    model = ResNet9()
    x = ndl.Tensor(np.random.randn(2, 3, 32, 32).astype(np.float32))
    loss = nn.SoftmaxLoss()(model(x), ndl.Tensor([3, 7], requires_grad=False))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert np.all(np.isfinite(p.grad.numpy())), name
    model.eval()
    assert model(x).shape == (2, 10)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_language_model_rnn_matches_numpy(num_layers):
    vocab, emb, hidden, seq_len, bs = 11, 4, 5, 3, 2
    model = LanguageModel(emb, vocab, hidden, num_layers=num_layers, seq_model="rnn")
    ids = np.random.randint(0, vocab, size=(seq_len, bs))
    out, h = model(ndl.Tensor(ids, requires_grad=False))
    assert out.shape == (seq_len * bs, vocab) and h.shape == (num_layers, bs, hidden)
    layer_in = model.embedding.weight.numpy().astype(np.float64)[ids]
    finals = []
    for cell in model.seq_model.rnn_cells:
        w = [p.numpy().astype(np.float64) for p in (cell.W_ih, cell.W_hh, cell.bias_ih, cell.bias_hh)]
        state, outs = np.zeros((bs, hidden)), []
        for t in range(seq_len):
            state = rnn_cell(layer_in[t], state, *w)
            outs.append(state)
        layer_in = np.stack(outs)
        finals.append(state)
    logits = layer_in.reshape(-1, hidden) @ model.linear.weight.numpy() + model.linear.bias.numpy()
    np.testing.assert_allclose(out.numpy(), logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h.numpy(), np.stack(finals), rtol=1e-4, atol=1e-5)


def test_language_model_lstm_matches_numpy_and_carries_state():
    vocab, emb, hidden, seq_len, bs = 9, 3, 4, 4, 2
    model = LanguageModel(emb, vocab, hidden, num_layers=1, seq_model="lstm")
    ids = np.random.randint(0, vocab, size=(seq_len, bs))
    out1, (h1, c1) = model(ndl.Tensor(ids[:2], requires_grad=False))
    out2, (h2, c2) = model(ndl.Tensor(ids[2:], requires_grad=False), (h1.detach(), c1.detach()))
    cell = model.seq_model.lstm_cells[0]
    w = [p.numpy().astype(np.float64) for p in (cell.W_ih, cell.W_hh, cell.bias_ih, cell.bias_hh)]
    x = model.embedding.weight.numpy().astype(np.float64)[ids]
    h, c, outs = np.zeros((bs, hidden)), np.zeros((bs, hidden)), []
    for t in range(seq_len):
        h, c = lstm_cell(x[t], h, c, *w)
        outs.append(h)
    logits = np.stack(outs).reshape(-1, hidden) @ model.linear.weight.numpy() + model.linear.bias.numpy()
    got = np.concatenate([out1.numpy(), out2.numpy()])
    np.testing.assert_allclose(got, logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h2.numpy()[0], h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c2.numpy()[0], c, rtol=1e-4, atol=1e-5)


def test_language_model_parameters_and_training_step():
    model = LanguageModel(6, 10, 8, num_layers=2, seq_model="lstm")
    expected = 10 * 6 + (6 * 32 + 8 * 32 + 64) + (8 * 32 + 8 * 32 + 64) + (8 * 10 + 10)
    assert model.num_parameters() == expected
    ids = np.random.randint(0, 10, size=(5, 3))
    logits, _ = model(ndl.Tensor(ids, requires_grad=False))
    nn.SoftmaxLoss()(logits, ndl.Tensor(np.roll(ids, -1, 0).ravel(), requires_grad=False)).backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())
    with pytest.raises(ValueError, match="seq_model"):
        LanguageModel(2, 3, 4, seq_model="gru")
