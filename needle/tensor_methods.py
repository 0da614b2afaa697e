"""Tensor's operators and array-style methods, each a call into `needle.ops`.

Kept apart from autograd.py, which defines what a Tensor *is* (data, graph,
gradients); this module only spells the ops as Python operators and methods.
"""
from __future__ import annotations

import numbers

import numpy

from .dtypes import FLOATS


_OPS = []  # needle.ops, found on first use (it imports this module)


def _ops():
    if not _OPS:
        from . import ops
        _OPS.append(ops)
    return _OPS[0]


def _is_scalar(x) -> bool:
    kind = type(x)
    if kind is float or kind is int:  # the common cases first: the ABC check is slow
        return True
    if isinstance(x, TensorMethods):
        return False
    return isinstance(x, (numbers.Number, numpy.number)) and not isinstance(x, (bool, complex))


def _check_shapes(op: str, a, b) -> None:
    """Shapes that do not broadcast, reported under the operator's name before any op
    runs: `a - b` is built as add(a, negate(b)), and with NEEDLE_BACKEND=np numpy's own
    ValueError named no op."""
    if a.shape != b.shape:
        from .shapes import broadcast_shapes
        broadcast_shapes(op, a.shape, b.shape)


def axes_of(op: str, axes, keepdims, names: dict):
    """(axes, keepdims) from the course's positional `axes` or `dim=` / `axis=` / `axes=`, and
    `keepdims=` or PyTorch's `keepdim=`; an unknown keyword is an error naming the op."""
    for name in list(names):
        if name in ("dim", "axis", "axes"):
            axes = names.pop(name)
        elif name in ("keepdim", "keepdims"):
            keepdims = names.pop(name)
        else:
            from .errors import ArgumentError
            raise ArgumentError(f"{op}: unexpected keyword {name!r} (axes: dim=, axis= or axes=; keepdim=)")
    return axes, keepdims


def _numeric(t, other_dtype: str = "float32"):
    """A bool tensor in arithmetic: 0/1 in the other operand's float dtype (else float32)."""
    if t.dtype != "bool":
        return t
    return _ops().astype(t, other_dtype if other_dtype in FLOATS else "float32")


