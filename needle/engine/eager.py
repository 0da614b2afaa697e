"""Eager execution on a compiled device: one primitive, one kernel.

The primitives of `cpu()` and `cuda()` (backend_ndarray.devices.CompiledDevice)
call this module, which builds a one-node graph over buffer leaves and realizes
it right away.  The schedule cache keys on the graph's structure, so repeating
an op on arrays of the same shape and layout skips the compiler and only
launches the cached kernel.

On cpu() a repeated op skips the graph too: the first time an op meets operands
of a given shape, layout and dtype, it remembers the structure key of the graph
it built (and where its operands go); later it finds the compiled schedule with
that key and runs it on the operands directly (while the cache has let nothing go,
the schedule it found last, without a lookup).
"""
from __future__ import annotations

import time
import weakref

from .. import config, observing
from ..compiler.schedule import structure
from ..ir import build
from ..runtime.counters import COUNTERS
from . import backends, schedule_cache

#: (op, operands' layouts and aliasing, target) -> [structure key, operand of each leaf
#: slot, whether it takes the scalar, a weak reference to the compiled schedule last found
#: (None before one is), the schedule cache's removal count then]; bounded: cleared when
#: it grows past this
_KNOWN = {}
KNOWN_MAX = 4096


def _run(op_key, build_node, *arrays, scalar=None):
    """`build_node(*leaf_nodes)` computed on `arrays`; the NDArray result.  `op_key`
    names the op and every static argument; `scalar` is the run-time scalar, if any."""
    device = arrays[0].device
    key, known, entry = _remembered_for(op_key, arrays)
    if entry is not None:
        scalars = [build.scalar_value(scalar, arrays[0].dtype)] if known[2] else []
        return _launch(entry, [arrays[i] for i in known[1]], scalars, device)[0]
    node = build_node(*[build.buffer(a) for a in arrays])
    if node.op == "buffer":  # the builder folded the op away (e.g. a cast to the same dtype)
        return node.arg
    if key is not None:
        signature = structure([node])
        slots = [_position(leaf, arrays) for leaf in signature.leaves]
        if None not in slots:  # (no schedule found yet: -1 is no count)
            _remember(key, [signature.key, slots, bool(signature.scalars), None, -1])
    schedule_cache.realize([node])
    return node.arg


def _remembered_for(op_key, arrays) -> tuple:
    """(key, what _KNOWN holds for it, its compiled schedule) for `op_key` on the
    operands' layouts and aliasing; key None where the shortcut stands aside (a device
    without it, DEBUG, an observer) or `op_key` does not hash."""
    backend = backends.of(arrays[0].device)
    if not backend.eager_shortcut or config.DEBUG or observing.OBSERVED:
        return None, None, None
    cache = schedule_cache.CACHES[backend.name]
    target = cache.target()
    key = (op_key, tuple([(a._shape, a._strides, a._dtype) for a in arrays]),
           tuple([a is b for a in arrays for b in arrays]), target)
    try:
        known = _KNOWN.get(key)
    except TypeError:  # (an op key that does not hash: built every time)
        return None, None, None
    return key, known, (_remembered(known, cache, target) if known is not None else None)


def _remember(key, known: list) -> None:
    if len(_KNOWN) >= KNOWN_MAX:
        _KNOWN.clear()
    _KNOWN[key] = known


def _remembered(known, cache, target):
    """The compiled schedule of `known`: the one found last time while the cache has
    let no schedule go since (a repeated op skips the cache's lookup: hashing its key
    and moving it to the recent end cost more than a small kernel runs), else looked
    up again, which also marks it recently used.  Held weakly: the cache's bounds
    decide what stays in memory."""
    removals = cache.entries.removals
    if known[4] == removals:
        entry = known[3]()
        if entry is not None:
            return entry
    entry = cache.find(known[0], target)
    if entry is not None:
        known[3], known[4] = weakref.ref(entry), removals
    return entry


def _position(array, arrays):
    """Which of `arrays` is `array` (None if none is: a memo that cannot bind it)."""
    return next((i for i, a in enumerate(arrays) if a is array), None)


def _launch(entry, leaves, scalars, device) -> list:
    counts = COUNTERS
    counts["schedule_cache_hits"] += 1  # (counters.add, without the calls: every eager op)
    t0 = time.perf_counter()
    outputs = entry.run(leaves, scalars, device)
    counts["run_seconds"] += time.perf_counter() - t0
    counts["schedules"] += 1
    return outputs


def copy(a):
    return _run(("copy",), build.copy, a)


def cast(a, dtype):
    return _run(("cast", dtype), lambda x: build.cast(x, dtype) if dtype != a.dtype else build.copy(x), a)


def unary(op, a):
    return _run(("unary", op), lambda x: build.elementwise(op, x), a)


def binary(op, a, b):
    return _run(("binary", op), lambda x, y: build.elementwise(op, x, y), a, b)


def binary_scalar(op, a, scalar, reverse):
    exponent = op == "pow" and not reverse
    def node(x):
        s = build.scalar(scalar, x.shape, x.dtype, x.device, exponent=exponent)
        return build.elementwise(op, s, x) if reverse else build.elementwise(op, x, s)
    baked = build.baked(scalar, exponent)
    # a baked scalar is part of the code: keyed by its text (0.0 == -0.0 as numbers)
    return _run(("scalar", op, reverse, repr(scalar) if baked else None), node, a,
                scalar=None if baked else scalar)


def where(cond, a, b):
    def node(c, x, y):
        if c.dtype != "bool":
            c = build.elementwise("ne", c, build.const(0, c.shape, c.dtype, c.device))
        return build.elementwise("where", c, x, y)
    return _run(("where",), node, cond, a, b)


def reduce(op, a, axes):
    return _run(("reduce", op, tuple(axes)), lambda x: build.reduce("reduce_" + op, x, axes) if axes else build.copy(x), a)


def matmul(a, b):
    return _run(("matmul",), build.matmul, a, b)


def fused(op_key, fn, arrays) -> tuple:
    """`fn(*arrays)` (array code returning a tuple of arrays: a fused op's forward and
    the values it keeps) computed as one schedule, not a kernel per primitive: on cpu()
    a batch norm's statistics were a launch per primitive, each costing more than its work.
    `op_key` names the code and every attribute it reads (numbers by their text: 0.0 and
    -0.0 are equal keys), so that with the operands' layouts it determines the graph and
    its run-time scalars (eps, 1 / n): as `_run` does, a later call with the same key runs
    the schedule found the first time on the operands without building the graph again."""
    device = arrays[0].device
    key, known, entry = _remembered_for(("fused", op_key), arrays)
    if entry is not None:
        outputs = _launch(entry, [arrays[i] for i in known[1]], known[2], device)
        return tuple([arrays[i] if operand else outputs[i] for operand, i in known[5]])
    results = tuple(fn(*[build.buffer(a) for a in arrays]))
    pending, where = [], []  # the schedule's outputs; each result as (an operand?, its index)
    for r in results:
        if r.op == "buffer":  # an operand (fn returned it, or a view of it folded away)
            where.append((True, _position(r.arg, arrays)))
            continue
        k = next((k for k, p in enumerate(pending) if p is r), None)
        if k is None:
            k = len(pending)
            pending.append(r)
        where.append((False, k))
    if pending:
        signature = structure(pending)
        slots = [_position(leaf, arrays) for leaf in signature.leaves]
        schedule_cache.realize(pending)
        if key is not None and None not in slots and all(i is not None for _, i in where):
            _remember(key, [signature.key, slots, tuple(signature.scalars), None, -1, where])
    return tuple([r.arg for r in results])
