"""The update rules: SGD with the course's momentum, Adam (and AdamW's decoupled
weight decay) and RMSprop, each as array arithmetic on a parameter's data."""
from __future__ import annotations

from typing import Dict, Iterable, List

from ..array_api import sqrt
from ..autograd import Tensor
from ..engine import capture as _capture
from .optimizer import Optimizer, data_of, keep, number, with_weight_decay


class SGD(Optimizer):
    """Stochastic gradient descent with the course's momentum rule:

        u = momentum * u_prev + (1 - momentum) * grad     (u_prev = 0 at first)
        p = p - lr * u

    Note the (1 - momentum) damping: this is an exponential moving average of
    gradients, not PyTorch's `u = momentum * u + grad`.
    """

    _state_names = ("u",)
    _hyper_names = ("lr", "momentum", "weight_decay")

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum = number("SGD", "momentum", momentum, 0.0, 1.0)
        self.weight_decay = number("SGD", "weight_decay", weight_decay, 0.0)
        self.u: Dict[int, Tensor] = {}

    def _scalars(self) -> tuple:
        live = self._live
        return live(lambda: self.momentum), live(lambda: 1 - self.momentum), live(lambda: self.lr)

    def _update(self, index: int, param, grad):
        momentum, rest, lr = self._once_per_step(self._scalars)
        grad = with_weight_decay(grad, param, self)
        if self.momentum:
            u = grad * rest
            if index in self.u:
                u = data_of(self.u[index]) * momentum + u
            keep(self.u, index, u)
        else:
            u = grad
        return param - u * lr

    def state_tensors(self) -> List[Tensor]:
        return list(self.u.values())


class Adam(Optimizer):
    """Adam with bias correction, the course's update (t counts steps, not parameters):

        m = beta1 m + (1 - beta1) grad ;  v = beta2 v + (1 - beta2) grad^2
        p = p - lr * m_hat / (sqrt(v_hat) + eps),  m_hat = m / (1 - beta1^t), v_hat likewise

    computed as PyTorch's fused Adam does, with the corrections folded into two
    scalars: p - lr_t * m / (sqrt(v) + eps_t), lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t),
    eps_t = eps sqrt(1 - beta2^t) (the same value; two ops per parameter fewer).
    """

    _state_names = ("m", "v")
    _hyper_names = ("lr", "betas", "eps", "weight_decay")

    def _scalar_state(self) -> dict:
        return {"step": self.t}

    def _load_scalar_state(self, entries: list) -> None:
        self.t = max([int(e.get("step", 0)) for e in entries], default=0)

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0, betas=None):
        super().__init__(params, lr)
        if betas is not None:  # (PyTorch's spelling)
            beta1, beta2 = betas
        self.beta1 = number("Adam", "beta1", beta1, 0.0, 1.0)
        self.beta2 = number("Adam", "beta2", beta2, 0.0, 1.0)
        self.eps = number("Adam", "eps", eps, 0.0)
        self.weight_decay = number("Adam", "weight_decay", weight_decay, 0.0)
        self.t = 0
        self.m: Dict[int, Tensor] = {}
        self.v: Dict[int, Tensor] = {}

    def _begin_step(self) -> None:
        self.t += 1
        _capture.on_replay(self._begin_step)  # a replay of a captured step counts it too

    def _decayed(self, grad, param):
        return with_weight_decay(grad, param, self)

    def _scalars(self) -> tuple:
        live = self._live  # (beta < 1, so no correction is 0)
        return (live(lambda: self.beta1), live(lambda: 1 - self.beta1), live(lambda: self.beta2),
                live(lambda: 1 - self.beta2),
                live(lambda: self.lr * (1 - self.beta2 ** self.t) ** 0.5 / (1 - self.beta1 ** self.t)),
                live(lambda: self.eps * (1 - self.beta2 ** self.t) ** 0.5))

    def _update(self, index: int, param, grad):
        beta1, rest1, beta2, rest2, lr_t, eps_t = self._once_per_step(self._scalars)
        grad = self._decayed(grad, param)
        m = grad * rest1
        v = (grad * grad) * rest2
        if index in self.m:
            m = data_of(self.m[index]) * beta1 + m
            v = data_of(self.v[index]) * beta2 + v
        keep(self.m, index, m)
        keep(self.v, index, v)
        return param - m / (sqrt(v) + eps_t) * lr_t

    def state_tensors(self) -> List[Tensor]:
        return list(self.m.values()) + list(self.v.values())


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW): each
    step first shrinks the parameter, p = p - lr * weight_decay * p, then takes Adam's
    step on the gradient alone.  PyTorch's defaults: lr 1e-3, weight_decay 1e-2."""

    def __init__(self, params: Iterable[Tensor], lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01, betas=None):
        super().__init__(params, lr, beta1, beta2, eps, weight_decay, betas)

    def _update(self, index: int, param, grad):
        if self.weight_decay:
            param = param * self._live(lambda: 1 - self.lr * self.weight_decay)
        return super()._update(index, param, grad)

    def _decayed(self, grad, param):
        return grad  # (the decay is applied to the parameter, not through the gradient)


class RMSprop(Optimizer):
    """RMSprop with PyTorch's semantics (`torch.optim.RMSprop`):

        square_avg = alpha * square_avg + (1 - alpha) * grad^2      (starts at 0)
        avg = sqrt(square_avg) + eps      (centered: sqrt(square_avg - grad_avg^2) + eps)
        p = p - lr * grad / avg           (momentum: buf = momentum buf + grad / avg; p -= lr buf)
    """

    _state_names = ("square_avg", "grad_avg", "buf")
    _hyper_names = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 centered: bool = False):
        super().__init__(params, lr)
        self.alpha = number("RMSprop", "alpha", alpha, 0.0, 1.0 + 1e-12)
        self.eps = number("RMSprop", "eps", eps, 0.0)
        self.weight_decay = number("RMSprop", "weight_decay", weight_decay, 0.0)
        self.momentum = number("RMSprop", "momentum", momentum, 0.0)
        self.centered = centered
        self.square_avg: Dict[int, Tensor] = {}
        self.grad_avg: Dict[int, Tensor] = {}
        self.buf: Dict[int, Tensor] = {}

    def _scalars(self) -> tuple:
        live = self._live
        return (live(lambda: self.alpha), live(lambda: 1 - self.alpha), live(lambda: self.eps),
                live(lambda: self.momentum), live(lambda: self.lr))

    def _update(self, index: int, param, grad):
        alpha, rest, eps, momentum, lr = self._once_per_step(self._scalars)
        grad = with_weight_decay(grad, param, self)
        square_avg = (grad * grad) * rest
        if index in self.square_avg:
            square_avg = data_of(self.square_avg[index]) * alpha + square_avg
        keep(self.square_avg, index, square_avg)
        if self.centered:
            grad_avg = grad * rest
            if index in self.grad_avg:
                grad_avg = data_of(self.grad_avg[index]) * alpha + grad_avg
            keep(self.grad_avg, index, grad_avg)
            avg = sqrt(square_avg - grad_avg * grad_avg) + eps
        else:
            avg = sqrt(square_avg) + eps
        step = grad / avg
        if self.momentum:
            if index in self.buf:
                step = data_of(self.buf[index]) * momentum + step
            keep(self.buf, index, step)
        return param - step * lr

    def state_tensors(self) -> List[Tensor]:
        return (list(self.square_avg.values()) + list(self.grad_avg.values())
                + list(self.buf.values()))
