"""needle's strided array backend (`needle.nd`): NDArray and its devices."""
import numpy as _np

from ..array_api import (amax as max, broadcast_to, concatenate, exp, flip, log, matmul,  # noqa: F401
                         maximum, pad, permute, reshape, split, stack, summation, swapaxes, tanh, where)
from ..dtypes import dtype_name
from .devices import (Device, all_devices, cpu, cpu_numpy, cuda, default_device)  # noqa: F401
from ..shapes import broadcast_shapes, compact_strides, prod  # noqa: F401
from .ndarray import NDArray  # noqa: F401

BackendDevice = Device


def array(a, dtype="float32", device=None) -> NDArray:
    """Copy array-like `a` into a new NDArray (course: `nd.array`)."""
    return NDArray(a, device=device, dtype=dtype)


def empty(shape, dtype="float32", device=None) -> NDArray:
    return (device or default_device()).empty(tuple(shape), dtype_name(dtype))


def full(shape, fill_value, dtype="float32", device=None) -> NDArray:
    return (device or default_device()).full(tuple(shape), fill_value, dtype_name(dtype))


def sum(a, axis=None, keepdims=False):  # noqa: A001 - the course's name
    return summation(a, axis=axis, keepdims=keepdims)


def negative(a):
    return -a


def transpose(a, axes=None):
    return permute(a, tuple(reversed(range(a.ndim))) if axes is None else axes)


def from_numpy(a: _np.ndarray, device=None) -> NDArray:
    return NDArray(a, device=device, dtype=a.dtype.name)
