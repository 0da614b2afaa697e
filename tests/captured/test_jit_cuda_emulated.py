"""needle.jit on cuda(): the captured schedules replay on the CUDA runtime (a real GPU
when one is present, else the PyCUDA stand-in over the CPU emulator), and a jitted
training run equals the plain run bit for bit."""
import os
import sys

import numpy as np

import needle as ndl
from needle import nn, optim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))
from cuda_emulation.gpu import gpu, pytestmark  # noqa: E402,F401  (the fixture and its skip)
from tests.captured.test_jit import _training_step  # noqa: E402


def train(use_jit, steps=5):
    np.random.seed(0)
    device = ndl.cuda()
    model = nn.Sequential(nn.Linear(6, 8, device=device), nn.ReLU(), nn.Linear(8, 3, device=device))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fn = _training_step(model, opt, use_jit)
    rng = np.random.default_rng(3)
    losses = []
    for _ in range(steps):
        x = ndl.Tensor(rng.standard_normal((4, 6)).astype("float32"), device=device, requires_grad=False)
        y = ndl.Tensor(rng.integers(0, 3, 4).astype("float32"), device=device, requires_grad=False)
        losses.append(fn(x, y).numpy())
    return losses + [p.numpy() for p in model.parameters()], fn


def test_jitted_training_on_cuda_equals_the_plain_run(gpu):
    with ndl.lazy(True):
        plain, _ = train(False)
        jitted, fn = train(True)
    assert fn.replays == 3
    for a, b in zip(plain, jitted):
        assert np.array_equal(a, b)
