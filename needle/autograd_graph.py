"""The Tensor graph that `backward()` walks (`dump`/`visualize` with stage="autograd").

One node per Tensor: its op (with the op's static arguments), shape, dtype and
`requires_grad`; leaves and Parameters marked, parameters named by their module
attribute path (`modules.0.weight`).  Once computed, a node shows a short summary
of its value and of the gradient `backward()` stored in `.grad` (the values of
tiny tensors, else the L2 norm); pending data shows as "pending".  Nothing is
realized: summaries read only data that already exists.

Parameter names come from `names=` (a Module, or a {name: tensor} mapping) or,
by default, from the live Modules holding the parameters (found through the
garbage collector, once per call, so nothing is recorded while training).
An op that reads a module's parameters is attributed to that module; the picture
draws one cluster per module and, past `max_nodes` nodes, collapses each cluster
into one box.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from .errors import ArgumentError

#: tensors with at most this many elements show their values instead of a norm
TINY = 4


@dataclass
class TensorNode:
    """What the pictures and dumps show of one Tensor."""

    index: int
    kind: str                 # "param" | "leaf" | "op"
    op: str                   # op class name, "" for leaves
    op_args: str              # the op's static arguments, e.g. "axes=(1,)"
    shape: Optional[tuple]
    dtype: str
    requires_grad: bool
    name: str                 # module path of a parameter, else ""
    module: str               # module the node is attributed to ("" if none)
    value: str                # summary, "pending", or "" (not computed)
    grad: str                 # summary, "pending", or "" (no gradient stored)
    value_norm: Optional[float] = None
    grad_norm: Optional[float] = None
    inputs: List[int] = field(default_factory=list)
    output: bool = False


@dataclass
class AutogradGraph:
    nodes: List[TensorNode]
    outputs: List[int]
    module_types: Dict[str, str]   # module path -> class name (when modules are known)


# ---- collecting ---------------------------------------------------------------------------------
def _tensors(items) -> list:
    from .autograd import Value
    out = []
    for t in items:
        if isinstance(t, (list, tuple)):
            out.extend(_tensors(t))
        elif isinstance(t, Value):
            out.append(t)
        elif t is not None:
            raise ArgumentError(f"stage='autograd' draws Tensors, got {type(t).__name__}")
    return out


def collect(tensors, names=None) -> AutogradGraph:
    """The autograd graph behind `tensors` (Tensors, TensorTuples or lists of them)."""
    from .backward import find_topo_sort
    roots = _tensors(tensors)
    if not roots:
        raise ArgumentError("stage='autograd': give at least one Tensor")
    order = find_topo_sort(roots)
    index = {id(t): k for k, t in enumerate(order)}
    param_names, module_types = parameter_names(order, names)
    nodes = []
    for k, t in enumerate(order):
        data = t._cached_data
        shape, dtype = _shape_dtype(data)
        value, value_norm = summary(data)
        grad_t = getattr(t, "grad", None)
        grad, grad_norm = summary(grad_t._cached_data) if grad_t is not None else ("", None)
        is_param = id(t) in param_names or type(t).__name__ == "Parameter"
        kind = "param" if is_param else ("leaf" if t.op is None else "op")
        nodes.append(TensorNode(k, kind, t.op.name if t.op is not None else "", _op_args(t.op), shape, dtype,
                                bool(t.requires_grad), param_names.get(id(t), ""), "", value, grad,
                                value_norm, grad_norm, [index[id(x)] for x in t.inputs]))
    outputs = []
    for t in roots:
        if index[id(t)] not in outputs:
            outputs.append(index[id(t)])
            nodes[index[id(t)]].output = True
    _attribute_modules(nodes)
    return AutogradGraph(nodes, outputs, module_types)


def _shape_dtype(data):
    if data is None:
        return None, "?"
    if isinstance(data, tuple):
        return (len(data),), "tuple"
    dtype = data.dtype if isinstance(data.dtype, str) else np.dtype(data.dtype).name
    return tuple(data.shape), dtype


def summary(data):
    """(text, L2 norm) of computed data: values of tiny arrays, else the norm;
    ("pending", None) for data not computed yet.  Never computes anything."""
    if data is None:
        return "pending", None
    if isinstance(data, tuple):
        parts = [summary(x)[0] for x in data]
        return "(" + ", ".join(parts) + ")", None
    if getattr(data, "is_lazy", False):
        data = data.realized
        if data is None:
            return "pending", None
    array = np.asarray(data.numpy() if hasattr(data, "numpy") else data, dtype=np.float64)
    norm = float(np.sqrt(np.sum(array * array))) if array.size else 0.0
    if array.size <= TINY:
        flat = ", ".join(f"{v:.4g}" for v in array.ravel())
        return (f"[{flat}]" if array.ndim else flat), norm
    return f"norm {norm:.4g}", norm


def _op_args(op) -> str:
    """The op's static arguments (`axes=(1,)`, `scalar=0.5`), short."""
    if op is None:
        return ""
    parts = []
    for key, value in getattr(op, "__dict__", {}).items():
        if key.startswith("_") or callable(value):
            continue
        text = repr(value)
        if len(text) <= 24:
            parts.append(f"{key}={text}")
    return ", ".join(parts)


