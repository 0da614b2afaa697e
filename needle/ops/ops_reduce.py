"""Broadcasting and its adjoint, reductions, and matmul.

`broadcast_to` and `summation` are each other's gradient, and `unbroadcast` (the
sum over broadcast axes) is what every broadcasting op's gradient needs.
"""
from __future__ import annotations

import numbers

from .. import array_api as A
from ..autograd import Tensor, TensorOp
from ..dtypes import dtype_name
from ..errors import ShapeError, fmt_shape
from ..shapes import int_sequence, normalize_axes
from .checks import require_float
from .ops_shape import reshape


def unbroadcast(grad: Tensor, shape: tuple) -> Tensor:
    """Sum `grad` over the axes that broadcasting added to reach its shape."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = len(grad.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and grad.shape[lead + i] != 1)
    out = summation(grad, axes) if axes else grad
    return out if out.shape == shape else reshape(out, shape)


class BroadcastTo(TensorOp):
    def __init__(self, shape):
        if isinstance(shape, numbers.Integral):
            shape = (shape,)
        if not int_sequence(shape) or any(s < 0 for s in shape):
            raise ShapeError(f"broadcast_to: the shape must be non-negative integers, got {shape!r}")
        self.shape = tuple(int(s) for s in shape)

    def compute(self, a):
        return A.broadcast_to(a, self.shape)

    def gradient(self, out_grad, node):
        return unbroadcast(out_grad, node.inputs[0].shape)


def broadcast_to(a, shape):
    return BroadcastTo(shape)(a)


# ---- reductions ---------------------------------------------------------------------------
#: dtypes whose sums would wrap around in their own type
_SMALL_INTEGERS = ("bool", "uint8", "int8", "int16", "int32", "uint16", "uint32")


class Summation(TensorOp):
    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = axes
        self.keepdims = keepdims

    def compute(self, a):
        axes = normalize_axes("summation", self.axes, a.ndim, a.shape)
        if dtype_name(a.dtype) in _SMALL_INTEGERS:  # summed in int64, as torch (numpy: 64 bits too)
            a = A.astype(a, "int64")
        return A.summation(a, axis=axes, keepdims=self.keepdims)

    def gradient(self, out_grad, node):
        shape = node.inputs[0].shape
        axes = normalize_axes("summation", self.axes, len(shape), shape)
        if out_grad.shape != shape[len(axes):] or axes != tuple(range(len(axes))):
            # (leading axes summed away come back by broadcasting alone: one op less)
            kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
            out_grad = out_grad if out_grad.shape == kept else reshape(out_grad, kept)
        if out_grad.dtype != node.inputs[0].dtype:  # (small integers are summed in int64)
            out_grad = out_grad.astype(node.inputs[0].dtype)
        return broadcast_to(out_grad, shape)


def summation(a, axes=None, keepdims=False):
    return Summation(axes, keepdims)(a)


def mean(a, axes=None, keepdims=False):
    require_float("mean", a)
    axes_t = normalize_axes("mean", axes, len(a.shape), a.shape)
    count = 1
    for ax in axes_t:
        count *= a.shape[ax]
    if count == 0:  # the mean of nothing: nan, as numpy and torch
        return summation(a, axes, keepdims) * float("nan")
    return summation(a, axes, keepdims) / count


class Max(TensorOp):
    """Maximum over axes; the gradient is shared equally among tied maxima."""

    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = axes
        self.keepdims = keepdims

    def compute(self, a):
        axes = normalize_axes("max", self.axes, a.ndim, a.shape)
        for ax in axes:
            if a.shape[ax] == 0:
                raise ShapeError(f"max: cannot reduce over empty axis {ax} of shape {fmt_shape(a.shape)}")
        return A.amax(a, axis=axes, keepdims=self.keepdims)

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        axes = normalize_axes("max", self.axes, len(a.shape), a.shape)
        kept = tuple(1 if i in axes else s for i, s in enumerate(a.shape))
        # which elements are maximal, from the operand's values as this backward computes them:
        # compared with the forward's stored max, an operand recomputed in another kernel (not
        # stored by the forward's schedule) may round otherwise, match nowhere, and give 0 / 0
        value = a.detach()
        mask = equal_mask(value, broadcast_to(Max(axes, keepdims=True)(value), a.shape))
        count = broadcast_to(summation(mask, axes, keepdims=True), a.shape)
        return broadcast_to(reshape(out_grad, kept), a.shape) * mask / count


def max(a, axes=None, keepdims=False):  # noqa: A001 - the SPEC's name
    return Max(axes, keepdims)(a)


class EqualMask(TensorOp):
    """1 where a == b else 0, in a's dtype; constant (zero gradient)."""

    def compute(self, a, b):
        return A.astype(a == b, a.dtype) if A._np(a) else a == b

    def gradient(self, out_grad, node):
        return out_grad * 0, out_grad * 0


def equal_mask(a, b):
    return EqualMask()(a, b)


# ---- matmul -------------------------------------------------------------------------------
class MatMul(TensorOp):
    """Batched a @ b; batch dimensions broadcast both ways.  `transpose_a` /
    `transpose_b` first swap an operand's last two axes (a view), so each gradient is
    one op, not a transpose and a matmul (an LSTM step built 162 transposes)."""

    transpose_a = transpose_b = False  # (set on the instance only when true: dumps show them then)

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False):
        if transpose_a:
            self.transpose_a = True
        if transpose_b:
            self.transpose_b = True

    def compute(self, a, b):
        if self.transpose_a:
            a = _swap_last(a)
        if self.transpose_b:
            b = _swap_last(b)
        return A.matmul(a, b)

    def gradient(self, out_grad, node):
        # C = op(a) @ op(b): d op(a) = G op(b)^T, d op(b) = op(a)^T G, transposed back
        # where op transposes
        a, b = node.inputs
        ta, tb = self.transpose_a, self.transpose_b
        grad_a = MatMul(tb, True)(b, out_grad) if ta else MatMul(False, not tb)(out_grad, b)
        grad_b = MatMul(True, ta)(out_grad, a) if tb else MatMul(not ta, False)(a, out_grad)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def _swap_last(x):
    if x.ndim < 2:
        raise ShapeError(f"matmul: a transposed operand needs at least 2 dims, got shape {fmt_shape(x.shape)}")
    return A.swapaxes(x, -2, -1)


def matmul(a, b):
    return MatMul()(a, b)
