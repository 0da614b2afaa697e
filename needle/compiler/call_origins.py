"""What each call of a schedule computes, in the user's terms, recorded when it is
planned: the frontend ops it fused, the IR primitives, the user's source lines (for
nodes built while a profile or a capture stamped them), the bytes it moves and a
matmul's flops.  The profiler reads it from the call: no re-planning,
no matching of calls with groups by kernel name.  It holds no node (a cached schedule
must not keep a graph or its data alive)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Tuple

from ..dtypes import itemsize
from ..ir.nodes import LOAD, MOVEMENT

_SKIP = set(LOAD) | set(MOVEMENT) | {"view"}


@dataclass(frozen=True)
class CallOrigin:
    ops: Tuple[str, ...] = ()      # frontend ops fused (origin names), in order
    ir_ops: Tuple[str, ...] = ()   # IR primitives computed
    lines: Tuple[tuple, ...] = ()  # ((file, line), nodes) of the user's lines
    bytes: int = 0                 # bytes of the buffers the call reads and writes
    flops: float = 0.0             # 2 * m * n * k on the call that computes a matmul


def _unique(items) -> tuple:
    return tuple(dict.fromkeys(items))


def group_origin(group, members) -> CallOrigin:
    """The ops and lines of a fused group (bytes and flops are the call's: `for_call`)."""
    computed = [n for n in members if n.op not in _SKIP] or [n for n in members if n.op not in LOAD]
    lines = Counter(w for w in (getattr(n.origin, "where", None) for n in computed) if w is not None)
    return CallOrigin(_unique(str(n.origin) or n.op for n in computed), _unique(n.op for n in computed),
                      tuple(lines.items()))


def for_call(origin: CallOrigin, group, call, nbytes: int) -> CallOrigin:
    """`origin` for one of the group's calls: its bytes, and the matmul's flops on the call
    that bears the group's name (a packing kernel or a split reduction's first half
    comes before it)."""
    m = group.matmul
    flops = 2.0 * math.prod(m.shape) * m.srcs[0].shape[-1] \
        if m is not None and m.op == "matmul" and call.kernel.name == group.name else 0.0
    return CallOrigin(origin.ops, origin.ir_ops, origin.lines, nbytes, flops)


def call_bytes(call, slot_kinds, leaf_shapes, outputs, temp_bytes) -> int:
    """Bytes of the buffers `call` reads and writes."""
    total = 0
    for slot in call.slots:
        kind, index = slot_kinds[slot]
        if kind == "leaf":
            shape, dtype = leaf_shapes[index]
            total += math.prod(shape) * itemsize(dtype)
        elif kind == "out":
            _, shape, dtype = outputs[index]
            total += math.prod(shape) * itemsize(dtype)
        else:
            total += temp_bytes[index]
    return total
