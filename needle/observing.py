"""One flag for every fast path: is anything watching the computation now?

A profile (kernel timers, the schedule observer, stamped lines), a capture
(needle.jit's recorder) and needle.viz (each run of a compiled schedule) each learn
what happens through hooks that the general path calls.  The fast paths (the eager
shortcut, a compiled schedule's straight run, the native launch loop) skip those
calls, so they must stand aside while anyone watches.  They test `OBSERVED` alone,
which every watcher raises through `watch()` for as long as it watches: a new kind
of watcher then cannot be missed by a fast path that forgot to test its hook.
"""
from __future__ import annotations

import collections
import contextlib
import threading

#: True while at least one watcher watches (read on hot paths: a plain module global)
OBSERVED = False
_WATCHERS = collections.Counter()
_LOCK = threading.Lock()


def start(who: str) -> None:
    """`who` (a short name: "profile", "capture", "viz", "stamping") starts watching."""
    _change(who, 1)


def stop(who: str) -> None:
    """`who` stops watching (one `stop` per `start`)."""
    _change(who, -1)


@contextlib.contextmanager
def watch(who: str):
    start(who)
    try:
        yield
    finally:
        stop(who)


def watchers() -> dict:
    """Who watches now, and how many of each (for error messages and tests)."""
    with _LOCK:
        return {k: n for k, n in _WATCHERS.items() if n}


def _change(who: str, by: int) -> None:
    global OBSERVED
    with _LOCK:
        _WATCHERS[who] += by
        if _WATCHERS[who] < 0:
            _WATCHERS[who] = 0
            raise RuntimeError(f"observing.stop({who!r}) without a start")
        OBSERVED = any(_WATCHERS.values())
