"""Bernoulli masks from numpy's global random stream, drawn by compiled code.

The course draws Dropout's masks as `np.random.rand(*shape) <= p` from numpy's
global RandomState, so that seeded code reproduces its values; needle keeps that
stream.  numpy makes a float64 array of the whole shape, compares it and converts
the result: three passes over memory and most of a small Transformer step's host
time.  Here one compiled loop advances the same MT19937 state in place (numpy's
`BitGenerator.ctypes.state_address`: key[624], pos), takes the two 32-bit outputs
numpy's legacy `random_sample` makes each double of, compares the 53-bit integer
that double scales with p's threshold (the same comparison, exactly: `@keep`) and
writes the mask, into the caller's array (`fill`: randb's tensor storage).

Right by construction where it can be checked: before its first use the loop draws
past a twist of the state from a copy of it and must give numpy's values bit for
bit (and leave the same state); if not, or where numpy's generator is not the
legacy MT19937, `bernoulli` returns None and the caller draws with numpy.
"""
from __future__ import annotations

import ctypes
import functools
import math
import numbers
import threading

import numpy as np

from ..backend_ndarray.host_memory import address_of
from . import llvm_compile

_N, _M = 624, 397  # MT19937's state words and its twist's offset
_STATE_POS = 4 * _N  # bytes from the state struct's start to its `pos` (int after uint32 key[624])


def _twist_word(tag: str, i: str, j: str, k: str) -> str:
    """key[i] = key[k] ^ (y >> 1) ^ (y odd ? MATRIX_A : 0), y = key[i]'s top bit | key[j]'s
    lower 31 (numpy's mt19937_gen, one word)."""
    return f"""
  %pi{tag} = getelementptr i32, ptr %key, i32 {i}
  %pj{tag} = getelementptr i32, ptr %key, i32 {j}
  %pk{tag} = getelementptr i32, ptr %key, i32 {k}
  %xi{tag} = load i32, ptr %pi{tag}
  %xj{tag} = load i32, ptr %pj{tag}
  %xk{tag} = load i32, ptr %pk{tag}
  %hi{tag} = and i32 %xi{tag}, 2147483648
  %lo{tag} = and i32 %xj{tag}, 2147483647
  %y{tag} = or i32 %hi{tag}, %lo{tag}
  %y1{tag} = lshr i32 %y{tag}, 1
  %odd{tag} = and i32 %y{tag}, 1
  %neg{tag} = sub i32 0, %odd{tag}
  %mag{tag} = and i32 %neg{tag}, 2567483615
  %t{tag} = xor i32 %xk{tag}, %y1{tag}
  %v{tag} = xor i32 %t{tag}, %mag{tag}
  store i32 %v{tag}, ptr %pi{tag}"""


def _twist() -> str:
    """numpy's mt19937_gen: words [0, N-M) from the old words M on, [N-M, N-1) from the
    new ones M-N back, the last from key[0] (new) and key[M-1] (loops without a modulo,
    so that LLVM vectorizes them)."""
    return f"""
define internal void @twist(ptr %key) {{
entry:
  br label %first
first:
  %i = phi i32 [0, %entry], [%i1, %first]
  %i1 = add i32 %i, 1
  %ik = add i32 %i, {_M}{_twist_word("a", "%i", "%i1", "%ik")}
  %more = icmp ult i32 %i1, {_N - _M}
  br i1 %more, label %first, label %second
second:
  %m = phi i32 [{_N - _M}, %first], [%m1, %second]
  %m1 = add i32 %m, 1
  %mk = sub i32 %m, {_N - _M}{_twist_word("b", "%m", "%m1", "%mk")}
  %more2 = icmp ult i32 %m1, {_N - 1}
  br i1 %more2, label %second, label %last
last:{_twist_word("c", str(_N - 1), "0", str(_M - 1))}
  ret void
}}"""


def _store_mask(tag: str, keep: str, index: str, as_float: bool) -> str:
    """out[index] = keep, as a float32 1.0 / 0.0 or a byte."""
    if as_float:
        return f"""
  %f{tag} = uitofp i1 {keep} to float
  %o{tag} = getelementptr float, ptr %out, i64 {index}
  store float %f{tag}, ptr %o{tag}"""
    return f"""
  %c{tag} = zext i1 {keep} to i8
  %o{tag} = getelementptr i8, ptr %out, i64 {index}
  store i8 %c{tag}, ptr %o{tag}"""


