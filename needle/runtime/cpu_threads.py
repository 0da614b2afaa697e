"""The CPU's thread teams: which kernels are worth splitting across threads, how
many threads a launch may use now (team.py), and the launch of one kernel from
Python, on one thread or through libgomp's GOMP_parallel.

A woken worker thread is slow to start and a spinning one takes a core, so each
launching thread keeps what its launches saw (`_Workers`: when its team last ran, how
late sleeping workers started, how long each kernel takes on the team) and keeps a
kernel on the calling thread while waking the team would cost more than it saves.
Threading only splits a kernel's outer loop, so the results are the same either way.
"""
from __future__ import annotations

import ctypes
import functools
import threading
import time

from ..errors import BoundsError
from . import jit
from .team import Team

#: below this many elements of work per thread a kernel runs on one thread: a GOMP
#: round trip costs about a microsecond, and a small kernel finishes before a worker
#: starts (benchmarks/bench_cpu.py measures where threads start to pay)
MIN_WORK_PER_THREAD = 1 << 16
#: an exp, log, tanh, sigmoid or pow an element counts as this many more elements of
#: work (they cost several times an add's instructions)
TRANSCENDENTAL_WORK = 7
#: the same for matmul kernels, whose work is counted in flops: a small GEMM (an LSTM
#: cell's) finishes before a woken worker thread would start
MIN_FLOPS_PER_THREAD = 1 << 20
#: the words of a threaded kernel's data block before each thread's start time: bufs,
#: params, total, limits, err (the layout codegen/llvm.py `_emit_omp` reads)
OMP_ARGS = 5


def worth_threads(kernel) -> bool:
    """Whether each of two or more threads gets enough work to pay for waking them
    (a transcendental an element weighs as TRANSCENDENTAL_WORK elements)."""
    if kernel.thread_work:  # a matmul's kernels, by its flops
        return kernel.thread_work >= 2 * MIN_FLOPS_PER_THREAD
    return kernel.work * (1 + TRANSCENDENTAL_WORK * kernel.transcendentals) >= 2 * MIN_WORK_PER_THREAD


#: idle workers spin (libgomp: a few ms) and then sleep; after this long without a
#: threaded launch they are taken to be asleep (the native launch loop reads it from
#: each thread's `_Workers.clock`, set when the thread first launches)
ASLEEP_AFTER = 2e-3


class _Workers(threading.local):
    """This thread's GOMP workers (each thread that launches threaded kernels leads its
    own team), as its launches have seen them."""

    def __init__(self):
        #: [when a threaded launch last finished, ASLEEP_AFTER], in CLOCK_MONOTONIC ns
        #: (perf_counter's clock), and the team size now (TEAM): read and set by the
        #: native launcher too
        self.clock = (ctypes.c_int64 * 3)(-10 ** 18, int(ASLEEP_AFTER * 1e9), TEAM.size)
        self.clock_address = ctypes.addressof(self.clock)
        self.lag = 0.0        # seconds the last worker took to start after sleeping (last measured)
        self.retry_at = 0.0   # perf_counter() after which a sleeping team is woken again to measure it
        self.hot = {}         # (id(kernel), total) -> seconds the launch takes with the workers awake
        self.blocks = {}      # threads -> (the `_omp` wrapper's data block, its address), reused

    @property
    def last_end(self) -> float:
        """perf_counter() when a threaded launch last finished."""
        return self.clock[0] * 1e-9

    @last_end.setter
    def last_end(self, seconds: float) -> None:
        self.clock[0] = int(seconds * 1e9)

    def block(self, threads: int):
        """The data block of a launch on `threads` threads: OMP_ARGS arguments, then each
        thread's start time.  One per thread count, reused: launches from one thread
        run one after another."""
        entry = self.blocks.get(threads)
        if entry is None:
            data = (ctypes.c_int64 * (OMP_ARGS + threads))()
            entry = self.blocks[threads] = (data, ctypes.addressof(data))
        return entry


#: the thread team's size as the machine's load allows (runtime/team.py)
TEAM = Team()
WORKERS = _Workers()

def clock() -> int:
    """The address of this thread's clock block, its team size brought up to date: read
    by the native launch loop and by `launch` (once per schedule run)."""
    workers = WORKERS
    workers.clock[2] = TEAM.now(time.perf_counter())
    return workers.clock_address


#: how long a team's measured wake-up stands: after this, a kernel after an idle spell
#: goes to the workers again (the host may have calmed down or got busier)
RETRY_AFTER = 1.0


def _asleep(workers, now: float) -> bool:
    """Whether the workers have had time to stop spinning since their last launch."""
    return now - workers.last_end > ASLEEP_AFTER


def one_thread_is_faster(workers, key, threads: int, start: float) -> bool:
    """Whether a kernel launched now finishes sooner on this thread than on sleeping
    workers: the time threads save, its awake time x (threads - 1) at best, against how
    late the workers last woke (tens of microseconds on a quiet machine, milliseconds
    on a busy one)."""
    if not _asleep(workers, start) or start >= workers.retry_at:
        return False  # the workers are spinning, or their wake-up is to be measured again
    hot = workers.hot.get(key)
    return hot is not None and hot * (threads - 1) < workers.lag


def gomp_parallel_address() -> int:
    """GOMP_parallel's address for the native launcher (0 without libgomp)."""
    gomp = jit.gomp()
    return ctypes.cast(gomp.GOMP_parallel, ctypes.c_void_p).value if gomp is not None else 0


@functools.cache
def _gomp_parallel():
    """libgomp's GOMP_parallel(fn, data, threads, flags), typed once (plain ints pass)."""
    fn = jit.gomp().GOMP_parallel
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint], None
    return fn


def launch(kernel, args, i: int, total: int, threads: int, limits) -> None:
    """Kernel `i` of a schedule from its argument tables `args` (cpu_tables.Args), on
    at most `threads` threads (0: this one); `limits`: bounds checking's."""
    bufs_ptr = args.table_ptr + i * args.table_row
    params_ptr = args.params_ptr + i * args.params_row
    limits_ptr = limits.ctypes.data if limits is not None else 0
    if threads:
        workers, key, start = WORKERS, (id(kernel), total), time.perf_counter()
        threads = min(threads, workers.clock[2])
        if threads < 2 or one_thread_is_faster(workers, key, threads, start):
            threads = 0
    if threads:
        data, address = workers.block(threads)
        data[0], data[1], data[2], data[3], data[4] = bufs_ptr, params_ptr, total, limits_ptr, args.err_ptr
        ctypes.memset(address + OMP_ARGS * 8, 0, 8 * threads)  # each thread writes its start time here
        _gomp_parallel()(kernel.omp_address, address, threads, 0)
        end = time.perf_counter()
        lag = 0.0
        if _asleep(workers, start):
            starts = data[OMP_ARGS:]
            if min(starts) > 0:  # woken now: how late the last one started
                lag = workers.lag = max(max(starts) - starts[0], 0) * 1e-9
                workers.retry_at = end + RETRY_AFTER
        if len(workers.hot) > 4096:
            workers.hot.clear()
        workers.hot[key] = max(end - start - lag, 0.0)
        workers.last_end = end
    else:
        kernel.cfunc(bufs_ptr, params_ptr, 0, total, limits_ptr, args.err_ptr)
    if limits is not None and args.err[0]:
        name = kernel.kernel.bufs[args.err[0] - 1].name
        raise BoundsError(f"kernel {kernel.name}: index out of bounds on buffer {name} "
                          "(NEEDLE_BOUNDS_CHECK caught it; this is a needle bug, please report it)")
