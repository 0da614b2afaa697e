"""One compiled schedule at every stage, as the page shows it (plain, JSON-able data).

Made once per schedule the recorder meets, while its graph is still pending: the
Tensors holding its outputs (autograd), the IR graph, the graph after view folding,
the fused groups and the kernels.  The text of each stage is what `needle.ir.dump`
prints (the same functions make it) and the pictures are `needle.ir.draw`'s and
`autograd_graph.dot_text`'s DOT, dressed here: nodes filled with their kernel's
colour, each fusion boundary (an edge out of a stored node into another kernel) drawn
in red, and the stored node labelled with the reason fusion recorded for storing it.
Past `MAX_NODES` IR nodes a stage is drawn one box per kernel, as the autograd
picture draws one box per module.

Kernels' LLVM IR (or CUDA C) is rendered on demand: rendering a ResNet9 step's 187
kernels takes seconds, so the kernels are kept pickled (their statement trees would
otherwise be thousands of objects every garbage collection walks) until asked for.
"""
from __future__ import annotations

import gc
import linecache
import pickle
import re
import warnings
from collections import Counter

from .. import autograd_graph
from ..compiler.schedule import plan
from ..engine import schedule_cache, stages
from ..ir import draw, printer
from ..ir.nodes import LOAD, MOVEMENT, toposort
from ..profiler import sources

STAGES = ("autograd", "graph", "folded", "fused", "kernels")
TITLES = {"autograd": "autograd", "graph": "graph", "folded": "after view folding",
          "fused": "fused groups", "kernels": "kernels"}
#: IR stages with more nodes are drawn one box per kernel (the text keeps every node)
MAX_NODES = 400
#: autograd pictures with more Tensors draw each repeated module as one box
MAX_TENSORS = 200
#: the picture of every node is kept (for the page's "every node" switch) up to this many
FULL_LIMIT = 3000
#: kernel colours (group k: PALETTE[k % len]); loads keep needle.ir.draw's colours
PALETTE = ("#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99", "#8dd3c7", "#bebada",
           "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5")
_SKIP = set(LOAD) | set(MOVEMENT) | {"view"}
_EDGE = re.compile(r"^  (\w+) -> (\w+);$")


def colour(k) -> str:
    return PALETTE[k % len(PALETTE)] if k is not None else "#ffffff"


def line_of(origin) -> str:
    """`file.py:12: code` of the user's line that built a node ('' if not recorded)."""
    where = getattr(origin, "where", None)
    if where is None:
        return ""
    return f"{sources.short(where)}: {linecache.getline(where[0], where[1]).strip()}"


def holders(nodes) -> list:
    """The live Tensors whose data is one of `nodes`, in the order of `nodes` (the
    autograd picture's roots: a step's loss, gradients and parameters)."""
    from ..autograd import Value
    position = {id(n): k for k, n in enumerate(nodes)}
    found = []
    with warnings.catch_warnings():  # (isinstance on some modules' deprecated objects warns)
        warnings.simplefilter("ignore")
        values = [obj for obj in gc.get_objects() if isinstance(obj, Value)]
    for obj in values:
        data = obj._cached_data
        k = min((position.get(id(d), len(nodes)) for d in data), default=len(nodes)) \
            if isinstance(data, tuple) else position.get(id(data), len(nodes))
        if k < len(nodes):
            found.append((k, obj.op is None, obj))
    found.sort(key=lambda f: f[:2])
    return [t for _, _, t in found]


