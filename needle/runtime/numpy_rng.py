"""Bernoulli masks from numpy's global random stream, drawn by compiled code.

The course draws Dropout's masks as `np.random.rand(*shape) <= p` from numpy's
global RandomState, so that seeded code reproduces its values; needle keeps that
stream.  numpy makes a float64 array of the whole shape, compares it and converts
the result: three passes over memory and most of a small Transformer step's host
time.  Here one compiled loop advances the same MT19937 state in place (numpy's
`BitGenerator.ctypes.state_address`: key[624], pos), builds each double exactly as
numpy's legacy `random_sample` does from two 32-bit outputs, compares it with p and
writes the mask.

Right by construction where it can be checked: before its first use the loop draws
past a twist of the state from a copy of it and must give numpy's values bit for
bit (and leave the same state); if not, or where numpy's generator is not the
legacy MT19937, `bernoulli` returns None and the caller draws with numpy.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import llvm_compile

_N, _M = 624, 397

_IR = """
define internal void @twist(ptr %key) {
entry:
  br label %first
first:
  %i = phi i32 [0, %entry], [%i1, %first]
  %i1 = add i32 %i, 1
  %ik = add i32 %i, 397
  %pi_a = getelementptr i32, ptr %key, i32 %i
  %pj_a = getelementptr i32, ptr %key, i32 %i1
  %pk_a = getelementptr i32, ptr %key, i32 %ik
  %xi_a = load i32, ptr %pi_a
  %xj_a = load i32, ptr %pj_a
  %xk_a = load i32, ptr %pk_a
  %hi_a = and i32 %xi_a, 2147483648
  %lo_a = and i32 %xj_a, 2147483647
  %y_a = or i32 %hi_a, %lo_a
  %y1_a = lshr i32 %y_a, 1
  %odd_a = and i32 %y_a, 1
  %neg_a = sub i32 0, %odd_a
  %mag_a = and i32 %neg_a, 2567483615
  %t_a = xor i32 %xk_a, %y1_a
  %v_a = xor i32 %t_a, %mag_a
  store i32 %v_a, ptr %pi_a
  %more = icmp ult i32 %i1, 227
  br i1 %more, label %first, label %second
second:
  %m = phi i32 [227, %first], [%m1, %second]
  %m1 = add i32 %m, 1
  %mk = sub i32 %m, 227
  %pi_b = getelementptr i32, ptr %key, i32 %m
  %pj_b = getelementptr i32, ptr %key, i32 %m1
  %pk_b = getelementptr i32, ptr %key, i32 %mk
  %xi_b = load i32, ptr %pi_b
  %xj_b = load i32, ptr %pj_b
  %xk_b = load i32, ptr %pk_b
  %hi_b = and i32 %xi_b, 2147483648
  %lo_b = and i32 %xj_b, 2147483647
  %y_b = or i32 %hi_b, %lo_b
  %y1_b = lshr i32 %y_b, 1
  %odd_b = and i32 %y_b, 1
  %neg_b = sub i32 0, %odd_b
  %mag_b = and i32 %neg_b, 2567483615
  %t_b = xor i32 %xk_b, %y1_b
  %v_b = xor i32 %t_b, %mag_b
  store i32 %v_b, ptr %pi_b
  %more2 = icmp ult i32 %m1, 623
  br i1 %more2, label %second, label %last
last:
  %pi_c = getelementptr i32, ptr %key, i32 623
  %pj_c = getelementptr i32, ptr %key, i32 0
  %pk_c = getelementptr i32, ptr %key, i32 396
  %xi_c = load i32, ptr %pi_c
  %xj_c = load i32, ptr %pj_c
  %xk_c = load i32, ptr %pk_c
  %hi_c = and i32 %xi_c, 2147483648
  %lo_c = and i32 %xj_c, 2147483647
  %y_c = or i32 %hi_c, %lo_c
  %y1_c = lshr i32 %y_c, 1
  %odd_c = and i32 %y_c, 1
  %neg_c = sub i32 0, %odd_c
  %mag_c = and i32 %neg_c, 2567483615
  %t_c = xor i32 %xk_c, %y1_c
  %v_c = xor i32 %t_c, %mag_c
  store i32 %v_c, ptr %pi_c
  ret void
}

