"""`python -m needle train`: train a small classifier on MNIST-format IDX files.

The pieces are plain functions so that `examples/train_mnist.py` and the tests
reuse them: `find_data` (where are the four files?), `build_model`,
`make_optimizer`, `train_epoch` / `evaluate` (one pass each), and `run(args)`,
which ties them together and returns the final metrics as a dict.

In lazy mode each training step is one realize: the logits and the loss (which
the progress bar and the accuracy read) are registered with `realize_later`, so
the optimizer's single `needle.realize` computes them with the backward pass and
the update, instead of a separate forward realize.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Callable, Dict, Optional, Tuple

import numpy as np
from tqdm import tqdm

from .. import autograd, nn, optim
from ..autograd import Tensor
from ..backend_selection import cpu, cpu_numpy, cuda
from ..data import DataLoader, NDArrayDataset, parse_mnist
from ..errors import DataError
from ..realize import lazy, realize
from ..captured.function import jit
from ..engine.realize import realize_later
from ..serialization import save
from . import train_distributed

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MODELS = ("softmax", "mlp", "cnn")
OPTIMIZERS = {"sgd": optim.SGD, "adam": optim.Adam}
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3}
DEVICES = {"cpu": cpu, "cpu_numpy": cpu_numpy, "cuda": cuda}
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


class MissingDataError(DataError):
    """No MNIST-format data where we looked; the message says how to get some."""


def default_data_dir() -> str:
    return DEFAULT_DATA if os.path.isdir(DEFAULT_DATA) else "data"


# ---- data ---------------------------------------------------------------------------------
def find_data(data_dir: str) -> Dict[str, str]:
    """Paths of the four IDX files in `data_dir` (gzipped or not), or MissingDataError."""
    found, missing = {}, []
    for key, name in FILES.items():
        for candidate in (name + ".gz", name):
            path = os.path.join(data_dir, candidate)
            if os.path.isfile(path):
                found[key] = path
                break
        else:
            missing.append(name + ".gz")
    if missing:
        where = f"{data_dir!r} does not exist" if not os.path.isdir(data_dir) else \
            f"{data_dir!r} lacks {', '.join(missing)}"
        raise MissingDataError(
            f"no MNIST-format data found: {where}.\n"
            "  Get Fashion-MNIST with `apt-get install dataset-fashion-mnist` (it installs "
            f"{DEFAULT_DATA}),\n"
            "  or download the four MNIST IDX files (" + ", ".join(n + ".gz" for n in FILES.values())
            + ") into a folder DIR and pass --data DIR.")
    return found


def load_data(data_dir: str, limit: Optional[int] = None) -> Tuple[NDArrayDataset, NDArrayDataset]:
    """(train, test) datasets of (N, 784) float32 images and integer labels; `limit`
    keeps only the first `limit` training examples."""
    paths = find_data(data_dir)
    X_train, y_train = parse_mnist(paths["train_images"], paths["train_labels"])
    X_test, y_test = parse_mnist(paths["test_images"], paths["test_labels"])
    if limit is not None:
        X_train, y_train = X_train[:limit], y_train[:limit]
    return NDArrayDataset(X_train, y_train), NDArrayDataset(X_test, y_test)


# ---- models -------------------------------------------------------------------------------
class ToImages(nn.Module):
    """(N, 784) rows -> (N, 1, 28, 28) images, for the convolutional model."""

    def __init__(self, channels: int = 1, height: int = 28, width: int = 28) -> None:
        super().__init__()
        self.shape = (channels, height, width)

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape((x.shape[0],) + self.shape)


def build_model(name: str, hidden: int = 128, device=None) -> nn.Module:
    """softmax: one Linear; mlp: Linear-ReLU-Linear; cnn: two conv/batch-norm/pool stages
    + Linear (batch norm and 16/32 channels take Fashion-MNIST past 90%)."""
    if name == "softmax":
        return nn.Sequential(nn.Linear(784, 10, device=device))
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, hidden, device=device), nn.ReLU(),
                             nn.Linear(hidden, 10, device=device))
    if name == "cnn":
        return nn.Sequential(
            ToImages(),
            nn.Conv(1, 16, 3, device=device), nn.BatchNorm2d(16, device=device), nn.ReLU(),
            nn.MaxPool2d(2),                                                   # 16 x 14 x 14
            nn.Conv(16, 32, 3, device=device), nn.BatchNorm2d(32, device=device), nn.ReLU(),
            nn.MaxPool2d(2),                                                   # 32 x 7 x 7
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 10, device=device),
        )
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def make_optimizer(name: str, params, lr: Optional[float] = None) -> optim.Optimizer:
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](params, lr=DEFAULT_LR[name] if lr is None else lr)


# ---- loops --------------------------------------------------------------------------------
def training_step(model: nn.Module, opt: optim.Optimizer,
                  before_step: Optional[Callable[[], None]] = None) -> Callable:
    """step(X, y) -> (loss, logits): forward, backward and update.  `before_step` runs
    between backward() and the optimizer step (data-parallel gradient averaging)."""
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        logits = model(X)
        loss = loss_fn(logits, y)
        opt.reset_grad()
        loss.backward()
        realize_later(logits)  # computed by the step's realize: one schedule per step
        realize_later(loss)
        if before_step is not None:
            before_step()
        opt.step()
        return loss, logits
    return step


def train_epoch(model: nn.Module, loader: DataLoader, opt: optim.Optimizer,
                progress: bool = True, desc: str = "train",
                before_step: Optional[Callable[[], None]] = None, use_jit: bool = False) -> Tuple[float, float]:
    """One pass of training; returns (mean loss per example, accuracy).  With `use_jit`
    the step is captured once (needle.jit) and replayed without rebuilding its graph."""
    model.train()
    step = training_step(model, opt, before_step)
    if use_jit:
        step = jit(step)
    total_loss, correct, seen = 0.0, 0, 0
    # disable=None: tqdm shows the bar on a terminal and stays quiet in pipes and logs
    bar = tqdm(loader, total=len(loader), desc=desc, leave=False, disable=None if progress else True,
               dynamic_ncols=True)
    for X, y in bar:
        loss, logits = step(X, y)
        n = X.shape[0]
        batch_loss = float(loss.numpy())
        total_loss += batch_loss * n
        correct += int((logits.numpy().argmax(axis=1) == y.numpy()).sum())
        seen += n
        bar.set_postfix(loss=f"{batch_loss:.4f}")
    bar.close()
    return total_loss / max(seen, 1), correct / max(seen, 1)


def step_speed(args: argparse.Namespace, model: nn.Module, loader: DataLoader, steps: int = 10) -> dict:
    """Milliseconds per training step, eager vs lazy fused vs lazy captured (needle.jit),
    on copies of `model` (the trained weights are left alone): median over `steps`
    batches after warm-up."""
    batches = []
    for X, y in loader:
        batches.append((X, y))
        if len(batches) == steps + 2:
            break
    state = model.state_dict()
    out = {}
    for mode, enabled in (("eager", False), ("fused", True), ("jit", True)):
        with lazy(enabled):
            np.random.seed(args.seed)
            copy = build_model(args.model, args.hidden, device=model.parameters()[0].device)
            copy.load_state_dict(state)
            opt = make_optimizer(args.optimizer, copy.parameters(), args.lr)
            step = training_step(copy, opt)
            step = jit(step) if mode == "jit" else step
            times = []
            for X, y in batches:
                t0 = time.perf_counter()
                step(X, y)[0].numpy()
                times.append(time.perf_counter() - t0)
            out[mode] = float(np.median(times[2:])) * 1e3
    return out


def evaluate(model: nn.Module, loader: DataLoader) -> Tuple[float, float]:
    """(mean loss per example, accuracy) in eval mode; no gradients are built."""
    model.eval()
    loss_fn = nn.SoftmaxLoss()
    total_loss, correct, seen = 0.0, 0, 0
    for X, y in loader:
        logits = model(X).detach()
        loss = loss_fn(logits, y)
        realize(logits, loss)
        n = X.shape[0]
        total_loss += float(loss.numpy()) * n
        correct += int((logits.numpy().argmax(axis=1) == y.numpy()).sum())
        seen += n
    return total_loss / max(seen, 1), correct / max(seen, 1)


# ---- the command --------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of `train` (shared by `python -m needle train` and examples/train_mnist.py)."""
    parser.add_argument("--data", metavar="DIR", default=default_data_dir(),
                        help=f"folder with the four MNIST-format IDX files (default: {default_data_dir()})")
    parser.add_argument("--model", choices=MODELS, default="mlp", help="model to train (default: mlp)")
    parser.add_argument("--epochs", type=int, default=5, metavar="N", help="passes over the data (default: 5)")
    parser.add_argument("--batch-size", type=int, default=128, metavar="B", help="batch size (default: 128)")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: 0.1 for sgd, 0.001 for adam)")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adam",
                        help="optimizer (default: adam)")
    parser.add_argument("--hidden", type=int, default=256, metavar="H", help="hidden units of mlp (default: 256)")
    parser.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                        help="learning rate over the epochs: cosine annealing to 0, or constant (default: cosine)")
    parser.add_argument("--device", choices=tuple(DEVICES), default="cpu", help="device (default: cpu)")
    parser.add_argument("--eager", action="store_true", help="run eagerly (needle.lazy(False))")
    parser.add_argument("--no-jit", action="store_true",
                        help="build every step's graph in Python instead of replaying a captured step (needle.jit)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="train on the first N examples only (quick runs)")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed for init and shuffling (default: 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--plot", metavar="FILE", default=None,
                        help="draw loss and accuracy per epoch (train and test) to FILE (.png/.svg; matplotlib)")
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the processes of `mpiexec -n N` (--batch-size is the "
                             "global batch; rank 0 prints and saves)")
    parser.add_argument("--save", metavar="FILE", default=None, help="save the trained model's state_dict")
    return parser