# ---- parameter names ----------------------------------------------------------------------------
def parameter_names(order, names=None):
    """({id(tensor): dotted name}, {module path: class name}) for the tensors in `order`."""
    wanted = {id(t) for t in order}
    if names is not None:
        return _explicit_names(names, wanted)
    from .nn import Module
    modules = [m for m in gc.get_objects() if issubclass(type(m), Module)]  # type(): no __class__ tricks
    best, types = {}, {}
    for m in modules:  # each live module; a parameter takes its name in the largest model holding it
        try:
            named = m.named_parameters()
        except Exception:  # a half-built or exotic module: skip it, naming is best effort
            continue
        hits = [(n, p) for n, p in named if id(p) in wanted]
        if not hits:
            continue
        for n, p in hits:
            if id(p) not in best or len(named) > best[id(p)][1]:
                best[id(p)] = (n, len(named), m)
    roots = {id(m): m for _, _, m in best.values()}
    for m in roots.values():
        types.update(_module_types(m))
    return {k: n for k, (n, _, _) in best.items()}, types


def _explicit_names(names, wanted):
    from .nn import Module
    if isinstance(names, Module):
        return {id(p): n for n, p in names.named_parameters() if id(p) in wanted}, _module_types(names)
    items = names.items() if hasattr(names, "items") else names
    try:
        return {id(t): str(n) for n, t in items if id(t) in wanted}, {}
    except (TypeError, ValueError):
        raise ArgumentError("names= must be a Module, a {name: tensor} mapping or (name, tensor) pairs") from None


def _module_types(root) -> Dict[str, str]:
    """{dotted path: class name} of every sub-module of `root` ("" is the root)."""
    from .nn import Module
    out, stack, seen = {}, [("", root)], set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, Module):
            if id(value) in seen:
                continue
            seen.add(id(value))
            out[path] = type(value).__name__
            items = value.__dict__.items()
        elif isinstance(value, dict):
            items = value.items()
        elif isinstance(value, (list, tuple)):
            items = enumerate(value)
        else:
            continue
        for key, item in items:
            if isinstance(item, (Module, dict, list, tuple)):
                stack.append((f"{path}.{key}" if path else str(key), item))
    return out


def _attribute_modules(nodes) -> None:
    """Give each node a module: a parameter its own; a node built only from
    parameters (a reshaped bias, a transposed weight) theirs; an op reading such a
    node the deepest of those.  Other ops (activations, losses) belong to none:
    which module called them is not recorded, and guessing would mislead."""
    pure = {}
    for n in nodes:
        if n.name:
            n.module = n.name.rsplit(".", 1)[0] if "." in n.name else ""
            pure[n.index] = True
            continue
        if n.kind != "op":
            pure[n.index] = False
            continue
        ins = [nodes[i] for i in n.inputs]
        from_params = [x.module for x in ins if pure.get(x.index)]
        pure[n.index] = bool(ins) and all(pure.get(x.index) for x in ins)
        if from_params:
            n.module = max(from_params, key=lambda p: p.count(".") + (1 if p else 0))


# ---- text ---------------------------------------------------------------------------------------
def fmt_type(n: TensorNode) -> str:
    from .ir.nodes import SHORT_DTYPE
    if n.shape is None:
        return "?"
    return f"{SHORT_DTYPE.get(n.dtype, n.dtype)}[{','.join(map(str, n.shape))}]"


def head(n: TensorNode) -> str:
    """`param modules.0.weight`, `leaf`, or `MatMul` / `Summation(axes=(1,))`."""
    if n.kind == "param":
        return f"param {n.name}" if n.name else "param"
    if n.kind == "leaf":
        return "leaf"
    return f"{n.op}({n.op_args})" if n.op_args else n.op


def text(graph: AutogradGraph) -> str:
    """One Tensor per line, inputs first:
    `%3 = MatMul %0, %1 : f32[4,8] grad  value norm 3.2  grad pending  # modules.0`."""
    lines = []
    for n in graph.nodes:
        line = f"%{n.index} = {head(n)}"
        if n.inputs:
            line += " " + ", ".join(f"%{i}" for i in n.inputs)
        line += f" : {fmt_type(n)}" + (" requires_grad" if n.requires_grad else "")
        facts = []
        if n.value:
            facts.append(f"value {n.value}")
        if n.grad:
            facts.append(f"grad {n.grad}")
        if facts:
            line = f"{line:<60} " + "  ".join(facts)
        if n.module and n.kind == "op":
            line += f"  # {n.module}"
        lines.append(line)
    lines.append("return " + ", ".join(f"%{i}" for i in graph.outputs))
    return "\n".join(lines)


