"""The schedule cache and the realize loop of the compiled devices.

A graph's structure (`compiler.schedule.structure`) and the target key a
compiled schedule.  On a miss the compiler plans the graph for the target, and the
device's Backend (engine/backends.py) renders each kernel (LLVM IR for cpu(),
CUDA C for cuda()) and compiles and loads it.  `realize` then binds the graph's data, runs
the schedule and turns the requested nodes into buffers.
"""
from __future__ import annotations

import contextlib
import time
import weakref

from .. import config
from ..compiler import schedule as scheduling
from ..ir import build
from ..ir.nodes import is_single_op, toposort
from ..runtime import counters, cuda as cuda_runtime
from ..runtime.lru import LRUCache
from ..target import Target
from . import backends, capture, describe


class ScheduleCache:
    """Compiled schedules of one backend, least recently used out first past
    `config.SCHEDULE_CACHE_SIZE` entries or `SCHEDULE_CACHE_BYTES` (each entry's
    `nbytes` estimate); `target()` says what the code is made for now."""

    def __init__(self, backend):
        self.backend = backend
        self.target = backend.target
        self.entries = LRUCache("schedule", lambda: (config.SCHEDULE_CACHE_SIZE, config.SCHEDULE_CACHE_BYTES),
                                lambda entry: getattr(entry, "nbytes", 0))
        #: (structure key, target) -> the last plan made while source lines were stamped, which
        #: serves a graph built without them as well (the first replay of a needle.jit capture
        #: checks a plain call of the capture's graph); held as long as the cache holds it
        self.stamped = weakref.WeakValueDictionary()
        #: while a profile watches this device: `observer(lookup, nodes)` calls `lookup(nodes)`
        #: and notes what it found and what it cost (set by needle.profiler; the eager
        #: shortcut, which skips `get`, stands aside while it is set)
        self.observer = None

    def get(self, nodes):
        """(compiled schedule, leaf NDArrays, run-time scalars) for the graph of `nodes`."""
        if self.observer is not None:
            return self.observer(self._lookup, nodes)
        return self._lookup(nodes)

    @staticmethod
    def key(structure_key, target: Target, lines: tuple = None) -> tuple:
        """The cache key of a graph of this structure planned for `target`.  A graph
        built while source lines are stamped (a profile, needle.viz, a needle.jit capture)
        gets a plan of its own for its `lines` (`lines_of`), whose calls name them
        (compiler/call_origins.py)."""
        return structure_key, target, lines

    def find(self, structure_key, target: Target, lines: tuple = None):
        """The compiled schedule of a graph of this structure for `target` (and `lines`,
        when stamped), or None.  A graph built without lines takes a stamped plan too."""
        entry = self.entries.get(self.key(structure_key, target, lines))
        if entry is None and lines is None:
            entry = self.stamped.get((structure_key, target))
        return entry

    def _lookup(self, nodes):
        signature = scheduling.structure(nodes)
        target = self.target()
        lines = lines_of(nodes) if build.STAMP is not None else None
        entry = self.find(signature.key, target, lines)
        if entry is not None:
            counters.add("schedule_cache_hits")
            return entry, signature.leaves, signature.scalars
        with capture.unwatched():
            t0 = time.perf_counter()
            schedule, _ = scheduling.plan(nodes, target, signature)
            counters.add("schedule_seconds", time.perf_counter() - t0)
            if config.DEBUG >= 3:
                for c in schedule.calls:
                    print(c.kernel.text())
                    if config.DEBUG >= 4:
                        print(self.backend.code(c.kernel, target))
            entry = compile_schedule(schedule, target, self.backend)
        self.entries.put(self.key(signature.key, target, lines), entry)
        if lines is not None:
            self.stamped[(signature.key, target)] = entry
        return entry, signature.leaves, signature.scalars

    def clear(self) -> None:
        self.entries.clear()
        self.stamped.clear()


def lines_of(nodes) -> tuple:
    """The user's line stamped on each node of the graph (profiler/sources.py), in order:
    a stamped graph's part of its cache key.  Empty for one op over loads (an eager op's
    graph): one plan serves every line that runs the op, and a profile names the line
    from the node itself (profiler/attribution.eager_lines)."""
    if is_single_op(nodes):
        return ()
    return tuple([getattr(n.origin, "where", None) for n in toposort(nodes)])


def cpu_target() -> Target:
    return backends.CPU.target()


def cuda_target() -> Target:
    return backends.CUDA.target()


def target_for(stage_or_device: str) -> Target:
    """The target of the backend named so ("cuda": a `cuda` dump; anything else the CPU)."""
    return (backends.CUDA if stage_or_device == "cuda" else backends.CPU).target()


def _backend_for(target: Target):
    return backends.CUDA if target.grid else backends.CPU


def compile_schedule(schedule, target: Target, backend=None):
    """The backend's CompiledSchedule of `schedule` on `target` (kernels rendered,
    compiled and loaded; their statement trees released, see Kernel.release_body)."""
    compiled = (backend or _backend_for(target)).compile(schedule, target)
    for call in schedule.calls:
        call.kernel.release_body()
    return compiled


def kernel_code(kernel, target: Target, optimized: bool = False) -> str:
    """The code a kernel becomes on `target`: LLVM IR (before or after O3) or CUDA C."""
    return _backend_for(target).code(kernel, target, optimized)


CACHES = {b.name: ScheduleCache(b) for b in (backends.CPU, backends.CUDA)}
cuda_runtime.at_shutdown(CACHES["cuda"].clear)  # its entries hold device memory

#: needle.viz's one hook in the engine, set only while it records (NEEDLE_VIZ=1, `python -m
#: needle viz`): `WATCH(entry, nodes, target)`, a context manager around each run of a compiled
#: schedule, entered while `nodes` still hold their graph and left after the run and a
#: capture's note of it.  None otherwise (the eager shortcut stands aside while it is set).
WATCH = None
_UNWATCHED = contextlib.nullcontext()


def compiled_schedule(nodes):
    """(CompiledSchedule, leaves, scalars) for the graph of `nodes` (all on one device)."""
    return CACHES[backends.of(nodes[0].device).name].get(nodes)


def clear() -> None:
    """Forget every compiled schedule (the kernels stay in the runtime's caches)."""
    for cache in CACHES.values():
        cache.clear()


def realize(nodes) -> None:
    """Compute `nodes` (pending, all on one compiled device) with one schedule.  On
    cuda() it waits for the GPU, so run_seconds and callers' timings count the
    work, not the launches."""
    device = nodes[0].device
    backend = backends.of(device)
    backend.start()
    cache = CACHES[backend.name]
    entry, leaves, scalars = cache.get(nodes)
    if config.DEBUG >= 1:
        print(describe.schedule_summary(entry.schedule))
    with WATCH(entry, nodes, cache.target()) if WATCH is not None else _UNWATCHED:
        t0 = time.perf_counter()
        outputs = entry.run(leaves, scalars, device)
        backend.finish()
        counters.add("run_seconds", time.perf_counter() - t0)
        counters.add("schedules")
        recorder = capture.current() if capture.CURRENT is not None else None
        if recorder is not None:  # (needle.jit records the call it captures)
            recorder.schedule(entry, leaves, scalars, device, outputs, cache.target)
    for node, array in zip(nodes, outputs):
        node.become_buffer(array)
