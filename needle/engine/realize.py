"""The one door from pending to computed: `realize_nodes` computes lazy nodes with
one schedule per device; `realize_later` queues state that outlives a step (running
statistics, detached hidden states, gradients) for the next schedule.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..ir import reference
from ..ir.nodes import REDUCE
from ..runtime import counters
from . import backends, schedule_cache


class _Later(threading.local):
    """State worth computing with the next schedule, if it is still alive then.

    An insertion-ordered map id -> weak reference (to a Tensor, or to a lazy node),
    so the outputs of a step's schedule come in the same order every step and its
    structure key, hence the schedule cache, hits.  (A WeakSet iterates in hash
    order, which changes from step to step.)  An entry leaves the map when its
    object dies.  Per thread: a thread's pending loss must not be realized by
    another thread while that one is still building its step.
    """

    def __init__(self):
        self.refs = {}


_later = _Later()


def pending_nodes(value) -> list:
    """The lazy nodes still to compute behind a Tensor, a TensorTuple or a lazy node
    (none for realized data, or for None)."""
    data = getattr(value, "_cached_data", value)
    return [n for n in (data if isinstance(data, tuple) else (data,))
            if getattr(n, "is_lazy", False) and n.realized is None]


def pending_sums(value) -> bool:
    """Whether what is still to compute behind `value` sums (a reduction, a matmul): an
    elementwise value rounds alike in every kernel, a sum by the kernel computing it."""
    stack, seen = pending_nodes(value), set()
    while stack:
        n = stack.pop()
        if id(n) in seen or getattr(n, "realized", None) is not None:
            continue
        seen.add(id(n))
        if n.op in REDUCE or n.op == "matmul":
            return True
        stack.extend(n.srcs)
    return False


def realize_later(value) -> None:
    """Compute the pending data of `value` (a Tensor, a TensorTuple or a lazy node)
    with the next schedule, if that data is still alive then.  For state that
    outlives its step but that no output depends on (running statistics, a detached
    hidden state, the loss and the gradients after backward), so that it never stays
    pending and never keeps earlier steps' graphs alive.

    The request is for the data, not the tensor: a parameter the user projected
    after the optimizer's step (`w.data = w.data * mask`) and that the next step
    reassigns still has its projected value read by that step's graph, and as an
    output of the schedule it is stored once and read from its buffer there.
    Recomputed inside the next step's kernels instead, a matmul or a sum over it
    would round differently (LLVM vectorizes a reduction by its body), and the
    loop's numbers would depend on whether anything read the parameter between
    steps (needle.jit's replays compute it apart)."""
    refs = _later.refs
    for node in pending_nodes(value):
        key = id(node)
        if key not in refs:
            refs[key] = weakref.ref(node, lambda _, key=key, refs=refs: refs.pop(key, None))


def forget_later() -> None:
    """Drop this thread's realize_later requests (for code that only inspects graphs)."""
    _later.refs.clear()


def _later_nodes() -> list:
    """The pending nodes of this thread's live realize_later requests, in order
    (and the requests dropped: the next schedule computes them)."""
    refs = _later.refs
    if not refs:
        return []
    nodes = [n for ref in list(refs.values()) for n in pending_nodes(ref())]
    refs.clear()
    return nodes


def realize_nodes(nodes) -> None:
    """Compute every pending node in `nodes`, and the live realize_later state,
    with one schedule per device."""
    nodes = list(nodes)
    if len(nodes) == 1 and not _later.refs:  # `x.numpy()` with nothing queued: the common case
        node = nodes[0]
        if node.realized is None:
            _realize_on(node.device, nodes)
        return
    wanted, seen = [], set()
    for n in nodes + _later_nodes():
        if n.realized is None and id(n) not in seen:
            seen.add(id(n))
            wanted.append(n)
    by_device = {}
    for n in wanted:
        by_device.setdefault(n.device, []).append(n)
    for device, group in by_device.items():
        _realize_on(device, group)


def _realize_on(device, nodes) -> None:
    if backends.of(device) is not None:
        schedule_cache.realize(nodes)
    else:
        _interpret(nodes)


def _interpret(nodes) -> None:
    """The reference device (cpu_numpy()): the IR's numpy interpreter."""
    values = reference.evaluate(nodes)
    counters.add("schedules")
    for node, value in zip(nodes, values):
        owned = np.array(value, dtype=value.dtype, copy=True, order="C")  # never alias a leaf
        node.become_buffer(node.device.wrap(owned))

