"""Regenerate the pictures and dumps used in docs/architecture.md.

    python docs/make_figures.py
"""
import os

import numpy as np

import needle as ndl

HERE = os.path.dirname(os.path.abspath(__file__))


def example():
    np.random.seed(0)
    x = ndl.Tensor(np.random.randn(64, 32).astype("float32"), requires_grad=False)
    w = ndl.Tensor(np.random.randn(32, 16).astype("float32"), requires_grad=False)
    b = ndl.Tensor(np.random.randn(1, 16).astype("float32"), requires_grad=False)
    h = ndl.relu(x @ w + b)
    return ndl.logsoftmax(h)


def main():
    with ndl.lazy(True):
        y = example()
        for stage in ("graph", "fused"):
            ndl.ir.visualize(y, path=os.path.join(HERE, "img", f"example_{stage}.svg"), stage=stage)
        for stage in ("graph", "fused", "kernels"):
            with open(os.path.join(HERE, "img", f"example_{stage}.txt"), "w") as f:
                f.write(ndl.ir.dump(y, stage=stage) + "\n")
        a = ndl.Tensor(np.random.randn(128, 96).astype("float32"), requires_grad=False)
        c = ndl.Tensor(np.random.randn(96, 80).astype("float32"), requires_grad=False)
        bias = ndl.Tensor(np.random.randn(1, 80).astype("float32"), requires_grad=False)
        z = ndl.relu(a @ c + bias)
        with open(os.path.join(HERE, "img", "example_tiled.txt"), "w") as f:
            f.write(ndl.ir.dump(z, stage="kernels") + "\n")
        t = ndl.Tensor(np.random.randn(8, 6).astype("float32"), requires_grad=False)
        moved = ndl.exp(ndl.pad(t.transpose(), ((1, 1), (0, 2))))[::2] * 2.0
        for stage in ("graph", "fused"):
            with open(os.path.join(HERE, "img", f"example_views_{stage}.txt"), "w") as f:
                f.write(ndl.ir.dump(moved, stage=stage) + "\n")
    print("wrote docs/img/example_*.svg and example_*.txt")


if __name__ == "__main__":
    main()
