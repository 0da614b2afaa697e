"""The plain matmul loop nest: small or integer matmuls (and every matmul of the
CUDA lowering below its tiles), where packing and tiles cost more than they save."""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from .loop_nests import linear, nest
from .lowering import Lowering
from .matmul_epilogue import epilogue_stores
from .row_jam import jam_rows
from .views import View


def naive(low: Lowering, jam: bool = False) -> K.Kernel:
    """for batch, i, j: acc = sum_k A[b, i, k] * B[b, k, j]; C[b, i, j] = epilogue(acc).
    With `jam` (dot products of contiguous runs, matmul_rows.dot_products), four
    outputs of the innermost loop at a time (row_jam): the operand they share is
    read once for the four."""
    g = low.group
    m = g.matmul
    a, b = m.srcs
    shape = m.shape
    batch = shape[:-2]
    idx = [K.Const(0) if n == 1 else K.Var(f"b{d}") for d, n in enumerate(batch)]
    i = K.Var("i") if shape[-2] != 1 else K.Const(0)
    j = K.Var("j") if shape[-1] != 1 else K.Const(0)
    kk = K.Var("kk")
    acc = "acc"
    body = [K.Declare(acc, m.dtype, K.Const(0, m.dtype))]
    prod = K.Binary("mul", low.gen(a, tuple(idx) + (i, kk)), low.gen(b, tuple(idx) + (kk, j)), m.dtype, contract=True)
    # (in order, but for the dot products of contiguous runs, `jam`: vectorized, their K
    # loop is the work; every other nest sums as the tiles do, whatever its epilogue)
    body.append(K.Loop("kk", a.shape[-1], [K.Assign(acc, K.Binary("add", K.Var(acc, m.dtype), prod, m.dtype),
                                                    ordered=not jam)]))
    low.matmul_value = K.Var(acc, m.dtype)
    flat_batch = K.affine([(b, math.prod(batch[d + 1:])) for d, b in enumerate(idx)])
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    body += epilogue_stores(low, out, linear(tuple(idx) + (i, j), View.contiguous(shape).strides, 0), flat_batch, i, j)
    loops = [(f"b{d}", n) for d, n in enumerate(batch) if n != 1]
    loops += [(v.name, n) for v, n in ((i, shape[-2]), (j, shape[-1])) if isinstance(v, K.Var)]
    jammed = jam_rows(loops, body, a.shape[-1]) if jam else None
    if jammed is not None:
        loops, body = jammed
    return low.kernel(*nest(loops, body), work=math.prod(shape) * a.shape[-1])
