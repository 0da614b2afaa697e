"""`python -m needle ir WORKLOAD`: print or draw any compiler stage of a workload.

The workload's step is built lazily on the chosen device and nothing is run: the
pending graph is shown as the op graph, the fused graph, the kernel IR, LLVM IR or
CUDA C (the last two render for their target whatever the device).
"""
from __future__ import annotations

import argparse

from .. import inspect
from ..backend_selection import cpu
from ..ir.nodes import toposort
from ..ir.printer import output_nodes
from ..realize import lazy
from .workloads import WORKLOADS, get


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", choices=sorted(WORKLOADS), help="a built-in workload")
    p.add_argument("--stage", default="graph", choices=inspect.STAGES, help="what to show (default: graph)")
    p.add_argument("--svg", metavar="FILE", help="draw the graph (stage graph or fused) to FILE "
                                                  "(.svg, .png or .dot) instead of printing")
    p.add_argument("--full", action="store_true", help="full sizes instead of the quick ones")


def pending_outputs(name: str, quick: bool = True) -> list:
    """The tensors of one step of workload `name`, built lazily and not realized."""
    with lazy(True):
        workload = get(name)(cpu(), quick=quick)
        if hasattr(workload, "opt"):  # a training step: stop before the optimizer realizes
            workload.opt.reset_grad()
            loss = workload.loss_fn(workload.model(workload.x), workload.y)
            loss.backward()
            for p in workload.model.parameters():
                p.data = p.data - workload.opt.lr * p.grad.data
            return [loss] + list(workload.model.parameters())
        return workload.step()


def run(args) -> str:
    outs = pending_outputs(args.workload, quick=not args.full)
    if args.svg:
        if args.stage not in ("graph", "fused"):
            raise ValueError(f"--svg draws stage graph or fused, not {args.stage}")
        path = inspect.visualize(*outs, path=args.svg, stage=args.stage)
        nodes = len(toposort(output_nodes(outs)))
        print(f"wrote {path} ({args.workload}, stage {args.stage}, {nodes} nodes)")
        return path
    text = inspect.dump(*outs, stage=args.stage)
    print(text)
    return text
