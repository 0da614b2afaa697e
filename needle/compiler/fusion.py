"""Pass 2 — fusion: partition the folded graph into kernels.

A node is *stored* (written to memory by a kernel) when it is an output, a
reduction, a matmul, an assemble or a copy, the base of a view, or an
elementwise node that several readers use and that is too costly to recompute.
Everything else is inlined into the kernel of each node that reads it, so an
elementwise chain is one kernel and elementwise producers run inside
reductions.  Then three merges, each in a module of its own:

- matmul epilogues (fusion_epilogues): a matmul read once, as is, by an
  elementwise chain (bias add, activation) is computed by the kernel of that chain;
- reduction stages (fusion_stages): a reduction read by one kernel, broadcast back
  along the reduced axes (softmax, layernorm) or as is over the kept axes, becomes a
  *stage* of that kernel, an inner loop that leaves its result in a register;
- several outputs (fusion_outputs): a kernel also stores what an earlier kernel over
  the same elements stores (an optimizer's momentum and its update; a weight's update
  as its gradient is written back): one pass over memory, one launch.

What a kernel is and which nodes it evaluates is `kernel_groups`.  Every boundary
gets a reason (`FusedGraph.reasons`), shown by `dump(stage="fused")` and NEEDLE_DEBUG.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.nodes import ELEMENTWISE, REDUCE, toposort
from .conv_gemm import window_operand
from .cost import CHEAP_OPS, MAX_KERNEL_OPS, subtree_cost
from .fusion_epilogues import fuse_matmul_epilogues
from .fusion_outputs import absorb_into_matmuls, merge_elementwise_outputs
from .fusion_stages import fuse_reductions, split_nested_reductions
from .kernel_groups import LEAVES, Group, assemble_groups, members_of, new_group
from .view_folding import FoldedGraph

#: nodes a kernel may compute inline for its reader (a gather is one indexed load)
INLINE = ELEMENTWISE + ("gather",)


@dataclass
class FusedGraph:
    folded: FoldedGraph
    groups: list         # Groups in execution order
    stored: set          # ids of stored nodes
    reasons: dict        # id(node) -> why it is stored / how it was fused
    order: list          # folded nodes, topological
    outputs: list        # the stored node holding each output (a reshaped output is its base)


def output_node(out):
    """The node to store for output `out`: a stored result read in memory order (a
    reshape of a matmul, say) is the output itself, with the output's shape."""
    if out.op == "view":
        base, view = out.srcs[0], out.arg
        if base.op not in LEAVES and view.is_contiguous() and view.offset == 0 and base.size == out.size:
            return base
    return out


def fuse(folded: FoldedGraph, read_windows: bool = False) -> FusedGraph:
    """`read_windows`: the target's matmuls read a conv's windows in place
    (`window_operand`), so the im2col copies they alone read are not stored."""
    f = Fusion(folded)
    f.initial_stored()
    if read_windows:
        f.read_windows_in_place()
    f.compute_shared_once()
    for n in f.order:
        if id(n) in f.stored and n.op not in LEAVES:
            f.groups[id(n)] = new_group(n)
    split_nested_reductions(f)
    fuse_matmul_epilogues(f)
    fuse_reductions(f)
    merge_elementwise_outputs(f)
    absorb_into_matmuls(f)
    kernels = []
    for n in f.order:
        g = f.groups.get(id(n))
        if g is None or id(n) not in f.stored:
            continue
        if n.op == "assemble":
            kernels.extend(assemble_groups(n))
        elif n.op == "scatter_add":  # a parallel zero fill, then the additions
            kernels.extend([Group("fill", n), g])
        else:
            kernels.append(g)
    for g in kernels:
        g.members = members_of(g, f.stored)
    return FusedGraph(folded, kernels, f.stored, f.reasons, f.order, f.outputs)


