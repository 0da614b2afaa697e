"""Standardization over one axis, (x - mean) / sqrt(var + eps) with the biased
variance: the core of BatchNorm and LayerNorm, as one op whose gradient is one op.

Built from a dozen ops (sums, broadcasts, a subtraction, a power, a division), a
norm layer cost every lazy step about 15 ops forward and 22 backward to build in
Python; an MLPResNet step spent most of its graph building there.  The kernels are
the same either way: `forward` writes the same arithmetic on arrays (a Fused op,
see ops_fused.py: one op per gradient, the second order through a reference made
of ops).
"""
from __future__ import annotations

import numbers

from .. import array_api as A
from ..autograd import Tensor
from ..errors import ArgumentError
from ..shapes import normalize_axes
from .ops_fused import Fused
from .ops_reduce import broadcast_to, summation


class Standardize(Fused):
    """(x - mean) / sqrt(var + eps) along `axis`.  After `compute`, `mean` and `var`
    hold that call's statistics as arrays (the axis kept as size 1), for running
    statistics (they need no gradient) and for the gradient, which reuses them."""

    static = ("axis", "eps")

    def __init__(self, axis: int, eps: float):
        if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
            raise ArgumentError(f"standardize: axis must be an integer, got {axis!r}")
        if not isinstance(eps, numbers.Real) or isinstance(eps, bool) or eps < 0:
            raise ArgumentError(f"standardize: eps must be a number >= 0, got {eps!r}")
        self.axis, self.eps = axis, eps

    @property
    def mean(self):
        return self.saved[0] if self.saved else None

    @property
    def var(self):
        return self.saved[1] if self.saved else None

    def _axes(self, x) -> tuple:
        axes = normalize_axes("standardize", self.axis, len(x.shape), x.shape)
        return axes, x.shape[axes[0]]

    def _statistics(self, x) -> tuple:
        """(mean, x - mean, var), the statistics with the axis kept as size 1."""
        axes, n = self._axes(x)
        mean = A.summation(x, axis=axes, keepdims=True) / n
        centered = x - A.broadcast_to(mean, x.shape)
        return mean, centered, A.summation(centered * centered, axis=axes, keepdims=True) / n

    def values(self, x):
        mean, _, var = self._statistics(x)
        return mean, var

    def forward(self, x):
        mean, centered, var = self._statistics(x)
        self.saved = mean, var
        return centered / A.broadcast_to((var + self.eps) ** 0.5, x.shape)

    def vjp(self, k, g, x):
        """(g - mean(g) - x^ mean(g x^)) / std, the means along the axis, x^ the
        standardized x (from the forward's statistics when they are x's)."""
        axes, n = self._axes(x)
        mean, var = self.kept(x)
        std = A.broadcast_to((var + self.eps) ** 0.5, x.shape)
        xhat = (x - A.broadcast_to(mean, x.shape)) / std
        mean_g = A.broadcast_to(A.summation(g, axis=axes, keepdims=True) / n, x.shape)
        mean_gx = A.broadcast_to(A.summation(g * xhat, axis=axes, keepdims=True) / n, x.shape)
        return (g - mean_g - xhat * mean_gx) / std

    def reference(self, x: Tensor) -> Tensor:
        axes, n = self._axes(x)
        centered = x - broadcast_to(summation(x, axes, keepdims=True) / n, x.shape)
        var = summation(centered * centered, axes, keepdims=True) / n
        return centered / broadcast_to((var + self.eps) ** 0.5, x.shape)


def standardize(x, axis: int, eps: float = 1e-5):
    return Standardize(axis, eps)(x)
