"""Recording one call of a function, for `needle.jit`.

`with recording(recorder):` makes `recorder` the Recorder of the thread that opened
it; the layers below report to it, each through one cheap check on its own path
(`if capture.CURRENT is not None`: some thread records), then `current()`:

- `read_state(tensor, data)`: an op reads a tensor's data (autograd);
- `created(tensor)`: a Tensor was made during the call (autograd);
- `grad_set(tensor)`: needle set a Tensor's `.grad` (backward, reset_grad);
- `schedule(entry, leaves, scalars, device, outputs, nodes, target)`: a compiled
  schedule ran (engine.schedule_cache; `nodes` still hold their graph);
- `draw(fn, args, kwargs, tensor)`: a random tensor was drawn (init);
- `host_array(array, data)`: a Tensor was made from host data (a numpy argument);
- `on_replay(callback, *changes)`: Python state a replay must advance (Adam's t);
- `live(obj, read)`: a hyperparameter read at each replay (an optimizer's lr);
- `guard(read)`: a value the function's Python branched on that a replay must see
  unchanged (an optimizer's momentum being zero or not);
- `check(array, fn)`: a check of input data (labels in range), repeated by replays;
- `host(fn, inputs, outputs, device)`: a host computation between schedules (the
  all-reduce of data-parallel training), replayed on each replay's buffers;
- `host_read(what)`: a value is about to be read back to Python, which a replay
  cannot repeat: JitError naming the user's line.

`unwatched()` is the other way round: the engine's own work (planning and compiling
a schedule) runs without the capture's call hook.

This module imports nothing from needle above the error classes and the observed
flag (it raises `observing.OBSERVED` while any thread records), so every layer
can call into it.
"""
from __future__ import annotations

import _lsprof
import contextlib
import linecache
import os
import sys
import threading

from .. import observing
from ..errors import JitError

#: RECORDING while any thread records a call, else None (read on hot paths: a plain module
#: global; which Recorder is this thread's is `current()`)
CURRENT = None
RECORDING = "recording"
_LOCAL = threading.local()
_LOCK = threading.Lock()
_ACTIVE = [0]  # threads recording now

#: a context manager factory stamping user lines on the nodes built inside it
#: (needle.profiler.sources.stamping), used around a capture: the schedules a capture
#: plans then carry the user's lines in their calls' origins (compiler/call_origins.py),
#: so a profile of replayed steps, which build no graph, still names them
STAMP_SOURCES = contextlib.nullcontext

_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_frame(frame=None):
    """The innermost frame outside the needle package (or None)."""
    frame = frame or sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_NEEDLE_DIR):
        frame = frame.f_back
    return frame


def user_line(frame=None) -> str:
    """'file:line: code' of the innermost frame outside the needle package."""
    frame = user_frame(frame or sys._getframe(1))
    if frame is None:
        return "<unknown>"
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
    """What one call did: schedules run, state read, random draws, replay callbacks,
    host data turned into tensors, in order."""

    def __init__(self):
        self.runs = []         # ScheduleRun | HostRun, in launch order
        self.readers = {}      # id(NDArray) -> (Tensor read, NDArray)
        self.created_ids = set()  # ids of the Tensors made during the call
        self.grads_set = set()    # ids of the Tensors whose .grad needle set during the call
        self.actions = []      # ("draw", index) | ("call", callback), each with the number of
        #                        schedules run before it (a replay keeps that order)
        self.draws = []        # (fn, args, kwargs, NDArray drawn)
        self.guards = []       # (read, value): replays need read() == value
        self.advanced = []     # objects whose Python state the replay callbacks advance
        self.live = []         # (object, attribute names) read at each replay
        self.checks = []       # (NDArray checked, fn(numpy values)), in call order
        self.host_arrays = []  # (host array, NDArray made from it, user line)
        self.refused = []      # the JitErrors raised for values read (the step may catch them)
        self.constants = {}    # id -> host array needle's own code made a Tensor from (see `host_array`)
        self.quiet_hook = None  # the profile hook the engine's own work runs under (`unwatched`)
        self.host_effects = []  # (what, user line): reasons a replay cannot repeat the call

    def read_state(self, tensor, data) -> None:
        for x in (data if isinstance(data, tuple) else (data,)):
            array = x.arg if getattr(x, "is_lazy", False) and x.op == "buffer" else x
            if not getattr(array, "is_lazy", False) and id(array) not in self.readers:
                self.readers[id(array)] = (tensor, array)

    def schedule(self, entry, leaves, scalars, device, outputs, target_of=None) -> None:
        """A schedule run; `target_of()` reads the Target its device compiles for now (the
        thread count, bounds checking and unrolling settings of needle.config, which code
        may change at run time): a guard, once per device, so that a replay never runs
        kernels a plain call would no longer make."""
        self.runs.append(ScheduleRun(entry, leaves, scalars, device, outputs))
        if target_of is not None and all(read is not target_of for read, _ in self.guards):
            self.guards.append((target_of, target_of()))


@contextlib.contextmanager
def recording(recorder):
    """Make `recorder` (or None: nothing) this thread's recorder for the block; other
    threads record their own calls or none (a jitted function called inside another's
    capture runs inline, see captured/function.py)."""
    previous = current()
    _LOCAL.recorder = recorder
    _count((recorder is not None) - (previous is not None))
    try:
        yield recorder
    finally:
        _LOCAL.recorder = previous
        _count((previous is not None) - (recorder is not None))


