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

A small operand, or a row-major A, is read in place instead of packed (`reads_in_place`); an A
computed from rows that lie apart in memory (relu(z + b)) is packed row-major, computed
along K (`rows_block`).
A conv's A, its im2col matrix of input windows, is read in place too, from the
input (the implicit GEMM: `tap_loops`; its K blocks are whole kernel taps), or with
many output channels packed from it (`window_rows`), and a weight gradient's A, the
windows transposed, is packed from the input (`window_block`).
Small or integer matmuls use the plain loop nest (`naive`).
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from ..dtypes import itemsize
from .kernel_exprs import coefficient, loads, unravel
from .fusion import window_operand
from . import matmul_rows
from .matmul_epilogue import epilogue, epilogue_stores
from .row_jam import jam_rows
from .lowering import Lowering, linear, mask_expr, nest
from .views import View

KC = 512        # K block: a B panel (KC x NR) is reused from L1/L2 by every A panel of a block
MC_PANELS = 12  # A panels per row block (MC = 12 * MR rows, an A block of ~200 KB in L2)
SMALL = 48 ** 3  # below this many multiply-adds (all batches) the plain loop nest wins
#: an operand read straight from its buffer (a parameter, an activation) of at most this many
#: elements per matrix (of a stack: attention's heads) is not packed: it stays in cache across
#: panels, and packing it would cost a copy on every call.  A is read as MR row streams, B as rows of panels: past
#: these sizes the packed layout's locality wins (measured: 512^3 and 784x128x256 with a
#: transposed A ran 15-35% slower unpacked)
DIRECT_LIMIT = {"a": 1 << 14, "b": 1 << 17}
#: a larger A is read in place when reading it is cheap: at any size when k is its
#: contiguous axis (each of the tile's MR row streams reads on in memory), up to
#: A_AFFINE_LIMIT elements when its index is otherwise affine in k (no division: a conv's
#: im2col view is packed, its every read would divide).  Packing A gathers across its rows
#: on every call, for every K block of every row block, and few B panels share the cost
#: when N is small.  In-process A/B against packing, one thread: 4096x256x64 0.76x the
#: time, 2048x4096x64 0.63x, 1024x512x96 0.79x, 1024x1024x256 0.89x, 1024^3 0.96x,
#: 512^3 0.96x, 2048^3 1.00x; two threads: 1024x1024x256 0.88x, 1024^3 0.90x, 512^3
#: 0.96-0.99x; with the limit then at 131,072 elements, 256^3 0.88-0.91x, 128x784x256
#: 0.93x.  A transposed A of 100,352 elements (x.T @ g at 784x128x256) ran 1.07-1.09x,
#: so past A_AFFINE_LIMIT only a row-major A qualifies.
A_AFFINE_LIMIT = 1 << 16
#: a larger B is still read in place when at most this many rows of A reuse it and its rows
#: lie at most B_ROW_BYTES apart: packing costs a copy of B on every call, more than the
#: strided reads save when few A panels reuse each B panel (128x784x256: 0.71-0.78x the
#: packed time, 32x784x256 0.68x, 16x256x1024 0.44x; 384 rows: no gain).  Rows 4 KB apart
#: share too few cache sets (256x512x1024 ran 1.66x slower in place); a small B whose rows
#: lie that far apart is packed too when more rows of A reuse it (in-process A/B, packed
#: against in place, 1 and 2 threads: 1024x128x1024 0.90x and 0.91x, 512x64x2048 0.80x
#: and 0.97x, 2048x32x1024 0.86x and 0.89x; 256x96x1024 1.02x and 1.28x, so not there).
#: Rows farther apart are read in place too unless their distance is a multiple of
#: ALIASING_BYTES, where they share too few sets at every cache level (in-process A/B,
#: 2 threads, AVX2, in place against packed: 4000-byte rows 16x1000x1000 0.41x the time,
#: 32x320x1000 0.51x, 64x320x1000 with A transposed 0.66x, 128x784x1000 0.68x,
#: 192x512x1000 0.85x, 256x320x1000 0.87x, 256x1000x784 0.87x; 3072 and 6144-byte rows
#: 64x512x768 0.70x, 128x256x1536 0.88x; 4096-byte rows 128x512x1024 1.17x,
#: 128x1024x1024 1.21x, 256x512x1024 1.38x)
FEW_ROWS, B_ROW_BYTES, ALIASING_BYTES = 256, 2048, 4096
#: a conv's forward reads its windows in place (`tap_loops`) for at most this many output
#: channels; with more, each tile of NR channels would read them again, and they are
#: packed once per row block instead (`window_rows`).  In-process A/B, 2 threads, AVX2,
#: (N, H, C_in, C_out) 3x3: in place against the stored im2col 16x32x64x64 0.80x the
#: time (no padding 0.76x), 16x16x128x128 0.90-0.98x, 16x8x256x256 1.07x; packed
#: against in place 16x32x64x64 1.09x, 16x32x32x32 1.22x, 16x16x128x128 0.99x; packed
#: against the im2col 16x16x128x256 0.94x, 16x32x64x256 0.93x, 16x16x256x256 0.99x
WINDOW_COLUMNS = 128


