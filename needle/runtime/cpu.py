"""Runs compiled schedules on the CPU: the host side of the one runner
(runner.ScheduleRunner) — host buffers, the buffer pool, argument tables gathered
with numpy, and launches through ctypes (split across threads with libgomp when
it pays).
"""
from __future__ import annotations

import ctypes
import functools
import sys
import threading
import time

import numpy as np

from .. import config
from ..backend_ndarray import host_memory
from ..backend_ndarray.ndarray import NDArray
from ..dtypes import DTYPES
from ..errors import BoundsError
from ..shapes import compact_strides
from . import jit, launcher
from .lru import ENTRY_BYTES_PER_CALL
from .counters import COUNTERS
from .pool import POOL
from .runner import ScheduleRunner
from .team import Team

#: `timer(compiled_schedule, call_index, start, seconds)` after each launch, or None;
#: set by needle.profiler only while a profile is active (no cost otherwise)
KERNEL_TIMER = None

#: below this many elements of work per thread a kernel runs on one thread
#: (a GOMP round trip costs about a microsecond; tiny kernels do not gain).  At 2^16
#: rather than 2^18, a captured LSTM step (its loss over 320 x 1000 logits, its output
#: layer's update) took 0.93-0.94x the time in three alternating runs; the MLP,
#: MLPResNet and ResNet9 steps did not change
MIN_WORK_PER_THREAD = 1 << 16
#: an exp, log, tanh, sigmoid or pow an element counts as this many more elements of
#: work: captured at 2^14 elements, exp alone ran 0.96x and an exp chain 0.91x the time
#: on two threads, at 2^15 0.82x and 0.77x (a plain add: 0.95x, 0.90x; kept on one
#: thread below 2^17, where training steps' small kernels did not gain)
TRANSCENDENTAL_WORK = 7
#: a schedule whose temps take at most this many bytes keeps their block with its own
#: tables instead of taking it from the pool and putting it back every run (two locked
#: pool calls, the block's address: about 2.5 us a run of a captured cross-entropy over
#: 256 x 10; 256 cached schedules hold 16 MB at most)
KEPT_TEMP_BYTES = 64 << 10
#: at most this many bytes of kernel outputs are kept for reuse (see `_Spares`)
SPARE_BYTES = 256 << 20
#: the same for matmul kernels, whose work is counted in flops: a small GEMM (an LSTM
#: cell's 16x256x64, 0.5 MFLOP) finishes before a woken worker thread would start.  At
#: 2^20 rather than 2^22, since spinning workers are started from the native launch loop
#: (about 1 us, not 6): a batched 4x8x32x32 matmul (2 MFLOP) 29 -> 16.5 us; ResNet9's
#: 2-5 MFLOP convolutions 94 -> 74, 97 -> 76, 145 -> 120 us, CNN's 4 MFLOP linear
#: layers 113 -> 70, 252 -> 158 us (profiled; whole steps unchanged within this VM's noise)
MIN_FLOPS_PER_THREAD = 1 << 20



