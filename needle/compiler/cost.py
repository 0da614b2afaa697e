"""The compiler's cost model, in one place: how much an elementwise expression
costs to recompute (view folding and fusion store a node read by several readers
only when recomputing it in each would cost more than CHEAP_OPS) and how large
one kernel's inlined expression may grow (MAX_KERNEL_OPS)."""
from __future__ import annotations

from ..ir.nodes import ELEMENTWISE, MOVEMENT

#: an elementwise subtree with at most this many ops and no transcendental op is
#: recomputed by every reader instead of being stored
CHEAP_OPS = 8
EXPENSIVE = ("exp", "log", "tanh", "pow", "sqrt", "sigmoid")
#: an inlined expression larger than this is cut (its top node stored), which keeps
#: kernels quick to compile and code generation free of deep recursion
MAX_KERNEL_OPS = 160


def subtree_cost(node, limit: int = 64) -> int:
    """Elementwise ops reachable from `node` without crossing a base (capped)."""
    cost, stack, seen = 0, [node], set()
    while stack and cost <= limit:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op in ELEMENTWISE:
            cost += 4 if n.op in EXPENSIVE else 1
            stack.extend(n.srcs)
        elif n.op in MOVEMENT:
            stack.extend(n.srcs)
    return cost
