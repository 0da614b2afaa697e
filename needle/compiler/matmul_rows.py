"""Matmuls of few rows (a matrix-vector product, a batch of a few samples) as one
kernel that streams B's rows: for each chunk of columns, C's few rows accumulate in
a local array while each step reads four rows of B along the chunk,

    acc[i, c] += A[i, k] B[k, j0 + c] + ... + A[i, k + 3] B[k + 3, j0 + c]

and the epilogue (bias, activation) is applied as the chunk is stored.  Threads take
chunks of columns.

The register tiles of matmul_tiling waste most of their rows here (1 x 1024 x 1024
computes 6 rows for one on AVX2) and walk B down its columns, so a large B, or one
whose rows alias in the cache, is packed first: a copy of all of B on every call, for
a product that reads each element of B M times.  Streamed, each element of B is read
once from memory, four contiguous runs at a time, and the chunk's rows reuse it from
L1.  The gain shrinks as the rows grow; past ROWS_MAX the tiles win again
(`benchmarks/bench_cpu.py`'s "matmul 1x1024x1024" and "matmul 32x512x2048" time this
path).

A matmul too small to tile (matmul_tiling.SMALL) streams B's rows too, whatever its rows,
from SMALL_DEPTH steps of K: the plain nest it replaces reads B down its columns.

A matrix-vector product W @ x (or x @ W.T) is instead one dot product of two contiguous
runs per element (`dot_products`), and W.T @ x this kernel on C^T = x^T W.
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from ..dtypes import itemsize
from .kernel_exprs import coefficient, unravel
from .lowering import Lowering
from .matmul_epilogue import epilogue_stores

#: at most this many rows of C take this path whatever B is
ROWS_ALWAYS = 4
#: up to this many rows when the tiling would pack B (a copy of it on every call)
ROWS_MAX = 48
#: a chunk's accumulators (rows x columns) fill at most this many bytes of L1
ACC_BYTES = 8192
#: steps of K per pass over a chunk: four runs of B read together
UNROLL = 4
#: a matmul too small to tile streams B's rows from this depth on, whatever its rows;
#: shallower ones are quicker as the plain nest
SMALL_DEPTH = 16


def suits(m, target, small: bool, b_packed) -> bool:
    """Whether matmul `m` (A (.., M, K) @ B (.., K, N)) streams B's rows: at least one
    AVX2 vector of columns (on AVX-512 too: 8 to 15 float columns had taken the plain
    nest, whose dot products sum in order, one fma after another), and few rows of C
    (ROWS_ALWAYS, or ROWS_MAX where the tiling would pack B: `b_packed()`), or too little
    work to tile (`small`: the plain nest's dot products would read B down its columns)
    over at least SMALL_DEPTH steps of K.
    (B must also be contiguous along its columns: `b_row`.)"""
    M, N, depth = m.shape[-2], m.shape[-1], m.srcs[0].shape[-1]
    lanes = min(target.vector_bytes, 32) // itemsize(m.dtype)  # (an AVX2 vector: AVX-512's narrower ones too)
    return N >= lanes and M >= 1 and (M <= ROWS_ALWAYS or (small and depth >= SMALL_DEPTH)
                                      or (M <= ROWS_MAX and b_packed()))


def b_row(low: Lowering, m) -> bool:
    """Whether B is a plain load whose columns are contiguous (the runs streamed)."""
    return _contiguous(low, m, 1, "probe_j")


def dot_products(low: Lowering, m, target) -> bool:
    """Whether each element of C is better one dot product of two contiguous runs (the
    plain loop nest, matmul_naive.naive, whose K loop LLVM vectorizes as a sum): A's
    rows and B's columns both contiguous along K, and C a matrix-vector product (fewer
    columns than a SIMD vector: W @ x) or of few rows whose B the row stream cannot
    read (x @ W.T).  A register tile would compute a vector of columns, or MR rows,
    for each one kept, and pack both operands."""
    lanes = target.vector_bytes // itemsize(m.dtype)
    M, N = m.shape[-2], m.shape[-1]
    if min(M, N) < 1 or not (N < lanes or M <= ROWS_ALWAYS):
        return False
    return _contiguous(low, m, 0, "probe_k") and _contiguous(low, m, 1, "probe_k")


def operand_load(low: Lowering, m, operand: int):
    """A (operand 0) at (batch 0, probe_i, probe_k) or B (operand 1) at (batch 0,
    probe_k, probe_j) when it is a plain load (no computation, no mask), else None:
    what these kernels and the tiling (matmul_direct.reads_in_place) can read from
    the operand's buffer as it is."""
    zero = tuple(K.Const(0) for _ in m.shape[:-2])
    at = ("probe_i", "probe_k") if operand == 0 else ("probe_k", "probe_j")
    value = low.gen(m.srcs[operand], zero + tuple(K.Var(v) for v in at))
    return value if isinstance(value, K.Load) and value.valid is None else None


def _contiguous(low: Lowering, m, operand: int, probe: str) -> bool:
    """Whether the operand is a plain load contiguous along the probe variable `probe`."""
    value = operand_load(low, m, operand)
    return value is not None and coefficient(value.index, probe) == 1


