"""The course's device-module functions, on flat host buffers.

The course's NDArray calls its backend module with raw handles: `device.compact(a, out,
shape, strides, offset)`, `device.ewise_add(a, b, out)`, `device.matmul_tiled(a, b, out,
m, n, p)`, ...; course code (hw3 subclasses NDArray) and its tests call them directly,
and check shared storage with `a._handle.ptr()`.  needle's own NDArray never calls these:
they exist so that such code runs unchanged on `cpu()` and `cpu_numpy()`.
Handles are flat numpy buffers (`Buffer`); every function writes into `out` in place.
"""
from __future__ import annotations

import numpy as np


class Buffer(np.ndarray):
    """A host NDArray's flat storage: a numpy array with the course handle's `ptr()`."""

    def ptr(self) -> int:
        """The address of the first element (equal for every view of one storage)."""
        return self.__array_interface__["data"][0]


def as_buffer(handle):
    """`handle` as a Buffer (a view, no copy) when it is a plain numpy array."""
    return handle.view(Buffer) if type(handle) is np.ndarray else handle


def _strided(handle, shape, strides, offset) -> np.ndarray:
    """A numpy view of `handle` with element `strides` starting at element `offset`."""
    item = handle.itemsize
    return np.ndarray(tuple(shape), handle.dtype, buffer=handle, offset=int(offset) * item,
                      strides=tuple(int(s) * item for s in strides))


def _put(out, values) -> None:
    values = np.asarray(values).reshape(-1)
    out[:values.size] = values


class CourseKernels:
    """Mixin for host devices: the course backend module's API (`ndarray_backend_cpu`)."""

    #: the course's tile edge for `matmul_tiled` (its CPU backend uses 8)
    __tile_size__ = 8

    @property
    def __device_name__(self) -> str:
        return self.name

    @property
    def mod(self):
        """The course's `BackendDevice.mod`: here the device answers for its module."""
        return self

    def Array(self, size: int, dtype: str = "float32") -> Buffer:  # noqa: N802 - the course's name
        return as_buffer(self.alloc(int(size), dtype))

    def fill(self, out, val) -> None:
        out[...] = val

    def compact(self, a, out, shape, strides, offset) -> None:
        _put(out, _strided(a, shape, strides, offset))

    def ewise_setitem(self, a, out, shape, strides, offset) -> None:
        view = _strided(out, shape, strides, offset)
        view[...] = np.asarray(a)[:view.size].reshape(view.shape)

    def scalar_setitem(self, size, val, out, shape, strides, offset) -> None:
        _strided(out, shape, strides, offset)[...] = val

    # elementwise on compact buffers of one size; comparisons give 1.0 / 0.0
    def ewise_add(self, a, b, out): _put(out, a[:b.size] + b)
    def scalar_add(self, a, val, out): _put(out, a + a.dtype.type(val))
    def ewise_mul(self, a, b, out): _put(out, a[:b.size] * b)
    def scalar_mul(self, a, val, out): _put(out, a * a.dtype.type(val))
    def ewise_div(self, a, b, out): _put(out, a[:b.size] / b)
    def scalar_div(self, a, val, out): _put(out, a / a.dtype.type(val))
    def scalar_power(self, a, val, out): _put(out, a ** a.dtype.type(val))
    def ewise_maximum(self, a, b, out): _put(out, np.maximum(a[:b.size], b))
    def scalar_maximum(self, a, val, out): _put(out, np.maximum(a, a.dtype.type(val)))
    def ewise_eq(self, a, b, out): _put(out, (a[:b.size] == b).astype(out.dtype))
    def scalar_eq(self, a, val, out): _put(out, (a == a.dtype.type(val)).astype(out.dtype))
    def ewise_ge(self, a, b, out): _put(out, (a[:b.size] >= b).astype(out.dtype))
    def scalar_ge(self, a, val, out): _put(out, (a >= a.dtype.type(val)).astype(out.dtype))
    def ewise_log(self, a, out): _put(out, np.log(a))
    def ewise_exp(self, a, out): _put(out, np.exp(a))
    def ewise_tanh(self, a, out): _put(out, np.tanh(a))

    def reduce_sum(self, a, out, reduce_size: int) -> None:
        """out[i] = sum of a[i*reduce_size : (i+1)*reduce_size]."""
        n = out.size if reduce_size else 0
        _put(out, np.asarray(a)[:n * reduce_size].reshape(n, reduce_size).sum(axis=1))

    def reduce_max(self, a, out, reduce_size: int) -> None:
        n = out.size
        _put(out, np.asarray(a)[:n * reduce_size].reshape(n, reduce_size).max(axis=1))

    def course_matmul(self, a, b, out, m: int, n: int, p: int) -> None:
        """out (m, p) = a (m, n) @ b (n, p), all compact row-major."""
        _put(out, np.asarray(a)[:m * n].reshape(m, n) @ np.asarray(b)[:n * p].reshape(n, p))

    def matmul_tiled(self, a, b, out, m: int, n: int, p: int) -> None:
        """The same product on tiled layouts: a is (m/t, n/t, t, t), b (n/t, p/t, t, t),
        out (m/t, p/t, t, t), each tile a row-major t x t block (t = __tile_size__)."""
        t = self.__tile_size__
        if m % t or n % t or p % t:
            from ..errors import ShapeError
            raise ShapeError(f"matmul_tiled: sizes ({m}, {n}, {p}) must be multiples of the tile size {t}")
        A = np.asarray(a)[:m * n].reshape(m // t, n // t, t, t)
        B = np.asarray(b)[:n * p].reshape(n // t, p // t, t, t)
        _put(out, np.einsum("ikab,kjbc->ijac", A, B))

    def course_to_numpy(self, a, shape, strides, offset) -> np.ndarray:
        return _strided(a, shape, strides, offset).copy()

    def course_from_numpy(self, a, out) -> None:
        _put(out, np.ascontiguousarray(a, dtype=out.dtype))
