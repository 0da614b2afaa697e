"""Eager execution on a compiled device: one primitive, one kernel.

The NDArray methods of `cpu()` call `run`, which builds a one-node graph over
buffer leaves and realizes it right away.  The schedule cache keys on the
graph's structure, so repeating an op on arrays of the same shape and layout
skips the compiler and only launches the cached kernel.
"""
from __future__ import annotations


def run(device, build_node, arrays):
    """Build `build_node(*leaf_nodes)` and compute it on `device`; the NDArray result."""
    from ..ir import build
    from . import executor_for
    node = build_node(*[build.buffer(a) for a in arrays])
    if node.op == "buffer":  # the builder folded the op away (e.g. a cast to the same dtype)
        return node.arg
    executor_for(device).realize([node])
    return node.arg
