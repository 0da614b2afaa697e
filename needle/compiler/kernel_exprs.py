"""Small rewrites of kernel IR expressions for the lowering (pure functions).

Lowering memoizes each (node, index) to one expression object, so a value used
twice is the same object twice: `contains` and `replace` go by identity.
"""
from __future__ import annotations

from ..codegen import kernel_ir as K


def is_float(dtype: str) -> bool:
    return dtype in ("float32", "float64")


def costly(e) -> bool:
    """Whether recomputing e costs more than a load: a transcendental, a power or a division."""
    if isinstance(e, K.Unary):
        return e.op in ("exp", "log", "tanh", "sqrt") or costly(e.x)
    if isinstance(e, K.Binary):
        return e.op in ("pow", "div") or costly(e.a) or costly(e.b)
    if isinstance(e, K.Where):
        return costly(e.cond) or costly(e.a) or costly(e.b)
    return isinstance(e, K.Cast) and costly(e.x)


def _children(e) -> tuple:
    if isinstance(e, K.Unary) or isinstance(e, K.Cast):
        return (e.x,)
    if isinstance(e, K.Binary):
        return (e.a, e.b)
    if isinstance(e, K.Where):
        return (e.cond, e.a, e.b)
    return ()


def contains(e, part) -> bool:
    return e is part or any(contains(c, part) for c in _children(e))


def replace(e, part, new):
    """e with every occurrence of the subexpression `part` (by identity) replaced by `new`."""
    if e is part:
        return new
    if isinstance(e, K.Unary):
        return K.Unary(e.op, replace(e.x, part, new), e.dtype)
    if isinstance(e, K.Cast):
        return K.Cast(replace(e.x, part, new), e.dtype)
    if isinstance(e, K.Binary):
        return K.Binary(e.op, replace(e.a, part, new), replace(e.b, part, new), e.dtype)
    if isinstance(e, K.Where):
        return K.Where(replace(e.cond, part, new), replace(e.a, part, new), replace(e.b, part, new), e.dtype)
    return e
