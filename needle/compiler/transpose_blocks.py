"""Transposing copies tiled in blocks (NCHW <-> NHWC, a weight's last two axes
swapped): the plain nest reads a new cache line for every element of an output row."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import coefficient, loads


#: the side of the blocks a transposing elementwise copy is tiled in (`transpose_blocks`:
#: a block of 8 x 8 floats reads whole cache lines on both sides; other sides did no
#: better), and the least length of its last axis: shorter rows (a CNN's NHWC gradients
#: of 16 or 32 channels read beside NCHW ones) already use what they read, and the
#: blocks' loops only cost
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
