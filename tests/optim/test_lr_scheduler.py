"""Schedulers against values derived by hand from PyTorch's documented formulas."""
import math

import numpy as np
import pytest

import needle as ndl
from needle.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, StepLR


def make_opt(lr=1.0):
    return ndl.optim.SGD([ndl.Tensor(np.zeros(2, dtype=np.float32))], lr=lr)


def collect(opt, sched, n):
    """lr in effect for epochs 0..n-1 (PyTorch loop: train with lr, then sched.step())."""
    lrs = []
    for _ in range(n):
        lrs.append(opt.lr)
        assert sched.get_last_lr() == [opt.lr]
        sched.step()
    return lrs


def test_step_lr():
    opt = make_opt(1.0)
    sched = StepLR(opt, step_size=2, gamma=0.5)
    assert sched.last_epoch == 0
    np.testing.assert_allclose(collect(opt, sched, 7), [1, 1, 0.5, 0.5, 0.25, 0.25, 0.125])
    assert sched.last_epoch == 7


def test_step_lr_default_gamma():
    opt = make_opt(0.1)
    sched = StepLR(opt, step_size=3)
    np.testing.assert_allclose(collect(opt, sched, 4), [0.1, 0.1, 0.1, 0.01])


def test_cosine_annealing():
    opt = make_opt(1.0)
    sched = CosineAnnealingLR(opt, T_max=4)
    c = math.sqrt(2) / 4  # (1 + cos(pi/4)) / 2 = 0.5 + sqrt(2)/4
    expected = [1.0, 0.5 + c, 0.5, 0.5 - c, 0.0, 0.5 - c, 0.5]
    np.testing.assert_allclose(collect(opt, sched, 7), expected, atol=1e-12)


def test_cosine_annealing_eta_min():
    opt = make_opt(0.3)
    sched = CosineAnnealingLR(opt, T_max=2, eta_min=0.1)
    np.testing.assert_allclose(collect(opt, sched, 3), [0.3, 0.2, 0.1], atol=1e-12)


def test_lambda_lr():
    opt = make_opt(2.0)
    sched = LambdaLR(opt, lambda epoch: 1.0 / (epoch + 1))
    np.testing.assert_allclose(collect(opt, sched, 4), [2.0, 1.0, 2.0 / 3, 0.5])


def test_scheduled_lr_drives_the_update():
    p = ndl.Tensor(np.zeros(1, dtype=np.float32))
    opt = ndl.optim.SGD([p], lr=1.0)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        p.grad = ndl.Tensor(np.ones(1, dtype=np.float32), requires_grad=False)
        opt.step()
        sched.step()
    np.testing.assert_allclose(p.numpy(), [-1.75])  # -(1 + 0.5 + 0.25)


def test_bad_arguments():
    with pytest.raises(ValueError):
        StepLR(make_opt(), step_size=0)
    with pytest.raises(ValueError):
        CosineAnnealingLR(make_opt(), T_max=0)
