"""Module functions with PyTorch's names (`torch.cat`, `torch.randn`, ...) over needle's
ops and init, for the habits PyTorch users bring: `needle.cat(xs, dim=0)`,
`needle.stack(xs, dim=1)`, `needle.where(c, a, b)`, `needle.arange(5)`,
`needle.manual_seed(0)`.  Random draws come from numpy's global RNG, in the course's
order, so `manual_seed` seeds numpy's.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import init, ops
from .autograd import Tensor
from .errors import ArgumentError

__all__ = ["cat", "concat", "stack", "where", "randn", "rand", "arange", "full", "manual_seed"]


def _axis(op: str, axis, dim):
    if dim is not None and axis is not None and dim != axis:
        raise ArgumentError(f"{op}: dim={dim} and axis={axis} disagree")
    return dim if dim is not None else (axis if axis is not None else 0)


def cat(tensors, dim: int = None, axis: int = None) -> Tensor:
    """Join `tensors` along an existing axis (numpy's concatenate)."""
    return ops.concatenate(tuple(tensors), axis=_axis("cat", axis, dim))


concat = cat


def stack(tensors, axis: int = None, dim: int = None) -> Tensor:
    """Join `tensors` along a new axis (the course's `stack(args, axis)` too)."""
    return ops.stack(tuple(tensors), axis=_axis("stack", axis, dim))


def where(condition, a, b) -> Tensor:
    """`a` where `condition` holds, else `b` (scalars allowed); gradients to a and b."""
    return ops.where(condition, a, b)


def _shape(shape) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def randn(*shape, dtype: str = "float32", device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal draws (numpy's global RNG: `manual_seed` seeds it)."""
    return init.randn(*_shape(shape), dtype=dtype, device=device, requires_grad=requires_grad)


def rand(*shape, dtype: str = "float32", device=None, requires_grad: bool = False) -> Tensor:
    """Uniform draws in [0, 1) (numpy's global RNG: `manual_seed` seeds it)."""
    return init.rand(*_shape(shape), dtype=dtype, device=device, requires_grad=requires_grad)


def full(shape, fill_value, dtype: str = "float32", device=None, requires_grad: bool = False) -> Tensor:
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    return init.constant(*shape, c=fill_value, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype: str = None, device=None, requires_grad: bool = False) -> Tensor:
    """`arange(n)` or `arange(start, end, step)`: int64 when every bound is an integer,
    else float32 (as torch)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ArgumentError(f"arange: step must not be 0 (arange({start}, {end}, {step}))")
    integral = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dtype = dtype or ("int64" if integral else "float32")
    return Tensor(np.arange(start, end, step), dtype=dtype, device=device, requires_grad=requires_grad)


def manual_seed(seed: int) -> None:
    """Seed the random draws needle makes (numpy's global RNG: init, Dropout, shuffling)."""
    np.random.seed(seed)
