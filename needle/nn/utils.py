"""Training utilities with PyTorch's names and semantics (`torch.nn.utils`)."""
from __future__ import annotations

import math
from typing import Iterable, Union

from .. import ops
from ..autograd import Tensor
from ..errors import ArgumentError
from ..engine.realize import realize_later


def clip_grad_norm_(parameters: Union[Tensor, Iterable[Tensor]], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of `parameters` so that their global `norm_type` norm (all
    gradients seen as one vector) is at most `max_norm`; return that norm (before
    clipping) as a 0-d tensor.

    As PyTorch: every gradient is multiplied by min(1, max_norm / (norm + 1e-6)), so no
    value is read back to the host and, in lazy mode, the norm, the scaling and the
    optimizer step that follows are one schedule (reading the returned norm first
    computes the norm and the gradients together, also in one schedule)."""
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm >= 0:
        raise ArgumentError(f"clip_grad_norm_: max_norm must be a non-negative number, got {max_norm!r}")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ArgumentError(f"clip_grad_norm_: norm_type must be positive (or inf), got {norm_type!r}")
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad.data for p in params if getattr(p, "grad", None) is not None]
    if not grads:
        return Tensor(0.0, requires_grad=False)
    squares = [g * g for g in grads]  # |g|^p = (g^2)^(p/2), and max |g| = sqrt(max g^2)
    if math.isinf(norm_type):
        total = _stack_scalars([ops.max(s) for s in squares], ops.max) ** 0.5
    elif norm_type == 2.0:
        total = _stack_scalars([s.sum() for s in squares], ops.summation) ** 0.5
    else:
        total = _stack_scalars([(s ** (norm_type / 2)).sum() for s in squares], ops.summation) ** (1 / norm_type)
    if error_if_nonfinite and not math.isfinite(float(total.numpy())):
        raise ArgumentError(f"clip_grad_norm_: the total {norm_type} norm of the gradients is not finite")
    coef = (total + 1e-6) ** -1 * max_norm
    coef = coef - ops.relu(coef - 1.0)  # min(coef, 1): no host read, no branch
    for p in params:
        if getattr(p, "grad", None) is not None:
            p.grad = p.grad.data * coef.reshape((1,) * len(p.shape)).broadcast_to(p.shape)
            realize_later(p.grad)
    return total


def _stack_scalars(scalars, reduce) -> Tensor:
    """Reduce 0-d tensors to one (a flat stack, so the graph stays shallow)."""
    return reduce(ops.stack([s.reshape((1,)) for s in scalars], 0))
