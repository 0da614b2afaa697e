"""The course's Transformer family (hw4_extra): MultiHeadAttention, AttentionLayer,
TransformerLayer, Transformer.

Seeded course code must reproduce the course's values, so three orders are fixed
(COURSE.md, "hw4_extra"): parameters are created in the course's order (the draws
from numpy's global RNG follow it), Dropout masks are drawn in the course's forward
order, and the arithmetic keeps the course's order (q·kᵀ first, then / sqrt(D); the
softmax subtracts the row max; pre-norm on each input before its projection).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from .. import init, ops
from ..autograd import Tensor
from ..errors import ShapeError, fmt_shape
from .nn_basic import Dropout, LayerNorm1d, Linear, ReLU, Sequential
from .nn_module import Module
from .nn_sequence import Embedding


def _check_ndim(module: str, x: Tensor, ndim: int, what: str) -> None:
    if len(x.shape) != ndim:
        raise ShapeError(f"{module}: expects {what}, got shape {fmt_shape(x.shape)}")


class MultiHeadAttention(Module):
    """softmax(q·kᵀ / sqrt(D) [+ causal mask]) · v over (B, H, T, D) inputs; no parameters.

    Returns (result (B, H, Tq, Dv), probs (B, H, Tq, Tk)), probs after dropout; v's dim Dv
    may differ from q's and k's D (torch's scaled_dot_product_attention)."""

    def __init__(self, *, dropout: float = 0.0, causal: bool = False, device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.device = device
        self.dtype = dtype
        self.causal = causal
        self.dropout = Dropout(dropout)

    @staticmethod
    def create_causal_mask(i: int, j: int, device=None, dtype: str = "float32") -> Tensor:
        """(1, 1, i, j): -float32max where key index > query index + (j - i), else 0."""
        mask = -np.finfo(np.float32).max * np.triu(np.ones((1, 1, i, j), dtype=np.float32), j - i + 1)
        return Tensor(mask, device=device, dtype=dtype, requires_grad=False)

    @staticmethod
    def softmax(logit: Tensor) -> Tensor:
        """Softmax over the last axis, the row max (a constant) subtracted first."""
        kept = tuple(logit.shape[:-1]) + (1,)
        last = len(logit.shape) - 1
        max_val = ops.max(logit, (last,)).detach().reshape(kept).broadcast_to(logit.shape)
        probs = ops.exp(logit - max_val)
        denom = probs.sum((last,)).reshape(kept).broadcast_to(logit.shape)
        return probs / denom

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        for name, x in (("q", q), ("k", k), ("v", v)):
            _check_ndim("MultiHeadAttention", x, 4, f"{name} of shape (batch, heads, length, dim)")
        batch, heads, q_len, q_dim = q.shape
        kb, kh, kv_len, k_dim = k.shape
        if (kb, kh, k_dim) != (batch, heads, q_dim) or v.shape[:3] != (batch, heads, kv_len):
            raise ShapeError(f"MultiHeadAttention: q {fmt_shape(q.shape)}, k {fmt_shape(k.shape)} and "
                             f"v {fmt_shape(v.shape)} must share batch and heads, q and k their dim, k and v "
                             "their length")
        scores = (q @ ops.transpose(k, (2, 3))) / math.sqrt(q_dim)
        if self.causal:
            mask = self.create_causal_mask(q_len, kv_len, device=q.device, dtype=q.dtype)
            scores = scores + mask.broadcast_to(scores.shape)
        probs = self.dropout(self.softmax(scores))
        return probs @ v, probs


class AttentionLayer(Module):
    """Pre-norm multi-head attention: LayerNorm and a projection (no bias) for each of
    q, k, v, split into `num_head` heads of `dim_head`, attention, merge, output projection.
    (B, Tq, q_features) [, (B, Tk, k_features), (B, Tk, v_features)] -> (B, Tq, out_features)."""

    def __init__(self, q_features: int, num_head: int, dim_head: int, *, k_features: Optional[int] = None,
                 v_features: Optional[int] = None, out_features: Optional[int] = None, dropout: float = 0.0,
                 causal: bool = True, device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.device = device
        self.dtype = dtype
        k_features = q_features if k_features is None else k_features
        v_features = q_features if v_features is None else v_features
        out_features = q_features if out_features is None else out_features
        self.q_features, self.k_features, self.v_features = q_features, k_features, v_features
        self.out_features = out_features
        self.num_head = num_head
        self.dim_head = dim_head
        inner = num_head * dim_head
        self.prenorm_q = LayerNorm1d(q_features, device=device, dtype=dtype)
        self.prenorm_k = LayerNorm1d(k_features, device=device, dtype=dtype)
        self.prenorm_v = LayerNorm1d(v_features, device=device, dtype=dtype)
        self.q_projection = Linear(q_features, inner, bias=False, device=device, dtype=dtype)
        self.k_projection = Linear(k_features, inner, bias=False, device=device, dtype=dtype)
        self.v_projection = Linear(v_features, inner, bias=False, device=device, dtype=dtype)
        self.attn = MultiHeadAttention(dropout=dropout, causal=causal, device=device, dtype=dtype)
        self.out_projection = Linear(inner, out_features, bias=False, device=device, dtype=dtype)
        self.probs: Optional[Tensor] = None

    def _heads(self, x: Tensor, norm: LayerNorm1d, projection: Linear) -> Tensor:
        """(B, T, F) -> norm, project -> (B, H, T, Dh)."""
        batch, length, features = x.shape
        y = projection(norm(x.reshape((batch * length, features))))
        return ops.transpose(y.reshape((batch, length, self.num_head, self.dim_head)), (1, 2))

    def forward(self, q: Tensor, k: Optional[Tensor] = None, v: Optional[Tensor] = None) -> Tensor:
        k = q if k is None else k
        v = q if v is None else v
        for name, x, features in (("q", q, self.q_features), ("k", k, self.k_features), ("v", v, self.v_features)):
            _check_ndim("AttentionLayer", x, 3, f"{name} of shape (batch, length, {features})")
            if x.shape[2] != features:
                raise ShapeError(f"AttentionLayer: {name} has {x.shape[2]} features, expected {features} "
                                 f"(shape {fmt_shape(x.shape)})")
        batch, q_len, _ = q.shape
        result, self.probs = self.attn(self._heads(q, self.prenorm_q, self.q_projection),
                                       self._heads(k, self.prenorm_k, self.k_projection),
                                       self._heads(v, self.prenorm_v, self.v_projection))
        merged = ops.transpose(result, (1, 2)).reshape((batch * q_len, self.num_head * self.dim_head))
        return self.out_projection(merged).reshape((batch, q_len, self.out_features))


class TransformerLayer(Module):
    """x + Dropout(Attention(x)), then x + Dropout(Linear2(Dropout(ReLU(Linear1(LayerNorm(x)))))),
    on (B, T, q_features)."""

    def __init__(self, q_features: int, num_head: int, dim_head: int, hidden_size: int, *, dropout: float = 0.0,
                 causal: bool = True, device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.device = device
        self.dtype = dtype
        self.q_features = q_features
        self.attention = AttentionLayer(q_features, num_head, dim_head, dropout=dropout, causal=causal,
                                        device=device, dtype=dtype)
        self.linear1 = Linear(q_features, hidden_size, device=device, dtype=dtype)
        self.linear2 = Linear(hidden_size, q_features, device=device, dtype=dtype)
        self.layernorm = LayerNorm1d(q_features, device=device, dtype=dtype)
        self.relu = ReLU()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        _check_ndim("TransformerLayer", x, 3, f"(batch, length, {self.q_features})")
        batch, length, features = x.shape
        x = x + self.dropout(self.attention(x))
        y = self.layernorm(x.reshape((batch * length, features)))
        y = self.dropout(self.relu(self.linear1(y)))
        y = self.dropout(self.linear2(y))
        return x + y.reshape((batch, length, features))


class Transformer(Module):
    """A learned positional embedding plus `num_layers` TransformerLayers.

    forward(x, h=None): x (T, B, D), or (B, T, D) with batch_first -> (output of x's
    layout, zeros like it); `h` is accepted for the RNN/LSTM interface and ignored."""

    def __init__(self, embedding_size: int, hidden_size: int, num_layers: int, *, num_head: int = 8,
                 dim_head: int = 32, dropout: float = 0.0, causal: bool = True, device=None,
                 dtype: str = "float32", batch_first: bool = False, sequence_len: int = 2048) -> None:
        super().__init__()
        self.device = device
        self.dtype = dtype
        self.batch_first = batch_first
        self.embedding_size = embedding_size
        self.sequence_len = sequence_len
        self.pos_embedding = Embedding(sequence_len, embedding_size, device=device, dtype=dtype)
        self.layers = Sequential(*[TransformerLayer(embedding_size, num_head, dim_head, hidden_size, dropout=dropout,
                                                    causal=causal, device=device, dtype=dtype)
                                   for _ in range(num_layers)])

    def forward(self, x: Tensor, h=None) -> Tuple[Tensor, Tensor]:
        _check_ndim("Transformer", x, 3, "(length, batch, embedding)" if not self.batch_first
                    else "(batch, length, embedding)")
        if not self.batch_first:
            x = ops.transpose(x, (0, 1))
        batch, length, features = x.shape
        if features != self.embedding_size:
            raise ShapeError(f"Transformer: expects embeddings of size embedding_size={self.embedding_size}, got "
                             f"{features} (shape {fmt_shape(x.shape)})")
        if length > self.sequence_len:
            raise ShapeError(f"Transformer: sequence of length {length} is longer than sequence_len "
                             f"{self.sequence_len} (shape {fmt_shape(x.shape)})")
        positions = np.arange(length, dtype=np.float32).reshape(1, length)
        pos = self.pos_embedding(Tensor(positions, device=x.device, dtype=x.dtype, requires_grad=False))
        x = self.layers(x + pos.broadcast_to((batch, length, features)))
        if not self.batch_first:
            x = ops.transpose(x, (0, 1))
        return x, init.zeros_like(x)
