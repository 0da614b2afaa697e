"""The course's hw2 model: a residual MLP trained on MNIST-format data.

Importable as a module (`from examples.mlp_resnet import MLPResNet`) or, when the
examples folder is on the path, as `mlp_resnet`.  Both `epoch` and `train_mnist`
seed numpy's RNG with 4 first, as the course does, so results are reproducible.
"""
from __future__ import annotations

import os
import time
from typing import Optional, Tuple

import numpy as np

import needle as ndl
import needle.nn as nn
from needle.engine import realize_later


def ResidualBlock(dim: int, hidden_dim: int, norm=nn.BatchNorm1d, drop_prob: float = 0.1) -> nn.Module:
    """relu(x + norm(linear(dropout(relu(norm(linear(x)))))))."""
    main = nn.Sequential(
        nn.Linear(dim, hidden_dim),
        norm(hidden_dim),
        nn.ReLU(),
        nn.Dropout(drop_prob),
        nn.Linear(hidden_dim, dim),
        norm(dim),
    )
    return nn.Sequential(nn.Residual(main), nn.ReLU())


def MLPResNet(dim: int, hidden_dim: int = 100, num_blocks: int = 3, num_classes: int = 10,
              norm=nn.BatchNorm1d, drop_prob: float = 0.1) -> nn.Module:
    """Linear -> ReLU -> num_blocks residual blocks (inner width hidden_dim // 2) -> Linear."""
    return nn.Sequential(
        nn.Linear(dim, hidden_dim),
        nn.ReLU(),
        *[ResidualBlock(hidden_dim, hidden_dim // 2, norm, drop_prob) for _ in range(num_blocks)],
        nn.Linear(hidden_dim, num_classes),
    )


def epoch(dataloader: ndl.data.DataLoader, model: nn.Module,
          opt: Optional[ndl.optim.Optimizer] = None) -> Tuple[float, float]:
    """One pass over `dataloader`: trains when `opt` is given, else evaluates.

    Returns (error rate over all examples, mean of the per-batch losses).
    """
    np.random.seed(4)
    loss_fn = nn.SoftmaxLoss()
    model.train() if opt is not None else model.eval()
    errors, losses = 0, []
    for X, y in dataloader:
        if len(X.shape) != 2:
            X = X.reshape((X.shape[0], -1))
        logits = model(X)
        loss = loss_fn(logits, y)
        if opt is not None:
            opt.reset_grad()
            loss.backward()
            # lazy mode: compute logits and loss with the step's realize (one schedule per step)
            realize_later(logits)
            realize_later(loss)
            opt.step()
        else:
            ndl.realize(logits, loss)
        errors += int((logits.numpy().argmax(axis=1) != y.numpy()).sum())
        losses.append(float(loss.numpy()))
    return errors / len(dataloader.dataset), float(np.mean(losses))


def train_mnist(batch_size: int = 100, epochs: int = 10, optimizer=ndl.optim.Adam, lr: float = 0.001,
                weight_decay: float = 0.001, hidden_dim: int = 100,
                data_dir: str = "data") -> Tuple[float, float, float, float]:
    """Train an MLPResNet(784, hidden_dim) on `data_dir`'s MNIST-format files and
    return (train_err, train_loss, test_err, test_loss) of the last epoch."""
    np.random.seed(4)
    train_set = ndl.data.MNISTDataset(os.path.join(data_dir, "train-images-idx3-ubyte.gz"),
                                      os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    test_set = ndl.data.MNISTDataset(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"),
                                     os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))
    train_loader = ndl.data.DataLoader(train_set, batch_size, shuffle=True)
    test_loader = ndl.data.DataLoader(test_set, batch_size)
    model = MLPResNet(784, hidden_dim)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        train_err, train_loss = epoch(train_loader, model, opt)
    test_err, test_loss = epoch(test_loader, model)
    return train_err, train_loss, test_err, test_loss


if __name__ == "__main__":
    start = time.time()
    print(train_mnist(data_dir="/usr/share/datasets/fashion-mnist", epochs=2))
    print(f"{time.time() - start:.1f} s")
