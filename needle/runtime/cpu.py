"""Runs compiled schedules on the CPU.

`CompiledSchedule.run` binds a graph's leaf buffers and run-time scalars to the
schedule's slots, allocates the outputs, takes temps from the buffer pool and
launches every kernel (split across threads with libgomp when it pays).
"""
from __future__ import annotations

import ctypes
import math
import threading
import time

import numpy as np

from .. import config
from ..backend_ndarray.ndarray import NDArray
from ..dtypes import np_dtype
from ..errors import BoundsError
from . import counters, jit
from .lru import ENTRY_BYTES_PER_CALL
from .pool import POOL

#: `timer(compiled_schedule, call_index, start, seconds)` after each launch, or None;
#: set by needle.profiler only while a profile is active (no cost otherwise)
KERNEL_TIMER = None

#: below this many elements of work per thread a kernel runs on one thread
#: (a GOMP round trip costs about a microsecond; tiny kernels do not gain)
MIN_WORK_PER_THREAD = 1 << 18
#: the same for matmul kernels, whose work is counted in flops: a small GEMM (an LSTM
#: cell's 16x256x64) finishes before a woken worker thread would start, and on a busy
#: machine waking it costs milliseconds
MIN_FLOPS_PER_THREAD = 1 << 22



class CompiledSchedule:
    """A schedule (compiler.schedule.Schedule) with its kernels compiled (`kernels`,
    jit.CompiledKernel per call) and its slot tables precomputed; kernels that pay
    for it run on `threads` threads."""

    def __init__(self, schedule, kernels: list, threads: int):
        self.schedule, self.kernels, self.threads = schedule, kernels, threads
        self.n_slots = 1 + max([s for c in schedule.calls for s in c.slots] +
                               [s for s, _, _ in schedule.outputs] + [schedule.n_leaves - 1, 0])
        width = max([len(c.slots) for c in schedule.calls] + [1])
        self.slot_matrix = np.zeros((len(schedule.calls), width), dtype=np.intp)
        for i, c in enumerate(schedule.calls):
            self.slot_matrix[i, :len(c.slots)] = c.slots
        width = max([len(c.params) for c in schedule.calls] + [1])
        self.param_matrix = np.zeros((len(schedule.calls), width), dtype=np.intp)
        for i, c in enumerate(schedule.calls):
            self.param_matrix[i, :len(c.params)] = c.params
        self.outputs = [(slot, shape, np_dtype(dtype), np_dtype(dtype).name, math.prod(shape))
                        for slot, shape, dtype in schedule.outputs]
        self.temp_slots = [(s, kind[1]) for s, kind in schedule.slot_kinds.items() if kind[0] == "temp"]
        self.totals = [c.kernel.parallel[1] if c.kernel.parallel else 1 for c in schedule.calls]
        self.tables, self.tables_free = _Args(self), threading.Lock()
        #: what this entry holds in memory, roughly (the schedule cache's byte bound)
        self.nbytes = (ENTRY_BYTES_PER_CALL * (1 + len(schedule.calls)) + self.slot_matrix.nbytes
                       + self.param_matrix.nbytes)
        #: threads each kernel runs on (0: called directly on this thread)
        self.threaded = [threads if threads > 1 and k.omp_address and c.kernel.parallel is not None and
                         c.kernel.parallel[1] > 1 and c.kernel.work >= _min_work(c.kernel) * 2 else 0
                         for c, k in zip(schedule.calls, self.kernels)]
        t = self.tables  # each kernel's argument pointers into the schedule's own tables
        self.launches = [(k, t.table_ptr + i * t.table_row, t.params_ptr + i * t.params_row, total, threaded, i)
                         for i, (k, total, threaded) in enumerate(zip(self.kernels, self.totals, self.threaded))]

    def run(self, leaves, scalars, device) -> list:
        # the schedule's own argument tables (pointers computed once), unless another
        # thread is running this schedule right now
        if self.tables_free.acquire(blocking=False):
            try:
                return self._run(leaves, scalars, device, self.tables)
            finally:
                self.tables_free.release()
        return self._run(leaves, scalars, device, _Args(self))

    def _run(self, leaves, scalars, device, args: "_Args") -> list:
        s = self.schedule
        ptrs = args.ptrs
        for i, leaf in enumerate(leaves):
            handle = leaf._handle
            ptrs[i] = address(handle) + leaf.offset * handle.itemsize
        outputs, out_arrays = [], {}
        for slot, shape, dtype, name, size in self.outputs:
            arr = out_arrays.get(slot)
            if arr is None:
                arr = out_arrays[slot] = np.empty(max(size, 1), dtype=dtype)
                ptrs[slot] = arr.ctypes.data
            out = NDArray.make(shape, device=device, handle=arr if size else arr[:0], dtype=name)
            _remember_address(out._handle, int(ptrs[slot]))  # read again when a later graph reads it
            outputs.append(out)
        temps = [POOL.acquire(n) for n in s.temp_bytes]
        for slot, buf in self.temp_slots:
            ptrs[slot] = temps[buf].ctypes.data
        # every kernel's pointer list and parameters, gathered in one numpy operation each
        np.take(ptrs, self.slot_matrix, out=args.table)
        values = args.values
        for k, x in enumerate(scalars):
            values[k] = x.value
        np.take(values, self.param_matrix, out=args.params)
        args.err[0] = 0
        timer = KERNEL_TIMER
        timed = timer is not None or config.DEBUG >= 2
        try:
            if args is self.tables and not timed and not config.BOUNDS_CHECK:
                _launch_all_of(self, args)
                counters.add("kernels_launched", len(s.calls))
                return outputs
            for i, kernel in enumerate(self.kernels):
                limits = _limits(s.calls[i], s, leaves, out_arrays, temps) if config.BOUNDS_CHECK else None
                t0 = time.perf_counter() if timed else 0.0
                _launch(kernel, args, i, self.totals[i], self.threaded[i], limits)
                if timed:
                    dt = time.perf_counter() - t0
                    if config.DEBUG >= 2:
                        print(f"  {kernel.name:<28} {dt * 1e6:9.1f} us  {'threads' if self.threaded[i] else ''}")
                    if timer is not None:
                        timer(self, i, t0, dt)
        finally:
            for t in temps:
                POOL.release(t)
        counters.add("kernels_launched", len(s.calls))
        return outputs


