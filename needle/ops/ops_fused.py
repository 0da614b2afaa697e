"""Fused ops: a few ops' worth of array code as one op, with one op per gradient.

In lazy mode every op of a step is built again in Python at every step, and an
LSTM cell's gates (slices, sigmoids, tanhs, products) cost about 13 ops forward and
25 backward (each slice's gradient a scatter, the four summed).  A fused op writes
the same arithmetic on arrays (`forward`; the kernels are the same), its gradient
with respect to input k is one op (`vjp`), and that op's own gradient (second order)
differentiates `reference`, the same function built from ops, with backward.vjp, so
higher derivatives stay exact.
"""
from __future__ import annotations

from .. import array_api as A
from ..autograd import TensorOp
from ..backward import vjp
from ..errors import ShapeError, fmt_shape
from ..ir.lazy import as_lazy
from .ops_elementwise import sigmoid, tanh
from .ops_movement import getitem
from .ops_reduce import broadcast_to, matmul
from .ops_shape import reshape


class Fused(TensorOp):
    """Subclasses define `forward(*arrays)`, `vjp(k, g, *arrays)` (the gradient with
    respect to input k given g = dL/d out, on arrays) and `reference(*tensors)`, and
    may define `values(*arrays)`: intermediate values both need, which `forward` takes
    with `keep` and `vjp` with `kept` (in lazy mode the same graph nodes: nothing is
    computed twice; an instance that computed twice computes them again)."""

    saved = None
    _calls = 0
    #: the attributes `forward` reads besides its arrays (None: unknown, so it runs op
    #: by op in eager mode); with them the forward is one schedule there (A.fused).  Read
    #: from the class itself only: a subclass that names none may read attributes of its
    #: own, which its parent's names would leave out of the key
    static = None

    def compute(self, *arrays):
        self._calls += 1
        static = type(self).__dict__.get("static")
        if static is None:
            return self.forward(*arrays)
        key = (type(self), *[repr(getattr(self, name)) for name in static])  # (-0.0 is not 0.0)
        result, *saved = A.fused(key, self._forward_and_saved, arrays)
        self.saved = tuple(saved) if saved else None
        return result

    def _forward_and_saved(self, *arrays) -> tuple:
        self.saved = None
        result = self.forward(*arrays)
        return (result, *self.saved) if self.saved else (result,)

    def values(self, *arrays) -> tuple:
        return ()

    def keep(self, *arrays) -> tuple:
        self.saved = self.values(*arrays)
        return self.saved

    def kept(self, *arrays) -> tuple:
        """The values `forward` kept when they are this call's, else computed again.  In a
        pass built lazily over an eager forward (eager mode's backward), its NDArrays as
        graph leaves: arithmetic on them alone (an LSTM gate's s * (1 - s)) had run as
        eager kernels, several per cell in the LSTM's backward."""
        if self._calls != 1 or self.saved is None:
            return self.values(*arrays)
        if getattr(arrays[0], "is_lazy", False):
            return tuple([as_lazy(v) for v in self.saved])
        return self.saved

    def gradient(self, out_grad, node):
        return tuple(FusedGradient(self, k)(out_grad, *node.inputs) if x.requires_grad else None
                     for k, x in enumerate(node.inputs))


class FusedGradient(TensorOp):
    """The gradient of a Fused op with respect to its input k; inputs (g, *the op's inputs)."""

    def __init__(self, fused: Fused, k: int):
        self.fused, self.k = fused, k

    @property
    def name(self) -> str:
        return f"d{self.fused.name}"  # (dumps and errors: `dStandardize`, not `FusedGradient`)

    def compute(self, g, *arrays):
        return self.fused.vjp(self.k, g, *arrays)

    def gradient(self, out_grad, node):
        g, *inputs = node.inputs
        # this op's value, from ops, on a stand-in of each input (a no-op reshape: one
        # tensor passed as two inputs still has a partial derivative for each), every
        # stand-in a stop, so the other inputs are held fixed
        stand_ins = [reshape(x, x.shape) for x in inputs]
        first = vjp(self.fused.reference(*stand_ins), g, stand_ins)[self.k]
        if first is None:
            return (None,) * len(node.inputs)
        return tuple(vjp(first, out_grad, [g, *stand_ins]))  # (a stand-in's gradient is its input's)


# ---- a layer's affine parts ---------------------------------------------------------------------
class MatMulBias(Fused):
    """x @ w + b for x (rows, k), w (k, n), b (n,) or (1, n): a Linear layer, one op and
    three gradients instead of matmul, broadcast and add and their gradients."""

    static = ()

    def forward(self, x, w, b):
        if len(x.shape) != 2 or len(w.shape) != 2 or x.shape[1] != w.shape[0] or b.shape[-1] != w.shape[1] \
                or len(b.shape) > 2 or (len(b.shape) == 2 and b.shape[0] != 1):
            raise ShapeError(f"matmul_bias: expects x (rows, k), w (k, n), b (n,) or (1, n), got "
                             f"{fmt_shape(x.shape)}, {fmt_shape(w.shape)}, {fmt_shape(b.shape)}")
        y = A.matmul(x, w)
        return y + A.broadcast_to(b, y.shape)

    def vjp(self, k, g, x, w, b):
        if k == 0:
            return A.matmul(g, A.swapaxes(w, 0, 1))
        if k == 1:
            return A.matmul(A.swapaxes(x, 0, 1), g)
        return A.summation(g, axis=(0,), keepdims=len(b.shape) == 2)

    def reference(self, x, w, b):
        y = matmul(x, w)
        return y + broadcast_to(b, y.shape)


