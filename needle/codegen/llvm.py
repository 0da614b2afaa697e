"""Kernel IR -> LLVM IR (llvmlite.ir), one module per kernel.

Each kernel becomes three functions:

- `<sym>_body(ptr noalias b0, ..., ptr params, i64 start, i64 stop, ptr limits,
  ptr err)`: the loop nest; the outermost parallel loop runs over [start, stop).
  Buffers are `noalias` so loops vectorize without run-time alias checks (the
  scheduler never gives a kernel an input that is also its output).
- `<sym>(ptr bufs, ptr params, i64 start, i64 stop, ptr limits, ptr err)`: the
  entry point called from Python; loads the buffer pointers, calls the body.
- `<sym>_omp(ptr data)`: for GOMP_parallel; takes this thread's share of the
  parallel loop from omp_get_thread_num / omp_get_num_threads (and notes when the
  thread started).

With bounds checking, every load and store checks its index against
`limits[2*b], limits[2*b+1]` and, when outside, skips the access and records the
buffer in `*err` (the runtime raises BoundsError).
"""
from __future__ import annotations

import hashlib
import sys

from llvmlite import ir

from . import kernel_ir as K
from . import llvm_exprs, llvm_statements, llvm_types, llvm_values, llvm_vector, vecmath
from .llvm_exprs import Expressions
from .llvm_statements import Statements
from .llvm_types import I32, I64, PTR, VOID
from .llvm_values import ValueHelpers
from .llvm_vector import VectorLoops


def fingerprint() -> str:
    """A hash of the code that turns kernel IR into LLVM IR, part of the JIT's cache
    key, so that an object compiled by an older renderer is never reused."""
    global _fingerprint
    if _fingerprint is None:
        digest = hashlib.sha256()
        for module in (sys.modules[__name__], llvm_statements, llvm_exprs, llvm_types, llvm_values, llvm_vector,
                       vecmath):
            with open(module.__file__, "rb") as f:
                digest.update(f.read())
        _fingerprint = digest.hexdigest()[:16]
    return _fingerprint


_fingerprint = None


def render(kernel: K.Kernel, symbol: str, bounds_check: bool = False, vector_bytes: int = 0) -> str:
    """The LLVM IR text of `kernel`.  With `vector_bytes` (the target's SIMD width),
    its functions ask the loop vectorizer for vectors that wide: LLVM's default for
    AVX-512 CPUs is 256-bit vectors, half the throughput of compute-bound kernels
    (exp, tanh)."""
    module = ir.Module(name=symbol)
    _Renderer(module, kernel, symbol, bounds_check, scalef=vector_bytes >= 64).emit()
    text = str(module)
    if vector_bytes:
        width = f' "prefer-vector-width"="{8 * vector_bytes}"'
        text = "\n".join(line + width if line.startswith("define ") else line for line in text.split("\n"))
    return text


