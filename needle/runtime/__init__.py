"""The runtime: compiled kernels and their execution — the LLVM and CUDA JITs,
kernel caches (memory, disk), buffers and pools, launches, the CUDA driver and
the counters (`stats()`).  It knows kernels and buffers, not ops or graphs: the
engine (needle.engine) decides what to compute and hands schedules down.
"""
from __future__ import annotations

from .counters import add, reset_stats, stats  # noqa: F401
