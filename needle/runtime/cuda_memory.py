"""Device memory for cuda(): pooled allocations, host copies, the setitem kernel.

- `DeviceBuffer`: flat storage of `size` elements of `dtype` (an NDArray's handle
  on cuda()), taken from `POOL`, which keeps released allocations by rounded size
  so a training loop does not cudaMalloc every step.  All work runs in order on
  one stream, so memory released after launching its last reader is safe to reuse.
- `from_numpy` / `to_numpy`: host copies (`to_numpy` copies only the span a
  strided view touches, then takes the view on the host).
- `assign`: `NDArray.__setitem__` and `fill` — one small grid-stride kernel per
  dtype writing a strided view from another view or a scalar.
- `HostView` / `FlatAccess`: what `numpy_view` and `.flat` give without live host
  memory (element reads and writes through copies).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import itemsize, np_dtype
from . import counters
from .cuda_driver import function, require
from .pool import IdleBuffers


class DevicePool(IdleBuffers):
    """Device allocations reused by (rounded) size; idle ones bounded like the host pool's."""

    @staticmethod
    def rounded(nbytes: int) -> int:
        nbytes = max(int(nbytes), 1)
        grain = max(512, 1 << max(0, nbytes.bit_length() - 4))  # at most 1/8 wasted
        return -(-nbytes // grain) * grain

    def acquire(self, nbytes: int):
        size = self.rounded(nbytes)
        alloc = self.take(size)
        if alloc is not None:
            return alloc, size
        drv = require()["drv"]
        try:
            return drv.mem_alloc(size), size
        except drv.MemoryError:
            self.clear()
            return drv.mem_alloc(size), size

    def release(self, alloc, size: int) -> None:
        self.put(alloc, size)


POOL = DevicePool()


class DeviceAddress(int):
    """A device pointer that is also callable, so the course's `a._handle.ptr()`
    shared-storage checks work on cuda() as on the host (`ptr + offset` stays an int)."""

    def __call__(self) -> int:
        return int(self)


class DeviceBuffer:
    """Flat device storage of `size` elements of `dtype` (an NDArray's handle on cuda())."""

    __slots__ = ("size", "dtype", "itemsize", "alloc", "nbytes", "ptr", "__weakref__")

    def __init__(self, size: int, dtype: str):
        self.size, self.dtype, self.itemsize = int(size), dtype, itemsize(dtype)
        self.alloc, self.nbytes = POOL.acquire(self.size * self.itemsize)
        self.ptr = DeviceAddress(int(self.alloc))

    def __del__(self):
        try:
            POOL.release(self.alloc, self.nbytes)
        except Exception:  # interpreter shutdown
            pass


def from_numpy(array: np.ndarray) -> DeviceBuffer:
    array = np.ascontiguousarray(array).reshape(-1)
    buf = DeviceBuffer(array.size, array.dtype.name)
    if array.size:
        require()["drv"].memcpy_htod(buf.ptr, array)
    return buf


def _span(a) -> tuple:
    """[lo, hi) in elements of the storage that view `a` touches."""
    lo = a.offset + sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = a.offset + sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + 1
    return lo, hi


def to_numpy(a) -> np.ndarray:
    """A host copy of NDArray `a` (copies only the span its view touches)."""
    dtype = np_dtype(a.dtype)
    if a.size == 0:
        return np.empty(a.shape, dtype=dtype)
    lo, hi = _span(a)
    host = np.empty(hi - lo, dtype=dtype)
    require()["drv"].memcpy_dtoh(host, a._handle.ptr + lo * host.itemsize)
    view = np.lib.stride_tricks.as_strided(host[a.offset - lo:], a.shape, [s * host.itemsize for s in a.strides])
    return np.array(view, copy=True)


class FlatAccess:
    """`a.flat[j]` reads and `a.flat[j] = v` writes one element of device storage
    (course code nudging one entry for finite differences)."""

    def __init__(self, a):
        self.a = a

    def _address(self, j: int) -> int:
        a = self.a
        if not -a.size <= j < a.size:
            raise IndexError(f"flat index {j} out of range for size {a.size}")
        j %= a.size
        offset = a.offset
        for n, s in zip(reversed(a.shape), reversed(a.strides)):
            offset += (j % n) * s
            j //= n
        return a._handle.ptr + offset * a._handle.itemsize

    def __getitem__(self, j):
        out = np.empty(1, dtype=np_dtype(self.a.dtype))
        require()["drv"].memcpy_dtoh(out, self._address(int(j)))
        return out[0]

    def __setitem__(self, j, value):
        require()["drv"].memcpy_htod(self._address(int(j)), np.array([value], dtype=np_dtype(self.a.dtype)))

    def __len__(self):
        return self.a.size


class HostView:
    """What `numpy_view` gives on cuda(): no live host memory exists, so `.flat`
    reads and writes elements through copies and `np.asarray` copies the data."""

    def __init__(self, a):
        self.a, self.flat = a, FlatAccess(a)

    def __array__(self, dtype=None, copy=None):
        out = to_numpy(self.a)
        return out if dtype is None else out.astype(dtype)


ASSIGN_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long",
                "uint8": "unsigned char", "bool": "unsigned char"}