class ScaleShift(Fused):
    """x * w + b with w and b (n,) along the last axis of x: a norm layer's affine part."""

    static = ()

    def forward(self, x, w, b):
        n = x.shape[-1] if len(x.shape) else None
        if tuple(w.shape) != (n,) or tuple(b.shape) != (n,):
            raise ShapeError(f"scale_shift: expects w and b of shape ({n},) for x {fmt_shape(x.shape)}, got "
                             f"{fmt_shape(w.shape)} and {fmt_shape(b.shape)}")
        return x * A.broadcast_to(w, x.shape) + A.broadcast_to(b, x.shape)

    def vjp(self, k, g, x, w, b):
        if k == 0:
            return g * A.broadcast_to(w, x.shape)
        lead = tuple(range(len(x.shape) - 1))
        return A.summation(g * x if k == 1 else g, axis=lead) if lead else (g * x if k == 1 else g)

    def reference(self, x, w, b):
        return x * broadcast_to(w, x.shape) + broadcast_to(b, x.shape)


def matmul_bias(x, w, b):
    return MatMulBias()(x, w, b)


def scale_shift(x, w, b):
    return ScaleShift()(x, w, b)


# ---- the LSTM cell: gates (batch, 4 hidden) in PyTorch's order i, f, g, o ---------------------------
def _blocks(gates):
    if len(gates.shape) != 2 or gates.shape[1] % 4:
        raise ShapeError(f"lstm cell: gates must be (batch, 4 * hidden), got {fmt_shape(gates.shape)}")
    n = gates.shape[1] // 4
    return [gates[:, j * n:(j + 1) * n] for j in range(4)]


def _gate_blocks(gates, blocks: dict):
    """A (batch, 4 hidden) gradient from some of its four blocks (the others zero): the
    blocks given, a run of neighbours here, joined and padded with zeros (one node each,
    where a zero block was a node of its own and the join one more)."""
    n, first, last = gates.shape[1] // 4, min(blocks), max(blocks)
    if sorted(blocks) != list(range(first, last + 1)):
        return A.concatenate([blocks[j] if j in blocks else A.zeros((gates.shape[0], n), gates)
                              for j in range(4)], 1)
    run = [blocks[j] for j in range(first, last + 1)]
    joined = run[0] if len(run) == 1 else A.concatenate(run, 1)
    return A.pad(joined, ((0, 0), (first * n, (3 - last) * n)))


class LSTMCellState(Fused):
    """c = sigmoid(f) * c0 + sigmoid(i) * tanh(g), from the gates and c0."""

    static = ()

    def values(self, gates, c0):
        i, f, g, _ = _blocks(gates)
        return A.sigmoid(i), A.sigmoid(f), A.tanh(g)

    def forward(self, gates, c0):
        si, sf, tg = self.keep(gates, c0)
        if tuple(c0.shape) != tuple(si.shape):
            raise ShapeError(f"lstm cell: c0 {fmt_shape(c0.shape)} does not match the gates' "
                             f"{fmt_shape(gates.shape)}")
        return sf * c0 + si * tg

    def vjp(self, k, dc, gates, c0):
        si, sf, tg = self.kept(gates, c0)
        if k == 1:
            return dc * sf
        return _gate_blocks(gates, {0: dc * tg * (si * (1 - si)), 1: dc * c0 * (sf * (1 - sf)),
                                    2: dc * si * (1 - tg * tg)})

    def reference(self, gates, c0):
        n = gates.shape[1] // 4
        i, f, g = (getitem(gates, (slice(None), slice(j * n, (j + 1) * n))) for j in range(3))
        return sigmoid(f) * c0 + sigmoid(i) * tanh(g)


class LSTMCellOutput(Fused):
    """h = sigmoid(o) * tanh(c), from the gates and the new cell state c."""

    static = ()

    def values(self, gates, c):
        o = _blocks(gates)[3]
        if tuple(c.shape) != tuple(o.shape):
            raise ShapeError(f"lstm cell: c {fmt_shape(c.shape)} does not match the gates' {fmt_shape(gates.shape)}")
        return A.sigmoid(o), A.tanh(c)

    def forward(self, gates, c):
        so, tc = self.keep(gates, c)
        return so * tc

    def vjp(self, k, dh, gates, c):
        so, tc = self.kept(gates, c)
        if k == 1:
            return dh * so * (1 - tc * tc)
        return _gate_blocks(gates, {3: dh * tc * (so * (1 - so))})

    def reference(self, gates, c):
        n = gates.shape[1] // 4
        return sigmoid(getitem(gates, (slice(None), slice(3 * n, 4 * n)))) * tanh(c)


def lstm_cell(gates, c0):
    """(h, c) of an LSTM cell from its gates (batch, 4 hidden; order i, f, g, o) and c0."""
    c = LSTMCellState()(gates, c0)
    return LSTMCellOutput()(gates, c), c
