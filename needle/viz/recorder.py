"""Recording what a program compiles and runs, for the page of `python -m needle viz`.

While a Recorder records, the engine calls `Recorder.watch` around each run of a
compiled schedule (`engine.schedule_cache.WATCH`, its one hook there), with the graph
still pending.  The first run of each schedule is seen at every stage (`snapshot.Shot`);
later runs only count.  The schedules a `needle.jit` capture runs (the engine's
recording context, `engine.capture`, says a capture is on) make one entry, and the
capture's replays, which build no graph and so never reach the engine's realize, are
counted by a replay callback (`capture.on_replay`), the one needle.jit offers for state
a step advances.  The recording is bounded: the `limit` entries run last.

Times come from `needle.profile()`: a profile is opened around the first two runs of
each schedule, around each run of a capture and around a captured step's second
replay (never around the user's own code, so a profile the program opens itself does
not meet one of ours; while the program's profile is active none is opened).  The
host work before a profiled run (the Python that built its graph, the compiler passes,
compiling) is measured from the end of the previous run.  Nodes carry the user's
source lines through the profiler's stamping (`profiler.sources`), on while recording.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict

from ..engine import capture
from ..errors import NeedleError
from ..ir.nodes import is_single_op
from ..profiler import profile, sources
from ..runtime import counters
from .recording import Recording
from .snapshot import Shot, holders, line_of

#: the runs of a schedule profiled (its first, and its first warm one)
PROFILED_RUNS = 2
#: a captured step's call profiled: the capture is call 1, its first (verified) replay
#: call 2, so call 3 is its first replay run as every later one is
PROFILED_STEP_CALL = 3


class _Where(str):
    where = None


def _here(frame) -> str:
    """The user's line that made the engine run (needle/cli counts as user code, as for
    the profiler's lines)."""
    while frame is not None and sources.is_library(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ""
    origin = _Where()
    origin.where = (frame.f_code.co_filename, frame.f_lineno)
    return line_of(origin)


def _step_title(frame) -> str:
    """`needle.jit(train_step)`: the name of the jitted function being captured."""
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "_capture" else None
        if owner is not None and isinstance(getattr(owner, "name", None), str):
            return f"needle.jit({owner.name.split(' at ')[0]})"  # (its file and line: the entry's `where`)
        frame = frame.f_back
    return "needle.jit step"


class Item:
    """One entry of the page's list: a schedule (kind "schedule") and its runs, or a
    captured step (kind "step"): the schedules its capture ran, and its calls."""

    def __init__(self, number: int, kind: str, title: str, where: str):
        self.number, self.kind, self.title, self.where = number, kind, title, where
        self.shots = []           # Shot per schedule run (a step: in the capture's order)
        self.entries = []         # weak references to their compiled schedules
        self.count = 0            # runs (schedule) or calls (step: its capture, then its replays)
        self.timeline = None      # {"what", "segments", "total"}
        self.building = None      # segments of a capture's runs, or of a replay, being measured
        self.first = self.last = time.time()

    def data(self, shot_ids) -> dict:
        return {"id": self.number, "kind": self.kind, "title": self.title, "where": self.where,
                "count": self.count, "shots": [shot_ids[id(s)] for s in self.shots],
                "timeline": self.timeline}


class _Window:
    """A profile opened by the recorder around runs, and what it saw."""

    def __init__(self, item):
        self.item = item
        self.profile = profile()
        self.start = time.perf_counter()
        self.profile.__enter__()

    def close(self) -> list:
        """[(kernel name, start, seconds)] of the launches it timed, in order."""
        self.profile.__exit__(None, None, None)
        sources.install()  # (a profile's end removes the line stamping the recording keeps on)
        return [(e["name"], self.start + e["ts"] / 1e6, e["dur"] / 1e6)
                for e in self.profile.events if e.get("ph") == "X"]


def _segment(lane, name, start, seconds, shot=None, call=None) -> dict:
    return {"lane": lane, "name": name, "start": start * 1e3, "dur": max(seconds, 0.0) * 1e3,
            "shot": shot, "call": call}


class Recorder:
    """The schedules a program ran, the last `limit` entries (see the module docstring)."""

    def __init__(self, limit: int = 16):
        self.limit = max(1, int(limit))
        self.lock = threading.RLock()
        self.items = OrderedDict()                 # number -> Item, least recently run first
        self.by_entry = weakref.WeakKeyDictionary()  # compiled schedule -> its "schedule" Item
        self.steps = weakref.WeakKeyDictionary()     # capture's Recorder -> its "step" Item
        self.numbers = itertools.count()
        self.window = None                         # the profile open now (ours), if any
        self.started = self.last_end = time.perf_counter()
        self.compiler_at_end = self._compiler_seconds()
        self.program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        self.created = time.time()
        self.failures = 0
        self.active = True  # (replay callbacks outlive the recording: they stop counting with it)

    @staticmethod
    def _compiler_seconds() -> tuple:
        c = counters.COUNTERS
        return c["schedule_seconds"], c["compile_seconds"]

    # ---- the engine's hook ------------------------------------------------------------------------
    @contextlib.contextmanager
    def watch(self, entry, nodes, target):
        """Around one run of `entry` on the graph of `nodes` (engine.schedule_cache.WATCH)."""
        enter = time.perf_counter()
        sources.install()  # (again, if the program's own profile ended and removed it)
        step = capture.current() if capture.CURRENT is not None else None
        item, window = None, None
        with self.lock:
            try:
                item = self._note_run(entry, nodes, target, step, sys._getframe(2))
                if self.window is None and (item.count <= PROFILED_RUNS or item.kind == "step"):
                    window = self._open(item)
            except Exception as e:  # the recording must never break the program it watches
                self._failed(e)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            with self.lock:
                try:
                    if item is not None:
                        self._ran(item, step, window, enter, t0, t1)
                except Exception as e:
                    self._failed(e)
                self.last_end = t1
                self.compiler_at_end = self._compiler_seconds()

    def _failed(self, error) -> None:
        self.failures += 1
        if self.failures == 1:
            warnings.warn(f"needle viz: a schedule could not be recorded ({type(error).__name__}: {error}); "
                          "the program goes on", stacklevel=4)

    def _note_run(self, entry, nodes, target, step, frame) -> Item:
        if step is not None:
            item = self.steps.get(step)
            if item is None:
                item = self.steps[step] = self._new_item("step", _step_title(frame), _here(frame))
                item.count = 1
                capture.on_replay(_callback(self, "_replay_started", item))  # (before the capture's first run)
            item.shots.append(self._shot(entry, nodes, target))
            item.entries.append(weakref.ref(entry))
        else:
            item = self.by_entry.get(entry)
            if item is None or item.number not in self.items:
                item = self.by_entry[entry] = self._new_item("schedule", "", _here(frame))
                item.shots.append(self._shot(entry, nodes, target))
                item.entries.append(weakref.ref(entry))
                kernels = len(item.shots[0].data["kernels"])
                item.title = f"schedule {item.number}: {kernels} kernel{'s' if kernels != 1 else ''}"
            item.count += 1
            item.last = time.time()
        self._keep(item)
        return item

    def _new_item(self, kind, title, where) -> Item:
        item = Item(next(self.numbers), kind, title, where)
        self._keep(item)
        return item

    def _keep(self, item) -> None:
        self.items[item.number] = item
        self.items.move_to_end(item.number)
        while len(self.items) > self.limit:
            self.items.popitem(last=False)

    def _shot(self, entry, nodes, target) -> Shot:
        """The schedule at every stage: from an entry kept that ran it already, else made now."""
        for item in self.items.values():
            for ref, shot in zip(item.entries, item.shots):
                if ref() is entry:
                    return shot
        single = is_single_op(nodes)  # (an eager op: no Tensor graph)
        return Shot(nodes, target, () if single else holders(nodes))

    # ---- times --------------------------------------------------------------------------------------
    def _open(self, item):
        try:
            self.window = _Window(item)
        except NeedleError:  # the program's own profile is active: it times this run, not us
            self.window = None
        return self.window

    def _close(self, window) -> list:
        self.window = None
        return window.close()

    def _ran(self, item, step, window, enter, t0, t1) -> None:
        """After a run: its times (if profiled) into the item's timeline; during a
        capture, a callback that marks the end of this run in each replay."""
        if step is not None:
            capture.on_replay(_callback(self, "_replay_ran", item, len(item.shots) - 1))
        if window is None:
            return
        launches = self._close(window)
        sched, comp = (now - before for now, before in zip(self._compiler_seconds(), self.compiler_at_end))
        host = max(enter - self.last_end - sched - comp, 0.0)
        shot = len(item.shots) - 1 if item.kind == "step" else 0
        if item.kind == "schedule" or item.building is None or item.count != 1:
            item.building, origin = [], 0.0
        else:  # the capture's next run: after its earlier ones
            origin = max(s["start"] + s["dur"] for s in item.building) / 1e3
        segments = item.building
        segments.append(_segment("host", "Python (graph building)", origin, host))
        at = origin + host
        for name, seconds in (("compiler passes", sched), ("compiling kernels", comp)):
            if seconds > 0:
                segments.append(_segment("host", name, at, seconds))
                at += seconds
        segments.append(_segment("schedule", "run (binding, launches)", at, t1 - t0, shot))
        for i, (name, start, seconds) in enumerate(launches):
            segments.append(_segment("kernels", name, at + start - t0, seconds, shot, i))
        what = ("its run" if item.count == 1 else f"run {item.count}") if item.kind == "schedule" else \
            "the capture (traced: its Python is slower than a replay's)"
        item.timeline = _timeline(what, segments)

    def _replay_started(self, item) -> None:
        now = time.perf_counter()
        with self.lock:
            item.count += 1
            item.last = time.time()
            self._keep(item)
            if item.count == PROFILED_STEP_CALL and self.window is None and self._open(item) is not None:
                item.building = [_segment("host", "Python (between steps)", 0.0, now - self.last_end)]
                self.window.replay_start = now
                self.window.host = now - self.last_end

    def _replay_ran(self, item, run: int) -> None:
        now = time.perf_counter()
        with self.lock:
            self.last_end = now
            window = self.window
            if window is None or window.item is not item or run != len(item.shots) - 1:
                return
            launches = self._close(window)
            segments, base = item.building, window.host - window.replay_start
            segments.append(_segment("schedule", "replay (binding, launches)", window.host, now - window.replay_start))
            calls = [(s, i) for s, shot in enumerate(item.shots) for i in range(len(shot.data["kernels"]))]
            for (name, start, seconds), (s, i) in zip(launches, calls):
                segments.append(_segment("kernels", name, base + start, seconds, s, i))
            item.timeline = _timeline(f"replay {item.count - 1}", segments)

    # ---- results ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop recording: close a profile left open (a replay that raised midway)."""
        with self.lock:
            self.active = False
            if self.window is not None:
                self._close(self.window)

    def recording(self, fill_code: bool = False) -> Recording:
        """What was recorded, as the page reads it (`fill_code`: every kernel's code
        rendered now, as a file needs; else on demand)."""
        with self.lock:
            items = sorted((i for i in self.items.values() if i.shots), key=lambda i: i.number)
            shots, ids = {}, {}
            for item in items:
                for shot in item.shots:
                    if id(shot) not in ids:
                        ids[id(shot)] = f"s{len(ids)}"
                        shots[ids[id(shot)]] = shot
            memo = {}
            data = {"version": 1, "program": self.program, "argv": list(sys.argv), "created": self.created,
                    "limit": self.limit, "items": [item.data(ids) for item in items],
                    "shots": {sid: (shot.fill_code(memo) if fill_code else shot.data) for sid, shot in shots.items()}}
        return Recording(data, shots)


def _callback(recorder, method: str, item, *args):
    """A replay callback running `recorder.method(item, *args)` while the recording is on
    and both live (the callback lives as long as the capture; the recording need not)."""
    recorder_ref, item_ref = weakref.ref(recorder), weakref.ref(item)

    def callback():
        recorder, item = recorder_ref(), item_ref()
        if recorder is not None and item is not None and recorder.active:
            getattr(recorder, method)(item, *args)
    return callback


def _timeline(what, segments) -> dict:
    return {"what": what, "segments": segments,
            "total": max((s["start"] + s["dur"] for s in segments), default=0.0)}

