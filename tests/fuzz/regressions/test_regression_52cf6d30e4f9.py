"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    sigmoid(x) lost its relative precision for negative x (found by the fuzzer): computed as
    (tanh(x/2) + 1) / 2, which cancels, it gave 0.021296024 for 0.021296036 at x = -3.83 and 0 from
    x = -17 on, so log(sigmoid(-20)) was -inf.  Fixed in needle/ops/ops_mathematic.py (the exp(-|x|)
    form).
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([-2.957048177719116, -0.6571551561355591, -3.8277082443237305, -20.0, -90.0], dtype=np.float32).reshape((5,)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = ndl.ops.sigmoid(v0)
    v2 = ndl.ops.log(ndl.ops.relu(v1) + ndl.ops.relu(-v1) + 0.0009765625)
    return [v1, v2], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(1.0 / (1.0 + np.exp(-v0)))
        v2 = np.asarray(np.log(np.abs(v1) + 0.0009765625))
    return [v0, v1, v2]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (1, [2.35578776321217e-08, 1.627821710100012e-07, 1.0154741428963983e-08, 9.828346339179057e-16, 3.000000000390721e-36], False),
    (2, [2.3692882509079527e-06, 1.4634386596325396e-06, 2.7468454414979483e-06, 3.7820204761491897e-06, 3.782020476150252e-06], False),
]


def test_regression_52cf6d30e4f9():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=True, together=True)
