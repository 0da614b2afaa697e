"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    A batched x @ x gave inf where IEEE arithmetic gives nan (found by the fuzzer): (-0 * -inf) +
    (-inf * -1e30) was factored into -inf * (-0 + -1e30), because the reduction's fadd carried
    reassoc and nsz.  Fixed in needle/codegen/llvm.py (sums carry reassoc and contract only).
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([-0.0, -inf, 9.99994610111476e-41, -1.0000000150474662e+30, 1.0, 2.0, 3.0, -4.0, 0.0, 0.0, 0.0, 0.0], dtype=np.float32).reshape((3, 2, 2)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = v0 @ v0
    return [v1], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(np.matmul(v0, v0))
    return [v0, v1]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (1, [[[1e-36, 1e-36], [9.53669190558301e-17, 1e-36]], [[6.67572021484375e-06, 9.5367431640625e-06], [1.430511474609375e-05, 2.09808349609375e-05]], [[2.9999999999999998e-36, 2.9999999999999998e-36], [2.9999999999999998e-36, 2.9999999999999998e-36]]], [[[True, False], [False, True]], [[False, False], [False, False]], [[False, False], [False, False]]]),
]


def test_regression_4f55c17fda9f():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=True, together=True)
