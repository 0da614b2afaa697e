"""Devices own storage and kernels; NDArray only keeps the strided metadata.

- `cpu_numpy()`: storage is a flat numpy array, every op runs numpy (the reference).
- `cpu()`: the same storage; each op runs one compiled kernel (the engine's
  eager executor, through the `CompiledDevice.eager` port).
- `cuda()`: storage on an NVIDIA GPU through PyCUDA (`needle.runtime.cuda`,
  through the `CUDADevice.runtime` port).
"""
from __future__ import annotations

from typing import Optional, Protocol

import numpy as np

from ..dtypes import NAMES, np_dtype
from . import host_memory, numpy_kernels
from .course_api import CourseKernels
from .device_identity import DeviceIdentity
from .ndarray import NDArray


class Device(DeviceIdentity):
    """Base class of the devices: identity, creation helpers shared by all."""

    on_host = False  # whether storage is host memory, which may be kept between steps

    # creation helpers of the course framework; randomness comes from numpy's global RNG
    def randn(self, *shape, dtype="float32") -> NDArray:
        return NDArray(np.random.randn(*shape), device=self, dtype=dtype)

    def rand(self, *shape, dtype="float32") -> NDArray:
        return NDArray(np.random.rand(*shape), device=self, dtype=dtype)

    def one_hot(self, n, i, dtype="float32") -> NDArray:
        return NDArray(np.eye(n, dtype=np_dtype(dtype))[np.asarray(i, dtype=np.int64)], device=self, dtype=dtype)

    def empty(self, shape, dtype="float32") -> NDArray:
        return NDArray.make(tuple(shape), device=self, dtype=dtype)

    def full(self, shape, fill_value, dtype="float32") -> NDArray:
        out = self.empty(shape, dtype)
        out.fill(fill_value)
        return out

    def zeros(self, *shape, dtype="float32") -> NDArray:
        return self.full(_shape_arg(shape), 0, dtype)

    def ones(self, *shape, dtype="float32") -> NDArray:
        return self.full(_shape_arg(shape), 1, dtype)

    def fused(self, op_key, fn, arrays) -> tuple:
        """`fn(*arrays)`: a fused op's array code (a tuple of arrays), op by op here."""
        return tuple(fn(*arrays))


def _shape_arg(shape) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


class HostDevice(CourseKernels, Device):
    """Storage in host memory as a flat numpy array; ops run numpy.  The course's
    handle-level functions (`compact`, `ewise_add`, `matmul_tiled`, ...) come from
    CourseKernels."""

    on_host = True  # storage is host memory (a NumPy array)

    # ---- storage ----------------------------------------------------------------------
    def alloc(self, size: int, dtype: str):
        return host_memory.empty(size, np_dtype(dtype))

    def storage_size(self, handle) -> int:
        return handle.size

    def from_numpy(self, array: np.ndarray, out=None):
        if out is not None:  # the course's from_numpy(array, out_handle)
            return self.course_from_numpy(array, out)
        return np.asarray(array, order="C").reshape(-1)

    def numpy_view(self, a: NDArray) -> np.ndarray:
        """A numpy view on the live storage (writes go through)."""
        if a._np is None:
            item = a._handle.itemsize
            a._np = np.ndarray(a.shape, a._handle.dtype, buffer=a._handle, offset=a.offset * item,
                               strides=tuple(s * item for s in a.strides))
        return a._np

    def to_numpy(self, a: NDArray, shape=None, strides=None, offset=0) -> np.ndarray:
        if shape is not None:  # the course's to_numpy(handle, shape, strides, offset)
            return self.course_to_numpy(a, shape, strides, offset)
        view = self.numpy_view(a)
        if a.is_compact():  # zero copy, as torch.Tensor.numpy(): the array keeps the storage alive
            return view.view()
        return np.array(view, copy=True)

    def wrap(self, result: np.ndarray, dtype=None) -> NDArray:
        """An NDArray owning the numpy result (copied only if not contiguous)."""
        result = np.asarray(result, dtype=np_dtype(dtype) if dtype else None, order="C")
        return NDArray.make(result.shape, device=self, handle=result.reshape(-1), dtype=NAMES[result.dtype])

    def assign(self, view: NDArray, value) -> None:
        self.numpy_view(view)[...] = self.numpy_view(value) if isinstance(value, NDArray) else value

    # ---- primitives -------------------------------------------------------------------
    def copy(self, a: NDArray) -> NDArray:
        return self.wrap(self.numpy_view(a).copy())

    def cast(self, a: NDArray, dtype: str) -> NDArray:
        return self.wrap(self.numpy_view(a).astype(np_dtype(dtype)))

    def unary(self, op: str, a: NDArray) -> NDArray:
        return self.wrap(numpy_kernels.unary(op, self.numpy_view(a)))

    def binary(self, op: str, a: NDArray, b: NDArray) -> NDArray:
        return self.wrap(numpy_kernels.binary(op, self.numpy_view(a), self.numpy_view(b), np_dtype(a.dtype)))

    def binary_scalar(self, op: str, a: NDArray, scalar, reverse: bool) -> NDArray:
        x, s = self.numpy_view(a), np_dtype(a.dtype).type(scalar)
        return self.wrap(numpy_kernels.binary(op, s, x, x.dtype) if reverse else numpy_kernels.binary(op, x, s, x.dtype))

    def where(self, cond: NDArray, a: NDArray, b: NDArray) -> NDArray:
        return self.wrap(np.where(self.numpy_view(cond) != 0, self.numpy_view(a), self.numpy_view(b)))

    def reduce(self, op: str, a: NDArray, axes: tuple) -> NDArray:
        return self.wrap(numpy_kernels.reduce(op, self.numpy_view(a), axes))

    def matmul(self, a: NDArray, b: NDArray, out=None, m=None, n=None, p=None) -> NDArray:
        if out is not None:  # the course's matmul(a, b, out, m, n, p) on handles
            return self.course_matmul(a, b, out, m, n, p)
        return self.wrap(numpy_kernels.matmul(self.numpy_view(a), self.numpy_view(b)))


