"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    REPORTED, not fixed (needle/autograd.py): c / x for a Python scalar c is computed as c * x**-1,
    so for |x| < 1/FLT_MAX (float32 denormals) 1/x overflows: 0.0 / 1e-40 gives nan instead of 0,
    1e-10 / 1e-40 gives inf instead of 1e30 (found by the fuzzer).  The fuzzer's oracle skips these
    positions until the fix.
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([9.99994610111476e-41, -9.99994610111476e-41, 2.0, -1.0000000150474662e+30], dtype=np.float32).reshape((4,)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = 0.0 / v0
    v2 = 1e-10 / v0
    return [v1, v2], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(0.0 / v0)
        v2 = np.asarray(1e-10 / v0)
    return [v0, v1, v2]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (1, 2.9999999999999998e-36, False),
    (2, [4.7683972831610445e+23, 4.7683972831610445e+23, 2.384185791015625e-17, 3.0000000000476836e-36], False),
]


import pytest  # noqa: E402


def test_regression_26d375fe11e7():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=True, together=True)