class CompiledSchedule(ScheduleRunner):
    """A schedule (compiler.schedule.Schedule) with its kernels compiled (`kernels`,
    jit.CompiledKernel per call) and its argument tables precomputed; kernels that
    pay for it run on `threads` threads."""

    timer_of = staticmethod(lambda: KERNEL_TIMER)

    def __init__(self, schedule, kernels: list, threads: int, bounds_check: bool):
        super().__init__(schedule, bounds_check)
        self.kernels = kernels
        self.n_slots = 1 + max([s for c in schedule.calls for s in c.slots] +
                               [s for s, _, _ in schedule.outputs] + [schedule.n_leaves - 1, 0])
        width = max([len(c.slots) for c in schedule.calls] + [1])
        self.slot_matrix = np.zeros((len(schedule.calls), width), dtype=np.int64)
        #: bytes added to each pointer (compiler.buffer_offsets): table = ptrs[slots] + shifts
        self.shift_matrix = np.zeros((len(schedule.calls), width), dtype=np.int64)
        for i, c in enumerate(schedule.calls):
            self.slot_matrix[i, :len(c.slots)] = c.slots
            self.shift_matrix[i, :len(c.slots)] = c.byte_offsets()
        self.slots_ptr, self.shifts_ptr = self.slot_matrix.ctypes.data, self.shift_matrix.ctypes.data
        width = max([len(c.params) for c in schedule.calls] + [1])
        self.param_matrix = np.zeros((len(schedule.calls), width), dtype=np.intp)
        for i, c in enumerate(schedule.calls):
            self.param_matrix[i, :len(c.params)] = c.params
        self.output_strides = {shape: compact_strides(shape) for _, shape, _, _, _ in self.outputs}
        self.totals = [c.kernel.parallel[1] if c.kernel.parallel else 1 for c in schedule.calls]
        self.temp_slot_index = np.array([slot for slot, _ in self.temp_slots], dtype=np.intp)
        self.temp_offsets = np.array([offset for _, offset in self.temp_slots], dtype=np.int64)
        self.tables, self.tables_free = _Args(self), threading.Lock()
        #: bounds-checked, or two outputs share a slot (views of one result): `run` always
        #: takes the general loop
        self.general_only = bounds_check or any(allocated for *_, allocated in self.outputs)
        #: what this entry holds in memory, roughly (the schedule cache's byte bound)
        self.nbytes = (ENTRY_BYTES_PER_CALL * (1 + len(schedule.calls)) + self.slot_matrix.nbytes
                       + self.shift_matrix.nbytes + self.param_matrix.nbytes
                       + (self.temp_total if self.temp_total <= KEPT_TEMP_BYTES else 0))
        #: threads each kernel runs on (0: called directly on this thread)
        self.threaded = [threads if threads > 1 and k.omp_address and c.kernel.parallel is not None and
                         c.kernel.parallel[1] > 1 and _worth_threads(c.kernel) else 0
                         for c, k in zip(schedule.calls, self.kernels)]
        t = self.tables  # each kernel's argument pointers into the schedule's own tables
        self.launches = [(k, t.table_ptr + i * t.table_row, t.params_ptr + i * t.params_row, total, threaded, i)
                         for i, (k, total, threaded) in enumerate(zip(self.kernels, self.totals, self.threaded))]
        #: the replay plan of `launch_all`: every kernel in one native call (launcher.py:
        #: ctypes costs more than a small kernel runs), threaded ones with their team's blocks
        self.entries, self.team_blocks = _entries(self.launches, t.err_ptr)
        self.entries_ptr = self.entries.ctypes.data
        #: `launch_all`'s block: every kernel, after filling their pointer lists from the
        #: own tables' slots (the clock word is set at each launch: the launching thread's)
        self.own_block = launcher.block(self.entries_ptr, self.n_calls, t.ptrs_ptr, self.slots_ptr, self.shifts_ptr,
                                        t.table_ptr, self.slot_matrix.size, 0)
        self.own_block_ptr = self.own_block.ctypes.data
        self.native = launcher.launch_list(_gomp_parallel_address())
        self.spares = _Spares(len(self.outputs))

    # ---- the common run, straight through ------------------------------------------------
    def run(self, leaves, scalars, device) -> list:
        """`ScheduleRunner.run` for the run a replay or a training loop makes again and
        again: on the schedule's own tables, untimed, unchecked, its temps kept with the
        tables (or none), each output in a slot of its own.  The same steps without the
        general loop's tests and hook calls (tables, temps, the timer): a captured loss
        over 256 x 10 logits 16.4 -> 13 us a replay (kernels 8.7).  Any other run takes
        the general loop."""
        args = self.tables
        if (self.general_only or KERNEL_TIMER is not None or (self.temp_slots and args.kept_temp is None)
                or config.DEBUG >= 2 or not self.tables_free.acquire(False)):
            return super().run(leaves, scalars, device)
        try:
            if scalars and scalars is not args.prepared:
                self.prepare(args, scalars)
            slots = args.ptrs
            self.bind_leaves(args, slots, leaves)
            outputs = []
            for k, (slot, shape, dtype, size, _) in enumerate(self.outputs):
                handle, found = self.spares.take(k, self, size, dtype) if size else self.new_output(size, dtype)
                slots[slot] = found
                outputs.append(self.output_array(handle, shape, dtype, device, found))
            self.launch_all(args)
        finally:
            self.tables_free.release()
        COUNTERS["kernels_launched"] += self.n_calls
        return outputs

    # ---- the runner's hooks: host memory, ctypes and GOMP launches ----------------------
    def take_args(self):
        """The schedule's own tables (pointers computed once), unless another thread
        is running this schedule right now."""
        args = self.tables if self.tables_free.acquire(False) else _Args(self)
        return args, args.ptrs

    def give_args(self, args) -> None:
        if args is self.tables:
            self.tables_free.release()

    def bind_leaves(self, args, slots, leaves) -> None:
        """Each leaf's address, `address(handle)`'s remembered value read in place: two
        calls a leaf less on every run's path (a captured 16x32x256 matmul's call 21.3 ->
        20.7 us, medians of three runs; the captured LSTM step 0.98x the time in an
        in-process A/B)."""
        for i, leaf in enumerate(leaves):
            handle = leaf._handle
            try:
                base = handle._needle_address
            except AttributeError:
                base = address(handle)
            slots[i] = base + leaf._offset * handle.itemsize

    def new_output(self, size, dtype):
        buffer, found = host_memory.empty_with_address(max(size, 1), DTYPES[dtype])
        buffer = buffer if size else buffer[:0]
        _remember_address(buffer, found)  # read again when a later graph reads it
        return buffer, found

    def output_for(self, k, size, dtype, args):
        """A buffer this output had in one of the last two runs if nothing holds it any
        more, else a new one (kept for the next runs, within SPARE_BYTES; see `_Spares`).
        A step run again and again (a training loop, a replay) then skips the allocation,
        its Buffer and its address (2-2.5 us of Python an output: a captured 16x32x256
        matmul took 15.5-17 us a call instead of 19) and writes memory still in cache
        instead of fresh pages.  Only with the schedule's own tables, which one thread
        holds at a time."""
        if args is not self.tables or not size:
            return self.new_output(size, dtype)
        return self.spares.take(k, self, size, dtype)

    def output_array(self, handle, shape, dtype, device, address) -> NDArray:
        """NDArray.make without its argument normalization (every realize's outputs:
        their shape is a tuple of ints already, their storage a fresh Buffer)."""
        array = NDArray.__new__(NDArray)
        array._shape, array._strides, array._offset = shape, self.output_strides[shape], 0
        array._device, array._handle, array._dtype, array._np = device, handle, dtype, None
        return array

    def acquire_temp(self, nbytes, args):
        kept = args.kept_temp
        return kept[0] if kept is not None else POOL.acquire(nbytes)

    def release_temp(self, temp, args) -> None:
        """Back to the pool, unless the schedule's own tables keep it (see KEPT_TEMP_BYTES)."""
        if args.kept_temp is not None:
            return  # (the kept block: only these tables run with it)
        if args is self.tables and self.temp_total <= KEPT_TEMP_BYTES:
            args.kept_temp = (temp, host_memory.address_of(temp))
        else:
            POOL.release(temp)

    def temp_address(self, temp, args) -> int:
        kept = args.kept_temp
        return kept[1] if kept is not None else host_memory.address_of(temp)

    def bind_temps(self, args, slots, base: int) -> None:
        """The temp slots' addresses, in one numpy operation, and none at all when the
        pool handed back the block these tables were bound to last time (a replayed
        step: an LSTM's 241 temps, 151 in ResNet9's step)."""
        if args.temp_base != base:
            slots[self.temp_slot_index] = self.temp_offsets + base
            args.temp_base = base

    def prepare(self, args, scalars) -> None:
        """Every kernel's parameters, gathered in one numpy operation.  (Their pointer
        lists are gathered at launch by the native launcher: with the first kernels on
        `launch_all`'s path, before the first kernel on `launch`'s.)"""
        if scalars and scalars is not args.prepared:
            values = args.values
            for k, x in enumerate(scalars):
                values[k] = x.value
            values.take(self.param_matrix, out=args.params)
            # a replay's fixed scalars come as the same list each time: gathered once
            args.prepared = scalars if type(scalars) is tuple else None
        if self.bounds_check:
            args.err[0] = 0  # (only bounds-checked kernels write it)

    def launch_all(self, args) -> bool:
        """Every kernel, untimed and unchecked, from the schedule's own argument tables
        (their pointers computed once): the replay loop of a captured step.  The native
        loop gathers the pointer lists, then launches kernels until one is threaded and
        its team may be asleep; that one goes through `_launch`, the rest natively again."""
        if args is not self.tables:
            return False
        workers = WORKERS
        workers.clock[2] = TEAM.now(time.perf_counter())
        clock = workers.clock_address
        self.own_block[7] = clock  # (the tables are this thread's until the run ends)
        i, n = self.native(self.own_block_ptr), self.n_calls
        while i < n:  # a threaded kernel whose team may be asleep
            kernel, _, _, total, threads, _ = self.launches[i]
            _launch(kernel, args, i, total, threads, None)
            i += 1
            if i < n:
                rest = launcher.block(self.entries_ptr + i * launcher.WORDS * 8, n - i, 0, 0, 0, 0, 0, clock)
                i += self.native(rest.ctypes.data)
        return True

    def launch(self, args, i, limits, timed):
        if i == 0:  # fill every kernel's pointer list from `args`' slots, launching none
            WORKERS.clock[2] = TEAM.now(time.perf_counter())
            gather = launcher.block(0, 0, args.ptrs_ptr, self.slots_ptr, self.shifts_ptr, args.table_ptr,
                                    self.slot_matrix.size, WORKERS.clock_address)
            self.native(gather.ctypes.data)
        t0 = time.perf_counter()
        limits = np.asarray(limits, dtype=np.int64) if limits is not None else None
        _launch(self.kernels[i], args, i, self.totals[i], self.threaded[i], limits)
        return time.perf_counter() - t0 if timed else None

    def call_note(self, i) -> str:
        return "threads" if self.threaded[i] else ""