def defaults(**overrides) -> argparse.Namespace:
    """The options' defaults with `overrides` applied, for calling `run` from Python."""
    args = add_arguments(argparse.ArgumentParser()).parse_args([])
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise TypeError(f"unknown train option {key!r}")
        setattr(args, key, value)
    return args


def check_args(args: argparse.Namespace) -> None:
    for name in ("epochs", "batch_size", "hidden"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")


def run(args: argparse.Namespace) -> dict:
    """Train as `args` says, print one line per epoch, return the final metrics:
    train_loss, train_acc, test_loss, test_acc, epoch_times (s), total_time (s), history."""
    check_args(args)
    if getattr(args, "distributed", False) and not getattr(args, "_rank_guarded", False):
        return train_distributed.guarded(run, args)  # joins the MPI world; one failing rank ends all
    device = DEVICES[args.device]()
    Tensor([0.0], device=device)  # fails here, with the device's reason, if it is unusable
    train_set, test_set = load_data(args.data, args.limit)
    np.random.seed(args.seed)
    model = build_model(args.model, args.hidden, device=device)
    opt = make_optimizer(args.optimizer, model.parameters(), args.lr)
    train_loader = DataLoader(train_set, args.batch_size, shuffle=True, device=device)
    test_loader = DataLoader(test_set, 1000, device=device)
    parallel = train_distributed.DataParallel(args, model, train_set, test_set, device) \
        if getattr(args, "distributed", False) else None
    if parallel is not None:
        train_loader, test_loader = parallel.train_loader, parallel.test_loader
    main_rank = parallel is None or parallel.is_main  # prints, shows progress, saves
    mode = lazy(False) if args.eager else contextlib.nullcontext()
    print(f"training {args.model} on {len(train_set)} examples from {args.data} "
          f"({args.optimizer}, lr {opt.lr:g}, batch {args.batch_size}, {args.device}, "
          f"{'eager' if args.eager or not autograd.lazy_mode() else 'lazy'})", flush=True)
    history = []
    # cosine: epoch e (from 0) trains at lr * (1 + cos(pi * e / epochs)) / 2; one epoch is plain lr
    scheduler = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs) \
        if getattr(args, "schedule", "constant") == "cosine" else None
    start = time.perf_counter()
    with mode:
        for epoch in range(1, args.epochs + 1):
            t0 = time.perf_counter()
            if parallel is not None:
                parallel.set_epoch(epoch)
            train_loss, train_acc = train_epoch(model, train_loader, opt,
                                                progress=not args.no_progress and main_rank,
                                                before_step=parallel and parallel.sync_gradients,
                                                desc=f"epoch {epoch}/{args.epochs}",
                                                use_jit=not getattr(args, "no_jit", False))
            test_loss, test_acc = evaluate(model, test_loader)
            if parallel is not None:
                train_loss, train_acc, test_loss, test_acc = parallel.combine(train_loss, train_acc,
                                                                              test_loss, test_acc)
            if scheduler is not None:
                scheduler.step()
            seconds = time.perf_counter() - t0
            history.append(dict(epoch=epoch, train_loss=train_loss, train_acc=train_acc,
                                test_loss=test_loss, test_acc=test_acc, seconds=seconds))
            print(f"epoch {epoch}/{args.epochs}  train loss {train_loss:.4f}  train acc {train_acc:.2%}  "
                  f"test acc {test_acc:.2%}  time {seconds:.1f}s", flush=True)
    speed = step_speed(args, model, train_loader) if main_rank else None
    if speed is not None:
        print(f"step time ({train_loader.batch_size} examples): eager {speed['eager']:.2f} ms, lazy fused "
              f"{speed['fused']:.2f} ms ({speed['eager'] / speed['fused']:.1f}x), lazy jit {speed['jit']:.2f} ms "
              f"({speed['eager'] / speed['jit']:.1f}x)", flush=True)
    if getattr(args, "save", None) and main_rank:
        save(model.state_dict(), args.save)
    if getattr(args, "plot", None) and main_rank:
        from .plot import training_curves
        print(f"wrote {training_curves(history, args.plot, title=f'{args.model} ({args.optimizer})')}", flush=True)
    final = dict(history[-1])
    del final["epoch"], final["seconds"]
    final["step_ms"] = speed
    final.update(model=args.model, epochs=args.epochs, epoch_times=[h["seconds"] for h in history],
                 total_time=time.perf_counter() - start, history=history)
    return final