class TensorOperators:
    """Python's operators on Tensors: arithmetic with numpy's promotion of bool and
    Python scalars, comparisons that return bool Tensors, indexing."""

    __slots__ = ()
    #: numpy scalars and arrays on the left of an operator defer to ours (`np.float32(2) * x`
    #: is a Tensor, with its gradient), as they do for torch tensors
    __array_priority__ = 1000

    def _other(self, other):
        """Wrap an array-like operand as a constant tensor on this device (in this
        tensor's dtype: fractions meeting an integer tensor are refused, not cut)."""
        if isinstance(other, TensorMethods):
            return other
        dtype = self.dtype
        if dtype not in FLOATS and numpy.asarray(other).dtype.kind in "fc":
            from .backend_selection import BACKEND
            if BACKEND != "np":  # (the np backend promotes, as numpy does)
                from .errors import DTypeError
                raise DTypeError(f"a {dtype} tensor {tuple(self.shape)} and a floating operand: cast the tensor "
                                 "first (x.astype('float32')); the values would be cut to integers")
            dtype = None
        return type(self)(other, device=self.device, dtype=dtype, requires_grad=False)

    def _pair(self, op: str, other, reflected: bool = False) -> tuple:
        """(self, other) as the operands of `op` (other wrapped; reflected: other first),
        their shapes checked to broadcast under the operator's name; a bool operand counts
        as 0/1 in the other's float dtype (float32 beside anything else)."""
        other = self._other(other)
        a, b = (other, self) if reflected else (self, other)
        _check_shapes(op, a, b)
        if a.dtype == "bool" or b.dtype == "bool":
            a, b = _numeric(a, b.dtype), _numeric(b, a.dtype)
        return a, b

    def _logical(self, op: str, other):
        """`mask * mask` and `mask + mask` stay masks (and, or), as in numpy and torch."""
        if isinstance(other, TensorMethods) and self.dtype == "bool" and other.dtype == "bool":
            a, b = self._pair(op, other)
            return _ops().astype(_ops().multiply(a, b) if op == "mul" else _ops().add(a, b), "bool")
        return None

    # ---- operators ----------------------------------------------------------------------
    def __add__(self, other):
        if _is_scalar(other):
            return _ops().add_scalar(_numeric(self), other)
        mask = self._logical("add", other)  # (not `or`: that would ask the mask for its truth)
        return mask if mask is not None else _ops().add(*self._pair("add", other))

    def __sub__(self, other):
        if _is_scalar(other):
            return _ops().add_scalar(_numeric(self), -other)
        # the course builds a - b as add(a, negate(b)); its topological-order tests count on it
        a, b = self._pair("sub", other)
        return _ops().add(a, _ops().negate(b))

    def __rsub__(self, other):
        if _is_scalar(other):
            return _ops().add_scalar(_ops().negate(_numeric(self)), other)
        a, b = self._pair("sub", other, reflected=True)
        return _ops().add(a, _ops().negate(b))

    def __mul__(self, other):
        if _is_scalar(other):
            return _ops().mul_scalar(_numeric(self), other)
        mask = self._logical("mul", other)
        return mask if mask is not None else _ops().multiply(*self._pair("mul", other))

    def __truediv__(self, other):
        if _is_scalar(other):
            return _ops().divide_scalar(_numeric(self), other)
        return _ops().divide(*self._pair("div", other))

    def __rtruediv__(self, other):
        if _is_scalar(other):
            return _ops().rdivide_scalar(_numeric(self), other)
        return _ops().divide(*self._pair("div", other, reflected=True))

    def __pow__(self, other):
        if _is_scalar(other):
            return _ops().power_scalar(_numeric(self), other)
        return _ops().power(*self._pair("pow", other))

    def __rpow__(self, other):
        return _ops().power(*self._pair("pow", other, reflected=True))

    def __matmul__(self, other):
        return _ops().matmul(_numeric(self), _numeric(self._other(other)))

    def __rmatmul__(self, other):
        return _ops().matmul(_numeric(self._other(other)), _numeric(self))

    def __neg__(self):
        return _ops().negate(_numeric(self))

    def __getitem__(self, idxs):
        return _ops().index(self, idxs)

    def __setitem__(self, idxs, value):
        """`t[idxs] = value` as a functional update: t becomes a new node of the graph
        (the old value is kept for the gradient), numpy's indexing rules."""
        from .backward import assign_functional
        assign_functional(self, lambda old: _ops().setitem(old, idxs, value))

    # comparisons give bool tensors and no gradient; `==` stays identity (the course's rule),
    # `eq`/`ne` compare elementwise
    def __lt__(self, other):
        return _ops().compare("lt", self, other)

    def __le__(self, other):
        return _ops().compare("le", self, other)

    def __gt__(self, other):
        return _ops().compare("gt", self, other)

    def __ge__(self, other):
        return _ops().compare("ge", self, other)

    def eq(self, other):
        return _ops().compare("eq", self, other)

    def ne(self, other):
        return _ops().compare("ne", self, other)

    __radd__ = __add__
    __rmul__ = __mul__


