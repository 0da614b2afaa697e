"""needle's intermediate representation.

`graph`, `dump` and `visualize` show what a set of tensors will compute, at each
stage of the compiler: the op graph, the fused graph, the kernel IR, LLVM IR or
CUDA C.
"""
from __future__ import annotations

from ..errors import ArgumentError
from . import draw, printer
from .nodes import Node, toposort  # noqa: F401

STAGES = ("graph", "fused", "kernels", "llvm", "cuda")


def graph(*tensors):
    """The pending graph behind `tensors` as a networkx.DiGraph."""
    return printer.to_networkx(printer.output_nodes(tensors))


def dump(*tensors, stage: str = "graph") -> str:
    """Readable text of the graph behind `tensors` at `stage`."""
    outputs = printer.output_nodes(tensors)
    if stage == "graph":
        return printer.graph_text(outputs)
    if stage not in STAGES:
        raise ArgumentError(f"dump: unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    from ..compiler import stages
    return stages.dump(outputs, stage)


def visualize(*tensors, path: str, stage: str = "graph") -> str:
    """Draw the graph to `path` (.dot, .svg or .png); fused kernels as clusters."""
    outputs = printer.output_nodes(tensors)
    if stage == "graph":
        order = toposort(outputs)
        return draw.write(draw.dot_text(order, printer.numbering(order), outputs), path)
    if stage == "fused":
        from ..compiler import stages
        order, num, clusters, folded_outputs = stages.kernel_clusters(outputs)
        return draw.write(draw.dot_text(order, num, folded_outputs, clusters), path)
    raise ArgumentError(f"visualize: stage must be 'graph' or 'fused', got {stage!r}")
