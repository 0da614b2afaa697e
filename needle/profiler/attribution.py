"""Which IR ops and user lines each kernel of a compiled schedule computes.

A compiled schedule is cached by graph structure, so the profiler re-runs the
passes once per schedule it meets (`plan`, outside the timed region) to learn the
nodes of each fused group, and pairs the schedule's calls with the groups: a group
ends with the call that bears its name (a CPU matmul's packing kernel `PB_`
and the first half of a CUDA split reduction come before it).  The fused nodes keep
their `origin`, so each call gets the frontend ops it fused and, for graphs built
while profiling, the user's lines.  Bytes are the sizes of the buffers a call
reads and writes; FLOPs are counted for matmuls (2 * m * n * k per product).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import List, Tuple

from ..dtypes import itemsize
from ..ir.nodes import LOAD, MOVEMENT

_SKIP = set(LOAD) | set(MOVEMENT) | {"view"}


@dataclass
class CallInfo:
    name: str
    ops: Tuple[str, ...] = ()            # frontend ops fused (origin names), in order
    ir_ops: Tuple[str, ...] = ()         # IR primitives computed
    lines: Counter = field(default_factory=Counter)   # (file, line) -> nodes
    bytes: int = 0
    flops: float = 0.0


def describe_calls(entry, nodes, leaves, target) -> List[CallInfo]:
    """CallInfo for every call of `entry` (a compiled schedule) run on `nodes`."""
    schedule = entry.schedule
    infos = [CallInfo(c.kernel.name) for c in schedule.calls]
    for info, nbytes in zip(infos, _bytes(schedule, leaves)):
        info.bytes = nbytes
    members = _members_by_call(schedule, nodes, target)
    for info, (group, fused_nodes) in zip(infos, members):
        computed = [n for n in fused_nodes if n.op not in _SKIP] or [n for n in fused_nodes if n.op not in LOAD]
        info.ir_ops = _unique(n.op for n in computed)
        info.ops = _unique(str(n.origin) or n.op for n in computed)
        info.lines = Counter(w for w in (getattr(n.origin, "where", None) for n in computed) if w is not None)
        m = group.matmul if group is not None else (fused_nodes[0] if fused_nodes else None)
        if m is not None and m.op == "matmul" and info.name == (group.name if group is not None else infos[-1].name):
            info.flops = 2.0 * math.prod(m.shape) * m.srcs[0].shape[-1]
    return infos


def _unique(items) -> tuple:
    seen = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return tuple(seen)


def _members_by_call(schedule, nodes, target):
    """[(group, folded nodes it computes)] per call; (None, []) where unknown."""
    from ..compiler.schedule import plan
    from ..engine.stages import kernel_members
    calls = schedule.calls
    if _is_single_op(nodes):  # eager: one op, every call computes it
        return [(None, [nodes[0]])] * len(calls)
    replanned, fused = plan(nodes, target=target)
    if [c.kernel.name for c in replanned.calls] != [c.kernel.name for c in calls]:
        return [(None, [])] * len(calls)
    out, i = [], 0
    for group, members in kernel_members(fused):
        while i < len(calls):
            call = calls[i]
            out.append((group, members))
            i += 1
            if call.kernel.name == group.name and call.kernel.mapping != "split":
                break
    out += [(None, [])] * (len(calls) - len(out))
    return out


def _is_single_op(nodes) -> bool:
    return len(nodes) == 1 and all(s.op in LOAD for s in nodes[0].srcs)


def eager_lines(nodes) -> Counter:
    """Lines of a one-op graph (recomputed each run: one eager schedule serves every
    call site of that op)."""
    where = getattr(nodes[0].origin, "where", None)
    return Counter([where]) if where is not None else Counter()


def _bytes(schedule, leaves) -> list:
    out = []
    for c in schedule.calls:
        total = 0
        for slot, buf in zip(c.slots, c.kernel.bufs):
            kind, index = schedule.slot_kinds[slot]
            if kind == "leaf":
                leaf = leaves[index]
                total += math.prod(leaf.shape) * itemsize(leaf.dtype)
            elif kind == "out":
                _, shape, dtype = schedule.outputs[index]
                total += math.prod(shape) * itemsize(dtype)
            else:
                total += schedule.temp_bytes[index]
        out.append(total)
    return out
