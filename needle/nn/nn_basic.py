"""The basic layers of the course (hw2): Linear, activations, Sequential, losses,
normalization, Dropout, Residual.

Every forward is written with Tensor ops only, so the same code runs eagerly or
records a lazy graph; nothing here reads tensor data back into numpy.  The losses'
math lives in `functional` (softmax_loss, squared_error), as torch's modules call
theirs; class labels are checked on the host there.
"""
from __future__ import annotations

import numbers

import math
from typing import Any, Optional


from .. import array_api, init, ops
from ..array_api import fused
from ..autograd import Tensor
from ..errors import ArgumentError, IndexingError, ShapeError, fmt_shape
from . import functional as F
from .functional import check_ndim
from .nn_module import Module, Parameter


def check_features(module: str, x: Tensor, features: int) -> None:
    """Raise a ShapeError naming the module when the last axis of `x` is not `features`."""
    if not x.shape or x.shape[-1] != features:
        raise ShapeError(f"{module}: expects {features} features on the last axis, got shape {fmt_shape(x.shape)}")


def positive_int(module: str, what: str, value) -> int:
    """A size argument of a module: a positive integer, or an error naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ArgumentError(f"{module}: {what} must be a positive integer, got {value!r}")
    return int(value)


def as_row(t: Tensor, like: Tensor) -> Tensor:
    """A (dim,) or (1, dim) tensor broadcast along the leading axes of `like`: one
    broadcast_to, which adds leading axes as numpy's does (a reshape first was one more
    op to build, and to differentiate, in every layer of every lazy step)."""
    return t if t.shape == like.shape else t.broadcast_to(like.shape)


def nchw_to_nhwc(x: Tensor) -> Tensor:
    """The course's two transposes, as one permute: one op less to build and to
    differentiate per layer and step."""
    return ops.permute(x, (0, 2, 3, 1))


def nhwc_to_nchw(x: Tensor) -> Tensor:
    return ops.permute(x, (0, 3, 1, 2))


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Linear(Module):
    """y = x @ W + b.  W is drawn before b, as in the course, so a seeded numpy RNG
    reproduces the course's values."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.in_features = positive_int("Linear", "in_features", in_features)
        self.out_features = positive_int("Linear", "out_features", out_features)
        self.weight = Parameter(init.kaiming_uniform(in_features, out_features, device=device, dtype=dtype,
                                                     requires_grad=True))
        self.bias = None
        if bias:
            b = init.kaiming_uniform(out_features, 1, device=device, dtype=dtype, requires_grad=True)
            self.bias = Parameter(b.reshape((1, out_features)))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    def forward(self, X: Tensor) -> Tensor:
        check_features("Linear", X, self.in_features)
        if self.bias is not None and len(X.shape) == 2:
            return ops.matmul_bias(X, self.weight, self.bias)  # (one op: a lazy step builds every op again)
        y = X @ self.weight
        if self.bias is not None:
            y = y + as_row(self.bias, y)
        return y


class Flatten(Module):
    """(N, d1, d2, ...) -> (N, d1 * d2 * ...)."""

    def forward(self, X: Tensor) -> Tensor:
        if not X.shape:
            raise ShapeError("Flatten: expects at least a 1-d input, got a 0-d tensor")
        return X.reshape((X.shape[0], math.prod(X.shape[1:])))


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class GELU(Module):
    """x * Phi(x), torch's default (or its tanh approximation: approximate="tanh")."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class Softmax(Module):
    """exp(logsoftmax(x)) along `dim`: stable for any logits."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"

    def forward(self, x: Tensor) -> Tensor:
        return ops.exp(ops.logsoftmax(x, self.dim))


class Sequential(Module):
    """Modules applied in order; indexes (a slice gives a Sequential), iterates and has
    len() like PyTorch's.  The course keeps them in `self.modules`."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        self.modules = modules

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(*self.modules[index])
        try:
            return self.modules[index]
        except (IndexError, TypeError):
            raise IndexingError(f"Sequential: index {index!r} out of range for {len(self.modules)} modules") from None

    def __iter__(self):
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def _repr_children(self):
        return [(str(i), m) for i, m in enumerate(self.modules)]

    def forward(self, x: Tensor) -> Tensor:
        for module in self.modules:
            x = module(x)
        return x


class Residual(Module):
    """fn(x) + x."""

    def __init__(self, fn: Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x) + x


# ---- losses -------------------------------------------------------------------------------
class SoftmaxLoss(Module):
    """Mean over the batch of logsumexp(z) - z[y]: softmax cross-entropy on logits
    (N, k) and integer labels y (N,).  logsumexp keeps it finite for logits of 1e10."""

    def forward(self, logits: Tensor, y: Any) -> Tensor:
        return F.softmax_loss(type(self).__name__, logits, y)


class CrossEntropyLoss(SoftmaxLoss):
    """PyTorch's name for SoftmaxLoss (mean reduction, integer class labels)."""


