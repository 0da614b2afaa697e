"""Elementwise, reduction and matrix ops: `compute()` next to `gradient()`.

`compute()` is written against `needle.array_api`, so it runs on NDArrays (eager),
numpy arrays (NEEDLE_BACKEND=np) and lazy IR arrays (lazy mode records the graph).
Binary elementwise ops broadcast like numpy; their gradients sum back over the
broadcast axes.
"""
from __future__ import annotations

import builtins
import numbers
from typing import Optional

from .. import array_api as A
from ..autograd import Tensor, TensorOp
from ..dtypes import FLOATS, dtype_name
from ..errors import AxisError, DTypeError, ShapeError, fmt_shape, normalize_axes


def unbroadcast(grad: Tensor, shape: tuple) -> Tensor:
    """Sum `grad` over the axes that broadcasting added to reach its shape."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = len(grad.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and grad.shape[lead + i] != 1)
    out = summation(grad, axes) if axes else grad
    return reshape(out, shape)


# ---- elementwise with two tensors ---------------------------------------------------------
class EWiseAdd(TensorOp):
    def compute(self, a, b):
        return a + b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad, a.shape), unbroadcast(out_grad, b.shape)


def add(a, b):
    return EWiseAdd()(a, b)


class EWiseSub(TensorOp):
    def compute(self, a, b):
        return a - b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad, a.shape), unbroadcast(-out_grad, b.shape)


def subtract(a, b):
    return EWiseSub()(a, b)


class EWiseMul(TensorOp):
    def compute(self, a, b):
        return a * b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad * b, a.shape), unbroadcast(out_grad * a, b.shape)


def multiply(a, b):
    return EWiseMul()(a, b)


class EWiseDiv(TensorOp):
    def compute(self, a, b):
        return a / b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad / b, a.shape), unbroadcast(-out_grad * a / (b * b), b.shape)


def divide(a, b):
    return EWiseDiv()(a, b)


class EWisePow(TensorOp):
    """a ** b elementwise."""

    def compute(self, a, b):
        return a ** b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        grad_a = out_grad * b * power(a, b - 1)
        grad_b = out_grad * node * log(a)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def power(a, b):
    return EWisePow()(a, b)


# ---- elementwise with a scalar ------------------------------------------------------------
def _check_scalar(op: str, scalar):
    if not isinstance(scalar, numbers.Number) or isinstance(scalar, (bool, complex)):
        raise DTypeError(f"{op}: the scalar must be a real number, got {type(scalar).__name__} {scalar!r}")
    return scalar


def _require_float(op: str, a) -> None:
    """Ops defined only on floats say so under their own name (sigmoid is built from
    exp; without this its error would name exp)."""
    if a.dtype not in FLOATS:
        raise DTypeError(f"{op}: expects a floating dtype, got {a.dtype} (operand {fmt_shape(a.shape)}); cast first")


class AddScalar(TensorOp):
    def __init__(self, scalar):
        self.scalar = _check_scalar("add_scalar", scalar)

    def compute(self, a):
        return a + self.scalar

    def gradient(self, out_grad, node):
        return out_grad


def add_scalar(a, scalar):
    return AddScalar(scalar)(a)


class MulScalar(TensorOp):
    def __init__(self, scalar):
        self.scalar = _check_scalar("mul_scalar", scalar)

    def compute(self, a):
        return a * self.scalar

    def gradient(self, out_grad, node):
        return out_grad * self.scalar


def mul_scalar(a, scalar):
    return MulScalar(scalar)(a)


class DivScalar(TensorOp):
    def __init__(self, scalar):
        self.scalar = _check_scalar("divide_scalar", scalar)

    def compute(self, a):
        return a / self.scalar

    def gradient(self, out_grad, node):
        return out_grad / self.scalar


def divide_scalar(a, scalar):
    return DivScalar(scalar)(a)


class RDivScalar(TensorOp):
    """scalar / a (a true division: 0 / 1e-40 is 0, not 0 * inf)."""

    def __init__(self, scalar):
        self.scalar = _check_scalar("rdivide_scalar", scalar)

    def compute(self, a):
        return self.scalar / a

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        return -out_grad * node / a


def rdivide_scalar(a, scalar):
    return RDivScalar(scalar)(a)


class PowerScalar(TensorOp):
    """a ** scalar (any real exponent)."""

    def __init__(self, scalar):
        self.scalar = _check_scalar("power_scalar", scalar)

    def compute(self, a):
        return a ** self.scalar

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        if self.scalar == 0:
            return out_grad * 0
        return out_grad * self.scalar * power_scalar(a, self.scalar - 1)


def power_scalar(a, scalar):
    return PowerScalar(scalar)(a)


# ---- elementwise unary --------------------------------------------------------------------
class Negate(TensorOp):
    def compute(self, a):
        return -a

    def gradient(self, out_grad, node):
        return -out_grad


def negate(a):
    return Negate()(a)


class Exp(TensorOp):
    def compute(self, a):
        return A.exp(a)

    def gradient(self, out_grad, node):
        return out_grad * node


def exp(a):
    return Exp()(a)


class Log(TensorOp):
    def compute(self, a):
        return A.log(a)

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]


def log(a):
    return Log()(a)


class ReLU(TensorOp):
    def compute(self, a):
        return A.maximum(a, 0)

    def gradient(self, out_grad, node):
        return out_grad * positive_mask(node.inputs[0])


def relu(a):
    return ReLU()(a)


class PositiveMask(TensorOp):
    """1 where a > 0 else 0, in a's dtype; constant (zero gradient), used by relu'."""

    def compute(self, a):
        return A.astype(a > 0, a.dtype) if A._np(a) else a > 0

    def gradient(self, out_grad, node):
        return out_grad * 0


def positive_mask(a):
    return PositiveMask()(a)


class Tanh(TensorOp):
    def compute(self, a):
        return A.tanh(a)

    def gradient(self, out_grad, node):
        return out_grad * (1 - node * node)


def tanh(a):
    return Tanh()(a)


class Sigmoid(TensorOp):
    """1 / (1 + exp(-a)), written so that it never overflows and keeps its relative
    precision for negative inputs: with z = exp(-|a|) in (0, 1], sigmoid(|a|) =
    1 / (1 + z) and sigmoid(-|a|) = z / (1 + z).  ((tanh(a/2) + 1) / 2 cancels:
    it gave 0 from a = -17 on, so log(sigmoid(a)) was -inf.)"""

    def compute(self, a):
        _require_float("sigmoid", a)
        z = A.exp(-A.maximum(a, -a))
        positive = 1 / (z + 1)
        return A.where(a >= 0, positive, z * positive)

    def gradient(self, out_grad, node):
        return out_grad * node * (1 - node)


def sigmoid(a):
    return Sigmoid()(a)


class Sqrt(TensorOp):
    def compute(self, a):
        return A.sqrt(a)

    def gradient(self, out_grad, node):
        return out_grad / (node * 2)


def sqrt(a):
    return Sqrt()(a)


class AsType(TensorOp):
    """Cast to another dtype; the gradient is cast back."""

    def __init__(self, dtype):
        self.dtype = dtype_name(dtype)

    def compute(self, a):
        return A.astype(a, self.dtype)

    def gradient(self, out_grad, node):
        return astype(out_grad, node.inputs[0].dtype)


def astype(a, dtype):
    return a if a.dtype == dtype_name(dtype) else AsType(dtype)(a)


# ---- shapes -------------------------------------------------------------------------------
class Transpose(TensorOp):
    """Swap two axes: the last two by default (course semantics)."""

    def __init__(self, axes: Optional[tuple] = None):
        if axes is not None and (not _int_sequence(axes) or len(tuple(axes)) != 2):
            raise AxisError(f"transpose: expects two integer axes to swap, got {axes!r}")
        self.axes = None if axes is None else tuple(axes)

    def _order(self, ndim: int) -> tuple:
        if ndim < 2:
            raise ShapeError(f"transpose: needs at least 2 dims, got a {ndim}-d tensor")
        i, j = (ndim - 2, ndim - 1) if self.axes is None else normalize_axes_pair(self.axes, ndim)
        order = list(range(ndim))
        order[i], order[j] = order[j], order[i]
        return tuple(order)

    def compute(self, a):
        return A.permute(a, self._order(a.ndim))

    def gradient(self, out_grad, node):
        return transpose(out_grad, self.axes)


def normalize_axes_pair(axes, ndim):
    out = []
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise AxisError(f"transpose: axis {ax} out of range for a {ndim}-d tensor")
        out.append(ax % ndim)
    return out


def transpose(a, axes=None):
    return Transpose(axes)(a)


def _int_sequence(values) -> bool:
    """A sequence of integers (not bools, not floats that happen to be whole)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        return False
    return all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values)


