"""Fuzzer regression (eager mode): a program on which needle and numpy disagreed.

It failed with:
    AssertionError: needle differs from numpy:
      v2: 1 of 4 values differ: (0, 0): got np.float32(inf) want np.float64(nan) (bound 0)
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([inf, 1.0, 0.0, -2.0], dtype=np.float32).reshape((2, 2)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = -v0
    v2 = v1 ** 0.5
    return [v2], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(-v0)
        v2 = np.asarray(v1 ** 0.5)
    return [v0, v1, v2]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (2, [[1e-36, 1e-36], [2.9999999999999998e-36, 6.743495761743046e-07]], False),
]


def test_regression_152918e8e0b5():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=False, together=False)
