"""Which IR ops and user lines each kernel of a compiled schedule computes.

The planner records it on each call (compiler/call_origins.py: the frontend ops it
fused, the IR primitives, the user's lines for graphs built while a profile or a
capture stamped them, the bytes it moves, a matmul's flops), so a profile reads it
from the schedule, for realized graphs and replayed steps alike.  An eager op's
schedule serves every call site of that op, so its lines are those of each run.
"""
from __future__ import annotations

from collections import Counter
from typing import List, Tuple

from ..compiler.call_origins import CallOrigin

_UNKNOWN = CallOrigin()


def describe_calls(entry) -> List[Tuple[str, CallOrigin]]:
    """(kernel name, origin) for every call of `entry` (a compiled schedule); an empty
    origin where the planner recorded none."""
    return [(call.kernel.name, call.origin or _UNKNOWN) for call in entry.schedule.calls]


def eager_lines(nodes) -> Counter:
    """Lines of a one-op graph (recomputed each run: one eager schedule serves every
    call site of that op)."""
    where = getattr(nodes[0].origin, "where", None)
    return Counter([where]) if where is not None else Counter()
