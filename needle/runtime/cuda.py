"""The CUDA runtime, through PyCUDA (imported lazily: needle imports and runs without it).

- availability: `available()` says which of PyCUDA, the NVIDIA driver or a GPU is
  missing; `require()` raises one DeviceError naming it, else initializes the
  driver and a context once (as pycuda.autoinit does) and returns the state.
- storage (cuda_memory.py, re-exported here): `DeviceBuffer` from a pool of
  allocations reused by size, host copies, the setitem/fill kernel.
- compilation: one CUDA translation unit per schedule (one nvcc run for all its
  kernels), cached in memory and on disk (`disk_cache`'s checksummed entries)
  under the hash of the source, the compute capability and the nvcc version.
- execution: `realize(nodes)`, like the CPU executor: schedule cache keyed by the
  graph's structure, slots bound to leaf pointers, outputs, pooled temps and a
  device array of the run-time scalars; one launch per call with the block size
  the kernel was generated for and a grid capped at 32 blocks per SM (every
  mapping is grid-stride), then a synchronize, so realize() returns with the work
  done, as on the CPU.  NEEDLE_DEBUG=2 times each kernel with CUDA events;
  NEEDLE_BOUNDS_CHECK=1 runs bounds-checked kernels and raises BoundsError.
"""
from __future__ import annotations

import atexit
import hashlib
import math
import subprocess
import threading
import time

import numpy as np

from .. import config
from ..dtypes import itemsize
from ..errors import BoundsError, CompileError, DeviceError
from . import counters, disk_cache, schedules
from .lru import LRUCache
from .schedules import ScheduleCache
from .cuda_memory import (POOL, DeviceBuffer, DevicePool, FlatAccess, HostView, assign,  # noqa: F401
                          from_numpy, to_numpy)

_state = {}
_lock = threading.RLock()
#: `timer(compiled_schedule, call_index, start, seconds)` after each launch (GPU time
#: from CUDA events), or None; set by needle.profiler only while a profile is active
KERNEL_TIMER = None
#: loaded modules and prepared functions, bounded like the CPU kernel cache
_modules = LRUCache("kernel", lambda: (config.KERNEL_CACHE_SIZE, config.KERNEL_CACHE_BYTES),
                    lambda module: 64 << 10)


# ---- availability and the context ------------------------------------------------------------
def available():
    """(True, "") when PyCUDA, a driver and a GPU are all present, else (False, reason)."""
    if "available" in _state:
        return _state["available"]
    try:
        import pycuda  # noqa: F401
    except ImportError:
        result = (False, "PyCUDA is not installed (pip install 'needle[cuda]')")
    else:
        try:
            import pycuda.driver as drv
        except ImportError as e:
            result = (False, f"no NVIDIA driver: PyCUDA could not load libcuda ({e})")
        else:
            try:
                drv.init()
                result = (True, "") if drv.Device.count() > 0 else (False, "no NVIDIA GPU found by the driver")
            except Exception as e:  # pycuda.driver.Error and friends
                result = (False, f"no usable NVIDIA GPU: {e}")
    _state["available"] = result
    return result


def require() -> dict:
    """The initialized driver state, or DeviceError naming what is missing."""
    if "drv" in _state:
        return _state
    ok, why = available()
    if not ok:
        raise DeviceError(f"cuda() is not available: {why}")
    with _lock:
        if "drv" not in _state:
            import pycuda.driver as drv
            from pycuda.tools import make_default_context
            context = make_default_context()
            device = context.get_device()
            major, minor = device.compute_capability()
            _state.update(drv=drv, context=context, device=device, arch=f"sm_{major}{minor}",
                          sms=device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT),
                          name=device.name())
            atexit.register(_shutdown)
    return _state


def _shutdown() -> None:
    POOL.clear()
    _modules.clear()
    SCHEDULES.clear()
    try:
        _state["context"].pop()
        from pycuda.tools import clear_context_caches
        clear_context_caches()
    except Exception:  # the interpreter is going away; nothing useful to report
        pass


def describe() -> str:
    s = require()
    return f"{s['name']} ({s['arch']}, {s['sms']} SMs)"


