"""Realization: turn pending (lazy) tensors into data, several at once."""
from __future__ import annotations

import contextlib

from . import autograd
from .autograd import realize_values, waiting as _waiting
from .errors import DTypeError


def realize(*tensors):
    """Compute every pending tensor given (Tensors, TensorTuples, or lists of them)
    with one schedule, so shared work is done once.  Returns the tensors."""
    if len(tensors) == 1 and type(tensors[0]) is autograd.Tensor and not _waiting(tensors[0]):
        return tensors[0]  # (a replay's result: realized already)
    values = []
    for t in tensors:
        for v in (t if isinstance(t, (list, tuple)) else (t,)):
            if v is None:
                continue
            if not isinstance(v, autograd.Value):
                raise DTypeError(f"realize: expected Tensors, got {type(v).__name__}")
            values.append(v)
    realize_values(values)
    return tensors[0] if len(tensors) == 1 else tensors


class lazy(contextlib.ContextDecorator):
    """`with needle.lazy(False):` runs the block eagerly (or lazily with True), in the
    calling thread only (as torch's no_grad: other threads keep their mode).  (A class,
    not a generator: a training loop enters it on every step, and a generator's context
    manager costs three times as much.)"""

    __slots__ = ("enabled", "entries")

    def __init__(self, enabled: bool = True):
        self.enabled = bool(enabled)
        #: (a thread's ModeState, the mode it had) per entry not left yet: one object may be
        #: entered inside itself, or by several threads at once as a decorator
        self.entries = []

    def __enter__(self):
        state = autograd._MODE.state
        self.entries.append((state, state.lazy))
        state.lazy = self.enabled and autograd.BACKEND == "nd"

    def __exit__(self, *exc):
        state, entries = autograd._MODE.state, self.entries
        mine = [e for e in entries if e[0] is state]
        # (none of this thread's: a generator's block entered on another thread ends here,
        # and that thread gets its mode back)
        entry = mine[-1] if mine else entries[-1]
        entries.remove(entry)
        entry[0].lazy = entry[1]