class MSELoss(Module):
    """Mean of (prediction - target)^2 over all elements."""

    def forward(self, pred: Tensor, target: Tensor) -> Tensor:
        return F.squared_error("MSELoss", pred, target)


# ---- normalization ------------------------------------------------------------------------
class BatchNorm1d(Module):
    """Normalize each feature over the batch: y = w * (x - mean) / sqrt(var + eps) + b.

    Training uses the batch mean and biased variance and folds them into the running
    statistics `(1 - momentum) * running + momentum * observed` (course semantics: the
    biased variance there too); eval uses the running statistics.  The running
    statistics are buffers, updated from detached tensors so they never join the graph.
    """

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1,
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.momentum = momentum
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype, requires_grad=True))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype, requires_grad=True))
        self.register_buffer("running_mean", init.zeros(dim, device=device, dtype=dtype))
        self.register_buffer("running_var", init.ones(dim, device=device, dtype=dtype))

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, momentum={self.momentum}"

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        check_ndim(name, x, 2, "(batch, features)")
        check_features(name, x, self.dim)
        if self.training:
            standardize = ops.Standardize(0, self.eps)
            normed = standardize(x)
            self._update_running(standardize.mean, standardize.var)
        else:
            centered = ops.subtract(x, as_row(self.running_mean, x))
            normed = centered / as_row((self.running_var + self.eps) ** 0.5, x)
        return ops.scale_shift(normed, self.weight, self.bias)

    def _update_running(self, mean, var) -> None:
        """running = (1 - momentum) * running + momentum * observed for both statistics
        (arrays of the batch's), on the data: they need no gradient, so no autograd ops.
        Given to the buffers as their new `.data` (in place, as torch), computed with the
        next schedule; in eager mode both at once, as one schedule (array_api.fused)."""
        m = self.momentum

        def running(old_mean, old_var, mean, var):
            return (old_mean * (1 - m) + array_api.reshape(mean, old_mean.shape) * m,
                    old_var * (1 - m) + array_api.reshape(var, old_var.shape) * m)
        arrays = (self.running_mean._compute_input(), self.running_var._compute_input(), mean, var)
        new_mean, new_var = fused(("running statistics", repr(m)), running, arrays)
        self.running_mean.data = Tensor.make_const(new_mean)
        self.running_var.data = Tensor.make_const(new_var)


class BatchNorm2d(BatchNorm1d):
    """BatchNorm over the channels of NCHW input: statistics over (N, H, W) per channel.
    As in the course, channels are moved last and the rest flattened into the batch."""

    def forward(self, x: Tensor) -> Tensor:
        check_ndim("BatchNorm2d", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        if c != self.dim:
            raise ShapeError(f"BatchNorm2d: expects {self.dim} channels on axis 1, got shape {fmt_shape(x.shape)}")
        y = super().forward(nchw_to_nhwc(x).reshape((n * h * w, c))).reshape((n, h, w, c))
        return nhwc_to_nchw(y)


class LayerNorm1d(Module):
    """Normalize over the last axis of each sample: w * (x - mean) / sqrt(var + eps) + b
    with the biased variance; any number of leading axes."""

    def __init__(self, dim: int, eps: float = 1e-5, device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype, requires_grad=True))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype, requires_grad=True))

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        check_features("LayerNorm1d", x, self.dim)
        normed = ops.standardize(x, len(x.shape) - 1, self.eps)
        return ops.scale_shift(normed, self.weight, self.bias)


class LayerNorm(Module):
    """PyTorch's LayerNorm: normalize over the last len(normalized_shape) axes (biased
    variance), then an elementwise weight (ones) and bias (zeros); draws nothing."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = Parameter(init.ones(*self.normalized_shape, device=device, dtype=dtype,
                                          requires_grad=True)) if elementwise_affine else None
        self.bias = Parameter(init.zeros(*self.normalized_shape, device=device, dtype=dtype,
                                         requires_grad=True)) if elementwise_affine else None

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Dropout(Module):
    """Zero each element with probability p while training and scale the survivors by
    1 / (1 - p), so expectations match eval mode, where this is the identity."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ArgumentError(f"Dropout: p must lie in [0, 1], got {p}")
        self.p = p

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return x
        # drawn even for p == 0, so the RNG stream matches the course's
        mask = init.randb(*x.shape, p=1 - self.p, dtype=x.dtype, device=x.device)
        if self.p == 1:
            return x * mask  # every element dropped (no division by zero)
        return x * mask / (1 - self.p)


def optional_bias(bias: Optional[Tensor], out: Tensor) -> Tensor:
    """out + bias broadcast along the last axis, or out when there is no bias."""
    return out if bias is None else out + as_row(bias, out)
