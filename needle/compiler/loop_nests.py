"""Loop nests and the index arithmetic every lowering shares (CPU, CUDA, matmul
strategies): loop variables over a shape, an index's flat offset through strides, a
view's mask as a condition, a reduction's kept and reduced loops, and nests of
(var, extent) loops whose outermost loop is split across threads."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .views import View


def linear(index, strides, offset):
    return K.affine([(i, s) for i, s in zip(index, strides) if not isinstance(i, K.Const)],
                    offset + sum(i.value * s for i, s in zip(index, strides) if isinstance(i, K.Const)))


def mask_expr(view: View, index):
    """AND of lo <= sum(coeffs * i) < hi, skipping halves that always hold."""
    cond = None
    for coeffs, lo, hi in view.mask:
        low = sum(min(0, c * (n - 1)) for c, n in zip(coeffs, view.shape))
        high = sum(max(0, c * (n - 1)) for c, n in zip(coeffs, view.shape))
        value = linear(index, coeffs, 0)
        if lo > low:
            cond = K.land(cond, K.Binary("le", K.Const(lo), value, "bool"))
        if hi <= high:
            cond = K.land(cond, K.Binary("lt", value, K.Const(hi), "bool"))
    return cond


def loop_vars(shape, prefix: str):
    index, loops = [], []
    for d, n in enumerate(shape):
        if n == 1:
            index.append(K.Const(0))
        else:
            index.append(K.Var(f"{prefix}{d}"))
            loops.append((f"{prefix}{d}", n))
    return tuple(index), loops


# ---- helpers ---------------------------------------------------------------------------------
def domain_index(group) -> tuple:
    """A reduce group's index over its domain: k<d> for kept dims, r<d> for reduced ones,
    0 for size-1 dims."""
    return tuple(K.Const(0) if n == 1 else K.Var(("r" if d in group.reduce_axes else "k") + str(d))
                 for d, n in enumerate(group.domain))


def reduce_loops(group) -> tuple:
    """(kept, reduced): the (var, extent) loops of a reduce group's kept and reduced dims."""
    full, axes = group.domain, group.reduce_axes
    return ([(f"k{d}", n) for d, n in enumerate(full) if d not in axes and n != 1],
            [(f"r{d}", n) for d, n in enumerate(full) if d in axes and n != 1])


def nest_loops(loops, body, parallel_first: bool = False) -> list:
    for k, (var, extent) in reversed(list(enumerate(loops))):
        body = [K.Loop(var, extent, body, "parallel" if parallel_first and k == 0 else "serial")]
    return body


def nest(loops, body):
    """(body, parallel) with the outermost loop split across threads."""
    if not loops:
        return body, None
    return nest_loops(loops, body, parallel_first=True), (loops[0][0], loops[0][1])


def merge_dims(shape, views) -> tuple:
    """Merge adjacent dims (innermost first) while every view can be reshaped."""
    shape = tuple(shape)
    current = [v for v in views]
    d = len(shape) - 2
    while d >= 0:
        merged = shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:]
        reshaped = [v.reshape(merged) for v in current]
        if all(r is not None for r in reshaped):
            shape, current = merged, reshaped
        d -= 1
    return shape