#: the words of a threaded kernel's data block before each thread's start time: bufs,
#: params, total, limits, err (the layout codegen/llvm.py `_emit_omp` reads)
OMP_ARGS = 5


def _entries(launches, err_ptr) -> tuple:
    """(the native launcher's entry table of every kernel, the data blocks of the
    threaded ones, which must live as long as the table points into them).  A
    threaded kernel's entry is its `_omp` wrapper and data block (bufs, params, total,
    limits, err, each thread's start time: codegen/llvm.py `_emit_omp`)."""
    rows, blocks = [], []
    for kernel, bufs, params, total, threads, _ in launches:
        if threads:
            blocks.append(np.array([bufs, params, total, 0, err_ptr] + [0] * threads, dtype=np.int64))
            rows.append((kernel.omp_address, blocks[-1].ctypes.data, 0, 0, 0, threads))
        else:
            rows.append((kernel.address, bufs, params, total, err_ptr, 0))
    return launcher.entries(rows), blocks


def address(handle) -> int:
    """The address of a host buffer, remembered on the buffer (finding it costs about
    a microsecond, and a training step reads the same buffers again)."""
    try:
        return handle._needle_address
    except AttributeError:
        pass
    found = host_memory.address_of(handle)
    _remember_address(handle, found)
    return found


