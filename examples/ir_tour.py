"""A tour of needle's compiler stages from user code.

    python examples/ir_tour.py [--out DIR]

Builds a small model's training step lazily, prints every stage — the Tensor
graph backward() walks, the op graph, the fused graph (kernels and the reason for
every boundary), the kernel IR and the LLVM IR of one kernel — draws the autograd
graph beside the op graph and the fused graph, then runs the step under
needle.profile() and shows where its time went, and the autograd graph again with
the values and gradients the step computed.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import needle as ndl
from needle import nn, runtime


def build_step():
    """(model, loss, the step's outputs, the gradients) of one SGD step of a small MLP,
    pending.  Keep the model alive while drawing: the autograd graph names parameters
    after the live modules holding them (or pass names=model)."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    x = ndl.Tensor(np.random.randn(16, 20).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 4, 16), requires_grad=False)
    loss = nn.SoftmaxLoss()(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    for p in model.parameters():          # SGD, left pending: part of the same graph
        p.data = p.data - 0.1 * p.grad.data
    return model, loss, [loss] + list(model.parameters()), grads


def draw(tensors, folder: str, name: str, stage: str) -> None:
    for ext in ("png", "svg", "dot"):
        try:
            print(f"drew {ndl.ir.visualize(*tensors, path=os.path.join(folder, f'{name}.{ext}'), stage=stage)}")
            return
        except ndl.errors.NeedleError as e:  # no Graphviz: fall back to .dot
            print(f"({e})")


def banner(title: str) -> None:
    print(f"\n{'=' * 20} {title} {'=' * 20}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for the pictures")
    args = parser.parse_args(argv)
    with ndl.lazy(True):
        model, loss, outs, grads = build_step()
        banner("autograd graph (stage autograd): the Tensors backward() walks")
        print(ndl.ir.dump(loss, stage="autograd"))
        banner("op graph (stage graph)")
        print(ndl.ir.dump(*outs))
        banner("fused graph (stage fused)")
        print(ndl.ir.dump(*outs, stage="fused"))
        banner("kernel IR (stage kernels)")
        print(ndl.ir.dump(*outs, stage="kernels"))
        banner("LLVM IR of the first kernel (stage llvm, before O3)")
        print(ndl.ir.dump(*outs, stage="llvm").split("\ndefine void @")[0][:3000])
        banner("pictures: the autograd graph beside the op graph and the fused kernels")
        os.makedirs(args.out, exist_ok=True)
        draw([loss], args.out, "ir_tour_autograd", "autograd")
        for stage in ("graph", "fused"):
            draw(outs, args.out, f"ir_tour_{stage}", stage)
        runtime.reset_stats()
        with ndl.profile() as p:  # built inside the profile, so kernels know their source lines
            model, loss, outs, grads = build_step()
            ndl.realize(*outs, *grads)
        banner("runtime: the step under needle.profile()")
        p.table(limit=10)
        print(f"loss {loss.numpy():.4f}; {runtime.stats()}")
        banner("autograd graph after the step: values and gradients")
        print(ndl.ir.dump(loss, stage="autograd"))
        draw([loss], args.out, "ir_tour_autograd_after", "autograd")

if __name__ == "__main__":
    main()
