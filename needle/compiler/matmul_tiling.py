"""Pass 3 — matmul tiling: a matmul group becomes a packing kernel for B and a
tiled, register-blocked macro-kernel (the BLIS loop nest).

    C[b, i, j] = epilogue(sum_k A[b, i, k] * B[b, k, j])

1. pack B into panels of NR columns: Bp[b][pc][jp][kk][NR]   (zero padded)
2. pack A into panels of MR rows:    Ap[b][pc][ip][kk][MR]   (zero padded), in the
   macro-kernel, each row block's panels by the thread that multiplies them,
   at the start of each K block.
   Packing evaluates the operands' expressions (views, transposes, fused
   elementwise producers), so the multiply loops read two dense streams.
3. macro-kernel: threads split the row blocks (MC rows); for each K block (KC),
   each B panel, each A panel of the block, an MR x NR tile accumulates in
   registers — MR unrolled rows times NR columns as SIMD vectors of the host's
   width (AVX-512: 8 x 32 floats = 16 zmm accumulators) — with one broadcast of
   A and one vector load of B per row and step.  The tile is added to C; after
   the last K block the epilogue (bias, activation) is applied as it is stored.
   A matmul of few rows and a deep K splits K between the threads instead (`splits_k`):
   each multiplies one K block into a partial product, and a second kernel sums them
   and applies the epilogue.

Each strategy is a module of its own: which operands the tiles read in place instead
of packing them (matmul_direct), the packing of panels (matmul_packing), an A computed
from rows that lie apart packed row-major (matmul_a_rows), a conv's windows read from
its input (conv_gemm, the implicit GEMM), the tile's way back to C (matmul_write_back).
`lower` picks among the tiling, the row streams of matmuls of few rows or columns
(matmul_rows) and the plain loop nest for small or integer matmuls (matmul_naive).
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from ..dtypes import itemsize
from . import matmul_rows
from .conv_gemm import WINDOW_COLUMNS, tap_loops, window_block, window_operand, window_rows
from .kernel_exprs import unravel
from .lowering import Lowering
from .matmul_a_rows import rows_apart, rows_block
from .matmul_direct import reads_in_place
from .matmul_naive import naive
from .matmul_packing import pack_a_panels, pack_b
from .matmul_epilogue import epilogue_stores
from .matmul_write_back import store_tiles, tile_element, tile_value, write_back

KC = 512        # K block: a B panel (KC x NR) is reused from L1/L2 by every A panel of a block
MC_PANELS = 12  # A panels per row block (MC = 12 * MR rows, an A block of ~200 KB in L2)
SMALL = 48 ** 3  # below this many multiply-adds (all batches) the plain loop nest wins
#: a matmul whose K is at least this many times its rows, of at least this many
#: multiply-adds, splits K between the threads (`splits_k`)
SPLIT_K_DEPTH, SPLIT_K_WORK = 4, 1 << 22


def row_blocks(panels: int, threads: int) -> tuple:
    """(blocks, panels per block): row blocks of at most MC_PANELS panels, a multiple of
    the thread count, each thread taking an equal run of blocks (a static split; 98
    panels in blocks of 12 had given one thread 60 and the other 38).  The last block
    is short when the panels do not divide evenly, and its thread has less to do: of
    the block counts up to two more per thread than the fewest, the one whose busiest
    thread has the fewest panels (64 panels on 2 threads: 4 blocks of 8 per thread, 32
    panels each, where 3 of 11 gave 33 and 31)."""
    fewest = -(-panels // (threads * MC_PANELS))

    def busiest(per_thread: int) -> tuple:
        size = -(-panels // (threads * per_thread))
        return min(per_thread * size, panels), per_thread

    per_thread = min(range(fewest, fewest + 3), key=busiest)
    blocks = threads * per_thread
    return blocks, -(-panels // blocks)


def splits_k(m, depth: int, threads: int, windows: bool) -> int:
    """How many threads each multiply a share of K, writing partial products that a
    second kernel sums and finishes (`Tiling.sum_parts`): 1 (rows split instead) but
    for a single matmul of few rows and a deep K that fits one K block per share (a
    layer's x @ W with a batch of 128 and 784 inputs; not a conv's A read through its
    `windows`).  Split by rows, every thread reads all of B; a weight that the last
    step's threads updated row block by row block (its gradient's matmul, an
    optimizer's elementwise kernel) then comes half from the other core's cache, which
    on the 2-core hosts cost more than the multiply itself.  Split by K, each thread
    reads the rows of B its own core wrote, and only the partial products cross between
    the cores: at most half of B's size (no more shares than K / (2 rows); with many
    threads some stay idle)."""
    if threads < 2 or len(m.shape) != 2 or windows or m.dtype != "float32":
        return 1
    rows = m.shape[0]
    parts = min(threads, depth // (2 * rows))
    if depth < SPLIT_K_DEPTH * rows or depth > parts * KC or depth * math.prod(m.shape) < SPLIT_K_WORK:
        return 1
    return parts


def tile_shape(dtype: str, vector_bytes: int, cols: int = 0) -> tuple:
    """(MR, NR) for SIMD registers of `vector_bytes`: NR is two vectors, MR rows
    fill the registers.  A matmul of at most one vector's worth of columns (`cols`; a
    conv with 16 output channels) takes one vector and twice the rows, else half of
    each tile would be padding and every tile would take the ragged edge's checks."""
    lanes = vector_bytes // itemsize(dtype)
    rows = 8 if vector_bytes >= 64 else 6  # 16 accumulators of 32 zmm registers, 12 of 16 ymm/xmm
    if 0 < cols <= lanes:
        return 2 * rows, lanes
    return rows, 2 * lanes


