"""The array operations that ops' `compute()` is written against.

One function per operation, dispatching on the array type, so that the same
`compute()` runs on numpy arrays (NEEDLE_BACKEND=np), on NDArrays (eager) and on
the IR's lazy arrays (lazy mode builds the graph by calling `compute()`).
NDArray and the lazy array implement these as methods; numpy gets numpy.
"""
from __future__ import annotations

import numpy as np

from .dtypes import np_dtype
from .errors import ShapeError, fmt_shape
from .shapes import infer_reshape, normalize_axes


def _np(a) -> bool:
    # numpy turns 0-d results into scalars (np.float32, ...): those are numpy data too
    return isinstance(a, (np.ndarray, np.generic))


def exp(a): return np.exp(a) if _np(a) else a.exp()
def log(a): return np.log(a) if _np(a) else a.log()
def tanh(a): return np.tanh(a) if _np(a) else a.tanh()
def sqrt(a): return np.sqrt(a) if _np(a) else a.sqrt()


def sigmoid(a):
    """1 / (1 + e**-a) without overflow; numpy evaluates it as z = e**-|a| in (0, 1],
    1 / (1 + z) for a >= 0 and z / (1 + z) below (keeping relative precision there)."""
    if not _np(a):
        return a.sigmoid()
    z = np.exp(-np.abs(a))
    p = 1 / (z + 1)
    return np.where(a >= 0, p, z * p)


def maximum(a, b): return np.maximum(a, b) if _np(a) else a.maximum(b)
def reshape(a, shape): return a.reshape(infer_reshape(a.shape, shape) if _np(a) else shape)


def broadcast_to(a, shape):
    if not _np(a):
        return a.broadcast_to(shape)
    try:
        return np.broadcast_to(a, shape)
    except ValueError:  # (numpy's message names no op)
        raise ShapeError(f"broadcast_to: cannot broadcast {fmt_shape(a.shape)} to {fmt_shape(tuple(shape))}") from None


def permute(a, axes): return np.transpose(a, axes) if _np(a) else a.permute(axes)
def flip(a, axes): return np.flip(a, axes) if _np(a) else a.flip(axes)
def matmul(a, b): return a @ b
def astype(a, dtype): return a.astype(np_dtype(dtype)) if _np(a) else a.astype(dtype)


def summation(a, axis=None, keepdims=False):
    return np.sum(a, axis=axis, keepdims=keepdims) if _np(a) else a.sum(axis=axis, keepdims=keepdims)


def amax(a, axis=None, keepdims=False):
    return np.max(a, axis=axis, keepdims=keepdims) if _np(a) else a.max(axis=axis, keepdims=keepdims)


def pad(a, axes):
    if _np(a):  # (numpy cannot pad a 0-d array by no axes; the compiled backends copy it)
        return np.pad(a, axes) if len(axes) else np.array(a, copy=True)
    return a.pad(axes)


def where(cond, a, b):
    """Elementwise select; `cond` is nonzero where `a` is taken."""
    if _np(cond):
        return np.where(cond, a, b).astype(a.dtype)
    return cond.where(a, b)


def fused(op_key, fn, arrays) -> tuple:
    """`fn(*arrays)`, array code returning a tuple of arrays, as the arrays' device
    computes several ops at once: a compiled device's NDArrays as one schedule (keyed by
    `op_key`, which names the code and every attribute it reads); numpy arrays and lazy
    arrays run it as it is (a lazy graph is fused anyway)."""
    for a in arrays:
        if _np(a) or getattr(a, "is_lazy", False):
            return tuple(fn(*arrays))
    return arrays[0].device.fused(op_key, fn, arrays)


def positive(a):
    """a > 0 as a bool array (the operators give 1/0 in a's dtype, the course's rule),
    for `where` to select with no comparison against zero of its own."""
    return a > 0 if _np(a) else a._binary("lt", 0, True)


def zeros(shape, like):
    """Zeros of `shape` with the dtype and device of `like`."""
    if _np(like):
        return np.zeros(shape, dtype=like.dtype)
    return like.zeros(shape) if hasattr(like, "zeros") else like.device.full(shape, 0, like.dtype)


