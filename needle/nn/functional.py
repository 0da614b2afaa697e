"""needle.nn.functional: PyTorch's functional forms (`torch.nn.functional`), each one
line over needle's ops, with torch's signatures and semantics — `linear` takes torch's
(out_features, in_features) weight, though `nn.Linear` stores the course's (in, out).
"""
from __future__ import annotations

import math

import numpy as np

from .. import init, ops
from ..autograd import Tensor, host_argument
from ..engine import capture
from ..errors import ArgumentError, IndexingError, ShapeError, fmt_shape

__all__ = ["relu", "gelu", "tanh", "sigmoid", "softmax", "log_softmax", "cross_entropy", "mse_loss", "dropout",
           "linear", "layer_norm"]

# erf(x) as Abramowitz and Stegun 7.1.26 (error below 1.5e-7, under float32's rounding of
# the GELU it feeds): built from ops, so it has gradients in every mode
_P, _A = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def relu(x: Tensor) -> Tensor:
    return ops.relu(x)


def tanh(x: Tensor) -> Tensor:
    return ops.tanh(x)


def sigmoid(x: Tensor) -> Tensor:
    return ops.sigmoid(x)


def erf(x: Tensor) -> Tensor:
    # |x| as x times its sign, a constant: its derivative at 0 is 1, where abs's is 0 (erf'(0)
    # and gelu''(0) came out 0)
    sign = (x >= 0) * 2.0 - 1.0
    a = x * sign
    t = 1.0 / (a * _P + 1.0)
    poly = t * (_A[0] + t * (_A[1] + t * (_A[2] + t * (_A[3] + t * _A[4]))))
    return (1.0 - poly * ops.exp(-(a * a))) * sign


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (torch's default), or its tanh approximation (`approximate="tanh"`)."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * ((ops.tanh(inner) + 1.0) * 0.5)  # (halved first: x * 2 overflows near the float max)
    if approximate != "none":
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return x * ((erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return ops.logsoftmax(x, dim)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return ops.exp(ops.logsoftmax(x, dim))


def cross_entropy(logits: Tensor, target, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy of (N, C) logits and N integer class labels."""
    if reduction == "mean":
        return softmax_loss("cross_entropy", logits, target)
    if reduction == "sum":
        return softmax_loss("cross_entropy", logits, target) * logits.shape[0]
    raise ArgumentError(f"cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    return squared_error("mse_loss", pred, target)


# ---- the losses' math, shared with nn.SoftmaxLoss / nn.MSELoss (errors name the caller) --------
def check_ndim(module: str, x: Tensor, ndim: int, what: str) -> None:
    """Raise a ShapeError naming the module when `x` is not `ndim`-dimensional."""
    if len(x.shape) != ndim:
        raise ShapeError(f"{module}: expects a {ndim}-d input {what}, got shape {fmt_shape(x.shape)}")


def softmax_loss(name: str, logits: Tensor, y) -> Tensor:
    """Mean over the batch of logsumexp(z) - z[y] (finite for logits of 1e10, exact to
    float32 rounding for a loss near 0), for (N, k) logits and N integer labels, checked."""
    check_ndim(name, logits, 2, "of logits (batch, classes)")
    n, k = logits.shape
    y_shape = tuple(y.shape) if hasattr(y, "shape") else (len(y),)
    if y_shape != (n,):
        raise ShapeError(f"{name}: labels have shape {fmt_shape(y_shape)} but the logits "
                         f"{fmt_shape(logits.shape)} need ({n},)")
    y = host_argument(y, name)  # (numpy labels of a captured step: an input of every replay)
    labels = checked_labels(name, y, k)
    if isinstance(y, Tensor):  # index with the tensor itself, so a captured step (needle.jit)
        labels = y             # reads each call's labels; kernels clamp what was not checked
    picked = ops.pick(logits, labels)  # logits[i, y_i]: a gather, no dense one-hot
    # (logsumexp(z) - z[y] not rounded to an ulp of the largest logit first: a loss near 0)
    return ops.logsumexp_less(logits, picked, (1,)).sum() / n


def checked_labels(module: str, y, classes: int):
    """Class labels (Tensor, array or list; ints or whole floats) as int64 on the host,
    checked: labels are data the caller already has, so reading them costs no sync.
    Labels still pending (computed on the device) are not read, and not checked."""
    if isinstance(y, Tensor):
        data = y._cached_data
        if getattr(data, "is_lazy", False) and data.realized is None:
            return None
        y = y.realize_cached_data()  # already computed: a look, not a computation
        capture.check(y, lambda values: checked_labels(module, values, classes))  # (at each replay too)
    values = np.asarray(y.numpy() if hasattr(y, "numpy") else y).reshape(-1)
    if values.size and values.dtype.kind == "f" and np.modf(values)[0].any():
        bad = values[values != np.floor(values)][0]
        raise ArgumentError(f"{module}: labels must be whole numbers, got {bad}")
    labels = values.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        bad = labels[(labels < 0) | (labels >= classes)][0]
        raise IndexingError(f"{module}: label {bad} is out of range for {classes} classes "
                            f"(labels span [{labels.min()}, {labels.max()}])")
    return labels


def squared_error(name: str, pred: Tensor, target: Tensor) -> Tensor:
    """Mean of (prediction - target)^2 over all elements."""
    if tuple(pred.shape) != tuple(target.shape):
        raise ShapeError(f"{name}: prediction {fmt_shape(pred.shape)} and target "
                         f"{fmt_shape(target.shape)} differ in shape")
    diff = pred - target
    return (diff * diff).sum() / max(math.prod(pred.shape), 1)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p (a mask drawn from numpy's global RNG, as
    nn.Dropout's) and scale the others by 1 / (1 - p); the identity unless training."""
    if not 0 <= p <= 1:
        raise ArgumentError(f"dropout: p must lie in [0, 1], got {p}")
    if not training:
        return x
    mask = init.randb(*x.shape, p=1 - p, dtype=x.dtype, device=x.device)
    return x * mask if p == 1 else x * mask / (1 - p)


def linear(x: Tensor, weight: Tensor, bias: Tensor = None) -> Tensor:
    """x @ weight.T + bias, with torch's (out_features, in_features) weight."""
    if len(weight.shape) != 2 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: input {fmt_shape(x.shape)} and weight {fmt_shape(weight.shape)} "
                         "(torch's layout: (out_features, in_features))")
    out = x @ weight.transpose()
    return out if bias is None else out + bias.broadcast_to(out.shape)


def layer_norm(x: Tensor, normalized_shape, weight: Tensor = None, bias: Tensor = None,
               eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the last len(normalized_shape) axes (biased
    variance), then * weight + bias."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[len(x.shape) - len(shape):]) != shape:
        raise ShapeError(f"layer_norm: normalized_shape {shape} is not the end of the input's shape "
                         f"{fmt_shape(x.shape)}")
    lead = tuple(x.shape[:len(x.shape) - len(shape)])
    flat = x.reshape(lead + (math.prod(shape),))
    out = ops.standardize(flat, len(lead), eps).reshape(x.shape)
    if weight is not None:
        out = out * weight.broadcast_to(x.shape)
    if bias is not None:
        out = out + bias.broadcast_to(x.shape)
    return out
