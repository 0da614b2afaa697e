"""Environment switches, read once at import (tinygrad-style helpers module).

Every NEEDLE_* variable is parsed here and nowhere else, so a reader finds all
knobs in one place.  Values can be changed at run time by assigning to the
module attributes (tests do this); code must read them through this module.
"""
import os


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value.strip() else default
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


#: lazy mode at import (SPEC "Lazy mode"); `needle.autograd.LAZY_MODE` holds the process's
#: default, `needle.autograd.lazy_mode()` the calling thread's mode.
LAZY = _int("NEEDLE_LAZY", 1) != 0
#: array backend: "nd" (NDArray, default) or "np" (plain numpy arrays, eager).
BACKEND = os.environ.get("NEEDLE_BACKEND", "nd").strip() or "nd"
#: eager compiled mode computes a backward() pass as one schedule (0: a kernel per gradient op).
EAGER_FUSED_BACKWARD = _int("NEEDLE_EAGER_FUSED_BACKWARD", 1) != 0
#: 0 silent; 1 schedules; 2 + kernel times; 3 + kernel IR; 4 + LLVM IR / CUDA C.
DEBUG = _int("NEEDLE_DEBUG", 0)
#: CPU threads used by compiled kernels.
THREADS = max(1, _int("NEEDLE_THREADS", _default_threads()))
#: size each launch's thread team from the cores other processes leave free (runtime/team.py).
ADAPT_THREADS = _int("NEEDLE_ADAPT_THREADS", 1) != 0
#: on-disk kernel cache.
CACHE = _int("NEEDLE_CACHE", 1) != 0
CACHE_DIR = os.environ.get("NEEDLE_CACHE_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "needle")
#: processes that compile a schedule's new kernels in parallel (0: compile in this process).
COMPILE_WORKERS = max(0, _int("NEEDLE_COMPILE_WORKERS", _default_threads()))
#: LLVM pass pipeline of the CPU kernels, O2 or O3 (as fast here, O3 far slower to compile some kernels).
OPT_LEVEL = os.environ.get("NEEDLE_OPT_LEVEL", "O2").strip().upper() or "O2"
if OPT_LEVEL not in ("O2", "O3"):
    raise ValueError(f"environment variable NEEDLE_OPT_LEVEL={OPT_LEVEL!r} is not O2 or O3")
#: kernels touching fewer elements than this are compiled without loop unrolling (cheaper).
UNROLL_MIN_WORK = max(0, _int("NEEDLE_UNROLL_MIN_WORK", 1 << 14))
#: bounds-checked code generation: every load/store checks its index and traps.
BOUNDS_CHECK = _int("NEEDLE_BOUNDS_CHECK", 0) != 0

# ---- bounds of the in-memory caches (least recently used out first; evictions in stats())
#: compiled schedules (one per graph structure seen), by count and by estimated bytes.
SCHEDULE_CACHE_SIZE = max(1, _int("NEEDLE_SCHEDULE_CACHE_SIZE", 256))
SCHEDULE_CACHE_BYTES = max(1, _int("NEEDLE_SCHEDULE_CACHE_BYTES", 256 << 20))
#: compiled kernels (CPU object code, CUDA modules), by count and by code bytes.
KERNEL_CACHE_SIZE = max(1, _int("NEEDLE_KERNEL_CACHE_SIZE", 2048))
KERNEL_CACHE_BYTES = max(1, _int("NEEDLE_KERNEL_CACHE_BYTES", 256 << 20))
#: idle buffers kept for reuse by the host and device buffer pools, by count and bytes.
POOL_BUFFERS = max(0, _int("NEEDLE_POOL_BUFFERS", 1024))
POOL_BYTES = max(0, _int("NEEDLE_POOL_BYTES", 1 << 30))

#: 0 makes needle.jit run the function plainly on every call (no capture, no replay).
JIT = _int("NEEDLE_JIT", 1) != 0

# ---- needle.viz (docs/seeing-a-step.md)
#: 1 records what the process compiles and runs, written at exit for `python -m needle viz`.
VIZ = _int("NEEDLE_VIZ", 0) != 0
#: a recording keeps the last this many schedules (a captured step and its replays count once).
VIZ_SCHEDULES = max(1, _int("NEEDLE_VIZ_SCHEDULES", 16))
#: the folder recordings are written to (<script>-<pid>.json) and `python -m needle viz` reads.
VIZ_DIR = os.environ.get("NEEDLE_VIZ_DIR") or os.path.join(CACHE_DIR, "viz")