class TensorMethods(TensorOperators):
    """The named methods of a Tensor: the course's, and PyTorch's first-hour names."""

    __slots__ = ()

    # every axis argument is also PyTorch's `dim=` (and numpy's `axis=`), `keepdims` also
    # `keepdim=`: the course's positional `axes` stays first
    def matmul(self, other):
        return self.__matmul__(other)

    def sum(self, axes=None, keepdims=False, **names):
        axes, keepdims = axes_of("sum", axes, keepdims, names)
        return _ops().summation(self, axes, keepdims=keepdims)

    def mean(self, axes=None, keepdims=False, **names):
        axes, keepdims = axes_of("mean", axes, keepdims, names)
        return _ops().mean(self, axes, keepdims=keepdims)

    def max(self, axes=None, keepdims=False, **names):
        axes, keepdims = axes_of("max", axes, keepdims, names)
        return _ops().max(self, axes, keepdims=keepdims)

    def min(self, axes=None, keepdims=False, **names):
        axes, keepdims = axes_of("min", axes, keepdims, names)
        return _ops().amin(self, axes, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False, **names):
        axis, keepdims = axes_of("argmax", axis, keepdims, names)
        return _ops().argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False, **names):
        axis, keepdims = axes_of("argmin", axis, keepdims, names)
        return _ops().argmin(self, axis, keepdims)

    def var(self, axes=None, keepdims=False, unbiased=True, **names):
        correction = names.pop("correction", 1 if unbiased else 0)
        axes, keepdims = axes_of("var", axes, keepdims, names)
        return _ops().var(self, axes, keepdims=keepdims, correction=correction)

    def std(self, axes=None, keepdims=False, unbiased=True, **names):
        correction = names.pop("correction", 1 if unbiased else 0)
        axes, keepdims = axes_of("std", axes, keepdims, names)
        return _ops().StdSqrt()(_ops().var(self, axes, keepdims=keepdims, correction=correction))

    def logsumexp(self, axes=None, keepdims=False, **names):
        axes, keepdims = axes_of("logsumexp", axes, keepdims, names)
        out = _ops().logsumexp(self, axes)
        if not keepdims:
            return out
        from .shapes import normalize_axes
        kept = range(len(self.shape)) if axes is None else normalize_axes("logsumexp", axes, len(self.shape),
                                                                        self.shape)
        return out.reshape(tuple(1 if i in kept else s for i, s in enumerate(self.shape)))

    def abs(self):
        return _ops().absolute(self)

    __abs__ = abs

    def squeeze(self, axis=None, **names):
        """Drop size-1 axes: all of them, or those of the given ones (an axis of another
        size stays, as in torch)."""
        from .shapes import normalize_axes
        axis, _ = axes_of("squeeze", axis, False, names)
        shape = self.shape
        axes = range(len(shape)) if axis is None else normalize_axes("squeeze", axis, len(shape), shape)
        return self.reshape(tuple(s for i, s in enumerate(shape) if i not in axes or s != 1))

    def unsqueeze(self, axis=None, **names):
        """A new size-1 axis at `axis` (negative counts from the end of the result)."""
        from .errors import ArgumentError
        from .shapes import normalize_axes
        axis, _ = axes_of("unsqueeze", axis, False, names)
        if axis is None:
            raise ArgumentError("unsqueeze: which axis? (unsqueeze(dim))")
        shape = self.shape
        axis = normalize_axes("unsqueeze", axis, len(shape) + 1, shape)[0]
        return self.reshape(shape[:axis] + (1,) + shape[axis:])

    def numel(self) -> int:
        return int(numpy.prod(self.shape))

    def dim(self) -> int:
        return len(self.shape)

    def __int__(self) -> int:
        return int(self.item())

    def tolist(self):
        return self.numpy().tolist()

    def float(self):
        """float32 (PyTorch's `.float()`; `float(x)` of a one-element tensor is Python's)."""
        return self if self.dtype == "float32" else _ops().astype(self, "float32")

    def double(self):
        return self if self.dtype == "float64" else _ops().astype(self, "float64")

    def long(self):
        return self if self.dtype == "int64" else _ops().astype(self, "int64")

    def int(self):
        return self if self.dtype == "int32" else _ops().astype(self, "int32")

    def bool(self):
        return self if self.dtype == "bool" else _ops().compare("ne", self, 0)

    def clone(self):
        """A new tensor with this one's values (in the graph: its gradient flows back)."""
        return _ops().mul_scalar(self, 1) if self.dtype != "bool" else self.bool().detach()

    def view(self, *shape):
        """PyTorch's name for reshape (needle's reshapes of compact data are views too)."""
        return self.reshape(*shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        from .errors import AxisError
        shape = self.shape
        if not shape:
            return self.reshape((1,))
        n = len(shape)
        for name, d in (("start_dim", start_dim), ("end_dim", end_dim)):
            if not isinstance(d, (int, numpy.integer)) or isinstance(d, bool) or not -n <= d < n:
                raise AxisError(f"flatten: {name} {d!r} is out of range for shape {tuple(shape)}")
        start, end = start_dim % n, end_dim % n
        if start > end:
            raise AxisError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} in shape {tuple(shape)}")
        merged = int(numpy.prod(shape[start:end + 1]))
        return self.reshape(shape[:start] + (merged,) + shape[end + 1:])

    def broadcast_to(self, shape):
        return _ops().broadcast_to(self, shape)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _ops().reshape(self, shape)

    def transpose(self, *axes, dim0=None, dim1=None, **names):
        """The course's `transpose(axes=None)` (the last two axes, or the two named as one
        tuple) and PyTorch's `transpose(dim0, dim1)`."""
        if dim0 is not None or dim1 is not None:
            axes = axes + tuple(d for d in (dim0, dim1) if d is not None)
        elif names:
            axes, _ = axes_of("transpose", None, False, names)
            axes = (axes,)
        if len(axes) == 2:
            return _ops().transpose(self, tuple(axes))
        return _ops().transpose(self, axes[0] if axes else None)

    def permute(self, *axes, dims=None):
        if dims is not None:
            axes = tuple(dims)
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return _ops().permute(self, axes)

    def flip(self, axes=None, dims=None):
        """The course's `flip(axes)`; PyTorch's `flip(dims)`."""
        return _ops().flip(self, dims if dims is not None else axes)

    def astype(self, dtype):
        return _ops().astype(self, dtype)

    def relu(self):
        return _ops().relu(self)

    def exp(self):
        return _ops().exp(self)

    def log(self):
        return _ops().log(self)

    def tanh(self):
        return _ops().tanh(self)

    def sigmoid(self):
        return _ops().sigmoid(self)

    def sqrt(self):
        return _ops().sqrt(self)

    @property
    def T(self):
        return self.transpose()
