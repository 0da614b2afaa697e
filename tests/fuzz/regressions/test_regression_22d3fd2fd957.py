"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    logsumexp(x * 1.37) was inf for |x| ~ 1e10 (found by the fuzzer, reduced by hand): the fused exp
    stage contracted x*c - max(x*c) into an fma, so the largest element gave the unrounded residual
    of x*c instead of 0.  Fixed in needle/codegen/llvm.py (only products may contract, into
    reduction accumulations).
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([1257302272.0, -1321048576.0, 6404226560.0, 1049001152.0, -5356693504.0, 3615950592.0, 13040000000.0, 9470810112.0, -7037352448.0, -12654215168.0, -6232744448.0, 413259808.0, -23250307072.0, -2187916544.0], dtype=np.float32).reshape((2, 7)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float32', requires_grad=requires_grad)
    v1 = v0 * 1.3700000047683716
    v2 = ndl.ops.logsumexp(v1, axes=(1,))
    return [v2], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(v0 * 1.3700000047683716)
        v2 = np.asarray(np_logsumexp(v1, (1,)))
    return [v0, v1, v2]


#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    (2, [17037.20098882157, 21375.623083999846], False),
]


def test_regression_22d3fd2fd957():
    check_forward(inputs, needle_program, numpy_program, CHECKS, lazy=True, together=True)