def lower(make_lowering, new_scratch, target, packed: dict) -> list:
    """Kernels for the matmul group of `make_lowering()` (a fresh Lowering per kernel);
    `new_scratch(elements, dtype)` gives a slot for a packed operand; `packed` (one dict
    per schedule) remembers operands packed already."""
    low = make_lowering()
    m = low.group.matmul
    depth = m.srcs[0].shape[-1]
    if m.dtype not in ("float32", "float64") or not target.loop_nests:
        return [naive(low)]
    # by the total work: a stack of small matrices (attention's heads) tiles well too
    small = math.prod(m.shape) * depth < SMALL
    if window_operand(m) is None:
        if (matmul_rows.suits(m, target, small, lambda: not reads_in_place(make_lowering, m, False))
                and matmul_rows.b_row(low, m)):
            return [matmul_rows.kernel(low, target)]
        if matmul_rows.dot_products(low, m, target):
            return [naive(low, jam=True)]
        if matmul_rows.transposed_suits(low, m, target):
            return [matmul_rows.kernel(low, target, transposed=True)]
    if small:
        return [naive(low)]
    return Tiling(m, make_lowering, new_scratch, target, packed).kernels()


class Tiling:
    def __init__(self, m, make_lowering, new_scratch, target, packed: dict):
        self.m, self.make = m, make_lowering
        self.a, self.b = m.srcs
        self.batch = m.shape[:-2]
        self.BT = math.prod(self.batch)
        self.M, self.N, self.K = m.shape[-2], m.shape[-1], self.a.shape[-1]
        self.MR, self.NR = tile_shape(m.dtype, target.vector_bytes, self.N)
        #: (view, rows, False): A is a conv's windows (conv_gemm.window_operand), read from
        #: the input (in place, `tap_loops`, or packed, `window_rows`) unless their
        #: im2col copy is stored (something else reads it); its K blocks are whole
        #: kernel taps, a run of `run` channels each
        found = window_operand(m)
        if found and id(self.a.srcs[0]) in make_lowering().stored:
            found = None
        self.window = found if found and not found[2] else None
        #: (view, depth axes, True): A is a conv's windows transposed (a weight gradient),
        #: packed from the input (`window_block`)
        self.window_t = found if found and found[2] else None
        self.run = self.window[0].shape[-1] if self.window else 0
        #: shares of K, one K block each, that threads multiply apart (`splits_k`): the
        #: macro-kernel's parallel loop runs over them, writing partial products to
        #: `partial`, which `sum_parts` sums
        self.parts = splits_k(m, self.K, target.threads, found is not None)
        self.KC = self.run * max(1, KC // self.run) if self.window else KC
        if self.parts > 1:  # (a share of K each, a multiple of 16 rows: whole cache lines of B)
            self.KC = -(-self.K // (self.parts * 16)) * 16
        self.KB = -(-self.K // self.KC)
        self.flops = 2 * self.BT * self.M * self.N * self.K
        #: rows of a packed panel: KC, or K when one block holds it (a shorter panel
        #: keeps the packed operand dense: K = 32 in a KC = 512 layout touched 1/16 of it)
        self.PK = self.KC if self.KB > 1 else self.K
        self.MP, self.NP = -(-self.M // self.MR), -(-self.N // self.NR)
        self.IB, self.MCP = row_blocks(self.MP, max(1, target.threads)) if self.parts == 1 else (1, self.MP)
        #: the forward's windows are read in place by the tiles of at most WINDOW_COLUMNS
        #: columns, else packed (`window_rows`): each tile of NR columns reads them again
        self.in_place = self.window is not None and self.N <= WINDOW_COLUMNS
        # A is read one element per row and step (any layout will do; rows past M are
        # clamped, their results dropped); B a SIMD vector per step, so it must be
        # contiguous along j (a ragged last panel is read with masked loads)
        self.direct_a = self.in_place or (not (self.window or self.window_t) and reads_in_place(make_lowering, m, True))
        self.direct_b = reads_in_place(make_lowering, m, False)
        #: A computed from rows that lie apart in memory is packed row-major, computed along
        #: K (`rows_block`), not in [kk][MR] panels gathered MR rows apart
        self.a_rows = not (self.direct_a or self.window or self.window_t) and self.BT == 1 and rows_apart(self)
        if (self.window and not self.in_place) or self.window_t or self.a_rows:  # a block per (K block, row block)
            self.ap, self.packs_a = new_scratch(self.KB * self.IB * self.PK * self.MCP * self.MR, m.dtype), True
        else:
            self.ap, self.packs_a = (None, False) if self.direct_a else self.packed_slot(packed, new_scratch, True)
        self.bp, self.packs_b = (None, False) if self.direct_b else self.packed_slot(packed, new_scratch, False)
        self.partial = new_scratch(self.KB * self.M * self.N, m.dtype) if self.parts > 1 else None

    def packed_slot(self, packed: dict, new_scratch, rows_first: bool) -> tuple:
        """(scratch slot, whether this matmul packs into it): an operand is packed once
        per schedule and layout, so matmuls by one operand share it (an RNN's steps all
        multiply by the same transposed weight; common subexpressions made it one node)."""
        operand = self.a if rows_first else self.b
        width, panels = (self.MR, self.MP) if rows_first else (self.NR, self.NP)
        key = (id(operand), rows_first, width, panels, self.PK, self.KB, self.batch)
        if key in packed:
            return packed[key], False
        packed[key] = new_scratch(self.BT * self.KB * panels * self.PK * width, self.m.dtype)
        return packed[key], True

    def kernels(self) -> list:
        """B's packing kernel (when B is packed here), then the macro-kernel, which packs
        A's panels itself (`pack_a_block`)."""
        return ([pack_b(self)] if self.packs_b else []) + [self.macro()] + \
            ([self.sum_parts()] if self.parts > 1 else [])

    def batch_index(self, bt):
        """bt (flat batch number) as one index per batch dim."""
        return unravel(bt, self.batch)

    def pack_a_block(self, low: Lowering, out: str, bt, ib, pc) -> list:
        """In the macro-kernel, before K block `pc` of row block `ib`: pack the block's
        A panels.  The thread that multiplies them packs them, and they are still in
        its cache when it does (a panel packed on one core and read on another crosses
        between their caches), without a kernel launch."""
        if self.window_t:
            return window_block(self, low, out, ib, pc)
        if self.window:
            return window_rows(self, low, out, ib, pc)
        if self.a_rows:
            return rows_block(self, low, out, ib, pc)
        return pack_a_panels(self, low, out, bt, ib, pc)

    def block_at(self, pc, ib, terms) -> K.Binary:
        """Where `terms` (the place inside the block) fall in the block of A packed for
        K block `pc` and row block `ib` (`window_rows`, `rows_block`, `window_block`, and
        the tiles that read them): the blocks follow each other, K block by K block."""
        rows = self.MCP * self.MR
        return K.affine([(pc, self.IB * self.PK * rows), (ib, self.PK * rows)] + terms)

    def block_row(self, ib, i):
        """Row `i` of row block `ib` of A (rows past M repeat the last; their results
        are dropped)."""
        return K.Binary("min", K.affine([(ib, self.MCP * self.MR), (i, 1)]), K.Const(self.M - 1), K.INDEX)

    def block_depth(self, pc):
        """Rows of K block `pc`: KC, or what is left in the last block."""
        return K.Const(min(self.KC, self.K)) if self.KB == 1 else \
            K.Binary("min", K.Const(self.KC), K.affine([(pc, -self.KC)], self.K), K.INDEX)

    def macro(self) -> K.Kernel:
        low = self.make()
        dtype, MR, NR, PK = self.m.dtype, self.MR, self.NR, self.PK
        # A packed here is stored and read through one name: two pointers to one buffer
        # would be declared not to alias
        ap = None if self.direct_a else low.buffer(self.ap, dtype, "out" if self.packs_a else "in")
        bp = None if self.direct_b else low.buffer(self.bp, dtype, "in")
        out = low.buffer(low.slot_of(low.group.root), low.group.root.dtype, "out") if self.parts == 1 else None
        q, pc, jp, ipo = K.Var("q"), K.Var("pc"), K.Var("jp"), K.Var("ipo")
        bt = K.idiv(q, self.IB) if self.BT > 1 else K.Const(0)
        ib = K.imod(q, self.IB) if self.parts == 1 else K.Const(0)
        if self.parts > 1:  # (a thread's K block: the parallel loop's)
            pc = q
        ip = K.Var("ip")
        kc, kk, r, c = K.Var("kc"), K.Var("kk"), K.Var("r"), K.Var("c")
        a_base = K.Var("pa")
        b_base = K.Var("pb")
        acc_at = K.affine([(r, NR), (c, 1)])
        acc = K.Load("acc", acc_at, dtype)
        k = K.affine([(pc, self.KC), (kk, 1)])
        ragged_b = None  # B read in place with a ragged last panel: its columns past N masked off
        if self.direct_b:
            column = K.affine([(jp, NR), (c, 1)])
            b_value = low.gen(self.b, self.batch_index(bt) + (k, column))
            if self.N % NR:
                ragged_b = K.Load(b_value.buf, b_value.index, dtype, K.Binary("lt", column, K.Const(self.N), "bool"))
        else:
            b_value = K.Load(bp, K.affine([(b_base, 1), (kk, NR), (c, 1)]), dtype)
        if self.in_place:
            a_value = None  # read per kernel tap: tap_loops
        elif self.window or self.a_rows:  # packed row-major, [MC rows][PK]
            a_value = K.Load(ap, K.affine([(a_base, 1), (r, PK), (kk, 1)]), dtype)
        elif self.window_t:  # packed [PK][MC rows]
            a_value = K.Load(ap, K.affine([(a_base, 1), (kk, self.MCP * MR), (r, 1)]), dtype)
        elif self.direct_a:
            row = K.Binary("min", K.affine([(ip, MR), (r, 1)]), K.Const(self.M - 1), K.INDEX)
            a_value = low.gen(self.a, self.batch_index(bt) + (row, k))
        else:
            a_value = K.Load(ap, K.affine([(a_base, 1), (kk, MR), (r, 1)]), dtype)

        def k_loop(b_value, width=NR):
            update = K.Binary("add", acc, K.Binary("mul", K.Var("a_r", dtype), b_value, dtype, contract=True), dtype)

            def rows(a_value):
                return K.Loop("r", MR, [K.Let("a_r", a_value),
                                        K.Loop("c", width, [K.Store("acc", acc_at, update)], "vector")], "unroll")
            if not self.in_place:
                return [K.Loop("kk", kc, [rows(a_value)])]
            return tap_loops(self, low, pc, kc, ip, rows)
        multiply = k_loop(b_value)
        if ragged_b is not None:
            # a last panel of at most half the tile's columns (100 = 3 x 32 + 4) multiplies
            # only its first half: the other half of its accumulators stays zero
            width = NR // 2 if self.N % NR <= NR // 2 else NR
            last = K.Binary("eq", jp, K.Const(self.NP - 1), "bool")
            multiply = [K.If(K.Unary("not", last, "bool"), multiply), K.If(last, k_loop(ragged_b, width))]
        zero = K.Loop("r", MR, [K.Loop("c", NR, [K.Store("acc", acc_at, K.Const(0, dtype))], "vector")], "unroll")
        spill = K.Loop("r", MR, [K.Loop("c", NR, [K.Store("tile", acc_at, acc)], "vector")], "unroll")
        tile = [K.LocalArray("acc", dtype, MR * NR), zero,
                K.Let("pa", self.block_at(pc, ib, [(ipo, MR * (PK if self.window or self.a_rows else 1))])
                      if self.window or self.window_t or self.a_rows else
                      K.affine([(bt, self.KB * self.MP * PK * MR), (pc, self.MP * PK * MR), (ip, PK * MR)])),
                K.Let("pb", K.affine([(bt, self.KB * self.NP * PK * NR), (pc, self.NP * PK * NR), (jp, PK * NR)])),
                *multiply, spill] + (write_back(self, low, out, bt, ip, jp, pc) if self.parts == 1 else
                                     self.write_part(low, ip, jp, pc))
        runs = [K.LocalArray("runs", dtype, MR * self.run)] if self.in_place and self.window[0].arg.mask else []
        block = [K.Let("kc", self.block_depth(pc)),
                 *(self.pack_a_block(low, ap, bt, ib, pc) if self.packs_a else []),
                 K.Loop("jp", self.NP, [K.Loop("ipo", self.MCP, [
                     K.Let("ip", K.affine([(ib, self.MCP), (ipo, 1)])),
                     K.If(K.Binary("lt", ip, K.Const(self.MP), "bool"), tile)])])]
        body = [K.LocalArray("tile", dtype, MR * NR), *runs] + \
            (block if self.parts > 1 else [K.Loop("pc", self.KB, block)])
        total = self.KB if self.parts > 1 else self.BT * self.IB
        return low.kernel([K.Loop("q", total, body, "parallel")], ("q", total), work=self.flops,
                          thread_work=self.flops)

    def write_part(self, low: Lowering, ip, jp, pc) -> list:
        """Tile (ip, jp) of K block `pc`'s partial product, stored in `partial` (split K)."""
        part = low.buffer(self.partial, self.m.dtype, "out")
        i, j = tile_element(self, ip, jp)
        at = K.affine([(pc, self.M * self.N), (i, self.N), (j, 1)])
        return store_tiles(self, [K.Store(part, at, K.Var("sum", self.m.dtype))], ip, jp, i, j, tile_value(self))

    def sum_parts(self) -> K.Kernel:
        """The kernel after a macro-kernel that split K: C = epilogue(sum of the partial
        products), row panels split between the threads, as the rows a split by rows gives."""
        low, dtype = self.make(), self.m.dtype
        part = low.buffer(self.partial, dtype, "in")
        out = low.buffer(low.slot_of(low.group.root), low.group.root.dtype, "out")
        ip, jp = K.Var("q"), K.Var("jp")
        i, j = tile_element(self, ip, jp)
        at = K.affine([(i, self.N), (j, 1)])
        total = K.Load(part, at, dtype)
        for pc in range(1, self.KB):
            total = K.Binary("add", total, K.Load(part, K.affine([(i, self.N), (j, 1)], pc * self.M * self.N), dtype),
                             dtype)
        low.matmul_value = K.Var("sum", dtype)
        stores = epilogue_stores(low, out, at, K.Const(0), i, j)
        body = [K.Loop("jp", self.NP, store_tiles(self, stores, ip, jp, i, j, total))]
        return low.kernel([K.Loop("q", self.MP, body, "parallel")], ("q", self.MP), work=self.KB * self.M * self.N,
                          name=f"{low.group.name}_K{self.KB}")
