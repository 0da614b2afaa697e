"""The runtime: executes graphs of pending nodes on their devices.

`realize_nodes` is the single door through which lazy work gets computed; each
device has an executor (reference numpy interpreter, compiled CPU kernels, CUDA).
"""
from __future__ import annotations

import threading
import weakref

from .counters import add, reset_stats, stats  # noqa: F401

class _Later(threading.local):
    """Nodes worth computing with the next schedule if they are still alive
    (backward() registers the loss, so `loss.backward(); opt.step(); loss.numpy()`
    computes the loss with the step instead of running the forward pass again).
    Per thread: a thread's pending loss must not be realized by another thread
    while that one is still building its step."""

    def __init__(self):
        self.nodes = weakref.WeakSet()


_later = _Later()


def realize_later(value) -> None:
    """Compute `value` (a Tensor or a lazy node) with the next schedule, if it is
    still alive then.  For state that no output depends on but that must not pile
    up pending work (BatchNorm running statistics, the loss after backward)."""
    data = getattr(value, "_cached_data", value)
    for node in (data if isinstance(data, tuple) else (data,)):
        if getattr(node, "is_lazy", False) and node.realized is None:
            _later.nodes.add(node)


def forget_later() -> None:
    """Drop this thread's realize_later requests (for code that only inspects graphs)."""
    _later.nodes.clear()


def realize_nodes(nodes) -> None:
    """Compute every pending node in `nodes` (one schedule per device)."""
    wanted, seen = [], set()
    later = _later.nodes
    extra = list(later) if later else ()
    for n in list(nodes) + list(extra):
        if n.realized is None and id(n) not in seen:
            seen.add(id(n))
            wanted.append(n)
    if extra:
        later.clear()
    by_device = {}
    for n in wanted:
        by_device.setdefault(n.device, []).append(n)
    for device, group in by_device.items():
        executor_for(device).realize(group)


_executors = {}


def executor_for(device):
    """The module whose `realize(nodes)` computes nodes living on `device`."""
    executor = _executors.get(device.name)
    if executor is None:
        if device.name == "cpu":
            from . import cpu as executor
        elif device.name == "cuda":
            from . import cuda as executor
        else:
            from . import reference_executor as executor
        _executors[device.name] = executor
    return executor
