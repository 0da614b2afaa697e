"""Where a step's state lives: the containers reachable from the function.

A captured step must find, at each replay, the Tensors the function read as state
(parameters, optimizer moments, BatchNorm statistics) even when the function
replaced them by new Tensors (`self.running_mean = ...`, `opt.m[i] = ...`).  Walking
the objects reachable from the function (its arguments, closure, globals it names,
`self`) before and after the captured call gives every (container, key) slot that
holds a Tensor, and which Tensor replaced which.
"""
from __future__ import annotations

import dis
import functools
import types

from ..autograd import Tensor


def roots(fn, args, kwargs) -> list:
    """What the function reaches: its arguments, `self`, and its names (`Names`: a
    global or closure variable holding a Tensor is a slot like a module attribute,
    so a step that rebinds it, `hc = (h.detach(), c.detach())`, is followed)."""
    roots = list(args) + list(kwargs.values())
    if hasattr(fn, "__func__"):  # a bound method (or JitFunction's weakly bound one)
        roots.append(fn.__self__)
    elif not isinstance(fn, types.FunctionType):
        roots.append(fn)  # a callable object: its attributes hold the state
    roots.append(Names(bindings(fn)))
    return roots


class Names:
    """A function's global and closure variables as a container: key i reads (and
    writes) the variable of `bindings[i]` as it is now."""

    def __init__(self, found):
        self.found = found

    def items(self):
        return [(i, self[i]) for i in range(len(self.found))]

    def __getitem__(self, i):
        where, name, _ = self.found[i]
        return where.cell_contents if name is None else where[name]

    def __setitem__(self, i, value) -> None:
        where, name, _ = self.found[i]
        if name is None:
            where.cell_contents = value
        else:
            where[name] = value


@functools.lru_cache(maxsize=512)
def _global_names(code) -> tuple:
    """The globals a code object loads (co_names also holds attribute names: a loop
    variable `step` beside `opt.step()` is no binding of the function)."""
    names = [ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "STORE_GLOBAL")]
    for const in code.co_consts:  # (comprehensions and inner functions)
        if isinstance(const, types.CodeType):
            names.extend(_global_names(const))
    return tuple(dict.fromkeys(names))


def bindings(fn) -> list:
    """(closure cell or globals dict, name or None, object) for each object `fn` reaches
    through its closure and the globals it names.  A replay checks they are the same
    objects still (`rebound`): a user who binds `model` to a new model gets a new
    capture, not the old model trained on."""
    target = getattr(fn, "__func__", fn)
    found = []
    for cell in getattr(target, "__closure__", None) or ():
        try:
            found.append((cell, None, cell.cell_contents))
        except ValueError:  # an empty cell
            pass
    code = getattr(target, "__code__", None)
    if code is not None:
        g = getattr(target, "__globals__", {})
        found.extend((g, name, g[name]) for name in _global_names(code) if name in g)
    return found


def rebound_values(before, after) -> list:
    """The names of `before`'s variables that hold another object in `after`, other
    than Tensors (a Tensor the call rebinds is a state slot, see Names)."""
    now = {(id(where), name): obj for where, name, obj in after}
    changed = []
    for where, name, obj in before:
        new = now.get((id(where), name), obj)
        if new is not obj and not _tensors(new) and not _tensors(obj):
            changed.append(name or getattr(where, "__qualname__", "a closure variable"))
    return changed


def _tensors(value) -> bool:
    return isinstance(value, Tensor) or (isinstance(value, tuple) and bool(value)
                                         and all(isinstance(v, Tensor) for v in value))


def changed_numbers(numbers, advanced) -> list:
    """The keys of `numbers` (see `slots`) whose value a call changed, other than in the
    attributes of the objects in `advanced` (replay callbacks advance those) and modules'
    train / eval modes (a replay switches those)."""
    exempt = {id(getattr(x, "__dict__", None)) for x in advanced}
    return [str(key) for container, key, value in numbers
            if id(container) not in exempt and key != "training" and not unchanged(container, key, value)]


def dict_numbers(bindings) -> list:
    """(dict, key, value) for each number, string, bool or None in a dict the function
    names (`hp = {"lr": ..., "l2": ...}` read inside a step): a replay needs the same
    values, which the capture baked into its kernels as constants."""
    return [(obj, key, value) for _, _, obj in bindings if type(obj) is dict for key, value in obj.items()
            if value is None or isinstance(value, (bool, int, float, str))]


def unchanged(container, key, value) -> bool:
    """Whether `container[key]` still holds `value` (a nan as a nan)."""
    now = _now(container, key)
    return now is value or now == value or (now != now and value != value)


def _now(container, key):
    """`container[key]`, or _MISSING where the key (a dict's, a list's) is gone."""
    try:
        return container[key]
    except (KeyError, IndexError):
        return _MISSING


_MISSING = object()


