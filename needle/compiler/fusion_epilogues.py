"""Matmul epilogues: a matmul read once, as is, by an elementwise chain (bias add,
activation) is computed by the kernel of that chain, which applies the chain as it
stores the matmul's result: one kernel, one pass over C.  Where the chain forks, the
matmul kernel stores the node at the fork instead of its own result.  `f` is the
state of one fusion (fusion.Fusion)."""
from __future__ import annotations

from ..ir.nodes import ELEMENTWISE
from .kernel_groups import Group
from .views import same_memory_order


def fuse_matmul_epilogues(f) -> None:
    stored, consumers, groups, reasons = f.stored, f.consumers, f.groups, f.reasons
    for m in f.order:
        if m.op != "matmul" or id(m) in f.out_ids:
            continue
        readers = consumers[id(m)]
        if len(readers) != 1 or readers[0].op != "view" or not same_memory_order(readers[0].arg, m.size):
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