class Permute(TensorOp):
    def __init__(self, axes: tuple):
        if not _int_sequence(axes):
            raise AxisError(f"permute: axes must be a tuple of integers, got {axes!r}")
        self.axes = tuple(axes)

    def compute(self, a):
        n = a.ndim
        if any(not -n <= ax < n for ax in self.axes) or sorted(ax % n for ax in self.axes) != list(range(n)):
            raise AxisError(f"permute: axes {self.axes} are not a permutation for shape {fmt_shape(a.shape)}")
        return A.permute(a, self.axes)

    def gradient(self, out_grad, node):
        n = len(self.axes)
        inverse = [0] * n
        for i, ax in enumerate(self.axes):
            inverse[ax % n] = i
        return permute(out_grad, tuple(inverse))


def permute(a, axes):
    return Permute(axes)(a)


class Reshape(TensorOp):
    def __init__(self, shape):
        self.shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)

    def compute(self, a):
        return A.reshape(a, self.shape)

    def gradient(self, out_grad, node):
        return reshape(out_grad, node.inputs[0].shape)


def reshape(a, shape):
    return Reshape(shape)(a)


class BroadcastTo(TensorOp):
    def __init__(self, shape):
        if isinstance(shape, numbers.Integral):
            shape = (shape,)
        if not _int_sequence(shape) or any(s < 0 for s in shape):
            raise ShapeError(f"broadcast_to: the shape must be non-negative integers, got {shape!r}")
        self.shape = tuple(int(s) for s in shape)

    def compute(self, a):
        return A.broadcast_to(a, self.shape)

    def gradient(self, out_grad, node):
        return unbroadcast(out_grad, node.inputs[0].shape)


