"""The schedule cache and the realize loop shared by the compiled devices.

A graph's structure (compiler.schedule.structure) plus the device's own settings
keys a compiled schedule; on a miss the passes run and the device compiles the
kernels.  `realize` then binds the graph's data, runs it and turns the requested
nodes into buffers.
"""
from __future__ import annotations

import threading
import time

from .. import config
from ..compiler import schedule as scheduling
from . import counters, describe


class ScheduleCache:
    """Compiled schedules of one device.  `compile(schedule)` builds the device's
    CompiledSchedule; `settings()` adds what else changes the code (threads,
    bounds checking); `show(kernel)` prints code for NEEDLE_DEBUG=4."""

    def __init__(self, target: str, compile, settings, show=None):
        self.target, self.compile, self.settings, self.show = target, compile, settings, show
        self.entries = {}
        self.lock = threading.Lock()

    def get(self, nodes):
        """(compiled schedule, leaf NDArrays, run-time scalars) for the graph of `nodes`."""
        key, leaves, _, scalars, _ = scheduling.structure(nodes)
        key = (key, self.settings())
        entry = self.entries.get(key)
        if entry is not None:
            counters.add("schedule_cache_hits")
            return entry, leaves, scalars
        t0 = time.perf_counter()
        schedule, _ = scheduling.plan(nodes, target=self.target)
        counters.add("schedule_seconds", time.perf_counter() - t0)
        if config.DEBUG >= 3:
            for c in schedule.calls:
                print(c.kernel.text())
                if config.DEBUG >= 4 and self.show is not None:
                    print(self.show(c.kernel))
        entry = self.compile(schedule)
        with self.lock:
            self.entries[key] = entry
        return entry, leaves, scalars

    def clear(self) -> None:
        self.entries.clear()


def realize(cache: ScheduleCache, nodes, wait=None) -> None:
    """Compute `nodes` with one schedule; `wait()` blocks until the device is done
    (so run_seconds and callers' timings count the work, not the launches)."""
    entry, leaves, scalars = cache.get(nodes)
    if config.DEBUG >= 1:
        print(describe.schedule_summary(entry.schedule))
    t0 = time.perf_counter()
    outputs = entry.run(leaves, scalars, nodes[0].device)
    if wait is not None:
        wait()
    counters.add("run_seconds", time.perf_counter() - t0)
    counters.add("schedules")
    for node, array in zip(nodes, outputs):
        node.become_buffer(array)
