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
from . import llvm_types, llvm_values, llvm_vector, vecmath
from .llvm_types import F64, FAST, I1, I32, I64, MEMORY_TYPES, PTR, SUM_FLAGS, TYPES, VOID, is_float
from .llvm_values import ValueHelpers
from .llvm_vector import VectorLoops

def fingerprint() -> str:
    """A hash of the code that turns kernel IR into LLVM IR, part of the JIT's cache
    key, so that an object compiled by an older renderer is never reused."""
    global _fingerprint
    if _fingerprint is None:
        digest = hashlib.sha256()
        for module in (sys.modules[__name__], llvm_types, llvm_values, llvm_vector, vecmath):
            with open(module.__file__, "rb") as f:
                digest.update(f.read())
        _fingerprint = digest.hexdigest()[:16]
    return _fingerprint


_fingerprint = None


#: a loop around inner loops of this many trips or more is not unrolled by LLVM (see
#: _Renderer._loop_id)
UNROLL_MAX_INNER_TRIPS = 16
#: an innermost loop that computes exp, log, tanh, sigmoid or pow in float32 runs this
#: many vectors at a time (see _Renderer._loop_id)
TRANSCENDENTAL_INTERLEAVE = 4


def render(kernel: K.Kernel, symbol: str, bounds_check: bool = False, vector_bytes: int = 0) -> str:
    """The LLVM IR text of `kernel`.  With `vector_bytes` (the target's SIMD width),
    its functions ask the loop vectorizer for vectors that wide: LLVM's default for
    AVX-512 CPUs is 256-bit vectors, which halves the throughput of compute-bound
    kernels (exp, tanh: 1.4x slower measured)."""
    module = ir.Module(name=symbol)
    _Renderer(module, kernel, symbol, bounds_check, scalef=vector_bytes >= 64).emit()
    text = str(module)
    if vector_bytes:
        width = f' "prefer-vector-width"="{8 * vector_bytes}"'
        text = "\n".join(line + width if line.startswith("define ") else line for line in text.split("\n"))
    return text