def _block(as_float: bool) -> str:
    """@block_<kind>(key, first, lo, hi, th, tl, out): masks lo..hi-1 from the pairs of words
    key[first], key[first+1], ... of the current state (no twist inside: vectorizable)."""
    kind = "f32" if as_float else "u8"
    return f"""
define internal void @block_{kind}(ptr noalias %key, i32 %first, i64 %lo, i64 %hi, i32 %th, i32 %tl,
                                   ptr noalias %out) alwaysinline {{
entry:
  %f64 = zext i32 %first to i64
  br label %loop
loop:
  %i = phi i64 [%lo, %entry], [%i1, %loop]
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
  %k = call i1 @keep(i32 %ta, i32 %tb, i32 %th, i32 %tl){_store_mask("", "%k", "%i", as_float)}
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %hi
  br i1 %more, label %loop, label %done
done:
  ret void
}}"""


_HELPERS = f"""
define internal i32 @next(ptr %key, ptr %pos) alwaysinline {{
entry:
  %p = load i32, ptr %pos
  %full = icmp sge i32 %p, {_N}
  br i1 %full, label %gen, label %take
gen:
  call void @twist(ptr %key)
  br label %take
take:
  %q = phi i32 [%p, %entry], [0, %gen]
  %pq = getelementptr i32, ptr %key, i32 %q
  %y = load i32, ptr %pq
  %q1 = add i32 %q, 1
  store i32 %q1, ptr %pos
  %t = call i32 @temper(i32 %y)
  ret i32 %t
}}

define internal i32 @temper(i32 %y0) alwaysinline {{
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
}}

; numpy's legacy random_sample from two words is u = ((a >> 5) * 2^26 + (b >> 6)) / 2^53,
; and u <= p exactly when that 53-bit integer is at most T = floor(p * 2^53): compared in
; halves, (a >> 5, b >> 6) against (T >> 26, T's low 26 bits), in 32-bit lanes, twice
; as many as doubles take.  A high half of -1 keeps nothing (p < 0).
define internal i1 @keep(i32 %a, i32 %b, i32 %th, i32 %tl) alwaysinline {{
  %a5 = lshr i32 %a, 5
  %b6 = lshr i32 %b, 6
  %below = icmp slt i32 %a5, %th
  %level = icmp eq i32 %a5, %th
  %low = icmp sle i32 %b6, %tl
  %tie = and i1 %level, %low
  %k = or i1 %below, %tie
  ret i1 %k
}}"""


def _entry(as_float: bool) -> str:
    """@bernoulli_<kind>(state, n, th, tl, out): n masks (`_threshold`); each pass takes the pairs left in the
    state (a pair across a twist word by word), twisting when a word is wanted and none is
    left, as numpy does (so the state it leaves is numpy's)."""
    kind = "f32" if as_float else "u8"
    return f"""
define void @bernoulli_{kind}(ptr %state, i64 %n, i32 %th, i32 %tl, ptr %out) {{
entry:
  %spos = getelementptr i8, ptr %state, i64 {_STATE_POS}
  %pos = alloca i32
  %p0 = load i32, ptr %spos
  store i32 %p0, ptr %pos
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%inext, %next_i]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %q0 = load i32, ptr %pos
  %spent = icmp sge i32 %q0, {_N}
  br i1 %spent, label %regen, label %ready
regen:
  call void @twist(ptr %state)
  store i32 0, ptr %pos
  br label %ready
ready:
  %q = phi i32 [%q0, %body], [0, %regen]
  %left = sub i32 {_N}, %q
  %pairs = lshr i32 %left, 1
  %none = icmp eq i32 %pairs, 0
  br i1 %none, label %one, label %many
one:
  %a = call i32 @next(ptr %state, ptr %pos)
  %b = call i32 @next(ptr %state, ptr %pos)
  %k = call i1 @keep(i32 %a, i32 %b, i32 %th, i32 %tl){_store_mask("1", "%k", "%i", as_float)}
  %i_one = add i64 %i, 1
  br label %next_i
many:
  %pairs64 = zext i32 %pairs to i64
  %rest = sub i64 %n, %i
  %fewer = icmp slt i64 %rest, %pairs64
  %take = select i1 %fewer, i64 %rest, i64 %pairs64
  %hi = add i64 %i, %take
  call void @block_{kind}(ptr %state, i32 %q, i64 %i, i64 %hi, i32 %th, i32 %tl, ptr %out)
  %take32 = trunc i64 %take to i32
  %used = shl i32 %take32, 1
  %q2 = add i32 %q, %used
  store i32 %q2, ptr %pos
  br label %next_i
next_i:
  %inext = phi i64 [%i_one, %one], [%hi, %many]
  br label %loop
done:
  %pend = load i32, ptr %pos
  store i32 %pend, ptr %spos
  ret void
}}"""


