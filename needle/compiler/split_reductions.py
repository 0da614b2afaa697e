"""Pass 0b (CPU) — full reductions in two steps: a sum or max of a whole large array
(`x.sum()`, a loss's mean), or to a few values (the column sums of a tall, narrow
matrix), becomes CHUNKS partial reductions over slices of its leading reduced axis,
then the reduction of those partials.

A reduction to one value has no kept axis to split across threads (to a few values,
too few to share out): it was one loop on one thread, reading one stream of memory
(the sum of a 4096 x 4096 float32 array: 4.0 ms, torch 2.0).  With the leading axis
reshaped to (CHUNKS, n / CHUNKS) the first reduction keeps CHUNKS values: its kernel
runs them in parallel, each over contiguous memory; the second, over CHUNKS values,
costs nothing.  The reshape only splits an axis, so it is a view of any layout, fused
into the first kernel.  (The CUDA lowering splits its reductions itself, over blocks.)

Input and output: the IR graph (outputs), before view folding; the rewritten graph
computes the same values, a sum up to the order of its float additions (in blocks,
which lowers its error bound).
"""
from __future__ import annotations

from ..ir.nodes import Node, REDUCE, rebuild

#: a reduction of at least this many elements to at most SMALL_OUTPUT values is split
SPLIT_MIN = 1 << 16
#: (threads cannot share out so few outputs; a column sum of a 2^20 x 4 matrix gave
#: each of two threads two columns to walk the whole matrix for)
SMALL_OUTPUT = 8
#: partial reductions wanted: a multiple of any thread count up to 16 or so, and few
#: enough for the final reduction to be negligible; fewer when the axis does not divide
CHUNKS = 64


def split_reductions(outputs) -> list:
    """`outputs` with every large reduction to a few values split in two (the same
    nodes when there is none)."""
    def split(n, new):
        if n.op not in REDUCE or n.size > SMALL_OUTPUT:
            return None
        src = new.get(id(n.srcs[0]), n.srcs[0])
        if src.size < SPLIT_MIN:
            return None
        splits = [(a, _chunks(src.shape[a])) for a in sorted(n.arg)]
        axis, chunks = next(((a, c) for a, c in splits if c), (None, None))
        if axis is None:
            return None
        shape = src.shape[:axis] + (chunks, src.shape[axis] // chunks) + src.shape[axis + 1:]
        like = (n.dtype, n.device, n.origin)  # (the reduction's)
        split_src = Node("reshape", (src,), shape, shape, src.dtype, src.device, n.origin)
        axes = tuple(sorted({a + (a > axis) for a in n.arg if a != axis} | {axis + 1}))
        partial = Node(n.op, (split_src,), axes, tuple(1 if i in axes else s for i, s in enumerate(shape)), *like)
        total = Node(n.op, (partial,), (axis,), tuple(1 if i == axis else s for i, s in enumerate(partial.shape)),
                     *like)
        return Node("reshape", (total,), n.shape, n.shape, *like)
    return rebuild(outputs, split)


def _chunks(n: int):
    """The most chunks up to CHUNKS that split an axis of `n` evenly (at least 4:
    two threads and their balance), or None."""
    return next((c for c in range(min(CHUNKS, n // 2), 3, -1) if n % c == 0), None)
