"""Fuzzer regression (eager mode): a program on which needle and numpy disagreed.

It failed with:
    AssertionError: needle differs from numpy:
      v2: 1 of 4 values differ: (0, 0): got np.float32(inf) want np.float64(nan) (bound 0)
"""
import numpy as np
from numpy import inf, nan  # noqa: F401

import needle as ndl
from needle import config  # noqa: F401


def np_mean(a, axes, keepdims):
    axes_t = tuple(range(a.ndim)) if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
    count = int(np.prod([a.shape[ax] for ax in axes_t]))
    return np.sum(a, axis=axes, keepdims=keepdims) / max(count, 1)


def np_logsumexp(a, axes):
    axes_t = tuple(range(a.ndim)) if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
    if not axes_t:
        return a
    m = np.max(a, axis=axes_t, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.squeeze(np.log(np.sum(np.exp(a - m), axis=axes_t, keepdims=True)) + m, axis=axes_t)


def np_transpose(a, axes):
    return np.swapaxes(a, -1, -2) if axes is None else np.swapaxes(a, axes[0], axes[1])


def np_dilate(a, axes, dilation):
    axes = tuple(ax % a.ndim for ax in ((axes,) if isinstance(axes, int) else axes))
    shape = tuple(n * (dilation + 1) if i in axes else n for i, n in enumerate(a.shape))
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(None, None, dilation + 1) if i in axes else slice(None) for i in range(a.ndim))] = a
    return out


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
    x = inputs()
    want = numpy_program(x)
    with ndl.lazy(False):
        outs, _ = needle_program(x, ndl.cpu())
        got = [o.numpy() for o in outs]
    for g, (k, tol, skip) in zip(got, CHECKS):
        assert g.shape == want[k].shape and g.dtype == x[0].dtype, f"v{k}: {g.dtype}{g.shape}"
        g64, w = g.astype(np.float64), want[k]
        with np.errstate(invalid="ignore"):
            same = (np.isnan(g64) & np.isnan(w)) | (np.isinf(w) & (g64 == w)) | (np.abs(g64 - w) <= np.asarray(tol))
        ok = same | np.asarray(skip, dtype=bool)
        assert ok.all(), f"v{k}: got {g64[~ok]}, want {w[~ok]}"
