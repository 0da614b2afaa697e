"""LLVM types of needle's dtypes and the fast-math flags the renderer uses."""
from __future__ import annotations

from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

TYPES = {"float32": F32, "float64": F64, "int32": I32, "int64": I64, "uint8": I8, "bool": I1}
MEMORY_TYPES = dict(TYPES, bool=I8)
FAST = ("reassoc", "contract", "nsz")
SUM_FLAGS = ("reassoc", "contract")
_TYPE_SUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "uint8": "i8", "bool": "i8"}
_ALIGN = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}


def is_float(dtype: str) -> bool:
    return dtype in ("float32", "float64")
