"""The pass pipeline: IR graph -> Schedule (kernels in order, buffers planned).

sums of matmuls merged -> full reductions split (CPU) -> view folding -> common
subexpressions -> fusion -> lowering (matmul tiling for matmul kernels) -> constant
buffer offsets into pointers -> buffer planning.  A Schedule refers to data only
through slots: leaf buffers and run-time scalars by their order in the graph, outputs
by position, and intermediate results by temp buffers that are reused once dead.  So
a schedule built for one graph runs any graph of the same structure (the schedule
cache).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import itemsize
from ..target import Target
from .call_origins import CallOrigin
from . import call_origins, column_reduce, matmul_tiling
from .buffer_offsets import hoist_offsets
from .common import merge_common
from .fusion import FusedGraph, fuse
from .matmul_sums import merge_matmul_sums
from .split_reductions import split_reductions
from .lowering import Lowering
from .row_reduce import reduce_rows
from .spread_parallel import spread_parallel
from .view_folding import fold_views


@dataclass
class Call:
    kernel: object           # kernel_ir.Kernel
    slots: list              # schedule slot per kernel buffer
    params: list             # param slot per kernel parameter
    offsets: list            # elements added to each kernel buffer's pointer (buffer_offsets)
    origin: CallOrigin = None  # what it computes in the user's terms (call_origins.py)

    def byte_offsets(self) -> list:
        return [n * itemsize(b.dtype) for n, b in zip(self.offsets, self.kernel.bufs)]


@dataclass
class Schedule:
    calls: list
    n_leaves: int
    n_params: int
    outputs: list            # (slot, shape, dtype) per requested output
    slot_kinds: dict         # slot -> ("leaf", i) | ("out", i) | ("temp", physical buffer)
    temp_bytes: list         # size of each physical temp buffer
    stats: dict = field(default_factory=dict)


class StructureKey:
    """A Signature's key: its entries, hashed once.  A dict lookup of a plain tuple
    hashes every nested entry again at each get and move_to_end (1.3 ms apiece for an
    LSTM step's 3400 nodes); equal keys share one tuple after their first comparison,
    so the next compares item by identity."""

    __slots__ = ("entries", "hash")

    def __init__(self, entries: tuple):
        self.entries, self.hash = entries, hash(entries)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if type(other) is not StructureKey or self.hash != other.hash or self.entries != other.entries:
            return False
        other.entries = self.entries
        return True

    def __repr__(self) -> str:
        return f"StructureKey({len(self.entries)} entries)"


@dataclass
class Signature:
    """A graph up to the data it reads.  `key` (a StructureKey) holds its ops, static
    args, shapes, dtypes, leaf strides and which nodes share which sources, so equal
    keys mean one schedule serves both graphs; `leaves` and `scalars` are the data
    (leaf NDArrays, run-time scalars) in slot order, `leaf_ids`/`scalar_ids` their
    slots by id."""
    key: tuple
    leaves: list
    leaf_ids: dict
    scalars: list
    scalar_ids: dict


def graph_inputs(outputs):
    """Leaf NDArrays and run-time scalars in graph order (the schedule's slots)."""
    s = structure(outputs)
    return s.leaves, s.leaf_ids, s.scalars, s.scalar_ids


def structure(outputs) -> Signature:
    """The graph's Signature: one entry per node in toposort's order (sources before
    users, a node's sources named by their positions), built as the walk emits each
    node.  (On the path of every realize: written for speed, one pass, no generators;
    tests/compiler/test_structure.py checks it against a plain toposort and key.)"""
    leaves, leaf_ids, scalars, scalar_ids = [], {}, [], {}
    position = {}  # id(node) -> its entry's position (-1 while its sources are walked)
    key = []
    append = key.append

    def load(n) -> None:  # (a node without sources)
        op = n.op
        if op == "buffer":
            a = n.arg
            k = leaf_ids.get(id(a))
            if k is None:
                k = leaf_ids[id(a)] = len(leaves)
                leaves.append(a)
            append(("buffer", n.shape, a._strides, n.dtype, k))
        elif op == "param":
            k = scalar_ids.get(id(n.arg))
            if k is None:
                k = scalar_ids[id(n.arg)] = len(scalars)
                scalars.append(n.arg)
            append(("param", n.shape, n.dtype, k))
        elif op == "const":  # by its text: 0.0 == -0.0 (and nan != nan) as numbers
            append(("const", repr(n.arg), n.shape, n.dtype))
        else:
            append((op, n.arg, n.shape, n.dtype, ()))

    for root in outputs:
        if id(root) in position:
            continue
        if not root.srcs:
            position[id(root)] = len(key)
            load(root)
            continue
        position[id(root)] = -1
        stack = [(root, iter(root.srcs))]
        while stack:
            node, srcs = stack[-1]
            for src in srcs:
                if id(src) not in position:
                    if src.srcs:
                        position[id(src)] = -1
                        stack.append((src, iter(src.srcs)))
                        break
                    position[id(src)] = len(key)
                    load(src)
            else:
                stack.pop()
                position[id(node)] = len(key)
                srcs = node.srcs
                if len(srcs) == 1:
                    where = (position[id(srcs[0])],)
                elif len(srcs) == 2:
                    where = (position[id(srcs[0])], position[id(srcs[1])])
                else:
                    where = tuple([position[id(x)] for x in srcs])
                append((node.op, node.arg, node.shape, node.dtype, where))
    append(tuple([position[id(n)] for n in outputs]))
    return Signature(StructureKey(tuple(key)), leaves, leaf_ids, scalars, scalar_ids)


def plan(outputs, target: Target, signature: Signature = None) -> tuple:
    """Run the passes on the graph of `outputs` for `target`: (Schedule, FusedGraph).
    `signature` is `structure(outputs)` when the caller has it already."""
    signature = signature or structure(outputs)
    leaves, leaf_ids, scalars, scalar_ids = (signature.leaves, signature.leaf_ids, signature.scalars,
                                             signature.scalar_ids)
    read_windows = target.loop_nests  # a loop nest's matmul reads a conv's windows in place
    graph = merge_matmul_sums(outputs)
    if target.loop_nests:  # (the CUDA lowering splits its reductions over blocks itself)
        graph = split_reductions(graph, target.threads)
    fused = fuse(merge_common(fold_views(graph, read_windows)), read_windows)
    slot_of_node = {}
    slot_kinds = {i: ("leaf", i) for i in range(len(leaves))}
    next_slot = len(leaves)
    output_slots = []
    for pos, node in enumerate(fused.outputs):
        if id(node) not in slot_of_node:
            slot_of_node[id(node)] = next_slot
            slot_kinds[next_slot] = ("out", pos)
            next_slot += 1
        output_slots.append((slot_of_node[id(node)], outputs[pos].shape, node.dtype))
    temp_sizes = {}  # slot -> bytes, for intermediate results and scratch buffers
    for node in (n for g in fused.groups for n in g.extra + [g.root]):
        if id(node) not in slot_of_node:
            slot_of_node[id(node)] = next_slot
            temp_sizes[next_slot] = max(node.size, 1) * itemsize(node.dtype)
            next_slot += 1

    def slot_of(node):
        if node.op == "buffer":
            return leaf_ids[id(node.arg)]
        return slot_of_node[id(node)]

    def new_scratch(elements: int, dtype: str) -> int:
        nonlocal next_slot
        temp_sizes[next_slot] = max(elements, 1) * itemsize(dtype)
        next_slot += 1
        return next_slot - 1

    calls, packed, groups = [], {}, []  # packed: operands packed so far (matmul_tiling.Tiling.packed_slot)
    for g in fused.groups:
        lowered = _lower(g, fused, slot_of, lambda s: scalar_ids[id(s)], new_scratch, target, packed)
        calls.extend(lowered)
        groups += [g] * len(lowered)
    temp_bytes = _plan_temps(calls, temp_sizes, slot_kinds)
    schedule = Schedule(calls, len(leaves), len(scalars), output_slots, slot_kinds, temp_bytes)
    leaf_shapes = [(leaf.shape, leaf.dtype) for leaf in leaves]
    described = {}
    for call, g in zip(calls, groups):
        if id(g) not in described:
            described[id(g)] = call_origins.group_origin(g, g.members)
        nbytes = call_origins.call_bytes(call, slot_kinds, leaf_shapes, output_slots, temp_bytes)
        call.origin = call_origins.for_call(described[id(g)], g, call, nbytes)
    return schedule, fused


def _lower(g, fused: FusedGraph, slot_of, param_slot, new_scratch, target: Target, packed: dict) -> list:
    """The calls of one group (a matmul may need packing kernels first)."""
    def make():
        loops = target.loop_nests
        return Lowering(g, fused.stored, slot_of, param_slot, tile_transposes=loops,
                        lanes=target.vector_bytes // 4 if loops else 0)
    if target.grid:
        from . import cuda_lowering
        return [_call(k, target) for k in cuda_lowering.lower(g, make, new_scratch)]
    if g.kind == "matmul":
        return [_call(k, target) for k in matmul_tiling.lower(make, new_scratch, target, packed)]
    low = make()
    if g.kind != "reduce":
        kernel = low.store_group()
    elif column_reduce.pays(g):
        kernel = column_reduce.reduce_columns(low)
    else:
        kernel = reduce_rows(low)
    return [_call(spread_parallel(kernel), target)]


def _call(kernel, target: Target) -> Call:
    kernel, offsets = hoist_offsets(kernel)
    kernel.hot = kernel.work >= target.unroll_min_work
    return Call(kernel, kernel.slots, kernel.params, offsets)


def _plan_temps(calls, temp_sizes, slot_kinds) -> list:
    """Give each intermediate slot a physical buffer, reusing buffers whose
    contents are dead (greedy, in call order)."""
    last_use = {}
    for i, call in enumerate(calls):
        for s in call.slots:
            last_use[s] = i
    sizes, free, assigned = [], [], {}
    for i, call in enumerate(calls):
        for s in call.slots:
            if s in temp_sizes and s not in assigned:
                need = temp_sizes[s]
                fit = [b for b in free if sizes[b] >= need]
                if fit:
                    buf = min(fit, key=lambda b: sizes[b])
                    free.remove(buf)
                else:
                    buf = len(sizes)
                    sizes.append(need)
                assigned[s] = buf
                slot_kinds[s] = ("temp", buf)
        for s in set(call.slots):
            if s in assigned and last_use[s] == i:
                free.append(assigned[s])
    return sizes
