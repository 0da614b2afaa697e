"""numpy implementations the fuzzer's numpy templates call (and saved regressions import)."""
import numpy as np

__all__ = ["np_mean", "np_logsumexp", "np_transpose", "np_dilate"]

def np_mean(a, axes, keepdims):
    axes_t = tuple(range(a.ndim)) if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
    count = int(np.prod([a.shape[ax] for ax in axes_t]))
    total = np.sum(a, axis=axes, keepdims=keepdims)
    return total * np.nan if count == 0 else total / count  # (the mean of nothing is nan, as numpy's)


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
