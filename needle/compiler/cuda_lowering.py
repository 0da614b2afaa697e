"""CUDA lowering: one fused group -> kernels in the shared kernel IR, shaped for a GPU.

The CPU `Lowering` already knows how to read any node at any index (views, masks,
fused producers), what a reduction computes (domain index, stage accumulation, root
stores), how a matmul's epilogue is indexed and how a flat index unravels; this
pass only decides how the loops map onto blocks and threads, so the index math the
GPU runs is the one the CPU tests exercise:

- elementwise, fill, piece and copy groups: the CPU loop nest flattened into one
  grid-stride loop (kind "parallel"), one thread per element; the flat index is
  unraveled with idiv/imod into the per-dim loop variables the body expects.
- reduce groups, "rows" mapping: one block per kept index (kind "block"); its
  threads stride over the reduced indices (kind "thread") accumulating in a
  register, then an all-reduce — warp shuffles, one shared slot per warp, warp
  shuffles again — leaves the result in every thread, where later stages, the
  broadcast-back store (threads over the reduced indices again) and the epilogue
  (thread 0) read it.
- reduce groups, "columns" mapping: one thread per kept index with serial loops
  over the reduced axes, when the reduced extent is small (a block would idle
  most of its threads and pay two barriers per output) or many outputs run
  along the contiguous last axis (adjacent threads then read adjacent elements).
- reduce groups, "split": a single-stage reduction with few outputs and a long
  reduced extent first reduces SPLIT-sized chunks in many blocks into a scratch
  buffer, then a second kernel reduces the partials (and applies the epilogue).
- matmul groups: shared-memory tiles (BM x BK of A, BK x BN of B) loaded by all
  threads through the operands' expressions (masked at ragged edges), each thread
  accumulating a TM x TN register block; the epilogue is applied on store.  One
  block per output tile, the batch folded into the block index.

The launch shape goes into the kernel's `block` (threads per block, a compile-time
constant of the code) and `grid` (blocks wanted), the mapping's name into `mapping`.
Every mapping is grid-stride, so the runtime may cap the grid and stay correct.
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from .kernel_exprs import unravel, unravel_lets
from .loop_nests import domain_index, linear, nest_loops, reduce_loops
from .lowering import combine, identity
from .matmul_epilogue import epilogue_stores
from .matmul_naive import naive
from .views import View

BLOCK = 256             # threads per block for every kernel
WARP = 32
#: matmul tiles (BM, BN, BK, TM, TN): 256 threads, each a TM x TN register block
SMALL_TILE = (64, 64, 16, 4, 4)
LARGE_TILE = (128, 128, 8, 8, 8)
LARGE_TILE_SIDE, LARGE_TILE_OUTPUTS = 128, 256 * 256  # large tiles from this side and output count
NAIVE_MATMUL = 32 ** 3  # below this many multiply-adds: one thread per output element
COLUMNS_MAX_REDUCED = 32  # up to this reduced extent a thread per output beats a block per output
SPLIT_MIN = 1 << 15     # a reduced extent at least this long, with few outputs, is split
SPLIT_OUTPUTS = 64      # "few outputs"
SPLIT_CHUNK = 4096      # reduced elements per block in the first kernel of a split

TID = K.Special("tid")


def lower(group, make_lowering, new_scratch) -> list:
    """The kernels of `group`; `make_lowering()` gives a fresh Lowering per kernel,
    `new_scratch(elements, dtype)` a schedule slot for an intermediate buffer."""
    if group.kind == "matmul":
        return [matmul(make_lowering())]
    if group.kind == "reduce":
        return reduce(group, make_lowering, new_scratch)
    return [grid_stride(make_lowering().store_group())]


# ---- elementwise ---------------------------------------------------------------------------
def grid_stride(kernel: K.Kernel) -> K.Kernel:
    """Replace the kernel's perfect loop nest by one grid-stride loop over its flat size."""
    loops, inner = [], kernel.body
    while len(inner) == 1 and isinstance(inner[0], K.Loop) and inner[0].kind in ("parallel", "serial"):
        loops.append((inner[0].var, inner[0].extent))
        inner = inner[0].body
    total = math.prod(n for _, n in loops)
    # no loop at all (a scalar) lands in flat_loop's one iteration, run by thread 0
    kernel.body, kernel.parallel = [flat_loop("gi", loops or [("gi", 1)], inner, "parallel")], None
    return _launch(kernel, BLOCK, -(-total // BLOCK), "grid-stride")


def flat_loop(var, loops, body, kind) -> K.Loop:
    """One loop of `kind` over the flat extent of a row-major nest of `loops`, unravelling
    into their variables."""
    if len(loops) == 1:
        return K.Loop(loops[0][0], loops[0][1], body, kind)
    return K.Loop(var, math.prod(n for _, n in loops), unravel_lets(K.Var(var), loops) + body, kind)


def _launch(kernel: K.Kernel, block: int, grid: int, mapping: str) -> K.Kernel:
    kernel.block, kernel.grid, kernel.mapping = block, max(1, grid), mapping
    return kernel


# ---- reductions ----------------------------------------------------------------------------
def reduce(group, make_lowering, new_scratch) -> list:
    full, axes = group.domain, group.reduce_axes
    kept, red = reduce_loops(group)
    n_out, n_red = math.prod(n for _, n in kept), math.prod(n for _, n in red)
    real = [d for d, n in enumerate(full) if n != 1]
    along_kept = bool(real) and real[-1] not in axes
    if len(group.stages) == 1 and (group.root is group.stages[0] or group.epilogue()) \
            and n_red >= SPLIT_MIN and n_out <= SPLIT_OUTPUTS:
        return split_reduce(group, make_lowering, new_scratch, kept, red)
    low = make_lowering()
    if n_red <= COLUMNS_MAX_REDUCED or (along_kept and n_out >= 1024):
        return [columns(low, kept, red)]
    return [rows(low, kept, red)]


def columns(low, kept, red) -> K.Kernel:
    """One thread per kept index; serial loops over the reduced axes (the CPU's nest)."""
    g = low.group
    index = domain_index(g)

    def over_reduced(body):
        return nest_loops(red, body)
    body = []
    for stage in g.stages:
        body += low.accumulate(stage, index, over_reduced)
    body += low.store_root(index, kept, lambda s: s, over_reduced)
    kernel = low.kernel([flat_loop("o", kept or [("o", 1)], body, "parallel")], None, work=math.prod(g.domain))
    return _launch(kernel, BLOCK, -(-math.prod(n for _, n in kept) // BLOCK), "columns")


def allreduce(acc: str, op: str, dtype: str, shared: str) -> list:
    """Combine `acc` over the block so that every thread holds the result: butterfly
    shuffles within each warp, one shared slot per warp, butterfly over the slots."""
    var = K.Var(acc, dtype)
    lane = K.Binary("imod", TID, K.Const(WARP), K.INDEX)
    warp = K.Binary("idiv", TID, K.Const(WARP), K.INDEX)
    warps = BLOCK // WARP

    def butterfly():
        return [K.Assign(acc, combine(op, var, K.Shuffle(var, m, dtype), dtype))
                for m in (16, 8, 4, 2, 1)]

    slot = K.Load(shared, K.Binary("min", lane, K.Const(warps - 1), K.INDEX), dtype)
    ident = K.Const(identity(op, dtype), dtype)
    return butterfly() + [
        K.Barrier(),  # every thread has read the slots of the previous all-reduce
        K.If(K.Binary("eq", lane, K.Const(0), "bool"), [K.Store(shared, warp, var)]),
        K.Barrier(),
        K.Assign(acc, K.Where(K.Binary("lt", lane, K.Const(warps), "bool"), slot, ident, dtype)),
    ] + butterfly()


def rows(low, kept, red, source=None) -> K.Kernel:
    """One block per kept index, its threads over the reduced indices, an all-reduce after
    each stage.  `source(stage, index)` overrides what a stage reads (the split's second
    kernel reads partial results)."""
    g = low.group
    index = domain_index(g)

    def over_reduced(body):
        return [flat_loop("r", red or [("r", 1)], body, "thread")]
    decls, body = [], []
    for stage in g.stages:
        shared = f"red{len(low.accs)}"
        decls.append(K.LocalArray(shared, stage.dtype, BLOCK // WARP, "shared"))
        body += low.accumulate(stage, index, over_reduced, source(stage, index) if source else None)
        body += allreduce(low.accs[id(stage)].name, stage.op, stage.dtype, shared)
    first = K.Binary("eq", TID, K.Const(0), "bool")
    body += low.store_root(index, kept, lambda s: [K.If(first, s)], over_reduced)
    kernel = low.kernel(decls + [flat_loop("o", kept or [("o", 1)], body, "block")], None,
                        work=math.prod(g.domain))
    return _launch(kernel, BLOCK, math.prod(n for _, n in kept), "rows")


def split_reduce(group, make_lowering, new_scratch, kept, red) -> list:
    """partial[o, s] = reduce(chunk s of row o) in n_out * S blocks, then the group's
    kernel reduces the S partials of each row (and stores the root)."""
    stage = group.stages[0]
    n_out, n_red = math.prod(n for _, n in kept), math.prod(n for _, n in red)
    chunks = -(-n_red // SPLIT_CHUNK)
    scratch = new_scratch(n_out * chunks, stage.dtype)
    # kernel 1: block q = (o, s); threads over the chunk's reduced indices
    low = make_lowering()
    part = low.buffer(scratch, stage.dtype, "out")
    o, s, r = K.Var("o"), K.Var("s"), K.Var("r")
    within = K.Binary("lt", r, K.Const(n_red), "bool")

    def over_chunk(update):
        return [K.Loop("rc", SPLIT_CHUNK, [K.Let("r", K.affine([(s, SPLIT_CHUNK), (K.Var("rc"), 1)])),
                                           K.If(within, unravel_lets(r, red) + update)], "thread")]
    body = unravel_lets(o, kept) + low.accumulate(stage, domain_index(group), over_chunk)
    acc = low.accs[id(stage)]
    body += allreduce(acc.name, stage.op, stage.dtype, "red0")
    body.append(K.If(K.Binary("eq", TID, K.Const(0), "bool"), [K.Store(part, K.affine([(o, chunks), (s, 1)]), acc)]))
    loop = K.Loop("q", n_out * chunks, unravel_lets(K.Var("q"), [("o", n_out), ("s", chunks)]) + body, "block")
    first = low.kernel([K.LocalArray("red0", stage.dtype, BLOCK // WARP, "shared"), loop], None,
                       work=math.prod(group.domain))
    _launch(first, BLOCK, n_out * chunks, "split")
    # kernel 2: rows over the partials
    low2 = make_lowering()
    partials = low2.buffer(scratch, stage.dtype, "in")
    flat_out = linear(tuple(K.Var(v) for v, _ in kept), View.contiguous([n for _, n in kept]).strides, 0)

    def source(st, _index):
        return K.Load(partials, K.affine([(flat_out, chunks), (K.Var("c"), 1)]), stage.dtype)
    second = rows(low2, kept, [("c", chunks)], source)
    second.mapping = "split-rows"
    return [first, second]


# ---- matmul ------------------------------------------------------------------------------------
def matmul(low) -> K.Kernel:
    g = low.group
    m = g.matmul
    a, b = m.srcs
    batch = m.shape[:-2]
    BT, M, N, KD = math.prod(batch), m.shape[-2], m.shape[-1], a.shape[-1]
    if BT * M * N * KD <= NAIVE_MATMUL:
        return naive_matmul(low)
    BM, BN, BK, TM, TN = LARGE_TILE if min(M, N) >= LARGE_TILE_SIDE and M * N * BT >= LARGE_TILE_OUTPUTS else SMALL_TILE
    TX, TY = BN // TN, BM // TM
    threads = TX * TY
    tiles_m, tiles_n = -(-M // BM), -(-N // BN)
    per_batch = tiles_m * tiles_n
    dtype = m.dtype
    q, t, bt = K.Var("q"), K.Var("t"), K.Var("bt") if BT > 1 else K.Const(0)
    m0, n0, k0 = K.Var("m0"), K.Var("n0"), K.Var("k0")
    tx, ty = K.Var("tx"), K.Var("ty")
    bidx = unravel(bt, batch)

    def lt(x, n):
        return K.Binary("lt", x, K.Const(n), "bool")

    def clamp(x, n):
        return K.Binary("min", x, K.Const(n - 1), K.INDEX)

    def load_tile(name, operand, rows_n, cols_n, rows_var, cols_var, tile_rows, tile_cols, row0, col0, store_at):
        """tile[rows x cols] of `operand` from (row0, col0): element e = tid + threads * l
        is (e / tile_cols, e % tile_cols), so adjacent threads read adjacent columns."""
        e = K.affine([(TID, 1), (K.Var("l"), threads)])
        ri = K.Binary("idiv", e, K.Const(tile_cols), K.INDEX)
        ci = K.Binary("imod", e, K.Const(tile_cols), K.INDEX)
        row, col = K.Var(rows_var), K.Var(cols_var)
        valid = K.land(lt(row, rows_n), lt(col, cols_n))
        value = K.Where(valid, low.gen(operand, bidx + (K.Var(rows_var + "c"), K.Var(cols_var + "c"))),
                        K.Const(0, dtype), dtype)
        body = [K.Let("ri", ri), K.Let("ci", ci),
                K.Let(rows_var, K.add(row0, K.Var("ri"))), K.Let(cols_var, K.add(col0, K.Var("ci"))),
                K.Let(rows_var + "c", clamp(row, rows_n)), K.Let(cols_var + "c", clamp(col, cols_n)),
                K.Store(name, store_at(K.Var("ri"), K.Var("ci")), value)]
        return K.Loop("l", tile_rows * tile_cols // threads, body, "unroll")

    kk, i, j = K.Var("kk"), K.Var("i"), K.Var("j")
    acc_at = K.affine([(i, TN), (j, 1)])
    kbase = K.affine([(k0, BK)])
    load_a = load_tile("As", a, M, KD, "a_row", "a_col", BM, BK, m0, kbase,
                       lambda ri, ci: K.affine([(ci, BM), (ri, 1)]))       # As[k][m]
    load_b = load_tile("Bs", b, KD, N, "b_row", "b_col", BK, BN, kbase, n0,
                       lambda ri, ci: K.affine([(ri, BN), (ci, 1)]))       # Bs[k][n]
    product = K.Binary("mul", K.Load("ra", i, dtype), K.Load("rb", j, dtype), dtype, contract=True)
    fma = K.Store("acc", acc_at, K.Binary("add", K.Load("acc", acc_at, dtype), product, dtype))
    step = K.Loop("kk", BK, [
        K.Loop("i", TM, [K.Store("ra", i, K.Load("As", K.affine([(kk, BM), (ty, 1), (i, TY)]), dtype))], "unroll"),
        K.Loop("j", TN, [K.Store("rb", j, K.Load("Bs", K.affine([(kk, BN), (tx, 1), (j, TX)]), dtype))], "unroll"),
        K.Loop("i", TM, [K.Loop("j", TN, [fma], "unroll")], "unroll")], "unroll")
    k_loop = K.Loop("k0", -(-KD // BK), [load_a, load_b, K.Barrier(), step, K.Barrier()])
    # epilogue: the fused elementwise chain reads the accumulator through matmul_value
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    low.matmul_value = K.Load("acc", acc_at, dtype)
    row, col = K.Var("row"), K.Var("col")
    at = K.affine([(bt, M * N), (row, N), (col, 1)])
    store = K.If(K.land(lt(row, M), lt(col, N)), epilogue_stores(low, out, at, bt, row, col))
    write = K.Loop("i", TM, [K.Loop("j", TN, [
        K.Let("row", K.affine([(m0, 1), (ty, 1), (i, TY)])),
        K.Let("col", K.affine([(n0, 1), (tx, 1), (j, TX)])), store], "unroll")], "unroll")
    zero = K.Loop("i", TM * TN, [K.Store("acc", i, K.Const(0, dtype))], "unroll")
    tile = unravel_lets(q, [("bt", BT), ("t", per_batch)]) + [
            K.Let("m0", K.Binary("mul", K.Binary("idiv", t, K.Const(tiles_n), K.INDEX), K.Const(BM), K.INDEX)),
            K.Let("n0", K.Binary("mul", K.Binary("imod", t, K.Const(tiles_n), K.INDEX), K.Const(BN), K.INDEX)),
            zero, k_loop, write]
    body = [K.LocalArray("As", dtype, BK * BM, "shared"), K.LocalArray("Bs", dtype, BK * BN, "shared"),
            K.LocalArray("acc", dtype, TM * TN), K.LocalArray("ra", dtype, TM), K.LocalArray("rb", dtype, TN),
            K.Let("tx", K.Binary("imod", TID, K.Const(TX), K.INDEX)),
            K.Let("ty", K.Binary("idiv", TID, K.Const(TX), K.INDEX)),
            K.Loop("q", BT * per_batch, tile, "block")]
    kernel = low.kernel(body, None, work=2 * BT * M * N * KD)
    return _launch(kernel, threads, BT * per_batch, f"tiles {BM}x{BN}x{BK}, {TM}x{TN} per thread")


def naive_matmul(low) -> K.Kernel:
    """Small matmuls: the CPU's plain loop nest, one thread per output element."""
    return grid_stride(naive(low))
