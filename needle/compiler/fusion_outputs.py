"""Several outputs per kernel: a kernel also computes and stores what an earlier
kernel over the same elements stores, when it reads that at its own index or not at
all (an optimizer's momentum and the parameter update from it; Adam's m, v and
parameter; an LSTM cell's gates, c and h): one pass over memory, one launch.  A matmul
kernel likewise takes over an elementwise kernel over its result (a weight's update
as its gradient is written back).  `f` is the state of one fusion (fusion.Fusion)."""
from __future__ import annotations

import math

from ..ir.nodes import ELEMENTWISE
from .cost import MAX_KERNEL_OPS
from .kernel_groups import LEAVES, Group, members_of
from .views import View, same_memory_order

#: how many earlier elementwise kernels over its shape a kernel may take over (several outputs)
MERGE_WINDOW = 8


def merge_elementwise_outputs(f) -> None:
    """Kernel B computes and stores the root of an earlier elementwise kernel A as
    well (A's kernel goes) when both are plain elementwise kernels over one shape, B
    reads A's root only at its own index (as is, or an identity view) if at all, no
    kernel between A and B reads it (it is now written at B's place), and the sum
    stays under MAX_KERNEL_OPS.  Reading it saves its trip through memory (an
    optimizer's momentum, then the update); not reading it saves a launch (an LSTM
    cell's three sigmoid gates)."""
    groups, position = f.groups, {id(n): i for i, n in enumerate(f.order)}
    kernel_of = {}  # id(stored node) -> id(root of the kernel that stores it), where not its own
    earlier = {}    # domain -> the plain elementwise kernels so far, in order
    for n in [n for n in f.order if id(n) in groups and id(n) in f.stored]:
        b = groups[id(n)]  # an absorbed kernel is always an earlier one
        if not _plain_elementwise(b):
            continue
        members = members_of(b, f.stored)
        if _gathers(members):
            continue
        read = {id(m.srcs[0] if m.op == "view" else m) for m in members}
        candidates = earlier.setdefault(b.domain, [])
        # the last few kernels over this shape (a step has hundreds: checking them all
        # is quadratic), those b reads first: merging those also saves memory traffic
        for a in sorted(candidates[-MERGE_WINDOW:], key=lambda a: id(a.root) not in read):
            moved = a.extra + [a.root]
            if not all(_readers_after(f, r, b, position, kernel_of) and
                       _only_read_at_own_index(r, b, members) for r in moved):
                continue
            if f.tree_size(b.root, {}) + sum(f.tree_size(r, {}) for r in moved + b.extra) > MAX_KERNEL_OPS:
                continue
            b.extra.extend(moved)
            members = members_of(b, f.stored)
            kernel_of.update((id(r), id(b.root)) for r in moved)
            b.notes.append(f"also stores {', '.join(r.op + ' ' + r.type_str() for r in moved)}")
            del groups[id(a.root)]
            candidates.remove(a)
            for r in moved:
                f.reasons[id(r)] = f"{f.reasons.get(id(r), 'stored')}; stored by the kernel of " \
                                   f"{b.root.op} {b.root.type_str()} with its own root (several outputs)"
        candidates.append(b)


def absorb_into_matmuls(f) -> None:
    """A matmul kernel A also computes and stores what a later plain elementwise
    kernel B over A's result stores (B's kernel goes) when B reads A's result only
    at its own index, everything else B reads is stored before A runs, and the sum
    stays under MAX_KERNEL_OPS.  An optimizer's update of a weight (SGD's momentum
    and parameter, Adam's m, v and parameter) then happens as the weight's gradient
    is written back: one pass over the weight's memory and one launch less per
    layer and step.  B may read the result reshaped (a convolution's weight
    gradient, a matmul result read as K x K x Cin x Cout): element for element in
    memory order."""
    groups, stored = f.groups, f.stored
    position = {id(n): i for i, n in enumerate(f.order)}
    owner = {id(n): id(g.root) for g in groups.values() for n in g.extra + [g.root]}
    for a in [g for g in groups.values() if g.kind == "matmul" and g.root.shape == g.matmul.shape]:
        here = position[id(a.root)]
        readers = {owner.get(r, r) for r in f.readers_root(a.root)}  # an extra root: its kernel
        for rid in sorted(readers, key=position.get):
            b = groups.get(rid)
            if b is None or not _plain_elementwise(b) or math.prod(b.domain) != a.root.size:
                continue
            members = members_of(b, stored)
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
            if sum(f.tree_size(r, {}) for r in [a.root] + a.extra + moved) > MAX_KERNEL_OPS:
                continue
            a.extra.extend(moved)
            owner.update((id(r), id(a.root)) for r in moved)
            a.notes.append(f"also stores {', '.join(r.op + ' ' + r.type_str() for r in moved)}")
            del groups[rid]
            for r in moved:
                f.reasons[id(r)] = f"{f.reasons.get(id(r), 'stored')}; stored by the matmul kernel of " \
                                   f"{a.root.op} {a.root.type_str()} as it writes that back (several outputs)"


def _only_read_at_own_index(r, b: Group, members) -> bool:
    """Every read of `r` in kernel `b` (whose members are `members`) is at `b`'s
    index (as is, or an identity view)."""
    same = View.contiguous(b.domain)
    return r.shape == b.domain and all(m.arg == same for m in members if m.op == "view" and m.srcs[0] is r)


def _readers_after(f, r, b: Group, position, kernel_of) -> bool:
    """No kernel but `b` that reads `r` comes before `b`."""
    kernels = {kernel_of.get(k, k) for k in f.readers_root(r)} - {id(b.root)}
    return all(position[k] > position[id(b.root)] for k in kernels)


def _plain_elementwise(g: Group) -> bool:
    """An elementwise kernel storing its root over its shape (no stages, no pieces)."""
    return g.kind == "elementwise" and not g.stages and g.root.op in ELEMENTWISE


def _gathers(members) -> bool:
    """The kernel reads at other indices than its own (a gather inlined)."""
    return any(m.op == "gather" for m in members)


def _reads_in_memory_order(r, b: Group, members) -> bool:
    """Kernel `b` (whose members are `members`) reads `r` only at the flat position of
    its own element: as is over its own shape, or through a contiguous reshape."""
    return all((m.srcs[0] is not r or same_memory_order(m.arg, r.size)) if m.op == "view"
               else (m is not r or r.shape == b.domain) for m in members)
