"""What a kernel of the fused graph is: a `Group` (its root, fused stages, matmul,
extra roots) and the folded nodes it evaluates; an assemble's kernels."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.nodes import REDUCE

#: nodes no kernel computes: kernels read them
LEAVES = ("buffer", "const", "param")


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
    #: (an elementwise kernel: fusion_outputs.merge_elementwise_outputs; a matmul kernel, over
    #: its result's shape: fusion_outputs.absorb_into_matmuls)
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


def members_of(g: Group, stored: set) -> list:
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


def new_group(n) -> Group:
    if n.op in REDUCE:
        return Group("reduce", n, stages=[n])
    if n.op == "matmul":
        return Group("matmul", n, matmul=n)
    if n.op == "scatter_add":
        return Group("scatter", n)
    return Group("elementwise", n)


#: at most this many pieces of an assemble are written by one kernel.  A kernel walks
#: its pieces side by side, a read and a write stream each; an LSTM's pieces (one per
#: time step) lie a multiple of 16 KB apart, so 20 of them had 40 streams in the same
#: cache sets, and evicted each other's lines; a few streams fit
PIECES_PER_KERNEL = 4


def assemble_groups(n) -> list:
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
