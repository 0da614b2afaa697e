"""Counters of what the runtime did (`needle.runtime.stats()`)."""
from __future__ import annotations

_ZERO = {
    "kernels_compiled": 0,   # kernels JIT-compiled (cold)
    "kernels_launched": 0,   # kernel launches
    "cache_hits": 0,         # kernels found compiled in memory or on disk
    "disk_cache_hits": 0,    # of which loaded from the disk cache
    "schedule_cache_hits": 0,  # graphs whose passes were skipped (same structure seen before)
    "schedules": 0,          # realizations (one schedule each)
    "compile_seconds": 0.0,  # time spent compiling kernels
    "run_seconds": 0.0,      # time spent running kernels
    "schedule_seconds": 0.0,  # time spent lowering graphs and running the passes
    "schedule_evictions": 0,  # compiled schedules dropped by the bounded cache (config.SCHEDULE_CACHE_*)
    "kernel_evictions": 0,   # compiled kernels dropped by the bounded cache (config.KERNEL_CACHE_*)
    "pool_evictions": 0,     # idle buffers freed by the bounded pools (config.POOL_*)
}

COUNTERS = dict(_ZERO)


def stats() -> dict:
    """A snapshot of the counters."""
    return dict(COUNTERS)


def reset_stats() -> None:
    COUNTERS.update(_ZERO)


def add(name: str, amount=1) -> None:
    COUNTERS[name] += amount
