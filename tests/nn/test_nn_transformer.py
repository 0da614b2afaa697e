"""MultiHeadAttention, AttentionLayer, TransformerLayer and Transformer against a numpy
reference written here from the attention formulas (float64), with the course's draw
orders reproduced by hand: parameters drawn from numpy's global RNG in creation order,
Dropout masks (rand <= 1 - p, kept values / (1 - p)) in forward order.  Gradients are
checked by finite differences in float64."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from tests.nn.nn_helpers import grad_check

F32 = np.float32


# ---- the numpy reference --------------------------------------------------------------------
class Draws:
    """Replays numpy's global RNG the way the modules must use it."""

    def kaiming(self, fan_in, fan_out):
        bound = np.sqrt(6.0 / fan_in)
        return (np.random.rand(fan_in, fan_out).astype(F32) * (2 * bound) - bound).astype(np.float64)

    def linear(self, fan_in, fan_out, bias=True):
        w = self.kaiming(fan_in, fan_out)
        b = self.kaiming(fan_out, 1).reshape(1, fan_out) if bias else None
        return w, b

    @staticmethod
    def dropout(shape, p):
        keep = np.random.rand(*shape) <= 1 - p
        return keep / (1 - p)


def ref_layernorm(x, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def ref_attention(q, k, v, causal, p=0.0):
    """softmax(q kᵀ / sqrt(d) + mask) v for (B, H, T, D) arrays, written out by hand."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    scores = np.zeros((B, H, Tq, Tk))
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                for j in range(Tk):
                    if causal and j > i + (Tk - Tq):
                        scores[b, h, i, j] = -np.inf
                    else:
                        scores[b, h, i, j] = np.dot(q[b, h, i], k[b, h, j]) / np.sqrt(D)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    probs = e / e.sum(-1, keepdims=True)
    if p > 0:
        probs = probs * Draws.dropout(probs.shape, p)
    return np.einsum("bhij,bhjd->bhid", probs, v), probs


def ref_attention_layer(params, q, k, v, heads, dim_head, causal, p=0.0):
    wq, wk, wv, wo = params
    B, Tq, _ = q.shape

    def split(x, w):
        y = ref_layernorm(x) @ w
        return y.reshape(x.shape[0], x.shape[1], heads, dim_head).transpose(0, 2, 1, 3)

    out, _ = ref_attention(split(q, wq), split(k, wk), split(v, wv), causal, p)
    return out.transpose(0, 2, 1, 3).reshape(B, Tq, heads * dim_head) @ wo


def draw_attention_layer(draws, features, heads, dim_head):
    inner = heads * dim_head
    return [draws.kaiming(features, inner) for _ in range(3)] + [draws.kaiming(inner, features)]


def draw_transformer_layer(draws, features, heads, dim_head, hidden):
    attn = draw_attention_layer(draws, features, heads, dim_head)
    return attn, draws.linear(features, hidden), draws.linear(hidden, features)


def ref_transformer_layer(params, x, heads, dim_head, causal, p=0.0):
    attn, (w1, b1), (w2, b2) = params
    a = ref_attention_layer(attn, x, x, x, heads, dim_head, causal, p)
    if p > 0:
        a = a * Draws.dropout(a.shape, p)
    x = x + a
    B, T, D = x.shape
    y = np.maximum(ref_layernorm(x.reshape(B * T, D)) @ w1 + b1, 0)
    if p > 0:
        y = y * Draws.dropout(y.shape, p)
    y = y @ w2 + b2
    if p > 0:
        y = y * Draws.dropout(y.shape, p)
    return x + y.reshape(B, T, D)


def close(got, want, rtol=2e-5, atol=2e-5):
    np.testing.assert_allclose(got.numpy() if hasattr(got, "numpy") else got, want, rtol=rtol, atol=atol)


# ---- MultiHeadAttention ---------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq, tk", [(5, 5), (3, 6)])
def test_multi_head_attention_matches_the_formula(causal, tq, tk):
    q = np.random.randn(2, 3, tq, 4).astype(F32)
    k = np.random.randn(2, 3, tk, 4).astype(F32)
    v = np.random.randn(2, 3, tk, 4).astype(F32)
    layer = nn.MultiHeadAttention(causal=causal)
    assert list(layer.parameters()) == []
    result, probs = layer(ndl.Tensor(q), ndl.Tensor(k), ndl.Tensor(v))
    want, want_probs = ref_attention(q.astype(np.float64), k, v, causal)
    assert result.shape == (2, 3, tq, 4) and probs.shape == (2, 3, tq, tk)
    close(probs, want_probs)
    close(result, want)
    if causal:  # the masked entries are exactly zero, the diagonal (shifted by tk - tq) is kept
        assert np.all(probs.numpy()[..., 0, tk - tq + 1:] == 0) and np.all(probs.numpy()[..., -1, :] > 0)


def test_multi_head_attention_dropout_draws_one_mask_on_the_probabilities():
    q, k, v = (np.random.randn(2, 2, 4, 3).astype(F32) for _ in range(3))
    np.random.seed(7)
    result, probs = nn.MultiHeadAttention(dropout=0.3, causal=True)(ndl.Tensor(q), ndl.Tensor(k), ndl.Tensor(v))
    np.random.seed(7)
    want, want_probs = ref_attention(q.astype(np.float64), k, v, True, p=0.3)
    close(probs, want_probs)
    close(result, want)
    layer = nn.MultiHeadAttention(dropout=0.3)
    layer.eval()
    state = np.random.get_state()[1].copy()
    layer(ndl.Tensor(q), ndl.Tensor(k), ndl.Tensor(v))[0].numpy()
    assert np.array_equal(np.random.get_state()[1], state)  # eval mode draws nothing


def test_multi_head_attention_is_stable_for_large_scores():
    q = np.full((1, 1, 2, 2), 300.0, dtype=F32)
    result, probs = nn.MultiHeadAttention()(ndl.Tensor(q), ndl.Tensor(q), ndl.Tensor(q))
    assert np.all(np.isfinite(result.numpy()))
    close(probs, np.full((1, 1, 2, 2), 0.5))


def test_multi_head_attention_gradients():
    q, k, v = (ndl.Tensor(np.random.randn(1, 2, 3, 2), dtype="float64") for _ in range(3))
    layer = nn.MultiHeadAttention(causal=True)
    grad_check(lambda: layer(q, k, v)[0], [q, k, v])


def test_multi_head_attention_shape_errors():
    layer = nn.MultiHeadAttention()
    with pytest.raises(ndl.errors.ShapeError, match="MultiHeadAttention"):
        layer(ndl.Tensor(np.ones((2, 3, 4))), ndl.Tensor(np.ones((2, 3, 4))), ndl.Tensor(np.ones((2, 3, 4))))
    with pytest.raises(ndl.errors.ShapeError, match=r"\(1, 2, 3, 5\)"):
        layer(ndl.Tensor(np.ones((1, 2, 3, 4))), ndl.Tensor(np.ones((1, 2, 3, 5))), ndl.Tensor(np.ones((1, 2, 3, 4))))


# ---- AttentionLayer -------------------------------------------------------------------------
@pytest.mark.parametrize("causal, dropout", [(True, 0.0), (False, 0.0), (True, 0.25)])
def test_attention_layer_matches_the_reference(causal, dropout):
    B, T, D, H, Dh = 2, 4, 6, 2, 3
    q, k, v = (np.random.randn(B, T, D).astype(F32) for _ in range(3))
    np.random.seed(11)
    layer = nn.AttentionLayer(D, H, Dh, dropout=dropout, causal=causal)
    result = layer(ndl.Tensor(q), ndl.Tensor(k), ndl.Tensor(v))
    np.random.seed(11)
    params = draw_attention_layer(Draws(), D, H, Dh)
    want = ref_attention_layer(params, q.astype(np.float64), k, v, H, Dh, causal, p=dropout)
    assert result.shape == (B, T, D)
    close(result, want, rtol=1e-4, atol=1e-4)
    # parameters: three prenorms (ones, zeros), q, k, v projections, the output projection; no biases
    weights = [layer.q_projection.weight, layer.k_projection.weight, layer.v_projection.weight,
               layer.out_projection.weight]
    for got, drawn in zip(weights, params):
        close(got, drawn, rtol=1e-6, atol=1e-7)
    assert all(m.bias is None for m in (layer.q_projection, layer.k_projection, layer.v_projection,
                                        layer.out_projection))


def test_attention_layer_self_attention_and_feature_sizes():
    np.random.seed(3)
    layer = nn.AttentionLayer(4, 2, 5, k_features=3, v_features=6, out_features=7, causal=False)
    np.random.seed(3)
    d = Draws()
    wq, wk, wv, wo = d.kaiming(4, 10), d.kaiming(3, 10), d.kaiming(6, 10), d.kaiming(10, 7)
    q, k, v = np.random.randn(2, 3, 4), np.random.randn(2, 5, 3), np.random.randn(2, 5, 6)
    out = layer(ndl.Tensor(q), ndl.Tensor(k), ndl.Tensor(v))
    assert out.shape == (2, 3, 7)
    close(out, ref_attention_layer([wq, wk, wv, wo], q, k, v, 2, 5, False), rtol=1e-4, atol=1e-4)
    square = nn.AttentionLayer(4, 1, 4)
    x = np.random.randn(1, 3, 4)
    close(square(ndl.Tensor(x)), square(ndl.Tensor(x), ndl.Tensor(x), ndl.Tensor(x)).numpy(), rtol=1e-6)
    with pytest.raises(ndl.errors.ShapeError, match="k has 4 features, expected 3"):
        layer(ndl.Tensor(q), ndl.Tensor(q), ndl.Tensor(v))


def test_attention_layer_gradients():
    np.random.seed(5)
    layer = nn.AttentionLayer(4, 2, 2, causal=True, dtype="float64")
    x = ndl.Tensor(np.random.randn(1, 3, 4), dtype="float64")
    grad_check(lambda: layer(x), [x, layer.prenorm_k.weight])  # x reaches every projection


# ---- TransformerLayer and Transformer ---------------------------------------------------------
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_transformer_layer_matches_the_reference(dropout):
    B, T, D, H, Dh, hidden = 2, 3, 4, 2, 3, 5
    x = np.random.randn(B, T, D).astype(F32)
    np.random.seed(21)
    layer = nn.TransformerLayer(D, H, Dh, hidden, dropout=dropout, causal=True)
    out = layer(ndl.Tensor(x))
    np.random.seed(21)
    params = draw_transformer_layer(Draws(), D, H, Dh, hidden)
    want = ref_transformer_layer(params, x.astype(np.float64), H, Dh, True, p=dropout)
    close(out, want, rtol=1e-4, atol=1e-4)
    n_params = 4 * D * H * Dh + D * hidden + hidden + hidden * D + D + 4 * 2 * D  # + four LayerNorms
    assert sum(int(np.prod(p.shape)) for p in layer.parameters()) == n_params


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_matches_the_reference(batch_first):
    T, B, D, H, Dh, hidden, layers, seq = 4, 2, 4, 2, 2, 6, 2, 7
    x = np.random.randn(T, B, D).astype(F32)
    np.random.seed(33)
    model = nn.Transformer(D, hidden, layers, num_head=H, dim_head=Dh, causal=True, batch_first=batch_first,
                           sequence_len=seq)
    inp = x.transpose(1, 0, 2) if batch_first else x
    out, h = model(ndl.Tensor(inp))
    np.random.seed(33)
    pos = np.random.randn(seq, D).astype(F32).astype(np.float64)  # the positional Embedding comes first
    params = [draw_transformer_layer(Draws(), D, H, Dh, hidden) for _ in range(layers)]
    y = x.transpose(1, 0, 2).astype(np.float64) + pos[:T]
    for p in params:
        y = ref_transformer_layer(p, y, H, Dh, True)
    want = y if batch_first else y.transpose(1, 0, 2)
    assert out.shape == inp.shape and h.shape == inp.shape
    close(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(h.numpy(), np.zeros(inp.shape))


def test_transformer_gradients_and_length_limit():
    np.random.seed(2)
    model = nn.Transformer(2, 3, 1, num_head=1, dim_head=2, sequence_len=3, dtype="float64")
    x = ndl.Tensor(np.random.randn(3, 1, 2), dtype="float64")
    grad_check(lambda: model(x)[0], [x, model.pos_embedding.weight])
    with pytest.raises(ndl.errors.ShapeError, match="sequence_len 3"):
        model(ndl.Tensor(np.random.randn(4, 1, 2), dtype="float64"))