def transposed_suits(low: Lowering, m, target) -> bool:
    """Whether C^T = B^T A^T streams A's columns (`kernel(.., transposed=True)`): few
    columns of C (ROWS_ALWAYS), at least a SIMD vector of rows, and A a plain load
    contiguous along its rows (a transposed matrix: W.T @ x)."""
    lanes = target.vector_bytes // itemsize(m.dtype)
    return (1 <= m.shape[-1] <= ROWS_ALWAYS and m.shape[-2] >= lanes
            and _contiguous(low, m, 0, "probe_i"))


def chunk_width(M: int, N: int, lanes: int, itemsize_: int, threads: int) -> int:
    """Columns per chunk: whole vectors, the accumulators within ACC_BYTES, and at
    least one chunk per thread when N allows."""
    widest = max(lanes, (ACC_BYTES // (itemsize_ * M)) // lanes * lanes)
    per_thread = -(-N // max(1, threads))
    return max(lanes, min(widest, -(-per_thread // lanes) * lanes))


def kernel(low: Lowering, target, transposed: bool = False) -> K.Kernel:
    """The row-streaming kernel of the group's matmul; `transposed`: of C^T = B^T A^T
    (few columns of C, A contiguous along its rows: W.T @ x), C's columns the rows
    accumulated and A's columns the runs streamed."""
    g = low.group
    m = g.matmul
    a, b = m.srcs
    dtype, batch = m.dtype, m.shape[:-2]
    M, N, depth = m.shape[-2], m.shape[-1], a.shape[-1]
    rows, cols = (N, M) if transposed else (M, N)
    BT = math.prod(batch)
    lanes = target.vector_bytes // itemsize(dtype)
    CW = chunk_width(rows, cols, lanes, itemsize(dtype), target.threads)
    chunks = -(-cols // CW)
    q, c = K.Var("q"), K.Var("c")
    bt = K.idiv(q, chunks) if BT > 1 else K.Const(0)
    j0 = K.affine([(K.imod(q, chunks) if BT > 1 else q, CW)])
    j = K.affine([(K.Var("j0"), 1), (c, 1)])
    bidx = unravel(bt, batch)
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")

    def product(i, k):  # the row operand at (i, k) times the streamed one at (k, j)
        if transposed:
            return K.Binary("mul", low.gen(b, bidx + (k, i)), low.gen(a, bidx + (j, k)), dtype, contract=True)
        return K.Binary("mul", low.gen(a, bidx + (i, k)), low.gen(b, bidx + (k, j)), dtype, contract=True)

    def acc_at(i):
        return K.affine([(i, CW), (c, 1)])

    def over_chunk(width) -> list:
        """Zero the accumulators, run K, store: the chunk's columns 0..width-1."""
        def step(ks, *row_list):  # acc[i, c] += A[i, k] B[k, j] for each row and each k of
            # ks in turn, each an fma (the renderer contracts into an add that reads a local
            # array) reading acc through its own Load (it caches an expression object's value
            # per scope, across stores); two rows side by side read each load of B once
            return [K.Store("acc", acc_at(i), K.Binary("add", K.Load("acc", acc_at(i), dtype), product(i, k), dtype))
                    for k in ks for i in row_list]

        def over_rows(ks) -> list:
            pair = K.Var("ip")
            loops = [K.Loop("ip", rows // 2, [K.Loop("c", width, step(
                ks, K.affine([(pair, 2)]), K.affine([(pair, 2)], 1)))])] if rows >= 2 else []
            if rows % 2:
                loops.append(K.Loop("c", width, step(ks, K.Const(rows - 1))))
            return loops

        k4, kk, i = K.Var("k4"), K.Var("kk"), K.Var("i")
        whole = depth // UNROLL * UNROLL
        body = [K.Loop("i", rows, [K.Loop("c", width, [K.Store("acc", acc_at(i), K.Const(0, dtype))])])]
        if whole:
            body.append(K.Loop("k4", whole // UNROLL, over_rows([K.affine([(k4, UNROLL)], u) for u in range(UNROLL)])))
        if depth > whole:
            body.append(K.Loop("kk", depth - whole, over_rows([kk]), start=whole))
        low.matmul_value = K.Var("sum", dtype)
        row, col = (j, i) if transposed else (i, j)  # of C
        at = K.affine([(bt, M * N), (row, N), (col, 1)])
        store = [K.Let("sum", K.Load("acc", acc_at(i), dtype))] + epilogue_stores(low, out, at, bt, row, col)
        return body + [K.Loop("i", rows, [K.Loop("c", width, store)])]

    body = [K.LocalArray("acc", dtype, rows * CW), K.Let("j0", j0)]
    if cols % CW == 0:  # every chunk whole: loops of a constant width
        body += over_chunk(CW)
    else:  # the last chunk narrower
        last = K.Binary("eq", K.Var("j0"), K.Const((chunks - 1) * CW), "bool")
        body += [K.If(K.Unary("not", last, "bool"), over_chunk(CW)),
                 K.If(last, over_chunk(cols - (chunks - 1) * CW))]
    flops = 2 * BT * M * N * depth
    total = BT * chunks
    return low.kernel([K.Loop("q", total, body, "parallel")], ("q", total), work=flops // 2, thread_work=flops)
