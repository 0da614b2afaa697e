"""Which matmul operands the tiles read from their buffers instead of packing them:
packing costs a copy of the operand on every call; reading in place costs strided
reads, cheap while the operand stays in cache or its reads run along memory."""
from __future__ import annotations

import math

from ..dtypes import itemsize
from .kernel_exprs import coefficient
from . import matmul_rows

#: an operand read straight from its buffer (a parameter, an activation) of at most this many
#: elements per matrix (of a stack: attention's heads) is not packed: it stays in cache across
#: panels, and packing it would cost a copy on every call.  A is read as MR row streams, B as
#: rows of panels: past these sizes the packed layout's locality wins
DIRECT_LIMIT = {"a": 1 << 14, "b": 1 << 17}
#: a larger A is read in place when reading it is cheap: at any size when k is its
#: contiguous axis (each of the tile's MR row streams reads on in memory), up to
#: A_AFFINE_LIMIT elements when its index is otherwise affine in k (no division: a conv's
#: im2col view is packed, its every read would divide).  Packing A gathers across its rows
#: on every call, for every K block of every row block, and few B panels share the cost
#: when N is small.  A larger transposed A (a weight gradient's x.T) reads too many lines
#: at once, so past A_AFFINE_LIMIT only a row-major A qualifies.
A_AFFINE_LIMIT = 1 << 16
#: a larger B is still read in place when at most FEW_ROWS rows of A reuse it and its rows
#: lie at most B_ROW_BYTES apart: packing costs a copy of B on every call, more than the
#: strided reads save when few A panels reuse each B panel.  Rows 4 KB apart share too few
#: cache sets, so a small B whose rows lie that far apart is packed too when more rows of A
#: reuse it.  Rows farther apart are read in place too unless their distance is a multiple
#: of ALIASING_BYTES, where they share too few sets at every cache level (a 1000-class
#: layer's 4000-byte rows are read in place, 1024 floats' 4096-byte rows packed)
FEW_ROWS, B_ROW_BYTES, ALIASING_BYTES = 256, 2048, 4096


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