def _launch_all_of(compiled, args) -> None:
    """Every kernel of `compiled`, untimed and unchecked, from its own argument tables
    (their pointers computed once): the replay loop of a captured step."""
    err = args.err_ptr
    for kernel, bufs, params, total, threaded, i in compiled.launches:
        if threaded:
            _launch(kernel, args, i, total, threaded, None)
        else:
            kernel.cfunc(bufs, params, 0, total, 0, err)


def address(handle) -> int:
    """The address of a host buffer, remembered on the buffer (numpy's `.ctypes.data`
    costs about a microsecond, and a training step reads the same buffers again)."""
    try:
        return handle._needle_address
    except AttributeError:
        pass
    found = handle.ctypes.data
    _remember_address(handle, found)
    return found


def _remember_address(handle, value: int) -> None:
    try:
        handle._needle_address = value
    except AttributeError:  # a plain numpy array takes no attributes
        pass


def _min_work(kernel) -> int:
    return MIN_FLOPS_PER_THREAD if kernel.name.startswith("M_") else MIN_WORK_PER_THREAD


class _Args:
    """A schedule's argument tables: the slot pointers, each kernel's pointer list and
    parameters (gathered from them), the error flag, and raw pointers to all of it."""

    __slots__ = ("ptrs", "table", "values", "params", "err", "table_ptr", "table_row", "params_ptr",
                 "params_row", "err_ptr")

    def __init__(self, compiled: "CompiledSchedule"):
        self.ptrs = np.zeros(compiled.n_slots, dtype=np.int64)
        self.table = np.zeros(compiled.slot_matrix.shape, dtype=np.int64)
        self.values = np.zeros(max(compiled.schedule.n_params, 1), dtype=np.float64)
        self.params = np.zeros(compiled.param_matrix.shape, dtype=np.float64)
        self.err = np.zeros(1, dtype=np.int32)
        self.table_ptr, self.table_row = self.table.ctypes.data, self.table.strides[0]
        self.params_ptr, self.params_row = self.params.ctypes.data, self.params.strides[0]
        self.err_ptr = self.err.ctypes.data


def _limits(call, s, leaves, out_arrays, temps):
    """[lo, hi) in elements, relative to each buffer pointer, for bounds checking."""
    from ..dtypes import itemsize
    limits = []
    for slot, buf in zip(call.slots, call.kernel.bufs):
        kind = s.slot_kinds[slot]
        if kind[0] == "leaf":
            leaf = leaves[kind[1]]
            lo, hi = -leaf.offset, leaf._handle.size - leaf.offset
        elif kind[0] == "out":
            lo, hi = 0, out_arrays[slot].size
        else:
            lo, hi = 0, temps[kind[1]].size // itemsize(buf.dtype)
        limits += [lo, hi]
    return np.asarray(limits, dtype=np.int64)


def _launch(kernel, args: _Args, i: int, total: int, threads: int, limits) -> None:
    bufs_ptr = args.table_ptr + i * args.table_row
    params_ptr = args.params_ptr + i * args.params_row
    limits_ptr = limits.ctypes.data if limits is not None else 0
    if threads:
        data = np.array([bufs_ptr, params_ptr, total, limits_ptr, args.err_ptr], dtype=np.int64)
        jit.gomp().GOMP_parallel(ctypes.c_void_p(kernel.omp_address), ctypes.c_void_p(data.ctypes.data),
                                 ctypes.c_uint(threads), ctypes.c_uint(0))
    else:
        kernel.cfunc(bufs_ptr, params_ptr, 0, total, limits_ptr, args.err_ptr)
    if limits is not None and args.err[0]:
        name = kernel.kernel.bufs[args.err[0] - 1].name
        raise BoundsError(f"kernel {kernel.name}: index out of bounds on buffer {name} "
                          "(NEEDLE_BOUNDS_CHECK caught it; this is a needle bug, please report it)")
