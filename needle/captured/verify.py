"""`needle.jit(fn, verify=N)`: the first N replays checked against plain calls, bit for bit.

Snapshot everything the capture can touch (the world's containers, the data and
gradients of the Tensors they hold, the inputs', numpy's and Python's RNG state),
replay and observe what it produced, restore the snapshot, run `fn` plainly, observe
again and compare.  A difference raises JitError naming the first differing value
and the call; otherwise the plain call's outcome stands (it is the same).
"""
from __future__ import annotations

import random

import numpy as np

from ..autograd import Tensor
from ..errors import JitError
from .step import STALE
from .world import MISSING, SIMPLE, path_of


class Snapshot:
    """What a call may change, as it is now; `restore()` puts it back."""

    def __init__(self, world, call):
        self.world, self.call = world, call
        self.boxes = [(box, box.copy()) for box, _, _ in world.boxes]
        self.cells = [(cell, _contents(cell)) for cell in world.cells]
        self.globals = [(ns, {n: ns.get(n, MISSING) for n in names}) for ns, names, _, _ in world.globals]
        tensors = list(world.holders) + list(call.inputs)
        self.tensors = [(t, t._cached_data, t.grad, t.requires_grad) for t in tensors]
        self.rng, self.py_rng = np.random.get_state(), random.getstate()

    def restore(self) -> None:
        for box, copy in self.boxes:
            if isinstance(box, list):
                box[:] = copy
            else:
                box.clear()
                box.update(copy)
        for cell, value in self.cells:
            if value is MISSING:
                del cell.cell_contents
            else:
                cell.cell_contents = value
        for ns, values in self.globals:
            for name, value in values.items():
                if value is MISSING:
                    ns.pop(name, None)
                else:
                    ns[name] = value
        for t, data, grad, flag in self.tensors:
            t._cached_data, t.grad, t.requires_grad = data, grad, flag
        np.random.set_state(self.rng)
        random.setstate(self.py_rng)

    def observe(self, result) -> dict:
        """name -> value (Tensors as their bits) of everything a call may have changed."""
        seen = {}
        names = {id(slot.initial): slot.path for slot in self.world.slots}
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
        for t, _, _, _ in self.tensors:
            name = names.get(id(t)) or next((f"argument {i}" for i, x in enumerate(self.call.inputs) if x is t),
                                            "a state tensor")
            seen[name + " (data)"] = _value(t)
            seen[name + ".grad"] = _value(t.grad)
        seen["the return value"] = _value(result)
        seen["numpy's RNG state"] = _value(np.random.get_state())
        seen["Python's random state"] = _value(random.getstate())
        return seen


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


def _value(value):
    """A comparable stand-in: a Tensor's shape, dtype and bits; containers item by item;
    other objects by type (a replay reuses what a plain call makes anew)."""
    if isinstance(value, Tensor):
        data = value.numpy()
        return ("tensor", data.shape, data.dtype.str, data.tobytes(), value.requires_grad)
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_value(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _value(v)) for k, v in value.items()))
    if value is MISSING:
        return "nothing"
    if isinstance(value, SIMPLE):
        return ("value", type(value).__name__, value if value == value else "nan")
    return ("object", type(value).__name__)


def check(jit, step, call, args, kwargs):
    """Replay `step` for `call`, then run the function plainly from the same state, and
    raise JitError where they differ; returns the plain call's result (or STALE)."""
    before = Snapshot(step.world, call)
    replayed = step.replay(call)
    if replayed is STALE:
        return STALE  # (nothing ran)
    got = before.observe(replayed)
    before.restore()
    result = jit.fn(*args, **kwargs)
    want = before.observe(result)
    for name, value in want.items():
        if got.get(name, "absent") != value:
            raise JitError(f"needle.jit({jit.name}): verify: replay {jit.replays + 1} (call {jit.calls}) differs from "
                           f"a plain call in {name}; please report this with your step (NEEDLE_JIT=0 runs plainly)")
    for name in got:
        if name not in want:
            raise JitError(f"needle.jit({jit.name}): verify: replay {jit.replays + 1} (call {jit.calls}) set {name}, "
                           "which a plain call does not")
    return result