def row_blocks(panels: int, threads: int) -> tuple:
    """(blocks, panels per block): row blocks of at most MC_PANELS panels, a multiple of
    the thread count, each thread taking an equal run of blocks (a static split; 98
    panels in blocks of 12 had given one thread 60 and the other 38).  The last block
    is short when the panels do not divide evenly, and its thread has less to do: of
    the block counts up to two more per thread than the fewest, the one whose busiest
    thread has the fewest panels (64 panels on 2 threads: 4 blocks of 8 per thread, 32
    panels each, where 3 of 11 gave 33 and 31: 512^3 ran 0.97x the time)."""
    fewest = -(-panels // (threads * MC_PANELS))

    def busiest(per_thread: int) -> tuple:
        size = -(-panels // (threads * per_thread))
        return min(per_thread * size, panels), per_thread

    per_thread = min(range(fewest, fewest + 3), key=busiest)
    blocks = threads * per_thread
    return blocks, -(-panels // blocks)


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
    if m.dtype not in ("float32", "float64") or target.name != "cpu":
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
        #: (view, rows, False): A is a conv's windows (fusion.window_operand), read from
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
        self.KC = self.run * max(1, KC // self.run) if self.window else KC
        self.KB = -(-self.K // self.KC)
        self.flops = 2 * self.BT * self.M * self.N * self.K
        #: rows of a packed panel: KC, or K when one block holds it (a shorter panel
        #: keeps the packed operand dense: K = 32 in a KC = 512 layout touched 1/16 of it)
        self.PK = self.KC if self.KB > 1 else self.K
        self.MP, self.NP = -(-self.M // self.MR), -(-self.N // self.NR)
        self.IB, self.MCP = row_blocks(self.MP, max(1, target.threads))
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
        self.a_rows = not (self.direct_a or self.window or self.window_t) and self.BT == 1 and self.rows_apart()
        if (self.window and not self.in_place) or self.window_t or self.a_rows:  # a block per (K block, row block)
            self.ap, self.packs_a = new_scratch(self.KB * self.IB * self.PK * self.MCP * self.MR, m.dtype), True
        else:
            self.ap, self.packs_a = (None, False) if self.direct_a else self.packed_slot(packed, new_scratch, True)
        self.bp, self.packs_b = (None, False) if self.direct_b else self.packed_slot(packed, new_scratch, False)

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
        return ([self.pack_b()] if self.packs_b else []) + [self.macro()]

    def batch_index(self, bt):
        """bt (flat batch number) as one index per batch dim."""
        return unravel(bt, self.batch)

    def panel(self, low: Lowering, operand, out: str, rows_first: bool, bt, pc, p, panels: int = 0,
              first=None) -> list:
        """Statements that pack panel `p` of K block `pc` (batch `bt`) of `operand` into
        `out`: packed[bt][pc][p][kk][w] = operand at (row or column p * width + w,
        k = pc * KC + kk), for the `kc` rows of the block (bound by the caller).  Whole
        panels copy without checks, a SIMD vector of w at a time (a gather when the
        source is strided along w); panels on the ragged edge check and pad.  With
        `panels`, the whole panels first, first + 1, ... (p their loop variable) are
        packed together, each step of K for all of them in turn."""
        dtype = self.m.dtype
        width, limit = (self.MR, self.M) if rows_first else (self.NR, self.N)
        panels_total = self.MP if rows_first else self.NP
        kk, w = K.Var("kk"), K.Var("w")
        outer = K.affine([(p, width), (w, 1)])        # row (A) or column (B)
        k = K.affine([(pc, self.KC), (kk, 1)])
        base = K.affine([(bt, self.KB * panels_total), (pc, panels_total), (p, 1)])
        at = K.affine([(base, self.PK * width), (kk, width), (w, 1)])

        def operand_at(o):
            return low.gen(operand, self.batch_index(bt) + ((o, k) if rows_first else (k, o)))

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

    def pack_b(self) -> K.Kernel:
        """The kernel that packs B: every thread of the macro-kernel reads all of it,
        so it is packed before.  Threaded by its own size, a copy's (not by the
        matmul's flops: ResNet9's 3-5 us packs of 2-5 MFLOP matmuls took 12-17 us on
        two threads)."""
        low = self.make()
        out = low.buffer(self.bp, self.m.dtype, "out")
        q, panels = K.Var("q"), self.NP
        total = self.BT * self.KB * panels
        bt = K.idiv(q, self.KB * panels) if self.BT > 1 else K.Const(0)
        pc = K.imod(K.idiv(q, panels), self.KB)
        p = K.imod(q, panels) if self.BT * self.KB > 1 else q
        body = [K.Let("kc", self.block_depth(pc))] + self.panel(low, self.b, out, False, bt, pc, p)
        return low.kernel([K.Loop("q", total, body, "parallel")], ("q", total), work=total * self.PK * self.NR,
                          name="PB_" + "_".join(map(str, self.b.shape)))

    def pack_a_block(self, low: Lowering, out: str, bt, ib, pc) -> list:
        """In the macro-kernel, before K block `pc` of row block `ib`: pack the block's
        A panels.  The thread that multiplies them packs them, and they are still in
        its cache when it does (a panel packed on one core and read on another crossed
        between their caches: 784x128x256 ran 1.6x slower), without a kernel launch."""
        if self.window_t:
            return self.window_block(low, out, ib, pc)
        if self.window:
            return self.window_rows(low, out, ib, pc)
        if self.a_rows:
            return self.rows_block(low, out, ib, pc)
        p = K.Var("p")
        per_panel = [K.Loop("ipo", self.MCP, [
            K.Let("p", K.affine([(ib, self.MCP), (K.Var("ipo"), 1)])),
            K.If(K.Binary("lt", p, K.Const(self.MP), "bool"), self.panel(low, self.a, out, True, bt, pc, p))])]
        if self.MCP == 1:
            return per_panel
        # a block of whole panels is packed row of K by row of K, every panel's share of
        # it in turn: a transposed A (a weight gradient's x.T) is then read along its rows,
        # each cache line once, where a panel at a time took 32 of a line's 64 bytes on
        # every step of K and read each line again for the next panel (in-process A/B,
        # x.T @ g, 2 threads: 16384x576x64 0.92x the time, 4096x576x128 0.93-0.99x,
        # 1024x1152x256 0.98x)
        whole = K.Binary("le", K.affine([(ib, self.MCP * self.MR)], self.MCP * self.MR), K.Const(self.M), "bool")
        by_rows = self.panel(low, self.a, out, True, bt, pc, p, panels=self.MCP, first=K.affine([(ib, self.MCP)]))
        return [K.If(whole, by_rows), K.If(K.Unary("not", whole, "bool"), per_panel)]

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

    def rows_apart(self) -> bool:
        """Whether A is computed from its producers (a bias and an activation fused in)
        out of loads contiguous along K whose rows lie apart: packed into [kk][MR] panels
        it would be gathered MR rows apart at every step of K.  Packed row-major
        instead, relu(z + b) @ w took (2 threads, AVX2) 128x256x64 60 us instead of 100
        (a stored A read in place: 51), 128x784x256 370 instead of 420 (347),
        100x100x50 24.5 instead of 32.5 (21.5), 128x256x10 23.7 instead of 64.6 (20.5;
        computed by the tile itself, 38.9)."""
        value = self.make().gen(self.a, self.batch_index(K.Const(0)) + (K.Var("probe_i"), K.Var("probe_k")))
        strides = _load_strides(value)
        return bool(strides) and not isinstance(value, K.Load) and \
            all(along in (0, 1) for _, along in strides) and any(across not in (0, 1) for across, _ in strides)

    def rows_block(self, low: Lowering, out: str, ib, pc) -> list:
        """Statements that pack row block `ib` of K block `pc` of a computed A whose
        rows lie apart (`rows_apart`): each row of the block computed along K, vector
        loads and stores, into the block row-major [MCP * MR][PK], which the tiles read
        as MR row streams (rows past M repeat the last; their results are dropped)."""
        i, kk = K.Var("ai"), K.Var("ak")
        k = K.affine([(pc, self.KC), (kk, 1)])
        value = low.gen(self.a, self.batch_index(K.Const(0)) + (self.block_row(ib, i), k))
        at = self.block_at(pc, ib, [(i, self.PK), (kk, 1)])
        # (a plain inner loop: its length, the block's depth, is known at run time only,
        # and LLVM's loop vectorizer takes it)
        return [K.Loop("ai", self.MCP * self.MR, [K.Loop("ak", K.Var("kc"), [K.Store(out, at, value)])])]

    def window_rows(self, low: Lowering, out: str, ib, pc) -> list:
        """Statements that pack row block `ib` of K block `pc` of A = a conv's windows
        (the forward of a conv with more than WINDOW_COLUMNS output channels) from the
        input: each row's run of channels of each kernel tap is one contiguous copy
        (or zeros, where its window reads padding) into the block, row-major
        [MCP * MR][PK], which the tiles read as MR row streams (rows past M repeat the
        last; their results are dropped)."""
        view, nrows, _ = self.window
        w, run = view.arg, self.run
        i, t, c = K.Var("wi"), K.Var("wt"), K.Var("wc")
        index = unravel(self.block_row(ib, i), w.shape[:nrows]) + \
            unravel(K.affine([(pc, self.KC // run), (t, 1)]), w.shape[nrows:-1])
        value = low.gen(view, index + (c,))
        at = self.block_at(pc, ib, [(i, self.PK), (t, run), (c, 1)])
        body = copy_run(lambda v: K.Loop("wc", run, [K.Store(out, at, v)], "vector"), value,
                        mask_expr(w, index + (K.Const(0),)))
        return [K.Loop("wi", self.MCP * self.MR, [K.Loop("wt", K.idiv(K.Var("kc"), run), body)])]

    def window_block(self, low: Lowering, out: str, ib, pc) -> list:
        """Statements that pack row block `ib` of K block `pc` of A = a conv's windows
        transposed (a weight gradient: rows (kh, kw, c), depth (n, ho, wo)) from the
        input itself: for each step of depth, each kernel tap's run of channels in the
        block is one contiguous copy (or zeros, where the window reads padding) into
        the block's row of K, [kk][MCP * MR], which the tiles read MR rows at a time.
        (The stored im2col copy was written, then read across its rows by the packing,
        once per call: 2 x 38 MB for a 3x3 conv of 16 x 32 x 32 x 64.)"""
        view, nrows, _ = self.window_t
        w, run, rows = view.arg, view.shape[-1], self.MCP * self.MR
        kk, t, c = K.Var("wk"), K.Var("wt"), K.Var("wc")
        first = K.affine([(ib, rows)])
        stop = K.Binary("min", K.affine([(ib, rows)], rows), K.Const(self.M), K.INDEX)
        first_tap = K.idiv(first, run)
        taps = K.Binary("sub", K.affine([(K.idiv(K.affine([(stop, 1)], -1), run), 1)], 1), first_tap, K.INDEX)
        row = K.affine([(t, run), (c, 1)])
        index = unravel(K.affine([(pc, self.KC), (kk, 1)]), w.shape[:nrows]) + unravel(t, w.shape[nrows:-1])
        value = low.gen(view, index + (c,))
        at = K.Binary("sub", self.block_at(pc, ib, [(kk, rows), (row, 1)]), first, K.INDEX)
        # the block's channels of this tap, [lo, hi): plain loops LLVM vectorizes (a
        # guarded load's address is chosen lane by lane, which it cannot)
        lo = K.Binary("max", K.Const(0), K.Binary("sub", first, K.affine([(t, run)]), K.INDEX), K.INDEX)
        hi = K.Binary("min", K.Const(run), K.Binary("sub", stop, K.affine([(t, run)]), K.INDEX), K.INDEX)
        extent = K.Binary("sub", hi, lo, K.INDEX)
        body = copy_run(lambda v: K.Loop("wc", extent, [K.Store(out, at, v)], start=lo), value,
                        mask_expr(w, index + (K.Const(0),)))
        return [K.Loop("wk", K.Var("kc"), [K.Loop("wt", taps, body, start=first_tap)])]

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
        out = low.buffer(low.slot_of(low.group.root), low.group.root.dtype, "out")
        q, pc, jp, ipo = K.Var("q"), K.Var("pc"), K.Var("jp"), K.Var("ipo")
        bt = K.idiv(q, self.IB) if self.BT > 1 else K.Const(0)
        ib = K.imod(q, self.IB)
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
            update = K.Binary("add", acc, K.Binary("mul", K.Var("a_r", dtype), b_value, dtype), dtype)

            def rows(a_value):
                return K.Loop("r", MR, [K.Let("a_r", a_value),
                                        K.Loop("c", width, [K.Store("acc", acc_at, update)], "vector")], "unroll")
            if not self.in_place:
                return [K.Loop("kk", kc, [rows(a_value)])]
            return self.tap_loops(low, pc, kc, ip, rows)
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
                *multiply, spill] + self.write_back(low, out, bt, ip, jp, pc)
        runs = [K.LocalArray("runs", dtype, MR * self.run)] if self.in_place and self.window[0].arg.mask else []
        body = [K.LocalArray("tile", dtype, MR * NR), *runs,
                K.Loop("pc", self.KB, [
                    K.Let("kc", self.block_depth(pc)),
                    *(self.pack_a_block(low, ap, bt, ib, pc) if self.packs_a else []),
                    K.Loop("jp", self.NP, [K.Loop("ipo", self.MCP, [
                        K.Let("ip", K.affine([(ib, self.MCP), (ipo, 1)])),
                        K.If(K.Binary("lt", ip, K.Const(self.MP), "bool"), tile)])])])]
        total = self.BT * self.IB
        return low.kernel([K.Loop("q", total, body, "parallel")], ("q", total), work=self.flops,
                          thread_work=self.flops)

    def tap_loops(self, low: Lowering, pc, kc, ip, rows) -> list:
        """The depth loop of a tile when A is a conv's windows (`window_operand`): for
        each kernel tap of K block `pc`, a run of channels (k = tap * run + cc), each
        of the MR rows reading its window's run in place, from its own position in
        the input (the division of a row into (n, ho, wo) is the same for every tap
        and step, and hoisted out of them).  `rows(a_value)` is the update of the
        tile by one step.  A tap that all MR rows read inside the input (the most,
        away from the borders) reads in place; at the others the rows' runs are
        first copied to `runs`, zeros where a row reads padding (masked loads in the
        depth loop itself, a select per row and step, took 1.07x the stored im2col's
        time on 16x32x32x64 3x3; the copies 0.80-0.83x, no padding at all 0.76x).
        A tile whose rows read inside the input at every tap skips the per-tap test."""
        view, nrows, _ = self.window
        w = view.arg
        tt, cc = K.Var("tt"), K.Var("cc")
        tap = K.affine([(pc, self.KC // self.run), (tt, 1)])

        def window_index(r):  # row r of the tile (rows past M repeat the last), this tap, channel cc
            row = K.Binary("min", K.affine([(ip, self.MR), (r, 1)]), K.Const(self.M - 1), K.INDEX)
            return unravel(row, w.shape[:nrows]) + unravel(tap, w.shape[nrows:-1]) + (cc,)
        masked = low.gen(view, window_index(K.Var("r")))
        taps = K.idiv(kc, self.run)

        def over_run(a_value):  # the tile's steps along this tap's run, k = tap * run + cc
            return K.Loop("cc", self.run, [K.Let("kk", K.affine([(tt, self.run), (cc, 1)])), rows(a_value)])
        if not w.mask:
            return [K.Loop("tt", taps, [over_run(masked)])]
        inside = None  # the mask does not depend on the channel
        for r in range(self.MR):
            inside = K.land(inside, mask_expr(w, window_index(K.Const(r))))
        plain = K.Load(masked.buf, masked.index, masked.dtype)
        at_run = K.affine([(K.Var("r"), self.run), (cc, 1)])
        copy = K.Loop("r", self.MR, [K.Loop("cc", self.run, [K.Store("runs", at_run, masked)], "vector")])
        per_tap = K.Loop("tt", taps, [
            K.If(inside, [over_run(plain)]),
            K.If(K.Unary("not", inside, "bool"), [copy, over_run(K.Load("runs", at_run, masked.dtype))])])
        # every row inside at every tap: each constraint lo <= row part + tap part < hi
        # holds for the tap part's least and greatest values
        tile_inside = None
        for coeffs, lo, hi in w.mask:
            taps_low = sum(min(0, c * (n - 1)) for c, n in zip(coeffs[nrows:], w.shape[nrows:]))
            taps_high = sum(max(0, c * (n - 1)) for c, n in zip(coeffs[nrows:], w.shape[nrows:]))
            for r in range(self.MR):
                part = linear(window_index(K.Const(r))[:nrows], coeffs[:nrows], 0)
                tile_inside = K.land(tile_inside, K.land(K.Binary("le", K.Const(lo - taps_low), part, "bool"),
                                                         K.Binary("lt", part, K.Const(hi - taps_high), "bool")))
        return [K.If(tile_inside, [K.Loop("tt", taps, [over_run(plain)])]),
                K.If(K.Unary("not", tile_inside, "bool"), [per_tap])]

    def write_back(self, low: Lowering, out, bt, ip, jp, pc) -> list:
        """C (+)= tile, with the epilogue applied (and the extra roots stored) after the
        last K block."""
        m, MR, NR = self.m, self.MR, self.NR
        r, c = K.Var("wr"), K.Var("wc")
        i = K.affine([(ip, MR), (r, 1)])
        j = K.affine([(jp, NR), (c, 1)])
        at = K.affine([(bt, self.M * self.N), (i, self.N), (j, 1)])
        dtype = m.dtype
        first = K.Binary("eq", pc, K.Const(0), "bool")
        previous = K.Where(first, K.Const(0, dtype), K.Load(out, at, dtype), dtype)
        total = K.Binary("add", previous, K.Load("tile", K.affine([(r, NR), (c, 1)]), dtype), dtype)
        low.matmul_value = K.Var("sum", dtype)
        root = low.group.root
        last = K.Binary("eq", pc, K.Const(self.KB - 1), "bool")
        if self.KB == 1:
            return self.store_tiles(epilogue_stores(low, out, at, bt, i, j), ip, jp, i, j, total)
        if not low.group.extra:  # the partial sum until the last K block, then the epilogue
            value = K.Where(last, epilogue(low, bt, i, j), low.matmul_value, root.dtype)
            return self.store_tiles([K.Store(out, at, value)], ip, jp, i, j, total)
        # extra roots are stored once, after the last K block: a branch per block, not per element
        return [K.If(last, self.store_tiles(epilogue_stores(low, out, at, bt, i, j), ip, jp, i, j, total)),
                K.If(K.Unary("not", last, "bool"),
                     self.store_tiles([K.Store(out, at, low.matmul_value)], ip, jp, i, j, total))]

    def store_tiles(self, stores, ip, jp, i, j, total) -> list:
        """`stores` for each element of tile (ip, jp), after `sum = total`.  Tiles of
        whole columns store each row as SIMD vectors (rows past M skipped); tiles on
        the ragged column edge check each element (the epilogue's loads, a bias, may
        not read past N)."""
        MR, NR = self.MR, self.NR
        update = [K.Let("sum", total)] + stores
        if self.M % MR == 0:
            rows = K.Loop("wr", MR, [K.Loop("wc", NR, update, "vector")], "unroll")
        else:
            rows = K.Loop("wr", MR, [K.If(K.Binary("lt", i, K.Const(self.M), "bool"),
                                          [K.Loop("wc", NR, update, "vector")])], "unroll")
        if self.N % NR == 0:
            return [rows]
        inside = K.land(K.Binary("lt", i, K.Const(self.M), "bool"), K.Binary("lt", j, K.Const(self.N), "bool"))
        guarded = K.Loop("wr", MR, [K.Loop("wc", NR, [K.If(inside, update)])])
        whole = K.Binary("le", K.affine([(jp, NR)], NR), K.Const(self.N), "bool")
        return [K.If(whole, [rows]), K.If(K.Unary("not", whole, "bool"), [guarded])]


def reads_in_place(make, m, rows_first: bool) -> bool:
    """Whether the macro-kernel reads A (`rows_first`) or B from its buffer: a plain load (no
    fused computation, which every panel would repeat), no mask, (for B) contiguous
    along its columns, and small enough to stay in cache (for B with rows close
    enough, or few rows of A), or (for A) row-major, or affine in k and not much
    larger (A_AFFINE_LIMIT), or (for B) reused by few rows of A (FEW_ROWS) with rows
    close enough or apart by other than a multiple of ALIASING_BYTES."""
    elements = math.prod(m.srcs[0 if rows_first else 1].shape[-2:])  # one matrix of a stack
    small = elements <= DIRECT_LIMIT["a" if rows_first else "b"]
    if not small and not rows_first and m.shape[-2] > FEW_ROWS:
        return False
    value = matmul_rows.operand_load(make(), m, 0 if rows_first else 1)
    if value is None or not (rows_first or coefficient(value.index, "probe_j") == 1):
        return False
    k_stride = coefficient(value.index, "probe_k")
    if rows_first:
        return small or k_stride == 1 or (k_stride is not None and elements <= A_AFFINE_LIMIT)
    row_bytes = (k_stride or 0) * itemsize(m.dtype)
    if small:  # unless its rows share too few cache sets and many rows of A reuse it
        return row_bytes <= B_ROW_BYTES or m.shape[-2] <= FEW_ROWS
    return 0 < row_bytes and (row_bytes <= B_ROW_BYTES or row_bytes % ALIASING_BYTES != 0)


def copy_run(copy, value, valid) -> list:
    """`copy(v)` (statements storing v along a run of a window's channels) of the run's
    plain loads where the window reads inside the input, of zeros where it reads
    padding: `valid`, the window's mask, is the same for every channel of the run (None:
    no padding), so the test is made once a run, not per element."""
    if valid is None:
        return [copy(value)]
    return [K.If(valid, [copy(K.Load(value.buf, value.index, value.dtype))]),
            K.If(K.Unary("not", valid, "bool"), [copy(K.Const(0, value.dtype))])]


def _load_strides(value) -> list:
    """(stride across rows, stride along K) of each load of an A operand's expression
    at (probe_i, probe_k); [] if it is not arithmetic on unmasked, affine loads."""
    found = loads(value)
    if found is None or any(e.valid is not None for e in found):
        return []
    strides = [(coefficient(e.index, "probe_i"), coefficient(e.index, "probe_k")) for e in found]
    return [] if any(None in pair for pair in strides) else strides


def naive(low: Lowering, jam: bool = False) -> K.Kernel:
    """for batch, i, j: acc = sum_k A[b, i, k] * B[b, k, j]; C[b, i, j] = epilogue(acc).
    With `jam` (dot products of contiguous runs, matmul_rows.dot_products), four
    outputs of the innermost loop at a time (row_jam): the operand they share is
    read once for the four."""
    g = low.group
    m = g.matmul
    a, b = m.srcs
    shape = m.shape
    batch = shape[:-2]
    idx = [K.Const(0) if n == 1 else K.Var(f"b{d}") for d, n in enumerate(batch)]
    i = K.Var("i") if shape[-2] != 1 else K.Const(0)
    j = K.Var("j") if shape[-1] != 1 else K.Const(0)
    kk = K.Var("kk")
    acc = "acc"
    body = [K.Declare(acc, m.dtype, K.Const(0, m.dtype))]
    prod = K.Binary("mul", low.gen(a, tuple(idx) + (i, kk)), low.gen(b, tuple(idx) + (kk, j)), m.dtype)
    body.append(K.Loop("kk", a.shape[-1], [K.Assign(acc, K.Binary("add", K.Var(acc, m.dtype), prod, m.dtype))]))
    low.matmul_value = K.Var(acc, m.dtype)
    flat_batch = K.affine([(b, math.prod(batch[d + 1:])) for d, b in enumerate(idx)])
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    body += epilogue_stores(low, out, linear(tuple(idx) + (i, j), View.contiguous(shape).strides, 0), flat_batch, i, j)
    loops = [(f"b{d}", n) for d, n in enumerate(batch) if n != 1]
    loops += [(v.name, n) for v, n in ((i, shape[-2]), (j, shape[-1])) if isinstance(v, K.Var)]
    jammed = jam_rows(loops, body, a.shape[-1]) if jam else None
    if jammed is not None:
        loops, body = jammed
    return low.kernel(*nest(loops, body), work=math.prod(shape) * a.shape[-1])