def rebound(bindings) -> bool:
    """Whether a binding of `bindings` holds another object now."""
    for where, name, obj in bindings:
        if name is None:
            try:
                if where.cell_contents is not obj:
                    return True
            except ValueError:
                return True
        elif where.get(name, where) is not obj:
            return True
    return False


def slots(roots, modules: list = None, limit: int = 200_000, empty: list = None, held: list = None,
          numbers: list = None) -> list:
    """(container, key, value) for every Tensor (or tuple of them) held in a dict, a
    list or an object's attributes reachable from `roots` (modules, optimizers, user
    objects), so that a value the call replaced can be matched with its successor.
    The Modules met on the way are appended to `modules` (their `training` flags
    select a capture), the (container, key) of each None value to `empty` (state
    not made yet, such as a hidden state the function starts from zeros when it is
    None: a replay needs it None still), and (container, key, object) of each module,
    dict, list or object held to `held` (a replay needs the same ones: a submodule
    swapped for another is read from the new one), and (container, key, value) of each
    number, string or bool in a dict or an object's attributes to `numbers`."""
    from ..nn import Module
    found, seen, stack, candidates = [], set(), [(r, 0) for r in roots], []
    while stack and len(seen) < limit:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > 64 or isinstance(obj, (Tensor, str, bytes, int, float, type,
                                                             types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            items = list(obj.items())
        elif isinstance(obj, Names):
            items = obj.items()
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
            if value is None:
                if empty is not None:
                    empty.append((obj, key))
            elif isinstance(value, (bool, int, float, str)):
                if numbers is not None and isinstance(obj, (dict, list)):
                    numbers.append((obj, key, value))
            elif isinstance(value, Tensor) or (isinstance(value, tuple) and value and
                                             all(isinstance(v, Tensor) for v in value)):
                found.append((obj, key, value))
                for t in (value if isinstance(value, tuple) else (value,)):
                    if isinstance(t.grad, Tensor):  # a parameter's gradient
                        found.append((GradOf(t), "grad", t.grad))
            else:
                if held is not None and (isinstance(value, (dict, list)) or (
                        hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType, types.FunctionType,
                                                                                types.MethodType)))
                        or (isinstance(value, tuple) and any(isinstance(v, Module) for v in value))):
                    candidates.append((obj, key, value))
                stack.append((value, depth + 1))
    if held is not None:  # (modules, and what holds state itself: a list of floats a scheduler
        # replaces at every step is no reason to capture again)
        with_state = {id(container) for container, _, _ in found}
        held.extend(entry for entry in candidates if isinstance(entry[2], (Module, tuple)) or id(entry[2]) in with_state
                    or id(getattr(entry[2], "__dict__", None)) in with_state)  # (a tuple: Sequential's layers)
    return found


class GradOf:
    """A Tensor's `.grad` (an attribute slot, not in a `__dict__`) as a container of
    one key, so a gradient is found and set like any other state."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __getitem__(self, key):
        return self.tensor.grad

    def __setitem__(self, key, value) -> None:
        self.tensor.grad = value


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
    """The Tensor in a slot, or None where the slot holds none now (emptied, deleted)."""
    try:
        value = container[key]
        return value if pos is None or value is None else value[pos]
    except (KeyError, IndexError, TypeError):
        return None


def frozen_flags(slots) -> list:
    """(Parameter, requires_grad) for each parameter in `slots`: a replay needs the same
    flags (a layer frozen between calls must stop being trained)."""
    from ..nn import Parameter
    return [(t, t.requires_grad) for _, _, value in slots
            for t in (value if isinstance(value, tuple) else (value,)) if isinstance(t, Parameter)]


def still_held(held) -> bool:
    """Whether every (container, key, object) of `held` (see `slots`) holds that object."""
    for container, key, value in held:
        if _now(container, key) is not value:
            return False
    return True


def filled(empty) -> list:
    """The Tensors now in the slots of `empty` that held None (state the call made)."""
    found = []
    for container, key in empty:
        value = _now(container, key)
        found.extend(t for t in (value if isinstance(value, tuple) else (value,)) if isinstance(t, Tensor))
    return found


def still_empty(empty) -> bool:
    """Whether every (container, key) of `empty` (see `slots`) holds None or nothing."""
    for container, key in empty:
        now = _now(container, key)
        if now is not None and now is not _MISSING:
            return False
    return True


def added(before, after, empty=()) -> bool:
    """Whether `after` (slots) holds state under a key that `before` did not have
    (neither as state nor as None, see `empty`): a new dict entry or list item, such
    as an optimizer's momentum on its first step.  Gradients aside (a call makes
    those anew each time)."""
    had = {(id(container), key) for container, key, _ in before} | {(id(c), key) for c, key in empty}
    return any((id(container), key) not in had for container, key, _ in after if not isinstance(container, GradOf))


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

