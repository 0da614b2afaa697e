"""The compiler's cost model, in one place: how much an elementwise expression
costs to recompute (view folding and fusion store a node read by several readers
only when recomputing it in each would cost more than CHEAP_OPS) and how large
one kernel's inlined expression may grow (MAX_KERNEL_OPS)."""
from __future__ import annotations

from ..ir.nodes import ELEMENTWISE, MOVEMENT

#: an elementwise subtree that costs at most this much (`subtree_cost`: 1 an op,
#: EXPENSIVE_COST a transcendental) is recomputed by every reader instead of being stored
CHEAP_OPS = 8
EXPENSIVE = ("exp", "log", "tanh", "pow", "sqrt", "sigmoid")
#: what one EXPENSIVE op counts for in `subtree_cost`: high enough that an RNN cell's
#: tanh or an LSTM gate's sigmoid of its summed pre-activations (4 + 3 adds) is stored
#: once, not computed again by every backward kernel that reads the activation (the RNN
#: and LSTM rows of `benchmarks/bench_training.py`); the other models build the same
#: kernels either way
EXPENSIVE_COST = 6
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
            cost += EXPENSIVE_COST if n.op in EXPENSIVE else 1
            stack.extend(n.srcs)
        elif n.op in MOVEMENT:
            stack.extend(n.srcs)
    return cost
