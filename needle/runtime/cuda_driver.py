"""The CUDA driver through PyCUDA (imported lazily: needle imports and runs without it).

- availability: `available()` says which of PyCUDA, the NVIDIA driver or a GPU is
  missing; `require()` raises one DeviceError naming it, else initializes the
  driver and a context once (as pycuda.autoinit does) and returns the state.
- compilation: `load_module(source)` — one CUDA translation unit per schedule (one
  nvcc run for all its kernels), cached in memory and on disk (`disk_cache`'s
  checksummed entries) under the hash of the source, the compute capability and
  the nvcc version; `function(source, name, format)` a prepared kernel of it.
- `at_shutdown(fn)`: what holds device memory is released before the context goes.
"""
from __future__ import annotations

import atexit
import hashlib
import subprocess
import threading
import time

from .. import config
from ..errors import CompileError, DeviceError
from . import counters, disk_cache
from .lru import LRUCache

_state = {}
_lock = threading.RLock()
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


_shutdown_hooks = []


def at_shutdown(fn) -> None:
    """Call `fn()` at exit, before the context is popped (caches holding device memory)."""
    _shutdown_hooks.append(fn)


def _shutdown() -> None:
    for fn in reversed(_shutdown_hooks):
        fn()
    _modules.clear()
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
