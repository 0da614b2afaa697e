"""Ops that move data without arithmetic: flip, dilate, pad, getitem, stack,
split, concatenate."""
from __future__ import annotations

import numbers

from .. import array_api as A
from ..autograd import Tensor, TensorOp, TensorTuple, TensorTupleOp
from ..dtypes import require_same
from ..errors import ArgumentError, AxisError, DeviceError, ShapeError, fmt_shape
from ..shapes import basic_index, normalize_axes
from .ops_tuple import _as_tuple, make_tuple


class Flip(TensorOp):
    def __init__(self, axes):
        self.axes = axes

    def compute(self, a):
        return A.flip(a, normalize_axes("flip", self.axes, a.ndim, a.shape))

    def gradient(self, out_grad, node):
        return flip(out_grad, self.axes)


def flip(a, axes):
    return Flip(axes)(a)


def _dilation(op: str, dilation) -> int:
    if not isinstance(dilation, numbers.Integral) or dilation < 0:
        raise ArgumentError(f"{op}: dilation must be a non-negative integer, got {dilation!r}")
    return int(dilation)


class Dilate(TensorOp):
    """Insert `dilation` zeros after every element along `axes`."""

    def __init__(self, axes: tuple, dilation: int):
        self.axes = axes
        self.dilation = _dilation("dilate", dilation)

    def compute(self, a):
        axes = normalize_axes("dilate", self.axes, a.ndim, a.shape)
        return a if self.dilation == 0 else A.dilate(a, axes, self.dilation)

    def gradient(self, out_grad, node):
        return undilate(out_grad, self.axes, self.dilation)


def dilate(a, axes, dilation):
    return Dilate(axes, dilation)(a)


class UnDilate(TensorOp):
    """Keep every (dilation + 1)-th element along `axes`."""

    def __init__(self, axes: tuple, dilation: int):
        self.axes = axes
        self.dilation = _dilation("undilate", dilation)

    def compute(self, a):
        axes = normalize_axes("undilate", self.axes, a.ndim, a.shape)
        for ax in axes:
            if a.shape[ax] % (self.dilation + 1):
                raise ShapeError(f"undilate: axis {ax} of shape {fmt_shape(a.shape)} is not a "
                                 f"multiple of dilation + 1 = {self.dilation + 1}")
        return A.undilate(a, axes, self.dilation)

    def gradient(self, out_grad, node):
        return dilate(out_grad, self.axes, self.dilation)


def undilate(a, axes, dilation):
    return UnDilate(axes, dilation)(a)


class Pad(TensorOp):
    """Zero padding; `axes` holds one (before, after) pair per axis."""

    def __init__(self, axes):
        if not isinstance(axes, (tuple, list)) or not all(
                isinstance(p, (tuple, list)) and all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                                                     for x in p) for p in axes):
            raise ShapeError(f"pad: expects one (before, after) pair of integers per axis, got {axes!r}")
        self.axes = tuple(tuple(p) for p in axes)

    def compute(self, a):
        if len(self.axes) != a.ndim or any(len(p) != 2 or min(p) < 0 for p in self.axes):
            raise ShapeError(f"pad: need one non-negative (before, after) pair per axis of "
                             f"{fmt_shape(a.shape)}, got {self.axes}")
        return A.pad(a, self.axes)

    def gradient(self, out_grad, node):
        return getitem(out_grad, tuple(slice(lo, lo + s) for (lo, _), s in zip(self.axes, node.inputs[0].shape)))


def pad(a, axes):
    return Pad(axes)(a)


def _normalize_index(idxs, shape) -> tuple:
    """Check a basic index (ints, slices, None, ...) against `shape` up front so that
    errors name getitem and the shape; ints are made non-negative."""
    return basic_index("getitem", shape, idxs)[3]


def _same_dtypes_and_devices(op: str, parts) -> None:
    """Stack and concatenate: one dtype and one device, or an error naming the op
    and every part's shape (before the tuple or the IR names it otherwise)."""
    tensors = list(parts)
    if not all(isinstance(t, Tensor) for t in tensors):
        return  # make_tuple names the odd one out
    described = ", ".join(f"{fmt_shape(t.shape)} {t.dtype} on {t.device}" for t in tensors)
    if len({t.device for t in tensors}) > 1:
        raise DeviceError(f"{op}: inputs live on different devices ({described})")
    if len({t.dtype for t in tensors}) > 1:
        require_same(op, *[t.dtype for t in tensors], shapes=[t.shape for t in tensors])


class GetItem(TensorOp):
    """Basic indexing a[idxs] (a view); the gradient scatters into zeros."""

    def __init__(self, idxs):
        self.idxs = idxs

    def compute(self, a):
        return a[_normalize_index(self.idxs, a.shape)]

    def gradient(self, out_grad, node):
        return scatter(out_grad, node.inputs[0].shape, self.idxs)


def getitem(a, idxs):
    return GetItem(idxs)(a)


class Scatter(TensorOp):
    """Zeros of `shape` with the input written at `idxs` (getitem's adjoint)."""

    def __init__(self, shape, idxs):
        self.shape = tuple(shape)
        self.idxs = idxs

    def compute(self, grad):
        return A.scatter(grad, self.shape, _normalize_index(self.idxs, self.shape))

    def gradient(self, out_grad, node):
        return getitem(out_grad, self.idxs)


def scatter(a, shape, idxs):
    return Scatter(shape, idxs)(a)


class Stack(TensorOp):
    """Stack a tuple of equally shaped tensors along a new axis."""

    def __init__(self, axis: int):
        self.axis = axis

    def compute(self, args):
        return A.stack(args, self.axis)

    def gradient(self, out_grad, node):
        return split(out_grad, self.axis)


def stack(args, axis):
    if not isinstance(args, TensorTuple):
        _same_dtypes_and_devices("stack", list(args))
    return Stack(axis)(_as_tuple("stack", args))


class Split(TensorTupleOp):
    """Split along an axis into single slices, dropping the axis (inverse of stack)."""

    def __init__(self, axis: int):
        if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
            raise AxisError(f"split: axis must be an integer, got {axis!r}")
        self.axis = axis

    def compute(self, a):
        return A.split(a, self.axis)

    def gradient(self, out_grad, node):
        return stack(out_grad, self.axis)


def split(a, axis):
    return Split(axis)(a)


class Concatenate(TensorOp):
    """Join a tuple of tensors along an existing axis."""

    def __init__(self, axis: int):
        self.axis = axis

    def compute(self, args):
        return A.concatenate(args, self.axis)

    def gradient(self, out_grad, node):
        parts = node.inputs[0]
        axis = normalize_axes("concatenate", self.axis, len(out_grad.shape), out_grad.shape)[0]
        grads, start = [], 0
        for i in range(len(parts)):
            size = parts[i].shape[axis]
            idx = tuple(slice(start, start + size) if d == axis else slice(None) for d in range(len(out_grad.shape)))
            grads.append(getitem(out_grad, idx))
            start += size
        return make_tuple(*grads)


def concatenate(args, axis):
    if not isinstance(args, TensorTuple):
        _same_dtypes_and_devices("concatenate", list(args))
    return Concatenate(axis)(_as_tuple("concatenate", args))