def _assign_source() -> str:
    """dst[view] = src[view] (mode 0) or a value (mode 1: fvalue, 2: ivalue), one kernel
    per dtype; meta = shape, dst strides, src strides (elements)."""
    kernels = []
    for dtype, t in ASSIGN_TYPES.items():
        kernels.append(
            f'extern "C" __global__ void nd_assign_{dtype}({t}* __restrict__ dst, const {t}* __restrict__ src, '
            f"const long long* __restrict__ meta, long long n, long long ndim, double fvalue, long long ivalue, "
            f"long long mode) {{\n"
            f"  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
            f"i += (long long)gridDim.x * blockDim.x) {{\n"
            f"    long long rest = i, d = 0, s = 0;\n"
            f"    for (long long k = ndim - 1; k >= 0; --k) {{\n"
            f"      const long long idx = rest % meta[k];\n"
            f"      rest /= meta[k];\n"
            f"      d += idx * meta[ndim + k];\n"
            f"      s += idx * meta[2 * ndim + k];\n"
            f"    }}\n"
            f"    dst[d] = mode == 0 ? src[s] : mode == 1 ? ({t})fvalue : ({t})ivalue;\n"
            f"  }}\n}}\n")
    return "".join(kernels)


def assign(view, value) -> None:
    """`view[...] = value` (an NDArray on cuda() of view's shape and dtype, or a scalar)."""
    s = require()
    if view.size == 0:
        return
    src_ptr, src_strides, mode, fvalue, ivalue = 0, (0,) * view.ndim, 1, 0.0, 0
    if hasattr(value, "_handle"):
        if value._handle is view._handle:  # may overlap: copy the source first
            value = value.device.copy(value)
        src_ptr = value._handle.ptr + value.offset * value._handle.itemsize
        src_strides, mode = value.strides, 0
    elif view.dtype in ("float32", "float64"):
        fvalue = float(value)
    else:
        ivalue, mode = int(bool(value)) if view.dtype == "bool" else int(value), 2
    meta = from_numpy(np.array(list(view.shape) + list(view.strides) + list(src_strides) or [0], dtype=np.int64))
    fn = function(_assign_source(), f"nd_assign_{view.dtype}", "PPPqqdqq")
    block = 256
    grid = max(1, min(-(-view.size // block), s["sms"] * 32))
    dst_ptr = view._handle.ptr + view.offset * view._handle.itemsize
    fn.prepared_call((grid, 1), (block, 1, 1), dst_ptr, src_ptr, meta.ptr, np.int64(view.size),
                     np.int64(view.ndim), np.float64(fvalue), np.int64(ivalue), np.int64(mode))
    counters.add("kernels_launched")
