"""Running a compiled schedule, once for every device.

`ScheduleRunner.run(leaves, scalars, device)` binds the graph's leaf buffers to
the schedule's slots, allocates its outputs, takes its temps from the device's
pool, hands the run-time scalars over, launches every call (timed for the
profiler and NEEDLE_DEBUG=2, bounds-checked when the kernels were compiled so),
and returns the outputs as NDArrays.  A device (runtime/cpu.py, runtime/cuda.py)
supplies only what differs: how a buffer is addressed, allocated and pooled, and
how a kernel is launched and timed.
"""
from __future__ import annotations

import math
import time

from .. import config, observing
from ..backend_ndarray.ndarray import NDArray
from ..dtypes import itemsize
from .counters import COUNTERS

#: the starts of a schedule's temps in their block are multiples of this many bytes:
#: cudaMalloc's alignment (CUDA kernels' loads assume it), four CPU cache lines
TEMP_ALIGN = 256


class ScheduleRunner:
    """The run loop of a compiled schedule (compiler.schedule.Schedule).  A device
    subclass implements the hooks below; `args` is the device's argument state for
    one run (tables, flags), from `take_args` with `slots` (slot -> address, set by
    item assignment: a numpy array or a dict), and back by `give_args`."""

    #: the device's `timer(compiled, call_index, start, seconds)` (set by the profiler)
    timer_of = staticmethod(lambda: None)

    def __init__(self, schedule, bounds_check: bool):
        self.schedule, self.bounds_check = schedule, bounds_check
        #: per requested output: (slot, shape, dtype, elements, whether an earlier output
        #: has the slot already); worked out once, as run() is on every realize's path
        self.outputs, seen = [], set()
        for slot, shape, dtype in schedule.outputs:
            shape = tuple(int(s) for s in shape)
            self.outputs.append((slot, shape, dtype, math.prod(shape), slot in seen))
            seen.add(slot)
        # the temps live in one block from the device's pool (one take and one put a run:
        # an LSTM step has 241 temps), each at an offset a multiple of TEMP_ALIGN
        offsets, self.temp_total = [], 0
        for nbytes in schedule.temp_bytes:
            offsets.append(self.temp_total)
            self.temp_total += -(-max(nbytes, 1) // TEMP_ALIGN) * TEMP_ALIGN
        self.temp_slots = [(s, offsets[kind[1]]) for s, kind in schedule.slot_kinds.items() if kind[0] == "temp"]
        self.n_calls = len(schedule.calls)

    # ---- hooks ------------------------------------------------------------------------------
    def take_args(self): raise NotImplementedError                      # -> (args, slots)
    def give_args(self, args) -> None: pass
    def leaf_address(self, leaf) -> int: raise NotImplementedError   # (for the default bind_leaves)
    def bind_leaves(self, args, slots, leaves) -> None:  # leaf i's address into slot i
        leaf_address = self.leaf_address
        for i, leaf in enumerate(leaves):
            slots[i] = leaf_address(leaf)
    def new_output(self, size: int, dtype: str): raise NotImplementedError   # (handle, address)
    def output_for(self, k: int, size: int, dtype: str, args):  # the k-th output's storage this run
        return self.new_output(size, dtype)
    def output_array(self, handle, shape, dtype: str, device, address: int) -> NDArray: raise NotImplementedError
    def acquire_temp(self, nbytes: int, args): raise NotImplementedError
    def release_temp(self, temp, args) -> None: raise NotImplementedError
    def temp_address(self, temp, args) -> int: raise NotImplementedError
    def bind_temps(self, args, slots, base: int) -> None:  # each temp slot: its place in the block
        for slot, offset in self.temp_slots:
            slots[slot] = base + offset
    def prepare(self, args, scalars) -> None: pass                      # after every slot is bound
    def launch_all(self, args) -> bool: return False                    # untimed, unchecked fast path
    def launch(self, args, i: int, limits, timed: bool): raise NotImplementedError  # -> seconds if timed
    def call_note(self, i: int) -> str: return ""

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, leaves, scalars, device) -> list:
        args, slots = self.take_args()
        try:
            self.bind_leaves(args, slots, leaves)
            outputs, owned = [], {}
            for k, (slot, shape, dtype, size, allocated) in enumerate(self.outputs):
                if not allocated:
                    handle, address = self.output_for(k, size, dtype, args)
                    owned[slot] = (handle, address, size)
                    slots[slot] = address
                else:  # a slot already allocated for an earlier output (views of one result)
                    handle, address, _ = owned[slot]
                outputs.append(self.output_array(handle, shape, dtype, device, address))

            def launch():
                if scalars or self.bounds_check:  # (nothing to hand over otherwise)
                    self.prepare(args, scalars)
                self._launch_every(args, leaves, owned)
            self.launch_with_temps(args, slots, launch)
        finally:
            self.give_args(args)
        COUNTERS["kernels_launched"] += self.n_calls  # (counters.add, without the call: every run)
        return outputs

    def launch_with_temps(self, args, slots, launch) -> None:
        """`launch()` with the schedule's temps bound to a block (from the device's pool,
        or the one the tables keep), given back after."""
        block = self.acquire_temp(self.temp_total, args) if self.temp_slots else None
        try:
            if block is not None:
                self.bind_temps(args, slots, self.temp_address(block, args))
            launch()
        finally:
            if block is not None:
                self.release_temp(block, args)

    def _launch_every(self, args, leaves, owned) -> None:
        timer = self.timer_of()
        timed = timer is not None or config.DEBUG >= 2
        if not timed and not observing.OBSERVED and not self.bounds_check and self.launch_all(args):
            return
        for i, call in enumerate(self.schedule.calls):
            limits = self._limits(call, leaves, owned) if self.bounds_check else None
            t0 = time.perf_counter()
            seconds = self.launch(args, i, limits, timed)
            if timed:
                if config.DEBUG >= 2:
                    print(f"  {call.kernel.name:<28} {seconds * 1e6:9.1f} us  {self.call_note(i)}")
                if timer is not None:
                    timer(self, i, t0, seconds)

    def _limits(self, call, leaves, owned) -> list:
        """[lo, hi) in elements relative to each buffer pointer of `call` (for
        bounds-checked kernels)."""
        limits = []
        for slot, buf, shift in zip(call.slots, call.kernel.bufs, call.offsets):
            kind, index = self.schedule.slot_kinds[slot]
            if kind == "leaf":
                leaf = leaves[index]
                lo, hi = -leaf.offset, leaf._handle.size - leaf.offset
            elif kind == "out":
                lo, hi = 0, max(owned[slot][2], 1)
            else:
                lo, hi = 0, self.schedule.temp_bytes[index] // itemsize(buf.dtype)
            limits += [lo - shift, hi - shift]  # (the pointer is `shift` elements on)
        return limits
