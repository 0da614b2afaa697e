"""Comparisons, argmax/argmin and the everyday reductions built from primitives.

Comparisons give bool tensors, as torch and numpy do, as constants (no gradient): a
bool tensor indexes as a mask, and in arithmetic it counts as float32 0/1
(tensor_methods).
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import array_api as A
from ..autograd import Tensor, TensorOp
from ..dtypes import FLOATS
from ..errors import ArgumentError, ShapeError, fmt_shape
from ..shapes import normalize_axes
from .ops_elementwise import astype
from .ops_indexing import host_array
from .ops_reduce import max as reduce_max
from .ops_reduce import summation
from .ops_shape import reshape

_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _compare_arrays(op: str, a, b):
    if A._np(a):
        out = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
               "eq": np.equal, "ne": np.not_equal}[op](a, b)
        return np.asarray(out).astype(a.dtype)
    return {"lt": a.__lt__, "le": a.__le__, "gt": a.__gt__, "ge": a.__ge__, "eq": a.__eq__, "ne": a.__ne__}[op](b)


class Compare(TensorOp):
    """a <op> b elementwise (b a tensor or a scalar), 1 or 0 in a's dtype."""

    def __init__(self, op: str, scalar=None):
        self.op = op
        self.scalar = scalar

    @property
    def name(self) -> str:
        return self.op

    def compute(self, a, b=None):
        return A.astype(_compare_arrays(self.op, a, self.scalar if b is None else b), "bool")

    def gradient(self, out_grad, node):
        return tuple(None for _ in node.inputs)


def _float(t: Tensor) -> Tensor:
    return t if t.dtype in FLOATS else astype(t, "float32")


def compare(op: str, a: Tensor, b) -> Tensor:
    """`a <op> b` for op in lt le gt ge eq ne: a constant bool tensor."""
    a = _float(a).const_of()
    if isinstance(b, (numbers.Number, np.generic)) and not isinstance(b, bool):
        out = Compare(op, b)(a)
    else:
        if not isinstance(b, Tensor):
            b = Tensor(np.asarray(b), device=a.device, dtype=a.dtype, requires_grad=False)
        b = b.const_of()
        if b.dtype != a.dtype:
            b = astype(b, a.dtype)
        out = Compare(op)(a, b)
    return out


# ---- argmax / argmin ------------------------------------------------------------------------
class ArgMax(TensorOp):
    """Position of the first maximum along `axis` (None: of the flattened tensor), as
    int64.  Built from primitives: n - max(eq * (n - position)) where eq marks the
    maxima (and NaNs, which numpy's argmax reports first)."""

    def __init__(self, axis=None, keepdims: bool = False, name: str = "argmax"):
        self.axis = axis
        self.keepdims = keepdims
        self.op_name = name

    def compute(self, a):
        shape = a.shape
        if self.axis is None:
            a = A.reshape(a, (int(np.prod(a.shape)),))
            axis = 0
        else:
            axes = normalize_axes(self.op_name, self.axis, a.ndim, a.shape)
            if len(axes) != 1:
                raise ArgumentError(f"{self.op_name}: one axis or None (the whole tensor), got {self.axis!r}")
            axis = axes[0]
        n = a.shape[axis]
        if n == 0:
            where = f"over empty axis {axis} of" if self.axis is not None else "the empty"
            raise ShapeError(f"{self.op_name}: cannot reduce {where} shape {fmt_shape(shape)}")
        m = A.broadcast_to(A.amax(a, axis=axis, keepdims=True), a.shape)
        hit = _compare_arrays("eq", a, m) + _compare_arrays("ne", a, a)
        shape = [1] * a.ndim
        shape[axis] = n
        rank = np.arange(n, 0, -1, dtype=np.dtype(str(a.dtype))).reshape(shape)
        rank = A.broadcast_to(host_array(rank, a), a.shape)  # n, n-1, ..., 1 along the axis
        best = A.amax(hit * rank, axis=axis, keepdims=self.keepdims and self.axis is not None)
        return A.astype(n - best, "int64")

    def gradient(self, out_grad, node):
        return (None,)


def argmax(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return ArgMax(axis, keepdims)(_float(a).const_of())


def argmin(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return ArgMax(axis, keepdims, "argmin")((-_float(a)).const_of())


# ---- reductions -------------------------------------------------------------------------------
def amin(a: Tensor, axes=None, keepdims: bool = False) -> Tensor:
    """Minimum over axes: -max(-a) for floats (the gradient is shared among tied
    minima).  Integers go through top - a, top = 255 for uint8 and -1 otherwise,
    which maps every value into range (-a does not: -0 - 1 wraps in uint8, -(-2**31)
    in int32); bools through uint8."""
    for ax in normalize_axes("min", axes, len(a.shape), a.shape):  # (errors named as the user's op)
        if a.shape[ax] == 0:
            raise ShapeError(f"min: cannot reduce over empty axis {ax} of shape {fmt_shape(a.shape)}")
    if a.dtype in FLOATS:
        return -reduce_max(-a, axes, keepdims=keepdims)
    if a.dtype == "bool":
        return astype(amin(astype(a, "uint8"), axes, keepdims), "bool")
    top = 255 if a.dtype == "uint8" else -1
    with np.errstate(over="ignore"):  # (the np backend's 0-d results warn of the intended wrap)
        return top - reduce_max(top - a, axes, keepdims=keepdims)


def var(a: Tensor, axes=None, keepdims: bool = False, correction: int = 1) -> Tensor:
    """Variance over axes, unbiased by default (divides by N - correction, as PyTorch)."""
    axes_t = normalize_axes("var", axes, len(a.shape), a.shape)
    count = int(np.prod([a.shape[i] for i in axes_t])) if axes_t else 1
    kept = tuple(1 if i in axes_t else s for i, s in enumerate(a.shape))
    mean = reshape(summation(a, axes_t, keepdims=True) / max(count, 1), kept)
    centered = a - mean.broadcast_to(a.shape)
    squares = summation(centered * centered, axes_t, keepdims=keepdims)
    if count - correction <= 0:  # PyTorch gives nan (and warns) for too few elements
        return squares * float("nan")
    return squares / (count - correction)


class Abs(TensorOp):
    def compute(self, a):
        return np.abs(a) if A._np(a) else a.abs()

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        sign = astype(compare("gt", a, 0), out_grad.dtype) - astype(compare("lt", a, 0), out_grad.dtype)
        return out_grad * sign


def absolute(a: Tensor) -> Tensor:
    return Abs()(a)
