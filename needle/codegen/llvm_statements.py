"""Statements of the kernel IR as LLVM IR, for the LLVM renderer: loops (serial,
parallel over the thread's [start, stop), unrolled, vector, one trip as straight code)
with the `!llvm.loop` hints where LLVM's own choice was measured wrong, lets, mutable
accumulators (reassociable sums, so reductions vectorize), local arrays, stores, ifs."""
from __future__ import annotations

from llvmlite import ir

from . import kernel_ir as K
from .llvm_types import FAST, I32, I64, MEMORY_TYPES, PTR, SUM_FLAGS, TYPES, is_float

#: a loop around inner loops of this many trips or more is not unrolled by LLVM (see
#: Statements._loop_id)
UNROLL_MAX_INNER_TRIPS = 16
#: an innermost loop that computes exp, log, tanh, sigmoid or pow in float32 runs this
#: many vectors at a time (see Statements._loop_id)
TRANSCENDENTAL_INTERLEAVE = 4


class Statements:
    """Mixin of the LLVM renderer (llvm._Renderer): each `_s_<Statement>` renders one
    kernel IR statement at the builder `self.b`."""

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
          became 36 copies of the vectorized loop, twice the compile time for no speed.
          Loops around fewer trips (a max pool's 2 x 2 window, much slower rolled) and
          innermost loops are unrolled as before.
        - "llvm.loop.interleave.count" on an innermost loop computing a transcendental:
          its polynomials are long chains of dependent FMAs, and one vector per
          iteration left the FP units idle (vectorized alone, LLVM chose 1); four at a
          time keep them busy (the exp, tanh, log and pow rows of
          `benchmarks/bench_cpu.py`).  It costs compile time, so kernels that run
          little (not `Kernel.hot`: the compiler marks them from
          Target.unroll_min_work, as the JIT picks its unrolling) are left alone.

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
            value = self._reduce_step(e.op, self.b.load(slot, typ=TYPES[dtype]), self.expr(e.b), dtype, s.ordered)
        else:
            value = self.expr(e)
        self.b.store(value, slot)
        self.scopes[-1].clear()  # values read from the slot before the store are stale

    def _reduce_step(self, op, acc, x, dtype, in_order=False):
        """acc = acc op x, marked reassociable so the reduction loop vectorizes; `in_order`
        (K.Assign.ordered: a matmul's dot product, a chain of fmas k = 0, 1, ...) not: the
        order is then the one every lowering of a matmul sums in, whatever else the kernel
        computes (LLVM vectorizes a reassociable sum by the loop's body, so its last bits
        would depend on what was fused with it)."""
        if not is_float(dtype):
            return self._binary(op, acc, x, dtype)
        if op == "add":
            # reassoc (so the loop vectorizes) but not nsz: reassoc with nsz also lets LLVM
            # factor a*b + a*c into a*(b + c), which turns (-0 * -inf) + (-inf * -1e30) = nan
            # into -inf * -1e30 = inf (a batched x @ x reads the same element twice)
            return self.b.fadd(acc, x, flags=("contract",) if in_order else SUM_FLAGS)
        return self._call_intrinsic("llvm.maximum", dtype, [acc, x], fastmath=FAST)

    def _s_LocalArray(self, s: K.LocalArray) -> None:
        with self.b.goto_block(self.entry):
            slot = self.b.alloca(ir.ArrayType(MEMORY_TYPES[s.dtype], s.size), name=s.name)
            slot.align = 64
            slot.type = PTR  # opaque (as LLVM prints it), so vector and scalar accesses type-check
        self.locals[s.name] = (slot, s.dtype)

    def _s_Store(self, s: K.Store) -> None:
        e = s.value
        if s.buf in self.locals and isinstance(e, K.Binary) and e.op == "add" and any(
                isinstance(x, K.Load) and x.buf == s.buf and x.index == s.index for x in (e.a, e.b)):
            self.accumulation = e  # (an accumulator's update: its product may become an fma)
            try:
                self._store_value(s)
            finally:
                self.accumulation = None
            return
        self._store_value(s)

    def _store_value(self, s: K.Store) -> None:
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
