"""The implicit GEMM: a conv is a matmul of its im2col windows (N*Ho*Wo x KH*KW*C) by
its weight, and on the CPU the matmul reads the windows from the input itself
instead of a stored im2col copy (KH*KW times the input's bytes written and read
again).  `window_operand` recognizes such an A; the forward's tiles read it in place
(`tap_loops`: K blocks are whole kernel taps, a run of C contiguous channels each) or,
with many output channels, pack row blocks of it (`window_rows`); a weight gradient's
A, the windows transposed, is packed from the input (`window_block`).  `tiling` is the
matmul's `matmul_tiling.Tiling`."""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from .kernel_exprs import unravel
from .loop_nests import linear, mask_expr
from .lowering import Lowering
from .view_folding import WINDOW_RUN
from .views import View, same_memory_order

#: a conv's forward reads its windows in place (`tap_loops`) for at most this many output
#: channels; with more, each tile of NR channels would read them again, and they are
#: packed once per row block instead (`window_rows`).  The conv rows of
#: `benchmarks/bench_cpu.py` and the CNN and ResNet9 steps of `bench_training.py` run
#: both sides of it
WINDOW_COLUMNS = 128


def window_operand(m):
    """(view, rows, transposed) when matmul `m`'s A is a reshape of a copy of the view
    node `view` whose last axis is contiguous in memory, unmasked and at least
    WINDOW_RUN long: a conv's im2col matrix of NHWC windows (N, Ho, Wo, KH, KW, C),
    read row-major (the forward: A's rows are the view's first `rows` axes) or
    transposed (the weight gradient, im2col^T @ G:
    A's depth is the first `rows` axes).  The matmul reads the windows themselves
    (the implicit GEMM, below), a run of C channels per kernel tap.  Else None."""
    if m.op != "matmul" or len(m.shape) != 2 or m.dtype not in ("float32", "float64"):
        return None
    a = m.srcs[0]
    if a.op != "view" or a.srcs[0].op != "copy" or a.srcs[0].srcs[0].op != "view":
        return None
    copy, view = a.srcs[0], a.srcs[0].srcs[0]
    if view.srcs[0].op in ("const", "param"):  # a scalar's windows: nothing to read
        return None
    w = view.arg
    last = w.ndim - 1
    if w.empty or w.strides[last] != 1 or w.shape[last] < WINDOW_RUN or any(c[last] for c, _, _ in w.mask):
        return None
    if same_memory_order(a.arg, copy.size):
        transposed, leading = False, a.shape[0]
    elif a.arg == View.contiguous(a.shape[::-1]).permute((1, 0)):
        transposed, leading = True, a.shape[1]
    else:
        return None
    rows = next((r for r in range(1, last + 1) if math.prod(w.shape[:r]) == leading), None)
    return None if rows is None else (view, rows, transposed)