def _remember_address(handle, value: int) -> None:
    try:
        handle._needle_address = value
    except AttributeError:  # a plain numpy array takes no attributes
        pass


def _worth_threads(kernel) -> bool:
    """Whether each of two or more threads gets enough work to pay for waking them
    (a transcendental an element weighs as TRANSCENDENTAL_WORK elements)."""
    if kernel.thread_work:  # a matmul's kernels, by its flops
        return kernel.thread_work >= 2 * MIN_FLOPS_PER_THREAD
    return kernel.work * (1 + TRANSCENDENTAL_WORK * kernel.transcendentals) >= 2 * MIN_WORK_PER_THREAD


class _Spares:
    """A compiled schedule's outputs of its last two runs, up to two per output, to be
    reused once nothing else refers to them: neither the Buffer (held by an NDArray, a
    Tensor) nor the array that owns its memory when it has one (numpy points views of
    the Buffer, `.numpy()`'s among them, at that owner directly), by CPython's reference
    counts.  Two, because a training step's new parameters, optimizer state and
    gradients replace the last step's only after the kernels ran: the last run's
    buffers are still held then, the run's before is free (ResNet9 allocated 124
    outputs a step, 556 fresh pages).  All schedules together keep at most
    SPARE_BYTES; a schedule's are freed with it."""

    __slots__ = ("kept", "nbytes")
    total = 0  # bytes kept by every schedule
    PER_OUTPUT = 2

    def __init__(self, n: int):
        self.kept = [()] * n  # per output: (buffer, address) pairs, the newest first
        self.nbytes = 0

    def take(self, k: int, compiled: "CompiledSchedule", size: int, dtype: str) -> tuple:
        kept = self.kept[k]
        for entry in reversed(kept):  # the oldest first: a state's newest is its value now
            if _references(entry) == _UNHELD[entry[0].base is None]:
                return entry
        fresh = compiled.new_output(size, dtype)
        dropped = kept[self.PER_OUTPUT - 1:]  # the oldest, when the output has its two
        old = sum(entry[0].nbytes for entry in dropped)
        new = fresh[0].nbytes
        if _Spares.total - old + new <= SPARE_BYTES:
            self.kept[k] = (fresh,) + kept[:self.PER_OUTPUT - 1]
            self.nbytes += new - old
            _Spares.total += new - old
        return fresh

    def __del__(self):
        type(self).total -= self.nbytes  # (not the module's name: gone at interpreter exit)