class Shot:
    """A schedule seen at every stage: `data` (JSON-able) and `code(i)`, the LLVM IR or
    CUDA C of its i-th kernel."""

    def __init__(self, nodes, target, tensors=()):
        self.target = target
        schedule, fused = plan(nodes, target)
        self.calls = schedule.calls
        members = stages.kernel_members(fused)
        self.group_of_call = _group_of_calls(schedule.calls, fused.groups)
        by_origin = _groups_by_origin(members)
        groups = [_group_info(k, g, ms, fused) for k, (g, ms) in enumerate(members)]
        for i, k in enumerate(self.group_of_call):
            if k is not None:
                groups[k]["calls"].append(i)
        self.data = {
            "target": target.name,
            "code_language": "cuda" if target.grid else "llvm",
            "groups": groups,
            "kernels": [self._kernel(i, c) for i, c in enumerate(schedule.calls)],
            "stages": {
                "autograd": _autograd_stage(tensors, by_origin),
                "graph": _graph_stage(nodes, by_origin, groups),
                "folded": _folded_stage(fused, members, groups),
                "fused": _fused_stage(fused, members, groups),
                "kernels": _kernels_stage(schedule, fused, self.group_of_call, groups),
            },
        }
        self._pickled = pickle.dumps([c.kernel for c in schedule.calls])
        self.calls = None  # (their statement trees: kept pickled only)

    def _kernel(self, i, call) -> dict:
        k = self.group_of_call[i]
        kernel = call.kernel
        return {"name": kernel.name, "group": k, "color": colour(k),
                "buffers": [f"{b.name}: {b.dtype} {b.role}" for b in kernel.bufs],
                "parallel": f"{kernel.parallel[0]} over {kernel.parallel[1]}" if kernel.parallel else "",
                "loop_ir": stages._kernel_text(call), "code": None}

    def code(self, i: int, memo=None) -> str:
        """The i-th kernel's LLVM IR (before optimization) or CUDA C."""
        return self._render([i], memo)[0]

    def fill_code(self, memo=None) -> dict:
        """`data` with every kernel's code rendered (for a recording written to a file);
        `memo` shares the text of equal kernels between schedules."""
        self._render(range(len(self.data["kernels"])), memo)
        return self.data

    def _render(self, indices, memo=None) -> list:
        memo = {} if memo is None else memo
        kernels = None
        for i in indices:
            kernel = self.data["kernels"][i]
            if kernel["code"] is None:
                key = (kernel["loop_ir"], self.target)
                if key not in memo:
                    kernels = kernels or pickle.loads(self._pickled)
                    memo[key] = schedule_cache.kernel_code(kernels[i], self.target)
                kernel["code"] = memo[key]
        return [self.data["kernels"][i]["code"] for i in indices]


# ---- kernels and groups ----------------------------------------------------------------------------
def _group_of_calls(calls, groups) -> list:
    """The group (index) each call computes: a group's calls end with the one bearing
    its name (a matmul's packing kernels, a split reduction's first half come first)."""
    out, k = [], 0
    for call in calls:
        out.append(k if k < len(groups) else None)
        if k < len(groups) and call.kernel.name == groups[k].name and call.kernel.mapping != "split":
            k += 1
    return out


def _groups_by_origin(members) -> dict:
    """id(origin) -> group: a node's origin object (the profiler's stamp, one per IR node
    built) is shared by every node the passes made from it, so it leads from the graph
    before the passes, and from a Tensor, to the kernel computing it (the kernel that
    stores it first)."""
    out = {}
    for stored_first in (True, False):
        for k, (g, ms) in enumerate(members):
            for n in ms:
                stored = n is g.root or any(n is e for e in g.extra)
                if stored == stored_first and type(n.origin) is not str and n.op not in LOAD:
                    out.setdefault(id(n.origin), k)
    return out


def _group_info(k, g, members, fused) -> dict:
    computed = [n for n in members if n.op not in _SKIP] or [n for n in members if n.op not in LOAD]
    ops = []
    for n in computed:
        name = str(n.origin) or n.op
        if name not in ops:
            ops.append(name)
    lines = Counter(line_of(n.origin) for n in computed if getattr(n.origin, "where", None) is not None)
    return {"name": g.name, "kind": g.kind, "color": colour(k), "ops": ops,
            "lines": [text for text, _ in lines.most_common()], "nodes": len(computed),
            "reason": fused.reasons.get(id(g.root), ""), "notes": list(g.notes), "calls": []}


