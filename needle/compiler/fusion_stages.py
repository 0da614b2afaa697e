"""Reduction stages: a reduction whose only reader is one kernel, reading it broadcast
back along the reduced axes (softmax, layernorm) or as is over the kept axes
(logsumexp's log and add), becomes a stage of that kernel, an inner loop that leaves
its result in a register: row softmax is one kernel.  `stage_legal` says why not,
where not.  `f` is the state of one fusion (fusion.Fusion)."""
from __future__ import annotations

from ..ir.nodes import ELEMENTWISE, REDUCE
from .kernel_groups import Group
from .views import View


def split_nested_reductions(f) -> None:
    """A reduction whose input reads reductions over another domain (the sum of a
    logsumexp, say) gets its input stored: then the inner reductions can fuse as
    stages of the kernel computing that input, instead of being stored apart.  Only
    when they can: the input's shape is an inner reduction's result or source (up
    to ones).  A batch norm's variance, split in partial sums (split_reductions),
    reads its mean, a reduction of the partial means: storing (x - mean)**2 for it
    would write and read back the whole input."""
    stored, groups, reasons = f.stored, f.groups, f.reasons
    for r in f.order:
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


def fuse_reductions(f) -> None:
    stored, groups, reasons = f.stored, f.groups, f.reasons
    position = {id(n): i for i, n in enumerate(f.order)}
    for r in reversed(f.order):
        if r.op not in REDUCE or id(r) not in stored or id(r) in f.out_ids:
            continue
        roots = f.readers_root(r)
        if len(roots) != 1:
            reasons[id(r)] = f"reduction read by {len(roots)} kernels: stored"
            continue
        k = groups[next(iter(roots))]
        why = stage_legal(f, r, k)
        if why:
            reasons[id(r)] = f"reduction stored: {why}"
            continue
        stored.discard(id(r))
        del groups[id(r)]
        k.kind = "reduce"
        k.stages.append(r)
        k.stages.sort(key=lambda n: position[id(n)])
        reasons[id(r)] = f"fused as a stage of kernel {k.name}"


def stage_legal(f, r, k: Group) -> str:
    """Why reduction `r` cannot become a stage of kernel `k` ("" if it can)."""
    if k.kind not in ("elementwise", "reduce"):
        return f"its reader is a {k.kind} kernel"
    if k.root.op == "assemble":  # its pieces become kernels of their own, without stages
        return "its reader is an assemble (one kernel per piece)"
    if read_by_gather(f, r):
        return "a gather reads it at data-dependent positions"
    full, kept = r.srcs[0].shape, r.shape
    if k.stages and (k.stages[0].srcs[0].shape != full or k.stages[0].arg != r.arg):
        return "the reader already reduces another domain"
    domain = k.root.shape if k.root.op not in REDUCE else full
    if domain != full and _squeeze(domain) != _squeeze(kept):
        return f"reader shape {domain} is neither the reduced input {full} nor the result {kept}"
    broadcast = View(full, View.contiguous(kept).strides)
    for v in f.consumers[id(r)]:
        if v.op != "view":
            return "read without a view"
        if v.shape == full:
            if v.arg != broadcast:
                return f"read through {v.arg}, not broadcast along the reduced axes"
        elif not (v.arg.is_contiguous() and v.arg.offset == 0 and _squeeze(v.shape) == _squeeze(kept)
                  and domain != full):
            return f"read through {v.arg}"
    return ""


def read_by_gather(f, r) -> bool:
    """A stage leaves one value per kept index in a register; a gather reading the
    reduction (or an expression of it) needs it at other indices."""
    return any(c.op in ("gather", "scatter_add") for c in
               f.consumers_reached(r, lambda c: c.op in ELEMENTWISE or c.op == "view"))


def _squeeze(shape) -> tuple:
    return tuple(s for s in shape if s != 1)
