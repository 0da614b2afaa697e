"""LazyArray: an IR node that answers to NDArray's methods.

Ops' `compute()` is written against the NDArray API; called with LazyArrays it
builds IR instead of computing.  Every method here maps NDArray semantics
(numpy broadcasting, basic indexing, keepdims, course-style 0/1 comparisons)
onto the primitives of `needle.ir.build`.
"""
from __future__ import annotations

import numbers
from typing import Callable, Optional

import numpy as np

from ..backend_ndarray.ndarray import NDArray
from ..backend_ndarray.operators import ArrayOperators
from ..dtypes import dtype_name
from ..errors import DTypeError, DeviceError, ShapeError, fmt_shape
from ..shapes import basic_index, broadcast_shapes, indexed_shape, infer_reshape, matmul_shapes, normalize_axes
from . import build
from .nodes import Node


def as_lazy(x) -> "LazyArray":
    """The graph node for `x`: itself if lazy, a buffer node for an NDArray."""
    if isinstance(x, LazyArray):
        return x
    if isinstance(x, NDArray):
        return build.buffer(x)
    raise DTypeError(f"cannot use {type(x).__name__} in a lazy graph; expected a Tensor or an NDArray")


#: The port through which a node asks to be computed, `REALIZE(nodes)`: the engine's
#: realize_nodes, plugged in by needle's composition root (needle/wiring.py).  An IR
#: node never computes itself; the engine is the one door.
REALIZE: Optional[Callable[[list], None]] = None


def _scalar(x) -> bool:
    kind = type(x)
    if kind is float or kind is int or isinstance(x, float):  # (an optimizer's RuntimeScalar: a float)
        return True  # the common cases first: the ABC check is slow
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, (bool, LazyArray, NDArray))


