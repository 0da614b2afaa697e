"""Column reductions: reduce over leading axes while the last (contiguous) axis is
kept (a bias gradient, a batch norm's statistics in NHWC): whole rows accumulate into
the output, so the inner loop runs along memory instead of striding down a column.
`pays` says when; the generic nest (row_reduce) takes the rest."""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from ..dtypes import itemsize
from .kernel_exprs import hoist
from .loop_nests import domain_index, linear, nest, nest_loops, reduce_loops
from .lowering import combine, identity
from .views import View

#: rows a column reduction adds up per pass over its output row
ROWS_PER_PASS = 4
#: columns per thread task when a column reduction has no other axis to split
COLUMN_BLOCK = 1024
#: bytes of the local rows of a column reduction with several stages (within L1)
COLUMN_ROWS_BYTES = 32 << 10
#: a column reduction whose root is broadcast back over the reduced axes (a batch norm's
#: gradient over N x H x W) takes the column path from this many bytes of domain: one
#: pass along memory per stage, where a pass per column (the generic nest) reads every
#: cache line again for each column once the rows are a line or less (a CNN's NHWC
#: batch norm of 16 channels).  Below it the generic nest, which computes a column's
#: epilogue terms once (MLPResNet's 100 x 100 batch norms)
COLUMN_BROADCAST_BYTES = 1 << 20


def pays(g) -> bool:
    """Reduce over leading axes while the last (contiguous) axis is kept: then
    accumulate whole rows into the output, so the inner loop runs along memory.
    Several stages (the sum of an LSTM's bias gradients over its time steps, one
    column sum each, then added) accumulate into rows of their own, kept in L1."""
    full, axes = g.domain, g.reduce_axes
    if not (g.stages and full and (len(full) - 1) not in axes and full[-1] >= 8
            and math.prod(full[a] for a in axes) > 1):  # (over size-1 axes: a copy)
        return False
    if not g.epilogue():  # broadcast back over the reduced axes (a batch norm's gradient)
        return not g.extra and math.prod(full) * itemsize(g.root.dtype) >= COLUMN_BROADCAST_BYTES and \
            column_block(g) >= 8
    if len(g.stages) == 1:
        return g.root.dtype == g.stages[0].dtype
    return column_block(g) >= 8


def column_block(g) -> int:
    """Columns of one pass: COLUMN_BLOCK for a single stage stored as is (its row
    is the output's), else what fits the stages' rows in COLUMN_ROWS_BYTES."""
    if len(g.stages) == 1 and g.epilogue():
        return COLUMN_BLOCK
    row_bytes = sum(itemsize(stage.dtype) for stage in g.stages)
    return COLUMN_ROWS_BYTES // row_bytes // 8 * 8


def reduce_columns(low) -> K.Kernel:
    """out[kept] = identity; for each reduced index: out[kept] op= x[...] (inner
    loop over the last kept axis, contiguous); then out = epilogue(out).  With
    several stages, each accumulates into a local row (later stages and the
    epilogue read the earlier ones' from theirs), and the epilogue is stored, or
    (a root over the whole domain) stored in one more pass over the reduced axes."""
    g = low.group
    full, axes = g.domain, g.reduce_axes
    kept, inner = reduce_loops(g)
    outer = kept[:-1]  # the last axis is kept (`pays`): it becomes kb and ki
    single = len(g.stages) == 1 and g.epilogue()
    limit = column_block(g)
    block = limit if (not outer or not single) and full[-1] > limit else full[-1]
    blocks = -(-full[-1] // block)
    kb, ki = K.Var("kb"), K.Var("ki")
    col = K.affine([(kb, block), (ki, 1)]) if blocks > 1 else ki
    index = domain_index(g)[:-1] + (col,)
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    width = K.Binary("min", K.Const(block), K.affine([(kb, -block)], full[-1]), K.INDEX) if blocks > 1 else block
    body = []
    for s, stage in enumerate(g.stages):
        if single:
            kept_index = tuple(K.Const(0) if d in axes else i for d, i in enumerate(index))
            row, at = out, linear(kept_index, View.contiguous(stage.shape).strides, 0)
        else:
            row, at = f"row{s}", ki
            body.append(K.LocalArray(row, stage.dtype, block))
        current = K.Load(row, at, stage.dtype)
        body.append(K.Loop("ki", width, [K.Store(row, at, K.Const(identity(stage.op, stage.dtype), stage.dtype))]))
        body += _per_column(f"c{s}_", inner, width, block, lambda terms: _column_passes(
            low, inner, index, stage, lambda value: [K.Loop("ki", width, [K.Store(
                row, at, combine(stage.op, current, terms(value), stage.dtype))])]))
        low.accs[id(stage)] = current
    if not g.epilogue():  # the root over the domain, row by row again
        at = linear(index, View.contiguous(full).strides, 0)
        body += _per_column("cr_", inner, width, block, lambda terms: nest_loops(
            inner, [K.Loop("ki", width, [K.Store(out, at, terms(low.gen(g.root, index)))])]))
    elif g.root is not g.stages[-1] or not single:
        kept_vars = iter([K.Var(v) for v, _ in outer] + [col])
        root_index = tuple(K.Const(0) if n == 1 else next(kept_vars) for n in g.root.shape)
        at = linear(root_index, View.contiguous(g.root.shape).strides, 0)
        body.append(K.Loop("ki", width, [K.Store(out, at, low.gen(g.root, root_index))]))
    loops = ([("kb", blocks)] if blocks > 1 else []) + outer
    return low.kernel(*nest(loops, body), work=math.prod(full))


def _per_column(prefix: str, inner, width, block: int, make_pass) -> list:
    """`make_pass(terms)`: statements of a pass over the rows, its expressions put
    through `terms`, which hoists their costly per-column terms (a batch norm's
    1 / sqrt(var + eps), not read per row) into local rows computed first, once
    per column: LLVM does not hoist them out of the row loop."""
    hoisted, ki = [], K.Var("ki")
    rows = {v for v, _ in inner} | {v + "q" for v, _ in inner}
    statements = make_pass(lambda e: hoist(e, rows, hoisted, ki, prefix))
    first = [s for name, e in hoisted for s in (K.LocalArray(name, e.dtype, block),
                                                K.Loop("ki", width, [K.Store(name, ki, e)]))]
    return first + statements


def _column_passes(low, inner, index, stage, update) -> list:
    """The loops over the reduced axes; the innermost one takes ROWS_PER_PASS rows
    per pass (combined in registers, then into the output row once), so the
    output row is loaded and stored a quarter as often."""
    var, n = inner[-1]
    whole = n // ROWS_PER_PASS * ROWS_PER_PASS
    if whole == 0:
        return nest_loops(inner, update(low.gen(stage.srcs[0], index)))

    def row(r):
        return low.gen(stage.srcs[0], tuple(r if isinstance(i, K.Var) and i.name == var else i for i in index))
    rq = K.Var(var + "q")
    value = row(K.affine([(rq, ROWS_PER_PASS)]))
    for u in range(1, ROWS_PER_PASS):
        value = combine(stage.op, value, row(K.affine([(rq, ROWS_PER_PASS)], u)), stage.dtype)
    passes = [K.Loop(var + "q", n // ROWS_PER_PASS, update(value))]
    if whole < n:
        passes.append(K.Loop(var, n - whole, update(low.gen(stage.srcs[0], index)), start=whole))
    return nest_loops(inner[:-1], passes)
