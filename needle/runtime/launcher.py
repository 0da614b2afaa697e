"""A native loop that calls a list of compiled kernels one after the other.

Each ctypes call costs about a microsecond and a half, more than many small
kernels run (an LSTM step is two thousand of them).  A schedule's kernels are
therefore launched by one ctypes call into this loop, which reads (entry point,
buffer table, parameters, total, error flag, threads) six 64-bit words per kernel
and calls each entry point as Python would.  A threaded kernel's entry holds its
`_omp` wrapper and the wrapper's data block: the loop starts it with libgomp's
`GOMP_parallel`, on at most `clock[2]` threads (the team size the machine's load
allows, runtime/team.py), while the team's threads still spin (their last team launch
ended less than `clock[1]` ns ago, `clock[0]` when it ended, CLOCK_MONOTONIC as
perf_counter); a team of one runs the wrapper on the calling thread; else it stops
there and returns the kernel's index, and the runtime decides in Python whether
waking the team pays (runtime/cpu_threads.py `launch`).  Starting a spinning team
from Python costs several times GOMP's own microsecond: more than two threads save
on a small batched matmul.

The loop first fills the schedule's buffer tables from its slot pointers
(`table[c] = ptrs[slots[c]] + shifts[c]`, shifts: compiler.buffer_offsets): the
gather numpy's `take` did, without its call overhead.
"""
from __future__ import annotations

import ctypes
import threading

import llvmlite.binding as llvm
import numpy as np

from . import llvm_compile

#: an entry's words, in order, and whether each is a pointer
_FIELDS = (("fn", True), ("bufs", True), ("params", True), ("total", False), ("err", True), ("threads", False))
WORDS = len(_FIELDS)


#: the words of a launch block, in order (all but n and cells are addresses)
BLOCK = ("entries", "n", "ptrs", "slots", "shifts", "table", "cells", "clock")


