"""Fuzzer regression (gradient mode): a program on which needle and numpy disagreed.

It failed with:
    KeyError: 140536067385136
    (the gradient of max over a getitem: fusion made the reductions stages of the assemble that
    scatters the gradient, whose pieces are separate kernels, so they were never computed; fixed in
    needle/compiler/fusion.py)
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl  # noqa: F401
from tests.fuzz.numpy_helpers import *  # noqa: F401,F403
from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401


def inputs():
    return [
        np.array([0.2514604421867866], dtype=np.float64).reshape((1, 1)),
    ]


def needle_program(x, device, requires_grad=False):
    """The outputs (needle Tensors) and the inputs' tensors."""
    v0 = ndl.Tensor(x[0], device=device, dtype='float64', requires_grad=requires_grad)
    v1 = v0[:]
    v2 = ndl.ops.max(v1, axes=None, keepdims=False)
    return [v2], [v0]


def numpy_program(x):
    """Every variable, in float64 (numpy only)."""
    with np.errstate(all="ignore"):
        v0 = np.asarray(x[0], dtype=np.float64)
        v1 = np.asarray(v0[:])
        v2 = np.asarray(np.max(v1, axis=None, keepdims=False))
    return [v0, v1, v2]


def test_regression_bee330886fee():
    check_gradient(inputs, needle_program, numpy_program, out=2, step=1e-05)
