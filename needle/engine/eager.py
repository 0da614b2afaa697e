"""Eager execution on a compiled device: one primitive, one kernel.

The primitives of `cpu()` and `cuda()` (backend_ndarray.devices.CompiledDevice)
call this module, which builds a one-node graph over buffer leaves and realizes
it right away.  The schedule cache keys on the graph's structure, so repeating
an op on arrays of the same shape and layout skips the compiler and only
launches the cached kernel.
"""
from __future__ import annotations

import sys

from ..backend_ndarray.devices import CompiledDevice
from ..ir import build
from . import schedule_cache


def _run(build_node, *arrays):
    """Build `build_node(*leaf_nodes)` and compute it; the NDArray result."""
    node = build_node(*[build.buffer(a) for a in arrays])
    if node.op == "buffer":  # the builder folded the op away (e.g. a cast to the same dtype)
        return node.arg
    schedule_cache.realize([node])
    return node.arg


def copy(a):
    return _run(build.copy, a)


def cast(a, dtype):
    return _run(lambda x: build.cast(x, dtype) if dtype != a.dtype else build.copy(x), a)


def unary(op, a):
    return _run(lambda x: build.elementwise(op, x), a)


def binary(op, a, b):
    return _run(lambda x, y: build.elementwise(op, x, y), a, b)


def binary_scalar(op, a, scalar, reverse):
    def node(x):
        s = build.scalar(scalar, x.shape, x.dtype, x.device, exponent=op == "pow" and not reverse)
        return build.elementwise(op, s, x) if reverse else build.elementwise(op, x, s)
    return _run(node, a)


def where(cond, a, b):
    def node(c, x, y):
        if c.dtype != "bool":
            c = build.elementwise("ne", c, build.const(0, c.shape, c.dtype, c.device))
        return build.elementwise("where", c, x, y)
    return _run(node, cond, a, b)


def reduce(op, a, axes):
    return _run(lambda x: build.reduce("reduce_" + op, x, axes) if axes else build.copy(x), a)


def matmul(a, b):
    return _run(build.matmul, a, b)


CompiledDevice.eager = sys.modules[__name__]
