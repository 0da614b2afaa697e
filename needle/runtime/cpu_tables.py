"""A compiled schedule's argument tables on the CPU: slot pointers, each kernel's
pointer list and parameters, the error flag, raw pointers to all of it, and the
native launcher's entry table that points into them."""
from __future__ import annotations

import numpy as np

from ..backend_ndarray import host_memory
from . import launcher
from .cpu_threads import OMP_ARGS


class Args:
    """A schedule's argument tables: the slot pointers, each kernel's pointer list and
    parameters (gathered from them), the error flag, and raw pointers to all of it."""

    __slots__ = ("ptrs", "table", "values", "params", "err", "ptrs_ptr", "table_ptr", "table_row",
                 "params_ptr", "params_row", "err_ptr", "temp_base", "kept_temp", "prepared")

    def __init__(self, compiled):
        self.ptrs = np.zeros(compiled.n_slots, dtype=np.int64)
        self.table = np.zeros(compiled.slot_matrix.shape, dtype=np.int64)
        self.values = np.zeros(max(compiled.schedule.n_params, 1), dtype=np.float64)
        self.params = np.zeros(compiled.param_matrix.shape, dtype=np.float64)
        self.err = np.zeros(1, dtype=np.int32)
        self.ptrs_ptr = self.ptrs.ctypes.data
        self.table_ptr, self.table_row = self.table.ctypes.data, self.table.strides[0]
        self.params_ptr, self.params_row = self.params.ctypes.data, self.params.strides[0]
        self.err_ptr = self.err.ctypes.data
        self.temp_base = None  # the temp block's address the slots hold (bind_temps)
        self.kept_temp = None  # (block, address) the schedule's own tables keep between runs
        self.prepared = None  # the tuple of scalars `params` were last gathered from


def entries(launches, err_ptr) -> tuple:
    """(the native launcher's entry table of every kernel, the data blocks of the
    threaded ones, which must live as long as the table points into them).  A
    threaded kernel's entry is its `_omp` wrapper and data block (bufs, params, total,
    limits, err, each thread's start time: codegen/llvm.py `_emit_omp`)."""
    rows, blocks = [], []
    for kernel, bufs, params, total, threads, _ in launches:
        if threads:
            blocks.append(np.array([bufs, params, total, 0, err_ptr] + [0] * threads, dtype=np.int64))
            assert len(blocks[-1]) == OMP_ARGS + threads
            rows.append((kernel.omp_address, blocks[-1].ctypes.data, 0, 0, 0, threads))
        else:
            rows.append((kernel.address, bufs, params, total, err_ptr, 0))
    return launcher.entries(rows), blocks


def address(handle) -> int:
    """The address of a host buffer, remembered on the buffer (finding it costs about
    a microsecond, and a training step reads the same buffers again)."""
    try:
        return handle._needle_address
    except AttributeError:
        pass
    found = host_memory.address_of(handle)
    remember_address(handle, found)
    return found


def remember_address(handle, value: int) -> None:
    try:
        handle._needle_address = value
    except AttributeError:  # a plain numpy array takes no attributes
        pass
