"""Where a step's state lives: the containers reachable from the function.

A captured step must find, at each replay, the Tensors the function read as state
(parameters, optimizer moments, BatchNorm statistics) even when the function
replaced them by new Tensors (`self.running_mean = ...`, `opt.m[i] = ...`).  Walking
the objects reachable from the function (its arguments, closure, globals it names,
`self`) before and after the captured call gives every (container, key) slot that
holds a Tensor, and which Tensor replaced which.
"""
from __future__ import annotations

import types

from ..autograd import Tensor


def roots(fn, args, kwargs) -> list:
    roots = list(args) + list(kwargs.values())
    target = fn
    if isinstance(target, types.MethodType):
        roots.append(target.__self__)
        target = target.__func__
    elif not isinstance(target, types.FunctionType):
        roots.append(target)  # a callable object: its attributes hold the state
    code = getattr(target, "__code__", None)
    for cell in getattr(target, "__closure__", None) or ():
        try:
            roots.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    if code is not None:
        g = getattr(target, "__globals__", {})
        roots.extend(g[name] for name in code.co_names if name in g)
    return roots


def slots(roots, modules: list = None, limit: int = 200_000) -> list:
    """(container, key, value) for every Tensor (or tuple of them) held in a dict, a
    list or an object's attributes reachable from `roots` (modules, optimizers, user
    objects), so that a value the call replaced can be matched with its successor.
    The Modules met on the way are appended to `modules` (their `training` flags
    select a capture)."""
    from ..nn import Module
    found, seen, stack = [], set(), [(r, 0) for r in roots]
    while stack and len(seen) < limit:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > 64 or isinstance(obj, (Tensor, str, bytes, int, float, type,
                                                             types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            items = list(obj.items())
        elif isinstance(obj, list):
            items = list(enumerate(obj))
        elif isinstance(obj, tuple):
            stack.extend((v, depth + 1) for v in obj)
            continue
        elif hasattr(obj, "__dict__") and not getattr(type(obj), "holds_no_state", False):
            stack.append((obj.__dict__, depth + 1))  # modules, optimizers, a user's objects
            if modules is not None and isinstance(obj, Module):
                modules.append(obj)
            continue
        else:
            continue
        for key, value in items:
            if isinstance(value, Tensor) or (isinstance(value, tuple) and value and
                                             all(isinstance(v, Tensor) for v in value)):
                found.append((obj, key, value))
                for t in (value if isinstance(value, tuple) else (value,)):
                    if isinstance(t.__dict__.get("grad"), Tensor):  # a parameter's gradient
                        found.append((t.__dict__, "grad", t.__dict__["grad"]))
            else:
                stack.append((value, depth + 1))
    return found


def slot_of(slots) -> dict:
    """id(Tensor) -> (container, key, position in a tuple or None) where it now lives."""
    where = {}
    for container, key, value in slots:
        if isinstance(value, tuple):
            for pos, t in enumerate(value):
                where.setdefault(id(t), (container, key, pos))
        else:
            where.setdefault(id(value), (container, key, None))
    return where


def in_slot(container, key, pos):
    value = container[key]
    return value if pos is None else value[pos]


def replacements(slots) -> dict:
    """id(old Tensor) -> new Tensor for every slot whose Tensor the call replaced."""
    replaced = {}
    for container, key, old in slots:
        try:
            new = container[key]
        except (KeyError, IndexError, TypeError):
            continue
        pairs = zip(old, new) if isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new) \
            else [(old, new)]
        for a, b in pairs:
            if isinstance(a, Tensor) and isinstance(b, Tensor) and a is not b:
                replaced[id(a)] = b
    return replaced

