"""An A computed from rows that lie apart in memory (relu(z + b) @ w: a bias and an
activation fused into the matmul's operand) packed row-major, computed along K, instead
of into [kk][MR] panels gathered MR rows apart at every step of K.  `tiling` is the
matmul's `matmul_tiling.Tiling`."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import coefficient, loads
from .lowering import Lowering


def rows_apart(tiling) -> bool:
    """Whether A is computed from its producers (a bias and an activation fused in)
    out of loads contiguous along K whose rows lie apart: packed into [kk][MR] panels
    it would be gathered MR rows apart at every step of K; packed row-major, a
    layer's relu(z + b) @ w comes close to the time of a stored A read in place (and
    beats computing A in the tile itself)."""
    value = tiling.make().gen(tiling.a, tiling.batch_index(K.Const(0)) + (K.Var("probe_i"), K.Var("probe_k")))
    strides = _load_strides(value)
    return bool(strides) and not isinstance(value, K.Load) and \
        all(along in (0, 1) for _, along in strides) and any(across not in (0, 1) for across, _ in strides)


def rows_block(tiling, low: Lowering, out: str, ib, pc) -> list:
    """Statements that pack row block `ib` of K block `pc` of a computed A whose
    rows lie apart (`rows_apart`): each row of the block computed along K, vector
    loads and stores, into the block row-major [MCP * MR][PK], which the tiles read
    as MR row streams (rows past M repeat the last; their results are dropped)."""
    i, kk = K.Var("ai"), K.Var("ak")
    k = K.affine([(pc, tiling.KC), (kk, 1)])
    value = low.gen(tiling.a, tiling.batch_index(K.Const(0)) + (tiling.block_row(ib, i), k))
    at = tiling.block_at(pc, ib, [(i, tiling.PK), (kk, 1)])
    # (a plain inner loop: its length, the block's depth, is known at run time only,
    # and LLVM's loop vectorizer takes it)
    return [K.Loop("ai", tiling.MCP * tiling.MR, [K.Loop("ak", K.Var("kc"), [K.Store(out, at, value)])])]


def _load_strides(value) -> list:
    """(stride across rows, stride along K) of each load of an A operand's expression
    at (probe_i, probe_k); [] if it is not arithmetic on unmasked, affine loads."""
    found = loads(value)
    if found is None or any(e.valid is not None for e in found):
        return []
    strides = [(coefficient(e.index, "probe_i"), coefficient(e.index, "probe_k")) for e in found]
    return [] if any(None in pair for pair in strides) else strides