def _ir(gomp_parallel: int) -> str:
    """LLVM IR of `needle_launch_list(block) -> launched`, its arguments (BLOCK) read from
    one array of 64-bit words (ctypes converts each argument of a call, one at a time):
    for each of the `cells` cells, table[c] = ptrs[slots[c]] + shifts[c]; then for each
    of the `n` entries, fn(bufs, params, 0, total, null, err), or with threads > 0,
    GOMP_parallel(fn, bufs, min(threads, clock[2]), 0) (at address `gomp_parallel`) if
    the team ran within clock[1] ns, else return that entry's index; where clock[2], the
    team size (runtime/team.py), is 1, fn(bufs) on this thread."""
    loads = []
    for k, (name, is_ptr) in enumerate(_FIELDS):
        word = name + "_word" if is_ptr else name
        loads += [f"  %i_{name} = add i64 %base, {k}",
                  f"  %p_{name} = getelementptr i64, ptr %entries, i64 %i_{name}",
                  f"  %{word} = load i64, ptr %p_{name}"]
        if is_ptr:
            loads.append(f"  %{name} = inttoptr i64 %{word} to ptr")

    def now(name: str) -> list:  # CLOCK_MONOTONIC in ns, into %name
        return ["  call i32 @clock_gettime(i32 1, ptr %ts)",
                f"  %{name}_s = load i64, ptr %ts", f"  %{name}_ns = load i64, ptr %ts_ns",
                f"  %{name}_sns = mul i64 %{name}_s, 1000000000", f"  %{name} = add i64 %{name}_sns, %{name}_ns"]
    return "\n".join([
        "declare i32 @clock_gettime(i32, ptr)",
        "define i64 @needle_launch_list(ptr %block) {",
        "entry:", *[line for k, name in enumerate(BLOCK) for line in (
            f"  %p_block_{name} = getelementptr i64, ptr %block, i64 {k}",
            f"  %{name}{'' if name in ('n', 'cells') else '_word'} = load i64, ptr %p_block_{name}")],
        *[f"  %{name} = inttoptr i64 %{name}_word to ptr" for name in BLOCK if name not in ("n", "cells")],
        "  %ts = alloca [2 x i64]", "  %ts_ns = getelementptr i64, ptr %ts, i64 1",
        "  %p_asleep = getelementptr i64, ptr %clock, i64 1", "  %p_team = getelementptr i64, ptr %clock, i64 2",
        "  br label %gather",
        "gather:", "  %c = phi i64 [0, %entry], [%c_next, %fill]", "  %c_more = icmp slt i64 %c, %cells",
        "  br i1 %c_more, label %fill, label %start",
        "fill:", "  %p_slot = getelementptr i64, ptr %slots, i64 %c", "  %slot = load i64, ptr %p_slot",
        "  %p_ptr = getelementptr i64, ptr %ptrs, i64 %slot", "  %base_ptr = load i64, ptr %p_ptr",
        "  %p_shift = getelementptr i64, ptr %shifts, i64 %c", "  %shift = load i64, ptr %p_shift",
        "  %ptr = add i64 %base_ptr, %shift",
        "  %p_cell = getelementptr i64, ptr %table, i64 %c", "  store i64 %ptr, ptr %p_cell",
        "  %c_next = add i64 %c, 1", "  br label %gather",
        "start:", "  br label %loop",
        "loop:", "  %i = phi i64 [0, %start], [%next, %ran]", "  %more = icmp slt i64 %i, %n",
        "  br i1 %more, label %body, label %exit",
        "body:", f"  %base = mul i64 %i, {WORDS}", *loads,
        "  %threaded = icmp sgt i64 %threads, 0", "  br i1 %threaded, label %team, label %single",
        "single:", "  call void %fn(ptr %bufs, ptr %params, i64 0, i64 %total, ptr null, ptr %err)",
        "  br label %ran",
        "team:", "  %team_size = load i64, ptr %p_team", "  %fewer = icmp slt i64 %team_size, %threads",
        "  %members = select i1 %fewer, i64 %team_size, i64 %threads", "  %alone = icmp sle i64 %members, 1",
        "  br i1 %alone, label %by_itself, label %awake",
        # the `_omp` wrapper called outside a parallel region: omp_get_num_threads() is 1
        "by_itself:", "  call void %fn(ptr %bufs)", "  br label %ran",
        "awake:", *now("now"), "  %last = load i64, ptr %clock", "  %asleep_after = load i64, ptr %p_asleep",
        "  %idle = sub i64 %now, %last", "  %asleep = icmp sgt i64 %idle, %asleep_after",
        "  br i1 %asleep, label %exit, label %wake",
        "wake:", f"  %gomp = inttoptr i64 {gomp_parallel} to ptr", "  %threads32 = trunc i64 %members to i32",
        "  call void %gomp(ptr %fn, ptr %bufs, i32 %threads32, i32 0)", *now("end"),
        "  store i64 %end, ptr %clock", "  br label %ran",
        "ran:", "  %next = add i64 %i, 1", "  br label %loop",
        "exit:", "  ret i64 %i", "}"])


_lock = threading.Lock()
_state = {}


def launch_list(gomp_parallel: int):
    """The native `launch_list(address of a block)` -> entries launched (compiled once
    per process; see `block`: cells 0 gathers nothing, n 0 launches nothing).
    `gomp_parallel`: GOMP_parallel's address (0 without libgomp: then no entry may be
    threaded)."""
    fn = _state.get(gomp_parallel)
    if fn is None:
        with _lock:
            if gomp_parallel not in _state:
                module = llvm.parse_assembly(_ir(gomp_parallel))
                module.verify()
                engine = llvm.create_mcjit_compiler(module, llvm_compile.new_machine("", ""))
                engine.finalize_object()
                address = engine.get_function_address("needle_launch_list")
                _state[("engine", gomp_parallel)] = engine  # keeps the code alive
                _state[gomp_parallel] = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(address)
            fn = _state[gomp_parallel]
    return fn


def entries(rows) -> np.ndarray:
    """The entry table for `rows` of (entry point, buffer table, parameters, total,
    error flag, threads) addresses and counts."""
    return np.array(rows, dtype=np.int64).reshape(len(rows), WORDS)


def block(entries: int, n: int, ptrs: int, slots: int, shifts: int, table: int, cells: int,
          clock: int) -> np.ndarray:
    """A launch block (BLOCK's words): launch the `n` entries at address `entries`
    after filling `cells` cells of `table` from `ptrs`, `slots` and `shifts`; `clock`:
    the launching thread's team clock."""
    return np.array([entries, n, ptrs, slots, shifts, table, cells, clock], dtype=np.int64)
