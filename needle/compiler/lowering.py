"""Lowering: one fused group -> one kernel in the loop-nest kernel IR.

`Lowering` is what every kernel strategy builds on: the kernel's buffers and
run-time parameters, and any node of the group read at any index, with the index
math straight from the Views of the folded graph (a read of a base through a view is
`base[offset + sum(strides * i)]`, guarded by the view's mask).  Here too are the
elementwise kernels (adjacent dims merged wherever every view allows, so a
contiguous chain is one flat loop) and what a reduction computes (each stage's
accumulation, the stores of the root), written once as methods that take the loops
as callbacks: the CPU strategies nest plain loops around them (row_reduce,
column_reduce), the CUDA lowering (cuda_lowering.py) maps the same statements onto
blocks and threads.  Matmul kernels come from `matmul_tiling`, scatter_add's from
`scatter_add`.
"""
from __future__ import annotations

import math

from ..codegen import kernel_ir as K
from ..ir.nodes import BINARY, COMPARE, UNARY
from .kernel_exprs import power, replace, select, transcendentals, unravel
from .kernel_groups import Group
from .loop_nests import linear, loop_vars, mask_expr, merge_dims, nest
from .scatter_add import scatter_add
from .transpose_blocks import transpose_blocks
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

    def store_group(self) -> K.Kernel:
        """The kernel of an elementwise-shaped group: a plain elementwise root (and its
        extra roots), an assemble's zero fill, or pieces of an assemble of one shape
        (each stored into its slice)."""
        g = self.group
        if g.kind == "scatter":
            return scatter_add(self)
        if g.kind == "fill":
            return self.elementwise([(None, g.root, View.contiguous(g.root.shape))], g.root.shape)
        if g.kind == "piece":  # pieces of one shape, each into its slice
            return self.elementwise([(g.root.srcs[i], g.root, piece_view(g.root, i)) for i in g.pieces], g.domain)
        same = View.contiguous(g.domain)
        return self.elementwise([(n, n, same) for n in g.extra + [g.root]], g.domain)


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


