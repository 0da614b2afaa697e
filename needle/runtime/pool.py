"""Pools of buffers for intermediate results, reused across schedules so a training
loop does not allocate (and page-fault) its temporaries every step.

Idle buffers are bounded by count and bytes (`config.POOL_BUFFERS`,
`config.POOL_BYTES`); past either bound the least recently released go first,
counted as `pool_evictions`.  `IdleBuffers` is that bounded store, shared by the
host pool here and the CUDA device pool.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import config
from ..backend_ndarray import host_memory
from . import counters


class IdleBuffers:
    """Released buffers by size, least recently released evicted first."""

    def __init__(self):
        self.by_size = {}                # size -> [buffer, ...]
        self.order = OrderedDict()       # id(buffer) -> (buffer, size), oldest first
        self.idle_bytes = 0
        self.lock = threading.Lock()

    def take(self, size: int):
        """An idle buffer of exactly `size` bytes, or None."""
        with self.lock:
            stack = self.by_size.get(size)
            if not stack:
                return None
            buf = stack.pop()
            del self.order[id(buf)]
            self.idle_bytes -= size
            return buf

    def put(self, buf, size: int) -> None:
        with self.lock:
            self.by_size.setdefault(size, []).append(buf)
            self.order[id(buf)] = (buf, size)
            self.idle_bytes += size
            while self.order and (len(self.order) > config.POOL_BUFFERS or self.idle_bytes > config.POOL_BYTES):
                _, (old, old_size) = self.order.popitem(last=False)
                self.by_size[old_size].remove(old)
                self.idle_bytes -= old_size
                counters.add("pool_evictions")

    def clear(self) -> None:
        with self.lock:
            self.by_size.clear()
            self.order.clear()
            self.idle_bytes = 0


class BufferPool(IdleBuffers):
    """Host memory: numpy byte arrays."""

    def __init__(self):
        super().__init__()
        self.allocations = 0

    def acquire(self, nbytes: int) -> np.ndarray:
        nbytes = max(int(nbytes), 64)
        buf = self.take(nbytes)
        if buf is None:
            self.allocations += 1
            buf = host_memory.empty(nbytes, np.uint8)
        return buf

    def release(self, buf: np.ndarray) -> None:
        self.put(buf, buf.nbytes)


POOL = BufferPool()
