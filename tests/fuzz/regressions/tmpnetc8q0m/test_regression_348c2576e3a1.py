"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    demo
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([], dtype=np.float32).reshape((1, 0)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = v0 / -0.25
    v2 = ndl.ops.tanh(v1)
    v3 = v0 * v0
    v4 = v1 / v2
    v5 = v0 * 0.5
    v6 = ndl.ops.tanh(v3)
    v7 = ndl.ops.broadcast_to(v3, (3, 0))
    return [v7, v3], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(v0 / -0.25)
        v2 = np.asarray(np.tanh(v1))
        v3 = np.asarray(v0 * v0)
        v4 = np.asarray(v1 / v2)
        v5 = np.asarray(v0 * 0.5)
        v6 = np.asarray(np.tanh(v3))
        v7 = np.asarray(np.broadcast_to(v3, (3, 0)))
    return [v0, v1, v2, v3, v4, v5, v6, v7]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (7, 0.0, False),
    (3, 0.0, False),
]


def test_regression_348c2576e3a1():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=True, together=True)
