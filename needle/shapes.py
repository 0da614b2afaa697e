"""Shape rules, written once: strides of compact arrays, numpy broadcasting,
batched matmul shapes, reshape inference and axis normalization.  A leaf module
(it imports only the errors it raises), so storage, the IR, the compiler and the
frontend all use the same rules and report the same errors."""
from __future__ import annotations

import math
import numbers

from .errors import AxisError, ShapeError, fmt_shape


def prod(xs) -> int:
    return math.prod(xs)


def compact_strides(shape) -> tuple:
    stride, out = 1, []
    for s in reversed(shape):
        out.append(stride)
        stride *= s
    return tuple(reversed(out))


def broadcast_shapes(op: str, *shapes) -> tuple:
    """numpy's broadcasting rule, with an error that names the op and the shapes."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        dims = {s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"{op}: shapes {' and '.join(fmt_shape(s) for s in shapes)} "
                             "cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def reshape_strides(shape, strides, new_shape):
    """Strides that view (shape, strides) as new_shape without a copy, or None.

    Groups of old and new dimensions with equal products are matched; a group can
    be re-viewed when its old dimensions are contiguous with each other
    (numpy's `_attempt_nocopy_reshape`).
    """
    if prod(shape) == 0:
        return compact_strides(new_shape)
    old = [(s, st) for s, st in zip(shape, strides) if s != 1]
    old_dims, old_strides = [s for s, _ in old], [st for _, st in old]
    new_strides = [0] * len(new_shape)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new_shape) and oi < len(old_dims):
        np_, op_ = new_shape[ni], old_dims[oi]
        while np_ != op_:
            if np_ < op_:
                np_ *= new_shape[nj]
                nj += 1
            else:
                op_ *= old_dims[oj]
                oj += 1
        for k in range(oi, oj - 1):
            if old_strides[k] != old_dims[k + 1] * old_strides[k + 1]:
                return None
        new_strides[nj - 1] = old_strides[oj - 1]
        for k in range(nj - 1, ni, -1):
            new_strides[k - 1] = new_strides[k] * new_shape[k]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    # trailing size-1 dims take the last stride, as numpy does (so compact stays compact)
    last_stride = new_strides[ni - 1] if ni >= 1 else 1
    for k in range(ni, len(new_shape)):
        new_strides[k] = last_stride
    return tuple(new_strides)


def matmul_shapes(a_shape, b_shape):
    """(batch, m, k, n) of a batched matmul, batch dims broadcast both ways."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ShapeError(f"matmul: operands need at least 2 dims, got {fmt_shape(a_shape)} and {fmt_shape(b_shape)}")
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {fmt_shape(a_shape)} @ {fmt_shape(b_shape)}")
    batch = broadcast_shapes("matmul", a_shape[:-2], b_shape[:-2])
    return batch, a_shape[-2], a_shape[-1], b_shape[-1]


def infer_reshape(shape, new_shape) -> tuple:
    if isinstance(new_shape, numbers.Integral):
        new_shape = (new_shape,)
    if isinstance(new_shape, (str, bytes)) or not hasattr(new_shape, "__iter__") or \
            not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in new_shape):
        raise ShapeError(f"reshape: the new shape must be integers, got {new_shape!r} for {fmt_shape(shape)}")
    new_shape = [int(s) for s in new_shape]
    size = prod(shape)
    if new_shape.count(-1) > 1:
        raise ShapeError(f"reshape: cannot reshape {fmt_shape(shape)} into {tuple(new_shape)}: only one -1 allowed")
    if -1 in new_shape:
        rest = prod(s for s in new_shape if s != -1)
        if rest == 0 or size % rest:
            raise ShapeError(f"reshape: cannot reshape {fmt_shape(shape)} into {tuple(new_shape)}")
        new_shape[new_shape.index(-1)] = size // rest
    if any(s < 0 for s in new_shape) or prod(new_shape) != size:
        raise ShapeError(f"reshape: cannot reshape {fmt_shape(shape)} (size {size}) into {fmt_shape(new_shape)}")
    return tuple(new_shape)


def normalize_axes(op: str, axes, ndim: int, shape=None) -> tuple:
    """Turn an int / sequence / None into a sorted tuple of non-negative axes,
    raising AxisError that names `op` and the shape on a bad axis."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int,)) or hasattr(axes, "__index__"):
        axes = (axes,)
    elif isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        raise AxisError(f"{op}: axes must be an int, a tuple of ints or None, got {axes!r}")
    out = []
    for ax in axes:
        if not hasattr(ax, "__index__"):
            raise AxisError(f"{op}: axis {ax!r} is not an integer")
        a = int(ax)
        if not -ndim <= a < ndim:
            where = f" for shape {fmt_shape(shape)}" if shape is not None else f" for {ndim}-d input"
            raise AxisError(f"{op}: axis {a} is out of range{where}")
        a %= ndim
        if a in out:
            raise AxisError(f"{op}: axis {a} is repeated in {tuple(axes)}")
        out.append(a)
    return tuple(sorted(out))
