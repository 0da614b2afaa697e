"""The schedule cache and the realize loop shared by the compiled devices.

A graph's structure (compiler.schedule.structure) plus the device's own settings
keys a compiled schedule; on a miss the passes run and the device compiles the
kernels.  `realize` then binds the graph's data, runs it and turns the requested
nodes into buffers.
"""
from __future__ import annotations

import time

from .. import config
from ..compiler import schedule as scheduling
from . import counters, describe
from .lru import LRUCache


#: bytes a cached schedule holds per kernel call (kernel IR, call tables, launch data),
#: for the devices' `nbytes` estimates that the cache's byte bound counts
ENTRY_BYTES_PER_CALL = 4096


class ScheduleCache:
    """Compiled schedules of one device, least recently used out first past
    `config.SCHEDULE_CACHE_SIZE` entries or `SCHEDULE_CACHE_BYTES`.
    `compile(schedule)` builds the device's CompiledSchedule (with an `nbytes`
    estimate); `settings()` adds what else changes the code (threads, bounds
    checking); `show(kernel)` prints code for NEEDLE_DEBUG=4."""

    def __init__(self, target: str, compile, settings, show=None):
        self.target, self.compile, self.settings, self.show = target, compile, settings, show
        self.entries = LRUCache("schedule", lambda: (config.SCHEDULE_CACHE_SIZE, config.SCHEDULE_CACHE_BYTES),
                                lambda entry: getattr(entry, "nbytes", 0))

    def get(self, nodes):
        """(compiled schedule, leaf NDArrays, run-time scalars) for the graph of `nodes`."""
        signature = scheduling.structure(nodes)
        key = (signature[0], self.settings())
        entry = self.entries.get(key)
        if entry is not None:
            counters.add("schedule_cache_hits")
            return entry, signature[1], signature[3]
        t0 = time.perf_counter()
        schedule, _ = scheduling.plan(nodes, target=self.target, signature=signature)
        counters.add("schedule_seconds", time.perf_counter() - t0)
        if config.DEBUG >= 3:
            for c in schedule.calls:
                print(c.kernel.text())
                if config.DEBUG >= 4 and self.show is not None:
                    print(self.show(c.kernel))
        entry = self.compile(schedule)
        self.entries.put(key, entry)
        return entry, signature[1], signature[3]

    def clear(self) -> None:
        self.entries.clear()


#: `RECORDER(entry, leaves, scalars, device, outputs)` after each schedule runs, or None;
#: set by needle.jit (engine/jit.py) only while it captures a step
RECORDER = None


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
    if RECORDER is not None:
        RECORDER(entry, leaves, scalars, nodes[0].device, outputs)
    for node, array in zip(nodes, outputs):
        node.become_buffer(array)