define internal i32 @next(ptr %key, ptr %pos) alwaysinline {
entry:
  %p = load i32, ptr %pos
  %full = icmp sge i32 %p, 624
  br i1 %full, label %gen, label %take
gen:
  call void @twist(ptr %key)
  br label %take
take:
  %q = phi i32 [%p, %entry], [0, %gen]
  %pq = getelementptr i32, ptr %key, i32 %q
  %y0 = load i32, ptr %pq
  %q1 = add i32 %q, 1
  store i32 %q1, ptr %pos
  %a1 = lshr i32 %y0, 11
  %y1 = xor i32 %y0, %a1
  %a2 = shl i32 %y1, 7
  %b2 = and i32 %a2, 2636928640
  %y2 = xor i32 %y1, %b2
  %a3 = shl i32 %y2, 15
  %b3 = and i32 %a3, 4022730752
  %y3 = xor i32 %y2, %b3
  %a4 = lshr i32 %y3, 18
  %y4 = xor i32 %y3, %a4
  ret i32 %y4
}

define internal i32 @temper(i32 %y0) alwaysinline {
  %a1 = lshr i32 %y0, 11
  %y1 = xor i32 %y0, %a1
  %a2 = shl i32 %y1, 7
  %b2 = and i32 %a2, 2636928640
  %y2 = xor i32 %y1, %b2
  %a3 = shl i32 %y2, 15
  %b3 = and i32 %a3, 4022730752
  %y3 = xor i32 %y2, %b3
  %a4 = lshr i32 %y3, 18
  %y4 = xor i32 %y3, %a4
  ret i32 %y4
}

define internal i1 @keep(i32 %a, i32 %b, double %p) alwaysinline {
  %a5 = lshr i32 %a, 5
  %b6 = lshr i32 %b, 6
  %af = uitofp i32 %a5 to double
  %bf = uitofp i32 %b6 to double
  %hi = fmul double %af, 67108864.0
  %sum = fadd double %hi, %bf
  %u = fmul double %sum, 0x3CA0000000000000
  %k = fcmp ole double %u, %p
  ret i1 %k
}

; masks i in [lo, hi) from the pairs of tempered words starting at key[first]
define internal void @block(ptr noalias %key, i32 %first, i64 %lo, i64 %hi, double %p, ptr noalias %out, i1 %float) alwaysinline {
entry:
  %f64 = zext i32 %first to i64
  br i1 %float, label %fl, label %bl
fl:
  %i = phi i64 [%lo, %entry], [%i1, %fl]
  %w = sub i64 %i, %lo
  %w2 = shl i64 %w, 1
  %wa = add i64 %w2, %f64
  %wb = add i64 %wa, 1
  %pa = getelementptr i32, ptr %key, i64 %wa
  %pb = getelementptr i32, ptr %key, i64 %wb
  %xa = load i32, ptr %pa
  %xb = load i32, ptr %pb
  %ta = call i32 @temper(i32 %xa)
  %tb = call i32 @temper(i32 %xb)
  %k = call i1 @keep(i32 %ta, i32 %tb, double %p)
  %f = uitofp i1 %k to float
  %pf = getelementptr float, ptr %out, i64 %i
  store float %f, ptr %pf
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %hi
  br i1 %more, label %fl, label %done
bl:
  %j = phi i64 [%lo, %entry], [%j1, %bl]
  %v = sub i64 %j, %lo
  %v2 = shl i64 %v, 1
  %va = add i64 %v2, %f64
  %vb = add i64 %va, 1
  %qa = getelementptr i32, ptr %key, i64 %va
  %qb = getelementptr i32, ptr %key, i64 %vb
  %ya = load i32, ptr %qa
  %yb = load i32, ptr %qb
  %sa = call i32 @temper(i32 %ya)
  %sb = call i32 @temper(i32 %yb)
  %kk = call i1 @keep(i32 %sa, i32 %sb, double %p)
  %c = zext i1 %kk to i8
  %pc = getelementptr i8, ptr %out, i64 %j
  store i8 %c, ptr %pc
  %j1 = add i64 %j, 1
  %more2 = icmp slt i64 %j1, %hi
  br i1 %more2, label %bl, label %done
done:
  ret void
}

define void @needle_bernoulli(ptr %state, i64 %n, double %p, ptr %out, i64 %as_float) {
entry:
  %spos = getelementptr i8, ptr %state, i64 2496
  %pos = alloca i32
  %p0 = load i32, ptr %spos
  store i32 %p0, ptr %pos
  %float = icmp ne i64 %as_float, 0
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%inext, %next_i]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %q0 = load i32, ptr %pos
  %spent = icmp sge i32 %q0, 624
  br i1 %spent, label %regen, label %ready
regen:  ; (as numpy: the state is twisted when a word is wanted, not when the last is taken)
  call void @twist(ptr %state)
  store i32 0, ptr %pos
  br label %ready
