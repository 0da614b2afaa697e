"""Sequence layers (course hw4): Embedding, RNNCell/RNN, LSTMCell/LSTM.

Layouts follow the course (and PyTorch without batch_first): inputs are
(seq_len, batch, features), hidden states (num_layers, batch, hidden).  Weights are
stored input-major, W_ih (input, hidden) and W_hh (hidden, hidden) (4 * hidden for
the LSTM, gates in the order i, f, g, o), so a step is `x @ W_ih + h @ W_hh`.
The recurrences unroll over time with ops.split / ops.stack.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from .. import init, ops
from ..autograd import Tensor
from ..errors import ArgumentError, IndexingError, ShapeError, fmt_shape
from .nn_basic import check_features, check_ndim, optional_bias
from ..engine.realize import realize_later
from .nn_module import Module, Parameter

_NONLINEARITIES = {"tanh": ops.tanh, "relu": ops.relu}


def _uniform(bound: float, *shape, device, dtype) -> Parameter:
    return Parameter(init.rand(*shape, low=-bound, high=bound, device=device, dtype=dtype, requires_grad=True))


def _check_state(module: str, h: Tensor, expected: tuple, what: str) -> None:
    if tuple(h.shape) != expected:
        raise ShapeError(f"{module}: {what} must have shape {fmt_shape(expected)}, got {fmt_shape(h.shape)}")


def _state_pair(name: str, h) -> tuple:
    """An LSTM's (h, c) state, or an error naming the module (one Tensor alone was
    unpacked along its first axis, or failed with "not enough values to unpack")."""
    if not isinstance(h, (tuple, list)) or len(h) != 2:
        raise ArgumentError(f"{name}: the state must be a pair (h, c) of Tensors or None, got "
                            f"{type(h).__name__}{' of shape ' + fmt_shape(h.shape) if isinstance(h, Tensor) else ''}")
    return tuple(h)


def _unstack(x: Tensor, axis: int = 0) -> List[Tensor]:
    """The slices of x along `axis` (dropped), as a list of tensors: basic-index views,
    each with a one-piece gradient (split's tuple gradient would pad every slice's
    adjoint with zeros for all the others, n^2 tensors for n slices)."""
    lead = (slice(None),) * axis
    return [ops.getitem(x, lead + (i,)) for i in range(x.shape[axis])]


class Embedding(Module):
    """A lookup table: integer ids (as floats or ints) of any shape -> vectors, a gather
    of the weight's rows (its gradient is a scatter_add of the rows' gradients).  Ids
    already computed are checked; ids still pending are clamped by the kernel."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = Parameter(init.randn(num_embeddings, embedding_dim, device=device, dtype=dtype,
                                           requires_grad=True))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

    def forward(self, x: Tensor) -> Tensor:
        try:
            return ops.gather(self.weight, x, 0)
        except IndexingError as e:
            raise IndexingError(f"Embedding({self.num_embeddings}, {self.embedding_dim}): {e}") from None


class RNNCell(Module):
    """h' = f(x @ W_ih + b_ih + h @ W_hh + b_hh), f = tanh or relu; every weight
    ~ U(-1/sqrt(hidden), 1/sqrt(hidden))."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        if nonlinearity not in _NONLINEARITIES:
            raise ArgumentError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.nonlinearity = nonlinearity
        bound = math.sqrt(1 / hidden_size)
        self.W_ih = _uniform(bound, input_size, hidden_size, device=device, dtype=dtype)
        self.W_hh = _uniform(bound, hidden_size, hidden_size, device=device, dtype=dtype)
        self.bias_ih = _uniform(bound, hidden_size, device=device, dtype=dtype) if bias else None
        self.bias_hh = _uniform(bound, hidden_size, device=device, dtype=dtype) if bias else None

    def forward(self, X: Tensor, h: Optional[Tensor] = None) -> Tensor:
        check_ndim("RNNCell", X, 2, "(batch, input_size)")
        check_features("RNNCell", X, self.input_size)
        bs = X.shape[0]
        if h is None:
            h = init.zeros(bs, self.hidden_size, device=X.device, dtype=X.dtype)
        _check_state("RNNCell", h, (bs, self.hidden_size), "h")
        out = optional_bias(self.bias_ih, X @ self.W_ih) + optional_bias(self.bias_hh, h @ self.W_hh)
        return _NONLINEARITIES[self.nonlinearity](out)


class LSTMCell(Module):
    """One LSTM step: gates = x @ W_ih + b_ih + h @ W_hh + b_hh split into i, f, g, o;
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g); h' = sigmoid(o) * tanh(c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        bound = math.sqrt(1 / hidden_size)
        self.W_ih = _uniform(bound, input_size, 4 * hidden_size, device=device, dtype=dtype)
        self.W_hh = _uniform(bound, hidden_size, 4 * hidden_size, device=device, dtype=dtype)
        self.bias_ih = _uniform(bound, 4 * hidden_size, device=device, dtype=dtype) if bias else None
        self.bias_hh = _uniform(bound, 4 * hidden_size, device=device, dtype=dtype) if bias else None

    def forward(self, X: Tensor, h: Optional[Tuple[Tensor, Tensor]] = None) -> Tuple[Tensor, Tensor]:
        check_ndim("LSTMCell", X, 2, "(batch, input_size)")
        check_features("LSTMCell", X, self.input_size)
        bs, hidden = X.shape[0], self.hidden_size
        h0, c0 = (None, None) if h is None else _state_pair(type(self).__name__, h)
        h0 = init.zeros(bs, hidden, device=X.device, dtype=X.dtype) if h0 is None else h0
        c0 = init.zeros(bs, hidden, device=X.device, dtype=X.dtype) if c0 is None else c0
        _check_state("LSTMCell", h0, (bs, hidden), "h")
        _check_state("LSTMCell", c0, (bs, hidden), "c")
        gates = optional_bias(self.bias_ih, X @ self.W_ih) + optional_bias(self.bias_hh, h0 @ self.W_hh)
        return ops.lstm_cell(gates, c0)  # (two fused ops: the gates' 13 ops, 25 backward, were built every step)