def to_networkx(graph: AutogradGraph):
    """networkx.DiGraph: node k with the TensorNode's fields; an edge per input
    (attribute `indices`: the argument positions it feeds)."""
    import networkx as nx
    g = nx.DiGraph()
    for n in graph.nodes:
        g.add_node(n.index, kind=n.kind, op=n.op, op_args=n.op_args, shape=n.shape, dtype=n.dtype,
                   requires_grad=n.requires_grad, name=n.name, module=n.module, value=n.value, grad=n.grad,
                   value_norm=n.value_norm, grad_norm=n.grad_norm, output=n.output)
    for n in graph.nodes:
        for pos, i in enumerate(n.inputs):
            if g.has_edge(i, n.index):
                g.edges[i, n.index]["indices"].append(pos)
            else:
                g.add_edge(i, n.index, indices=[pos])
    return g


# ---- pictures -----------------------------------------------------------------------------------
_FILL = {"param": "#fff2cc", "leaf": "#cfe2f3", "op": "#ffffff"}


def dot_text(graph: AutogradGraph, max_nodes: int = 400) -> str:
    """DOT of the graph: a box per Tensor in one cluster per module; with more than
    `max_nodes` nodes, each module's cluster is drawn as one box."""
    from .ir.draw import quote
    collapse = len(graph.nodes) > max_nodes and any(n.module for n in graph.nodes)
    groups = _collapsed_groups(graph) if collapse else {n.index: n.module for n in graph.nodes}
    by_module = {}
    for n in graph.nodes:
        if groups.get(n.index):
            by_module.setdefault(groups[n.index], []).append(n)
    lines = ["digraph autograd {", "  rankdir=TB;", '  node [shape=box, fontname="Helvetica", fontsize=10];']
    where = {}  # node index -> DOT id it is drawn as
    for ci, (module, members) in enumerate(by_module.items()):
        kind = graph.module_types.get(module, "")
        title = f"{module} ({kind})" if kind else module
        if collapse:
            params = sum(1 for m in members if m.kind == "param")
            label = f"{title}\n{len(members)} tensors, {params} parameters"
            lines.append(f"  m{ci} [label={quote(label)}, style=\"filled,rounded\", fillcolor=\"#d9ead3\"];")
            for m in members:
                where[m.index] = f"m{ci}"
            continue
        lines.append(f"  subgraph cluster_{ci} {{")
        lines.append(f"    label={quote(title)}; style=rounded; color=\"#6aa84f\";")
        for m in members:
            where[m.index] = f"t{m.index}"
            lines.append("    " + _node_line(m))
        lines.append("  }")
    for n in graph.nodes:
        if n.index not in where:
            where[n.index] = f"t{n.index}"
            lines.append("  " + _node_line(n))
    drawn = set()
    for n in graph.nodes:
        for i in n.inputs:
            edge = (where[i], where[n.index])
            if edge[0] != edge[1] and edge not in drawn:
                drawn.add(edge)
                lines.append(f"  {edge[0]} -> {edge[1]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")


def _collapsed_groups(graph: AutogradGraph) -> Dict[int, str]:
    """Module of each node for the collapsed picture: the outermost enclosing
    module of a class used more than once (a block repeated through the model),
    and an op without parameters joins the group all its grouped inputs share
    (the normalization and activation inside a block)."""
    types = graph.module_types
    counts = {}
    for kind in types.values():
        counts[kind] = counts.get(kind, 0) + 1

    def outer(path: str) -> str:
        parts = path.split(".")
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            kind = types.get(prefix)
            if kind and kind not in _CONTAINERS and counts[kind] > 1:
                return prefix
        return path

    group = {}
    for n in graph.nodes:
        if n.module:
            group[n.index] = outer(n.module)
        elif n.kind == "op":
            owners = {group[i] for i in n.inputs if group.get(i)}
            if len(owners) == 1:
                group[n.index] = owners.pop()
    return group


def _node_line(n: TensorNode) -> str:
    from .ir.draw import quote
    label = f"%{n.index} {head(n)}\n{fmt_type(n)}" + ("" if n.requires_grad else "  no grad")
    if n.value:
        label += f"\nvalue {n.value}"
    if n.grad:
        label += f"\ngrad {n.grad}"
    extra = ", peripheries=2" if n.output else ""
    return f"t{n.index} [label={quote(label)}, style=filled, fillcolor=\"{_FILL[n.kind]}\"{extra}];"

