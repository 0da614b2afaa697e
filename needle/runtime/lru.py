"""A map bounded by entry count and by bytes, least recently used out first.

Every cache the runtime keeps in memory (schedules, compiled kernels, CUDA
modules) is one of these, so a program that keeps meeting new shapes runs in
bounded memory; evictions are counted in `stats()` as `<name>_evictions`.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Tuple

from . import counters

#: bytes a cached compiled schedule holds per kernel call (kernel IR, call tables, launch
#: data), for the devices' `nbytes` estimates that the schedule cache's byte bound counts
ENTRY_BYTES_PER_CALL = 4096


class LRUCache:
    """`limits()` returns (max entries, max bytes), read at each insertion so that
    changes to `needle.config` take effect; `size_of(value)` is an entry's bytes."""

    def __init__(self, name: str, limits: Callable[[], Tuple[int, int]],
                 size_of: Callable[[object], int] = lambda value: 0):
        self.name, self.limits, self.size_of = name, limits, size_of
        self.entries: "OrderedDict[object, tuple]" = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()
        #: values that left the cache so far (evicted, replaced, cleared): a caller that
        #: remembers a value it found may use it without a `get` while this is unchanged
        self.removals = 0

    def get(self, key):
        """The value under `key` (now the most recently used), or None."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        try:
            self.entries.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile; the value is still good
            pass
        return entry[0]

    def put(self, key, value) -> None:
        size = int(self.size_of(value))
        max_items, max_bytes = self.limits()
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
                self.removals += 1
            self.entries[key] = (value, size)
            self.bytes += size
            while len(self.entries) > 1 and (len(self.entries) > max_items or self.bytes > max_bytes):
                _, (_, dropped) = self.entries.popitem(last=False)
                self.bytes -= dropped
                self.removals += 1
                counters.add(self.name + "_evictions")

    def clear(self) -> None:
        with self.lock:
            self.removals += len(self.entries)
            self.entries.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key) -> bool:
        return key in self.entries