class CPUNumpyDevice(HostDevice):
    """The reference device: numpy, op by op."""

    name = "cpu_numpy"


class EagerKernels(Protocol):
    """The port through which storage runs a primitive as a compiled kernel: storage
    sits below the compiler and knows nothing of the IR, so the engine's executor
    (needle.engine.eager) is plugged in by needle's composition root (needle/wiring.py)."""

    def copy(self, a): ...
    def cast(self, a, dtype): ...
    def unary(self, op, a): ...
    def binary(self, op, a, b): ...
    def binary_scalar(self, op, a, scalar, reverse): ...
    def where(self, cond, a, b): ...
    def reduce(self, op, a, axes): ...
    def matmul(self, a, b): ...
    def fused(self, op_key, fn, arrays): ...


class CUDAStorage(Protocol):
    """The port through which the CUDA device reaches device memory and the driver
    (needle.runtime.cuda, which imports PyCUDA lazily), plugged in by needle/wiring.py."""

    DeviceBuffer: type
    HostView: type

    def require(self) -> dict: ...
    def available(self) -> tuple: ...
    def from_numpy(self, array: np.ndarray): ...
    def to_numpy(self, a: NDArray) -> np.ndarray: ...
    def assign(self, view: NDArray, value) -> None: ...


class CompiledDevice:
    """Primitives as compiled kernels, one per op (eager mode), built by the same
    compiler that fuses lazy graphs, through the `eager` port (EagerKernels)."""

    eager: Optional[EagerKernels] = None

    def copy(self, a):
        return self.eager.copy(a)

    def cast(self, a, dtype):
        return self.eager.cast(a, dtype)

    def unary(self, op, a):
        return self.eager.unary(op, a)

    def binary(self, op, a, b):
        return self.eager.binary(op, a, b)

    def binary_scalar(self, op, a, scalar, reverse):
        return self.eager.binary_scalar(op, a, scalar, reverse)

    def where(self, cond, a, b):
        return self.eager.where(cond, a, b)

    def reduce(self, op, a, axes):
        return self.eager.reduce(op, a, axes)

    def matmul(self, a, b, out=None, m=None, n=None, p=None):
        if out is not None:  # the course's matmul(a, b, out, m, n, p) on handles
            return self.course_matmul(a, b, out, m, n, p)
        return self.eager.matmul(a, b)

    def fused(self, op_key, fn, arrays) -> tuple:
        """`fn(*arrays)` as one schedule (a fused op's forward: engine.eager.fused)."""
        return self.eager.fused(op_key, fn, arrays)


class CPUDevice(CompiledDevice, HostDevice):
    """The compiled CPU device: host storage (copies into views and fills stay
    plain host memory operations), each primitive one compiled kernel."""

    name = "cpu"


class CUDADevice(CompiledDevice, Device):
    """NVIDIA GPU through PyCUDA: storage is device memory (a DeviceBuffer of the
    CUDA runtime, reached through the `runtime` port, CUDAStorage; PyCUDA is imported
    lazily, so `cuda()` exists, prints and answers `enabled()` on any machine;
    touching its storage without PyCUDA, a driver or a GPU raises one DeviceError
    that names the missing piece); every primitive runs as one generated CUDA kernel."""

    name = "cuda"
    runtime: Optional[CUDAStorage] = None

    def _rt(self):
        self.runtime.require()
        return self.runtime

    def enabled(self) -> bool:
        return self.runtime.available()[0]

    # ---- storage ----------------------------------------------------------------------
    def alloc(self, size: int, dtype: str):
        return self._rt().DeviceBuffer(size, dtype)

    def storage_size(self, handle) -> int:
        return handle.size

    def from_numpy(self, array: np.ndarray):
        return self._rt().from_numpy(array)

    def to_numpy(self, a: NDArray) -> np.ndarray:
        return self._rt().to_numpy(a)

    def numpy_view(self, a: NDArray):
        """No live host memory on a GPU: an object whose `.flat` reads and writes
        single elements through copies, and which `np.asarray` copies."""
        return self._rt().HostView(a)

    def assign(self, view: NDArray, value) -> None:
        self._rt().assign(view, value)

    def wrap(self, result: np.ndarray, dtype=None) -> NDArray:
        result = np.asarray(result, dtype=np_dtype(dtype) if dtype else None)
        return NDArray(result, device=self, dtype=result.dtype.name)


_CPU_NUMPY = CPUNumpyDevice()
_CPU = CPUDevice()
_CUDA = CUDADevice()


def cpu_numpy() -> CPUNumpyDevice:
    return _CPU_NUMPY


def cpu() -> CPUDevice:
    return _CPU


def cuda() -> CUDADevice:
    return _CUDA


def default_device() -> Device:
    return _CPU


def all_devices() -> list:
    return [_CPU_NUMPY, _CPU, _CUDA]