# ---- compilation --------------------------------------------------------------------------------
def _nvcc_version() -> str:
    if "nvcc" not in _state:
        try:
            out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=60).stdout
            _state["nvcc"] = out.strip().splitlines()[-1] if out.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            _state["nvcc"] = "unknown"
    return _state["nvcc"]


def load_module(source: str, n_kernels: int = 1):
    """The loaded module of `source`: from memory, the disk cache, or nvcc."""
    s = require()
    key = hashlib.sha256(f"needle-cuda-1|{s['arch']}|{_nvcc_version()}|".encode() + source.encode()).hexdigest()
    module = _modules.get(key)
    if module is not None:
        counters.add("cache_hits", n_kernels)
        return module
    cubin = disk_cache.load(key) if config.CACHE else None
    if cubin is not None:
        counters.add("cache_hits", n_kernels)
        counters.add("disk_cache_hits", n_kernels)
    else:
        from pycuda import compiler
        t0 = time.perf_counter()
        try:
            cubin = compiler.compile(source, arch=s["arch"], no_extern_c=True, cache_dir=False,
                                     options=["-O3", "-lineinfo"])
        except Exception as e:
            raise CompileError(f"nvcc failed on generated CUDA C (a needle bug, please report it): {e}") from None
        counters.add("compile_seconds", time.perf_counter() - t0)
        counters.add("kernels_compiled", n_kernels)
        if config.CACHE:
            disk_cache.store(key, cubin)
    module = s["drv"].module_from_buffer(cubin)
    _modules.put(key, module)
    return module


def function(source: str, name: str, arg_format: str):
    """A prepared kernel (`prepared_call(grid, block, *args)`) of `source`."""
    key = (hashlib.sha256(source.encode()).hexdigest(), name)
    fn = _modules.get(key)
    if fn is None:
        fn = load_module(source).get_function(name)
        fn.prepare(arg_format)
        _modules.put(key, fn)
    return fn


# ---- executing schedules -------------------------------------------------------------------------
class CompiledSchedule:
    """A Schedule with its module loaded and launch arguments precomputed."""

    def __init__(self, schedule):
        from ..codegen import cuda as cuda_codegen
        s = require()
        self.schedule = schedule
        self.check = config.BOUNDS_CHECK
        kernels = [c.kernel for c in schedule.calls]
        self.names = [f"k{i}_{k.name}" for i, k in enumerate(kernels)]
        self.source = cuda_codegen.render_module(kernels, self.names, bounds_check=self.check)
        if config.DEBUG >= 4:
            print(self.source)
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
        self.nbytes = schedules.ENTRY_BYTES_PER_CALL * (1 + len(kernels)) + len(self.source)

    def run(self, leaves, scalars, device) -> list:
        drv = _state["drv"]
        s = self.schedule
        ptrs = {}
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf._handle, DeviceBuffer):
                raise DeviceError(f"cuda(): a graph input lives on {leaf.device}; move it with .to(cuda())")
            ptrs[i] = leaf._handle.ptr + leaf.offset * leaf._handle.itemsize
        outputs, owned = [], {}
        from ..backend_ndarray.ndarray import NDArray
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


SCHEDULES = ScheduleCache("cuda", lambda schedule: CompiledSchedule(schedule),
                          lambda: (config.BOUNDS_CHECK,), show=lambda k: _render(k))


def _render(kernel) -> str:
    from ..codegen import cuda as cuda_codegen
    return cuda_codegen.render_module([kernel])


def compiled_schedule(nodes):
    """(CompiledSchedule, leaves, scalars) for the graph of `nodes`."""
    return SCHEDULES.get(nodes)


def realize(nodes) -> None:
    """Compute `nodes` (pending, all on cuda()) with one schedule, and wait for the GPU:
    run_seconds then counts GPU time, and a caller timing realize() (python -m needle
    compare) measures the work, not the launches."""
    require()
    schedules.realize(SCHEDULES, nodes, wait=lambda: _state["drv"].Context.synchronize())


def synchronize() -> None:
    """Wait for every launched kernel (benchmarks time with this)."""
    require()["drv"].Context.synchronize()


def clear_schedule_cache() -> None:
    SCHEDULES.clear()
