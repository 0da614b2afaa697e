"""Pass 1 — view folding: every chain of movement ops becomes one `view` node.

Input: the IR graph (outputs).  Output: a new graph with no movement ops, where
every read of a *base* (a buffer, const, param, or a node that will be stored:
reduce, matmul, assemble, copy) goes through one `view` node whose arg is a
`View` (shape, strides, offset, mask) over the base's layout — the NDArray's own
strides for buffers, row-major for stored results.

Movement commutes with elementwise ops, so chains are pushed *through*
elementwise nodes down to the bases: reshape(exp(x)) = exp(reshape(x)).  Padding
does not commute (exp(0) = 1), so a chain that pads wraps the pushed expression in
`where(valid, ..., 0)`.  Pushing duplicates an elementwise node seen through two
different views; that is only done when the node is cheap or used once, else it
stays a base and is stored.  A reshape that strides cannot express stores the
partial view first (a `copy`), and reads the copy.

Guarantees: the result computes the same values as the input graph; it has no
movement nodes; every `view` node reads a base; `materialized` names each node
the pass decided to store, with the reason.  A `gather` read as is stays inline
(its reader's kernel computes it); read through movement it becomes a base.
"""
from __future__ import annotations

import functools
import math

from ..ir.nodes import ELEMENTWISE, MOVEMENT, Node
from .cost import CHEAP_OPS, subtree_cost
from .views import View

#: a conv's matmul reads its windows themselves (conv_gemm.window_operand) along runs of
#: at least WINDOW_RUN channels (a window's contiguous last axis; an RGB image's 3 are
#: packed from a stored im2col copy)
WINDOW_RUN = 16
#: a buffer padded to at least this many times its size (a 3x3 conv's 1-pixel border
#: around an image of at most 20 x 20) is stored padded before a conv's matmul reads its
#: windows: read in place, a window that reads some padding is copied, masked, to the
#: matmul's row buffer first, and most of a small image's windows do (a deep CNN's last
#: layers); a large image's border is too small a share to pay for the copy
PADDED_COPY_MIN_RATIO = 1.2


class FoldedGraph:
    """The result of view folding: new output nodes, and why nodes are stored."""

    def __init__(self, outputs, reasons):
        self.outputs = outputs
        self.reasons = reasons  # {id(node): reason} for nodes the pass chose to store


def fold_views(outputs, read_windows: bool = False) -> FoldedGraph:
    """`read_windows`: the target's matmuls read a conv's windows in place, so
    windows are read from a stored copy of a computed or channels-first source
    (`split_point`)."""
    return _Folder(outputs, read_windows).run()


def consumer_counts(outputs) -> dict:
    from ..ir.nodes import toposort
    counts = {}
    for node in toposort(outputs):
        for s in node.srcs:
            counts[id(s)] = counts.get(id(s), 0) + 1
    return counts


def _written(out):
    """An output that folded to a leaf (a constant, a run-time scalar, or a view of a
    buffer read in place) has no kernel computing it, yet its slot must be written:
    a copy writes it."""
    if out.op in ("buffer", "const", "param"):
        return Node("copy", (out,), None, out.shape, out.dtype, out.device, out.origin)
    return out


