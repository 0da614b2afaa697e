"""Pass 0 — sums of matmuls: A1 @ B1 + A2 @ B2 + ... with short inner sizes becomes
one matmul of the operands laid side by side, [A1 A2 ...] @ [B1; B2; ...].

A weight used at every step of an unrolled RNN gets its gradient as a sum over the
steps, h_t^T @ d_t: an LSTM's (batch 16, 20 steps) is 20 matmuls of 64x16 by 16x256,
each far below the machine's speed (K = 16 fills no register tile's depth) and each
writing its 64x256 product for the sum to read back.  Laid side by side, a term costs
a copy of its operands, M K + K N elements, where its product cost M N to write and
read: a term qualifies when K (M + N) < M N.  The two side-by-side operands are
assembles (one kernel each: their pieces have one shape), and the one matmul, K = 320,
runs at full speed and on every thread.

Input and output: the IR graph (outputs), before view folding; the rewritten graph
computes the same sum, up to the order of its float additions.  Only a chain of
`add` nodes used once (or the chain's root) is taken apart, only 2-D matmuls that the
chain alone reads are merged, and the chain's other terms are added back.
"""
from __future__ import annotations

from ..ir.nodes import Node, rebuild, toposort


def merge_matmul_sums(outputs) -> list:
    """`outputs` with every qualifying sum of matmuls rewritten (the same nodes when
    there is none)."""
    order = toposort(outputs)
    users = {}
    for n in order:
        for s in n.srcs:
            users[id(s)] = users.get(id(s), 0) + 1
    requested = {id(o) for o in outputs}

    def inner(n) -> bool:  # an add whose only reader is the add above it
        return n.op == "add" and users.get(id(n)) == 1 and id(n) not in requested

    readers = {}  # id(node) -> the add reading it, for the adds that only one add reads
    for n in order:
        if n.op == "add":
            for s in n.srcs:
                if inner(s):
                    readers[id(s)] = n

    def merge(n, new):
        if n.op == "add" and id(n) not in readers:
            return _merged(_terms(n, readers), users, requested, new)
        return None
    return rebuild(outputs, merge, order)


def _terms(root, readers) -> list:
    """The terms of the add chain under `root`, left to right."""
    terms, stack = [], [root]
    while stack:
        n = stack.pop()
        if n.op == "add" and (n is root or readers.get(id(n)) is not None):
            stack.extend(reversed(n.srcs))
        else:
            terms.append(n)
    return terms


def _qualifies(term, users, requested) -> bool:
    """A 2-D matmul that only the sum reads, whose operands cost less to copy than
    its product does to store and read back."""
    if term.op != "matmul" or term.ndim != 2 or users.get(id(term)) != 1 or id(term) in requested:
        return False
    (m, k), n = term.srcs[0].shape, term.shape[1]
    return 0 < k and k * (m + n) < m * n


def _merged(terms, users, requested, new):
    """The sum of `terms` with its qualifying matmuls merged into one, or None when
    fewer than two qualify."""
    matmuls = [t for t in terms if _qualifies(t, users, requested)]
    if len(matmuls) < 2:
        return None
    root_like = matmuls[0]
    (m, _), n = root_like.srcs[0].shape, root_like.shape[1]
    dtype, device, origin = root_like.dtype, root_like.device, root_like.origin
    a_pieces, b_pieces, k = [], [], 0
    for t in matmuls:
        a, b = (new.get(id(s), s) for s in t.srcs)
        step = a.shape[1]
        a_pieces.append((a, ((0, m, 1), (k, k + step, 1))))
        b_pieces.append((b, ((k, k + step, 1), (0, n, 1))))
        k += step
    side = [Node("assemble", tuple(p for p, _ in pieces), tuple(ix for _, ix in pieces), shape, dtype, device,
                 origin) for pieces, shape in ((a_pieces, (m, k)), (b_pieces, (k, n)))]
    total = Node("matmul", tuple(side), None, (m, n), dtype, device, origin)
    merged = {id(t) for t in matmuls}
    for t in terms:
        if id(t) not in merged:
            total = Node("add", (total, new.get(id(t), t)), None, total.shape, dtype, device, origin)
    return total
