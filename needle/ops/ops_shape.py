"""Ops that only change how data is indexed: transpose, permute, reshape."""
from __future__ import annotations

import numbers
from typing import Optional

from .. import array_api as A
from ..autograd import TensorOp
from ..errors import AxisError, ShapeError, fmt_shape
from ..shapes import int_sequence


# ---- shapes -------------------------------------------------------------------------------
class Transpose(TensorOp):
    """Swap two axes: the last two by default (course semantics)."""

    def __init__(self, axes: Optional[tuple] = None):
        if axes is not None and (not int_sequence(axes) or len(tuple(axes)) != 2):
            raise AxisError(f"transpose: expects two integer axes to swap, got {axes!r}")
        self.axes = None if axes is None else tuple(axes)

    def _order(self, ndim: int) -> tuple:
        if ndim < 2:
            raise ShapeError(f"transpose: needs at least 2 dims, got a {ndim}-d tensor")
        i, j = (ndim - 2, ndim - 1) if self.axes is None else normalize_axes_pair(self.axes, ndim)
        order = list(range(ndim))
        order[i], order[j] = order[j], order[i]
        return tuple(order)

    def compute(self, a):
        return A.permute(a, self._order(a.ndim))

    def gradient(self, out_grad, node):
        return transpose(out_grad, self.axes)


def normalize_axes_pair(axes, ndim):
    out = []
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise AxisError(f"transpose: axis {ax} out of range for a {ndim}-d tensor")
        out.append(ax % ndim)
    return out


def transpose(a, axes=None):
    return Transpose(axes)(a)


class Permute(TensorOp):
    def __init__(self, axes: tuple):
        if not int_sequence(axes):
            raise AxisError(f"permute: axes must be a tuple of integers, got {axes!r}")
        self.axes = tuple(axes)

    def compute(self, a):
        n = a.ndim
        if any(not -n <= ax < n for ax in self.axes) or sorted(ax % n for ax in self.axes) != list(range(n)):
            raise AxisError(f"permute: axes {self.axes} are not a permutation for shape {fmt_shape(a.shape)}")
        return A.permute(a, self.axes)

    def gradient(self, out_grad, node):
        n = len(self.axes)
        inverse = [0] * n
        for i, ax in enumerate(self.axes):
            inverse[ax % n] = i
        return permute(out_grad, tuple(inverse))


def permute(a, axes):
    return Permute(axes)(a)


class Reshape(TensorOp):
    def __init__(self, shape):
        self.shape = shape if type(shape) is tuple else (shape,) if isinstance(shape, numbers.Integral) \
            else tuple(shape)

    def compute(self, a):
        return A.reshape(a, self.shape)

    def gradient(self, out_grad, node):
        return reshape(out_grad, node.inputs[0].shape)


def reshape(a, shape):
    return Reshape(shape)(a)
