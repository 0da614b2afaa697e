"""Shape rules, written once: strides of compact arrays, numpy broadcasting,
batched matmul shapes, reshape inference, axis normalization and basic indexing.  A leaf module
(it imports only the errors it raises), so storage, the IR, the compiler and the
frontend all use the same rules and report the same errors."""
from __future__ import annotations

import math
import numbers

from .errors import AxisError, IndexingError, ShapeError, fmt_shape


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
    if len(shapes) == 2 and shapes[0] == shapes[1]:  # (a matmul's batch: on every one's path)
        return tuple(shapes[0])
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
    try:
        batch = broadcast_shapes("matmul", a_shape[:-2], b_shape[:-2])
    except ShapeError:
        raise ShapeError(f"matmul: the batch dimensions of {fmt_shape(a_shape)} @ {fmt_shape(b_shape)} "
                         f"({fmt_shape(a_shape[:-2])} and {fmt_shape(b_shape[:-2])}) cannot be broadcast "
                         "together") from None
    return batch, a_shape[-2], a_shape[-1], b_shape[-1]


def int_sequence(values) -> bool:
    """A sequence of integers (not bools, not floats that happen to be whole)."""
    if type(values) is tuple and all(type(v) is int for v in values):  # the common case: no ABC checks
        return True
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        return False
    return all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values)


def infer_reshape(shape, new_shape) -> tuple:
    if isinstance(new_shape, numbers.Integral):
        new_shape = (new_shape,)
    if not int_sequence(new_shape):
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
    if type(axes) is tuple:  # already normalized (a reduction's axes pass here three times per op)?
        last = -1
        for a in axes:
            if type(a) is not int or not last < a < ndim:
                break
            last = a
        else:
            return axes
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


def basic_index(op: str, shape, idxs) -> tuple:
    """numpy's basic indexing (ints, slices, None, one ...) checked against `shape`,
    with errors that name `op` and the shape: (ranges, drop, new_axes, items) —
    per axis of `shape` its (start, stop, step) as `slice.indices` gives them, the
    axes an int removes, the positions in the result where None inserts an axis,
    and the index itself with ints made non-negative (... kept)."""
    if not isinstance(idxs, tuple):
        idxs = (idxs,)
    fast = _plain_index(shape, idxs)
    if fast is not None:
        return fast

    def where() -> str:  # for error messages only (an index is normalized on every step)
        return f"for shape {fmt_shape(shape)}"

    if sum(1 for i in idxs if i is Ellipsis) > 1:
        raise IndexingError(f"{op}: an index can have only one ellipsis (...), got {idxs} {where()}")
    n_real = sum(1 for i in idxs if i is not None and i is not Ellipsis)
    if n_real > len(shape):
        raise IndexingError(f"{op}: too many indices ({n_real}) {where()}")
    ranges, drop, new_axes, items, out_pos = [], [], [], [], 0
    for i in idxs:
        if i is Ellipsis:
            for _ in range(len(shape) - n_real):
                ranges.append((0, shape[len(ranges)], 1))
            out_pos += len(shape) - n_real
            items.append(i)
        elif i is None:
            new_axes.append(out_pos)
            out_pos += 1
            items.append(i)
        elif isinstance(i, slice):
            if any(p is not None and not hasattr(p, "__index__") for p in (i.start, i.stop, i.step)):
                raise IndexingError(f"{op}: slice bounds must be integers, got {i} {where()}")
            if i.step == 0:
                raise IndexingError(f"{op}: slice step cannot be zero ({i} {where()})")
            ranges.append(i.indices(shape[len(ranges)]))
            out_pos += 1
            items.append(i)
        elif hasattr(i, "__index__") and not isinstance(i, bool):
            axis, n, k = len(ranges), shape[len(ranges)], int(i)
            if not -n <= k < n:
                raise IndexingError(f"{op}: index {k} is out of bounds for axis {axis} of shape {fmt_shape(shape)}")
            drop.append(axis)
            ranges.append((k % n, k % n + 1, 1))
            items.append(k % n)
        else:
            raise IndexingError(f"{op}: only ints, slices, None and ... are supported, got "
                                f"{type(i).__name__} {where()}")
    ranges += [(0, n, 1) for n in shape[len(ranges):]]
    return tuple(ranges), tuple(drop), tuple(new_axes), tuple(items)


def _plain_index(shape, idxs):
    """basic_index of an index made only of Python ints in range and slices of int or
    None bounds (an LSTM's gates, `x[:, i]`: every step, twice per slice and its
    gradient), or None for anything else, which takes the general path and its errors."""
    if len(idxs) > len(shape):
        return None
    ranges, drop, items = [], [], []
    for axis, i in enumerate(idxs):
        kind, n = type(i), shape[axis]
        if kind is slice:
            start, stop, step = i.start, i.stop, i.step
            if not ((start is None or type(start) is int) and (stop is None or type(stop) is int)
                    and (step is None or (type(step) is int and step != 0))):
                return None
            ranges.append(i.indices(n))
            items.append(i)
        elif kind is int and -n <= i < n:
            k = i % n
            drop.append(axis)
            ranges.append((k, k + 1, 1))
            items.append(k)
        else:
            return None
    ranges += [(0, n, 1) for n in shape[len(ranges):]]
    return tuple(ranges), tuple(drop), (), tuple(items)


def indexed_shape(ranges, drop, new_axes) -> tuple:
    """The shape `basic_index`'s result has."""
    kept = [len(range(*r)) for axis, r in enumerate(ranges) if axis not in drop]
    for pos in new_axes:
        kept.insert(pos, 1)
    return tuple(kept)