# ---- the IR stages ---------------------------------------------------------------------------------
def _ir_node(n, kernels, reason="") -> dict:
    arg = n.describe_arg()
    return {"op": n.op, "type": n.type_str(), "arg": arg if len(arg) <= 300 else arg[:297] + "...",
            "origin": str(n.origin), "line": line_of(n.origin), "kernels": kernels, "reason": reason}


def _stage(text, dot, nodes, collapsed, count, full=None) -> dict:
    return {"text": text, "dot": dot, "full": full, "nodes": nodes, "collapsed": collapsed, "count": count}


def _ir_stage(name, outputs, text, kernels_of, reason_of, groups, fused=None) -> dict:
    """A stage of the IR graph behind `outputs`: `kernels_of(node)` the groups computing
    it, `reason_of(node)` what its table says of it; `fused`: draw each kernel as a
    cluster and mark the boundaries (this is the fused stage)."""
    order = toposort(outputs)
    num = printer.numbering(order)
    of = {id(n): ks for n in order if (ks := kernels_of(n))}
    table = {f"n{num[id(n)]}": _ir_node(n, of.get(id(n), []), reason_of(n)) for n in order}
    big = len(order) > MAX_NODES
    full = None
    if len(order) <= FULL_LIMIT:
        # clusters for the fused stage, and for large pictures (Graphviz lays out a large
        # graph in clusters in seconds, and without them in minutes)
        clusters = None
        if fused is not None or big:
            clusters = {f"kernel {k}: {g['name']}": set() for k, g in enumerate(groups)}
            for n in order:
                if id(n) in of and n.op not in LOAD:
                    clusters[f"kernel {of[id(n)][0]}: {groups[of[id(n)][0]]['name']}"].add(id(n))
        fills = {f"n{num[id(n)]}": colour(ks[0]) for n in order if (ks := of.get(id(n)))}
        notes, edges = _boundaries(order, num, of, fused) if fused is not None else ({}, {})
        full = _dress(draw.dot_text(order, num, outputs, clusters), fills, notes, edges)
    if not big:
        return _stage(text, full, table, False, len(order))
    placed = _place_all(order, {i: ks[0] for i, ks in of.items()})
    return _stage(text, _collapsed_dot(order, placed, groups, name), table, True, len(order), full)


def _graph_stage(outputs, by_origin, groups) -> dict:
    def kernels_of(n):
        k = by_origin.get(id(n.origin)) if type(n.origin) is not str else None
        return [] if k is None else [k]
    return _ir_stage("graph", outputs, printer.graph_text(outputs), kernels_of, lambda n: "", groups)


def _first_groups(members) -> dict:
    """id(folded node) -> every group computing it, in kernel order (a node recomputed
    by several kernels is drawn in the first)."""
    out = {}
    for k, (_, ms) in enumerate(members):
        for n in ms:
            if n.op not in LOAD:
                out.setdefault(id(n), []).append(k)
    return out


def _folded_stage(fused, members, groups) -> dict:
    of = _first_groups(members)
    reasons = fused.folded.reasons
    return _ir_stage("folded", fused.folded.outputs, printer.graph_text(fused.folded.outputs),
                     lambda n: of.get(id(n), []), lambda n: reasons.get(id(n), ""), groups)


def _fused_stage(fused, members, groups) -> dict:
    of = _first_groups(members)

    def reason_of(n):
        reason = fused.reasons.get(id(n), "")
        if id(n) in fused.stored and n.op not in LOAD:
            return f"stored: {reason}" if reason else "stored"
        return reason
    return _ir_stage("fused", fused.folded.outputs, stages.fused_text(fused), lambda n: of.get(id(n), []),
                     reason_of, groups, fused)


