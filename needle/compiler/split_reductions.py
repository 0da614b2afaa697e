"""Pass 0b (CPU) — full reductions in two steps: a sum or max of a whole large array
(`x.sum()`, a loss's mean), to a few values, or to the columns of a tall matrix (a
batch norm's statistics over N x H x W), becomes up to CHUNKS partial reductions over
slices of its leading reduced axis, then the reduction of those partials.

A reduction to one value has no kept axis to split across threads (to a few values,
too few to share out; the column path shares out blocks of 1024 columns, so fewer
columns are one task): it was one loop on one thread, reading one stream of memory
(`benchmarks/bench_cpu.py`'s "sum of all 4096^2").  With the leading axis reshaped to
(CHUNKS, n / CHUNKS) the first reduction keeps CHUNKS values (rows of them): its kernel
runs them in parallel, each over contiguous memory; the second, over CHUNKS values,
costs little.
The reshape only splits an axis, so it is a view of any layout, fused into the first
kernel.  (The CUDA lowering splits its reductions itself, over blocks.)

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
#: a reduction that keeps the last axis (the column path: one task per COLUMN_BLOCK
#: columns) is split from SPLIT_MIN_COLUMNS elements when it keeps at most SPLIT_COLUMNS
#: values: the CNN's batch norms (100352 x 16, 25088 x 32) gain; an LSTM's bias gradient
#: over 320 x 1000 does not, so it is not split
SPLIT_COLUMNS, SPLIT_MIN_COLUMNS = 1024, 1 << 19
#: partial reductions wanted: a multiple of any thread count up to 16 or so, and few
#: enough for the final reduction to be negligible; fewer when the axis does not divide
CHUNKS = 64
#: the column path's partials, per thread: each is a row of the kept columns, written
#: and read back by the final reduction (one thread), so fewer than CHUNKS pay: column
#: sums of a thousand rows or so gain, the tall ones (a CNN's batch norms) stay as fast
COLUMN_CHUNKS_PER_THREAD = 4
#: elements of the source a chunk reads at least (an LSTM's bias gradient over 320 x 1000
#: in 64 chunks of 5 rows wrote and read back a fifth of its input)
MIN_CHUNK = 1 << 14
#: a reduction to a few values is split in chunks of about this many elements, more than
#: CHUNKS when it is long: each accumulator then adds a few hundred values, not tens of
#: thousands (a float32 sum's error grows with that count: 3e-4 for 2^25 equal values in 64
#: chunks; the partials, one per chunk, are few enough to cost nothing)
BLOCK = 1 << 12


def split_reductions(outputs, threads: int) -> list:
    """`outputs` with every large reduction to a few values (or columns) split in two
    (the same nodes when there is none), for a target running `threads` threads."""
    def split(n, new):
        if n.op not in REDUCE:
            return None
        src = new.get(id(n.srcs[0]), n.srcs[0])
        columns = _columns(src, n.arg)
        least, most_out = (SPLIT_MIN_COLUMNS, SPLIT_COLUMNS) if columns else (SPLIT_MIN, SMALL_OUTPUT)
        if src.size < least or n.size > most_out:
            return None
        most = min(COLUMN_CHUNKS_PER_THREAD * max(threads, 1), src.size // MIN_CHUNK) if columns else \
            max(min(CHUNKS, src.size // MIN_CHUNK), src.size // BLOCK)
        splits = [(a, _chunks(src.shape[a], most)) for a in sorted(n.arg)]
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


def _columns(src, axes) -> bool:
    """Whether the reduction keeps its source's last axis (of more than one element) and
    no other: the column path then has only blocks of columns to share out."""
    kept = [d for d, s in enumerate(src.shape) if s > 1 and d not in axes]
    return kept == [len(src.shape) - 1]


def _chunks(n: int, most: int = CHUNKS):
    """The most chunks up to `most` that split an axis of `n` evenly (at least 4:
    two threads and their balance), or None."""
    return next((c for c in range(min(most, n // 2), 3, -1) if n % c == 0), None)
