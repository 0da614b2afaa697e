"""The dtypes needle supports, by name, and the rules that combine them."""
import numpy as np

from .errors import DTypeError

#: name -> numpy dtype.  bool is produced by comparisons; the rest can be stored.
DTYPES = {
    "float32": np.dtype("float32"),
    "float64": np.dtype("float64"),
    "int32": np.dtype("int32"),
    "int64": np.dtype("int64"),
    "uint8": np.dtype("uint8"),
    "bool": np.dtype("bool"),
}
FLOATS = ("float32", "float64")
INTS = ("int32", "int64", "uint8")


def dtype_name(dtype) -> str:
    """Normalize a dtype given as a name, numpy dtype or numpy scalar type."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise DTypeError(f"unknown dtype {dtype!r}; needle supports {', '.join(DTYPES)}") from None
    if name not in DTYPES:
        raise DTypeError(f"unsupported dtype {name!r}; needle supports {', '.join(DTYPES)}")
    return name


def np_dtype(dtype) -> np.dtype:
    return DTYPES[dtype_name(dtype)]


def itemsize(dtype) -> int:
    return DTYPES[dtype_name(dtype)].itemsize


def is_float(dtype) -> bool:
    return dtype_name(dtype) in FLOATS


def require_float(op: str, dtype) -> None:
    if not is_float(dtype):
        raise DTypeError(f"{op}: expects a floating dtype (float32/float64), got {dtype}")


def require_same(op: str, *dtypes) -> str:
    first = dtypes[0]
    for d in dtypes[1:]:
        if d != first:
            raise DTypeError(f"{op}: dtypes differ ({', '.join(dtypes)}); cast one operand first")
    return first
