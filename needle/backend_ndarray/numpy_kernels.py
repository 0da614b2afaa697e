"""The primitive operations, written once with numpy.

This table is the meaning of every primitive: the `cpu_numpy()` device runs it op
by op, and the IR's reference executor interprets graphs with it, so it is the
oracle that generated code is tested against.
"""
import numpy as np

from .. import array_api

UNARY = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "abs": np.abs,
    "sigmoid": lambda a: array_api.sigmoid(a.astype(np.float64)).astype(a.dtype),  # rounded once
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


def clamp_index(i: np.ndarray, n: int) -> np.ndarray:
    """Index values as gather/scatter_add read them: negative ones count from the end
    once, the rest is clamped into [0, n) (NaN reads as n - 1), then truncated to int."""
    i = np.asarray(i)
    if i.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            i = np.where(i < 0, i + n, i)
            i = np.where(i < n, i, n - 1)
            return np.where(i < 0, 0, i).astype(np.int64)
    i = i.astype(np.int64)
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


def gather(src: np.ndarray, indices, axis: int) -> np.ndarray:
    """out[p, j, q] = src[p, i_0[j], ..., i_{k-1}[j], q] (indices clamped as above)."""
    idx = tuple(clamp_index(i, src.shape[axis + d]) for d, i in enumerate(indices))
    return src[(slice(None),) * axis + idx]


def scatter_add(values: np.ndarray, indices, axis: int, sizes) -> np.ndarray:
    """Zeros with out[p, i_0[j], ..., q] += values[p, j, q] (gather's adjoint)."""
    ndim_i = np.ndim(indices[0])
    out = np.zeros(values.shape[:axis] + tuple(sizes) + values.shape[axis + ndim_i:], dtype=values.dtype)
    idx = tuple(clamp_index(i, n) for i, n in zip(indices, sizes))
    np.add.at(out, (slice(None),) * axis + idx, values)
    return out