def swapaxes(a, ax1: int, ax2: int):
    order = list(range(a.ndim))
    order[ax1], order[ax2] = order[ax2], order[ax1]
    return permute(a, tuple(order))


def stack(arrays, axis: int):
    arrays = list(arrays)
    if not arrays:
        raise ShapeError("stack: needs at least one array")
    shape = arrays[0].shape
    for x in arrays:
        if x.shape != shape:
            raise ShapeError(f"stack: all arrays need the same shape, got {fmt_shape(shape)} and {fmt_shape(x.shape)}")
    axis = normalize_axes("stack", axis, len(shape) + 1)[0]
    expanded = [reshape(x, shape[:axis] + (1,) + shape[axis:]) for x in arrays]
    return concatenate(expanded, axis)


def concatenate(arrays, axis: int):
    arrays = list(arrays)
    if not arrays:
        raise ShapeError("concatenate: needs at least one array")
    first = arrays[0]
    axis = normalize_axes("concatenate", axis, first.ndim, first.shape)[0]
    for x in arrays:
        if x.ndim != first.ndim or any(s != t for i, (s, t) in enumerate(zip(x.shape, first.shape)) if i != axis):
            raise ShapeError(f"concatenate: shapes {fmt_shape(first.shape)} and {fmt_shape(x.shape)} "
                             f"differ outside axis {axis}")
    if _np(first):
        return np.concatenate(arrays, axis=axis)
    if hasattr(first, "concatenate"):
        return first.concatenate(arrays, axis)
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in arrays)
    out = first.device.empty(tuple(shape), first.dtype)
    start = 0
    for x in arrays:
        idx = [slice(None)] * first.ndim
        idx[axis] = slice(start, start + x.shape[axis])
        out[tuple(idx)] = x
        start += x.shape[axis]
    return out


def split(a, axis: int):
    """Split along `axis` into pieces (one per index by default), dropping the axis
    when splitting into single elements (the inverse of stack)."""
    axis = normalize_axes("split", axis, a.ndim, a.shape)[0]
    n = a.shape[axis]
    out = []
    for i in range(n):
        idx = [slice(None)] * a.ndim
        idx[axis] = i
        out.append(a[tuple(idx)])
    return tuple(out)


def dilate(a, axes, dilation: int):
    """Insert `dilation` zeros between elements along `axes` (course semantics:
    trailing zeros too, so each size n becomes n * (dilation + 1))."""
    if hasattr(a, "dilate"):
        return a.dilate(axes, dilation)
    shape = tuple(s * (dilation + 1) if i in axes else s for i, s in enumerate(a.shape))
    out = zeros(shape, a)
    out[tuple(slice(None, None, dilation + 1) if i in axes else slice(None) for i in range(a.ndim))] = a
    return out


def undilate(a, axes, dilation: int):
    return a[tuple(slice(None, None, dilation + 1) if i in axes else slice(None) for i in range(a.ndim))]


def scatter(grad, shape, idxs):
    """Zeros of `shape` with `grad` written at basic index `idxs` (getitem's adjoint)."""
    if hasattr(grad, "scatter"):
        return grad.scatter(shape, idxs)
    out = zeros(shape, grad)
    out[idxs] = grad
    return out


def as_strided(a, shape, strides):
    """A view with element strides over a compact array."""
    if _np(a):
        a = np.ascontiguousarray(a)
        return np.lib.stride_tricks.as_strided(a, shape, tuple(s * a.itemsize for s in strides))
    return a.compact().as_strided(shape, strides)


def sliding_window(a, kernel, step: int):
    """(N, H, W, C) -> (N, Ho, Wo, KH, KW, C): the im2col view of a convolution."""
    if hasattr(a, "sliding_window"):
        return a.sliding_window(kernel, step)
    N, H, W, C = a.shape
    KH, KW = kernel
    Ho, Wo = (H - KH) // step + 1, (W - KW) // step + 1
    sN, sH, sW = H * W * C, W * C, C
    return as_strided(a, (N, Ho, Wo, KH, KW, C), (sN, sH * step, sW * step, sH, sW, 1))



__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "np")]
