"""Fuzzer regression (eager mode): a program on which needle and numpy disagreed.

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
        np.array([0.0, 1.0000000150474662e+30, 1.0, 1.0000000150474662e+30, 0.0, 1.0000000150474662e+30, 0.0, -1.0, 0.0], dtype=np.float32).reshape((3, 3)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = v0 / 1.0
    return [v1], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(v0 / 1.0)
    return [v0, v1]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (1, [[2.9999999999999998e-36, 4.76837165378316e+23, 4.76837158203125e-07], [4.76837165378316e+23, 2.9999999999999998e-36, 4.76837165378316e+23], [2.9999999999999998e-36, 4.76837158203125e-07, 2.9999999999999998e-36]], False),
]


def test_regression_48fd78d1545e():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=False, together=True)
