"""needle's intermediate representation.

`graph`, `dump` and `visualize` show what a set of tensors will compute, at each
stage of the compiler: the op graph, the fused graph, the kernel IR, LLVM IR or
CUDA C.  stage="autograd" shows the Tensor graph `backward()` walks instead,
with values and gradients once computed.

The IR imports nothing above itself, so the views of later stages come from
the layers that make them, registered by needle's composition root
(needle/wiring.py): "compiler" (needle.engine.stages: fused graph, kernels, LLVM
IR, CUDA C) and "autograd" (needle.autograd_graph).
"""
from __future__ import annotations

from ..errors import ArgumentError
from . import draw, lazy, printer  # noqa: F401  (lazy: the nodes `build` makes)
from .nodes import Node, toposort  # noqa: F401

STAGES = ("graph", "fused", "kernels", "llvm", "cuda")
DUMP_STAGES = STAGES + ("autograd",)

#: name -> module showing a stage the IR cannot compute by itself ("compiler", "autograd")
VIEWS = {}


def register_view(name: str, view) -> None:
    VIEWS[name] = view


def graph(*tensors, stage: str = "graph", names=None):
    """The pending graph behind `tensors` as a networkx.DiGraph; stage="autograd"
    gives the Tensor graph instead (node attributes: `autograd_graph.to_networkx`)."""
    if stage == "autograd":
        view = VIEWS["autograd"]
        return view.to_networkx(view.collect(tensors, names))
    if stage != "graph":
        raise ArgumentError(f"graph: stage must be 'graph' or 'autograd', got {stage!r}")
    return printer.to_networkx(printer.output_nodes(tensors))


def dump(*tensors, stage: str = "graph", names=None) -> str:
    """Readable text of the graph behind `tensors` at `stage`.  For "autograd",
    `names` (a Module or {name: tensor}) names the parameters; by default the
    live Modules holding them do."""
    if stage == "autograd":
        view = VIEWS["autograd"]
        return view.text(view.collect(tensors, names))
    outputs = printer.output_nodes(tensors)
    if stage == "graph":
        return printer.graph_text(outputs)
    if stage not in STAGES:
        raise ArgumentError(f"dump: unknown stage {stage!r}; expected one of {', '.join(DUMP_STAGES)}")
    return VIEWS["compiler"].dump(outputs, stage)


def visualize(*tensors, path: str, stage: str = "graph", names=None, max_nodes: int = 400) -> str:
    """Draw the graph to `path` (.dot, .svg or .png); fused kernels as clusters.
    stage="autograd" draws the Tensor graph with a cluster per module (`names` as
    in `dump`); past `max_nodes` tensors each module's cluster becomes one box."""
    if stage == "autograd":
        view = VIEWS["autograd"]
        return draw.write(view.dot_text(view.collect(tensors, names), max_nodes), path)
    outputs = printer.output_nodes(tensors)
    if stage == "graph":
        order = toposort(outputs)
        return draw.write(draw.dot_text(order, printer.numbering(order), outputs), path)
    if stage == "fused":
        order, num, clusters, folded_outputs = VIEWS["compiler"].kernel_clusters(outputs)
        return draw.write(draw.dot_text(order, num, folded_outputs, clusters), path)
    raise ArgumentError(f"visualize: stage must be 'graph', 'fused' or 'autograd', got {stage!r}")
