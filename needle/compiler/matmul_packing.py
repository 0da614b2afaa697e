"""Packing matmul operands into panels (BLIS): B into panels of NR columns by a
kernel of its own, before the macro-kernel (every thread reads all of it); A into
panels of MR rows inside the macro-kernel, each row block's by the thread that
multiplies them.  Packing evaluates the operands' expressions (views, transposes,
fused producers), so the multiply loops read two dense streams.  `tiling` is the
matmul's `matmul_tiling.Tiling`."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .lowering import Lowering


def panel(tiling, low: Lowering, operand, out: str, rows_first: bool, bt, pc, p, panels: int = 0,
          first=None) -> list:
    """Statements that pack panel `p` of K block `pc` (batch `bt`) of `operand` into
    `out`: packed[bt][pc][p][kk][w] = operand at (row or column p * width + w,
    k = pc * KC + kk), for the `kc` rows of the block (bound by the caller).  Whole
    panels copy without checks, a SIMD vector of w at a time (a gather when the
    source is strided along w); panels on the ragged edge check and pad.  With
    `panels`, the whole panels first, first + 1, ... (p their loop variable) are
    packed together, each step of K for all of them in turn."""
    dtype = tiling.m.dtype
    width, limit = (tiling.MR, tiling.M) if rows_first else (tiling.NR, tiling.N)
    panels_total = tiling.MP if rows_first else tiling.NP
    kk, w = K.Var("kk"), K.Var("w")
    outer = K.affine([(p, width), (w, 1)])        # row (A) or column (B)
    k = K.affine([(pc, tiling.KC), (kk, 1)])
    base = K.affine([(bt, tiling.KB * panels_total), (pc, panels_total), (p, 1)])
    at = K.affine([(base, tiling.PK * width), (kk, width), (w, 1)])

    def operand_at(o):
        return low.gen(operand, tiling.batch_index(bt) + ((o, k) if rows_first else (k, o)))

    plain = K.Store(out, at, operand_at(outer))
    depth = K.Var("kc")  # rows of this K block; the macro-kernel reads no further
    if panels:
        return [K.Loop("kk", depth, [K.Loop("pi", panels, [
            K.Let("p", K.affine([(first, 1), (K.Var("pi"), 1)])),
            K.Loop("w", width, [plain], "vector")])])]
    valid = K.Binary("lt", outer, K.Const(limit), "bool")
    clamped = operand_at(K.Binary("min", outer, K.Const(limit - 1), K.INDEX))
    checked = K.Store(out, at, K.Where(valid, clamped, K.Const(0, dtype), dtype))
    fast = [K.Loop("kk", depth, [K.Loop("w", width, [plain], "vector")])]  # gathers if w is strided
    if limit % width == 0:  # every panel is whole
        return fast
    slow = [K.Loop("kk", depth, [K.Loop("w", width, [checked])])]
    whole = K.Binary("le", K.affine([(p, width)], width), K.Const(limit), "bool")
    return [K.If(whole, fast), K.If(K.Unary("not", whole, "bool"), slow)]


def pack_b(tiling) -> K.Kernel:
    """The kernel that packs B: every thread of the macro-kernel reads all of it,
    so it is packed before.  Threaded by its own size, a copy's, not by the
    matmul's flops: a small copy split across threads costs more than it saves."""
    low = tiling.make()
    out = low.buffer(tiling.bp, tiling.m.dtype, "out")
    q, panels = K.Var("q"), tiling.NP
    total = tiling.BT * tiling.KB * panels
    bt = K.idiv(q, tiling.KB * panels) if tiling.BT > 1 else K.Const(0)
    pc = K.imod(K.idiv(q, panels), tiling.KB)
    p = K.imod(q, panels) if tiling.BT * tiling.KB > 1 else q
    body = [K.Let("kc", tiling.block_depth(pc))] + panel(tiling, low, tiling.b, out, False, bt, pc, p)
    return low.kernel([K.Loop("q", total, body, "parallel")], ("q", total), work=total * tiling.PK * tiling.NR,
                      name="PB_" + "_".join(map(str, tiling.b.shape)))


def pack_a_panels(tiling, low: Lowering, out: str, bt, ib, pc) -> list:
    """Statements that pack the A panels of row block `ib`, K block `pc` ([kk][MR]
    panels, as B's): panel by panel, or a block of whole panels row of K by row of K."""
    p = K.Var("p")
    per_panel = [K.Loop("ipo", tiling.MCP, [
        K.Let("p", K.affine([(ib, tiling.MCP), (K.Var("ipo"), 1)])),
        K.If(K.Binary("lt", p, K.Const(tiling.MP), "bool"), panel(tiling, low, tiling.a, out, True, bt, pc, p))])]
    if tiling.MCP == 1:
        return per_panel
    # a block of whole panels is packed row of K by row of K, every panel's share of
    # it in turn: a transposed A (a weight gradient's x.T) is then read along its rows,
    # each cache line once, where a panel at a time took 32 of a line's 64 bytes on
    # every step of K and read each line again for the next panel
    whole = K.Binary("le", K.affine([(ib, tiling.MCP * tiling.MR)], tiling.MCP * tiling.MR), K.Const(tiling.M), "bool")
    by_rows = panel(tiling, low, tiling.a, out, True, bt, pc, p, panels=tiling.MCP, first=K.affine([(ib, tiling.MCP)]))
    return [K.If(whole, by_rows), K.If(K.Unary("not", whole, "bool"), per_panel)]
