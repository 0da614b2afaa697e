"""Transposing copies tiled in blocks (NCHW <-> NHWC, a weight's last two axes
swapped): the plain nest reads a new cache line for every element of an output row."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import coefficient, loads


#: the side of the blocks a transposing elementwise copy is tiled in (`transpose_blocks`),
#: and the least length of its last axis: in-process A/B, 2 threads, AVX2, a weight's
#: 3x3x128x128 with its last two axes swapped took 0.41x the time, NHWC to NCHW of
#: 128x28x28x16 0.41x and of 16x32x32x64 0.48x, NCHW to NHWC of 16x64x32x32 0.20x (blocks
#: of 4, 12 and 16 did no better); rows of 16 or 32 (a CNN's NHWC gradients of 16 or 32
#: channels read beside NCHW ones) ran 1.5-1.6x slower blocked
TRANSPOSE_BLOCK = 8
TRANSPOSE_MIN_ROW = 64


def transpose_blocks(loops, body):
    """(loops, body) of an elementwise nest that reads across what it writes (a
    transposing copy: NCHW to NHWC, a weight's last two axes swapped) with its last two
    loops tiled in TRANSPOSE_BLOCK x TRANSPOSE_BLOCK blocks: the plain nest reads a new
    cache line (past 4 KB strides, a new page) for every element of an output row and
    comes back to it a row later; a block uses what it reads while it is at hand.  None
    when the nest is no such copy."""
    if len(loops) < 2:
        return None
    (v, nv), (last, nl) = loops[-2], loops[-1]
    n = TRANSPOSE_BLOCK
    if nv < n or nl < TRANSPOSE_MIN_ROW or not all(isinstance(st, (K.Store, K.Let)) for st in body):
        return None
    if any(isinstance(st, K.Store) and coefficient(st.index, last) != 1 for st in body):
        return None  # the stores run along the last loop
    found = [loads(st.value if isinstance(st, K.Store) else st.expr) for st in body]
    if any(f is None for f in found):
        return None
    if not any(abs(coefficient(e.index, last) or 0) >= n and coefficient(e.index, v) == 1
               for f in found for e in f):
        return None

    def block(var, extent):  # (its loop over the block, the Let of the original variable)
        outer, inner = K.Var(var + "o"), var + "b"
        length = K.Const(n, K.INDEX) if extent % n == 0 else \
            K.Binary("min", K.Const(n, K.INDEX), K.affine([(outer, -n)], extent), K.INDEX)
        return inner, length, K.Let(var, K.affine([(outer, n), (K.Var(inner), 1)]))
    (vb, v_length, v_let), (lb, l_length, l_let) = block(v, nv), block(last, nl)
    inner = [K.Loop(vb, v_length, [v_let, K.Loop(lb, l_length, [l_let] + body)])]
    return loops[:-2] + [(v + "o", -(-nv // n)), (last + "o", -(-nl // n))], inner