_IR = "\n".join([_twist(), _HELPERS, _block(True), _block(False), _entry(True), _entry(False)])

_lock = threading.Lock()
_state = {}
#: the dtypes drawn natively: float32 1.0 / 0.0, or a byte 1 / 0 (bool, uint8)
_DRAWN = {"float32": np.float32, "bool": np.bool_, "uint8": np.uint8}
#: whether each is drawn as floats, by numpy's type char (`dtype.name` costs microseconds)
_AS_FLOAT = {np.dtype(t).char: t is np.float32 for t in _DRAWN.values()}


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
        kind = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)
        fns = {True: kind(engine.get_function_address("bernoulli_f32")),
               False: kind(engine.get_function_address("bernoulli_u8"))}
        _state["engine"] = engine  # (keeps the code alive)
        return fns if all(_matches_numpy(fns[f], f) for f in fns) else None
    except Exception:  # (no llvmlite target here, or numpy's internals differ): numpy draws
        return None


def _generator():
    """numpy's global legacy MT19937 bit generator, or None."""
    bg = getattr(getattr(np.random.mtrand, "_rand", None), "_bit_generator", None)
    if type(bg).__name__ != "MT19937" or not hasattr(bg, "ctypes"):
        return None
    return bg


def _matches_numpy(fn, as_float: bool) -> bool:
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
            got = np.empty(n, np.float32 if as_float else np.uint8)
            fn(bg.ctypes.state_address, n, *_threshold(p), got.ctypes.data)
            after = np.random.get_state()
            ok = ok and np.array_equal(got, expected.astype(got.dtype)) and \
                np.array_equal(after[1], numpy_after[1]) and after[2] == numpy_after[2]
        return ok
    finally:
        np.random.set_state(saved)


@functools.lru_cache(maxsize=64)
def _threshold(p: float) -> tuple:
    """(T >> 26, T's low 26 bits) for T = floor(p * 2^53), the largest 53-bit draw that
    `rand() <= p` keeps (`@keep`); a high half of -1 keeps none (p < 0, NaN)."""
    p = float(p)
    if not p >= 0:
        return -1, 0
    t = 2 ** 53 - 1 if p >= 1 else math.floor(p * 2.0 ** 53)  # (exact: p * 2^53 only moves the exponent)
    return t >> 26, t & (2 ** 26 - 1)


def fill(out: np.ndarray, p: float) -> bool:
    """Fill `out` (writable, C-contiguous, native float32, uint8 or bool) with `np.random.rand(*out.shape) <= p`
    drawn natively from the same stream; False (nothing drawn) where it cannot be."""
    as_float = _AS_FLOAT.get(out.dtype.char)
    flags = out.flags
    if as_float is None or not (type(p) is float or _exact_float(p)) or not flags.c_contiguous \
            or not flags.writeable or not out.dtype.isnative:
        return False  # (numpy broadcasts anything else, and compares what no float64 holds exactly)
    fns = _compiled()
    bg = _generator() if fns is not None else None
    if bg is None:
        return False
    th, tl = _threshold(p)
    with bg.lock:
        fns[as_float](_state_address(bg), out.size, th, tl, address_of(out))
    return True


def _exact_float(p) -> bool:
    """Whether `p` is a real number a float64 holds exactly (numpy compares a Fraction, a
    long double or a huge int as it is; the native loop compares a float64)."""
    if not isinstance(p, numbers.Real):
        return False
    try:
        return float(p) == p
    except (OverflowError, ValueError, TypeError):
        return False


def _state_address(bg) -> int:
    """The address of `bg`'s state, asked once per generator (`bg.ctypes` builds an object);
    the pair is read and written as one, so another thread's generator never answers."""
    cached = _state.get("address")
    if cached is None or cached[0] is not bg:
        cached = _state["address"] = (bg, bg.ctypes.state_address)
    return cached[1]


def bernoulli(shape: tuple, p: float, dtype: str):
    """`(np.random.rand(*shape) <= p).astype(dtype)` drawn natively from the same
    stream, or None where it cannot be (the caller draws with numpy)."""
    kind = _DRAWN.get(dtype)
    if kind is None:
        return None
    out = np.empty(shape, kind)
    return out if fill(out, p) else None
