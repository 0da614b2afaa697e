"""numpy implementations the fuzzer's numpy templates call (and saved regressions import)."""
import numpy as np

__all__ = ["np_mean", "np_logsumexp", "np_transpose", "np_dilate", "np_centered", "nd_centered"]

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


_NP_REDUCE = {"sum": lambda a, axes, k: np.sum(a, axis=axes, keepdims=k), "mean": np_mean,
              "max": lambda a, axes, k: np.max(a, axis=axes, keepdims=k)}


def np_centered(a, inner, outer, axes, keepdims):
    """outer(a - inner(a, axes, keepdims=True), axes): a column softmax's sum, a variance."""
    return _NP_REDUCE[outer](a - _NP_REDUCE[inner](a, axes, True), axes, keepdims)


def nd_centered(a, inner, outer, axes, keepdims):
    """The same in needle (the reduction broadcast back explicitly, as course code does)."""
    import needle as ndl
    ops = {"sum": ndl.ops.summation, "mean": ndl.ops.mean, "max": ndl.ops.max}
    m = ops[inner](a, axes=axes, keepdims=True)
    return ops[outer](a - ndl.ops.broadcast_to(m, a.shape), axes=axes, keepdims=keepdims)
