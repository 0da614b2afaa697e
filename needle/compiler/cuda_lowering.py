"""CUDA lowering: one fused group -> kernels in the shared kernel IR, shaped for a GPU.

The CPU `Lowering` already knows how to read any node at any index (views, masks,
fused producers, reduction stages, the matmul epilogue); this pass only decides
how the work maps onto the grid, so the index math the GPU runs is the one the
CPU tests exercise:

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

Launch shape goes into `kernel.meta`: "block" (threads per block, a compile-time
constant of the code) and "grid" (blocks wanted).  Every mapping is grid-stride,
so the runtime may cap the grid and stay correct.
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from .lowering import identity, linear, nest_loops
from .views import View
from .matmul_tiling import epilogue_index

BLOCK = 256             # threads per block for every kernel
WARP = 32
#: matmul tiles (BM, BN, BK, TM, TN): 256 threads, each a TM x TN register block
SMALL_TILE = (64, 64, 16, 4, 4)
LARGE_TILE = (128, 128, 8, 8, 8)
NAIVE_MATMUL = 32 ** 3  # below this many multiply-adds: one thread per output element
COLUMNS_MAX_REDUCED = 32  # up to this reduced extent a thread per output beats a block per output
SPLIT_MIN = 1 << 15     # a reduced extent at least this long, with few outputs, is split
SPLIT_OUTPUTS = 64      # "few outputs"
SPLIT_CHUNK = 4096      # reduced elements per block in the first kernel of a split

TID, BID = K.Special("tid"), K.Special("bid")


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
    if len(loops) == 1:
        body = [K.Loop(loops[0][0], total, inner, "parallel")]
    else:  # no loop at all (a scalar) also lands here: one iteration, run by thread 0
        body = [K.Loop("gi", total, unravel(K.Var("gi"), loops) + inner, "parallel")]
    kernel.body, kernel.parallel = body, None
    return _launch(kernel, BLOCK, -(-total // BLOCK))


def unravel(flat, dims) -> list:
    """Lets binding each (var, extent) of a row-major nest from the flat index."""
    lets, stride = [], 1
    for var, n in reversed(dims):
        value = flat if stride == 1 else K.Binary("idiv", flat, K.Const(stride), K.INDEX)
        if var != dims[0][0]:
            value = K.Binary("imod", value, K.Const(n), K.INDEX)
        lets.append(K.Let(var, value))
        stride *= n
    return list(reversed(lets))


def _launch(kernel: K.Kernel, block: int, grid: int) -> K.Kernel:
    kernel.meta["block"] = block
    kernel.meta["grid"] = max(1, grid)
    return kernel


# ---- reductions ----------------------------------------------------------------------------
def reduce(group, make_lowering, new_scratch) -> list:
    full, axes = group.domain, group.reduce_axes
    kept = [(f"k{d}", n) for d, n in enumerate(full) if d not in axes and n != 1]
    red = [(f"r{d}", n) for d, n in enumerate(full) if d in axes and n != 1]
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


def _index(group) -> tuple:
    """The domain index: k<d> for kept dims, r<d> for reduced ones, 0 for size 1."""
    full, axes = group.domain, group.reduce_axes
    return tuple(K.Const(0) if n == 1 else K.Var(("r" if d in axes else "k") + str(d)) for d, n in enumerate(full))


def _combine(op, acc, value, dtype):
    return K.Binary("add" if op == "reduce_sum" else "max", acc, value, dtype)


def _flat_loop(var, dims, body, kind):
    """One loop of `kind` over the flat extent of `dims`, unraveling into their vars."""
    if len(dims) == 1:
        return K.Loop(dims[0][0], dims[0][1], body, kind)
    return K.Loop(var, math.prod(n for _, n in dims), unravel(K.Var(var), dims) + body, kind)


def _stores(low, group, kept, index, value_of_store, thread_loop):
    """The statements storing the group's root: the reduction itself, the broadcast-back
    pass over the reduced axes, or the epilogue over the kept axes."""
    full, axes = group.domain, group.reduce_axes
    out = low.buffer(low.slot_of(group.root), group.root.dtype, "out")
    if id(group.root) in low.accs:
        root_index = tuple(K.Const(0) if d in axes or n == 1 else K.Var(f"k{d}") for d, n in enumerate(full))
        return value_of_store([K.Store(out, linear(root_index, View.contiguous(group.root.shape).strides, 0),
                                       low.accs[id(group.root)])])
    if not group.epilogue():
        store = K.Store(out, linear(index, View.contiguous(full).strides, 0), low.gen(group.root, index))
        return thread_loop([store])
    kept_vars = iter(K.Var(v) for v, _ in kept)
    root_index = tuple(K.Const(0) if n == 1 else next(kept_vars) for n in group.root.shape)
    return value_of_store([K.Store(out, linear(root_index, View.contiguous(group.root.shape).strides, 0),
                                   low.gen(group.root, root_index))])


def columns(low, kept, red) -> K.Kernel:
    """One thread per kept index; serial loops over the reduced axes."""
    g = low.group
    index = _index(g)
    body = []
    for stage in g.stages:
        acc = f"acc{len(low.accs)}"
        body.append(K.Declare(acc, stage.dtype, K.Const(identity(stage.op, stage.dtype), stage.dtype)))
        value = low.gen(stage.srcs[0], index)
        body.extend(nest_loops(red, [K.Assign(acc, _combine(stage.op, K.Var(acc, stage.dtype), value, stage.dtype))]))
        low.accs[id(stage)] = K.Var(acc, stage.dtype)
    body += _stores(low, g, kept, index, lambda s: s, lambda s: nest_loops(red, s))
    n_out = math.prod(n for _, n in kept)
    kernel = low.kernel([_flat_loop("o", kept or [("o", 1)], body, "parallel")], None,
                        work=math.prod(g.domain))
    kernel.meta["mapping"] = "columns"
    return _launch(kernel, BLOCK, -(-n_out // BLOCK))


def allreduce(acc: str, op: str, dtype: str, shared: str) -> list:
    """Combine `acc` over the block so that every thread holds the result: butterfly
    shuffles within each warp, one shared slot per warp, butterfly over the slots."""
    var = K.Var(acc, dtype)
    lane = K.Binary("imod", TID, K.Const(WARP), K.INDEX)
    warp = K.Binary("idiv", TID, K.Const(WARP), K.INDEX)
    warps = BLOCK // WARP

    def butterfly():
        return [K.Assign(acc, _combine(op, var, K.Shuffle(var, m, dtype), dtype))
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
    """One block per kept index.  `source(stage, index)` overrides what a stage reads
    (the split's second kernel reads partial results)."""
    g = low.group
    index = _index(g)
    decls, body = [], []
    for stage in g.stages:
        n = len(low.accs)
        acc, shared = f"acc{n}", f"red{n}"
        decls.append(K.LocalArray(shared, stage.dtype, BLOCK // WARP, "shared"))
        body.append(K.Declare(acc, stage.dtype, K.Const(identity(stage.op, stage.dtype), stage.dtype)))
        value = source(stage, index) if source else low.gen(stage.srcs[0], index)
        update = K.Assign(acc, _combine(stage.op, K.Var(acc, stage.dtype), value, stage.dtype))
        body.append(_flat_loop("r", red or [("r", 1)], [update], "thread"))
        body += allreduce(acc, stage.op, stage.dtype, shared)
        low.accs[id(stage)] = K.Var(acc, stage.dtype)
    first = K.Binary("eq", TID, K.Const(0), "bool")
    body += _stores(low, g, kept, index, lambda s: [K.If(first, s)],
                    lambda s: [_flat_loop("r", red or [("r", 1)], s, "thread")])
    n_out = math.prod(n for _, n in kept)
    kernel = low.kernel(decls + [_flat_loop("o", kept or [("o", 1)], body, "block")], None,
                        work=math.prod(g.domain))
    kernel.meta["mapping"] = "rows"
    return _launch(kernel, BLOCK, n_out)


def split_reduce(group, make_lowering, new_scratch, kept, red) -> list:
    """partial[o, s] = reduce(chunk s of row o) in n_out * S blocks, then the group's
    kernel reduces the S partials of each row (and stores the root)."""
    stage = group.stages[0]
    n_out, n_red = math.prod(n for _, n in kept), math.prod(n for _, n in red)
    chunks = -(-n_red // SPLIT_CHUNK)
    scratch = new_scratch(n_out * chunks, stage.dtype)
    # kernel 1: block q = (o, s); threads over the chunk's reduced indices
    low = make_lowering()
    index = _index(group)
    acc, dtype = "acc0", stage.dtype
    part = low.buffer(scratch, dtype, "out")
    o, s, r = K.Var("o"), K.Var("s"), K.Var("r")
    value = low.gen(stage.srcs[0], index)
    within = K.Binary("lt", r, K.Const(n_red), "bool")
    inner = unravel(r, red) if len(red) > 1 else [K.Let(red[0][0], r)]
    update = [K.If(within, inner + [K.Assign(acc, _combine(stage.op, K.Var(acc, dtype), value, dtype))])]
    body = unravel(o, kept) if kept else []
    body += [K.Declare(acc, dtype, K.Const(identity(stage.op, dtype), dtype)),
             K.Loop("rc", SPLIT_CHUNK, [K.Let("r", K.affine([(s, SPLIT_CHUNK), (K.Var("rc"), 1)]))] + update,
                    "thread")]
    body += allreduce(acc, stage.op, dtype, "red0")
    body.append(K.If(K.Binary("eq", TID, K.Const(0), "bool"),
                     [K.Store(part, K.affine([(o, chunks), (s, 1)]), K.Var(acc, dtype))]))
    q = K.Var("q")
    loop = K.Loop("q", n_out * chunks, [K.Let("o", K.Binary("idiv", q, K.Const(chunks), K.INDEX)),
                                        K.Let("s", K.Binary("imod", q, K.Const(chunks), K.INDEX))] + body, "block")
    first = low.kernel([K.LocalArray("red0", dtype, BLOCK // WARP, "shared"), loop], None, work=math.prod(group.domain))
    first.meta["mapping"] = "split"
    _launch(first, BLOCK, n_out * chunks)
    # kernel 2: rows over the partials
    low2 = make_lowering()
    partials = low2.buffer(scratch, dtype, "in")
    flat_out = linear(tuple(K.Var(v) for v, _ in kept), [math.prod(n for _, n in kept[i + 1:]) for i in range(len(kept))], 0)

    def source(st, _index):
        return K.Load(partials, K.affine([(flat_out, chunks), (K.Var("c"), 1)]), dtype)
    second = rows(low2, kept, [("c", chunks)], source)
    second.meta["mapping"] = "split-rows"
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
    BM, BN, BK, TM, TN = LARGE_TILE if min(M, N) >= 128 and M * N * BT >= 256 * 256 else SMALL_TILE
    TX, TY = BN // TN, BM // TM
    threads = TX * TY
    tiles_m, tiles_n = -(-M // BM), -(-N // BN)
    per_batch = tiles_m * tiles_n
    dtype = m.dtype
    q, t, bt = K.Var("q"), K.Var("t"), K.Var("bt")
    m0, n0, k0 = K.Var("m0"), K.Var("n0"), K.Var("k0")
    tx, ty = K.Var("tx"), K.Var("ty")
    bidx = batch_index(bt, batch)

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
    fma = K.Store("acc", acc_at, K.Binary("add", K.Load("acc", acc_at, dtype),
                                          K.Binary("mul", K.Load("ra", i, dtype), K.Load("rb", j, dtype), dtype),
                                          dtype))
    step = K.Loop("kk", BK, [
        K.Loop("i", TM, [K.Store("ra", i, K.Load("As", K.affine([(kk, BM), (ty, 1), (i, TY)]), dtype))], "unroll"),
        K.Loop("j", TN, [K.Store("rb", j, K.Load("Bs", K.affine([(kk, BN), (tx, 1), (j, TX)]), dtype))], "unroll"),
        K.Loop("i", TM, [K.Loop("j", TN, [fma], "unroll")], "unroll")], "unroll")
    k_loop = K.Loop("k0", -(-KD // BK), [load_a, load_b, K.Barrier(), step, K.Barrier()])
    # epilogue: the fused elementwise chain reads the accumulator through matmul_value
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    low.matmul_value = K.Load("acc", acc_at, dtype)
    row, col = K.Var("row"), K.Var("col")
    # the root may be the matmul reshaped (conv's (N*Ho*Wo, O) read as (N, Ho, Wo, O)):
    # index it as the CPU lowering does, never with the matmul's own (row, col)
    at = epilogue_index(m, g.root, bt, row, col)
    value = low.matmul_value if g.root is m else low.gen(g.root, at)
    store = K.If(K.land(lt(row, M), lt(col, N)), [
        K.Store(out, linear(at, View.contiguous(g.root.shape).strides, 0), value)])
    write = K.Loop("i", TM, [K.Loop("j", TN, [
        K.Let("row", K.affine([(m0, 1), (ty, 1), (i, TY)])),
        K.Let("col", K.affine([(n0, 1), (tx, 1), (j, TX)])), store], "unroll")], "unroll")
    zero = K.Loop("i", TM * TN, [K.Store("acc", i, K.Const(0, dtype))], "unroll")
    tile = [K.Let("bt", K.Binary("idiv", q, K.Const(per_batch), K.INDEX)),
            K.Let("t", K.Binary("imod", q, K.Const(per_batch), K.INDEX)),
            K.Let("m0", K.Binary("mul", K.Binary("idiv", t, K.Const(tiles_n), K.INDEX), K.Const(BM), K.INDEX)),
            K.Let("n0", K.Binary("mul", K.Binary("imod", t, K.Const(tiles_n), K.INDEX), K.Const(BN), K.INDEX)),
            zero, k_loop, write]
    body = [K.LocalArray("As", dtype, BK * BM, "shared"), K.LocalArray("Bs", dtype, BK * BN, "shared"),
            K.LocalArray("acc", dtype, TM * TN), K.LocalArray("ra", dtype, TM), K.LocalArray("rb", dtype, TN),
            K.Let("tx", K.Binary("imod", TID, K.Const(TX), K.INDEX)),
            K.Let("ty", K.Binary("idiv", TID, K.Const(TX), K.INDEX)),
            K.Loop("q", BT * per_batch, tile, "block")]
    kernel = low.kernel(body, None, work=2 * BT * M * N * KD)
    kernel.meta["mapping"] = f"tiles {BM}x{BN}x{BK}, {TM}x{TN} per thread"
    return _launch(kernel, threads, BT * per_batch)


def batch_index(bt, batch) -> tuple:
    """The flat batch number as one index per batch dim."""
    out, rest = [], bt
    for n in reversed(batch):
        out.append(K.Const(0) if n == 1 else K.Binary("imod", rest, K.Const(n), K.INDEX))
        rest = K.Binary("idiv", rest, K.Const(n), K.INDEX)
    return tuple(reversed(out))


def naive_matmul(low) -> K.Kernel:
    """Small matmuls: the CPU's plain loop nest, one thread per output element."""
    from .matmul_tiling import naive
    return grid_stride(naive(low))
