"""A pool of host buffers for intermediate results, reused across schedules so a
training loop does not allocate (and page-fault) its temporaries every step."""
from __future__ import annotations

import threading

import numpy as np

#: bytes the pool may keep idle
MAX_IDLE_BYTES = 1 << 30


class BufferPool:
    def __init__(self):
        self.free = {}
        self.idle_bytes = 0
        self.lock = threading.Lock()
        self.allocations = 0

    def acquire(self, nbytes: int) -> np.ndarray:
        nbytes = max(int(nbytes), 64)
        with self.lock:
            stack = self.free.get(nbytes)
            if stack:
                self.idle_bytes -= nbytes
                return stack.pop()
            self.allocations += 1
        return np.empty(nbytes, dtype=np.uint8)

    def release(self, buf: np.ndarray) -> None:
        with self.lock:
            if self.idle_bytes + buf.nbytes > MAX_IDLE_BYTES:
                return
            self.free.setdefault(buf.nbytes, []).append(buf)
            self.idle_bytes += buf.nbytes

    def clear(self) -> None:
        with self.lock:
            self.free.clear()
            self.idle_bytes = 0


POOL = BufferPool()
