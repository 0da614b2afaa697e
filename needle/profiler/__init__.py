"""`needle.profile()`: where the time of a step goes, kernel by kernel, and which
lines of the user's code made each kernel.

    with needle.profile() as p:
        loss = loss_fn(model(x), y); loss.backward(); opt.step(); loss.numpy()
    p.table(sort_by="total")            # prints the top kernels
    p.export_chrome_trace("step.json")  # chrome://tracing or ui.perfetto.dev

While a profile is active (and only then) three hooks are installed: the CPU and
CUDA executors time each launch (`runtime.cpu.KERNEL_TIMER`, `runtime.cuda.
KERNEL_TIMER`; CUDA kernels with events, so the time is GPU time), the schedule
caches report each graph they serve with the time spent in the passes and the
compiler (`ScheduleCache.get`, shadowed on the cache instances), and IR nodes
record the user's line (`sources`).  Leaving the block removes them all, so code
that is not being profiled runs exactly as before.  One profile at a time.

The profiler's own bookkeeping (re-running the passes once per schedule to map
kernels to ops, stamping nodes with lines) is timed and left out of the step time.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .. import observing
from ..errors import ArgumentError, NeedleError
from ..ir.nodes import is_single_op
from . import attribution, report, sources

_active_lock = threading.Lock()
_active: Optional["Profile"] = None


@dataclass
class KernelStats:
    """One row of the table: one kernel of a compiled schedule and its launches (a
    training loop reuses its schedule, so a row gathers the same kernel of every step)."""

    name: str
    device: str
    ops: tuple
    ir_ops: tuple
    calls: int = 0
    total: float = 0.0            # seconds
    bytes: int = 0                # summed over calls
    flops: float = 0.0            # summed over calls
    lines: Counter = field(default_factory=Counter)

    @property
    def mean(self) -> float:
        return self.total / self.calls if self.calls else 0.0


class Profile:
    """What ran inside a `with needle.profile()` block (see the module docstring)."""

    def __init__(self) -> None:
        self.events: List[dict] = []          # Chrome trace events: "X" per launch, "B"/"E" host work
        self.kernels: Dict[tuple, KernelStats] = {}
        self.schedule_seconds = 0.0
        self.compile_seconds = 0.0
        self.lookup_seconds = 0.0             # graph keys and cache lookups on every realize
        self.schedules = 0
        self.overhead = 0.0                   # the profiler's own work, excluded from `wall`
        self.wall = 0.0                       # seconds in the block, less the overhead
        self._start = 0.0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._calls: Dict[int, tuple] = {}    # id(compiled schedule) -> (schedule, [(kernel name, CallOrigin)])
        self._replayed: Dict[int, tuple] = {}  # the same for schedules run by needle.jit's replays
        self._caches = []
        self._observing = False  # (raised observing.OBSERVED: lowered once, whatever failed)

    # ---- the context manager ----------------------------------------------------------------
    def __enter__(self) -> "Profile":
        global _active
        with _active_lock:
            if _active is not None:
                raise NeedleError("needle.profile(): a profile is already active (they do not nest)")
            _active = self
        self._start = time.perf_counter()
        self._stamping = sources.SECONDS
        self._install()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self._uninstall()
        self._calls.clear()  # let the schedule cache evict what it likes once we are done
        self._replayed.clear()
        self.overhead += sources.SECONDS - self._stamping
        self.wall = max(time.perf_counter() - self._start - self.overhead, 0.0)
        with _active_lock:
            _active = None

    def _install(self) -> None:
        from ..engine import schedule_cache
        from ..runtime import cpu, cuda
        observing.start("profile")  # (first: the fast paths stand aside before any hook is in)
        self._observing = True
        for device, module, cache in (("cpu()", cpu, schedule_cache.CACHES["cpu"]),
                                      ("cuda()", cuda, schedule_cache.CACHES["cuda"])):
            module.KERNEL_TIMER = self._make_timer(device)
            cache.observer = self._make_observer(cache, device)
            self._caches.append((module, cache))
        self._own_stamping = not sources.installed()  # (needle.viz may keep it on around us)
        sources.install()

    def _uninstall(self) -> None:
        if self._own_stamping:
            sources.uninstall()
        for module, cache in self._caches:
            module.KERNEL_TIMER = None
            cache.observer = None
        self._caches.clear()
        if self._observing:
            observing.stop("profile")
            self._observing = False

    # ---- hooks ------------------------------------------------------------------------------
    def _make_observer(self, cache, device: str):
        from ..runtime import counters

        def observe(lookup, nodes):
            c = counters.COUNTERS
            s0, k0 = c["schedule_seconds"], c["compile_seconds"]
            t0 = time.perf_counter()
            entry, leaves, scalars = lookup(nodes)
            t1 = time.perf_counter()
            sched, comp = c["schedule_seconds"] - s0, c["compile_seconds"] - k0
            self._note_realize(entry, nodes, device, t0, t1, sched, comp)
            return entry, leaves, scalars
        return observe

    def _note_realize(self, entry, nodes, device, t0, t1, sched, comp) -> None:
        start = time.perf_counter()
        with self._lock:
            self.schedules += 1
            self.schedule_seconds += sched
            self.compile_seconds += comp
            self.lookup_seconds += max(t1 - t0 - sched - comp, 0.0)
            if sched > 0:
                self._span("schedule (passes)", "schedule", t0, sched, device)
            if comp > 0:
                self._span("compile", "compile", t0 + sched, comp, device)
            known = self._calls.get(id(entry))
            if known is None:
                known = self._calls[id(entry)] = (entry, attribution.describe_calls(entry))
        single = is_single_op(nodes)
        self._local.current = (id(entry), attribution.eager_lines(nodes) if single else None)
        self.overhead += time.perf_counter() - start

    def _make_timer(self, device: str):
        def timer(entry, i, t0, seconds):
            start = time.perf_counter()
            known = self._calls.get(id(entry))
            if known is not None:  # a realize this profile saw (eager ops: the line of the op)
                name, info = known[1][i]
                current = getattr(self._local, "current", None)  # (the realize this thread noted last:
                eager = current is not None and current[0] == id(entry)  # not a replay of a schedule it ran)
                lines = current[1] if eager and current[1] is not None else dict(info.lines)
            else:  # a replayed step of needle.jit: what its schedule's calls record
                with self._lock:
                    replayed = self._replayed.get(id(entry))
                    if replayed is None:
                        replayed = self._replayed[id(entry)] = (entry, attribution.describe_calls(entry))
                name, info = replayed[1][i]
                lines = dict(info.lines)
            key = (device, id(entry), i)  # one row per kernel of each schedule
            with self._lock:
                row = self.kernels.get(key)
                if row is None:
                    row = self.kernels[key] = KernelStats(name, device, info.ops, info.ir_ops)
                row.calls += 1
                row.total += seconds
                row.bytes += info.bytes
                row.flops += info.flops
                row.lines.update(lines)
                self._event(name, "kernel", device, t0, seconds,
                            {"ops": ", ".join(info.ops), "bytes": info.bytes, "flops": info.flops,
                             "lines": [sources.short(w) for w in lines]})
            self.overhead += time.perf_counter() - start
        return timer

    def _span(self, name, cat, t0, seconds, device) -> None:
        """Host work as a begin/end pair, so that complete ("X") events are launches only."""
        ts = (t0 - self._start) * 1e6
        self.events.append({"name": name, "cat": cat, "ph": "B", "pid": "needle", "tid": "host", "ts": ts,
                            "args": {"device": device}})
        self.events.append({"name": name, "cat": cat, "ph": "E", "pid": "needle", "tid": "host",
                            "ts": ts + seconds * 1e6})

    def _event(self, name, cat, tid, t0, seconds, args) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "pid": "needle", "tid": tid,
                            "ts": (t0 - self._start) * 1e6, "dur": seconds * 1e6, "args": args})

    # ---- results ----------------------------------------------------------------------------
    @property
    def kernel_seconds(self) -> float:
        return sum(r.total for r in self.kernels.values())

    def rows(self, sort_by: str = "total") -> List[KernelStats]:
        """The kernels, sorted by `sort_by`: total, mean, calls, bytes, flops or name."""
        keys = {"total": lambda r: -r.total, "mean": lambda r: -r.mean, "calls": lambda r: -r.calls,
                "bytes": lambda r: -r.bytes, "flops": lambda r: -r.flops, "name": lambda r: r.name}
        if sort_by not in keys:
            raise ArgumentError(f"profile.table: sort_by must be one of {', '.join(keys)}, got {sort_by!r}")
        return sorted(self.kernels.values(), key=keys[sort_by])

    def table(self, sort_by: str = "total", limit: Optional[int] = 20, print_it: bool = True) -> str:
        """Print (and return) the top kernels with their share of the kernel time and of the
        step, then the schedule, compile and lookup rows."""
        text = report.table(self, self.rows(sort_by), limit)
        if print_it:
            print(text)
        return text

    def export_chrome_trace(self, path) -> str:
        """Write the Chrome trace-event JSON (one complete event per launch) to `path`."""
        return report.chrome_trace(self, path)

    def __repr__(self) -> str:
        return (f"<needle.Profile: {sum(r.calls for r in self.kernels.values())} launches of "
                f"{len(self.kernels)} kernels, {self.kernel_seconds * 1e3:.2f} ms in kernels, "
                f"step {self.wall * 1e3:.2f} ms>")


def profile() -> Profile:
    """`with needle.profile() as p:` records every kernel launched inside the block."""
    return Profile()

