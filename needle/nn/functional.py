"""needle.nn.functional: PyTorch's functional forms (`torch.nn.functional`), each one
line over needle's ops, with torch's signatures and semantics — `linear` takes torch's
(out_features, in_features) weight, though `nn.Linear` stores the course's (in, out).
"""
from __future__ import annotations

import math

from .. import init, ops
from ..autograd import Tensor
from ..errors import ArgumentError, ShapeError, fmt_shape

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
    a = x.abs()
    t = 1.0 / (a * _P + 1.0)
    poly = t * (_A[0] + t * (_A[1] + t * (_A[2] + t * (_A[3] + t * _A[4]))))
    magnitude = 1.0 - poly * ops.exp(-(a * a))
    return ops.where(x >= 0, magnitude, -magnitude)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (torch's default), or its tanh approximation (`approximate="tanh"`)."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * (ops.tanh(inner) + 1.0) * 0.5
    if approximate != "none":
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return x * (erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return ops.logsoftmax(x, dim)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return ops.exp(ops.logsoftmax(x, dim))


def cross_entropy(logits: Tensor, target, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy of (N, C) logits and N integer class labels."""
    from .nn_basic import SoftmaxLoss
    if reduction == "mean":
        return SoftmaxLoss()(logits, target)
    if reduction == "sum":
        return SoftmaxLoss()(logits, target) * logits.shape[0]
    raise ArgumentError(f"cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    from .nn_basic import MSELoss
    return MSELoss()(pred, target)


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
