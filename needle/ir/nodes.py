"""The IR: a handful of primitive node kinds, each with a shape and a dtype.

Families (tinygrad-style: few primitives, every frontend op lowers to them):

- load:        buffer (realized data: an NDArray read through its strides),
               const (a baked scalar), param (a scalar passed at run time)
- elementwise: unary (neg exp log tanh sqrt abs), binary (add sub mul div pow
               max min lt le eq ne), where, cast
- reduce:      reduce_sum, reduce_max over axes (reduced axes kept as size 1)
- movement:    reshape permute expand pad shrink flip stride window as_strided
- matmul:      batched (..., m, k) @ (..., k, n) with equal batch shapes
- assemble:    zeros of a shape with pieces written into basic-index slices
               (concatenate, stack, dilate and getitem's adjoint)
- indexing:    gather (read at data-dependent indices: advanced indexing,
               embeddings) and scatter_add (its adjoint: add values at them)
- copy:        materialize a contiguous copy

A node is immutable except for realization: once computed it turns into a
`buffer` node holding the result and drops its sources, so graphs are freed.
"""
from __future__ import annotations

import itertools

UNARY = ("neg", "exp", "log", "tanh", "sqrt", "abs", "sigmoid")
BINARY = ("add", "sub", "mul", "div", "pow", "max", "min", "lt", "le", "eq", "ne")
COMPARE = ("lt", "le", "eq", "ne")
ELEMENTWISE = UNARY + BINARY + ("where", "cast")
REDUCE = ("reduce_sum", "reduce_max")
MOVEMENT = ("reshape", "permute", "expand", "pad", "shrink", "flip", "stride", "window", "as_strided")
LOAD = ("buffer", "const", "param")
INDEXING = ("gather", "scatter_add")
OTHER = ("matmul", "assemble", "copy") + INDEXING
ALL_OPS = LOAD + ELEMENTWISE + REDUCE + MOVEMENT + OTHER

SHORT_DTYPE = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}

_ids = itertools.count()


class RuntimeScalar(float):
    """A Python number that is read again at each replay of a captured step
    (`needle.jit`): `provider()` recomputes it (an optimizer's learning rate, its
    bias corrections).  Never baked into a kernel, so the kernel serves every value."""

    __slots__ = ("provider", "nodes")

    def __new__(cls, provider):
        self = super().__new__(cls, provider())
        self.provider = provider
        self.nodes = None  # its `param` node per (shape, dtype, device), weakly: ir.build.param
        return self

    @property
    def value(self) -> "RuntimeScalar":
        """It is its own Scalar (see Scalar): every float `param` node made from it
        shares one run-time slot."""
        return self


class Scalar:
    """The value of a `param` node, shared (by identity) with every node derived
    from it, so the runtime finds one slot per user scalar."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


class Node:
    """One IR node.  `arg` holds the op's static parameter (axes, shape, value,
    the NDArray of a buffer, ...); `origin` names the frontend op it came from."""

    __slots__ = ("op", "srcs", "arg", "shape", "dtype", "device", "origin", "uid", "consumed", "__weakref__")

    def __init__(self, op: str, srcs: tuple, arg, shape: tuple, dtype: str, device, origin: str = ""):
        self.op = op
        self.srcs = srcs
        self.arg = arg
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.origin = origin
        self.uid = next(_ids)
        self.consumed = False  # read by a node built later (lazy setitem must not rewrite it)

    __hash__ = object.__hash__  # identity (LazyArray overloads == elementwise)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def realized(self):
        """The NDArray holding this node's value, or None while it is pending."""
        return self.arg if self.op == "buffer" else None

    def become_buffer(self, array) -> None:
        """Realization: hold the computed NDArray and forget how it was computed."""
        self.op, self.srcs, self.arg = "buffer", (), array

    def describe_arg(self) -> str:
        """The static parameter as short text for dumps."""
        if self.op == "buffer":
            a = self.arg
            return "" if a.is_contiguous() and a.offset == 0 else f"strides={a.strides} offset={a.offset}"
        if self.op in ("const", "param"):
            return repr(self.arg)
        if self.op == "cast":
            return SHORT_DTYPE[self.arg]
        if self.op == "assemble":
            return "[" + ", ".join(_fmt_index(ix) for ix in self.arg) + "]"
        if self.arg is None:
            return ""
        return str(self.arg).replace(" ", "")

    def type_str(self) -> str:
        return f"{SHORT_DTYPE.get(self.dtype, self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        return f"<{self.op} {self.type_str()} #{self.uid}>"


def _fmt_index(index) -> str:
    return "[" + ",".join(f"{a}:{b}:{c}" for a, b, c in index) + "]"


def is_single_op(nodes) -> bool:
    """An eager op's graph: one node over loads (one plan and one kernel serve every
    line of the user's that runs the op)."""
    return len(nodes) == 1 and all(s.op in LOAD for s in nodes[0].srcs)


def toposort(outputs) -> list:
    """Nodes reachable from `outputs`, sources before users: the order of a recursive
    depth-first post-order (traversal.postorder's), without the recursion.  Written
    for nodes because every realize walks its graph: sources are iterated in place,
    and leaves (loads) are emitted without a stack frame of their own."""
    seen, order = set(), []
    for root in outputs:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root.srcs))]
        while stack:
            node, srcs = stack[-1]
            for src in srcs:
                if id(src) not in seen:
                    seen.add(id(src))
                    if src.srcs:
                        stack.append((src, iter(src.srcs)))
                        break
                    order.append(src)
            else:
                stack.pop()
                order.append(node)
    return order


def rebuild(outputs, replace, order=None) -> list:
    """The graph of `outputs` with `replace(node, new)` applied to each node, sources
    first (`new` maps id(old node) -> its replacement so far; None keeps the node), for
    the compiler's rewriting passes: a node whose sources were replaced is rebuilt
    over the new ones, the rest stay the same objects.  `order`: toposort(outputs),
    when the caller has it."""
    new = {}
    for n in order if order is not None else toposort(outputs):
        found = replace(n, new)
        if found is not None:
            new[id(n)] = found
            continue
        srcs = tuple(new.get(id(s), s) for s in n.srcs)
        if any(a is not b for a, b in zip(srcs, n.srcs)):
            new[id(n)] = Node(n.op, srcs, n.arg, n.shape, n.dtype, n.device, n.origin)
    return [new.get(id(o), o) for o in outputs]
