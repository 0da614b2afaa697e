"""Argument checks shared by the ops, so that every op reports bad input the same way."""
from __future__ import annotations

import numbers

from ..dtypes import FLOATS
from ..errors import DTypeError, fmt_shape


def check_scalar(op: str, scalar):
    if not isinstance(scalar, numbers.Number) or isinstance(scalar, (bool, complex)):
        raise DTypeError(f"{op}: the scalar must be a real number, got {type(scalar).__name__} {scalar!r}")
    return scalar


def check_scalar_fits(op: str, a, scalar) -> None:
    """A fractional scalar meeting an integer array: NDArray would cut the scalar to an
    integer without a word (`t * 2.5` as `t * 2`); needle refuses, as for division.
    (numpy arrays, the np backend, promote as numpy does.)"""
    kind = getattr(a.dtype, "kind", None)
    if kind is not None or a.dtype in FLOATS or isinstance(scalar, numbers.Integral):
        return
    if not float(scalar).is_integer():
        raise DTypeError(f"{op}: a {a.dtype} operand {fmt_shape(a.shape)} and the fractional scalar {scalar!r}; "
                         "cast the tensor first (x.astype('float32'))")


def require_float(op: str, a) -> None:
    """Ops defined only on floats say so under their own name, on every backend (numpy
    would compute an integer mean or sigmoid in float64 without a word)."""
    if a.dtype not in FLOATS:
        raise DTypeError(f"{op}: expects a floating dtype, got {a.dtype} (operand {fmt_shape(a.shape)}); cast first")
