"""Pass 1b — common subexpressions: structurally equal nodes of the folded graph
become one node.

A training step builds the same value more than once: conv's forward and its weight
gradient each read the input's im2col windows, and view folding stores each as a
copy of its own.  Here two nodes with the same op, argument, shape, dtype and (already
merged) sources are one, so that copy is made and stored once.  Every op of the IR is
a pure function of its sources (random draws arrive as buffers), so this is exact.
Constants are told apart by their text (0.0 and -0.0 differ); buffers and run-time
scalars by identity.
"""
from __future__ import annotations

from ..ir.nodes import Node, toposort
from .view_folding import FoldedGraph


def merge_common(folded: FoldedGraph) -> FoldedGraph:
    canonical = {}  # key -> the node standing for every node with that key
    new = {}        # id(folded node) -> its canonical node
    reasons = dict(folded.reasons)
    for n in toposort(folded.outputs):
        srcs = tuple(new[id(s)] for s in n.srcs)
        key = (n.op, _arg_key(n), n.shape, n.dtype, tuple(id(s) for s in srcs))
        same = canonical.get(key)
        if same is None:
            same = n if all(a is b for a, b in zip(srcs, n.srcs)) else \
                Node(n.op, srcs, n.arg, n.shape, n.dtype, n.device, n.origin)
            canonical[key] = same
            if same is not n and id(n) in reasons:
                reasons[id(same)] = reasons[id(n)]
        new[id(n)] = same
    kept = {id(n) for n in canonical.values()}  # ids of dropped nodes may be reused once they are freed
    return FoldedGraph([new[id(o)] for o in folded.outputs], {k: v for k, v in reasons.items() if k in kept})


def _arg_key(n):
    if n.op in ("buffer", "param"):
        return id(n.arg)
    if n.op == "const":
        return repr(n.arg)
    try:
        hash(n.arg)
    except TypeError:
        return ("unhashable", id(n))
    return n.arg