class LazyArray(Node, ArrayOperators):
    """A pending array.  Shape, dtype and device are known; data is not."""

    __slots__ = ()
    is_lazy = True
    __array_priority__ = 1000
    __hash__ = Node.__hash__

    # ---- elementwise ------------------------------------------------------------------
    def _operand(self, op: str, other) -> "LazyArray":
        if isinstance(other, LazyArray):
            return other
        if isinstance(other, NDArray):
            if other.device != self.device:
                raise DeviceError(f"{op}: operands on different devices ({self.device} and {other.device})")
            return build.buffer(other)
        if _scalar(other):
            return build.scalar(other, self.shape, self.dtype, self.device)
        raise TypeError(f"{op}: unsupported operand {type(other).__name__}")

    def _binary(self, op: str, other, reverse: bool = False) -> "LazyArray":
        if not isinstance(other, LazyArray):
            if not isinstance(other, NDArray) and not _scalar(other):
                return NotImplemented
            other = self._operand(op, other)
        a, b = (other, self) if reverse else (self, other)
        if a.shape == b.shape:
            return build.elementwise(op, a, b)
        shape = broadcast_shapes(op, a.shape, b.shape)
        return build.elementwise(op, a.broadcast_to(shape), b.broadcast_to(shape))

    def _unary(self, op: str) -> "LazyArray":
        return build.elementwise(op, self)

    def __pow__(self, other):
        if _scalar(other):  # the exponent is part of the program (x**2 -> x*x)
            return build.elementwise("pow", self, build.scalar(other, self.shape, self.dtype, self.device,
                                                               exponent=True))
        return self._binary("pow", other)

    def astype(self, dtype) -> "LazyArray":
        return build.cast(self, dtype_name(dtype))

    def where(self, a, b) -> "LazyArray":
        """`a` where self is nonzero, else `b`."""
        a, b = as_lazy(a), as_lazy(b)
        cond = self if self.dtype == "bool" else build.elementwise(
            "ne", self, build.const(0, self.shape, self.dtype, self.device))
        shape = broadcast_shapes("where", cond.shape, a.shape, b.shape)
        return build.elementwise("where", cond.broadcast_to(shape), a.broadcast_to(shape), b.broadcast_to(shape))

    def zeros(self, shape) -> "LazyArray":
        return build.const(0, tuple(shape), self.dtype, self.device)

    # ---- reductions -------------------------------------------------------------------
    def _reduce(self, op: str, axis, keepdims: bool) -> "LazyArray":
        axes = normalize_axes(op.replace("reduce_", ""), axis, self.ndim, self.shape)
        out = build.reduce(op, self, axes)
        if keepdims:
            return out
        return build.reshape(out, tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdims=False): return self._reduce("reduce_sum", axis, keepdims)
    def max(self, axis=None, keepdims=False): return self._reduce("reduce_max", axis, keepdims)

    def __matmul__(self, other) -> "LazyArray":
        other = as_lazy(other)
        batch, m, k, n = matmul_shapes(self.shape, other.shape)
        return build.matmul(self.broadcast_to(batch + (m, k)), other.broadcast_to(batch + (k, n)))

    # ---- movement ---------------------------------------------------------------------
    def reshape(self, new_shape) -> "LazyArray":
        return build.reshape(self, infer_reshape(self.shape, new_shape))

    def permute(self, new_axes) -> "LazyArray":
        return build.permute(self, new_axes)

    def broadcast_to(self, new_shape) -> "LazyArray":
        new_shape = tuple(new_shape)
        if new_shape == self.shape:
            return self
        lead = len(new_shape) - self.ndim
        if lead < 0:
            raise ShapeError(f"broadcast_to: cannot broadcast {fmt_shape(self.shape)} to {fmt_shape(new_shape)}")
        x = build.reshape(self, (1,) * lead + self.shape) if lead else self
        return build.expand(x, new_shape)

    def flip(self, axes) -> "LazyArray":
        return build.flip(self, axes)

    def pad(self, axes) -> "LazyArray":
        return build.pad(self, axes)

    def compact(self) -> "LazyArray":
        return self  # layout is the compiler's business

    def as_strided(self, shape, strides) -> "LazyArray":
        return build.as_strided(self, shape, strides)

    def sliding_window(self, kernel, step) -> "LazyArray":
        """(N, H, W, C) -> (N, Ho, Wo, KH, KW, C) windows for convolution."""
        return build.window(self, (1, 2), kernel, step)

    def __getitem__(self, idxs) -> "LazyArray":
        index, drop, new_axes, _ = basic_index("getitem", self.shape, idxs)
        flips, bounds, steps = [], [], []
        for axis, (n, (start, stop, step)) in enumerate(zip(self.shape, index)):
            length = len(range(start, stop, step))
            if step < 0:
                flips.append(axis)
            first = start if step > 0 else n - 1 - start
            bounds.append((first, first + (length - 1) * abs(step) + 1) if length else (0, 0))
            steps.append(abs(step))
        # (the flip and the stride only when an index asks for them: an LSTM takes a time
        # step and four gates by plain slices, every step)
        x = build.shrink(build.flip(self, flips) if flips else self, bounds)
        if any(step != 1 for step in steps):
            x = build.stride(x, steps)
        return build.reshape(x, indexed_shape(index, drop, new_axes))

    def scatter(self, shape, idxs) -> "LazyArray":
        """Zeros of `shape` holding self at basic index `idxs` (getitem's adjoint)."""
        index, _, _, _ = basic_index("scatter", tuple(shape), idxs)
        piece_shape = tuple(len(range(*ix)) for ix in index)
        piece = build.reshape(self, piece_shape)
        flips, placed = [], []
        for i, (start, stop, step) in enumerate(index):
            length = piece_shape[i]
            if step < 0:
                flips.append(i)
                low = start + (length - 1) * step if length else 0
                placed.append((low, low + (length - 1) * -step + 1 if length else low, -step))
            else:
                placed.append((start, start + (length - 1) * step + 1 if length else start, step))
        return build.assemble(shape, [(build.flip(piece, flips) if flips else piece, tuple(placed))], like=self)

    def dilate(self, axes, dilation: int) -> "LazyArray":
        shape = tuple(s * (dilation + 1) if i in axes else s for i, s in enumerate(self.shape))
        index = tuple((0, n, dilation + 1) if i in axes else (0, n, 1) for i, n in enumerate(shape))
        return build.assemble(shape, [(self, index)], like=self)

    def concatenate(self, arrays, axis: int) -> "LazyArray":
        arrays = [as_lazy(a) for a in arrays]
        shape = list(arrays[0].shape)
        shape[axis] = sum(a.shape[axis] for a in arrays)
        pieces, start = [], 0
        for a in arrays:
            index = tuple((start, start + a.shape[axis], 1) if i == axis else (0, n, 1) for i, n in enumerate(shape))
            pieces.append((a, index))
            start += a.shape[axis]
        return build.assemble(tuple(shape), pieces, like=arrays[0])

    def __setitem__(self, idxs, value) -> None:
        """`out[idxs] = value` inside an op's compute(): a functional update.  This node
        becomes where(written, value placed at idxs, its old value), the old value
        moving to a new node, so the write is part of the graph like any op.  Basic
        indices only (ints, slices, None, ...)."""
        items = idxs if isinstance(idxs, tuple) else (idxs,)
        if not all(i is None or i is Ellipsis or isinstance(i, slice) or
                   (isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, bool)) for i in items):
            raise IndexError(f"setitem on a lazy array takes ints, slices, None and ... (got {idxs!r}); for index "
                             "arrays build the result with needle.ops.scatter_add / select on Tensors instead")
        if self.consumed:
            raise ValueError("setitem: this lazy array was already read by another op, which must keep seeing "
                             "the old value; write into it before reading it, or write into a copy (x = x * 1)")
        view_shape = indexed_shape(*basic_index("setitem", self.shape, idxs)[:3])
        if _scalar(value):
            value = build.scalar(value, view_shape, self.dtype, self.device)
        elif isinstance(value, (LazyArray, NDArray)):
            value = as_lazy(value)
        else:
            raise DTypeError(f"setitem: cannot store {type(value).__name__} in a lazy array")
        if value.dtype != self.dtype:
            value = build.cast(value, self.dtype)
        value = value.broadcast_to(broadcast_shapes("setitem", value.shape, view_shape)) \
            if value.shape != view_shape else value
        if value.shape != view_shape:
            raise ShapeError(f"setitem: value of shape {fmt_shape(value.shape)} does not fit the indexed "
                             f"shape {fmt_shape(view_shape)} of {fmt_shape(self.shape)}")
        old = LazyArray(self.op, self.srcs, self.arg, self.shape, self.dtype, self.device, self.origin)
        placed = value.scatter(self.shape, idxs)
        written = build.const(1, view_shape, self.dtype, self.device).scatter(self.shape, idxs)
        written = build.elementwise("ne", written, build.const(0, self.shape, self.dtype, self.device))
        new = build.elementwise("where", written, placed, old)
        self.op, self.srcs, self.arg = new.op, new.srcs, new.arg
        old.consumed, self.consumed = True, False  # new is a fresh node: nothing reads it yet

    # ---- data -------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        REALIZE([self])
        return self.arg.numpy()

    def __repr__(self) -> str:
        return f"LazyArray({self.op}, {self.type_str()}, device={self.device})"

