"""Kernel outputs a compiled schedule reuses: the buffers of its last runs that
nothing refers to any more (by CPython's reference counts), bounded in bytes."""
from __future__ import annotations

import sys

from ..backend_ndarray import host_memory
from ..dtypes import DTYPES

#: at most this many bytes of kernel outputs are kept for reuse (see `Spares`)
SPARE_BYTES = 256 << 20


class Spares:
    """A compiled schedule's outputs of its last two runs, up to two per output, to be
    reused once nothing else refers to them: neither the Buffer (held by an NDArray, a
    Tensor) nor the array that owns its memory when it has one (numpy points views of
    the Buffer, `.numpy()`'s among them, at that owner directly), by CPython's reference
    counts.  Two, because a training step's new parameters, optimizer state and
    gradients replace the last step's only after the kernels ran: the last run's
    buffers are still held then, the run's before is free.  All schedules together keep at most
    SPARE_BYTES; a schedule's are freed with it."""

    __slots__ = ("kept", "nbytes")
    total = 0  # bytes kept by every schedule
    PER_OUTPUT = 2

    def __init__(self, n: int):
        self.kept = [()] * n  # per output: (buffer, address) pairs, the newest first
        self.nbytes = 0

    def take(self, k: int, compiled, size: int, dtype: str) -> tuple:
        """Output `k`'s buffer for this run: a kept one nothing holds, else a new one
        from `compiled` (a cpu.CompiledSchedule), kept if the bound allows."""
        kept = self.kept[k]
        for entry in reversed(kept):  # the oldest first: a state's newest is its value now
            if _references(entry) == _UNHELD[entry[0].base is None]:
                return entry
        fresh = compiled.new_output(size, dtype)
        dropped = kept[self.PER_OUTPUT - 1:]  # the oldest, when the output has its two
        old = sum(entry[0].nbytes for entry in dropped)
        new = fresh[0].nbytes
        if Spares.total - old + new <= SPARE_BYTES:
            self.kept[k] = (fresh,) + kept[:self.PER_OUTPUT - 1]
            self.nbytes += new - old
            Spares.total += new - old
        return fresh

    def __del__(self):
        type(self).total -= self.nbytes  # (not the module's name: gone at interpreter exit)


def _references(kept: tuple) -> tuple:
    """CPython's reference counts of a kept (buffer, address)'s buffer and of the array
    that owns its memory (None if it owns it)."""
    buffer = kept[0]
    owner = buffer.base
    return sys.getrefcount(buffer), (None if owner is None else sys.getrefcount(owner))


def _unheld(size: int) -> tuple:
    """_references of a fresh output that nothing else refers to: what a kept output
    reads once it is free (measured, not assumed: counts differ between versions)."""
    return _references(host_memory.empty_with_address(size, DTYPES["float32"]))


#: by whether the buffer owns its memory (small) or is a view of an aligned allocation
_UNHELD = {True: _unheld(4), False: _unheld(host_memory.ALIGN_MIN_BYTES)}
