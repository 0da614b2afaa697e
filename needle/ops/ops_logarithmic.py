"""Numerically stable log-sum-exp and log-softmax."""
from __future__ import annotations

from .. import array_api as A
from ..autograd import TensorOp
from ..errors import ShapeError, fmt_shape
from ..shapes import normalize_axes
from .ops_elementwise import subtract
from .ops_mathematic import broadcast_to, exp, log, reshape, summation


def _stable_max(z, axes):
    """max over axes with keepdims, replaced by 0 where it is not finite, so that
    z - max never makes inf - inf (all -inf rows give -inf, as they should); 0 over an
    empty axis (numpy's max of nothing raises; the sum of nothing is 0 either way)."""
    if any(z.shape[a] == 0 for a in axes):
        return A.zeros(tuple(1 if i in axes else s for i, s in enumerate(z.shape)), z)
    m = A.amax(z, axis=axes, keepdims=True)
    finite = (m - m) == 0  # false for inf and nan
    return A.where(finite, m, A.zeros(m.shape, m))


def _one_schedule(op, cls, static, arrays):
    """`op._forward(*arrays)`'s result, in eager mode as one schedule (A.fused) keyed by
    `cls` and `static`, the one attribute its code reads; a subclass of `cls` may read
    others, which the key would leave out, so it runs op by op."""
    if type(op) is not cls:
        return op._forward(*arrays)[0]
    return A.fused((cls, repr(static)), op._forward, arrays)[0]


class StableMax(TensorOp):
    """The max over `axes` (kept as size 1), 0 where not finite: a constant shift."""

    def __init__(self, axes: tuple):
        self.axes = axes

    def compute(self, z):
        return _stable_max(z, self.axes)

    def gradient(self, out_grad, node):
        raise NotImplementedError("StableMax is a constant shift; apply it to detached tensors")


class LogSumExp(TensorOp):
    """log(sum(exp(z), axes)), stable for inputs of 1e10."""

    def __init__(self, axes=None):
        self.axes = axes

    def compute(self, z):
        return _one_schedule(self, LogSumExp, self.axes, (z,))

    def _forward(self, z) -> tuple:
        log_total, m, kept = _shifted_log_total(z, self.axes)
        return (A.reshape(log_total + m, kept),)

    def gradient(self, out_grad, node):
        return _logsumexp_gradient(out_grad, node.inputs[0], self.axes)


def _shifted_log_total(z, axes):
    """(log(sum(exp(z - m))) and m over `axes`, both kept as size 1, the reduced shape):
    m the stable max, so exp cannot overflow.  Over an empty axis, log(0) = -inf, as torch."""
    axes = normalize_axes("logsumexp", axes, z.ndim, z.shape)
    m = _stable_max(z, axes)
    log_total = A.log(A.summation(A.exp(z - A.broadcast_to(m, z.shape)), axis=axes, keepdims=True))
    return log_total, m, tuple(s for i, s in enumerate(z.shape) if i not in axes)


def _logsumexp_gradient(out_grad, z, axes):
    """out_grad (of the reduced shape) times softmax(z) over `axes`."""
    axes = normalize_axes("logsumexp", axes, len(z.shape), z.shape)
    kept = tuple(1 if i in axes else s for i, s in enumerate(z.shape))
    # softmax from the shifted inputs, not exp(z - node): in float32, node = 1e10 + log 2
    # rounds to 1e10 and exp(z - node) would be 1 instead of 1/2.  The shift is a
    # constant (softmax does not depend on it), so higher-order gradients stay right.
    # exp(shifted - log(sum(exp(shifted)))) rather than exp(shifted) / sum: nothing
    # the size of z is read twice, so the backward is one kernel that sums and then
    # writes (exp(shifted) / sum had its own kernel store exp(shifted) for the sum's
    # and the division's kernels).  `subtract`, not `-` (add and negate, the course's
    # form): then `shifted` and its sum are the forward's own nodes, which a lazy graph
    # holding both computes once (a cross-entropy's loss and gradient, one sum of exps)
    shifted = subtract(z, broadcast_to(StableMax(axes)(z.detach()), z.shape))
    log_total = log(summation(exp(shifted), axes, keepdims=True))
    softmax = exp(shifted - broadcast_to(log_total, z.shape))
    return broadcast_to(reshape(out_grad, kept), z.shape) * softmax


def logsumexp(a, axes=None):
    return LogSumExp(axes=axes)(a)


class LogSumExpLess(TensorOp):
    """logsumexp(z) - b over `axes` (b of the reduced shape), as log(sum(exp(z - m))) +
    (m - b): logsumexp(z) is not rounded to an ulp of the largest z before b is taken
    away (a cross-entropy near 0 keeps its digits).  The gradient is logsumexp's, and -1
    for b."""

    def __init__(self, axes):
        self.axes = axes

    def compute(self, z, b):
        return _one_schedule(self, LogSumExpLess, self.axes, (z, b))

    def _forward(self, z, b) -> tuple:
        log_total, m, kept = _shifted_log_total(z, self.axes)
        return (A.reshape(log_total, kept) + (A.reshape(m, kept) - b),)

    def gradient(self, out_grad, node):
        return _logsumexp_gradient(out_grad, node.inputs[0], self.axes), -out_grad


def logsumexp_less(z, b, axes):
    kept = tuple(s for i, s in enumerate(z.shape) if i not in normalize_axes("logsumexp", axes, len(z.shape), z.shape))
    if tuple(b.shape) != kept:
        raise ShapeError(f"logsumexp_less: b of shape {fmt_shape(b.shape)} must have the reduced shape "
                         f"{fmt_shape(kept)} of z {fmt_shape(z.shape)} over axes {axes}")
    return LogSumExpLess(axes)(z, b)


class LogSoftmax(TensorOp):
    """z - logsumexp(z) over the last axis (course: 2-d inputs, axis 1)."""

    def __init__(self, axis: int = -1):
        self.axis = axis

    def compute(self, z):
        return _one_schedule(self, LogSoftmax, self.axis, (z,))

    def _forward(self, z) -> tuple:
        axes = normalize_axes("logsoftmax", self.axis, z.ndim, z.shape)
        m = _stable_max(z, axes)
        shifted = z - A.broadcast_to(m, z.shape)
        lse = A.log(A.summation(A.exp(shifted), axis=axes, keepdims=True))
        return (shifted - A.broadcast_to(lse, z.shape),)

    def gradient(self, out_grad, node):
        axes = normalize_axes("logsoftmax", self.axis, len(node.shape), node.shape)
        softmax = exp(node)
        total = broadcast_to(summation(out_grad, axes, keepdims=True), node.shape)
        return out_grad - softmax * total


def logsoftmax(a, axis=-1):
    return LogSoftmax(axis)(a)
