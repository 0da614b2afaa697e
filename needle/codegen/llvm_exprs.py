"""Expressions of the kernel IR as LLVM values, for the LLVM renderer: each
evaluated once per scope; loads guarded by their masks (and by the buffers' limits
under bounds checking); float32 exp, log, tanh and sigmoid from vecmath; the rules of
which products may contract into an fma."""
from __future__ import annotations

from llvmlite import ir

from . import kernel_ir as K
from . import vecmath
from .llvm_types import F64, I1, I32, I64, MEMORY_TYPES, TYPES, is_float


class Expressions:
    """Mixin of the LLVM renderer (llvm._Renderer): `expr(e)` and an `_e_<Expression>`
    per kernel IR expression, at the builder `self.b`."""

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
        # acc[i] + a*b stored back into acc[i], a local accumulator (a matmul tile's, a column
        # reduction's row) may become an fma; not an add that reads a local array otherwise (a
        # column of -mean hoisted out of the loop: x*x - mean must round x*x, see below)
        accumulate = e is self.accumulation
        return self._binary(e.op, a, b_, e.a.dtype if e.op in K.COMPARE else e.dtype, accumulate, e.contract)

    def _binary(self, op, a, b_, dtype, accumulate=False, contract=False):
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
            # Only a matmul's product (Binary.contract) may be contracted into an fma, and
            # only into an accumulation: a reduction's acc + x (its fadd carries SUM_FLAGS)
            # or an update of a local accumulator array.  Every other a*b is rounded as the
            # eager kernel and numpy round it: the sum of x*c fused into its reduction had
            # been an fma chain (constant rows of x*c got a variance of 3e5, not 0), and
            # x*c - max(x*c) as fma(x, c, -max) gave the largest element the unrounded
            # residual instead of 0 (exp(residual) is inf for |x*c| ~ 1e10).
            flags = ("contract",) if (op == "mul" and contract) or (accumulate and op == "add") else ()
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
