"""Pass 2 — fusion: partition the folded graph into kernels.

A node is *stored* (written to memory by a kernel) when it is an output, a
reduction, a matmul, an assemble or a copy, the base of a view, or an
elementwise node that several readers use and that is too costly to recompute.
Everything else is inlined into the kernel of each node that reads it, so an
elementwise chain is one kernel and elementwise producers run inside
reductions.  Then three merges:

- matmul epilogue: a matmul read once, as is, by an elementwise chain (bias add,
  activation) is computed by the kernel of that chain — one kernel; where the chain
  forks, the matmul kernel stores the node at the fork instead of its own result;
- reduction stages: a reduction whose only readers are one kernel, reading it
  broadcast back along the reduced axes (softmax, layernorm) or as is over the
  kept axes (logsumexp's log and add), becomes a *stage* of that kernel: an inner
  loop that leaves its result in a register.  Row softmax is one kernel.
- several outputs: an elementwise kernel also computes and stores what an
  earlier elementwise kernel over the same shape stores, when it reads that at
  its own index or not at all and nothing in between needs it in memory (an
  optimizer's momentum and the parameter update from it; Adam's m, v and
  parameter; an LSTM cell's gates, c and h): one pass over memory, one launch.
  A matmul kernel likewise takes over a later elementwise kernel over its result
  that reads the result at its own index (an optimizer's update of a weight from
  its gradient): stored as the gradient is written back.

Every boundary gets a reason (`FusedGraph.reasons`), shown by
`dump(stage="fused")` and NEEDLE_DEBUG.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.nodes import ELEMENTWISE, REDUCE, toposort
from .cost import CHEAP_OPS, MAX_KERNEL_OPS, subtree_cost
from .view_folding import WINDOW_RUN, FoldedGraph
from .views import View

LEAVES = ("buffer", "const", "param")
#: nodes a kernel may compute inline for its reader (a gather is one indexed load)
INLINE = ELEMENTWISE + ("gather",)
#: how many earlier elementwise kernels over its shape a kernel may take over (several outputs)
MERGE_WINDOW = 8


@dataclass
class Group:
    """One kernel: stores `root` (for kind "piece": pieces `pieces` of an assemble, all
    of one shape)."""

    kind: str                      # elementwise | reduce | matmul | fill | piece
    root: object
    stages: list = field(default_factory=list)   # fused reductions, in order
    matmul: object = None          # the matmul node (kind matmul)
    pieces: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    #: further nodes the kernel computes and stores, element for element over its domain
    #: (an elementwise kernel: _Fusion.merge_elementwise_outputs; a matmul kernel, over
    #: its result's shape: _Fusion.absorb_into_matmuls)
    extra: list = field(default_factory=list)
    #: the folded nodes the kernel evaluates (its root, the nodes inlined below it, its
    #: fused stages and matmul, and the loads it reads), recorded once by `fuse`: the
    #: stage dumps, the drawings and the profiler read this record
    members: list = field(default_factory=list)

    @property
    def domain(self) -> tuple:
        """Shape the kernel loops over (for reductions: the reduced input's shape)."""
        if self.kind == "piece":
            return self.root.srcs[self.pieces[0]].shape
        if self.stages:
            return self.stages[0].srcs[0].shape
        return self.root.shape

    @property
    def reduce_axes(self) -> tuple:
        return self.stages[0].arg if self.stages else ()

    def epilogue(self) -> bool:
        """True when the stored root has the reduced (kept-axes) shape."""
        return bool(self.stages) and self.root.shape != self.domain

    @property
    def name(self) -> str:
        dims = "_".join(str(s) for s in self.domain) or "1"
        if self.kind == "matmul":
            m = self.matmul
            return f"M_{'_'.join(map(str, m.shape))}_{m.srcs[0].shape[-1]}"
        return {"elementwise": "E", "reduce": "R", "fill": "F", "piece": "A", "scatter": "S"}[self.kind] + "_" + dims


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
    f = _Fusion(folded)
    f.initial_stored()
    if read_windows:
        f.read_windows_in_place()
    f.compute_shared_once()
    for n in f.order:
        if id(n) in f.stored and n.op not in LEAVES:
            f.groups[id(n)] = _new_group(n)
    f.split_nested_reductions()
    f.fuse_matmul_epilogues()
    f.fuse_reductions()
    f.merge_elementwise_outputs()
    f.absorb_into_matmuls()
    kernels = []
    for n in f.order:
        g = f.groups.get(id(n))
        if g is None or id(n) not in f.stored:
            continue
        if n.op == "assemble":
            kernels.extend(_assemble_groups(n))
        elif n.op == "scatter_add":  # a parallel zero fill, then the additions
            kernels.extend([Group("fill", n), g])
        else:
            kernels.append(g)
    for g in kernels:
        g.members = _members(g, f.stored)
    return FusedGraph(folded, kernels, f.stored, f.reasons, f.order, f.outputs)


def window_operand(m):
    """(view, rows, transposed) when matmul `m`'s A is a reshape of a copy of the view
    node `view` whose last axis is contiguous in memory, unmasked and at least
    WINDOW_RUN long: a conv's im2col matrix of NHWC windows (N, Ho, Wo, KH, KW, C),
    read row-major (the forward: A's rows are the view's first `rows` axes) or
    transposed (the weight gradient, im2col^T @ G:
    A's depth is the first `rows` axes).  The matmul reads the windows themselves
    (matmul_tiling: the implicit GEMM), a run of C channels per kernel tap.  Else None."""
    if m.op != "matmul" or len(m.shape) != 2 or m.dtype not in ("float32", "float64"):
        return None
    a = m.srcs[0]
    if a.op != "view" or a.srcs[0].op != "copy" or a.srcs[0].srcs[0].op != "view":
        return None
    copy, view = a.srcs[0], a.srcs[0].srcs[0]
    if view.srcs[0].op in LEAVES[1:]:  # a scalar's windows: nothing to read
        return None
    w = view.arg
    last = w.ndim - 1
    if w.empty or w.strides[last] != 1 or w.shape[last] < WINDOW_RUN or any(c[last] for c, _, _ in w.mask):
        return None
    if _same_memory_order(a.arg, copy.size):
        transposed, leading = False, a.shape[0]
    elif a.arg == View.contiguous(a.shape[::-1]).permute((1, 0)):
        transposed, leading = True, a.shape[1]
    else:
        return None
    rows = next((r for r in range(1, last + 1) if math.prod(w.shape[:r]) == leading), None)
    return None if rows is None else (view, rows, transposed)


def _members(g: Group, stored: set) -> list:
    """The folded nodes group `g` evaluates: from its root (for a piece: the piece's
    source) down through inlined nodes, stopping at views, stored results and loads,
    which it reads (a view of a conv's unstored im2col copy goes on to the windows the
    matmul reads).  A fill evaluates nothing but zeros."""
    if g.kind == "fill":
        return [g.root]
    roots = [g.root.srcs[i] for i in g.pieces] if g.kind == "piece" else [g.root]
    members, seen = ([g.root] if g.kind == "piece" else []), set()
    computed = {id(n) for n in [g.root, g.matmul] + g.stages + g.extra}
    stack = roots + list(g.stages) + ([g.matmul] if g.matmul is not None else []) + list(g.extra)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        members.append(n)
        inlined = id(n) not in stored or id(n) in computed
        if inlined and (n.op != "view" or id(n.srcs[0]) in computed or
                        (n.srcs[0].op == "copy" and id(n.srcs[0]) not in stored)):  # windows read in place
            stack.extend(n.srcs)
    return members


class _Fusion:
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
        is not stored: 9x the input's bytes (a 3x3 conv) written and read again, a
        fifth of a 3x3 forward's time."""
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

    def split_nested_reductions(self) -> None:
        """A reduction whose input reads reductions over another domain (the sum of a
        logsumexp, say) gets its input stored: then the inner reductions can fuse as
        stages of the kernel computing that input, instead of being stored apart.  Only
        when they can: the input's shape is an inner reduction's result or source (up
        to ones).  A batch norm's variance, split in partial sums (split_reductions),
        reads its mean, a reduction of the partial means: storing (x - mean)**2 for it
        wrote and read back the whole input (100352 x 16: 482 -> 430 us without)."""
        stored, groups, reasons = self.stored, self.groups, self.reasons
        for r in self.order:
            if r.op not in REDUCE:
                continue
            top = r.srcs[0]
            if top.op not in ELEMENTWISE or id(top) in stored:
                continue
            domain = (top.shape, r.arg)
            stack, seen = [top], set()
            while stack:
                n = stack.pop()
                if id(n) in seen:
                    continue
                seen.add(id(n))
                base = n.srcs[0] if n.op == "view" else None
                if base is not None and base.op in REDUCE and (base.srcs[0].shape, base.arg) != domain \
                        and _squeeze(top.shape) in (_squeeze(base.shape), _squeeze(base.srcs[0].shape)):
                    stored.add(id(top))
                    groups[id(top)] = Group("elementwise", top)
                    reasons[id(top)] = "stored so that the reductions it reads fuse into its kernel " \
                                       "(its reader reduces another domain)"
                    break
                if n.op in ELEMENTWISE and (n is top or id(n) not in stored):
                    stack.extend(n.srcs)

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

    def fuse_matmul_epilogues(self) -> None:
        stored, consumers, groups, reasons = self.stored, self.consumers, self.groups, self.reasons
        for m in self.order:
            if m.op != "matmul" or id(m) in self.out_ids:
                continue
            readers = consumers[id(m)]
            if len(readers) != 1 or readers[0].op != "view" or not _same_memory_order(readers[0].arg, m.size):
                reasons[id(m)] = "matmul: its result is not read once in memory order, so no epilogue fusion"
                continue
            node, why = readers[0], ""
            while id(node) not in stored:
                up = consumers[id(node)]
                if len(up) != 1 and node.op in ELEMENTWISE and node.dtype == m.dtype:
                    # the chain forks here: the matmul kernel stores this node instead of its
                    # own result (as many bytes), and the readers read it instead of recomputing
                    # the chain (a ReLU's gradient, read by the weight's and the bias's gradient)
                    stored.add(id(node))
                    groups[id(node)] = Group("elementwise", node)
                    reasons[id(node)] = f"the end of a matmul's epilogue: read by {len(up)} nodes"
                    break
                if len(up) != 1:
                    why = f"its epilogue forks: {node.op} is read by {len(up)} nodes"
                elif up[0].op not in ELEMENTWISE or up[0].shape != readers[0].shape:
                    why = f"its reader {up[0].op} {up[0].type_str()} is not elementwise over its shape"
                if why:
                    break
                node = up[0]
            if not why and (node.op not in ELEMENTWISE or groups[id(node)].kind != "elementwise"):
                why = f"its result feeds a {groups[id(node)].kind if id(node) in groups else node.op} kernel"
            if why:
                reasons[id(m)] = f"epilogue not fused: {why}"
                continue
            if node.dtype != m.dtype:  # the output buffer holds partial sums between K blocks
                reasons[id(m)] = f"matmul: the epilogue changes the dtype ({m.dtype} -> {node.dtype})"
                continue
            stored.discard(id(m))
            del groups[id(m)]
            g = groups[id(node)]
            g.kind, g.matmul = "matmul", m
            g.notes.append(f"epilogue fused into matmul {m.type_str()}")
            reasons[id(m)] = f"fused into the kernel of its epilogue ({node.op})"

    def fuse_reductions(self) -> None:
        stored, groups, reasons = self.stored, self.groups, self.reasons
        position = {id(n): i for i, n in enumerate(self.order)}
        for r in reversed(self.order):
            if r.op not in REDUCE or id(r) not in stored or id(r) in self.out_ids:
                continue
            roots = self.readers_root(r)
            if len(roots) != 1:
                reasons[id(r)] = f"reduction read by {len(roots)} kernels: stored"
                continue
            k = groups[next(iter(roots))]
            why = self.stage_legal(r, k)
            if why:
                reasons[id(r)] = f"reduction stored: {why}"
                continue
            stored.discard(id(r))
            del groups[id(r)]
            k.kind = "reduce"
            k.stages.append(r)
            k.stages.sort(key=lambda n: position[id(n)])
            reasons[id(r)] = f"fused as a stage of kernel {k.name}"

    def merge_elementwise_outputs(self) -> None:
        """Kernel B computes and stores the root of an earlier elementwise kernel A as
        well (A's kernel goes) when both are plain elementwise kernels over one shape, B
        reads A's root only at its own index (as is, or an identity view) if at all, no
        kernel between A and B reads it (it is now written at B's place), and the sum
        stays under MAX_KERNEL_OPS.  Reading it saves its trip through memory (an
        optimizer's momentum, then the update); not reading it saves a launch (an LSTM
        cell's three sigmoid gates)."""
        groups, position = self.groups, {id(n): i for i, n in enumerate(self.order)}
        kernel_of = {}  # id(stored node) -> id(root of the kernel that stores it), where not its own
        earlier = {}    # domain -> the plain elementwise kernels so far, in order
        for n in [n for n in self.order if id(n) in groups and id(n) in self.stored]:
            b = groups[id(n)]  # an absorbed kernel is always an earlier one
            if not _plain_elementwise(b):
                continue
            members = _members(b, self.stored)
            if _gathers(members):
                continue
            read = {id(m.srcs[0] if m.op == "view" else m) for m in members}
            candidates = earlier.setdefault(b.domain, [])
            # the last few kernels over this shape (a step has hundreds: checking them all
            # is quadratic), those b reads first: merging those also saves memory traffic
            for a in sorted(candidates[-MERGE_WINDOW:], key=lambda a: id(a.root) not in read):
                moved = a.extra + [a.root]
                if not all(self._readers_after(r, b, position, kernel_of) and
                           self._only_read_at_own_index(r, b, members) for r in moved):
                    continue
                if self.tree_size(b.root, {}) + sum(self.tree_size(r, {}) for r in moved + b.extra) > MAX_KERNEL_OPS:
                    continue
                b.extra.extend(moved)
                members = _members(b, self.stored)
                kernel_of.update((id(r), id(b.root)) for r in moved)
                b.notes.append(f"also stores {', '.join(r.op + ' ' + r.type_str() for r in moved)}")
                del groups[id(a.root)]
                candidates.remove(a)
                for r in moved:
                    self.reasons[id(r)] = f"{self.reasons.get(id(r), 'stored')}; stored by the kernel of " \
                                          f"{b.root.op} {b.root.type_str()} with its own root (several outputs)"
            candidates.append(b)

    def absorb_into_matmuls(self) -> None:
        """A matmul kernel A also computes and stores what a later plain elementwise
        kernel B over A's result stores (B's kernel goes) when B reads A's result only
        at its own index, everything else B reads is stored before A runs, and the sum
        stays under MAX_KERNEL_OPS.  An optimizer's update of a weight (SGD's momentum
        and parameter, Adam's m, v and parameter) then happens as the weight's gradient
        is written back: one pass over the weight's memory and one launch less per
        layer and step.  B may read the result reshaped (a convolution's weight
        gradient, a matmul result read as K x K x Cin x Cout): element for element in
        memory order."""
        groups, stored = self.groups, self.stored
        position = {id(n): i for i, n in enumerate(self.order)}
        owner = {id(n): id(g.root) for g in groups.values() for n in g.extra + [g.root]}
        for a in [g for g in groups.values() if g.kind == "matmul" and g.root.shape == g.matmul.shape]:
            here = position[id(a.root)]
            readers = {owner.get(r, r) for r in self.readers_root(a.root)}  # an extra root: its kernel
            for rid in sorted(readers, key=position.get):
                b = groups.get(rid)
                if b is None or not _plain_elementwise(b) or math.prod(b.domain) != a.root.size:
                    continue
                members = _members(b, stored)
                if _gathers(members) or not _reads_in_memory_order(a.root, b, members):
                    continue
                if b.domain != a.root.shape and any(m.arg.reshape(a.root.shape) is None
                                                    for m in members if m.op == "view"):
                    continue  # the matmul kernel computes it over its own shape
                moved = b.extra + [b.root]
                own = {id(n) for n in moved} | {id(a.root)}
                loads = [m.srcs[0] if m.op == "view" else m for m in members]
                if any(id(n) in stored and id(n) not in own and n.op not in LEAVES and
                       position[owner.get(id(n), id(n))] > here for n in loads):
                    continue  # B reads something computed after A
                if sum(self.tree_size(r, {}) for r in [a.root] + a.extra + moved) > MAX_KERNEL_OPS:
                    continue
                a.extra.extend(moved)
                owner.update((id(r), id(a.root)) for r in moved)
                a.notes.append(f"also stores {', '.join(r.op + ' ' + r.type_str() for r in moved)}")
                del groups[rid]
                for r in moved:
                    self.reasons[id(r)] = f"{self.reasons.get(id(r), 'stored')}; stored by the matmul kernel of " \
                                          f"{a.root.op} {a.root.type_str()} as it writes that back (several outputs)"

    @staticmethod
    def _only_read_at_own_index(r, b: Group, members) -> bool:
        """Every read of `r` in kernel `b` (whose members are `members`) is at `b`'s
        index (as is, or an identity view)."""
        same = View.contiguous(b.domain)
        return r.shape == b.domain and all(m.arg == same for m in members if m.op == "view" and m.srcs[0] is r)

    def _readers_after(self, r, b: Group, position, kernel_of) -> bool:
        """No kernel but `b` that reads `r` comes before `b`."""
        kernels = {kernel_of.get(k, k) for k in self.readers_root(r)} - {id(b.root)}
        return all(position[k] > position[id(b.root)] for k in kernels)

    def stage_legal(self, r, k: Group) -> str:
        """Why reduction `r` cannot become a stage of kernel `k` ("" if it can)."""
        if k.kind not in ("elementwise", "reduce"):
            return f"its reader is a {k.kind} kernel"
        if k.root.op == "assemble":  # its pieces become kernels of their own, without stages
            return "its reader is an assemble (one kernel per piece)"
        if self.read_by_gather(r):
            return "a gather reads it at data-dependent positions"
        full, kept = r.srcs[0].shape, r.shape
        if k.stages and (k.stages[0].srcs[0].shape != full or k.stages[0].arg != r.arg):
            return "the reader already reduces another domain"
        domain = k.root.shape if k.root.op not in REDUCE else full
        if domain != full and _squeeze(domain) != _squeeze(kept):
            return f"reader shape {domain} is neither the reduced input {full} nor the result {kept}"
        broadcast = View(full, View.contiguous(kept).strides)
        for v in self.consumers[id(r)]:
            if v.op != "view":
                return "read without a view"
            if v.shape == full:
                if v.arg != broadcast:
                    return f"read through {v.arg}, not broadcast along the reduced axes"
            elif not (v.arg.is_contiguous() and v.arg.offset == 0 and _squeeze(v.shape) == _squeeze(kept)
                      and domain != full):
                return f"read through {v.arg}"
        return ""

    def read_by_gather(self, r) -> bool:
        """A stage leaves one value per kept index in a register; a gather reading the
        reduction (or an expression of it) needs it at other indices."""
        return any(c.op in ("gather", "scatter_add") for c in
                   self.consumers_reached(r, lambda c: c.op in ELEMENTWISE or c.op == "view"))


def _new_group(n) -> Group:
    if n.op in REDUCE:
        return Group("reduce", n, stages=[n])
    if n.op == "matmul":
        return Group("matmul", n, matmul=n)
    if n.op == "scatter_add":
        return Group("scatter", n)
    return Group("elementwise", n)


def _plain_elementwise(g: Group) -> bool:
    """An elementwise kernel storing its root over its shape (no stages, no pieces)."""
    return g.kind == "elementwise" and not g.stages and g.root.op in ELEMENTWISE


def _gathers(members) -> bool:
    """The kernel reads at other indices than its own (a gather inlined)."""
    return any(m.op == "gather" for m in members)


def _reads_in_memory_order(r, b: Group, members) -> bool:
    """Kernel `b` (whose members are `members`) reads `r` only at the flat position of
    its own element: as is over its own shape, or through a contiguous reshape."""
    return all((m.srcs[0] is not r or _same_memory_order(m.arg, r.size)) if m.op == "view"
               else (m is not r or r.shape == b.domain) for m in members)


def _same_memory_order(view: View, size: int) -> bool:
    """The view reads a stored result as is, possibly reshaped (conv's output)."""
    return view.is_contiguous() and view.offset == 0 and math.prod(view.shape) == size


def _squeeze(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


#: at most this many pieces of an assemble are written by one kernel.  A kernel walks
#: its pieces side by side, a read and a write stream each; an LSTM's pieces (one per
#: time step) lie a multiple of 16 KB apart, so 20 of them had 40 streams in the same
#: cache sets: stacking its 20 gate gradients of 16x256 took 210-214 us in one kernel,
#: 11-13 us a kernel of four (55-60 in all)
PIECES_PER_KERNEL = 4


def _assemble_groups(n) -> list:
    """An assemble is a zero fill (unless the pieces cover it) and a kernel per shape
    of its pieces and per PIECES_PER_KERNEL of them (an LSTM's four gate gradients:
    one kernel)."""
    covered = sum(s.size for s in n.srcs)
    total = n.size
    groups = [] if covered == total else [Group("fill", n)]
    by_shape = {}
    for i, s in enumerate(n.srcs):
        by_shape.setdefault(s.shape, []).append(i)
    return groups + [Group("piece", n, pieces=ix[k:k + PIECES_PER_KERNEL])
                     for ix in by_shape.values() for k in range(0, len(ix), PIECES_PER_KERNEL)]
