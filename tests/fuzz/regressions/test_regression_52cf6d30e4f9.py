"""Fuzzer regression (lazy mode): a program on which needle and numpy disagreed.

It failed with:
    sigmoid(x) lost its relative precision for negative x (found by the fuzzer): computed as
    (tanh(x/2) + 1) / 2, which cancels, it gave 0.021296024 for 0.021296036 at x = -3.83 and 0 from
    x = -17 on, so log(sigmoid(-20)) was -inf.  Fixed in needle/ops/ops_mathematic.py (the exp(-|x|)
    form).
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
    x = inputs()
    want = numpy_program(x)
    with ndl.lazy(True):
        outs, _ = needle_program(x, ndl.cpu())
        ndl.realize(*outs)  # all outputs in one schedule
        got = [o.numpy() for o in outs]
    for g, (k, tol, skip) in zip(got, CHECKS):
        assert g.shape == want[k].shape and g.dtype == x[0].dtype, f"v{k}: {g.dtype}{g.shape}"
        g64, w = g.astype(np.float64), want[k]
        with np.errstate(invalid="ignore"):
            same = (np.isnan(g64) & np.isnan(w)) | (np.isinf(w) & (g64 == w)) | (np.abs(g64 - w) <= np.asarray(tol))
        ok = same | np.asarray(skip, dtype=bool)
        assert ok.all(), f"v{k}: got {g64[~ok]}, want {w[~ok]}"