def tap_loops(tiling, low: Lowering, pc, kc, ip, rows) -> list:
    """The depth loop of a tile when A is a conv's windows (`window_operand`): for
    each kernel tap of K block `pc`, a run of channels (k = tap * run + cc), each
    of the MR rows reading its window's run in place, from its own position in
    the input (the division of a row into (n, ho, wo) is the same for every tap
    and step, and hoisted out of them).  `rows(a_value)` is the update of the
    tile by one step.  A tap that all MR rows read inside the input (the most,
    away from the borders) reads in place; at the others the rows' runs are
    first copied to `runs`, zeros where a row reads padding (masked loads in the
    depth loop itself, a select per row and step, lost what reading in place saves).
    A tile whose rows read inside the input at every tap skips the per-tap test."""
    view, nrows, _ = tiling.window
    w = view.arg
    tt, cc = K.Var("tt"), K.Var("cc")
    tap = K.affine([(pc, tiling.KC // tiling.run), (tt, 1)])

    def window_index(r):  # row r of the tile (rows past M repeat the last), this tap, channel cc
        row = K.Binary("min", K.affine([(ip, tiling.MR), (r, 1)]), K.Const(tiling.M - 1), K.INDEX)
        return unravel(row, w.shape[:nrows]) + unravel(tap, w.shape[nrows:-1]) + (cc,)
    masked = low.gen(view, window_index(K.Var("r")))
    taps = K.idiv(kc, tiling.run)

    def over_run(a_value):  # the tile's steps along this tap's run, k = tap * run + cc
        return K.Loop("cc", tiling.run, [K.Let("kk", K.affine([(tt, tiling.run), (cc, 1)])), rows(a_value)])
    if not w.mask:
        return [K.Loop("tt", taps, [over_run(masked)])]
    inside = None  # the mask does not depend on the channel
    for r in range(tiling.MR):
        inside = K.land(inside, mask_expr(w, window_index(K.Const(r))))
    plain = K.Load(masked.buf, masked.index, masked.dtype)
    at_run = K.affine([(K.Var("r"), tiling.run), (cc, 1)])
    copy = K.Loop("r", tiling.MR, [K.Loop("cc", tiling.run, [K.Store("runs", at_run, masked)], "vector")])
    per_tap = K.Loop("tt", taps, [
        K.If(inside, [over_run(plain)]),
        K.If(K.Unary("not", inside, "bool"), [copy, over_run(K.Load("runs", at_run, masked.dtype))])])
    # every row inside at every tap: each constraint lo <= row part + tap part < hi
    # holds for the tap part's least and greatest values
    tile_inside = None
    for coeffs, lo, hi in w.mask:
        taps_low = sum(min(0, c * (n - 1)) for c, n in zip(coeffs[nrows:], w.shape[nrows:]))
        taps_high = sum(max(0, c * (n - 1)) for c, n in zip(coeffs[nrows:], w.shape[nrows:]))
        for r in range(tiling.MR):
            part = linear(window_index(K.Const(r))[:nrows], coeffs[:nrows], 0)
            tile_inside = K.land(tile_inside, K.land(K.Binary("le", K.Const(lo - taps_low), part, "bool"),
                                                     K.Binary("lt", part, K.Const(hi - taps_high), "bool")))
    return [K.If(tile_inside, [K.Loop("tt", taps, [over_run(plain)])]),
            K.If(K.Unary("not", tile_inside, "bool"), [per_tap])]


def window_rows(tiling, low: Lowering, out: str, ib, pc) -> list:
    """Statements that pack row block `ib` of K block `pc` of A = a conv's windows
    (the forward of a conv with more than WINDOW_COLUMNS output channels) from the
    input: each row's run of channels of each kernel tap is one contiguous copy
    (or zeros, where its window reads padding) into the block, row-major
    [MCP * MR][PK], which the tiles read as MR row streams (rows past M repeat the
    last; their results are dropped)."""
    view, nrows, _ = tiling.window
    w, run = view.arg, tiling.run
    i, t, c = K.Var("wi"), K.Var("wt"), K.Var("wc")
    index = unravel(tiling.block_row(ib, i), w.shape[:nrows]) + \
        unravel(K.affine([(pc, tiling.KC // run), (t, 1)]), w.shape[nrows:-1])
    value = low.gen(view, index + (c,))
    at = tiling.block_at(pc, ib, [(i, tiling.PK), (t, run), (c, 1)])
    body = copy_run(lambda v: K.Loop("wc", run, [K.Store(out, at, v)], "vector"), value,
                    mask_expr(w, index + (K.Const(0),)))
    return [K.Loop("wi", tiling.MCP * tiling.MR, [K.Loop("wt", K.idiv(K.Var("kc"), run), body)])]


def window_block(tiling, low: Lowering, out: str, ib, pc) -> list:
    """Statements that pack row block `ib` of K block `pc` of A = a conv's windows
    transposed (a weight gradient: rows (kh, kw, c), depth (n, ho, wo)) from the
    input itself: for each step of depth, each kernel tap's run of channels in the
    block is one contiguous copy (or zeros, where the window reads padding) into
    the block's row of K, [kk][MCP * MR], which the tiles read MR rows at a time.
    (The stored im2col copy was written, then read across its rows by the packing,
    once per call: 2 x 38 MB for a 3x3 conv of 16 x 32 x 32 x 64.)"""
    view, nrows, _ = tiling.window_t
    w, run, rows = view.arg, view.shape[-1], tiling.MCP * tiling.MR
    kk, t, c = K.Var("wk"), K.Var("wt"), K.Var("wc")
    first = K.affine([(ib, rows)])
    stop = K.Binary("min", K.affine([(ib, rows)], rows), K.Const(tiling.M), K.INDEX)
    first_tap = K.idiv(first, run)
    taps = K.Binary("sub", K.affine([(K.idiv(K.affine([(stop, 1)], -1), run), 1)], 1), first_tap, K.INDEX)
    row = K.affine([(t, run), (c, 1)])
    index = unravel(K.affine([(pc, tiling.KC), (kk, 1)]), w.shape[:nrows]) + unravel(t, w.shape[nrows:-1])
    value = low.gen(view, index + (c,))
    at = K.Binary("sub", tiling.block_at(pc, ib, [(kk, rows), (row, 1)]), first, K.INDEX)
    # the block's channels of this tap, [lo, hi): plain loops LLVM vectorizes (a
    # guarded load's address is chosen lane by lane, which it cannot)
    lo = K.Binary("max", K.Const(0), K.Binary("sub", first, K.affine([(t, run)]), K.INDEX), K.INDEX)
    hi = K.Binary("min", K.Const(run), K.Binary("sub", stop, K.affine([(t, run)]), K.INDEX), K.INDEX)
    extent = K.Binary("sub", hi, lo, K.INDEX)
    body = copy_run(lambda v: K.Loop("wc", extent, [K.Store(out, at, v)], start=lo), value,
                    mask_expr(w, index + (K.Const(0),)))
    return [K.Loop("wk", K.Var("kc"), [K.Loop("wt", taps, body, start=first_tap)])]


def copy_run(copy, value, valid) -> list:
    """`copy(v)` (statements storing v along a run of a window's channels) of the run's
    plain loads where the window reads inside the input, of zeros where it reads
    padding: `valid`, the window's mask, is the same for every channel of the run (None:
    no padding), so the test is made once a run, not per element."""
    if valid is None:
        return [copy(value)]
    return [K.If(valid, [copy(K.Load(value.buf, value.index, value.dtype))]),
            K.If(K.Unary("not", valid, "bool"), [copy(K.Const(0, value.dtype))])]
