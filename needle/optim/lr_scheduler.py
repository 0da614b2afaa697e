"""Learning-rate schedulers with PyTorch's semantics (`torch.optim.lr_scheduler`).

A scheduler remembers the optimizer's learning rate at construction as `base_lr`
and immediately takes step 0 (so `last_epoch == 0` and the optimizer's `lr` is the
schedule's first value).  Each `step()` advances `last_epoch` by one and writes the
new rate into `optimizer.lr`.  Rates come from closed forms of `last_epoch`, which
agree with PyTorch's recursive forms whenever nobody else changes `optimizer.lr`.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, List, Optional

from ..engine import capture as _capture

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR"]


class LRScheduler:
    """Base class: subclasses give the rate at `self.last_epoch` in `get_lr()`."""

    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        self.base_lr: float = optimizer.lr
        self.base_lrs: List[float] = [self.base_lr]  # PyTorch keeps one per param group
        self.last_epoch = last_epoch
        self._last_lr: List[float] = [optimizer.lr]
        self.step()

    def get_lr(self) -> float:
        raise NotImplementedError()

    def step(self, epoch: Optional[int] = None) -> None:
        """Advance one epoch (or jump to `epoch`) and set `optimizer.lr`.  Called inside
        a step captured by needle.jit, each replay steps it again, at the same point."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        lr = float(self.get_lr())
        self.optimizer.lr = lr
        self._last_lr = [lr]
        _capture.on_replay(self.step if epoch is None else functools.partial(self.step, epoch), self.optimizer)

    def get_last_lr(self) -> List[float]:
        """The rate last set, as a list (one entry per parameter group, like PyTorch)."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (last_epoch // step_size)."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be a positive integer, got {step_size}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2.

    Past T_max the cosine keeps going (back up towards base_lr), as in PyTorch.
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        cosine = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return self.eta_min + (self.base_lr - self.eta_min) * cosine


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(last_epoch)."""

    def __init__(self, optimizer, lr_lambda: Callable[[int], float], last_epoch: int = -1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        return self.base_lr * self.lr_lambda(self.last_epoch)
