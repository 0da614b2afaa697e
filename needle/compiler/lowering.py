"""Lowering: one fused group -> one kernel in the loop-nest kernel IR.

Index math comes straight from the Views of the folded graph: a read of a base
through a view is `base[offset + sum(strides * i)]`, guarded by the view's mask.
Elementwise kernels first merge adjacent loop dimensions wherever every view
(and the output) is contiguous across them, so a contiguous chain is one flat
loop.  Reductions loop over the kept axes outside and the reduced axes inside;
each fused stage leaves its result in an accumulator that later stages and the
stored expression read.  Matmul kernels are produced by `matmul_tiling`.

What a reduction computes (the domain index, each stage's accumulation, the stores
of the root) is written once here as Lowering methods that take the loops as
callbacks; the CPU nests plain loops around them, the CUDA lowering
(cuda_lowering.py) maps the same statements onto blocks and threads.
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from ..dtypes import itemsize
from ..ir.nodes import BINARY, COMPARE, UNARY
from .fusion import Group
from .loop_collapse import collapse_loops, plain_loop
from .row_jam import jam_rows
from .row_lanes import lane_rows
from .kernel_exprs import (coefficient, contains, costly, hoist, is_float, loads, power, replace, select,
                           transcendentals, unravel)
from .views import View


class Lowering:
    """Builds one Kernel; `slot_of(node)` gives the schedule slot of a stored node
    or buffer leaf, `param_slot(scalar)` the slot of a run-time scalar."""

    def __init__(self, group: Group, stored: set, slot_of, param_slot, tile_transposes: bool = False,
                 lanes: int = 0):
        self.group = group
        #: tile transposing elementwise nests (`transpose_blocks`; CPU targets: a GPU
        #: kernel's threads split the flat nest, see cuda_lowering.grid_stride)
        self.tile_transposes = tile_transposes
        #: float32 lanes of the target's vectors, for short rows reduced in lanes
        #: (row_lanes; CPU targets), 0 for none
        self.lanes = lanes
        self.stored = stored
        self.slot_of = slot_of
        self.param_slot = param_slot
        self.bufs, self.buf_slots, self.names = [], [], {}
        self.params, self.param_index = [], {}
        self.accs = {}              # id(reduce node) -> expression of its result (accumulator)
        self.matmul_value = None    # expression of the fused matmul's result
        self.merged = {}            # id(view node) -> View reshaped to merged loops
        self.direct_shape = None    # layout of stored nodes read without a view
        self.memo = {}
        #: the kernel's extra roots (fusion: merge_elementwise_outputs, absorb_into_matmuls) and a
        #: matmul kernel's root, which its extra roots read: computed here, not loaded
        self.computed = {id(n) for n in group.extra}
        if group.kind == "matmul" and group.extra:
            self.computed.add(id(group.root))

    # ---- arguments ----------------------------------------------------------------------
    def buffer(self, slot: int, dtype: str, role: str) -> str:
        key = (slot, role)
        if key not in self.names:
            name = f"out{sum(1 for b in self.bufs if b.role == 'out')}" if role == "out" else \
                f"in{sum(1 for b in self.bufs if b.role == 'in')}"
            self.names[key] = name
            self.bufs.append(K.Buf(name, dtype, role))
            self.buf_slots.append(slot)
        return self.names[key]

    def param(self, scalar, dtype: str):
        slot = self.param_slot(scalar)
        if slot not in self.param_index:
            self.param_index[slot] = len(self.params)
            self.params.append(slot)
        p = K.Param(self.param_index[slot], "float64")
        return p if dtype == "float64" else K.Cast(p, dtype)

    def kernel(self, body, parallel, work: int, name: str = "", thread_work: int = 0,
               per_element: int = 0) -> K.Kernel:
        return K.Kernel(name or self.group.name, self.bufs, len(self.params), body, parallel, work,
                        slots=list(self.buf_slots), params=list(self.params), thread_work=thread_work,
                        transcendentals=per_element)

    # ---- expressions --------------------------------------------------------------------
    def gen(self, node, index: tuple):
        key = (id(node), index)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        out = self._gen(node, index)
        self.memo[key] = out
        return out

    def _gen(self, node, index):
        op, dtype = node.op, node.dtype
        if op == "const":
            return K.Const(node.arg, dtype)
        if op == "param":
            return self.param(node.arg, dtype)
        if node is self.group.matmul and self.matmul_value is not None:  # read as is by an extra root
            return self.matmul_value
        if id(node) in self.stored and node is not self.group.root and id(node) not in self.computed:
            shape = self.direct_shape or node.shape
            name = self.buffer(self.slot_of(node), dtype, "in")
            return K.Load(name, linear(index, View.contiguous(shape).strides, 0), dtype)
        if op == "view":
            return self.view_read(node, index)
        if op in UNARY:
            return K.Unary(op, self.gen(node.srcs[0], index), dtype)
        if op in BINARY:
            a, b = (self.gen(s, index) for s in node.srcs)
            if op == "pow":
                return power(a, b, dtype)
            return K.Binary(op, a, b, "bool" if op in COMPARE else dtype)
        if op == "where":
            c, a, b = (self.gen(s, index) for s in node.srcs)
            return select(c, a, b, dtype)
        if op == "cast":
            return K.Cast(self.gen(node.srcs[0], index), dtype)
        if op == "copy":
            return self.gen(node.srcs[0], index)
        if op == "gather":
            axis, srcs = node.arg, node.srcs
            i_ndim = srcs[1].ndim
            picked = tuple(self.index_value(ix, index[axis:axis + i_ndim], srcs[0].shape[axis + d])
                           for d, ix in enumerate(srcs[1:]))
            return self.gen(srcs[0], index[:axis] + picked + index[axis + i_ndim:])
        if id(node) in self.accs:  # a stage of this kernel read as it is (the root is the last stage)
            return self.accs[id(node)]
        raise ValueError(f"lowering: cannot inline {op} (it should have been stored)")

    def view_read(self, vnode, index):
        base = vnode.srcs[0]
        if id(base) in self.accs:
            return self.accs[id(base)]
        if base is self.group.matmul and self.matmul_value is not None:
            return self.matmul_value
        # an extra root, read at this kernel's element (fusion checked; a matmul kernel's extra
        # roots read its result through views that matmul_epilogue.epilogue_stores reshapes to it)
        if id(base) in self.computed:
            return self.gen(base, index)
        view = self.merged.get(id(vnode), vnode.arg)
        if view.empty:
            return K.Const(0, base.dtype)
        valid = mask_expr(view, index)
        if base.op == "copy" and id(base) not in self.stored:  # a conv's windows, read in place
            value = self.gen(base.srcs[0], unravel(linear(index, view.strides, view.offset), base.shape))
            return value if valid is None else select(valid, value, K.Const(0, base.dtype), base.dtype)
        if base.op in ("const", "param"):
            value = self.gen(base, ())
            return value if valid is None else select(valid, value, K.Const(0, base.dtype), base.dtype)
        name = self.buffer(self.slot_of(base), base.dtype, "in")
        return K.Load(name, linear(index, view.strides, view.offset), base.dtype, valid)

    def index_value(self, node, index, n: int):
        """The index array `node` at `index` as an int64 position in [0, n): negative
        values count from the end once, the rest is clamped, so a computed index never
        reads or writes outside the array (numpy_kernels.clamp_index is the meaning).
        Floats are clamped before the conversion, which is undefined out of range."""
        value = self.gen(node, index)
        if value.dtype.startswith("float"):
            wrapped = K.Where(K.Binary("lt", value, K.Const(0, value.dtype), "bool"),
                              K.Binary("add", value, K.Const(n, value.dtype), value.dtype), value, value.dtype)
            upper = K.Where(K.Binary("lt", wrapped, K.Const(n, value.dtype), "bool"),
                            wrapped, K.Const(n - 1, value.dtype), value.dtype)
            lower = K.Where(K.Binary("lt", upper, K.Const(0, value.dtype), "bool"),
                            K.Const(0, value.dtype), upper, value.dtype)
            return K.Cast(lower, K.INDEX)
        value = value if value.dtype == K.INDEX else K.Cast(value, K.INDEX)
        wrapped = K.Where(K.Binary("lt", value, K.Const(0), "bool"), K.Binary("add", value, K.Const(n), K.INDEX),
                          value, K.INDEX)
        return K.Binary("max", K.Binary("min", wrapped, K.Const(n - 1), K.INDEX), K.Const(0), K.INDEX)

    # ---- kernels ------------------------------------------------------------------------
    def elementwise(self, stores, domain) -> K.Kernel:
        """Each (value node, stored node, out view) of `stores` over `domain`: the
        value (None: zero) written to the stored node's buffer through the view
        (contiguous, or a slice of an assemble).  Values of the kernel's extra roots
        are computed once and reused by the later stores.  Adjacent dims that every
        view allows are merged first (not when a gather is inlined: its sources are
        indexed over other shapes)."""
        inlined = self.group.members  # what fusion recorded this kernel evaluates
        views = [n for n in inlined if n.op == "view"]
        gather = any(n.op == "gather" for n in inlined)
        shape = domain if gather else merge_dims(domain, [v.arg for v in views] + [v for _, _, v in stores])
        if shape != domain:
            for v in views:
                self.merged[id(v)] = v.arg.reshape(shape)
            stores = [(value, stored, view.reshape(shape)) for value, stored, view in stores]
        self.direct_shape = None if gather else shape
        index, loops = loop_vars(shape, "i")
        body, named = [], []  # (expression, variable) of each extra root's value
        for value_node, stored, view in stores:
            value = self.gen(value_node, index) if value_node is not None else K.Const(0, stored.dtype)
            for old, var in named:
                value = replace(value, old, var)
            if id(value_node) in self.computed:
                named.append((value, K.Var(f"x{len(named)}", value.dtype)))
                body.append(K.Let(named[-1][1].name, value))
                value = named[-1][1]
            out = self.buffer(self.slot_of(stored), stored.dtype, "out")
            body.append(K.Store(out, linear(index, view.strides, view.offset), value))
        if self.tile_transposes:
            loops, body = transpose_blocks(loops, body) or (loops, body)
        # (every statement runs once an element: what the body computes is per element)
        return self.kernel(*nest(loops, body), work=math.prod(shape), per_element=transcendentals(body))

    def reduce(self) -> K.Kernel:
        g = self.group
        if self._columns_pay():
            return self.reduce_columns()
        index, (kept, red) = domain_index(g), reduce_loops(g)

        def over_reduced(body):
            return nest_loops(red, body)
        body, last_pass = [], 0
        for stage in g.stages:
            last_pass = len(body) + 1  # after the accumulator's declaration
            body += self.accumulate(stage, index, over_reduced)
        result = None
        if id(g.root) not in self.accs and not g.epilogue():
            body[last_pass:], result = self._store_while_summing(body[last_pass:], index, red)
        body += self.store_root(index, kept, lambda s: s, over_reduced, result)
        loops, body = self._memory_order(kept), collapse_loops(body)
        row = math.prod(n for _, n in red)
        loops, body = lane_rows(loops, body, row, self.lanes) or jam_rows(loops, body, row) or (loops, body)
        return self.kernel(*nest(loops, body), work=math.prod(g.domain))

    def _memory_order(self, kept) -> list:
        """The kept loops outermost to innermost by how far a step moves in the widest
        view the kernel reads over its domain (its input), the shortest innermost: NHWC
        data reduced in NCHW order (a max pool after a conv) walked its channels, each a
        pass over every cache line of the input, outermost (3.9 ms for 128x16x28x28)."""
        g = self.group
        views = [n.arg for n in g.members if n.op == "view" and n.shape == g.domain and not n.arg.mask]
        if not views or len(kept) < 2:
            return kept
        strides = max(views, key=lambda v: sum(abs(x) for x in v.strides)).strides
        step = {f"k{d}": abs(x) for d, x in enumerate(strides)}
        if any(step[v] == 0 for v, _ in kept):  # broadcast along a kept axis: keep the nest
            return kept
        return sorted(kept, key=lambda loop: -step[loop[0]])

    def accumulate(self, stage, index, over_reduced, value=None) -> list:
        """acc = identity; `over_reduced`'s loops fold each value of the stage into acc
        (`value`: what the stage reads, by default its source at the domain `index`).
        Later stages and the root read the stage's result from acc."""
        acc = f"acc{len(self.accs)}"
        value = self.gen(stage.srcs[0], index) if value is None else value
        update = K.Assign(acc, combine(stage.op, K.Var(acc, stage.dtype), value, stage.dtype))
        body = [K.Declare(acc, stage.dtype, K.Const(identity(stage.op, stage.dtype), stage.dtype))]
        body += over_reduced([update])
        self.accs[id(stage)] = K.Var(acc, stage.dtype)
        return body

    def store_root(self, index, kept, once, over_reduced, result=None) -> list:
        """The stores of the group's root after its stages: the reduction itself, or its
        epilogue over the kept axes (`once` per kept index), or the broadcast back over
        the reduced axes (`over_reduced`) of `result` (default: the root at `index`)."""
        g = self.group
        out = self.buffer(self.slot_of(g.root), g.root.dtype, "out")
        if id(g.root) in self.accs or g.epilogue():
            kept_vars = iter(K.Var(v) for v, _ in kept)
            root_index = tuple(K.Const(0) if n == 1 else next(kept_vars) for n in g.root.shape)
            value = self.accs[id(g.root)] if id(g.root) in self.accs else self.gen(g.root, root_index)
            return once([K.Store(out, linear(root_index, View.contiguous(g.root.shape).strides, 0), value)])
        result = self.gen(g.root, index) if result is None else result
        return over_reduced([K.Store(out, linear(index, View.contiguous(g.domain).strides, 0), result)])

    def _store_while_summing(self, last_pass, index, red):
        """softmax's exp(x - max): store it while summing, read it back (from L1) in the
        broadcast-back pass instead of computing it twice; the output holds each value
        until overwritten.  (last pass, the root's value) with the rewrite, else as given."""
        g = self.group
        stage = g.stages[-1]
        out = self.buffer(self.slot_of(g.root), g.root.dtype, "out")
        value, result = self.gen(stage.srcs[0], index), self.gen(g.root, index)
        if not (value.dtype == g.root.dtype and is_float(value.dtype) and costly(value) and contains(result, value)):
            return last_pass, None
        at = linear(index, View.contiguous(g.domain).strides, 0)
        acc, kept = self.accs[id(stage)], K.Load(out, at, value.dtype)
        loops = nest_loops(red, [K.Store(out, at, value),
                                 K.Assign(acc.name, combine(stage.op, acc, kept, stage.dtype))])
        return loops, replace(result, value, kept)

    def store_group(self) -> K.Kernel:
        """The kernel of an elementwise-shaped group: a plain elementwise root (and its
        extra roots), an assemble's zero fill, or pieces of an assemble of one shape
        (each stored into its slice)."""
        g = self.group
        if g.kind == "scatter":
            return self.scatter()
        if g.kind == "fill":
            return self.elementwise([(None, g.root, View.contiguous(g.root.shape))], g.root.shape)
        if g.kind == "piece":  # pieces of one shape, each into its slice
            return self.elementwise([(g.root.srcs[i], g.root, piece_view(g.root, i)) for i in g.pieces], g.domain)
        same = View.contiguous(g.domain)
        return self.elementwise([(n, n, same) for n in g.extra + [g.root]], g.domain)

    def scatter(self) -> K.Kernel:
        """scatter_add, after its zero fill: one task per position outside the indexed
        axes adds every value whose index lands in its fiber of the output.  Tasks own
        disjoint fibers and the index loops stay serial inside a task, so repeated
        indices add up without races, on threads and on the GPU grid alike."""
        g = self.group
        values, indices = g.root.srcs[0], g.root.srcs[1:]
        axis, sizes = g.root.arg
        i_ndim, k = indices[0].ndim, len(indices)
        pre, ishape, post = values.shape[:axis], indices[0].shape, values.shape[axis + i_ndim:]
        pre_ix, pre_loops = loop_vars(pre, "p")
        post_ix, post_loops = loop_vars(post, "q")
        j_ix, j_loops = loop_vars(ishape, "j")
        out = self.buffer(self.slot_of(g.root), g.root.dtype, "out")
        strides = View.contiguous(g.root.shape).strides
        lets = [K.Let(f"t{d}", self.index_value(ix, j_ix, n)) for d, (ix, n) in enumerate(zip(indices, sizes))]
        at = linear(pre_ix + tuple(K.Var(f"t{d}") for d in range(k)) + post_ix, strides, 0)
        add = K.Store(out, at, K.Binary("add", K.Load(out, at, g.root.dtype),
                                        self.gen(values, pre_ix + j_ix + post_ix), g.root.dtype))
        body = nest_loops(j_loops, lets + [add])
        return self.kernel(*nest(pre_loops + post_loops, body), work=values.size)

    def _columns_pay(self) -> bool:
        """Reduce over leading axes while the last (contiguous) axis is kept: then
        accumulate whole rows into the output, so the inner loop runs along memory.
        Several stages (the sum of an LSTM's bias gradients over its time steps, one
        column sum each, then added) accumulate into rows of their own, kept in L1."""
        g = self.group
        full, axes = g.domain, g.reduce_axes
        if not (g.stages and full and (len(full) - 1) not in axes and full[-1] >= 8
                and math.prod(full[a] for a in axes) > 1):  # (over size-1 axes: a copy)
            return False
        if not g.epilogue():  # broadcast back over the reduced axes (a batch norm's gradient)
            return not g.extra and math.prod(full) * itemsize(g.root.dtype) >= COLUMN_BROADCAST_BYTES and \
                self._column_block() >= 8
        if len(g.stages) == 1:
            return g.root.dtype == g.stages[0].dtype
        return self._column_block() >= 8

    def _column_block(self) -> int:
        """Columns of one pass: COLUMN_BLOCK for a single stage stored as is (its row
        is the output's), else what fits the stages' rows in COLUMN_ROWS_BYTES."""
        g = self.group
        if len(g.stages) == 1 and g.epilogue():
            return COLUMN_BLOCK
        row_bytes = sum(itemsize(stage.dtype) for stage in g.stages)
        return COLUMN_ROWS_BYTES // row_bytes // 8 * 8

    def reduce_columns(self) -> K.Kernel:
        """out[kept] = identity; for each reduced index: out[kept] op= x[...] (inner
        loop over the last kept axis, contiguous); then out = epilogue(out).  With
        several stages, each accumulates into a local row (later stages and the
        epilogue read the earlier ones' from theirs), and the epilogue is stored, or
        (a root over the whole domain) stored in one more pass over the reduced axes."""
        g = self.group
        full, axes = g.domain, g.reduce_axes
        kept, inner = reduce_loops(g)
        outer = kept[:-1]  # the last axis is kept (_columns_pay): it becomes kb and ki
        single = len(g.stages) == 1 and g.epilogue()
        limit = self._column_block()
        block = limit if (not outer or not single) and full[-1] > limit else full[-1]
        blocks = -(-full[-1] // block)
        kb, ki = K.Var("kb"), K.Var("ki")
        col = K.affine([(kb, block), (ki, 1)]) if blocks > 1 else ki
        index = domain_index(g)[:-1] + (col,)
        out = self.buffer(self.slot_of(g.root), g.root.dtype, "out")
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
            body += self._per_column(f"c{s}_", inner, width, block, lambda terms: self._column_passes(
                inner, index, stage, lambda value: [K.Loop("ki", width, [K.Store(
                    row, at, combine(stage.op, current, terms(value), stage.dtype))])]))
            self.accs[id(stage)] = current
        if not g.epilogue():  # the root over the domain, row by row again
            at = linear(index, View.contiguous(full).strides, 0)
            body += self._per_column("cr_", inner, width, block, lambda terms: nest_loops(
                inner, [K.Loop("ki", width, [K.Store(out, at, terms(self.gen(g.root, index)))])]))
        elif g.root is not g.stages[-1] or not single:
            kept_vars = iter([K.Var(v) for v, _ in outer] + [col])
            root_index = tuple(K.Const(0) if n == 1 else next(kept_vars) for n in g.root.shape)
            at = linear(root_index, View.contiguous(g.root.shape).strides, 0)
            body.append(K.Loop("ki", width, [K.Store(out, at, self.gen(g.root, root_index))]))
        loops = ([("kb", blocks)] if blocks > 1 else []) + outer
        return self.kernel(*nest(loops, body), work=math.prod(full))

    @staticmethod
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

    def _column_passes(self, inner, index, stage, update) -> list:
        """The loops over the reduced axes; the innermost one takes ROWS_PER_PASS rows
        per pass (combined in registers, then into the output row once), so the
        output row is loaded and stored a quarter as often."""
        var, n = inner[-1]
        whole = n // ROWS_PER_PASS * ROWS_PER_PASS
        if whole == 0:
            return nest_loops(inner, update(self.gen(stage.srcs[0], index)))

        def row(r):
            return self.gen(stage.srcs[0], tuple(r if isinstance(i, K.Var) and i.name == var else i for i in index))
        rq = K.Var(var + "q")
        value = row(K.affine([(rq, ROWS_PER_PASS)]))
        for u in range(1, ROWS_PER_PASS):
            value = combine(stage.op, value, row(K.affine([(rq, ROWS_PER_PASS)], u)), stage.dtype)
        passes = [K.Loop(var + "q", n // ROWS_PER_PASS, update(value))]
        if whole < n:
            passes.append(K.Loop(var, n - whole, update(self.gen(stage.srcs[0], index)), start=whole))
        return nest_loops(inner[:-1], passes)


#: rows a column reduction adds up per pass over its output row
ROWS_PER_PASS = 4
#: columns per thread task when a column reduction has no other axis to split
COLUMN_BLOCK = 1024
#: bytes of the local rows of a column reduction with several stages (within L1)
COLUMN_ROWS_BYTES = 32 << 10
#: a column reduction whose root is broadcast back over the reduced axes (a batch norm's
#: gradient over N x H x W) takes the column path from this many bytes of domain: one
#: pass along memory per stage, where a pass per column (the generic nest) reads every
#: cache line again for each column once the rows are a line or less (NHWC, 16
#: channels, 100352 rows: 25 ms a call).  Below it the generic nest, which computes a
#: column's epilogue terms once (MLPResNet's 100 x 100 ran 1.05x the time on columns)
COLUMN_BROADCAST_BYTES = 1 << 20


# ---- helpers ---------------------------------------------------------------------------------
def domain_index(group) -> tuple:
    """A reduce group's index over its domain: k<d> for kept dims, r<d> for reduced ones,
    0 for size-1 dims."""
    return tuple(K.Const(0) if n == 1 else K.Var(("r" if d in group.reduce_axes else "k") + str(d))
                 for d, n in enumerate(group.domain))


def reduce_loops(group) -> tuple:
    """(kept, reduced): the (var, extent) loops of a reduce group's kept and reduced dims."""
    full, axes = group.domain, group.reduce_axes
    return ([(f"k{d}", n) for d, n in enumerate(full) if d not in axes and n != 1],
            [(f"r{d}", n) for d, n in enumerate(full) if d in axes and n != 1])


def combine(op: str, acc, value, dtype: str):
    """One step of a reduction: acc + value or max(acc, value)."""
    return K.Binary("add" if op == "reduce_sum" else "max", acc, value, dtype)


def identity(op: str, dtype: str):
    if op == "reduce_sum":
        return 0
    return -math.inf if dtype.startswith("float") else {"int32": -2**31, "int64": -2**63, "uint8": 0,
                                                         "bool": False}[dtype]


def piece_view(assemble, i: int) -> View:
    """Where piece `i` of an assemble goes: its slice of the row-major result."""
    index = assemble.arg[i]
    return View.contiguous(assemble.shape).shrink([(a, b) for a, b, _ in index]).stride([c for _, _, c in index])


def linear(index, strides, offset):
    return K.affine([(i, s) for i, s in zip(index, strides) if not isinstance(i, K.Const)],
                    offset + sum(i.value * s for i, s in zip(index, strides) if isinstance(i, K.Const)))


def mask_expr(view: View, index):
    """AND of lo <= sum(coeffs * i) < hi, skipping halves that always hold."""
    cond = None
    for coeffs, lo, hi in view.mask:
        low = sum(min(0, c * (n - 1)) for c, n in zip(coeffs, view.shape))
        high = sum(max(0, c * (n - 1)) for c, n in zip(coeffs, view.shape))
        value = linear(index, coeffs, 0)
        if lo > low:
            cond = K.land(cond, K.Binary("le", K.Const(lo), value, "bool"))
        if hi <= high:
            cond = K.land(cond, K.Binary("lt", value, K.Const(hi), "bool"))
    return cond


def transpose_blocks(loops, body):
    """(loops, body) of an elementwise nest that reads across what it writes (a
    transposing copy: NCHW to NHWC, a weight's last two axes swapped) with its last two
    loops tiled in TRANSPOSE_BLOCK x TRANSPOSE_BLOCK blocks: the plain nest reads a new
    cache line (past 4 KB strides, a new page) for every element of an output row and
    comes back to it a row later; a block uses what it reads while it is at hand.  None
    when the nest is no such copy."""
    if len(loops) < 2:
        return None
    (v, nv), (last, nl) = loops[-2], loops[-1]
    n = TRANSPOSE_BLOCK
    if nv < n or nl < TRANSPOSE_MIN_ROW or not all(isinstance(st, (K.Store, K.Let)) for st in body):
        return None
    if any(isinstance(st, K.Store) and coefficient(st.index, last) != 1 for st in body):
        return None  # the stores run along the last loop
    found = [loads(st.value if isinstance(st, K.Store) else st.expr) for st in body]
    if any(f is None for f in found):
        return None
    if not any(abs(coefficient(e.index, last) or 0) >= n and coefficient(e.index, v) == 1
               for f in found for e in f):
        return None

    def block(var, extent):  # (its loop over the block, the Let of the original variable)
        outer, inner = K.Var(var + "o"), var + "b"
        length = K.Const(n, K.INDEX) if extent % n == 0 else \
            K.Binary("min", K.Const(n, K.INDEX), K.affine([(outer, -n)], extent), K.INDEX)
        return inner, length, K.Let(var, K.affine([(outer, n), (K.Var(inner), 1)]))
    (vb, v_length, v_let), (lb, l_length, l_let) = block(v, nv), block(last, nl)
    inner = [K.Loop(vb, v_length, [v_let, K.Loop(lb, l_length, [l_let] + body)])]
    return loops[:-2] + [(v + "o", -(-nv // n)), (last + "o", -(-nl // n))], inner


#: the side of the blocks a transposing elementwise copy is tiled in (`transpose_blocks`),
#: and the least length of its last axis: in-process A/B, 2 threads, AVX2, a weight's
#: 3x3x128x128 with its last two axes swapped took 0.41x the time, NHWC to NCHW of
#: 128x28x28x16 0.41x and of 16x32x32x64 0.48x, NCHW to NHWC of 16x64x32x32 0.20x (blocks
#: of 4, 12 and 16 did no better); rows of 16 or 32 (a CNN's NHWC gradients of 16 or 32
#: channels read beside NCHW ones) ran 1.5-1.6x slower blocked
TRANSPOSE_BLOCK = 8
TRANSPOSE_MIN_ROW = 64


def loop_vars(shape, prefix: str):
    index, loops = [], []
    for d, n in enumerate(shape):
        if n == 1:
            index.append(K.Const(0))
        else:
            index.append(K.Var(f"{prefix}{d}"))
            loops.append((f"{prefix}{d}", n))
    return tuple(index), loops


#: a parallel loop of fewer iterations than this takes the loop inside it along
#: (spread_parallel)
MIN_PARALLEL_EXTENT = 16


def spread_parallel(kernel: K.Kernel) -> K.Kernel:
    """A CPU kernel whose parallel loop has few iterations around a loop nest (a conv
    weight's 3 x 3 taps over its channels; a padded view keeps them apart) runs both
    outer loops as one parallel loop, each variable unravelled from it, so that threads
    split it evenly: over 3 iterations two threads took 2 and 1 (the busier one twice
    the other's time), over 9 they take 5 and 4.  The loops inside (vectorized) stay."""
    outer = kernel.body[0] if kernel.parallel is not None and len(kernel.body) == 1 else None
    if not (isinstance(outer, K.Loop) and outer.kind == "parallel" and outer.start == 0
            and isinstance(outer.extent, int) and outer.extent < MIN_PARALLEL_EXTENT and len(outer.body) == 1):
        return kernel
    inner = outer.body[0]
    if not (plain_loop(inner) and inner.extent > 1 and any(isinstance(s, K.Loop) for s in inner.body)):
        return kernel
    var, extent = f"{outer.var}{inner.var}", outer.extent * inner.extent
    unravel = [K.Let(outer.var, K.idiv(K.Var(var), inner.extent)), K.Let(inner.var, K.imod(K.Var(var), inner.extent))]
    kernel.body, kernel.parallel = [K.Loop(var, extent, unravel + inner.body, "parallel")], (var, extent)
    return kernel


def nest_loops(loops, body, parallel_first: bool = False) -> list:
    for k, (var, extent) in reversed(list(enumerate(loops))):
        body = [K.Loop(var, extent, body, "parallel" if parallel_first and k == 0 else "serial")]
    return body


def nest(loops, body):
    """(body, parallel) with the outermost loop split across threads."""
    if not loops:
        return body, None
    return nest_loops(loops, body, parallel_first=True), (loops[0][0], loops[0][1])


def merge_dims(shape, views) -> tuple:
    """Merge adjacent dims (innermost first) while every view can be reshaped."""
    shape = tuple(shape)
    current = [v for v in views]
    d = len(shape) - 2
    while d >= 0:
        merged = shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:]
        reshaped = [v.reshape(merged) for v in current]
        if all(r is not None for r in reshaped):
            shape, current = merged, reshaped
        d -= 1
    return shape
