"""A strided n-dimensional array: shape, strides (in elements), offset, device.

Views (views.py: `permute`, `broadcast_to`, `reshape` when strides allow it, `__getitem__`,
`flip`, `as_strided`) only change the metadata and share the storage; `compact()`
copies.  Arithmetic is delegated to the array's device, which owns the storage
format and the kernels (numpy for `cpu_numpy()`, compiled code for `cpu()`).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..dtypes import DTYPES, check_elementwise, dtype_name, np_dtype, require_same
from . import host_memory
from .course_api import as_buffer
from .device_identity import DeviceIdentity
from .operators import ArrayOperators
from .views import StridedViews
from ..errors import AxisError, DeviceError, DTypeError, NeedleError, ShapeError, fmt_shape
from ..shapes import broadcast_shapes, compact_strides, matmul_shapes, normalize_axes, prod


#: the device of arrays made without one: cpu(), which devices.py defines above this
#: module (a port, filled by needle/wiring.py)
DEFAULT_DEVICE = None


#: an NDArray's slots that a copy or a pickle leaves out (see NDArray.__getstate__)
_NOT_COPIED = ("_address", "_np", "__weakref__", "__dict__")


class NDArray(StridedViews, ArrayOperators):
    """A strided view on device storage.  `strides` and `offset` are in elements."""

    __slots__ = ("_shape", "_strides", "_offset", "_device", "_handle", "_dtype", "_np", "_address", "__weakref__")
    __array_priority__ = 1000  # numpy defers `ndarray op NDArray` to us

    def __init__(self, other, device=None, dtype=None):
        """Copy `other` (NDArray, numpy array or nested lists) onto `device`.
        The dtype defaults to the source NDArray's, else float32 (as in the course)."""
        if isinstance(other, NDArray):
            device = device if device is not None else other.device
            dtype = dtype_name(dtype if dtype is not None else other.dtype)
            if device == other.device:
                self._init_from(other.device.cast(other, dtype))
                return
            other = other.numpy()
        device = device if device is not None else DEFAULT_DEVICE
        dtype = dtype_name(dtype)
        _check_numeric(other, dtype)
        arr = host_memory.copy_of(other, np_dtype(dtype))
        self._init_from(NDArray.make(arr.shape, device=device, handle=device.from_numpy(arr), dtype=dtype))

    def _init_from(self, other: "NDArray") -> None:
        self._shape, self._strides, self._offset = other._shape, other._strides, other._offset
        self._device, self._handle, self._dtype, self._np = other._device, other._handle, other._dtype, None
        self._address = other._address

    _init = _init_from  # the course's name

    def __getstate__(self):
        """Copied and pickled without what belongs to this storage: the remembered address
        and the cached numpy view (a copy's storage is another).  A subclass's slots and
        `__dict__` come along."""
        slots = {name: getattr(self, name) for cls in type(self).__mro__ for name in getattr(cls, "__slots__", ())
                 if name not in _NOT_COPIED and hasattr(self, name)}
        return getattr(self, "__dict__", None), slots

    def __setstate__(self, state) -> None:
        attributes, slots = state
        if attributes:
            self.__dict__.update(attributes)
        for name, value in slots.items():
            setattr(self, name, value)
        self._address, self._np = None, None

    compact_strides = staticmethod(compact_strides)

    @staticmethod
    def make(shape, strides=None, device=None, handle=None, offset=0, dtype=None) -> "NDArray":
        """Create an array over `handle` (allocated if None) without copying.  The dtype
        defaults to the handle's (course code passes none), else float32."""
        if device is None:
            device = DEFAULT_DEVICE
        if dtype is None:
            dtype = "float32" if handle is None else handle.dtype
        array = NDArray.__new__(NDArray)
        array._shape = tuple(int(s) for s in shape)
        array._strides = compact_strides(array._shape) if strides is None else tuple(int(s) for s in strides)
        array._offset = int(offset)
        array._device = device
        array._dtype = dtype if dtype in DTYPES else dtype_name(dtype)
        if handle is None:
            handle = device.alloc(prod(array._shape), array._dtype)
        elif type(handle) is np.ndarray:
            handle = as_buffer(handle)  # host storage answers the course's `_handle.ptr()`
        array._handle = handle
        array._np = None
        array._address = None  # (host storage: its first element's address, once a kernel has read it)
        return array

    def _view(self, shape, strides, offset) -> "NDArray":
        return NDArray.make(shape, strides, self._device, self._handle, offset, self._dtype)

    # ---- metadata -------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def strides(self) -> tuple:
        return self._strides

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def device(self):
        return self._device

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return prod(self._shape)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]

    def is_compact(self) -> bool:
        """Row-major contiguous and covering its whole storage (the course's definition)."""
        return (self._strides == compact_strides(self._shape) and self._offset == 0
                and self.size == self._device.storage_size(self._handle))

    def is_contiguous(self) -> bool:
        """Row-major contiguous from `offset` (size-1 dims may have any stride)."""
        return all(st == cs for s, st, cs in zip(self._shape, self._strides, compact_strides(self._shape)) if s != 1)

    def compact(self) -> "NDArray":
        return self if self.is_compact() else self._device.copy(self)

    # ---- views (views.StridedViews), and writing through one ---------------------
    def __setitem__(self, idxs, other) -> None:
        view = self._index_view(idxs)
        if isinstance(other, NDArray):
            if other.device != self.device:
                raise DeviceError(f"setitem: value on {other.device} but array on {self.device}")
            if other.shape != view.shape:
                if other.size == view.size:
                    other = other.reshape(view.shape)
                else:
                    other = other.broadcast_to(view.shape)
            if other.dtype != self.dtype:
                other = other.astype(self.dtype)
        elif isinstance(other, numbers.Number):
            pass
        else:
            try:
                value = NDArray(np.asarray(other), device=self.device, dtype=self.dtype)
            except (TypeError, ValueError) as e:
                if isinstance(e, NeedleError):
                    raise
                raise DTypeError(f"setitem: cannot store {type(other).__name__} in a {self.dtype} array "
                                 f"of shape {fmt_shape(self.shape)}: {e}") from None
            return self.__setitem__(idxs, value)
        self._device.assign(view, other)

    # ---- conversion -----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a numpy array.  On the host, a compact array's storage is
        shared (no copy, as torch.Tensor.numpy(): writes to either show in both; the
        numpy array keeps the storage alive, and outputs never come from a pool);
        other views and device arrays are copied."""
        return self._device.to_numpy(self)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    @property
    def flat(self):
        """numpy's flat iterator over the live storage: `a.flat[j] += eps` writes through."""
        return self._device.numpy_view(self).flat

    def to(self, device) -> "NDArray":
        if not isinstance(device, DeviceIdentity):
            raise DeviceError(f"to: expected a needle device such as cpu(), got {device!r}")
        return self if device == self.device else NDArray(self.numpy(), device=device, dtype=self.dtype)

    def astype(self, dtype) -> "NDArray":
        dtype = dtype_name(dtype)
        return self if dtype == self._dtype else self._device.cast(self, dtype)

    def fill(self, value) -> None:
        self._device.assign(self, value)

    def item(self):
        if self.size != 1:
            raise ShapeError(f"item: NDArray of shape {fmt_shape(self.shape)} has {self.size} elements, not 1")
        return self.numpy().reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __repr__(self) -> str:
        return f"NDArray({self.numpy()}, device={self.device})"

    def __str__(self) -> str:
        return str(self.numpy())

    # ---- arithmetic -----------------------------------------------------------------
    def _binary(self, op: str, other, reverse: bool = False) -> "NDArray":
        if isinstance(other, NDArray):
            self._check_operand(op, other)
            check_elementwise(op, self.dtype, (self.shape, other.shape))
            a, b = (other, self) if reverse else (self, other)
            if a._shape != b._shape:
                shape = broadcast_shapes(op, a.shape, b.shape)
                a, b = a.broadcast_to(shape), b.broadcast_to(shape)
            return self._device.binary(op, a, b)
        if not isinstance(other, (numbers.Number, np.generic)):
            return NotImplemented
        check_elementwise(op, self.dtype, (self.shape,))
        return self._device.binary_scalar(op, self, other, reverse)

    def _check_operand(self, op: str, other: "NDArray") -> None:
        """Same device and dtype, or an error that names the op and both operands."""
        if other.device != self.device:
            raise DeviceError(f"{op}: operands on different devices: {fmt_shape(self.shape)} on {self.device} "
                              f"and {fmt_shape(other.shape)} on {other.device}")
        require_same(op, self.dtype, other.dtype, shapes=(self.shape, other.shape))

    def where(self, a: "NDArray", b: "NDArray") -> "NDArray":
        """`a` where self is nonzero, else `b` (all broadcast to one shape)."""
        shape = broadcast_shapes("where", self.shape, a.shape, b.shape)
        require_same("where", a.dtype, b.dtype, shapes=(a.shape, b.shape))
        return self._device.where(self.broadcast_to(shape), a.broadcast_to(shape), b.broadcast_to(shape))

    def _unary(self, op: str) -> "NDArray":
        check_elementwise(op, self.dtype, (self.shape,))
        return self._device.unary(op, self)

    def _reduce(self, op: str, axis, keepdims: bool) -> "NDArray":
        axes = normalize_axes(op, axis, self.ndim, self.shape)
        out = self._device.reduce(op, self, axes)  # keeps reduced axes as size 1
        if keepdims:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self._shape) if i not in axes))

    def sum(self, axis=None, keepdims=False): return self._reduce("sum", axis, keepdims)

    def reduce_view_out(self, axis, keepdims: bool = False):
        """The course's helper for reductions over one axis (or all): a view with that axis
        last, compact-reducible by `device.reduce_sum(view.compact()._handle, out._handle,
        view.shape[-1])`, and the output array."""
        if isinstance(axis, (tuple, list)):
            if len(axis) != 1:
                raise AxisError(f"reduce_view_out: one axis at a time, got {tuple(axis)}")
            axis = axis[0]
        if axis is None:
            view = self.compact().reshape((1,) * (self.ndim - 1) + (self.size,))
            return view, NDArray.make((1,) * (self.ndim if keepdims else 1), device=self.device, dtype=self.dtype)
        axis = normalize_axes("reduce_view_out", axis, self.ndim, self.shape)[0]
        view = self.permute(tuple(a for a in range(self.ndim) if a != axis) + (axis,))
        shape = tuple(1 if i == axis else s for i, s in enumerate(self.shape)) if keepdims else \
            tuple(s for i, s in enumerate(self.shape) if i != axis)
        return view, NDArray.make(shape, device=self.device, dtype=self.dtype)

    def ewise_or_scalar(self, other, ewise_func, scalar_func) -> "NDArray":
        """The course's dispatch: `ewise_func(a, b, out)` on compact handles for an NDArray,
        `scalar_func(a, value, out)` for a number."""
        out = NDArray.make(self.shape, device=self.device, dtype=self.dtype)
        if isinstance(other, NDArray):
            if other.shape != self.shape:
                raise ShapeError(f"ewise_or_scalar: shapes {fmt_shape(self.shape)} and {fmt_shape(other.shape)} differ")
            ewise_func(self.compact()._handle, other.compact()._handle, out._handle)
        else:
            scalar_func(self.compact()._handle, other, out._handle)
        return out
    def max(self, axis=None, keepdims=False): return self._reduce("max", axis, keepdims)

    def __matmul__(self, other: "NDArray") -> "NDArray":
        if not isinstance(other, NDArray):
            return NotImplemented
        self._check_operand("matmul", other)
        batch, m, k, n = matmul_shapes(self.shape, other.shape)
        a = self.broadcast_to(batch + (m, k))
        b = other.broadcast_to(batch + (k, n))
        return self._device.matmul(a, b)

    def pad(self, axes) -> "NDArray":
        """Zero padding: `axes` holds a (before, after) pair per axis."""
        axes = tuple(tuple(int(p) for p in pair) for pair in axes)
        if len(axes) != self.ndim or any(len(p) != 2 or min(p) < 0 for p in axes):
            raise ShapeError(f"pad: need one non-negative (before, after) pair per axis of "
                             f"{fmt_shape(self.shape)}, got {axes}")
        out = self._device.full(tuple(s + l + r for s, (l, r) in zip(self._shape, axes)), 0, self._dtype)
        out[tuple(slice(l, l + s) for s, (l, _) in zip(self._shape, axes))] = self
        return out


def _check_numeric(data, dtype: str) -> None:
    """numpy would turn None into nan and drop imaginary parts without a word."""
    if data is None or isinstance(data, complex) or \
            (isinstance(data, np.ndarray) and data.dtype.kind in "cOV"):
        what = type(data).__name__ if not isinstance(data, np.ndarray) else f"{data.dtype} array"
        raise DTypeError(f"array: cannot make a {dtype} array from {what}; expected real numbers")
    if isinstance(data, (list, tuple)):
        try:
            kind = np.asarray(data).dtype.kind
        except (ValueError, TypeError):
            return  # ragged or mixed: the conversion itself reports it
        if kind in "cO":
            raise DTypeError(f"array: cannot make a {dtype} array from a list holding "
                             f"{'complex numbers' if kind == 'c' else 'non-numbers'}; expected real numbers")
