"""How a tile's sums reach C: added to the partial sums of the earlier K blocks, the
epilogue (bias, activation, the extra roots) applied after the last one; SIMD stores,
as wide as the columns left on the ragged edge.  `tiling` is the matmul's
`matmul_tiling.Tiling`."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .lowering import Lowering
from .matmul_epilogue import epilogue, epilogue_stores


def write_back(tiling, low: Lowering, out, bt, ip, jp, pc) -> list:
    """C (+)= tile, with the epilogue applied (and the extra roots stored) after the
    last K block."""
    i, j = tile_element(tiling, ip, jp)
    at = K.affine([(bt, tiling.M * tiling.N), (i, tiling.N), (j, 1)])
    dtype = tiling.m.dtype
    first = K.Binary("eq", pc, K.Const(0), "bool")
    previous = K.Where(first, K.Const(0, dtype), K.Load(out, at, dtype), dtype)
    total = K.Binary("add", previous, tile_value(tiling), dtype)
    low.matmul_value = K.Var("sum", dtype)
    root = low.group.root
    last = K.Binary("eq", pc, K.Const(tiling.KB - 1), "bool")
    if tiling.KB == 1:
        return store_tiles(tiling, epilogue_stores(low, out, at, bt, i, j), ip, jp, i, j, total)
    if not low.group.extra:  # the partial sum until the last K block, then the epilogue
        value = K.Where(last, epilogue(low, bt, i, j), low.matmul_value, root.dtype)
        return store_tiles(tiling, [K.Store(out, at, value)], ip, jp, i, j, total)
    # extra roots are stored once, after the last K block: a branch per block, not per element
    return [K.If(last, store_tiles(tiling, epilogue_stores(low, out, at, bt, i, j), ip, jp, i, j, total)),
            K.If(K.Unary("not", last, "bool"),
                 store_tiles(tiling, [K.Store(out, at, low.matmul_value)], ip, jp, i, j, total))]


def tile_element(tiling, ip, jp) -> tuple:
    """(row, column) of C at element (wr, wc) of tile (ip, jp), as `store_tiles` loops them."""
    return (K.affine([(ip, tiling.MR), (K.Var("wr"), 1)]), K.affine([(jp, tiling.NR), (K.Var("wc"), 1)]))


def tile_value(tiling):
    """The macro-kernel's sum at element (wr, wc) of the tile it spilled (`tile`)."""
    return K.Load("tile", K.affine([(K.Var("wr"), tiling.NR), (K.Var("wc"), 1)]), tiling.m.dtype)


def store_tiles(tiling, stores, ip, jp, i, j, total) -> list:
    """`stores` for each element of tile (ip, jp), after `sum = total`.  Each row of
    a tile is stored as SIMD vectors (rows past M skipped): NR columns wide, or, on
    the ragged edge (the last panel), as wide as the columns left there (N % NR), so
    that no lane reads or writes past N and the epilogue stays vectorized (a lane at a
    time, an Adam update's sqrt and division on 4 columns had run over all 32 lanes'
    places, a 784 x 100 weight gradient's slowest part)."""
    MR, NR = tiling.MR, tiling.NR
    update = [K.Let("sum", total)] + stores

    def rows(width: int):
        if tiling.M % MR == 0:
            return K.Loop("wr", MR, [K.Loop("wc", width, update, "vector")], "unroll")
        return K.Loop("wr", MR, [K.If(K.Binary("lt", i, K.Const(tiling.M), "bool"),
                                      [K.Loop("wc", width, update, "vector")])], "unroll")
    if tiling.N % NR == 0:
        return [rows(NR)]
    whole = K.Binary("le", K.affine([(jp, NR)], NR), K.Const(tiling.N), "bool")
    return [K.If(whole, [rows(NR)]), K.If(K.Unary("not", whole, "bool"), [rows(tiling.N % NR)])]