def _boundaries(order, num, of, fused) -> tuple:
    """The fusion boundaries: ({node id: "stored: reason"} for each stored node another
    kernel reads, {(source id, reader id): reason} for each edge crossing into another
    kernel).  (Reasons go in node labels, not on edges: Graphviz lays out labelled
    edges many times slower.)"""
    notes, edges = {}, {}
    for n in order:
        here = of.get(id(n), [None])[0]
        for s in n.srcs:
            there = of.get(id(s), [None])[0]
            if s.op in LOAD or there is None or here is None or there == here or id(s) not in fused.stored:
                continue
            reason = fused.reasons.get(id(s), "") or "stored"
            notes[f"n{num[id(s)]}"] = _stored(reason)
            edges[(f"n{num[id(s)]}", f"n{num[id(n)]}")] = reason
    return notes, edges


def _kernels_stage(schedule, fused, group_of_call, groups) -> dict:
    """The kernels in launch order, an edge from the kernel writing a buffer to each
    kernel reading it; a kernel whose result another group reads says why it is stored."""
    boxes, edges, writer, table = [], {}, {}, {}
    for i, call in enumerate(schedule.calls):
        k = group_of_call[i]
        writes = {s for s, b in zip(call.slots, call.kernel.bufs) if b.role == "out"}
        for s, b in zip(call.slots, call.kernel.bufs):
            j = writer.get(s)
            if b.role == "in" and j is not None and j != i:
                crossing = group_of_call[j] is not None and group_of_call[j] != k
                edges[(f"k{j}", f"k{i}")] = groups[group_of_call[j]]["reason"] if crossing else ""
        for s in writes:
            writer[s] = i
        output = any(schedule.slot_kinds.get(s, ("",))[0] == "out" for s in writes)
        boxes.append((f"k{i}", f"{i}: {call.kernel.name}", k, output))
        table[f"k{i}"] = {"kernel": i, "kernels": [k] if k is not None else []}
    read_elsewhere = {a for (a, _), reason in edges.items() if reason}
    dot = _box_dot("kernels", [(node, title, k, output, node in read_elsewhere) for node, title, k, output in boxes],
                   groups, edges)
    text = "\n\n".join(stages._kernel_text(c) for c in schedule.calls)
    return _stage(text, dot, table, False, len(schedule.calls))


# ---- the autograd stage ----------------------------------------------------------------------------
def _autograd_stage(tensors, by_origin) -> dict:
    if not tensors:
        return _stage("(no live Tensor holds this schedule's outputs)", None, {}, False, 0)
    from ..backward import find_topo_sort
    graph = autograd_graph.collect(list(tensors))
    order = find_topo_sort(list(tensors))  # (collect's order: index k is order[k])
    table, fills = {}, {}
    for n, t in zip(graph.nodes, order):
        data = t._cached_data
        origin = getattr(data, "origin", None) if not isinstance(data, tuple) else None
        k = by_origin.get(id(origin)) if origin is not None and type(origin) is not str else None
        table[f"t{n.index}"] = {"op": autograd_graph.head(n), "type": autograd_graph.fmt_type(n),
                                "module": n.module, "value": n.value, "grad": n.grad,
                                "requires_grad": n.requires_grad, "line": line_of(origin),
                                "kernels": [] if k is None else [k]}
        if k is not None and n.kind == "op":
            fills[f"t{n.index}"] = colour(k)
    dot = _dress(autograd_graph.dot_text(graph, MAX_TENSORS), fills, {}, {})
    collapsed = len(graph.nodes) > MAX_TENSORS
    return _stage(autograd_graph.text(graph), dot, table, collapsed, len(graph.nodes))


# ---- DOT ------------------------------------------------------------------------------------------
def _short(reason: str, width: int = 44) -> str:
    return reason if len(reason) <= width else reason[:width - 3] + "..."


def _stored(reason: str) -> str:
    """A boundary's label line: `stored: <why>`, short."""
    return _short(reason if reason.startswith("stored") else f"stored: {reason}")


#: Graphviz settings for speed: fewer rounds of crossing minimization and network simplex
#: (ResNet9's step: 9 s -> 1 s for its kernel graph, about as readable)
_FAST = "  mclimit=0.3; nslimit=2; nslimit1=2;"
_LABEL = re.compile(r'^(\s+)(\w+) \[label="((?:[^"\\]|\\.)*)"')


