"""The built-in workloads of `compare`, `ir` and the benchmarks.

A workload builds its inputs from a seeded numpy RNG (so every mode sees the same
numbers) and `step()` issues one iteration with needle ops, returning the tensors
it produced.  The caller decides the device and whether ops run eagerly or
lazily; `needle.realize` then computes whatever is pending.
"""
from __future__ import annotations

import numpy as np

from .. import nn, ops, optim
from ..autograd import Tensor


class Workload:
    name = ""
    description = ""

    def __init__(self, device, quick: bool = False, seed: int = 0):
        self.device = device
        self.rng = np.random.default_rng(seed)
        self.quick = quick
        self.setup()

    def tensor(self, *shape, scale: float = 1.0) -> Tensor:
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return Tensor(data, device=self.device, requires_grad=False)

    def setup(self) -> None:
        raise NotImplementedError

    def step(self) -> list:
        raise NotImplementedError

    def flops(self) -> float:
        return 0.0


class Elementwise(Workload):
    name = "elementwise"
    description = "relu(a*b + c)*0.5 + exp(-a)"

    def setup(self):
        n = 1 << (18 if self.quick else 22)
        self.size = n
        self.a, self.b, self.c = (self.tensor(n) for _ in range(3))

    def step(self):
        a, b, c = self.a, self.b, self.c
        return [ops.relu(a * b + c) * 0.5 + ops.exp(-a)]


class Softmax(Workload):
    name = "softmax"
    description = "row softmax"

    def setup(self):
        rows, cols = (1024, 512) if self.quick else (4096, 1024)
        self.x = self.tensor(rows, cols, scale=3.0)

    def step(self):
        x = self.x
        shifted = x - ops.broadcast_to(x.max((1,), keepdims=True), x.shape)
        e = ops.exp(shifted)
        return [e / ops.broadcast_to(e.sum((1,), keepdims=True), x.shape)]


class LayerNorm(Workload):
    name = "layernorm"
    description = "layer norm over the last axis"

    def setup(self):
        rows, cols = (1024, 512) if self.quick else (4096, 1024)
        self.x = self.tensor(rows, cols)
        self.norm = nn.LayerNorm1d(cols, device=self.device)

    def step(self):
        return [self.norm(self.x)]


class MatmulBiasRelu(Workload):
    name = "matmul_bias_relu"
    description = "relu(x @ W + b)"

    def setup(self):
        n = 256 if self.quick else 1024
        self.n = n
        self.x, self.w = self.tensor(n, n), self.tensor(n, n, scale=n ** -0.5)
        self.b = self.tensor(1, n)

    def step(self):
        return [ops.relu(self.x @ self.w + ops.broadcast_to(self.b, (self.n, self.n)))]

    def flops(self):
        return 2.0 * self.n ** 3


class _TrainStep(Workload):
    """One SGD step of a classifier: forward, softmax loss, backward, update."""

    captured = True  # compare also runs it under needle.jit

    def build_model(self):
        raise NotImplementedError

    def setup(self):
        state = np.random.get_state()
        np.random.seed(int(self.rng.integers(1 << 30)))  # weights from needle.init, reproducibly
        try:
            self.model = self.build_model()
        finally:
            np.random.set_state(state)
        self.opt = optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.loss_fn = nn.SoftmaxLoss()
        self.y = Tensor(self.rng.integers(0, 10, size=self.batch).astype(np.float32), device=self.device,
                        requires_grad=False)

    def step(self):
        self.opt.reset_grad()
        loss = self.loss_fn(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return [loss] + list(self.model.parameters())


class MLPStep(_TrainStep):
    name = "mlp_step"
    description = "MLP 784-256-10 training step (SGD, batch 128)"
    batch = 128

    def build_model(self):
        self.x = self.tensor(self.batch, 784)
        return nn.Sequential(nn.Linear(784, 256, device=self.device), nn.ReLU(),
                             nn.Linear(256, 10, device=self.device))

    def flops(self):
        return 3 * 2.0 * self.batch * (784 * 256 + 256 * 10)


class CNNStep(_TrainStep):
    name = "cnn_step"
    description = "small CNN training step (2 conv + pool + linear, batch 32)"
    batch = 32

    def build_model(self):
        self.x = self.tensor(self.batch, 1, 28, 28)
        d = self.device
        return nn.Sequential(nn.Conv(1, 8, 3, device=d), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv(8, 16, 3, device=d), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(16 * 7 * 7, 10, device=d))


WORKLOADS = {w.name: w for w in (Elementwise, Softmax, LayerNorm, MatmulBiasRelu, MLPStep, CNNStep)}


def get(name: str):
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None
