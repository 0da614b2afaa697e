"""Fuzzer regression (eager mode): a program on which needle and numpy disagreed.

It failed with:
    Eager flip of a (0, 2) array raised numpy's ValueError 'strides is incompatible with shape of
    requested array and size of buffer' (found by the fuzzer): NDArray.flip moved the offset of an
    empty array past its buffer.  Fixed in needle/backend_ndarray/ndarray.py.
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([], dtype=np.float32).reshape((0, 2)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = ndl.ops.flip(v0, None)
    return [v1], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(np.flip(v0, None))
    return [v0, v1]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (1, 0.0, False),
]


def test_regression_facdc479ef1e():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=False, together=True)
