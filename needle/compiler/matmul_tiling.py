"""Pass 3 — matmul tiling: a matmul group becomes a loop nest.

(The naive nest below is the correct baseline; the tiled, register-blocked nest
replaces it for the CPU.)
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from .lowering import Lowering, linear, nest
from .views import View


def lower(low: Lowering, target: str = "cpu") -> K.Kernel:
    return naive(low)


def naive(low: Lowering) -> K.Kernel:
    """for batch, i, j: acc = sum_k A[b, i, k] * B[b, k, j]; C[b, i, j] = epilogue(acc)."""
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
    prod = K.Binary("mul", low.gen(a, tuple(idx) + (i, kk)), low.gen(b, tuple(idx) + (kk, j)), m.dtype)
    body.append(K.Loop("kk", a.shape[-1], [K.Assign(acc, K.Binary("add", K.Var(acc, m.dtype), prod, m.dtype))]))
    low.matmul_value = K.Var(acc, m.dtype)
    value = low.matmul_value if g.root is m else low.gen(g.root, tuple(idx) + (i, j))
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    body.append(K.Store(out, linear(tuple(idx) + (i, j), View.contiguous(shape).strides, 0), value))
    loops = [(f"b{d}", n) for d, n in enumerate(batch) if n != 1]
    loops += [(v.name, n) for v, n in ((i, shape[-2]), (j, shape[-1])) if isinstance(v, K.Var)]
    return low.kernel(*nest(loops, body), work=math.prod(shape) * a.shape[-1])
