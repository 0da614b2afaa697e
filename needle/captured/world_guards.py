"""A World's guards checked before a replay: `holds` in C-speed comparisons on the
common path, `changed` when it says no (which differences a replay follows, and the
first one that it cannot)."""
from __future__ import annotations

import threading
import types
from operator import attrgetter, call, eq

import numpy as np

from .places import ALL, MISSING, path_of, pin, same_layout, short, unpin
from .world import contents, equal, refill

_grad, _flag = attrgetter("grad"), attrgetter("requires_grad")


def holds(world) -> bool:
    """Whether every guard holds now; compared in C, Tensors by identity.  When this
    says no, `changed()` tells whether a difference matters (and refreshes the
    snapshots when none does)."""
    if world.thread is not None and threading.current_thread() is not world.thread:
        return False
    try:  # (in C: each box against its snapshot, members by identity first)
        if not all(map(eq, world._snapshot_list, world._box_list)):  # (snapshot first: its Same compare)
            return False
    except Exception:  # (a member whose == raises: a numpy array replaced by another)
        return False
    if world.cells and world.cell_values != contents(world.cells):
        return False
    if list(map(tuple, world.ordered)) != world.orders:
        return False
    for namespace, names, values, _ in world.globals:
        try:
            if values != tuple(map(namespace.__getitem__, names)):
                return False
        except Exception:  # (a KeyError, or a member's == raising)
            return False
    if list(map(_grad, world.grad_holders)) != world.grads or list(map(_flag, world.holders)) != world.flags:
        return False
    if list(map(type, map(call, world._class_refs))) != world._class_then:
        return False
    for values, copy, _ in world.arrays:
        if not same_bits(values, copy):
            return False
    return world.big_array_changed() is None


def changed(world):
    """None when every difference from the snapshots is one a replay follows (a Tensor
    slot holding another Tensor of the same layout, an exempt attribute), after
    refreshing those snapshots; else the first difference: (where, description),
    where as `where_of` gives it."""
    if world.thread is not None and threading.current_thread() is not world.thread:
        return (id(world), "thread"), "the calling thread (a threading.local the step reaches holds a value per thread)"
    for box, order, path in zip(world.ordered, world.orders, world.order_paths):
        if tuple(box) != order and set(box) == set(order):  # (other keys: told below)
            return (id(box), ALL), f"the order of {path or 'a dict'}'s keys (was {short(list(order))})"
    for entry in world.boxes:
        box, snapshot, path = entry
        if equal(box, snapshot):
            continue
        mapping = isinstance(box, (dict, types.MappingProxyType))
        if not mapping or len(box) != len(snapshot):
            if not isinstance(box, list) or len(box) != len(snapshot):
                return (id(box), ALL), f"{path or 'a container'} (was {short(list(map(unpin, snapshot)))}, " \
                                       f"now {short(box)})"
            for i, (before, now) in enumerate(zip(snapshot, box)):
                if not same_layout(unpin(before), now):
                    return (id(box), i), f"{path_of(path, i)} (was {short(unpin(before))}, now {short(now)})"
        else:
            owner = id(world._class_of.get(id(box), box))  # (a class's attribute: where_of(Attrs(class)))
            for key, before in snapshot.items():
                now, before = box.get(key, MISSING), unpin(before)
                if (id(box), key) not in world.exempt and not same_layout(before, now):
                    return (owner, key), f"{path_of(path, key)} (was {short(before)}, now {short(now)})"
        refill(entry[1], box)
        world.moved = True
    now = contents(world.cells) if world.cells else []
    for cell, before, value in zip(world.cells, world.cell_values, now):
        if not same_layout(unpin(before), value):
            return (id(cell), 0), f"a closure variable (was {short(before)}, now {short(value)})"
    world.cell_values = [pin(v) for v in now]
    for entry in world.globals:
        namespace, names, values, path = entry
        current = tuple(namespace.get(n, MISSING) for n in names)
        for name, before, value in zip(names, values, current):
            if not same_layout(unpin(before), value):
                return (id(namespace), name), f"the global {path_of(path, name)} (was {short(before)}, " \
                                              f"now {short(value)})"
        entry[2] = tuple(map(pin, current))
    for i, t in enumerate(world.holders):
        if t.requires_grad != world.flags[i]:
            return (id(t), "requires_grad"), f"requires_grad of a {t.shape} tensor (was {world.flags[i]})"
    for i, t in enumerate(world.grad_holders):
        if (t.grad is None) != (world.grads[i] is None) or not same_layout(t.grad, world.grads[i]):
            return (id(t), "grad"), f"the .grad of a {t.shape} tensor (was {short(world.grads[i])}, " \
                                    f"now {short(t.grad)})"
        world.grads[i] = t.grad
    for values, copy, path in world.arrays:
        if not same_bits(values, copy):
            return (id(values), ALL), f"the numpy array {path} (its values)"
    changed_array = world.big_array_changed()
    if changed_array is not None:
        return (id(changed_array[0]), ALL), f"the numpy array {changed_array[1]} (its values)"
    for ref, then, path in zip(world._class_refs, world._class_then, world._class_paths):
        if type(ref()) is not then:
            return (id(ref), "__class__"), f"the class of {path} (was {then.__name__})"
    world.orders = list(map(tuple, world.ordered))
    world.moved = True  # (what replays remembered of the last one is to be looked up again)
    return None


def same_bits(values, copy) -> bool:
    """A numpy array against its snapshot, bit for bit: -0.0 is not 0.0 (code may branch
    on a sign) and a nan equals itself (== would call an array holding one changed)."""
    if values.shape != copy.shape or values.dtype != copy.dtype:
        return False
    if values.dtype.kind == "c":
        return values.tobytes() == copy.tobytes()
    if values.dtype.kind != "f":
        return np.array_equal(values, copy)
    bits = np.dtype(f"u{values.dtype.itemsize}")
    return np.array_equal((values if values.flags.c_contiguous else values.copy()).view(bits), copy.view(bits))
