"""Text and networkx views of the IR graph (`needle.ir.dump`, `needle.ir.graph`)."""
from __future__ import annotations

from .nodes import toposort


def output_nodes(tensors) -> list:
    """The IR nodes behind tensors, lazy arrays or NDArrays (realized data becomes
    a buffer node), in order, without repeats."""
    from .lazy import LazyArray, as_lazy
    nodes, seen = [], set()
    for t in tensors:
        if isinstance(t, (list, tuple)):
            items = list(t)
        elif isinstance(t, LazyArray):
            items = [t]
        elif hasattr(t, "_cached_data"):
            data = t._cached_data if t._cached_data is not None else t.realize_cached_data()
            items = list(data) if isinstance(data, tuple) else [data]
        else:
            items = [t]
        for x in items:
            if hasattr(x, "_cached_data"):
                nodes.extend(output_nodes([x]))
                continue
            node = as_lazy(x)
            if id(node) not in seen:
                seen.add(id(node))
                nodes.append(node)
    return nodes


def numbering(nodes) -> dict:
    """SSA numbers in topological order: {id(node): k}."""
    return {id(n): k for k, n in enumerate(nodes)}


def graph_text(outputs) -> str:
    """One node per line: `%7 = add %5, %6 : f32[128,256]   # EWiseAdd`."""
    order = toposort(outputs)
    num = numbering(order)
    lines = []
    for n in order:
        lines.append(node_line(n, num))
    lines.append("return " + ", ".join(f"%{num[id(n)]}" for n in outputs))
    return "\n".join(lines)


def node_line(n, num) -> str:
    operands = ", ".join(f"%{num[id(s)]}" for s in n.srcs)
    arg = n.describe_arg()
    text = f"%{num[id(n)]} = {n.op}"
    if operands:
        text += " " + operands
    if arg:
        text += f" {arg}" if not operands else f", {arg}"
    text += f" : {n.type_str()}"
    if n.origin:
        text = f"{text:<60} # {n.origin}"
    return text


def to_networkx(outputs):
    """The graph as a networkx.DiGraph: node k (SSA number) with attributes op,
    shape, dtype, arg, origin, label, output; an edge per operand (attr `index`)."""
    order = toposort(outputs)
    num = numbering(order)
    out_ids = {id(n) for n in outputs}
    import networkx as nx  # here, not at import: slow to import, and its objects lengthen every full GC
    g = nx.DiGraph()
    for n in order:
        k = num[id(n)]
        g.add_node(k, op=n.op, shape=n.shape, dtype=n.dtype, arg=n.describe_arg(), origin=n.origin,
                   output=id(n) in out_ids, label=f"%{k} {n.op}\n{n.type_str()}")
        for i, s in enumerate(n.srcs):
            g.add_edge(num[id(s)], k, index=i)
    return g
