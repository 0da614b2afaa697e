"""Argument checks shared by the ops, so that every op reports bad input the same way."""
from __future__ import annotations

import numbers

from ..dtypes import FLOATS
from ..errors import DTypeError, fmt_shape


def check_scalar(op: str, scalar):
    if not isinstance(scalar, numbers.Number) or isinstance(scalar, (bool, complex)):
        raise DTypeError(f"{op}: the scalar must be a real number, got {type(scalar).__name__} {scalar!r}")
    return scalar


def require_float(op: str, a) -> None:
    """Ops defined only on floats say so under their own name, on every backend (numpy
    would compute an integer mean or sigmoid in float64 without a word)."""
    if a.dtype not in FLOATS:
        raise DTypeError(f"{op}: expects a floating dtype, got {a.dtype} (operand {fmt_shape(a.shape)}); cast first")
