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

import math
import sys
import time

import numpy as np

from .. import config
from ..backend_ndarray.devices import CUDADevice
from ..backend_ndarray.ndarray import NDArray
from ..dtypes import itemsize
from ..errors import BoundsError, DeviceError
from . import counters
from .cuda_driver import _modules, _state, at_shutdown, available, describe, function, load_module, require  # noqa: F401
from .cuda_memory import (POOL, DeviceBuffer, DevicePool, FlatAccess, HostView, assign,  # noqa: F401
                          from_numpy, to_numpy)
from .lru import ENTRY_BYTES_PER_CALL

#: `timer(compiled_schedule, call_index, start, seconds)` after each launch (GPU time
#: from CUDA events), or None; set by needle.profiler only while a profile is active
KERNEL_TIMER = None


class CompiledSchedule:
    """A Schedule with its module loaded and launch arguments precomputed."""

    def __init__(self, schedule, source: str, names: list, bounds_check: bool):
        s = require()
        self.schedule, self.source, self.names, self.check = schedule, source, names, bounds_check
        kernels = [c.kernel for c in schedule.calls]
        module = load_module(self.source, len(kernels))
        self.functions = []
        for k, name in zip(kernels, self.names):
            fn = module.get_function(name)
            fn.prepare("P" * (len(k.bufs) + 1 + (2 if self.check else 0)))
            self.functions.append(fn)
        cap = s["sms"] * 32
        self.launch = [((max(1, min(k.grid, cap)), 1), (k.block, 1, 1)) for k in kernels]
        self.outputs = [(slot, shape, dtype, math.prod(shape)) for slot, shape, dtype in schedule.outputs]
        self.temp_slots = [(slot, kind[1]) for slot, kind in schedule.slot_kinds.items() if kind[0] == "temp"]
        offsets, n = [], 0
        for c in schedule.calls:
            offsets.append(n)
            n += len(c.params)
        self.param_offsets, self.param_index = offsets, [i for c in schedule.calls for i in c.params]
        self.params = DeviceBuffer(max(n, 1), "float64")
        #: what this entry holds in host memory, roughly (the schedule cache's byte bound)
        self.nbytes = ENTRY_BYTES_PER_CALL * (1 + len(kernels)) + len(self.source)

    def run(self, leaves, scalars, device) -> list:
        drv = _state["drv"]
        s = self.schedule
        ptrs = {}
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf._handle, DeviceBuffer):
                raise DeviceError(f"cuda(): a graph input lives on {leaf.device}; move it with .to(cuda())")
            ptrs[i] = leaf._handle.ptr + leaf.offset * leaf._handle.itemsize
        outputs, owned = [], {}
        for slot, shape, dtype, size in self.outputs:
            if slot not in owned:
                owned[slot] = DeviceBuffer(max(size, 1), dtype)
                ptrs[slot] = owned[slot].ptr
            outputs.append(NDArray.make(shape, device=device, handle=owned[slot], dtype=dtype))
        temps = [POOL.acquire(n) for n in s.temp_bytes]
        for slot, buf in self.temp_slots:
            ptrs[slot] = int(temps[buf][0])
        if self.param_index:
            values = np.array([scalars[i].value for i in self.param_index], dtype=np.float64)
            drv.memcpy_htod(self.params.ptr, values)
        timer = KERNEL_TIMER
        timed = timer is not None or config.DEBUG >= 2
        try:
            for i, call in enumerate(s.calls):
                args = [ptrs[slot] for slot in call.slots] + [self.params.ptr + 8 * self.param_offsets[i]]
                keep = self._check_args(call, s, leaves, owned, temps, args) if self.check else None
                grid, block = self.launch[i]
                if timed:
                    start, end = drv.Event(), drv.Event()
                    t0 = time.perf_counter()
                    start.record()
                self.functions[i].prepared_call(grid, block, *args)
                if timed:
                    end.record()
                    end.synchronize()
                    seconds = start.time_till(end) * 1e-3
                    if config.DEBUG >= 2:
                        print(f"  {call.kernel.name:<28} {seconds * 1e6:9.1f} us  grid {grid[0]} x {block[0]}")
                    if timer is not None:
                        timer(self, i, t0, seconds)
                if keep is not None:
                    self._raise_if_out_of_bounds(keep, call, i)
        finally:
            for alloc, size in temps:
                POOL.release(alloc, size)
        counters.add("kernels_launched", len(s.calls))
        return outputs

    def _check_args(self, call, s, leaves, owned, temps, args):
        """Append limits and an error flag to `args` (bounds-checked kernels)."""
        limits = []
        for slot, buf in zip(call.slots, call.kernel.bufs):
            kind = s.slot_kinds[slot]
            if kind[0] == "leaf":
                leaf = leaves[kind[1]]
                limits += [-leaf.offset, leaf._handle.size - leaf.offset]
            elif kind[0] == "out":
                limits += [0, owned[slot].size]
            else:
                limits += [0, temps[kind[1]][1] // itemsize(buf.dtype)]
        lim = from_numpy(np.array(limits, dtype=np.int64))
        err = from_numpy(np.zeros(1, dtype=np.int32))
        args += [lim.ptr, err.ptr]
        return lim, err

    def _raise_if_out_of_bounds(self, keep, call, i) -> None:
        flag = np.zeros(1, dtype=np.int32)
        _state["drv"].memcpy_dtoh(flag, keep[1].ptr)
        if flag[0]:
            raise BoundsError(f"kernel {self.names[i]}: index out of bounds on buffer "
                              f"{call.kernel.bufs[flag[0] - 1].name} (NEEDLE_BOUNDS_CHECK caught it; "
                              "this is a needle bug, please report it)")


def synchronize() -> None:
    """Wait for every launched kernel (benchmarks time with this)."""
    require()["drv"].Context.synchronize()


at_shutdown(POOL.clear)
CUDADevice.runtime = sys.modules[__name__]
