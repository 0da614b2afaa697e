"""Views of a strided array: each one only computes a new shape, strides and offset
and asks `_view` for an array on the same storage (`compact()` is the one that copies).
numpy's rules for basic indexing; the course's `process_slice`."""
from __future__ import annotations

from ..errors import AxisError, IndexingError, ShapeError, fmt_shape
from ..shapes import basic_index, infer_reshape, normalize_axes, prod, reshape_strides


class StridedViews:
    """The view methods of NDArray (which supplies `_shape`, `_strides`, `_offset`,
    `_view`, `compact`, `ndim`, `size`)."""

    __slots__ = ()

    def as_strided(self, shape, strides) -> "StridedViews":
        if len(shape) != len(strides):
            raise ShapeError(f"as_strided: shape {fmt_shape(shape)} and strides {tuple(strides)} differ in length")
        return self._view(tuple(shape), tuple(strides), self._offset)

    def reshape(self, new_shape) -> "StridedViews":
        new_shape = infer_reshape(self._shape, new_shape)
        if new_shape == self._shape:
            return self
        strides = reshape_strides(self._shape, self._strides, new_shape)
        if strides is None:
            return self.compact().reshape(new_shape)
        return self._view(new_shape, strides, self._offset)

    def permute(self, new_axes) -> "StridedViews":
        given, n = tuple(int(a) for a in new_axes), self.ndim
        new_axes = tuple(a % n for a in given if -n <= a < n)
        if len(new_axes) != len(given) or sorted(new_axes) != list(range(n)):
            raise AxisError(f"permute: axes {given} are not a permutation for shape {fmt_shape(self.shape)}")
        return self._view(tuple(self._shape[a] for a in new_axes),
                          tuple(self._strides[a] for a in new_axes), self._offset)

    def broadcast_to(self, new_shape) -> "StridedViews":
        if new_shape == self._shape:  # (a matmul's operands, mostly: no view to make)
            return self
        new_shape = tuple(int(s) for s in new_shape)
        lead = len(new_shape) - self.ndim
        if lead < 0 or any(s != n and s != 1 for s, n in zip(self._shape, new_shape[lead:])):
            raise ShapeError(f"broadcast_to: cannot broadcast shape {fmt_shape(self.shape)} to {fmt_shape(new_shape)}")
        strides = (0,) * lead + tuple(0 if s == 1 and n != 1 else st
                                      for s, n, st in zip(self._shape, new_shape[lead:], self._strides))
        return self._view(new_shape, strides, self._offset)

    def flip(self, axes) -> "StridedViews":
        axes = normalize_axes("flip", axes, self.ndim, self.shape)
        if self.size == 0:
            return self  # nothing to reverse; moving the offset would point past an empty buffer
        offset, strides = self._offset, list(self._strides)
        for a in axes:
            if self._shape[a] > 0:
                offset += (self._shape[a] - 1) * strides[a]
            strides[a] = -strides[a]
        return self._view(self._shape, tuple(strides), offset)

    def _index_view(self, idxs) -> "StridedViews":
        """numpy basic indexing: ints (drop the axis), slices with steps, None, Ellipsis."""
        ranges, drop, new_axes, _ = basic_index("getitem", self._shape, idxs)
        shape, strides, offset = [], [], self._offset
        for axis, ((start, stop, step), st) in enumerate(zip(ranges, self._strides)):
            length = len(range(start, stop, step))
            if length:
                offset += start * st
            if axis not in drop:
                shape.append(length)
                strides.append(st * step)
        for pos in new_axes:
            shape.insert(pos, 1)
            strides.insert(pos, 0)
        if prod(shape) == 0:
            offset = self._offset  # an empty view reads nothing; its offset must stay inside the buffer
        return self._view(tuple(shape), tuple(strides), offset)

    def __getitem__(self, idxs) -> "StridedViews":
        return self._index_view(idxs)

    def process_slice(self, sl: slice, dim: int) -> slice:
        """The course's explicit slice: start (default 0), stop (default the axis length,
        negative counts from the end), step (default 1, must be positive), all ints."""
        n = self._shape[dim]
        start, stop, step = sl.start, sl.stop, sl.step
        start = 0 if start is None else int(start)
        start = start + n if start < 0 else start
        stop = n if stop is None else int(stop)
        stop = stop + n if stop < 0 else stop
        step = 1 if step is None else int(step)
        if step <= 0:
            raise IndexingError(f"process_slice: steps must be positive, got {step} on axis {dim} "
                                f"of shape {fmt_shape(self.shape)}")
        return slice(start, stop, step)
