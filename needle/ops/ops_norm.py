"""Standardization over one axis, (x - mean) / sqrt(var + eps) with the biased
variance: the core of BatchNorm and LayerNorm, as one op whose gradient is one op.

Built from a dozen ops (sums, broadcasts, a subtraction, a power, a division), a
norm layer cost every lazy step about 15 ops forward and 22 backward to build in
Python; an MLPResNet step spent most of its graph building there.  The kernels are
the same either way: `compute` writes the same arithmetic on arrays.  The gradient
op's own gradient (second order) differentiates an unfused reference made of ops
(`autograd.vjp`), so higher derivatives stay exact.
"""
from __future__ import annotations

import numbers

from .. import array_api as A
from ..autograd import Tensor, TensorOp, vjp
from ..errors import ArgumentError
from ..shapes import normalize_axes
from .ops_reduce import broadcast_to, summation


class Standardize(TensorOp):
    """(x - mean) / sqrt(var + eps) along `axis`.  After `compute`, `mean` and `var`
    hold that call's statistics as arrays (the axis kept as size 1), for running
    statistics; they need no gradient."""

    def __init__(self, axis: int, eps: float):
        if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
            raise ArgumentError(f"standardize: axis must be an integer, got {axis!r}")
        if not isinstance(eps, numbers.Real) or isinstance(eps, bool) or eps < 0:
            raise ArgumentError(f"standardize: eps must be a number >= 0, got {eps!r}")
        self.axis, self.eps = axis, eps
        self._mean = self._var = None

    @property
    def mean(self):
        return self._mean

    @property
    def var(self):
        return self._var

    def compute(self, x):
        axis = normalize_axes("standardize", self.axis, x.ndim, x.shape)
        n = x.shape[axis[0]]
        mean = A.summation(x, axis=axis, keepdims=True) / n
        centered = x - A.broadcast_to(mean, x.shape)
        var = A.summation(centered * centered, axis=axis, keepdims=True) / n
        self._mean, self._var = mean, var
        return centered / A.broadcast_to((var + self.eps) ** 0.5, x.shape)

    def gradient(self, out_grad, node):
        return StandardizeGradient(self)(out_grad, node.inputs[0])


class StandardizeGradient(TensorOp):
    """d/dx of Standardize given g = dL/d out: (g - mean(g) - x^ mean(g x^)) / std, the
    means along the axis, x^ the standardized x.  Reuses the forward's statistics."""

    def __init__(self, forward: Standardize):
        self.axis, self.eps = forward.axis, forward.eps
        self._stats = (forward.mean, forward.var)

    def compute(self, g, x):
        mean, var = self._stats
        axis = normalize_axes("standardize", self.axis, x.ndim, x.shape)
        n = x.shape[axis[0]]
        std = A.broadcast_to((var + self.eps) ** 0.5, x.shape)
        xhat = (x - A.broadcast_to(mean, x.shape)) / std
        mean_g = A.broadcast_to(A.summation(g, axis=axis, keepdims=True) / n, x.shape)
        mean_gx = A.broadcast_to(A.summation(g * xhat, axis=axis, keepdims=True) / n, x.shape)
        return (g - mean_g - xhat * mean_gx) / std

    def gradient(self, out_grad, node):
        g, x = node.inputs
        return tuple(vjp(_reference_gradient(g, x, self.axis, self.eps), out_grad, [g, x]))


def _reference_gradient(g: Tensor, x: Tensor, axis: int, eps: float) -> Tensor:
    """StandardizeGradient's value built from ops, for its own gradient."""
    axes = normalize_axes("standardize", axis, len(x.shape), x.shape)
    n = x.shape[axes[0]]

    def mean(t):
        return broadcast_to(summation(t, axes, keepdims=True) / n, x.shape)
    centered = x - mean(x)
    std = broadcast_to((summation(centered * centered, axes, keepdims=True) / n + eps) ** 0.5, x.shape)
    xhat = centered / std
    return (g - mean(g) - xhat * mean(g * xhat)) / std


def standardize(x, axis: int, eps: float = 1e-5):
    return Standardize(axis, eps)(x)