class _Renderer(Statements, Expressions, ValueHelpers, VectorLoops):
    """One kernel's module: the three functions here, statements (llvm_statements),
    expressions (llvm_exprs), typed values (llvm_values) and vector loops (llvm_vector)
    in their mixins, which share this state."""

    def __init__(self, module, kernel: K.Kernel, symbol: str, bounds_check: bool, scalef: bool = False):
        self.m, self.k, self.sym, self.check = module, kernel, symbol, bounds_check
        self.scalef = scalef  # the target has AVX-512's vscalefps (vecmath.exp_f32)
        self.scopes = [{}]
        self.vars = {}      # loop vars and lets: name -> value
        self.mutable = {}   # declared vars: name -> (alloca, dtype)
        self.locals = {}    # local arrays: name -> (alloca, dtype)
        self.vector = None  # (loop var, width) while rendering a vector loop body
        self.vector_vars = set()  # lets bound to vector values
        self.trips = [1]    # per LLVM loop being rendered: most trips of the loops inside it
        self.transcendental = False  # whether the loop being rendered computes one (vecmath)
        self.loop_ids = {}  # see _loop_id
        self.accumulation = None  # the add of `acc[i] = acc[i] + x` being stored (llvm_statements._s_Store)

    # ---- functions ------------------------------------------------------------------------
    def emit(self) -> None:
        nb = len(self.k.bufs)
        body_ty = ir.FunctionType(VOID, [PTR] * nb + [PTR, I64, I64, PTR, PTR])
        body = ir.Function(self.m, body_ty, name=self.sym + "_body")
        body.linkage = "internal"
        body.attributes.add("alwaysinline")
        for a in body.args[:nb]:
            a.add_attribute("noalias")
        self._emit_body(body)
        self._emit_entry(body, nb)
        self._emit_omp()

    def _emit_body(self, fn) -> None:
        nb = len(self.k.bufs)
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.bufs = {buf.name: (fn.args[i], buf.dtype, i) for i, buf in enumerate(self.k.bufs)}
        self.params, self.start, self.stop, self.limits, self.err = fn.args[nb:]
        start = self.b.function.append_basic_block("start")
        self.b.branch(start)
        self.b.position_at_end(start)
        self._stmts(self.k.body)
        self.b.ret_void()

    def _emit_entry(self, body, nb) -> None:
        fn = ir.Function(self.m, ir.FunctionType(VOID, [PTR, PTR, I64, I64, PTR, PTR]), name=self.sym)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        bufs = fn.args[0]
        ptrs = [b.load(b.gep(bufs, [ir.Constant(I64, i)], source_etype=PTR), typ=PTR) for i in range(nb)]
        b.call(body, ptrs + list(fn.args[1:]))
        b.ret_void()

    def _emit_omp(self) -> None:
        """data = {bufs, params, total, limits, err, start[0], start[1], ...}: note when
        this thread started (CLOCK_MONOTONIC ns, perf_counter's clock, in start[tid]: the
        runtime learns how late a sleeping worker wakes), then run this thread's slice."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, [PTR]), name=self.sym + "_omp")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        data = fn.args[0]
        word = [b.load(b.gep(data, [ir.Constant(I64, i)], source_etype=I64), typ=I64) for i in range(5)]
        tid = b.sext(b.call(self._extern("omp_get_thread_num", I32, []), []), I64)
        nth = b.sext(b.call(self._extern("omp_get_num_threads", I32, []), []), I64)
        timespec = b.alloca(ir.ArrayType(I64, 2))
        b.call(self._extern("clock_gettime", I32, [I32, PTR]), [ir.Constant(I32, 1), timespec])  # CLOCK_MONOTONIC
        sec, nsec = (b.load(b.gep(timespec, [ir.Constant(I64, 0), ir.Constant(I64, k)],
                                  source_etype=ir.ArrayType(I64, 2)), typ=I64) for k in (0, 1))
        b.store(b.add(b.mul(sec, ir.Constant(I64, 10 ** 9)), nsec),
                b.gep(data, [b.add(tid, ir.Constant(I64, 5))], source_etype=I64))
        total = word[2]
        chunk = b.sdiv(b.add(total, b.sub(nth, ir.Constant(I64, 1))), nth)
        lo = b.mul(tid, chunk)
        hi = b.add(lo, chunk)
        hi = b.select(b.icmp_signed("<", hi, total), hi, total)
        run = fn.append_basic_block("run")
        done = fn.append_basic_block("done")
        b.cbranch(b.icmp_signed("<", lo, hi), run, done)
        b.position_at_end(run)
        entry = self.m.globals[self.sym]
        b.call(entry, [b.inttoptr(word[0], PTR), b.inttoptr(word[1], PTR), lo, hi,
                       b.inttoptr(word[3], PTR), b.inttoptr(word[4], PTR)])
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()

    def _extern(self, name, ret, args):
        fn = self.m.globals.get(name)
        if fn is None:
            fn = ir.Function(self.m, ir.FunctionType(ret, args), name=name)
        return fn
