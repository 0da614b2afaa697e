"""needle.viz: a whole step in the browser — every schedule a program ran, each at every
stage (autograd, graph, after view folding, fused groups, kernels), why each kernel
boundary is where it is, each kernel's loop IR and LLVM IR / CUDA C, the user's source
lines and a profiled step's timeline.

    NEEDLE_VIZ=1 python train.py          # records; at exit writes NEEDLE_VIZ_DIR/train-<pid>.json
    python -m needle viz                  # serves the newest recording on http://127.0.0.1:8765/
    python -m needle viz train.py         # both at once (or a built-in workload: mlp_step)

From Python:

    with needle.viz.record() as rec:
        step(); step()
    needle.viz.serve(rec.recording(), port=0)   # blocks; Server(...).start() runs it in a thread

Recording: recorder.py (the engine's one hook for it is `schedule_cache.WATCH`);
each schedule at every stage: snapshot.py; the file: recording.py; the page:
server.py and static/ (no CDN: everything it loads is served from the package).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys

from .. import config, observing
from ..engine import schedule_cache
from ..errors import NeedleError
from ..profiler import sources
from .recorder import Recorder
from .recording import Recording, newest
from .server import Server, serve

__all__ = ["Recorder", "Recording", "Server", "serve", "start", "stop", "record", "default_path", "newest"]

_stamping = None


def start(limit: int = None) -> Recorder:
    """Record every compiled schedule this process runs from now on (the last `limit`
    entries; default NEEDLE_VIZ_SCHEDULES)."""
    global _stamping
    if schedule_cache.WATCH is not None:
        raise NeedleError("needle.viz: a recording is already on (one at a time)")
    recorder = Recorder(config.VIZ_SCHEDULES if limit is None else limit)
    _stamping = sources.stamping()
    _stamping.__enter__()  # every node built records the user's line
    observing.start("viz")  # (first: the fast paths stand aside before the hook is in)
    schedule_cache.WATCH = recorder.watch
    return recorder


def stop() -> None:
    """Stop recording (what was recorded stays with its Recorder)."""
    global _stamping
    watch = schedule_cache.WATCH
    schedule_cache.WATCH = None
    if watch is not None:
        observing.stop("viz")
    recorder = getattr(watch, "__self__", None)
    if recorder is not None:
        recorder.close()
    if _stamping is not None:
        stamping, _stamping = _stamping, None
        stamping.__exit__(None, None, None)


@contextlib.contextmanager
def record(limit: int = None):
    """`with needle.viz.record() as rec:` records the schedules run inside the block."""
    recorder = start(limit)
    try:
        yield recorder
    finally:
        stop()


def default_path(script: str = None, pid: int = None) -> str:
    """Where NEEDLE_VIZ=1 writes a process's recording: NEEDLE_VIZ_DIR/<script>-<pid>.json
    (by default this process's)."""
    if script is None:
        script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else "python"
    stem = os.path.splitext(os.path.basename(script))[0] or "python"
    return os.path.join(config.VIZ_DIR, f"{stem}-{os.getpid() if pid is None else pid}.json")


def start_for_process() -> None:
    """NEEDLE_VIZ=1: record the whole process and write the recording at exit."""
    recorder = start()
    atexit.register(_write_at_exit, recorder)


def _write_at_exit(recorder: Recorder) -> None:
    stop()
    recording = recorder.recording()
    try:
        path = recording.save(default_path())
    except OSError as e:
        print(f"needle viz: could not write the recording: {e}", file=sys.stderr)
        return
    if recording.empty:
        print(f"needle viz: nothing was compiled and run, so nothing to show ({path})", file=sys.stderr)
    else:
        print(f"needle viz: recorded {recording.summary()} in {path}; `python -m needle viz {path}` "
              "shows it", file=sys.stderr)
