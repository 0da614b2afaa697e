"""Basic tensor constructors.  Random ones draw from numpy's global RNG in the
course framework's order (`np.random.rand` / `randn` of the full shape), so seeded
code reproduces the course's values."""
import numpy as np

from .. import autograd
from ..backend_selection import cpu
from ..dtypes import dtype_name, np_dtype


def _tensor(array: np.ndarray, device, dtype, requires_grad: bool):
    return autograd.Tensor(array, device=device if device is not None else cpu(),
                           dtype=dtype, requires_grad=requires_grad)


def _shape(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def rand(*shape, low=0.0, high=1.0, device=None, dtype="float32", requires_grad=False):
    """Uniform in [low, high)."""
    array = np.random.rand(*_shape(shape)).astype(np_dtype(dtype)) * (high - low) + low
    return _tensor(array, device, dtype, requires_grad)


def randn(*shape, mean=0.0, std=1.0, device=None, dtype="float32", requires_grad=False):
    """Normal with the given mean and standard deviation."""
    array = np.random.randn(*_shape(shape)).astype(np_dtype(dtype)) * std + mean
    return _tensor(array, device, dtype, requires_grad)


def constant(*shape, c=1.0, device=None, dtype="float32", requires_grad=False):
    return _tensor(np.full(_shape(shape), c, dtype=np_dtype(dtype)), device, dtype, requires_grad)


def ones(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=1.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=0.0, device=device, dtype=dtype, requires_grad=requires_grad)


def randb(*shape, p=0.5, device=None, dtype="bool", requires_grad=False):
    """Bernoulli(p): True (1) with probability p."""
    array = np.random.rand(*_shape(shape)) <= p
    return _tensor(array.astype(np_dtype(dtype)), device, dtype, requires_grad)


def one_hot(n, i, device=None, dtype="float32", requires_grad=False):
    """Rows of the n x n identity selected by the integer labels `i`."""
    labels = i.numpy() if hasattr(i, "numpy") else np.asarray(i)
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        raise ValueError(f"one_hot: labels must lie in [0, {n}), got range [{labels.min()}, {labels.max()}]")
    return _tensor(np.eye(n, dtype=np_dtype(dtype))[labels], device, dtype, requires_grad)


def zeros_like(array, *, device=None, requires_grad=False):
    device = device if device is not None else array.device
    return zeros(*array.shape, dtype=dtype_name(array.dtype), device=device, requires_grad=requires_grad)


def ones_like(array, *, device=None, requires_grad=False):
    device = device if device is not None else array.device
    return ones(*array.shape, dtype=dtype_name(array.dtype), device=device, requires_grad=requires_grad)
