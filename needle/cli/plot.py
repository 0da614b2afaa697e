"""Training curves for `python -m needle train --plot curves.png` (matplotlib, optional)."""
from __future__ import annotations

import os
from typing import List

from ..errors import ArgumentError, NeedleError


def training_curves(history: List[dict], path: str, title: str = "") -> str:
    """Loss and accuracy per epoch, train and test, side by side, saved to `path`
    (.png, .svg or .pdf).  `history` holds one dict per epoch with epoch,
    train_loss, train_acc, test_loss and test_acc (what `train.run` records)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ArgumentError(f"--plot: cannot write {path!r}: the folder {folder!r} does not exist")
    fig = curves_figure(history, title)
    try:
        fig.savefig(path, dpi=110)
    finally:
        _pyplot().close(fig)
    return path


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise NeedleError("--plot needs matplotlib (pip install 'needle[viz]')") from None
    return plt


def curves_figure(history: List[dict], title: str = ""):
    """The matplotlib Figure: axes 0 loss, axes 1 accuracy; lines train then test."""
    if not history:
        raise ArgumentError("plot: no epochs to draw")
    plt = _pyplot()
    epochs = [h["epoch"] for h in history]
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in ((loss_ax, "loss", "loss (mean per example)"), (acc_ax, "acc", "accuracy")):
        ax.plot(epochs, [h[f"train_{metric}"] for h in history], "o-", label="train")
        ax.plot(epochs, [h[f"test_{metric}"] for h in history], "s--", label="test")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.set_xticks(epochs)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
