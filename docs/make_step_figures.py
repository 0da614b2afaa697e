"""Regenerate the pictures and tables of docs/seeing-a-step.md.

    python docs/make_step_figures.py [--skip-train] [--batch 16]

Writes into docs/img/: the autograd graph of an MLP training step (eager, and
lazy after the step runs) beside its fused kernels, the collapsed autograd graph of ResNet9, the profile tables
of the MLP and ResNet9 steps, and training curves from `python -m needle train
--plot` (skipped without Fashion-MNIST or with --skip-train).
"""
import argparse
import contextlib
import io
import os
import sys

import numpy as np

import needle as ndl
from needle import nn, optim

HERE = os.path.dirname(os.path.abspath(__file__))
IMG = os.path.join(HERE, "img")
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def mlp_step(model, opt, x, y):
    loss = nn.SoftmaxLoss()(model(x), y)
    opt.reset_grad()
    loss.backward()
    opt.step()
    return loss


def mlp_figures() -> None:
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = ndl.Tensor(np.random.rand(128, 784).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 10, 128), requires_grad=False)
    with ndl.lazy(False):  # eager: every value and gradient is computed as the step goes
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        ndl.ir.visualize(loss, path=os.path.join(IMG, "mlp_step_autograd.png"), stage="autograd")
        _write("mlp_step_autograd.txt", ndl.ir.dump(loss, stage="autograd"))
    with ndl.lazy(True):
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        ndl.ir.visualize(loss, path=os.path.join(IMG, "mlp_step_fused.png"), stage="fused")
        ndl.realize(loss, *[p.grad for p in model.parameters()])
        ndl.ir.visualize(loss, path=os.path.join(IMG, "mlp_step_autograd_lazy.png"), stage="autograd")
        for _ in range(2):
            mlp_step(model, opt, x, y).numpy()
        with ndl.profile() as p:
            for _ in range(5):
                mlp_step(model, opt, x, y).numpy()
        _write("mlp_step_profile.txt", p.table(limit=12, print_it=False))


def resnet9_figures(batch: int) -> None:
    from models import ResNet9
    np.random.seed(0)
    model = ResNet9()
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = ndl.Tensor(np.random.randn(batch, 3, 32, 32).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 10, batch), requires_grad=False)
    with ndl.lazy(True):
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        ndl.ir.visualize(loss, path=os.path.join(IMG, "resnet9_autograd.png"), stage="autograd", max_nodes=200)
        ndl.engine.forget_later()
        for _ in range(2):
            mlp_step(model, opt, x, y).numpy()
        with ndl.profile() as p:
            for _ in range(3):
                mlp_step(model, opt, x, y).numpy()
        _write("resnet9_step_profile.txt", p.table(limit=15, print_it=False))


def curves() -> None:
    from needle.cli import train
    try:
        train.find_data(train.default_data_dir())
    except train.MissingDataError as e:
        print(f"skipping the training curves: {e}")
        return
    with contextlib.redirect_stdout(io.StringIO()):
        train.run(train.defaults(model="mlp", epochs=4, limit=12000, no_progress=True,
                                 plot=os.path.join(IMG, "train_curves.png")))


def _write(name: str, text: str) -> None:
    with open(os.path.join(IMG, name), "w") as f:
        f.write(text + "\n")
    print(f"wrote docs/img/{name}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--batch", type=int, default=16, help="ResNet9 batch size (default 16)")
    args = parser.parse_args(argv)
    os.makedirs(IMG, exist_ok=True)
    mlp_figures()
    resnet9_figures(args.batch)
    if not args.skip_train:
        curves()
    print("wrote docs/img/mlp_step_*.png, resnet9_*.png/txt, train_curves.png")


if __name__ == "__main__":
    main()
