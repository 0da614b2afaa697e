import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle import engine


class MLPStep:
    """An MLP with BatchNorm, its data and its SGD step; `forward(model, x)` is written in
    the test, so that the kernels' source lines point into the test's own file."""

    def __init__(self, forward, features=20, hidden=32, classes=5, batch=16):
        engine.forget_later()  # (what other tests left for "the next schedule" is not this step's)
        self.model = nn.Sequential(nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                   nn.Linear(hidden, classes))
        self.opt = ndl.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.forward = forward
        rng = np.random.default_rng(0)
        self.x = ndl.Tensor(rng.standard_normal((batch, features)).astype(np.float32), requires_grad=False)
        self.y = ndl.Tensor(rng.integers(0, classes, batch).astype(np.float32), requires_grad=False)

    def __call__(self, x, y):
        self.opt.reset_grad()
        loss = nn.SoftmaxLoss()(self.forward(self.model, x), y)
        loss.backward()
        self.opt.step()
        return loss


@pytest.fixture
def mlp_step():
    return MLPStep