def _count(change: int) -> None:
    global CURRENT
    with _LOCK:
        was = _ACTIVE[0]
        _ACTIVE[0] += change
        CURRENT = RECORDING if _ACTIVE[0] else None
        if bool(was) != bool(_ACTIVE[0]):
            (observing.start if _ACTIVE[0] else observing.stop)("capture")


def current():
    """This thread's Recorder, or None."""
    return getattr(_LOCAL, "recorder", None)


@contextlib.contextmanager
def unwatched():
    """The block runs without the capture's profile hook while this thread records a
    call: the capture's Tracer (captured/tracing.py) sees every Python call, and
    planning a schedule, which calls no user code, took 5x as long under it (ResNet9's
    capture call: 1.9 s instead of 0.35).  A hook of the user's that the Tracer passes
    its events on to (the recorder's `quiet_hook`: a pure-Python profiler) goes on
    seeing everything, so its calls and returns stay paired."""
    recorder = current()
    hook = sys.getprofile() if recorder is not None else None
    if hook is None:
        yield
        return
    sys.setprofile(recorder.quiet_hook)
    try:
        yield
    finally:
        set_profile(hook)


def can_give_back(hook) -> bool:
    """Whether `set_profile` can put back this hook that `sys.getprofile()` returned
    (not a C profiler's state other than cProfile's: pyinstrument's, say)."""
    return hook is None or callable(hook) or isinstance(hook, _lsprof.Profiler)


def set_profile(hook) -> None:
    """Put back a profile hook that `sys.getprofile()` returned: a function, or a
    profiler that installs its hook in C (cProfile's, which sys.setprofile refuses)."""
    if isinstance(hook, _lsprof.Profiler):
        hook.enable()
    else:
        sys.setprofile(hook)


def read_state(tensor, data) -> None:
    r = current()
    if r is not None:
        r.read_state(tensor, data)


def created(tensor) -> None:
    r = current()
    if r is not None:
        r.created_ids.add(id(tensor))


def grad_set(tensor) -> None:
    """needle set `tensor.grad` (backward, reset_grad): what it was before the call
    matters to the call only if something read it first (its data: a read_state)."""
    r = current()
    if r is not None:
        r.grads_set.add(id(tensor))


def draw(fn, args, kwargs, tensor) -> None:
    r = current()
    if r is not None:
        r.actions.append(("draw", len(r.draws), len(r.runs)))
        r.draws.append((fn, args, kwargs, tensor._cached_data))


def host_array(array, data) -> None:
    """A Tensor was made from `array` (numpy, a list, an NDArray): the capture finds
    out whether it is an argument (an input of every replay) or a constant."""
    r = current()
    if r is not None:
        if sys._getframe(2).f_code.co_filename.startswith(_NEEDLE_DIR):
            r.constants[id(array)] = array  # (needle's own code makes Tensors from shapes and values it holds)
        r.host_arrays.append((array, data, user_line(sys._getframe(1))))


def on_replay(callback, *changes) -> None:
    """Have `callback()` run at every replay of the step being captured (for Python
    state the step advances, such as an optimizer's step count).  The attributes it
    changes on its own object (a bound method's) and on `changes` are not guards of
    the capture.  A no-op when nothing is being captured."""
    r = current()
    if r is not None:
        r.actions.append(("call", callback, len(r.runs)))
        owner = getattr(callback, "__self__", None) or getattr(getattr(callback, "func", None), "__self__", None)
        r.advanced.extend(x for x in (owner, *changes) if x is not None)


def live(obj, read) -> None:
    """`read` (a lambda over `obj`'s attributes) is read again at every replay: those
    attributes are no guards of the capture (a learning rate a scheduler changes)."""
    r = current()
    if r is not None:
        r.live.append((obj, read.__code__.co_names))


def guard(read) -> None:
    """Have replays of the step being captured run only while `read()` (a cheap,
    comparable value) equals what it is now: for a branch taken on a value that is
    otherwise read at each replay (`if self.momentum:` in an optimizer).
    A no-op when nothing is being captured."""
    r = current()
    if r is not None:
        r.guards.append((read, read()))


def check(array, fn) -> None:
    """Have replays call `fn(values)` on the host values of the input that `array`
    (an NDArray the function checked on the host: labels, index values) is at that
    replay, so bad data raises as it does without needle.jit."""
    r = current()
    if r is not None:
        r.checks.append((array, fn))


def host(fn, inputs, outputs, device) -> None:
    r = current()
    if r is not None:
        r.runs.append(HostRun(fn, inputs, outputs, device))


def host_read(what: str, frame=None) -> None:
    """Raise JitError if a capture is running on this thread: `what` (a `.numpy()`,
    `.item()`, printing, a Python `if` on a tensor) would read a value back to Python,
    and a replay, which does not run the function's Python, could not do the same."""
    r = current()
    if r is not None:
        error = JitError(f"needle.jit: {what} reads a tensor's value inside the captured function, "
                         f"at {user_line(frame or sys._getframe(1))}; a replay does not run Python, so it cannot "
                         "be captured. Return the tensor and read it after the call (or use NEEDLE_JIT=0).")
        r.refused.append(error)  # (raised again after the call if the step catches it)
        raise error


def host_effect(what: str) -> None:
    """Note that the call being captured did `what`, which a replay cannot repeat: the
    function then runs plainly, with a warning naming the user's line."""
    r = current()
    if r is not None:
        r.host_effects.append((what, user_line(sys._getframe(1))))


def reading_from_user_code() -> bool:
    """Whether the caller's caller is user code (not needle): `t.cached_data` read by
    the function being captured is a host read; needle's own reads are not."""
    return current() is not None and not sys._getframe(2).f_code.co_filename.startswith(_NEEDLE_DIR)