def _dress(dot: str, fills: dict, notes: dict, edges: dict) -> str:
    """`dot` (as needle.ir.draw and autograd_graph write it) with nodes refilled
    (`fills`: DOT id -> colour), a line added to labels (`notes`: DOT id -> text) and
    the edges in `edges` ((from, to) -> tooltip) drawn as kernel boundaries."""
    lines = dot.rstrip("\n").split("\n")
    assert lines[-1] == "}", "a DOT graph ends with its closing brace"
    out = lines[:1] + [_FAST]
    for line in lines[1:-1]:
        m = _EDGE.match(line)
        if m and (m.group(1), m.group(2)) in edges:
            line = f"  {m.group(1)} -> {m.group(2)} [{_BOUNDARY}, tooltip={draw.quote(edges[m.group(1), m.group(2)])}];"
        m = _LABEL.match(line)
        if m and m.group(2) in notes:
            line = line[:m.end(3)] + draw.quote("\n" + notes[m.group(2)])[1:-1] + line[m.end(3):]
        out.append(line)
    out += [f"  {node} [fillcolor={draw.quote(c)}];" for node, c in fills.items()]
    return "\n".join(out + ["}"]) + "\n"


_BOUNDARY = 'color="#cc0000", penwidth=1.5'


def _box_dot(name, boxes, groups, edges) -> str:
    """DOT of one box per kernel or group: `boxes` [(DOT id, title, group, whether it
    holds an output, whether another group reads it)], `edges` {(from, to): reason, ''
    inside a group}."""
    lines = [f"digraph {draw.quote(name)} {{", "  rankdir=TB;", _FAST,
             '  node [shape=box, style="filled,rounded", fontname="Helvetica", fontsize=10];']
    for node, title, k, output, read_elsewhere in boxes:
        g = groups[k] if k is not None else None
        label = title
        if g is not None:
            label += "\n" + "+".join(g["ops"][:3]) + ("+..." if len(g["ops"]) > 3 else "")
            if read_elsewhere and g["reason"]:
                label += "\n" + _stored(g["reason"])
        lines.append(f"  {node} [label={draw.quote(label)}, fillcolor={draw.quote(colour(k))}"
                     + (", peripheries=2" if output else "") + "];")
    for (a, b), reason in edges.items():
        lines.append(f"  {a} -> {b}" + (f" [{_BOUNDARY}, tooltip={draw.quote(reason)}]" if reason else "") + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _place_all(order, placed) -> dict:
    """`placed` (id(node) -> group) completed for every computed node: a node no group
    computes (a movement op view folding removed) goes with its first reader's group,
    else its first source's."""
    placed = dict(placed)
    readers = {}
    for n in order:
        for s in n.srcs:
            readers.setdefault(id(s), n)
    for n in reversed(order):
        if id(n) not in placed and n.op not in LOAD and id(n) in readers and id(readers[id(n)]) in placed:
            placed[id(n)] = placed[id(readers[id(n)])]
    for n in order:
        if id(n) not in placed and n.op not in LOAD:
            for s in n.srcs:
                if id(s) in placed:
                    placed[id(n)] = placed[id(s)]
                    break
    return placed


def _collapsed_dot(order, placed, groups, stage) -> str:
    """One box per kernel group (with how many of this stage's nodes it holds), an edge
    where one reads the other's result."""
    counts = Counter(placed.values())
    edges = {}
    for n in order:
        b = placed.get(id(n))
        for s in n.srcs:
            a = placed.get(id(s))
            if a is not None and b is not None and a != b:
                edges[(f"g{a}", f"g{b}")] = groups[a]["reason"] or "stored"
    read_elsewhere = {a for a, _ in edges}
    boxes = [(f"g{k}", f"kernel {k}: {groups[k]['name']}\n{counts[k]} node{'s' if counts[k] != 1 else ''}", k,
              False, f"g{k}" in read_elsewhere) for k in sorted(counts)]
    return _box_dot(stage, boxes, groups, edges)