ready:
  %q = phi i32 [%q0, %body], [0, %regen]
  %left = sub i32 624, %q
  %pairs = lshr i32 %left, 1
  %none = icmp eq i32 %pairs, 0
  br i1 %none, label %one, label %many
one:  ; a pair across a twist: word by word
  %a = call i32 @next(ptr %state, ptr %pos)
  %b = call i32 @next(ptr %state, ptr %pos)
  %k = call i1 @keep(i32 %a, i32 %b, double %p)
  br i1 %float, label %one_f, label %one_b
one_f:
  %f = uitofp i1 %k to float
  %pf = getelementptr float, ptr %out, i64 %i
  store float %f, ptr %pf
  br label %one_done
one_b:
  %c = zext i1 %k to i8
  %pc = getelementptr i8, ptr %out, i64 %i
  store i8 %c, ptr %pc
  br label %one_done
one_done:
  %i_one = add i64 %i, 1
  br label %next_i
many:
  %pairs64 = zext i32 %pairs to i64
  %rest = sub i64 %n, %i
  %fewer = icmp slt i64 %rest, %pairs64
  %take = select i1 %fewer, i64 %rest, i64 %pairs64
  %hi = add i64 %i, %take
  call void @block(ptr %state, i32 %q, i64 %i, i64 %hi, double %p, ptr %out, i1 %float)
  %take32 = trunc i64 %take to i32
  %used = shl i32 %take32, 1
  %q2 = add i32 %q, %used
  store i32 %q2, ptr %pos
  br label %next_i
next_i:
  %inext = phi i64 [%i_one, %one_done], [%hi, %many]
  br label %loop
done:
  %pend = load i32, ptr %pos
  store i32 %pend, ptr %spos
  ret void
}
"""

_lock = threading.Lock()
_state = {}
_OUT = {"float32": True, "bool": False, "uint8": False}


def _compiled():
    """The native loop, or None where it could not be made or did not match numpy."""
    if "fn" not in _state:
        with _lock:
            if "fn" not in _state:
                _state["fn"] = _build()
    return _state["fn"]


def _build():
    try:
        import llvmlite.binding as llvm
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        module = llvm_compile.optimize(_IR, cpu, features, "O2")
        engine = llvm.create_mcjit_compiler(module, llvm_compile.new_machine(cpu, features))
        engine.finalize_object()
        address = engine.get_function_address("needle_bernoulli")
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_void_p,
                              ctypes.c_int64)(address)
        _state["engine"] = engine  # (keeps the code alive)
        return fn if _matches_numpy(fn) else None
    except Exception:  # (no llvmlite target here, or numpy's internals differ): numpy draws
        return None


def _generator():
    """numpy's global legacy MT19937 bit generator, or None."""
    bg = getattr(getattr(np.random.mtrand, "_rand", None), "_bit_generator", None)
    if type(bg).__name__ != "MT19937" or not hasattr(bg, "ctypes"):
        return None
    return bg


def _matches_numpy(fn) -> bool:
    """Draw from a copy of the global state both ways, across a twist, and compare."""
    bg = _generator()
    if bg is None:
        return False
    saved = np.random.get_state()
    try:
        ok = True
        # past a twist, up to the last word of a state exactly, a few
        for seed, n, p in ((7, 1000, 0.9), (123, 307, 0.5), (2**31, 3, 1.0)):
            np.random.seed(seed)
            np.random.rand(5)  # (a position that is not a twist boundary)
            expected = np.random.rand(n) <= p
            numpy_after = np.random.get_state()
            np.random.seed(seed)
            np.random.rand(5)
            got = np.empty(n, np.float32)
            fn(bg.ctypes.state_address, n, p, got.ctypes.data, 1)
            after = np.random.get_state()
            ok = ok and np.array_equal(got, expected.astype(np.float32)) and \
                np.array_equal(after[1], numpy_after[1]) and after[2] == numpy_after[2]
        return ok
    finally:
        np.random.set_state(saved)


def bernoulli(shape: tuple, p: float, dtype: str):
    """`(np.random.rand(*shape) <= p).astype(dtype)` drawn natively from the same
    stream, or None where it cannot be (the caller draws with numpy)."""
    as_float = _OUT.get(dtype)
    if as_float is None or isinstance(p, complex):
        return None
    fn = _compiled()
    bg = _generator() if fn is not None else None
    if bg is None:
        return None
    out = np.empty(shape, np.float32 if as_float else np.uint8)
    with bg.lock:
        fn(bg.ctypes.state_address, out.size, float(p), out.ctypes.data, int(as_float))
    return out if as_float else out.view(np.bool_) if dtype == "bool" else out
