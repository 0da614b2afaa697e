"""The CUDA runtime, through PyCUDA (imported lazily: needle imports and runs without it).

- the driver (cuda_driver.py, re-exported here): availability, the context,
  module compilation and its caches.
- storage (cuda_memory.py, re-exported here): `DeviceBuffer` from a pool of
  allocations reused by size, host copies, the setitem/fill kernel.
- execution: `CompiledSchedule(schedule, source, names, bounds_check)` loads the
  module the engine rendered; `run` binds slots to leaf pointers, outputs, pooled
  temps and a device array of the run-time scalars; one launch per call with the
  block size the kernel was generated for and a grid capped at 32 blocks per SM
  (every mapping is grid-stride).  NEEDLE_DEBUG=2 times each kernel with CUDA
  events; bounds-checked kernels raise BoundsError.
"""
from __future__ import annotations


import numpy as np

from ..backend_ndarray.ndarray import NDArray
from ..errors import BoundsError, DeviceError
from .cuda_driver import _modules, _state, at_shutdown, available, describe, function, load_module, require  # noqa: F401
from .cuda_memory import (POOL, DeviceBuffer, DevicePool, FlatAccess, HostView, assign,  # noqa: F401
                          from_numpy, to_numpy)
from .lru import ENTRY_BYTES_PER_CALL
from .runner import ScheduleRunner

#: `timer(compiled_schedule, call_index, start, seconds)` after each launch (GPU time
#: from CUDA events), or None; set by needle.profiler only while a profile is active
KERNEL_TIMER = None


class CompiledSchedule(ScheduleRunner):
    """A Schedule with its module loaded and launch shapes precomputed: the device
    side of the one runner (runner.ScheduleRunner) — device buffers and pool, a
    device array of the run-time scalars, prepared launches timed by CUDA events."""

    timer_of = staticmethod(lambda: KERNEL_TIMER)

    def __init__(self, schedule, source: str, names: list, bounds_check: bool):
        super().__init__(schedule, bounds_check)
        s = require()
        self.source, self.names = source, names
        kernels = [c.kernel for c in schedule.calls]
        module = load_module(self.source, len(kernels))
        self.functions = []
        for k, name in zip(kernels, self.names):
            fn = module.get_function(name)
            fn.prepare("P" * (len(k.bufs) + 1 + (2 if bounds_check else 0)))
            self.functions.append(fn)
        cap = s["sms"] * 32
        self.shapes = [((max(1, min(k.grid, cap)), 1), (k.block, 1, 1)) for k in kernels]
        offsets, n = [], 0
        for c in schedule.calls:
            offsets.append(n)
            n += len(c.params)
        self.param_offsets, self.param_index = offsets, [i for c in schedule.calls for i in c.params]
        self.params = DeviceBuffer(max(n, 1), "float64")
        #: what this entry holds in host memory, roughly (the schedule cache's byte bound)
        self.nbytes = ENTRY_BYTES_PER_CALL * (1 + len(kernels)) + len(self.source)

    # ---- the runner's hooks -------------------------------------------------------------
    def take_args(self):
        slots = {}  # slot -> device pointer
        return slots, slots

    def leaf_address(self, leaf) -> int:
        if not isinstance(leaf._handle, DeviceBuffer):
            raise DeviceError(f"cuda(): a graph input lives on {leaf.device}; move it with .to(cuda())")
        return leaf._handle.ptr + leaf.offset * leaf._handle.itemsize

    def new_output(self, size, dtype):
        buf = DeviceBuffer(max(size, 1), dtype)
        return buf, buf.ptr

    def output_array(self, handle, shape, dtype, device, address) -> NDArray:
        return NDArray.make(shape, device=device, handle=handle, dtype=dtype)

    def acquire_temp(self, nbytes, args):
        return POOL.acquire(nbytes)  # (allocation, bytes)

    def release_temp(self, temp, args) -> None:
        POOL.release(*temp)

    def temp_address(self, temp, args) -> int:
        return int(temp[0])

    def prepare(self, args, scalars) -> None:
        if self.param_index:
            values = np.array([scalars[i].value for i in self.param_index], dtype=np.float64)
            _state["drv"].memcpy_htod(self.params.ptr, values)

    def launch(self, args, i, limits, timed):
        call = self.schedule.calls[i]
        pointers = [args[slot] + shift for slot, shift in zip(call.slots, call.byte_offsets())]
        pointers.append(self.params.ptr + 8 * self.param_offsets[i])
        if limits is not None:
            limits_buf = from_numpy(np.array(limits, dtype=np.int64))
            flag_buf = from_numpy(np.zeros(1, dtype=np.int32))
            pointers += [limits_buf.ptr, flag_buf.ptr]
        grid, block = self.shapes[i]
        drv = _state["drv"]
        if timed:
            start, end = drv.Event(), drv.Event()
            start.record()
        self.functions[i].prepared_call(grid, block, *pointers)
        seconds = None
        if timed:
            end.record()
            end.synchronize()
            seconds = start.time_till(end) * 1e-3
        if limits is not None:
            flag = np.zeros(1, dtype=np.int32)
            drv.memcpy_dtoh(flag, flag_buf.ptr)
            if flag[0]:
                raise BoundsError(f"kernel {self.names[i]}: index out of bounds on buffer "
                                  f"{call.kernel.bufs[flag[0] - 1].name} (NEEDLE_BOUNDS_CHECK caught it; "
                                  "this is a needle bug, please report it)")
        return seconds

    def call_note(self, i) -> str:
        grid, block = self.shapes[i]
        return f"grid {grid[0]} x {block[0]}"


def synchronize() -> None:
    """Wait for every launched kernel (benchmarks time with this)."""
    require()["drv"].Context.synchronize()


at_shutdown(POOL.clear)
