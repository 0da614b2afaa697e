"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    AssertionError: needle differs from numpy:
      v1: 1 of 1 values differ: (): got np.float32(nan) want np.float64(0.0) (bound 4e-36)
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([], dtype=np.float32).reshape((2, 0)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = ndl.ops.mean(v0, axes=None, keepdims=False)
    return [v1], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(np_mean(v0, None, False))
    return [v0, v1]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (1, 4.9999999999999994e-36, False),
]


def test_regression_c03b1c502ffc():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=True, together=False)
