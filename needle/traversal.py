"""Depth-first post-order over a DAG, iterative so that 10,000-deep graphs do not
hit Python's recursion limit.  Used for both the autograd graph and the IR."""
from __future__ import annotations


def postorder(roots, children) -> list:
    """Every node reachable from `roots`, each after all of `children(node)` (which
    are visited in order): the order of a recursive DFS, without the recursion."""
    seen, order = set(), []
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, children(root), 0)]
        while stack:
            node, kids, i = stack[-1]
            if i < len(kids):
                stack[-1] = (node, kids, i + 1)
                kid = kids[i]
                if id(kid) not in seen:
                    seen.add(id(kid))
                    stack.append((kid, children(kid), 0))
            else:
                stack.pop()
                order.append(node)
    return order