class _Folder:
    def __init__(self, outputs, read_windows: bool):
        self.outputs = outputs
        self.read_windows = read_windows
        self.consumers = consumer_counts(outputs)
        self.output_ids = {id(n) for n in outputs}
        self.memo = {}
        self.bases = {}
        self.reasons = {}

    def run(self) -> FoldedGraph:
        return FoldedGraph([_written(self.fold(n, ())) for n in self.outputs], self.reasons)

    # chain: movement ops (op, arg) to apply to `node`, first element applied first
    def fold(self, node, chain):
        key = (id(node), chain)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        stack = [(node, chain)]
        # iterative post-order so that deep graphs do not recurse
        while stack:
            n, ch = stack[-1]
            deps = self._deps(n, ch)
            missing = [d for d in deps if (id(d[0]), d[1]) not in self.memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if (id(n), ch) not in self.memo:
                self.memo[(id(n), ch)] = self._build(n, ch)
        return self.memo[key]

    def _deps(self, n, ch):
        if n.op in MOVEMENT:
            return [(n.srcs[0], ((n.op, n.arg),) + ch)]
        if n.op in ELEMENTWISE and self._pushable(n, ch):
            k, _ = split_point(n.shape, ch, self.read_windows)
            if k is not None:  # push the expressible part, store, read the copy
                return [(n, ch[:k])]
            return [(s, ch) for s in n.srcs]
        return [(s, ()) for s in n.srcs]

    def _pushable(self, n, ch) -> bool:
        """Whether `n` read through `ch` is computed again over the view.  Never an
        output: it is stored anyway, and a reader that computed it again (a matmul
        reading a transposed weight the schedule also stores) would round its sum
        by another body than a reader of the stored value (LLVM vectorizes a sum by
        its body): a value's readers would see other bits depending on whether it
        was realized before or with them (needle.jit's replays realize state apart)."""
        if not ch:
            return True
        if id(n) in self.output_ids:
            return False
        return self.consumers.get(id(n), 0) <= 1 or subtree_cost(n) <= CHEAP_OPS

    def _build(self, n, ch):
        memo = self.memo
        if n.op in MOVEMENT:
            return memo[(id(n.srcs[0]), ((n.op, n.arg),) + ch)]
        if n.op in ELEMENTWISE and not ch and id(n) in self.output_ids:
            return self._base(n)  # (one node, whether read as is or through views)
        if n.op in ELEMENTWISE and self._pushable(n, ch):
            k, why = split_point(n.shape, ch, self.read_windows)
            if k is not None:
                partial = memo[(id(n), ch[:k])]
                return self._apply(self._copy(partial, why), ch[k:])
            srcs = tuple(memo[(id(s), ch)] for s in n.srcs)
            shape = srcs[0].shape if srcs else n.shape
            out = Node(n.op, srcs, n.arg, shape, n.dtype, n.device, n.origin)
            if any(op == "pad" for op, _ in ch):  # zero where the chain padded
                valid = self._apply(Node("const", (), True, n.shape, "bool", n.device, n.origin), ch)
                zero = Node("const", (), 0, shape, n.dtype, n.device, n.origin)
                out = Node("where", (valid, out, zero), None, shape, n.dtype, n.device, n.origin)
            return out
        if n.op == "gather" and not ch:  # read as is: inlined into its reader's kernel
            return self._base(n)
        return self._apply(self._base(n), ch)

    def _base(self, n):
        """`n` rebuilt over folded sources, once (its sources are already folded)."""
        base = self.bases.get(id(n))
        if base is None:
            srcs = tuple(self.memo[(id(s), ())] for s in n.srcs)
            base = self.bases[id(n)] = Node(n.op, srcs, n.arg, n.shape, n.dtype, n.device, n.origin)
            if n.op in ELEMENTWISE and id(n) not in self.output_ids:  # (an output is stored anyway)
                self.reasons[id(base)] = ("read through several different views and too costly to "
                                          f"recompute (cost {subtree_cost(n)})")
        return base

    def _apply(self, base, chain):
        """`base` read through the movement chain: a view node (or the base itself
        for an unmasked scalar)."""
        view = base_view(base)
        for k, (op, arg) in enumerate(chain):
            why = _stored_before_windows(base, view, op, arg) if self.read_windows else None
            moved = None if why else move(view, op, arg)
            if moved is None:  # store what we have, continue on the copy
                why = why or f"{op} {arg} cannot be expressed as a view of {view}"
                copy = self._copy(self._view_node(base, view), why)
                return self._apply(copy, chain[k:])
            view = moved
        if base.op in ("const", "param") and not view.mask and not view.empty:
            return Node(base.op, (), base.arg, view.shape, base.dtype, base.device, base.origin)
        return self._view_node(base, view)

    def _copy(self, node, reason):
        copy = Node("copy", (node,), None, node.shape, node.dtype, node.device, node.origin)
        self.reasons[id(copy)] = reason
        return copy

    @staticmethod
    def _view_node(base, view):
        return Node("view", (base,), view, view.shape, base.dtype, base.device, base.origin)


@functools.lru_cache(maxsize=4096)
def split_point(shape, chain, read_windows: bool) -> tuple:
    """(k, reason): pushing `chain` into an elementwise node of `shape` stops before
    op k, and the node read through ops[:k] is stored (a copy; `reason` names why),
    or (None, None) when the whole chain goes down.  It stops at an op no view can
    express, and (`read_windows`) at a window that reads each element up to its
    kernel's size times along runs of at least WINDOW_RUN channels (a conv of a
    computed activation): then the activation is
    stored once, in the windows' layout and padded, and the conv's matmul reads the
    windows in place from it (implicit GEMM, no masked taps) instead of an im2col
    copy that computes the expression at every window position."""
    view = View.contiguous(shape)
    for k, (op, arg) in enumerate(chain):
        if read_windows and reads_windows(view, op, arg):
            return k, "stored before its windows are read (each element up to " \
                      f"{math.prod(arg[1])} times): the conv's matmul reads them in place"
        moved = move(view, op, arg)
        if moved is None:
            return k, f"{op} {arg} cannot be expressed as a view of {view.shape}"
        view = moved
    return None, None


def _stored_before_windows(base, view: View, op: str, arg):
    """Why `base`, read through `view`, is stored before the windows of (op, arg) are
    read (a conv's matmul then reads them in place, unmasked), or None: its channels lie
    apart (NCHW data; a last axis of one element has no stride to fix), or padding makes
    it at least PADDED_COPY_MIN_RATIO times larger (a small image)."""
    if not reads_windows(view, op, arg):
        return None
    if view.strides[-1:] != (1,) and view.shape[-1:] != (1,):
        return "stored with its channels contiguous before its windows are read: the conv's matmul reads them in place"
    if view.mask and math.prod(view.shape) >= PADDED_COPY_MIN_RATIO * math.prod(base.shape):
        return "stored padded before its windows are read: a small image's windows mostly read some padding"
    return None


def reads_windows(view: View, op: str, arg) -> bool:
    """Whether movement op (op, arg) on `view` takes overlapping windows (a conv's)
    along runs of at least WINDOW_RUN elements of the last axis."""
    return op == "window" and math.prod(arg[1]) > 1 and view.ndim - 1 not in arg[0] and \
        view.shape[-1] >= WINDOW_RUN


def base_view(base) -> View:
    """How a base is laid out: buffers by their NDArray strides (the offset is added
    to the pointer at run time), scalars everywhere, stored results row-major."""
    if base.op == "buffer":
        return View.strided(base.arg.shape, base.arg.strides)
    if base.op in ("const", "param"):
        return View.strided(base.shape, (0,) * len(base.shape))
    return View.contiguous(base.shape)


@functools.lru_cache(maxsize=4096)
def move(view: View, op: str, arg):
    """Apply one movement op to a view; None when it cannot be expressed.  (Memoized,
    as `split_point`: pure, and a graph asks the same of the same views many times;
    planning ResNet9's step spent half its time here.)"""
    if op == "reshape":
        return view.reshape(arg)
    if op == "permute":
        return view.permute(arg)
    if op == "expand":
        return view.expand(arg)
    if op == "pad":
        return view.pad(arg)
    if op == "shrink":
        return view.shrink(arg)
    if op == "flip":
        return view.flip(arg)
    if op == "stride":
        return view.stride(arg)
    if op == "window":
        return view.window(*arg)
    if op == "as_strided":
        return view.as_strided(*arg)
    raise ValueError(f"view folding: unknown movement op {op!r}")
