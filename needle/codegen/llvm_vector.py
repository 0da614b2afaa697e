"""Vector loops for the LLVM renderer.

Inside a kernel IR loop of kind `vector`, an expression that depends on the loop
variable is one SIMD value holding all lanes (lane k = the variable's value + k).
Loads whose index moves by 1 per lane are vector loads (masked loads when a
lane-dependent guard comes with them); other strides are masked gathers; stores
must be contiguous.  Operations on vectors are the renderer's own (they
broadcast scalars), so any expression the renderer supports works in a vector
loop, the lane variable itself included (a mask's compare).
"""
from __future__ import annotations

from llvmlite import ir

from . import kernel_ir as K
from .llvm_types import _ALIGN, _TYPE_SUFFIX, I1, I32, I64, MEMORY_TYPES, PTR


class VectorLoops:
    """Mixin of the LLVM renderer: what it needs inside a vector loop."""

    def _depends(self, e, var) -> bool:
        memo = self.__dict__.setdefault("_dep_memo", {})
        key = (id(e), var)
        if key in memo:
            return memo[key][1]
        if isinstance(e, K.Var):
            out = e.name == var or e.name in self.vector_vars
        elif isinstance(e, (K.Const, K.Param)):
            out = False
        elif isinstance(e, (K.Load, K.Store)):
            out = self._depends(e.index, var) or (e.valid is not None and self._depends(e.valid, var)) or \
                (isinstance(e, K.Store) and self._depends(e.value, var))
        elif isinstance(e, K.Binary):
            out = self._depends(e.a, var) or self._depends(e.b, var)
        elif isinstance(e, (K.Unary, K.Cast)):
            out = self._depends(e.x, var)
        elif isinstance(e, K.Where):
            out = any(self._depends(x, var) for x in (e.cond, e.a, e.b))
        else:
            out = True
        memo[key] = (e, out)
        return out

    def _lane_stride(self, index):
        """(index at lane 0, step per lane); the step must be a known constant."""
        var, _ = self.vector
        base = _substitute(index, var, K.Const(0))
        stride = _derivative(index, var, lambda e: not self._depends(e, var))
        if stride is None:
            raise ValueError("LLVM renderer: vector access whose index is not affine in the lane")
        return self.expr(base), stride

    def _array(self, name):
        if name in self.locals:
            return self.locals[name]
        base, dtype, _ = self.bufs[name]
        return base, dtype

    def _vector_ptr(self, name, index):
        base, dtype = self._array(name)
        start, stride = self._lane_stride(index)
        if stride != 1:
            raise ValueError(f"LLVM renderer: vector store with stride {stride} (only contiguous is supported)")
        return self.b.gep(base, [start], source_etype=MEMORY_TYPES[dtype]), dtype

    def _vector_load(self, e: K.Load):
        """Contiguous lanes: one vector load, or a masked load under a guard.  Strided
        lanes, or lanes at places computed lane by lane (a gather of labels' logits):
        a masked gather.  Masked-off lanes are not read and give 0."""
        base, dtype = self._array(e.buf)
        width = self.vector[1]
        mty = ir.VectorType(MEMORY_TYPES[dtype], width)
        suffix = f"v{width}{_TYPE_SUFFIX[dtype]}"
        try:
            start, stride = self._lane_stride(e.index)
        except ValueError:  # not affine in the lane: each lane's own index
            start, stride = None, None
        if stride is None:
            ptr = self.b.gep(base, [self._splat(self.expr(e.index), K.INDEX, width)], source_etype=MEMORY_TYPES[dtype])
            ptr.type = ir.VectorType(PTR, width)  # (as below)
            name = f"llvm.masked.gather.{suffix}.v{width}p0"
        elif stride == 1:
            ptr = self.b.gep(base, [start], source_etype=MEMORY_TYPES[dtype])
            if e.valid is None:  # only element alignment is known (numpy buffers, offsets into locals)
                return self._from_memory(self.b.load(ptr, typ=mty, align=_ALIGN[dtype]), dtype)
            name = f"llvm.masked.load.{suffix}.p0"  # guarded contiguous lanes (a ragged last panel)
        else:
            lanes = ir.Constant(ir.VectorType(I64, width), [k * stride for k in range(width)])
            ptr = self.b.gep(base, [self.b.add(self._splat_value(start, width), lanes)],
                             source_etype=MEMORY_TYPES[dtype])
            ptr.type = ir.VectorType(PTR, width)  # llvmlite types a vector GEP as a scalar pointer
            name = f"llvm.masked.gather.{suffix}.v{width}p0"
        mask = self.expr(e.valid) if e.valid is not None else ir.Constant(ir.VectorType(I1, width), [1] * width)
        if not isinstance(mask.type, ir.VectorType):
            mask = self._splat_value(mask, width)
        fn = self._extern(name, mty, [ptr.type, I32, mask.type, mty])
        value = self.b.call(fn, [ptr, ir.Constant(I32, _ALIGN[dtype]), mask, ir.Constant(mty, None)])
        return self._from_memory(value, dtype)

    def _vector_store(self, s: K.Store) -> None:
        if s.valid is not None and self._depends(s.valid, self.vector[0]):
            raise ValueError("LLVM renderer: lane-dependent store guards are not supported in vector loops")
        ptr, dtype = self._vector_ptr(s.buf, s.index)
        value = self._to_memory(self._splat(self.expr(s.value), dtype), dtype)
        if s.valid is None:
            self.b.store(value, ptr, align=_ALIGN[dtype])
        else:
            with self.b.if_then(self.expr(s.valid)):
                self.b.store(value, ptr, align=_ALIGN[dtype])

    def _splat(self, value, dtype, width=None):
        if isinstance(value.type, ir.VectorType):
            return value
        return self._splat_value(value, width or self.vector[1])

    def _splat_value(self, value, width):
        ty = ir.VectorType(value.type, width)
        vec = self.b.insert_element(ir.Constant(ty, ir.Undefined), value, ir.Constant(I32, 0))
        return self.b.shuffle_vector(vec, ir.Constant(ty, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, width), [0] * width))

def _derivative(e, var, constant=lambda e: False):
    """d(e)/d(var) for affine integer expressions; None when not affine.
    `constant(e)` tells subexpressions known not to depend on var."""
    if constant(e):
        return 0
    if isinstance(e, K.Var):
        return 1 if e.name == var else 0
    if isinstance(e, (K.Const, K.Param)):
        return 0
    if isinstance(e, K.Binary) and e.op in ("add", "sub"):
        da, db = _derivative(e.a, var, constant), _derivative(e.b, var, constant)
        if da is None or db is None:
            return None
        return da + db if e.op == "add" else da - db
    if isinstance(e, K.Binary) and e.op == "mul":
        da, db = _derivative(e.a, var, constant), _derivative(e.b, var, constant)
        if da == 0 and isinstance(e.a, K.Const) and db is not None:
            return e.a.value * db
        if db == 0 and isinstance(e.b, K.Const) and da is not None:
            return e.b.value * da
        if da == 0 and db == 0:
            return 0
        return None
    return None


def _substitute(e, var, value):
    if isinstance(e, K.Var):
        return value if e.name == var else e
    if isinstance(e, K.Binary) and e.op in ("add", "sub", "mul"):
        return K.Binary(e.op, _substitute(e.a, var, value), _substitute(e.b, var, value), e.dtype, e.contract)
    return e