def _references(kept: tuple) -> tuple:
    """CPython's reference counts of a kept (buffer, address)'s buffer and of the array
    that owns its memory (None if it owns it)."""
    buffer = kept[0]
    owner = buffer.base
    return sys.getrefcount(buffer), (None if owner is None else sys.getrefcount(owner))


def _unheld(size: int) -> tuple:
    """_references of a fresh output that nothing else refers to: what a kept output
    reads once it is free (measured, not assumed: counts differ between versions)."""
    return _references(host_memory.empty_with_address(size, DTYPES["float32"]))


#: by whether the buffer owns its memory (small) or is a view of an aligned allocation
_UNHELD = {True: _unheld(4), False: _unheld(host_memory.ALIGN_MIN_BYTES)}


class _Args:
    """A schedule's argument tables: the slot pointers, each kernel's pointer list and
    parameters (gathered from them), the error flag, and raw pointers to all of it."""

    __slots__ = ("ptrs", "table", "values", "params", "err", "ptrs_ptr", "table_ptr", "table_row",
                 "params_ptr", "params_row", "err_ptr", "temp_base", "kept_temp", "prepared")

    def __init__(self, compiled: "CompiledSchedule"):
        self.ptrs = np.zeros(compiled.n_slots, dtype=np.int64)
        self.table = np.zeros(compiled.slot_matrix.shape, dtype=np.int64)
        self.values = np.zeros(max(compiled.schedule.n_params, 1), dtype=np.float64)
        self.params = np.zeros(compiled.param_matrix.shape, dtype=np.float64)
        self.err = np.zeros(1, dtype=np.int32)
        self.ptrs_ptr = self.ptrs.ctypes.data
        self.table_ptr, self.table_row = self.table.ctypes.data, self.table.strides[0]
        self.params_ptr, self.params_row = self.params.ctypes.data, self.params.strides[0]
        self.err_ptr = self.err.ctypes.data
        self.temp_base = None  # the temp block's address the slots hold (bind_temps)
        self.kept_temp = None  # (block, address) the schedule's own tables keep between runs
        self.prepared = None  # the tuple of scalars `params` were last gathered from


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

#: how long a team's measured wake-up stands: after this, a kernel after an idle spell
#: goes to the workers again (the host may have calmed down or got busier)
RETRY_AFTER = 1.0


def _asleep(workers, now: float) -> bool:
    """Whether the workers have had time to stop spinning since their last launch."""
    return now - workers.last_end > ASLEEP_AFTER


def _one_thread_is_faster(workers, key, threads: int, start: float) -> bool:
    """Whether a kernel launched now finishes sooner on this thread than on sleeping
    workers: the time threads save, its awake time x (threads - 1) at best, against how
    late the workers last woke.  A 2-core VM woke them in 40-110 us when quiet and in
    1-10 ms when the host was short of cores, where a lazy MLP step took 6-7 ms on two
    threads and 2.6-3.6 ms on one.  Threading only splits a kernel's outer loop, so the
    results are the same either way."""
    if not _asleep(workers, start) or start >= workers.retry_at:
        return False  # the workers are spinning, or their wake-up is to be measured again
    hot = workers.hot.get(key)
    return hot is not None and hot * (threads - 1) < workers.lag


def _gomp_parallel_address() -> int:
    """GOMP_parallel's address for the native launcher (0 without libgomp)."""
    gomp = jit.gomp()
    return ctypes.cast(gomp.GOMP_parallel, ctypes.c_void_p).value if gomp is not None else 0


@functools.cache
def _gomp_parallel():
    """libgomp's GOMP_parallel(fn, data, threads, flags), typed once (plain ints pass)."""
    fn = jit.gomp().GOMP_parallel
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint], None
    return fn


def _launch(kernel, args: _Args, i: int, total: int, threads: int, limits) -> None:
    bufs_ptr = args.table_ptr + i * args.table_row
    params_ptr = args.params_ptr + i * args.params_row
    limits_ptr = limits.ctypes.data if limits is not None else 0
    if threads:
        workers, key, start = WORKERS, (id(kernel), total), time.perf_counter()
        threads = min(threads, workers.clock[2])
        if threads < 2 or _one_thread_is_faster(workers, key, threads, start):
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
