"""Basic tensor constructors.  Random ones draw from numpy's global RNG in the
course framework's order (`np.random.rand` / `randn` of the full shape), so seeded
code reproduces the course's values."""
import functools
import math
import numbers

import numpy as np

from .. import autograd
from ..engine import capture as _capture
from ..backend_selection import BACKEND, NDArray, cpu
from ..dtypes import dtype_name, np_dtype
from ..errors import ArgumentError, IndexingError, ShapeError
from ..runtime import numpy_rng


def _tensor(array: np.ndarray, device, dtype, requires_grad: bool):
    return autograd.Tensor(array, device=device if device is not None else cpu(),
                           dtype=dtype, requires_grad=requires_grad)


def _shape(shape, op: str = "init") -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(shape)
    if all(type(s) is int and s >= 0 for s in shape):  # (the common case, without numbers' slow ABC checks)
        return shape
    for s in shape:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool) or s < 0:
            raise ShapeError(f"{op}: dimensions must be non-negative integers, got {s!r} in shape {shape}")
    return tuple(int(s) for s in shape)


def _replayed(draw):
    """Random draws inside a step captured by needle.jit are made afresh at each
    replay, in the same order, from numpy's global RNG (so a jitted run equals the
    plain one bit for bit)."""
    @functools.wraps(draw)
    def drawn(*shape, **kwargs):
        t = draw(*shape, **kwargs)
        if _capture.CURRENT is not None:
            _capture.draw(draw, shape, kwargs, t)
        return t
    return drawn


@_replayed
def rand(*shape, low=0.0, high=1.0, device=None, dtype="float32", requires_grad=False):
    """Uniform in [low, high)."""
    array = np.random.rand(*_shape(shape, "rand")).astype(np_dtype(dtype)) * (high - low) + low
    return _tensor(array, device, dtype, requires_grad)


@_replayed
def randn(*shape, mean=0.0, std=1.0, device=None, dtype="float32", requires_grad=False):
    """Normal with the given mean and standard deviation."""
    array = np.random.randn(*_shape(shape, "randn")).astype(np_dtype(dtype)) * std + mean
    return _tensor(array, device, dtype, requires_grad)


def constant(*shape, c=1.0, device=None, dtype="float32", requires_grad=False):
    return _tensor(np.full(_shape(shape, "constant"), c, dtype=np_dtype(dtype)), device, dtype, requires_grad)


def ones(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=1.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=0.0, device=device, dtype=dtype, requires_grad=requires_grad)


@_replayed
def randb(*shape, p=0.5, device=None, dtype="bool", requires_grad=False):
    """Bernoulli(p): True (1) with probability p: `np.random.rand(*shape) <= p`, drawn
    by compiled code from the same stream where it can be (runtime/numpy_rng.py)."""
    shape = _shape(shape, "randb")
    if device is None:
        device = cpu()
    name = dtype_name(dtype)
    if BACKEND == "nd" and getattr(device, "on_host", False):  # drawn into the tensor's own storage
        storage = device.alloc(math.prod(shape), name)
        if numpy_rng.fill(storage, p):
            return autograd.Tensor.make_const(NDArray.make(shape, device=device, handle=storage, dtype=name),
                                              requires_grad=requires_grad)
        array = None  # (what `fill` refused here, `bernoulli` would refuse too)
    else:
        array = numpy_rng.bernoulli(shape, p, name)
    if array is None:
        array = np.asarray(np.random.rand(*shape) <= p).astype(np_dtype(dtype))  # (a scalar shape: a bool)
    return _tensor(array, device, dtype, requires_grad)


def one_hot(n, i, device=None, dtype="float32", requires_grad=False):
    """Rows of the n x n identity selected by the integer labels `i`."""
    i = autograd.host_argument(i, "one_hot")
    if isinstance(i, autograd.Tensor) and _capture.current() is not None and device in (None, i.device):
        return _captured_one_hot(n, i, dtype, requires_grad)
    values = np.asarray(i.numpy() if hasattr(i, "numpy") else i)
    _check_labels(n, values)
    labels = values.astype(np.int64)
    return _tensor(np.eye(n, dtype=np_dtype(dtype))[labels], device, dtype, requires_grad)


def _check_labels(n, values) -> None:
    values = np.asarray(values)
    if values.size and np.any(values != np.floor(values)):
        bad = values[values != np.floor(values)].reshape(-1)[0]
        raise ArgumentError(f"one_hot: labels must be whole numbers, got {bad}")
    labels = values.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        bad = labels[(labels < 0) | (labels >= n)].reshape(-1)[0]
        raise IndexingError(f"one_hot: label {bad} is out of range for {n} classes "
                            f"(labels span [{labels.min()}, {labels.max()}])")


def _captured_one_hot(n, labels, dtype, requires_grad):
    """one_hot of a Tensor's labels inside a step needle.jit captures: computed from the
    labels by kernels (a comparison with 0..n-1) instead of on the host, so each replay
    uses its call's labels; the labels are checked at each replay as on a plain call.
    Computed apart, as the plain call's constant is: its readers read it stored, as theirs
    do (a sum reading it computed inside would round by another kernel body)."""
    data = labels._cached_data
    if not (getattr(data, "is_lazy", False) and data.realized is None):  # (pending labels: not read)
        array = labels.realize_cached_data()
        _check_labels(n, array.numpy())
        _capture.check(array, lambda values: _check_labels(n, values))
    classes = autograd.Tensor(np.arange(n, dtype=np_dtype(labels.dtype)), device=labels.device,
                              dtype=labels.dtype, requires_grad=False)
    from .. import ops  # (ops build on init: imported when first needed)
    hot = ops.astype(ops.compare("eq", labels.reshape(tuple(labels.shape) + (1,)), classes), dtype).detach()
    hot.realize_cached_data()
    hot.requires_grad = requires_grad
    return hot


def zeros_like(array, *, device=None, requires_grad=False):
    device = device if device is not None else array.device
    return zeros(*array.shape, dtype=dtype_name(array.dtype), device=device, requires_grad=requires_grad)


def ones_like(array, *, device=None, requires_grad=False):
    device = device if device is not None else array.device
    return ones(*array.shape, dtype=dtype_name(array.dtype), device=device, requires_grad=requires_grad)
