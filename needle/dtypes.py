"""The dtypes needle supports, by name, and the rules that combine them."""
import numpy as np

from .errors import DTypeError, fmt_shape

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
#: numpy dtype -> name, for a fast lookup on hot paths (np.dtype.name is slow)
NAMES = {dt: name for name, dt in DTYPES.items()}
INTS = ("int32", "int64", "uint8")


def dtype_name(dtype) -> str:
    """Normalize a dtype given as a name, numpy dtype or numpy scalar type."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    if isinstance(dtype, np.dtype) and dtype in NAMES:
        return NAMES[dtype]
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


def require_same(op: str, *dtypes, shapes=None) -> str:
    """The common dtype of an op's operands; `shapes` (one per operand) go into the error."""
    first = dtypes[0]
    for d in dtypes[1:]:
        if d != first:
            if shapes is not None:
                operands = ", ".join(f"{fmt_shape(shape)} {dtype}" for shape, dtype in zip(shapes, dtypes))
                raise DTypeError(f"{op}: dtypes differ: {operands}; cast one operand first")
            raise DTypeError(f"{op}: dtypes differ ({', '.join(dtypes)}); cast one operand first")
    return first


#: elementwise ops defined only for floating dtypes, and the ops bool supports
FLOAT_ONLY = ("exp", "log", "tanh", "sqrt", "pow", "div", "sigmoid")
BOOL_OPS = ("eq", "ne", "lt", "le", "max", "min")


def check_elementwise(op: str, dtype: str, shapes=None) -> None:
    """The one dtype rule for elementwise ops, shared by eager arrays and the IR so
    that both modes accept and reject the same programs."""
    if op in FLOAT_ONLY and dtype not in FLOATS:
        raise DTypeError(f"{op}: expects floating dtypes, got {dtype}{_operands(shapes)}; cast first")
    if dtype == "bool" and op not in BOOL_OPS:
        raise DTypeError(f"{op}: not defined for bool{_operands(shapes)}; cast first")


def _operands(shapes) -> str:
    return "" if shapes is None else " (operands " + ", ".join(fmt_shape(s) for s in shapes) + ")"
