"""How many threads a kernel launch may use now: the CPUs this process may run on,
less the cores other processes keep busy.

A thread team is only as fast as its slowest member.  When another process keeps a
core busy, one of the team's threads shares that core with it and the scheduler
hands it time slices of milliseconds: every threaded kernel then waits at its end
for a thread that is not running, and a step takes several times longer than on one
thread (torch's OpenMP collapses the same way).  So the team is sized from what the
machine has to spare, measured, not from how many CPUs it has.

The measure: the busy time of this process's CPUs (from /proc/stat, steal time
included: a vCPU its host does not run is as busy as one another process runs) less
this process's own CPU time and its compile workers', over the last interval, is the
number of cores other processes used.  Our own threads, spinning or not, are never counted against us, so
the measure does not swing when the team shrinks or grows.  The median of the last
three intervals decides, so that a passing burst does not move the team.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

from .. import config
from . import compile_pool

#: seconds between two readings of /proc/stat (a reading costs tens of microseconds)
INTERVAL = 0.1
#: readings whose median sizes the team
READINGS = 3
#: /proc/stat's fields that count as busy: user, nice, system, irq, softirq, steal
#: (guest time is already in user)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def _cpus() -> frozenset:
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return frozenset(range(os.cpu_count() or 1))


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc's time unit, per second


def _busy_seconds(cpus: frozenset):
    """Seconds the CPUs `cpus` have been busy since boot, or None where /proc/stat
    cannot be read."""
    try:
        with open("/proc/stat", "rb") as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    ticks = 0
    for line in text.split(b"\n"):
        if not line.startswith(b"cpu"):
            break
        name, *fields = line.split()
        if name == b"cpu" or int(name[3:]) not in cpus:
            continue
        ticks += sum(int(fields[k]) for k in _BUSY_FIELDS if k < len(fields))
    return ticks / _TICKS


def _process_seconds(pid: int):
    """utime + stime of process `pid` (from /proc/<pid>/stat), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


class Team:
    """The team size for this process's launches: read at every schedule run, measured
    again at most every INTERVAL seconds.  `config.ADAPT_THREADS` off: all the CPUs."""

    def __init__(self):
        self.others = []  # cores other processes used, last READINGS intervals
        self._workers = {}  # compile worker pid (of compile_pool.STARTED) -> its CPU seconds when last read
        self._gone = 0.0  # CPU seconds of the workers no longer listed there
        self._lock = threading.Lock()
        self._last = self._reading()  # (sets self.cpus)
        self.size = len(self.cpus)
        self._next = self._last[0] + INTERVAL

    def _reading(self) -> tuple:
        self.cpus = _cpus()
        return time.perf_counter(), _busy_seconds(self.cpus), time.process_time() + self._workers_seconds()

    def _workers_seconds(self) -> float:
        """CPU seconds of this process's compile workers, which compile its kernels and
        are not another process's load (a worker that exits keeps its last count)."""
        started = set(compile_pool.STARTED)
        for pid in [pid for pid in self._workers if pid not in started]:
            self._gone += self._workers.pop(pid)  # (bounded as STARTED is)
        for pid in started:
            seconds = _process_seconds(pid)
            if seconds is not None:
                self._workers[pid] = seconds
        return self._gone + sum(self._workers.values())

    def now(self, now: float) -> int:
        """The team size at `now` (perf_counter)."""
        if now >= self._next and self._lock.acquire(blocking=False):
            try:
                self._measure()
            finally:
                self._lock.release()
        return self.size

    def _measure(self) -> None:
        wall0, busy0, ours0 = self._last
        self._last = wall, busy, ours = self._reading()
        self._next = wall + INTERVAL
        if not config.ADAPT_THREADS or busy is None or busy0 is None or wall <= wall0:
            self.others, self.size = [], len(self.cpus)
            return
        others = max(0.0, (busy - busy0) - (ours - ours0)) / (wall - wall0)
        self.others = (self.others + [others])[-READINGS:]
        free = len(self.cpus) - statistics.median(self.others)
        self.size = max(1, min(len(self.cpus), int(free + 0.5)))
