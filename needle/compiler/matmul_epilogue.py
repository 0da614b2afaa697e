"""A matmul group's epilogue: what its kernels store at each element of the product
once its sum is complete (the fused root — bias, activation, a reshape — and the
extra roots fused with it).  Shared by the CPU tilings (matmul_tiling, matmul_rows)
and the CUDA lowering."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import replace, unravel
from .lowering import Lowering


def epilogue(low: Lowering, bt, i, j):
    """The group's root at matmul element (batch bt, row i, column j), the matmul's
    value read from `low.matmul_value`: the fused epilogue, or that value itself.
    The root has the matmul's row-major layout, so it is stored at the element's
    flat position."""
    m, root = low.group.matmul, low.group.root
    return low.matmul_value if root is m else low.gen(root, epilogue_index(m, root, bt, i, j))


def epilogue_stores(low: Lowering, out: str, at, bt, i, j) -> list:
    """After the last K step, at matmul element (bt, i, j): the group's root stored at
    flat position `at` of `out`, then each extra root (fusion: absorb_into_matmuls;
    contiguous, of the root's size) computed for the element at that flat position and
    stored at `at` of its buffer, later ones reading earlier ones' values."""
    g = low.group
    stores, named = [K.Store(out, at, epilogue(low, bt, i, j))], []
    index = epilogue_index(g.matmul, g.root, bt, i, j)
    # extra roots of another shape (a conv's weight update) are computed over the root's
    # shape: what they read is reshaped to it (fusion checked that it can be), so the
    # loads stay affine in the vector lane
    for v in _views_read_by(low, [n for n in g.extra if n.shape != g.root.shape]):
        if v.shape != g.root.shape:
            low.merged[id(v)] = v.arg.reshape(g.root.shape)
    saved, low.direct_shape = low.direct_shape, g.root.shape
    try:
        for n in g.extra:
            value = low.gen(n, index)
            for old, var in named:
                value = replace(value, old, var)
            var = K.Var(f"x{len(named)}", value.dtype)
            named.append((value, var))
            stores += [K.Let(var.name, value), K.Store(low.buffer(low.slot_of(n), n.dtype, "out"), at, var)]
    finally:
        low.direct_shape = saved
    return stores


def _views_read_by(low: Lowering, roots) -> list:
    """The views the kernel's expressions of `roots` read through (down to the matmul's
    result, whose own operands are read elsewhere)."""
    views, seen, stack = [], set(), list(roots)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op == "view":
            views.append(n)
        elif n is not low.group.root and (id(n) in low.computed or id(n) not in low.stored):  # computed here
            stack.extend(n.srcs)
    return views


def epilogue_index(m, root, bt, i, j) -> tuple:
    """The root's index at matmul element (batch bt, row i, column j): the root may
    be the matmul's result reshaped (conv's (N*Ho*Wo, O) read as (N, Ho, Wo, O))."""
    rows, cols = m.shape[-2], m.shape[-1]
    if root.shape == m.shape:
        return unravel(bt, m.shape[:-2]) + (i, j)
    if root.shape and root.shape[-1] == cols:
        return unravel(K.affine([(bt, rows), (i, 1)]), root.shape[:-1]) + (j,)
    return unravel(K.affine([(bt, rows * cols), (i, cols), (j, 1)]), root.shape)
