"""Compile workers: child processes that turn LLVM IR into object code in parallel.

llvmlite runs every LLVM call under one process-wide lock, so threads cannot
compile two kernels at once; processes can.  A worker is `llvm_compile.py`
started through subprocess (fork + exec: it inherits no GOMP threads and, unlike
multiprocessing's spawn, does not re-run the user's main script) and fed over
pipes.  Workers are kept between batches; they exit when `shutdown()` closes
their stdin (at interpreter exit), or on their own when the parent dies.
"""
from __future__ import annotations

import atexit
import os
import queue
import subprocess
import sys
import threading

from . import llvm_compile

_BOOT = ("import importlib.util as u, sys; s = u.spec_from_file_location('needle_llvm_worker', sys.argv[1]); "
         "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve(sys.stdin.buffer, sys.stdout.buffer)")


class Worker:
    """One compile process and its pipes; `compile(job)` -> (ok, object code or message)."""

    def __init__(self):
        # by file path, not `-m needle...`: importing the package would cost the worker ~0.5 s
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, llvm_compile.__file__],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        STARTED.append(self.proc.pid)
        del STARTED[:-64]  # (bounded: the thread team reads the live ones' CPU time)

    def compile(self, job):
        """(ok, object code or message), or None if the worker died (it is closed then)."""
        try:
            llvm_compile.write_message(self.proc.stdin, job)
            reply = llvm_compile.read_message(self.proc.stdout)
        except OSError:
            reply = None
        if reply is None:
            self.close()
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


#: process ids of the workers started (the newest 64): the thread team (team.py) counts
#: their CPU time as this process's, since they compile its kernels
STARTED: list = []
_idle: list = []  # started workers between batches
_idle_lock = threading.Lock()


def _take() -> Worker:
    with _idle_lock:
        while _idle:
            w = _idle.pop()
            if w.alive():
                return w
    return Worker()


def _give_back(w: Worker) -> None:
    if w.alive():
        with _idle_lock:
            _idle.append(w)


def compile_all(jobs, workers: int) -> list:
    """(ok, object code or error message) for each job of the iterable `jobs`, in
    order, compiled by up to `workers` processes.  `jobs` is consumed here, in the
    calling thread, while the workers compile the jobs already produced: the caller
    renders the next kernel while earlier ones compile."""
    todo: queue.Queue = queue.Queue()
    results = {}

    def run():
        w = _take()
        try:
            while True:
                item = todo.get()
                if item is None:
                    return
                i, job = item
                reply = w.compile(job)
                if reply is None:  # killed, or LLVM aborted on this job: once more on a fresh worker
                    w = Worker()
                    reply = w.compile(job)
                    if reply is None:
                        reply = False, f"compile worker died (exit code {w.proc.returncode})"
                        w = Worker()
                results[i] = reply
        finally:
            _give_back(w)

    threads = [threading.Thread(target=run, name=f"needle-compile-{k}", daemon=True) for k in range(workers)]
    for t in threads:
        t.start()
    n = 0
    try:
        for n, job in enumerate(jobs, 1):
            todo.put((n - 1, job))
    finally:
        for _ in threads:
            todo.put(None)
        for t in threads:
            t.join()
    return [results[i] for i in range(n)]


def shutdown() -> None:
    """Stop the idle workers (they hold ~60 MB each)."""
    with _idle_lock:
        workers, _idle[:] = list(_idle), []
    for w in workers:
        w.close()


def worker_pids() -> list:
    """Process ids of the idle workers (for tests)."""
    with _idle_lock:
        return [w.proc.pid for w in _idle]


atexit.register(shutdown)
# a forked child must not share the parent's pipes: it starts its own workers
os.register_at_fork(after_in_child=lambda: (_idle.clear(), STARTED.clear()))
