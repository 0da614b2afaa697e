"""The primitive operations, written once with numpy.

This table is the meaning of every primitive: the `cpu_numpy()` device runs it op
by op, and the IR's reference executor interprets graphs with it, so it is the
oracle that generated code is tested against.
"""
import numpy as np

UNARY = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "abs": np.abs,
}

BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "max": np.maximum,
    "min": np.minimum,
    "lt": np.less,
    "le": np.less_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}
COMPARISONS = ("lt", "le", "eq", "ne")

REDUCE = {
    "sum": np.sum,
    "max": np.max,
}


def unary(op: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return UNARY[op](a)


def binary(op: str, a, b, dtype) -> np.ndarray:
    """`a op b` in `dtype` (comparisons give bool); scalars are cast to `dtype` first."""
    if not isinstance(a, np.ndarray):
        a = np.asarray(a, dtype=dtype)
    if not isinstance(b, np.ndarray):
        b = np.asarray(b, dtype=dtype)
    with np.errstate(all="ignore"):
        out = BINARY[op](a, b)
    if op in COMPARISONS:
        return out
    return out if out.dtype == dtype else out.astype(dtype)


def reduce(op: str, a: np.ndarray, axes: tuple) -> np.ndarray:
    """Reduce over `axes`, keeping them as size-1 dims.  Max of an empty axis is -inf
    for floats (the identity of max), sum of an empty axis is 0."""
    if op == "max" and a.size == 0:
        shape = tuple(1 if i in axes else s for i, s in enumerate(a.shape))
        fill = -np.inf if a.dtype.kind == "f" else np.iinfo(a.dtype).min if a.dtype.kind in "iu" else False
        return np.full(shape, fill, dtype=a.dtype)
    out = REDUCE[op](a, axis=axes, keepdims=True)
    return out if out.dtype == a.dtype else out.astype(a.dtype)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b)
