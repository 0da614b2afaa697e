"""A tour of needle's compiler stages from user code.

    python examples/ir_tour.py [--out DIR]

Builds a small model's training step lazily, prints every stage — the op graph,
the fused graph (kernels and the reason for every boundary), the kernel IR and
the LLVM IR of one kernel — draws the op graph and the fused graph, then runs the
step and shows what the runtime did.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import needle as ndl
from needle import nn, runtime


def build_step():
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    x = ndl.Tensor(np.random.randn(16, 20).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 4, 16), requires_grad=False)
    loss = nn.SoftmaxLoss()(model(x), y)
    loss.backward()
    for p in model.parameters():          # SGD, left pending: part of the same graph
        p.data = p.data - 0.1 * p.grad.data
    return [loss] + list(model.parameters())


def banner(title: str) -> None:
    print(f"\n{'=' * 20} {title} {'=' * 20}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for the pictures")
    args = parser.parse_args(argv)
    with ndl.lazy(True):
        outs = build_step()
        banner("op graph (stage graph)")
        print(ndl.ir.dump(*outs))
        banner("fused graph (stage fused)")
        print(ndl.ir.dump(*outs, stage="fused"))
        banner("kernel IR (stage kernels)")
        print(ndl.ir.dump(*outs, stage="kernels"))
        banner("LLVM IR of the first kernel (stage llvm, before O3)")
        print(ndl.ir.dump(*outs, stage="llvm").split("\ndefine void @")[0][:3000])
        os.makedirs(args.out, exist_ok=True)
        for stage in ("graph", "fused"):
            for ext in ("svg", "dot"):
                try:
                    path = ndl.ir.visualize(*outs, path=os.path.join(args.out, f"ir_tour_{stage}.{ext}"),
                                            stage=stage)
                    print(f"drew {path}")
                    break
                except ndl.errors.NeedleError as e:  # no Graphviz: fall back to .dot
                    print(f"({e})")
        runtime.reset_stats()
        ndl.realize(*outs)
        banner("runtime")
        print(f"loss {outs[0].numpy():.4f}; {runtime.stats()}")


if __name__ == "__main__":
    main()