def broadcast_to(a, shape):
    return BroadcastTo(shape)(a)


# ---- reductions ---------------------------------------------------------------------------
class Summation(TensorOp):
    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = axes
        self.keepdims = keepdims

    def compute(self, a):
        axes = normalize_axes("summation", self.axes, a.ndim, a.shape)
        return A.summation(a, axis=axes, keepdims=self.keepdims)

    def gradient(self, out_grad, node):
        shape = node.inputs[0].shape
        axes = normalize_axes("summation", self.axes, len(shape), shape)
        kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
        return broadcast_to(reshape(out_grad, kept), shape)


def summation(a, axes=None, keepdims=False):
    return Summation(axes, keepdims)(a)


def mean(a, axes=None, keepdims=False):
    _require_float("mean", a)
    axes_t = normalize_axes("mean", axes, len(a.shape), a.shape)
    count = 1
    for ax in axes_t:
        count *= a.shape[ax]
    return divide_scalar(summation(a, axes, keepdims), builtins.max(count, 1))


class Max(TensorOp):
    """Maximum over axes; the gradient is shared equally among tied maxima."""

    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = axes
        self.keepdims = keepdims

    def compute(self, a):
        axes = normalize_axes("max", self.axes, a.ndim, a.shape)
        for ax in axes:
            if a.shape[ax] == 0:
                raise ShapeError(f"max: cannot reduce over empty axis {ax} of shape {fmt_shape(a.shape)}")
        return A.amax(a, axis=axes, keepdims=self.keepdims)

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        axes = normalize_axes("max", self.axes, len(a.shape), a.shape)
        kept = tuple(1 if i in axes else s for i, s in enumerate(a.shape))
        mask = equal_mask(a, broadcast_to(reshape(node.detach(), kept), a.shape))
        count = broadcast_to(summation(mask, axes, keepdims=True), a.shape)
        return broadcast_to(reshape(out_grad, kept), a.shape) * mask / count


def max(a, axes=None, keepdims=False):  # noqa: A001 - the SPEC's name
    return Max(axes, keepdims)(a)


class EqualMask(TensorOp):
    """1 where a == b else 0, in a's dtype; constant (zero gradient)."""

    def compute(self, a, b):
        return A.astype(a == b, a.dtype) if A._np(a) else a == b

    def gradient(self, out_grad, node):
        return out_grad * 0, out_grad * 0


def equal_mask(a, b):
    return EqualMask()(a, b)


# ---- matmul -------------------------------------------------------------------------------
class MatMul(TensorOp):
    """Batched a @ b; batch dimensions broadcast both ways."""

    def compute(self, a, b):
        return A.matmul(a, b)

    def gradient(self, out_grad, node):
        a, b = node.inputs
        grad_a = matmul(out_grad, transpose(b))
        grad_b = matmul(transpose(a), out_grad)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def matmul(a, b):
    return MatMul()(a, b)