class _Renderer(ValueHelpers, VectorLoops):
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

    # ---- statements -----------------------------------------------------------------------
    def _stmts(self, stmts) -> None:
        for s in stmts:
            getattr(self, "_s_" + type(s).__name__)(s)

    def _s_Loop(self, s: K.Loop) -> None:
        if s.kind == "unroll":
            self._unrolled(s, range(s.start, s.start + s.extent))
            return
        if s.kind == "vector" and not self.check:  # bounds checking checks lane by lane
            if self.vector is not None or s.start != 0 or not isinstance(s.extent, int):
                raise ValueError("LLVM renderer: vector loops must be innermost, start at 0, constant width")
            self.vector = (s.var, s.extent)
            # the lane variable's own value (a mask's compare): lane k holds k
            outer = self.vars.get(s.var)
            self.vars[s.var] = ir.Constant(ir.VectorType(I64, s.extent), list(range(s.extent)))
            self.scopes.append({})
            self._stmts(s.body)
            self.scopes.pop()
            if outer is None:
                del self.vars[s.var]
            else:
                self.vars[s.var] = outer
            self.vector = None
            self.vector_vars.clear()
            self.__dict__.pop("_dep_memo", None)
            return
        if s.kind != "parallel" and s.extent == 1 and isinstance(s.start, int):
            # one trip (a matmul's single K panel): its body with the variable a constant,
            # so that `pc == 0` folds; a loop LLVM may not unroll would keep it a variable
            self._unrolled(s, (s.start,))
            return
        b = self.b
        if s.kind == "parallel":
            lo, hi = self.start, self.stop
        else:
            lo = self._index(s.start)
            hi = self._index(s.extent)  # a count, as everywhere in the kernel IR
            if s.start != 0:
                hi = b.add(lo, hi)
        pre = b.block
        header = b.function.append_basic_block(f"{s.var}.head")
        body = b.function.append_basic_block(f"{s.var}.body")
        exit_ = b.function.append_basic_block(f"{s.var}.exit")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=s.var)
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", i, hi), body, exit_)
        b.position_at_end(body)
        self.vars[s.var] = i
        self.scopes.append({})
        self.trips.append(1)
        outer_transcendental, self.transcendental = self.transcendental, False
        self._stmts(s.body)
        inner = self.trips.pop()
        self.scopes.pop()
        self.scopes[-1].clear()  # the loop may have changed mutables cached values used
        nxt = b.add(i, ir.Constant(I64, 1))
        i.add_incoming(nxt, b.block)
        latch = b.branch(header)
        if inner >= UNROLL_MAX_INNER_TRIPS:
            latch.set_metadata("llvm.loop", self._loop_id("llvm.loop.unroll.disable"))
        elif inner == 1 and self.transcendental and self.k.hot:
            latch.set_metadata("llvm.loop", self._loop_id("llvm.loop.interleave.count",
                                                          TRANSCENDENTAL_INTERLEAVE))
        self.transcendental = self.transcendental or outer_transcendental
        trips = s.extent if isinstance(s.extent, int) and s.kind != "parallel" else UNROLL_MAX_INNER_TRIPS
        self.trips[-1] = max(self.trips[-1], trips * inner)
        b.position_at_end(exit_)

    def _unrolled(self, s: K.Loop, trips) -> None:
        """`s`'s body once for each value of its variable in `trips`, the variable a
        constant there."""
        for v in trips:
            self.vars[s.var] = ir.Constant(I64, v)
            self.scopes.append({})
            self._stmts(s.body)
            self.scopes.pop()
        self.scopes[-1].clear()  # (as after a loop: the body may have changed mutables)

    def _loop_id(self, option: str, value: int = None):
        """A loop ID (`!llvm.loop` metadata) that tells LLVM's loop passes `option`:

        - "llvm.loop.unroll.disable" on a loop around UNROLL_MAX_INNER_TRIPS or more
          trips of inner loops.  At O2 LLVM fully unrolls loops of few constant trips
          around inner loops: a padded copy's 6 x 6 loops around its 32-channel loop
          became 36 copies of the vectorized loop, and the kernel took 84-114 ms to
          compile instead of 40-44 (ResNet9's first step: 0.35 s of 4.4 s of LLVM work).
          Loops around fewer trips (a max pool's 2 x 2 window: 2.5x slower without) and
          innermost loops are unrolled as before.
        - "llvm.loop.interleave.count" on an innermost loop computing a transcendental:
          its polynomials are long chains of dependent FMAs, and one vector per
          iteration left the FP units idle (vectorized alone, LLVM chose 1).  Four at a
          time, one thread, 2^20 floats, AVX2 (Zen 2): sigmoid 1.45 -> 1.00 ns a float,
          tanh 0.83 -> 0.75, exp 0.52 -> 0.48, log 0.75 -> 0.71.  It costs compile time
          (a tanh kernel 22 -> 34 ms), so kernels that run little (not `Kernel.hot`: the
          compiler marks them from Target.unroll_min_work, as the JIT picks its
          unrolling) are left alone.

        (A loop ID's first operand is the ID itself, which llvmlite cannot build: its
        operands are set after it is made, and it is never hashed.)"""
        key = (option, value)
        if key not in self.loop_ids:
            words = [ir.MetaDataString(self.m, option)] + ([] if value is None else [ir.Constant(I32, value)])
            setting = self.m.add_metadata(words)
            loop_id = self.m.add_metadata([setting, setting])
            loop_id.operands = (loop_id, setting)
            self.loop_ids[key] = loop_id
        return self.loop_ids[key]

    def _s_Let(self, s: K.Let) -> None:
        value = self.expr(s.expr)
        self.vars[s.var] = value
        if isinstance(value.type, ir.VectorType):
            self.vector_vars.add(s.var)
        else:
            self.vector_vars.discard(s.var)

    def _s_Declare(self, s: K.Declare) -> None:
        with self.b.goto_block(self.entry):
            slot = self.b.alloca(TYPES[s.dtype], name=s.var)
        self.mutable[s.var] = (slot, s.dtype)
        self.b.store(self.expr(s.init), slot)

    def _s_Assign(self, s: K.Assign) -> None:
        slot, dtype = self.mutable[s.var]
        e = s.expr
        if isinstance(e, K.Binary) and e.a == K.Var(s.var, dtype) and e.op in ("add", "max"):
            value = self._reduce_step(e.op, self.b.load(slot, typ=TYPES[dtype]), self.expr(e.b), dtype)
        else:
            value = self.expr(e)
        self.b.store(value, slot)
        self.scopes[-1].clear()  # values read from the slot before the store are stale

    def _reduce_step(self, op, acc, x, dtype):
        """acc = acc op x, marked reassociable so the reduction loop vectorizes."""
        if not is_float(dtype):
            return self._binary(op, acc, x, dtype)
        if op == "add":
            # reassoc (so the loop vectorizes) but not nsz: reassoc with nsz also lets LLVM
            # factor a*b + a*c into a*(b + c), which turns (-0 * -inf) + (-inf * -1e30) = nan
            # into -inf * -1e30 = inf (a batched x @ x reads the same element twice)
            return self.b.fadd(acc, x, flags=SUM_FLAGS)
        return self._call_intrinsic("llvm.maximum", dtype, [acc, x], fastmath=FAST)

    def _s_LocalArray(self, s: K.LocalArray) -> None:
        with self.b.goto_block(self.entry):
            slot = self.b.alloca(ir.ArrayType(MEMORY_TYPES[s.dtype], s.size), name=s.name)
            slot.align = 64
            slot.type = PTR  # opaque (as LLVM prints it), so vector and scalar accesses type-check
        self.locals[s.name] = (slot, s.dtype)

    def _s_Store(self, s: K.Store) -> None:
        if self.vector is not None and self._depends(s, self.vector[0]):
            return self._vector_store(s)
        if s.buf in self.locals:
            slot, dtype = self.locals[s.buf]
            self._store(slot, self.expr(s.index), self._to_memory(self.expr(s.value), dtype), dtype)
            return
        buf, dtype, bi = self.bufs[s.buf]
        index = self.expr(s.index)
        value = self._to_memory(self.expr(s.value), dtype)
        valid = self.expr(s.valid) if s.valid is not None else None
        if self.check:
            valid = self._and(valid, self._in_bounds(index, bi, valid))
        if valid is None:
            self._store(buf, index, value, dtype)
            return
        with self.b.if_then(valid):
            self._store(buf, index, value, dtype)

    def _store(self, buf, index, value, dtype) -> None:
        ptr = self.b.gep(buf, [index], source_etype=MEMORY_TYPES[dtype])
        self.b.store(value, ptr)

    def _s_If(self, s: K.If) -> None:
        with self.b.if_then(self.expr(s.cond)):
            self.scopes.append({})
            self._stmts(s.body)
            self.scopes.pop()

    def _s_Barrier(self, s) -> None:
        pass  # one CPU thread runs a whole parallel iteration

    # ---- expressions ----------------------------------------------------------------------
    def expr(self, e):
        """The value of `e`, cached by the expression object's identity in the current
        scope (a loop body, an If, an unrolled copy): an object evaluated again after a
        store to what it loads gives the value from before the store, so a lowering reads
        memory it has just written through a new Load (matmul_rows' updates)."""
        if isinstance(e, K.Var) and e.name in self.mutable:
            return self._e_Var(e)  # a mutable's value changes: never cached
        for scope in reversed(self.scopes):
            hit = scope.get(id(e))
            if hit is not None:
                return hit[1]
        value = getattr(self, "_e_" + type(e).__name__)(e)
        self.scopes[-1][id(e)] = (e, value)  # keep e alive so its id stays unique
        return value

    def _index(self, x):
        return ir.Constant(I64, x) if isinstance(x, int) else self.expr(x)

    def _e_Const(self, e: K.Const):
        ty = TYPES[e.dtype]
        if e.dtype == "bool":
            return ir.Constant(I1, int(bool(e.value)))
        return ir.Constant(ty, float(e.value) if is_float(e.dtype) else int(e.value))

    def _e_Var(self, e: K.Var):
        if e.name in self.mutable:
            slot, dtype = self.mutable[e.name]
            return self.b.load(slot, typ=TYPES[dtype])
        return self.vars[e.name]

    def _e_Param(self, e: K.Param):
        ptr = self.b.gep(self.params, [ir.Constant(I64, e.index)], source_etype=F64)
        return self.b.load(ptr, typ=F64)

    def _e_Load(self, e: K.Load):
        if self.vector is not None and self._depends(e, self.vector[0]):
            return self._vector_load(e)
        if e.buf in self.locals:
            slot, dtype = self.locals[e.buf]
            ptr = self.b.gep(slot, [self.expr(e.index)], source_etype=MEMORY_TYPES[dtype])
            return self._from_memory(self.b.load(ptr, typ=MEMORY_TYPES[dtype]), dtype)
        buf, dtype, bi = self.bufs[e.buf]
        index = self.expr(e.index)
        valid = self.expr(e.valid) if e.valid is not None else None
        safe = valid
        if self.check:
            safe = self._and(valid, self._in_bounds(index, bi, valid))
        if safe is not None:
            index = self.b.select(safe, index, ir.Constant(I64, 0))
        ptr = self.b.gep(buf, [index], source_etype=MEMORY_TYPES[dtype])
        value = self._from_memory(self.b.load(ptr, typ=MEMORY_TYPES[dtype]), dtype)
        if valid is not None or safe is not None:
            value = self.b.select(safe, value, self._zero(dtype))
        return value

    def _e_Unary(self, e: K.Unary):
        x = self.expr(e.x)
        op, dtype, b = e.op, e.dtype, self.b
        if op == "neg":
            return b.fneg(x) if is_float(dtype) else b.sub(self._zero(dtype, x), x)
        if op == "not":
            return b.xor(x, self._const(1, "bool", x))
        if op == "abs":
            if is_float(dtype):
                return self._call_intrinsic("llvm.fabs", dtype, [x])
            if dtype in ("uint8", "bool"):
                return x
            zero = self._zero(dtype, x)
            return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if op == "sqrt":
            return self._call_intrinsic("llvm.sqrt", dtype, [x])
        if dtype == "float32":
            self.transcendental = True
        if dtype == "float32" and op == "exp":
            return vecmath.exp_f32(b, x, scalef=self.scalef)
        if dtype == "float32":
            return {"log": vecmath.log_f32, "tanh": vecmath.tanh_f32,
                    "sigmoid": vecmath.sigmoid_f32}[op](b, x)
        if op in ("exp", "log"):
            return self._call_intrinsic("llvm." + op, dtype, [x])
        if op == "sigmoid":  # float64: z = e**-|x|, 1 / (1 + z) for x >= 0, z / (1 + z) below
            one = self._const(1.0, dtype, x)
            z = self._call_intrinsic("llvm.exp", dtype, [b.fneg(self._call_intrinsic("llvm.fabs", dtype, [x]))])
            p = b.fdiv(one, b.fadd(z, one))
            return b.select(b.fcmp_ordered(">=", x, self._zero(dtype, x)), p, b.fmul(z, p))
        if op == "tanh":
            tanh = self._extern("tanh", F64, [F64])
            return self._lanewise(lambda lane: b.call(tanh, [lane]), x)
        raise ValueError(f"LLVM renderer: unknown unary op {op}")

    def _e_Binary(self, e: K.Binary):
        a, b_ = self._unify(self.expr(e.a), self.expr(e.b))
        # acc + a*b into a local accumulator (the matmul micro-kernel's tile) may become an fma
        accumulate = e.op == "add" and any(isinstance(x, K.Load) and x.buf in self.locals for x in (e.a, e.b))
        return self._binary(e.op, a, b_, e.a.dtype if e.op in K.COMPARE else e.dtype, accumulate)

    def _binary(self, op, a, b_, dtype, accumulate=False):
        b = self.b
        if op in ("and", "or"):
            return b.and_(a, b_) if op == "and" else b.or_(a, b_)
        if is_float(dtype):
            if op in K.COMPARE:
                return (b.fcmp_unordered if op == "ne" else b.fcmp_ordered)(
                    {"lt": "<", "le": "<=", "eq": "==", "ne": "!="}[op], a, b_)
            if op == "pow":
                return self._pow(a, b_, dtype)
            if op in ("max", "min"):
                return self._call_intrinsic("llvm.maximum" if op == "max" else "llvm.minimum", dtype, [a, b_])
            # A product may be contracted (fma) only into an accumulation: a reduction's
            # acc + x (its fadd carries SUM_FLAGS) or an add into a local accumulator array.
            # An elementwise a*b - c must round a*b exactly as every other place that
            # computes a*b does: softmax and logsumexp compute x*c - max(x*c) after a max
            # stage that rounded x*c; as fma(x, c, -max) the largest element gave the
            # unrounded residual instead of 0, and exp(residual) is inf for |x*c| ~ 1e10.
            flags = ("contract",) if op == "mul" or (accumulate and op == "add") else ()
            return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}[op](a, b_, flags=flags)
        signed = dtype not in ("uint8", "bool")
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        if op in K.COMPARE:
            return cmp({"lt": "<", "le": "<=", "eq": "==", "ne": "!="}[op], a, b_)
        if op in ("max", "min"):
            return b.select(cmp(">" if op == "max" else "<", a, b_), a, b_)
        if op == "idiv":
            return b.sdiv(a, b_)
        if op == "imod":
            return b.srem(a, b_)
        return {"add": b.add, "sub": b.sub, "mul": b.mul}[op](a, b_)

    def _e_Where(self, e: K.Where):
        a, b_ = self._unify(self.expr(e.a), self.expr(e.b))
        cond = self.expr(e.cond)
        if isinstance(cond.type, ir.VectorType) and not isinstance(a.type, ir.VectorType):
            a, b_ = self._splat(a, e.dtype, cond.type.count), self._splat(b_, e.dtype, cond.type.count)
        return self.b.select(cond, a, b_)

    def _e_Cast(self, e: K.Cast):
        return self.cast(self.expr(e.x), e.x.dtype, e.dtype)

    def _in_bounds(self, index, bi, valid=None):
        """limits[2bi] <= index < limits[2bi+1]; otherwise record bi + 1 in *err."""
        b = self.b
        lo = b.load(b.gep(self.limits, [ir.Constant(I64, 2 * bi)], source_etype=I64), typ=I64)
        hi = b.load(b.gep(self.limits, [ir.Constant(I64, 2 * bi + 1)], source_etype=I64), typ=I64)
        ok = b.and_(b.icmp_signed(">=", index, lo), b.icmp_signed("<", index, hi))
        bad = b.xor(ok, ir.Constant(I1, 1))
        if valid is not None:  # a masked-off access is not performed: not an error
            bad = b.and_(bad, valid)
        with b.if_then(bad):
            b.store(ir.Constant(I32, bi + 1), self.err)
        return ok
