"""Row reductions, the generic nest: the kept axes outside (in memory order), the
reduced axes inside; each fused stage folds its values into an accumulator that later
stages and the stores read (softmax: max, then sum of exp, then the broadcast back)."""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from .kernel_exprs import contains, costly, is_float, replace
from .loop_collapse import collapse_loops
from .loop_nests import domain_index, linear, nest, nest_loops, reduce_loops
from .lowering import combine
from .row_jam import jam_rows
from .row_lanes import lane_rows
from .views import View


def reduce_rows(low) -> K.Kernel:
    """The kernel of a reduce group: per kept index (threads split the outermost),
    each stage accumulated over the reduced loops, then the root stored; short rows
    are reduced in SIMD lanes (row_lanes) or four at a time (row_jam)."""
    g = low.group
    index, (kept, red) = domain_index(g), reduce_loops(g)

    def over_reduced(body):
        return nest_loops(red, body)
    body, last_pass = [], 0
    for stage in g.stages:
        last_pass = len(body) + 1  # after the accumulator's declaration
        body += low.accumulate(stage, index, over_reduced)
    result = None
    if id(g.root) not in low.accs and not g.epilogue():
        body[last_pass:], result = _store_while_summing(low, body[last_pass:], index, red)
    body += low.store_root(index, kept, lambda s: s, over_reduced, result)
    loops, body = _memory_order(g, kept), collapse_loops(body)
    row = math.prod(n for _, n in red)
    loops, body = lane_rows(loops, body, row, low.lanes) or jam_rows(loops, body, row) or (loops, body)
    return low.kernel(*nest(loops, body), work=math.prod(g.domain))


def _memory_order(g, kept) -> list:
    """The kept loops outermost to innermost by how far a step moves in the widest
    view the kernel reads over its domain (its input), the shortest innermost: NHWC
    data reduced in NCHW order (a max pool after a conv) would walk its channels, each a
    pass over every cache line of the input, outermost."""
    views = [n.arg for n in g.members if n.op == "view" and n.shape == g.domain and not n.arg.mask]
    if not views or len(kept) < 2:
        return kept
    strides = max(views, key=lambda v: sum(abs(x) for x in v.strides)).strides
    step = {f"k{d}": abs(x) for d, x in enumerate(strides)}
    if any(step[v] == 0 for v, _ in kept):  # broadcast along a kept axis: keep the nest
        return kept
    return sorted(kept, key=lambda loop: -step[loop[0]])


def _store_while_summing(low, last_pass, index, red):
    """softmax's exp(x - max): store it while summing, read it back (from L1) in the
    broadcast-back pass instead of computing it twice; the output holds each value
    until overwritten.  (last pass, the root's value) with the rewrite, else as given."""
    g = low.group
    stage = g.stages[-1]
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    value, result = low.gen(stage.srcs[0], index), low.gen(g.root, index)
    if not (value.dtype == g.root.dtype and is_float(value.dtype) and costly(value) and contains(result, value)):
        return last_pass, None
    at = linear(index, View.contiguous(g.domain).strides, 0)
    acc, kept = low.accs[id(stage)], K.Load(out, at, value.dtype)
    loops = nest_loops(red, [K.Store(out, at, value),
                             K.Assign(acc.name, combine(stage.op, acc, kept, stage.dtype))])
    return loops, replace(result, value, kept)
