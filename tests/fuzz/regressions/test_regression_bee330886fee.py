"""Fuzzer regression (gradient mode): a program on which needle and numpy disagreed.

It failed with:
    KeyError: 140536067385136
    (the gradient of max over a getitem: fusion made the reductions stages of the assemble that
    scatters the gradient, whose pieces are separate kernels, so they were never computed; fixed in
    needle/compiler/fusion.py)
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
    x = inputs()
    want = numpy_program(x)
    w = np.random.default_rng(1234).uniform(0.5, 1.5, size=want[2].shape)
    with ndl.lazy(True):
        outs, tensors = needle_program(x, ndl.cpu(), requires_grad=True)
        outs[0].backward(ndl.Tensor(w, device=ndl.cpu(), dtype="float64", requires_grad=False))
        np.testing.assert_allclose(outs[0].numpy(), want[2], rtol=1e-7, atol=1e-9)
        for i, t in enumerate(tensors):
            expected = np.zeros(x[i].shape)
            for j in range(x[i].size):
                plus, minus = [y.copy() for y in x], [y.copy() for y in x]
                plus[i].flat[j] += 1e-05
                minus[i].flat[j] -= 1e-05
                expected.flat[j] = (np.sum(w * numpy_program(plus)[2]) -
                                    np.sum(w * numpy_program(minus)[2])) / (2 * 1e-05)
            got = t.grad.numpy() if t.grad is not None else np.zeros(x[i].shape)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"input {i}")
