"""Recording one call of a function, for `needle.jit`.

While a `Recorder` is active (`CURRENT`, on the thread that started it), the
layers below report to it, each through one cheap check on its own path:

- `read_state(tensor, data)`: an op reads a tensor's realized data (autograd);
- `created(tensor)`: a tensor was made during the call (autograd);
- `schedule(entry, leaves, scalars, device, outputs, nodes, target)`: a compiled
  schedule ran (engine.schedule_cache, through its RECORDER hook; `nodes` still
  hold their graph);
- `draw(fn, args, kwargs, tensor)`: a random tensor was drawn (init);
- `on_replay(callback)`: Python state a replay must advance (Adam's step count);
- `guard(read)`: a value the function's Python branched on (an optimizer's momentum
  being zero or not); a replay runs only while `read()` still gives it;
- `check(array, fn)`: a check of input data (labels in range), which a replay
  repeats on its own input's values;
- `host(fn, inputs, outputs, device)`: a host computation between schedules (the
  all-reduce of data-parallel training), replayed on each replay's buffers;
- `host_read(what)`: a value is about to be read back to Python, which a capture
  cannot replay faithfully, so it raises JitError naming the user's line.

This module imports nothing from needle above the error classes, so every layer
can call into it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref

from ..errors import JitError

#: the active Recorder, or None (read on hot paths: keep it a plain module global)
CURRENT = None

#: `DESCRIBE(entry, nodes, leaves, target)`: what each call of a compiled schedule
#: computes (fused ops, bytes, flops), installed by needle.profiler.  A replay builds
#: no graph, so the recorder keeps one description per captured schedule here, and a
#: profile of replayed steps can still say what each kernel fuses.
DESCRIBE = None
DESCRIPTIONS = weakref.WeakKeyDictionary()  # compiled schedule -> DESCRIBE's result
#: a context manager factory stamping user lines on the nodes built inside it
#: (needle.profiler.sources.stamping), used around a capture so DESCRIBE can name lines
STAMP_SOURCES = contextlib.nullcontext

_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_line() -> str:
    """'file:line: code' of the innermost frame outside the needle package."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_NEEDLE_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    import linecache
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{frame.f_code.co_filename}:{frame.f_lineno}: {code}"


class ScheduleRun:
    """One compiled schedule launched during the capture, with what it was given."""

    __slots__ = ("entry", "leaves", "scalars", "device", "outputs")

    def __init__(self, entry, leaves, scalars, device, outputs):
        self.entry, self.leaves, self.scalars = entry, list(leaves), list(scalars)
        self.device, self.outputs = device, list(outputs)


class HostRun:
    """A host computation `fn(*numpy inputs) -> numpy outputs` run between schedules."""

    __slots__ = ("fn", "leaves", "outputs", "device")

    def __init__(self, fn, leaves, outputs, device):
        self.fn, self.leaves, self.outputs, self.device = fn, list(leaves), list(outputs), device


class Recorder:
    """What one call did: schedules run, state read, tensors made, random draws and
    replay callbacks, in order."""

    def __init__(self):
        self.thread = threading.get_ident()
        self.runs = []            # ScheduleRun, in launch order
        self.readers = {}         # id(NDArray) -> (weakref to the Tensor read, user line)
        self.created_ids = set()  # ids of tensors made during the call ...
        self.created = []         # ... and weak references to them
        self.actions = []         # ("draw", index) | ("call", callback), in call order, each with the
        #                           number of schedules run before it (a replay keeps that order)
        self.draws = []           # (fn, args, kwargs, NDArray drawn)
        self.guards = []          # (read, value): replays need read() == value
        self.advanced = []        # objects whose Python state the replay callbacks advance
        self.checks = []          # (NDArray checked, fn(numpy values)), in call order

    def mine(self) -> bool:
        return threading.get_ident() == self.thread

    def read_state(self, tensor, data) -> None:
        for x in (data if isinstance(data, tuple) else (data,)):
            array = x.arg if getattr(x, "is_lazy", False) and x.op == "buffer" else x
            if getattr(array, "is_lazy", False) or id(array) in self.readers:
                continue
            self.readers[id(array)] = (weakref.ref(tensor), id(tensor) in self.created_ids, array)

    def created_tensor(self, tensor) -> None:
        self.created_ids.add(id(tensor))
        self.created.append(weakref.ref(tensor))

    def schedule(self, entry, leaves, scalars, device, outputs, nodes, target) -> None:
        if self.mine():  # another thread's realize is not part of this call
            self.runs.append(ScheduleRun(entry, leaves, scalars, device, outputs))
            if DESCRIBE is not None and entry not in DESCRIPTIONS:
                DESCRIPTIONS[entry] = DESCRIBE(entry, nodes, leaves, target)

    def host(self, fn, inputs, outputs, device) -> None:
        self.runs.append(HostRun(fn, inputs, outputs, device))

    def draw(self, fn, args, kwargs, tensor) -> None:
        self.actions.append(("draw", len(self.draws), len(self.runs)))
        self.draws.append((fn, args, kwargs, tensor._cached_data))

    def call(self, callback) -> None:
        self.actions.append(("call", callback, len(self.runs)))

    def guard(self, read) -> None:
        self.guards.append((read, read()))


def read_state(tensor, data) -> None:
    r = CURRENT
    if r is not None and r.mine():
        r.read_state(tensor, data)


def created(tensor) -> None:
    r = CURRENT
    if r is not None and r.mine():
        r.created_tensor(tensor)


def draw(fn, args, kwargs, tensor) -> None:
    r = CURRENT
    if r is not None and r.mine():
        r.draw(fn, args, kwargs, tensor)


def on_replay(callback, *changes) -> None:
    """Have `callback()` run at every replay of the step being captured (for Python
    state the step advances, such as an optimizer's step count).  The objects it
    changes (its own, for a bound method, and `changes`) may change during the call;
    any other Python number a captured call changes makes the function run plainly.
    A no-op when nothing is being captured."""
    r = CURRENT
    if r is not None and r.mine():
        r.call(callback)
        owner = getattr(callback, "__self__", None) or getattr(getattr(callback, "func", None), "__self__", None)
        r.advanced.extend(x for x in (owner, *changes) if x is not None)


def guard(read) -> None:
    """Have replays of the step being captured run only while `read()` (a cheap,
    comparable value) equals what it is now: for a branch the function's Python took
    on a value a replay would not see change (`if self.momentum:` in an optimizer),
    so that a new value makes a new capture instead of replaying the old branch.
    A no-op when nothing is being captured."""
    r = CURRENT
    if r is not None and r.mine():
        r.guard(read)


def check(array, fn) -> None:
    """Have replays of the step being captured call `fn(values)` on the host values of
    the input that `array` (an NDArray the function checked on the host: labels, index
    values) is at that replay, so bad data raises as it does without needle.jit.
    A no-op when nothing is being captured."""
    r = CURRENT
    if r is not None and r.mine():
        r.checks.append((array, fn))


def host_read(what: str) -> None:
    """Raise JitError if a capture is running on this thread: `what` (a `.numpy()`,
    `.item()`, printing, a Python `if` on a tensor) would read a value back to Python,
    and a replay, which does not run the function's Python, could not do the same."""
    r = CURRENT
    if r is not None and r.mine():
        raise JitError(f"needle.jit: {what} reads a tensor's value inside the captured function, "
                       f"at {user_line()}; a replay does not run Python, so it cannot be captured. "
                       "Return the tensor and read it after the call (or use NEEDLE_JIT=0).")