class Fusion:
    """The state of one fusion: the folded graph in order, who reads what, which
    nodes are stored (and why), and the kernel group of each stored node."""

    def __init__(self, folded: FoldedGraph):
        self.outputs = [output_node(o) for o in folded.outputs]
        self.out_ids = {id(n) for n in self.outputs}
        self.order = toposort(folded.outputs)
        self.consumers = {id(n): [] for n in self.order}
        for n in self.order:
            for s in n.srcs:
                self.consumers[id(s)].append(n)
        self.reasons = dict(folded.reasons)
        self.stored = set()
        self.shared = set()  # stored only because several readers share them
        self.groups = {}

    def initial_stored(self) -> None:
        """The stored nodes; `shared` gets those stored only because several readers share them."""
        order, consumers, reasons, shared, stored = self.order, self.consumers, self.reasons, self.shared, self.stored
        inlined = {}  # id -> ops its inlined expression has (approximately: shared nodes count twice)
        out_ids = self.out_ids
        for n in order:
            why = None
            if id(n) in out_ids:
                why = "output"
            elif n.op in REDUCE:
                why = "reduction"
            elif n.op in ("matmul", "assemble", "copy", "scatter_add"):
                why = n.op
            elif id(n) in reasons:
                why = reasons[id(n)]
            elif n.op in INLINE and len(consumers[id(n)]) > 1:
                cost = subtree_cost(n)
                if cost > CHEAP_OPS:
                    why = f"read by {len(consumers[id(n)])} nodes and too costly to recompute (cost {cost})"
                    shared.add(id(n))
            if why is None and n.op in INLINE and id(n) not in stored:
                size = 1 + sum(inlined.get(id(s), 0) for s in n.srcs if id(s) not in stored)
                if size > MAX_KERNEL_OPS:
                    why = f"kernel size limit: the expression above it has more than {MAX_KERNEL_OPS} ops"
                    size = 1
                inlined[id(n)] = size
            if n.op == "view" and n.srcs[0].op not in LEAVES:
                base = n.srcs[0]
                stored.add(id(base))
                reasons.setdefault(id(base), "read through a view")
            if why is not None and n.op not in LEAVES:
                stored.add(id(n))
                reasons.setdefault(id(n), why)

    def read_windows_in_place(self) -> None:
        """A copy of a conv's windows (its im2col matrix) read only by matmuls that
        read the windows themselves (`window_operand`: a forward, a weight gradient)
        is not stored: 9x the input's bytes (a 3x3 conv) written and read again."""
        for n in self.order:
            if n.op != "copy" or id(n) not in self.stored or id(n) in self.out_ids:
                continue
            reads = [(v, m) for v in self.consumers[id(n)] for m in self.consumers[id(v)]]
            if reads and all(window_operand(m) is not None and m.srcs[0] is v and m.srcs[1] is not v
                             for v, m in reads):
                self.stored.discard(id(n))
                self.reasons[id(n)] = "not stored: its matmuls read the windows themselves (implicit GEMM)"

    def compute_shared_once(self) -> None:
        """A costly node read by several nodes need not be stored when every reader
        is an elementwise node of one and the same kernel, at the same index (no view or
        gather in between): that kernel computes it once per element anyway (sigmoid's
        exp and 1 / (1 + exp) feed one `where`).  Readers first (reverse order), so a
        reader's own kernel is known; the kernel's inlined expression must stay under
        MAX_KERNEL_OPS counted as a tree, as the kernel text spells it."""
        stored = self.stored
        for n in reversed(self.order):
            if id(n) not in self.shared or id(n) not in stored or n.op in LEAVES:
                continue
            root = self.single_elementwise_reader(n)
            if root is None:
                continue
            stored.discard(id(n))
            if self.tree_size(root, {}) > MAX_KERNEL_OPS:
                stored.add(id(n))
                continue
            self.reasons[id(n)] = f"read by {len(self.consumers[id(n)])} nodes, all in one kernel at the same index: " \
                             "computed once there"

    def single_elementwise_reader(self, n):
        """The one stored node whose kernel reads `n`, when every path up to it is
        elementwise; else None."""
        roots = self.readers_root(n, elementwise_only=True)
        return next(iter(roots.values())) if roots is not None and len(roots) == 1 else None

    def tree_size(self, n, memo) -> int:
        if id(n) not in memo:
            memo[id(n)] = 1 + sum(self.tree_size(s, memo) for s in n.srcs
                                  if s.op in INLINE and id(s) not in self.stored)
        return memo[id(n)]

    def consumers_reached(self, node, follow):
        """Each node that reads `node`, or reads a reached node that `follow` accepts, once."""
        stack, seen = [node], set()
        while stack:
            for c in self.consumers[id(stack.pop())]:
                if id(c) not in seen:
                    seen.add(id(c))
                    yield c
                    if follow(c):
                        stack.append(c)

    def readers_root(self, node, elementwise_only: bool = False):
        """id -> node for the stored nodes whose kernels read `node` (walking up through
        inlined nodes).  With `elementwise_only`, None when a path up to them goes through
        a view, gather, matmul or assemble (another index, or a packed copy)."""
        stored, roots = self.stored, {}
        for c in self.consumers_reached(node, lambda c: id(c) not in stored):
            if elementwise_only and c.op not in ELEMENTWISE and not (id(c) in stored and c.op in REDUCE):
                return None
            if id(c) in stored:
                roots[id(c)] = c
        return roots
