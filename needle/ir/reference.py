"""The reference executor: interprets an IR graph node by node with numpy.

It is deliberately naive — no fusion, no views folded, every node materialized —
so that it can serve as the oracle for every test of generated code.
"""
from __future__ import annotations

import numpy as np

from ..backend_ndarray import numpy_kernels
from ..dtypes import np_dtype
from .nodes import BINARY, UNARY, toposort


def evaluate(outputs) -> list:
    """numpy values of `outputs` (a list of nodes), computing shared nodes once."""
    values = {}
    for node in toposort(outputs):
        values[id(node)] = _eval(node, [values[id(s)] for s in node.srcs])
    return [values[id(n)] for n in outputs]


def _eval(node, srcs):
    op, arg = node.op, node.arg
    if op == "buffer":
        return arg.device.numpy_view(arg) if hasattr(arg.device, "numpy_view") else arg.numpy()
    if op in ("const", "param"):
        return np.full(node.shape, arg.value if op == "param" else arg, dtype=np_dtype(node.dtype))
    if op in UNARY:
        return numpy_kernels.unary(op, srcs[0])
    if op in BINARY:
        return numpy_kernels.binary(op, srcs[0], srcs[1], srcs[0].dtype)
    if op == "where":
        return np.where(srcs[0], srcs[1], srcs[2])
    if op == "cast":
        return srcs[0].astype(np_dtype(arg))
    if op in ("reduce_sum", "reduce_max"):
        return numpy_kernels.reduce(op[7:], srcs[0], arg)
    if op == "matmul":
        return numpy_kernels.matmul(srcs[0], srcs[1])
    if op == "copy":
        return np.array(srcs[0], copy=True)
    if op == "view":
        return _read_view(node.srcs[0], srcs[0], arg)
    if op == "gather":
        return numpy_kernels.gather(srcs[0], srcs[1:], arg)
    if op == "scatter_add":
        return numpy_kernels.scatter_add(srcs[0], srcs[1:], *arg)
    if op == "assemble":
        out = np.zeros(node.shape, dtype=np_dtype(node.dtype))
        for piece, index in zip(srcs, arg):
            out[tuple(slice(a, b, c) for a, b, c in index)] = piece
        return out
    return _movement(op, arg, srcs[0])


def _movement(op, arg, x):
    if op == "reshape":
        return x.reshape(arg)
    if op == "permute":
        return np.transpose(x, arg)
    if op == "expand":
        return np.broadcast_to(x, arg)
    if op == "pad":
        return np.pad(x, arg)
    if op == "shrink":
        return x[tuple(slice(a, b) for a, b in arg)]
    if op == "flip":
        return np.flip(x, arg)
    if op == "stride":
        return x[tuple(slice(None, None, s) for s in arg)]
    if op == "window":
        axes, kernel, step = arg
        windows = np.lib.stride_tricks.sliding_window_view(x, kernel, axis=axes)
        windows = windows[tuple(slice(None, None, step) if i in axes else slice(None) for i in range(x.ndim))]
        # sliding_window_view puts kernel axes last; move them after the windowed axes
        n_after = x.ndim - 1 - axes[-1]
        order = list(range(axes[-1] + 1)) + list(range(x.ndim, x.ndim + len(kernel))) + \
            list(range(axes[-1] + 1, axes[-1] + 1 + n_after))
        return np.transpose(windows, order)
    if op == "as_strided":
        shape, strides, offset = arg
        flat = np.ascontiguousarray(x).reshape(-1)[offset:]
        return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * flat.itemsize for s in strides))
    raise ValueError(f"reference executor: unknown op {op!r}")


def _read_view(base, base_value, view):
    """Read `base` through a compiler View (see needle.compiler.views): element
    offset + sum(strides * i) of the base's layout, zero where the mask fails."""
    if base.op == "buffer":
        array = base.arg
        flat, start = array._handle, array.offset
    else:
        flat, start = np.ascontiguousarray(base_value).reshape(-1), 0
    grid = np.indices(view.shape, dtype=np.int64) if view.shape else np.zeros((0,), dtype=np.int64)
    index = np.full(view.shape, start + view.offset, dtype=np.int64)
    valid = np.full(view.shape, not view.empty)
    for j, stride in enumerate(view.strides):
        index = index + stride * grid[j]
    for coeffs, lo, hi in view.mask:
        value = sum(c * grid[j] for j, c in enumerate(coeffs)) if any(coeffs) else np.zeros(view.shape, np.int64)
        valid &= (lo <= value) & (value < hi)
    if flat.size == 0:
        return np.zeros(view.shape, dtype=flat.dtype)
    return np.where(valid, flat[np.where(valid, index, start)], np.zeros((), dtype=flat.dtype))
