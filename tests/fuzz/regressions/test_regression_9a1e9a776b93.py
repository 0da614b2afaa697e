"""Fuzzer regression (eager mode): a program on which needle and numpy disagreed.

It failed with:
    ValueError: strides is incompatible with shape of requested array and size of buffer
    (eager concatenate of (0, 2, 2) arrays: NDArray.__getitem__ moved the offset of an empty view past
    its buffer; fixed in needle/backend_ndarray/ndarray.py)
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([], dtype=np.float32).reshape((0, 2, 2)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = v0 ** 2
    v2 = ndl.ops.concatenate([v1, v1], axis=1)
    return [v2], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(v0 ** 2)
        v2 = np.asarray(np.concatenate([v1, v1], axis=1))
    return [v0, v1, v2]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (2, 0.0, False),
]


def test_regression_9a1e9a776b93():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=False, together=False)
