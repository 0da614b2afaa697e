"""Runs compiled schedules on the CPU: the host side of the one runner
(runner.ScheduleRunner) — host buffers, the buffer pool, argument tables
(cpu_tables), reused outputs (cpu_outputs), and launches through the native launcher
or ctypes, split across threads when it pays (cpu_threads).
"""
from __future__ import annotations

import threading
import time

import numpy as np

from .. import config, observing
from ..backend_ndarray import host_memory
from ..backend_ndarray.ndarray import NDArray
from ..dtypes import DTYPES
from ..shapes import compact_strides
from . import cpu_threads, launcher
from .counters import COUNTERS
from .cpu_outputs import Spares
from .cpu_tables import Args, address, entries, remember_address
from .lru import ENTRY_BYTES_PER_CALL
from .pool import POOL
from .runner import ScheduleRunner

#: `timer(compiled_schedule, call_index, start, seconds)` after each launch, or None;
#: set by needle.profiler only while a profile is active (no cost otherwise)
KERNEL_TIMER = None

#: a schedule whose temps take at most this many bytes keeps their block with its own
#: tables instead of taking it from the pool and putting it back every run (two locked
#: pool calls a run; 256 cached schedules hold 16 MB at most)
KEPT_TEMP_BYTES = 64 << 10


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
        self.tables, self.tables_free = Args(self), threading.Lock()
        #: bounds-checked, or two outputs share a slot (views of one result): `run` always
        #: takes the general loop
        self.general_only = bounds_check or any(allocated for *_, allocated in self.outputs)
        #: what this entry holds in memory, roughly (the schedule cache's byte bound)
        self.nbytes = (ENTRY_BYTES_PER_CALL * (1 + len(schedule.calls)) + self.slot_matrix.nbytes
                       + self.shift_matrix.nbytes + self.param_matrix.nbytes
                       + (self.temp_total if self.temp_total <= KEPT_TEMP_BYTES else 0))
        #: threads each kernel runs on (0: called directly on this thread)
        self.threaded = [threads if threads > 1 and k.omp_address and c.kernel.parallel is not None and
                         c.kernel.parallel[1] > 1 and cpu_threads.worth_threads(c.kernel) else 0
                         for c, k in zip(schedule.calls, self.kernels)]
        t = self.tables  # each kernel's argument pointers into the schedule's own tables
        self.launches = [(k, t.table_ptr + i * t.table_row, t.params_ptr + i * t.params_row, total, threaded, i)
                         for i, (k, total, threaded) in enumerate(zip(self.kernels, self.totals, self.threaded))]
        #: the replay plan of `launch_all`: every kernel in one native call (launcher.py:
        #: ctypes costs more than a small kernel runs), threaded ones with their team's blocks
        self.entries, self.team_blocks = entries(self.launches, t.err_ptr)
        self.entries_ptr = self.entries.ctypes.data
        #: `launch_all`'s block: every kernel, after filling their pointer lists from the
        #: own tables' slots (the clock word is set at each launch: the launching thread's)
        self.own_block = launcher.block(self.entries_ptr, self.n_calls, t.ptrs_ptr, self.slots_ptr, self.shifts_ptr,
                                        t.table_ptr, self.slot_matrix.size, 0)
        self.own_block_ptr = self.own_block.ctypes.data
        self.native = launcher.launch_list(cpu_threads.gomp_parallel_address())
        self.spares = Spares(len(self.outputs))

    # ---- the common run, straight through ------------------------------------------------
    def run(self, leaves, scalars, device) -> list:
        """`ScheduleRunner.run` for the run a replay or a training loop makes again and
        again: on the schedule's own tables, untimed, unchecked, each output in a slot of
        its own.  The same steps without the general loop's tests and hook calls (tables,
        the timer), which cost a replay a good part of its host time (every model's step
        has temps past KEPT_TEMP_BYTES, and had taken the general loop for them).  Any
        other run takes the general loop."""
        args = self.tables
        if (self.general_only or observing.OBSERVED or config.DEBUG >= 2
                or not self.tables_free.acquire(False)):
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
            if self.temp_slots:
                self.launch_with_temps(args, slots, lambda: self.launch_all(args))
            else:
                self.launch_all(args)
        finally:
            self.tables_free.release()
        COUNTERS["kernels_launched"] += self.n_calls
        return outputs

    # ---- the runner's hooks: host memory, ctypes and GOMP launches ----------------------
    def take_args(self):
        """The schedule's own tables (pointers computed once), unless another thread
        is running this schedule right now."""
        args = self.tables if self.tables_free.acquire(False) else Args(self)
        return args, args.ptrs

    def give_args(self, args) -> None:
        if args is self.tables:
            self.tables_free.release()

    def bind_leaves(self, args, slots, leaves) -> None:
        """Each leaf's address, remembered on the NDArray (`_address`): a replay binds
        every parameter and state array of a step, and reading one object per leaf
        instead of the array, its storage and the storage's attributes is what counts
        when a step's kernels have pushed those objects out of the cache."""
        found = [leaf._address for leaf in leaves]
        if None in found:
            for i, leaf in enumerate(leaves):
                if found[i] is None:
                    handle = leaf._handle
                    found[i] = leaf._address = address(handle) + leaf._offset * handle.itemsize
        slots[:len(found)] = found

    def new_output(self, size, dtype):
        buffer, found = host_memory.empty_with_address(max(size, 1), DTYPES[dtype])
        buffer = buffer if size else buffer[:0]
        remember_address(buffer, found)  # read again when a later graph reads it
        return buffer, found

    def output_for(self, k, size, dtype, args):
        """A buffer this output had in one of the last two runs if nothing holds it any
        more, else a new one (kept for the next runs; see cpu_outputs.Spares).  A step
        run again and again (a training loop, a replay) then skips the allocation, its
        Buffer and its address (microseconds of Python an output) and writes memory still
        in cache instead of fresh pages.  Only with the schedule's own tables, which one thread
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
        array._address = address
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
        its team may be asleep; that one goes through `cpu_threads.launch`, the rest natively again."""
        if args is not self.tables:
            return False
        clock = cpu_threads.clock()
        self.own_block[7] = clock  # (the tables are this thread's until the run ends)
        i, n = self.native(self.own_block_ptr), self.n_calls
        while i < n:  # a threaded kernel whose team may be asleep
            kernel, _, _, total, threads, _ = self.launches[i]
            cpu_threads.launch(kernel, args, i, total, threads, None)
            i += 1
            if i < n:
                rest = launcher.block(self.entries_ptr + i * launcher.WORDS * 8, n - i, 0, 0, 0, 0, 0, clock)
                i += self.native(rest.ctypes.data)
        return True

    def launch(self, args, i, limits, timed):
        if i == 0:  # fill every kernel's pointer list from `args`' slots, launching none
            gather = launcher.block(0, 0, args.ptrs_ptr, self.slots_ptr, self.shifts_ptr, args.table_ptr,
                                    self.slot_matrix.size, cpu_threads.clock())
            self.native(gather.ctypes.data)
        t0 = time.perf_counter()
        limits = np.asarray(limits, dtype=np.int64) if limits is not None else None
        cpu_threads.launch(self.kernels[i], args, i, self.totals[i], self.threaded[i], limits)
        return time.perf_counter() - t0 if timed else None

    def call_note(self, i) -> str:
        return "threads" if self.threaded[i] else ""

