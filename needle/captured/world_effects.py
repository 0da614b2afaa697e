"""What a captured call changed in its World (the effects a replay writes again),
their readable names, and how a replay keeps the snapshots following what it writes."""
from __future__ import annotations

import types

from .places import ALL, MISSING, SIMPLE, Attrs, Cell, GradOf, path_of, pin, same_layout, unpin
from .world import contents, copy_box, equal


def diff(world):
    """[(container, key, value now)] for every guarded value that differs from its
    snapshot now (after the call), exempt ones aside; a list that changed length is
    one entry with key ALL.  Closure cells come as (Cell, 0, value)."""
    found = []
    for box, snapshot, _ in world.boxes:
        if equal(box, snapshot):
            continue
        if isinstance(box, (dict, types.MappingProxyType)):
            target = Attrs(world._class_of[id(box)]) if id(box) in world._class_of else box
            for key in set(snapshot) | set(box):
                now, before = box.get(key, MISSING), unpin(snapshot.get(key, MISSING))
                if now is not before and (id(box), key) not in world.exempt:
                    found.append((target, key, now))
        elif isinstance(box, list) and len(box) == len(snapshot):
            found.extend((box, i, now) for i, (now, before) in enumerate(zip(box, snapshot))
                         if now is not unpin(before))
        else:
            found.append((box, ALL, copy_box(box)))
    for cell, before in zip(world.cells, world.cell_values):
        now = contents([cell])[0]
        if now is not unpin(before):
            found.append((Cell(cell), 0, now))
    for namespace, names, values, _ in world.globals:
        for name, before in zip(names, values):
            now, before = namespace.get(name, MISSING), unpin(before)
            if now is not before and not (isinstance(now, SIMPLE) and type(now) is type(before) and now == before):
                found.append((namespace, name, now))  # (a Read's float is a new object at each read)
    for t, before in zip(world.holders, world.grads_before):
        if t.grad is not before:
            found.append((GradOf(t), "grad", t.grad))
    return found


def path(world, container, key) -> str:
    """A readable name for `container[key]` (for warnings and verify's reports)."""
    if isinstance(container, GradOf):
        for slot in world.slots:
            if slot.pos is None and slot.get() is container.tensor:
                return slot.path + ".grad"
        return "the .grad of a tensor"
    if isinstance(container, Cell):
        return "a closure variable"
    for box, _, path in world.boxes:
        if box is container:
            return path_of(path, key) if key is not ALL else path
    for namespace, _, _, path in world.globals:
        if namespace is container:
            return path_of(path, key)
    return repr(key)


def refresher(world, container, key, after):
    """How a replay that writes `container[key]` keeps the snapshot following, so the
    next call's check passes in C: a function of the value written; None when what
    the capture wrote (`after`) is not like what it started from (None before, a
    Tensor after: the guard keeps its None)."""
    if isinstance(container, GradOf):
        for i, t in enumerate(world.grad_holders):
            if t is container.tensor and same_layout(world.grads[i], after):
                return lambda value: world.grads.__setitem__(i, value)
        return None
    if isinstance(container, Cell):
        for i, cell in enumerate(world.cells):
            if cell is container.cell and same_layout(unpin(world.cell_values[i]), after):
                return lambda value: world.cell_values.__setitem__(i, pin(value))
        return None
    for entry in world.boxes:
        if entry[0] is container:
            if key is not ALL and same_layout(unpin(entry[1].get(key, MISSING) if isinstance(entry[1], dict)
                                                    else entry[1][key]), after):
                return lambda value: entry[1].__setitem__(key, pin(value))
            return None
    for entry in world.globals:
        if entry[0] is container and key in entry[1] and same_layout(unpin(entry[2][entry[1].index(key)]), after):
            i = entry[1].index(key)
            return lambda value: entry.__setitem__(2, entry[2][:i] + (pin(value),) + entry[2][i + 1:])
    return None