class _Recurrent(Module):
    """Shared checks of RNN and LSTM: X (seq_len, batch, input_size) and states
    (num_layers, batch, hidden)."""

    def _check_input(self, X: Tensor) -> Tuple[int, int]:
        name = type(self).__name__
        check_ndim(name, X, 3, "(seq_len, batch, input_size)")
        check_features(name, X, self.input_size)
        return X.shape[0], X.shape[1]

    def _initial(self, h: Optional[Tensor], X: Tensor, what: str) -> List[Tensor]:
        """Per-layer initial states: the slices of h, or zeros."""
        bs = X.shape[1]
        if h is None:
            return [init.zeros(bs, self.hidden_size, device=X.device, dtype=X.dtype)] * self.num_layers
        _check_state(type(self).__name__, h, (self.num_layers, bs, self.hidden_size), what)
        return _unstack(h)


class RNN(_Recurrent):
    """A stack of `num_layers` RNNCells unrolled over time.
    forward(X, h0=None) -> (output (seq_len, batch, hidden) of the last layer,
    h_n (num_layers, batch, hidden))."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype: str = "float32") -> None:
        super().__init__()
        if num_layers < 1:
            raise ArgumentError(f"RNN: num_layers must be at least 1, got {num_layers}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.rnn_cells = [RNNCell(input_size if k == 0 else hidden_size, hidden_size, bias, nonlinearity,
                                  device=device, dtype=dtype) for k in range(num_layers)]

    def forward(self, X: Tensor, h0: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        self._check_input(X)
        states = self._initial(h0, X, "h0")
        inputs = _unstack(X)
        h_n = []
        for cell, h in zip(self.rnn_cells, states):
            for t, x_t in enumerate(inputs):
                h = cell(x_t, h)
                inputs[t] = h
            h_n.append(h)
        return ops.stack(inputs, 0), _carried_state(ops.stack(h_n, 0))


class LSTM(_Recurrent):
    """A stack of `num_layers` LSTMCells unrolled over time.
    forward(X, h=None) with h = (h0, c0) -> (output, (h_n, c_n))."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        if num_layers < 1:
            raise ArgumentError(f"LSTM: num_layers must be at least 1, got {num_layers}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.lstm_cells = [LSTMCell(input_size if k == 0 else hidden_size, hidden_size, bias,
                                    device=device, dtype=dtype) for k in range(num_layers)]

    def forward(self, X: Tensor, h: Optional[Tuple[Tensor, Tensor]] = None) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        self._check_input(X)
        h0, c0 = (None, None) if h is None else _state_pair(type(self).__name__, h)
        hs, cs = self._initial(h0, X, "h0"), self._initial(c0, X, "c0")
        inputs = _unstack(X)
        h_n, c_n = [], []
        for cell, h_t, c_t in zip(self.lstm_cells, hs, cs):
            for t, x_t in enumerate(inputs):
                h_t, c_t = cell(x_t, (h_t, c_t))
                inputs[t] = h_t
            h_n.append(h_t)
            c_n.append(c_t)
        return ops.stack(inputs, 0), (_carried_state(ops.stack(h_n, 0)), _carried_state(ops.stack(c_n, 0)))


def _carried_state(h: Tensor) -> Tensor:
    """The final hidden state is usually carried (detached) into the next truncated-BPTT
    segment.  In lazy mode have it computed with the step's schedule, if it is still
    alive then, so that detaching it after `opt.step()` finds a buffer instead of
    recomputing this segment's forward pass with the next step."""
    realize_later(h)
    return h
