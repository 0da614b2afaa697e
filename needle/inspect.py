"""What a set of tensors will compute, at each stage of the compiler: the faces
`needle.ir.graph`, `needle.ir.dump` and `needle.ir.visualize` (those public names are
these functions; the composition root, needle/wiring.py, gives them to `needle.ir`).

They sit above the engine because the later stages are the engine's (fused graph,
kernels, LLVM IR, CUDA C: engine/stages.py) and stage="autograd" is the Tensor graph
`backward()` walks (autograd_graph.py); the IR below only prints and draws nodes.
"""
from __future__ import annotations

from . import autograd_graph
from .engine import stages
from .errors import ArgumentError
from .ir import draw, printer
from .ir.nodes import toposort

STAGES = ("graph", "fused", "kernels", "llvm", "cuda")
DUMP_STAGES = STAGES + ("autograd",)


def graph(*tensors, stage: str = "graph", names=None):
    """The pending graph behind `tensors` as a networkx.DiGraph; stage="autograd"
    gives the Tensor graph instead (node attributes: `autograd_graph.to_networkx`)."""
    if stage == "autograd":
        return autograd_graph.to_networkx(autograd_graph.collect(tensors, names))
    if stage != "graph":
        raise ArgumentError(f"graph: stage must be 'graph' or 'autograd', got {stage!r}")
    return printer.to_networkx(printer.output_nodes(tensors))


def dump(*tensors, stage: str = "graph", names=None) -> str:
    """Readable text of the graph behind `tensors` at `stage`.  For "autograd",
    `names` (a Module or {name: tensor}) names the parameters; by default the
    live Modules holding them do."""
    if stage == "autograd":
        return autograd_graph.text(autograd_graph.collect(tensors, names))
    outputs = printer.output_nodes(tensors)
    if stage == "graph":
        return printer.graph_text(outputs)
    if stage not in STAGES:
        raise ArgumentError(f"dump: unknown stage {stage!r}; expected one of {', '.join(DUMP_STAGES)}")
    return stages.dump(outputs, stage)


def visualize(*tensors, path: str, stage: str = "graph", names=None, max_nodes: int = 400) -> str:
    """Draw the graph to `path` (.dot, .svg or .png); fused kernels as clusters.
    stage="autograd" draws the Tensor graph with a cluster per module (`names` as
    in `dump`); past `max_nodes` tensors each module's cluster becomes one box."""
    if stage == "autograd":
        return draw.write(autograd_graph.dot_text(autograd_graph.collect(tensors, names), max_nodes), path)
    outputs = printer.output_nodes(tensors)
    if stage == "graph":
        order = toposort(outputs)
        return draw.write(draw.dot_text(order, printer.numbering(order), outputs), path)
    if stage == "fused":
        order, num, clusters, folded_outputs = stages.kernel_clusters(outputs)
        return draw.write(draw.dot_text(order, num, folded_outputs, clusters), path)
    raise ArgumentError(f"visualize: stage must be 'graph', 'fused' or 'autograd', got {stage!r}")
