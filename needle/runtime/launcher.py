"""A native loop that calls a list of compiled kernels one after the other.

Each ctypes call costs about a microsecond and a half, more than many small
kernels run (an LSTM step is two thousand of them).  A schedule's consecutive
single-threaded kernels are therefore launched by one ctypes call into this
loop, which reads (entry point, buffer table, parameters, total, error flag)
five 64-bit words per kernel and calls each entry point as Python would.  It first
fills the schedule's buffer tables from its slot pointers (`table[c] =
ptrs[slots[c]] + shifts[c]`, shifts: compiler.buffer_offsets), the gather numpy's
`take` did in a microsecond and a quarter of call overhead, more than a small
captured matmul's kernel leaves to spare.
"""
from __future__ import annotations

import ctypes
import threading

import llvmlite.binding as llvm
import numpy as np

from . import llvm_compile

#: an entry's five words, in order, and whether each is a pointer
_FIELDS = (("fn", True), ("bufs", True), ("params", True), ("total", False), ("err", True))


def _ir() -> str:
    """LLVM IR of `needle_launch_list(entries, n, ptrs, slots, shifts, table, cells)`:
    for each of the `cells` cells, table[c] = ptrs[slots[c]] + shifts[c]; then for each
    entry, call fn(bufs, params, 0, total, null, err)."""
    loads = []
    for k, (name, is_ptr) in enumerate(_FIELDS):
        word = name + "_word" if is_ptr else name
        loads += [f"  %i_{name} = add i64 %base, {k}",
                  f"  %p_{name} = getelementptr i64, ptr %entries, i64 %i_{name}",
                  f"  %{word} = load i64, ptr %p_{name}"]
        if is_ptr:
            loads.append(f"  %{name} = inttoptr i64 %{word} to ptr")
    return "\n".join([
        "define void @needle_launch_list(ptr %entries, i64 %n, ptr %ptrs, ptr %slots, ptr %shifts, ptr %table,"
        " i64 %cells) {",
        "entry:", "  br label %gather",
        "gather:", "  %c = phi i64 [0, %entry], [%c_next, %fill]", "  %c_more = icmp slt i64 %c, %cells",
        "  br i1 %c_more, label %fill, label %start",
        "fill:", "  %p_slot = getelementptr i64, ptr %slots, i64 %c", "  %slot = load i64, ptr %p_slot",
        "  %p_ptr = getelementptr i64, ptr %ptrs, i64 %slot", "  %base_ptr = load i64, ptr %p_ptr",
        "  %p_shift = getelementptr i64, ptr %shifts, i64 %c", "  %shift = load i64, ptr %p_shift",
        "  %ptr = add i64 %base_ptr, %shift",
        "  %p_cell = getelementptr i64, ptr %table, i64 %c", "  store i64 %ptr, ptr %p_cell",
        "  %c_next = add i64 %c, 1", "  br label %gather",
        "start:", "  br label %loop",
        "loop:", "  %i = phi i64 [0, %start], [%next, %body]", "  %more = icmp slt i64 %i, %n",
        "  br i1 %more, label %body, label %exit",
        "body:", "  %base = mul i64 %i, 5", *loads,
        "  call void %fn(ptr %bufs, ptr %params, i64 0, i64 %total, ptr null, ptr %err)",
        "  %next = add i64 %i, 1", "  br label %loop",
        "exit:", "  ret void", "}"])

_lock = threading.Lock()
_state = {}


def launch_list():
    """The native `launch_list(entries, n, ptrs, slots, shifts, table, cells)` (compiled
    once per process; cells 0 gathers nothing, n 0 launches nothing)."""
    fn = _state.get("fn")
    if fn is None:
        with _lock:
            if "fn" not in _state:
                module = llvm.parse_assembly(_ir())
                module.verify()
                engine = llvm.create_mcjit_compiler(module, llvm_compile.new_machine("", ""))
                engine.finalize_object()
                address = engine.get_function_address("needle_launch_list")
                _state["engine"] = engine  # keeps the code alive
                _state["fn"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
            fn = _state["fn"]
    return fn


def entries(rows) -> np.ndarray:
    """The entry table for `rows` of (entry point, buffer table, parameters, total,
    error flag) addresses and counts."""
    return np.array(rows, dtype=np.int64).reshape(len(rows), 5)
