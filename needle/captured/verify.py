"""`needle.jit(fn, verify=N)`: the first N replays checked against plain calls, bit for bit.

Snapshot everything the capture can touch (the world's containers, the data and
gradients of the Tensors they hold, the inputs', numpy's and Python's RNG state),
replay and observe what it produced, restore the snapshot, run `fn` plainly, observe
again and compare.  A difference raises JitError naming the first differing value
and the call; otherwise the plain call's outcome stands (it is the same).
"""
from __future__ import annotations

import collections
import copy as copying
import random
import types

import numpy as np

from ..autograd import Tensor
from ..engine.realize import realize_nodes
from .step import FAILS, STALE
from .places import MISSING, SIMPLE, Read, path_of


class Snapshot:
    """What a call may change, as it is now; `restore()` puts it back."""

    def __init__(self, world, call):
        self.world, self.call = world, call
        self.boxes = [(box, dict(box) if isinstance(box, types.MappingProxyType) else copying.copy(box))
                      for box, _, _ in world.boxes]
        self.cells = [(cell, _contents(cell)) for cell in world.cells]
        self.globals = [(ns, {n: ns.get(n, MISSING) for n in names}) for ns, names, _, _ in world.globals]
        self.tensors = [(t, t._cached_data, t.grad, t.requires_grad) for t in _tensors_now(world, call)]
        self.rng, self.py_rng = np.random.get_state(), random.getstate()

    def restore(self) -> None:
        for box, copy in self.boxes:  # (only what changed: an Enum's members cannot be set again)
            try:
                if box == copy:
                    continue
            except Exception:  # (a member whose == raises: restore it)
                pass
            if isinstance(box, types.MappingProxyType):  # (a class's attributes: set again one by one)
                owner = self.world._class_of[id(box)]
                for key in set(box) - set(copy):
                    delattr(owner, key)
                for key, value in copy.items():
                    if box.get(key, MISSING) is not value:
                        setattr(owner, key, value)
            elif isinstance(box, (dict, set)):
                box.clear()
                box.update(copy)
            elif isinstance(box, collections.deque):
                box.clear()
                box.extend(copy)
            else:  # (a list, a byte buffer, an array.array)
                box[:] = copy
        for cell, value in self.cells:
            if _contents(cell) is not value:
                if value is MISSING:
                    del cell.cell_contents
                else:
                    cell.cell_contents = value
        for ns, values in self.globals:
            if isinstance(ns, Read):  # (read through a call: a replay never writes there)
                continue
            for name, value in values.items():
                if ns.get(name, MISSING) is value:
                    continue
                if value is MISSING:
                    del ns[name]
                else:
                    ns[name] = value
        for t, data, grad, flag in self.tensors:
            t._cached_data, t.grad, t.requires_grad = data, grad, flag
        np.random.set_state(self.rng)
        random.setstate(self.py_rng)

    def observe(self, result) -> dict:
        """name -> value (Tensors as their bits) of everything a call may have changed."""
        seen = {}
        for box, _, path in self.world.boxes:
            items = box.items() if isinstance(box, dict) else enumerate(box) if isinstance(box, list) else \
                [("members", frozenset(box))]
            for key, value in items:
                seen[path_of(path, key)] = _value(value)
        for i, cell in enumerate(self.world.cells):
            seen[f"closure variable {i}"] = _value(_contents(cell))
        for ns, names_, _, path in self.world.globals:
            for name in names_:
                seen[path_of(path, name)] = _value(ns.get(name, MISSING))
        for i, x in enumerate(self.call.inputs):
            seen[f"Tensor argument {i}"] = _value(x)
        seen["the return value"] = _value(result)
        seen["numpy's RNG state"] = _value(np.random.get_state())
        seen["Python's random state"] = _value(random.getstate())
        return seen


def _tensors_now(world, call) -> list:
    """Every Tensor the world's containers hold now (in tuples too), their gradients,
    the capture's state Tensors and the Tensor arguments: what a call may change."""
    found, seen = [], set()

    def add(value):
        if isinstance(value, Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                found.append(value)
                add(value.grad)
        elif type(value) is tuple:
            for v in value:
                add(v)
    for box, _, _ in world.boxes:
        for v in (box.values() if isinstance(box, dict) else box if isinstance(box, list) else ()):
            add(v)
    for cell in world.cells:
        add(_contents(cell))
    for ns, names, _, _ in world.globals:
        for name in names:
            add(ns.get(name))
    for t in list(world.holders) + list(call.inputs):
        add(t)
    return found


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


def _value(value, seen=()):
    """A comparable stand-in: a Tensor's class, shape, dtype and bits, its attributes and
    a leaf's gradient (a replay gives a returned tensor's back, not a stored intermediate's);
    containers item by item; other objects by type (a capture keeps only objects that
    existed before the call, or that nothing can change).  `seen`: the
    containers and Tensors around this value (one met again: a cycle, named, not walked)."""
    if isinstance(value, (Tensor, list, tuple, dict)):
        if id(value) in seen:
            return ("cycle", type(value).__name__)
        seen = seen + (id(value),)
    if isinstance(value, Tensor):  # (with what backward() left on it and the user's attributes)
        data = value.numpy()
        return ("tensor", type(value).__name__, data.shape, data.dtype.str, data.tobytes(), value.requires_grad,
                _value(value.grad, seen) if value.op is None else "a result",  # (a stored intermediate's: none)
                _value(dict(object.__getattribute__(value, "__dict__")), seen))
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_value(v, seen) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _value(v, seen)) for k, v in value.items()))
    if value is MISSING:
        return "nothing"
    if isinstance(value, SIMPLE):
        return ("value", type(value).__name__, value if value == value else "nan")
    return ("object", type(value).__name__)


def check(jit, step, call, args, kwargs):
    """Replay `step` for `call`, then run the function plainly from the same state:
    (the plain call's result, the first difference or None), or STALE (nothing ran)."""
    before = Snapshot(step.world, call)
    replayed = step.replay(call)
    if replayed is STALE or replayed is FAILS:
        return replayed
    got = before.observe(replayed)
    before.restore()
    result = jit.fn(*args, **kwargs)
    realize_nodes([])  # (what outlives the step first, as any read after a plain call computes it)
    want = before.observe(result)
    for name, value in want.items():
        if got.get(name, "absent") != value:
            return result, f"{name}"
    for name in got:
        if name not in want:
            return result, f"{name} (which a plain call does not set)"
    return result, None
