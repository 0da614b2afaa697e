"""The Python state a captured step can read (its guards) and what the captured call
changed in it (its effects).

A World is built from roots: the function's bound `self`, closure cells and
`functools.partial` contents, the arguments that are objects, and the globals named
by each piece of user code the captured call ran (added while it runs, before that
code runs: tracing.py).  Every dict (objects' `__dict__` included), list, set, closure
cell and named global reachable from them is snapshot:

- **guards**: Python values (numbers, strings, None, flags, members' identities,
  lengths) must be as they were for a replay, compared in C (`snapshot == box`
  compares members by identity first, containers and arrays by identity only); a Tensor slot needs a Tensor of the same
  layout (its data is state, read at each replay); `requires_grad` and whether
  `.grad` is None must be as they were;
- **effects**: after the call, the difference between each box and its snapshot;
  a replay writes it again (with that replay's tensors).

Attributes read at each replay (an optimizer's lr) or advanced by replay callbacks
(Adam's step count) are `exempt`: neither guards nor effects.
"""
from __future__ import annotations

import collections
import functools
import random
import types
from operator import attrgetter, eq

import numpy as np

from ..autograd import Tensor
from .code import user_namespace
from .places import (ALL, MISSING, SIMPLE, Attrs, Cell, GradOf, Slot, path_of, rng_state, same_layout,
                     pin, pinned_copy, same_rng_state, short, unpin)

#: objects the walk does not enter (their identity is guarded where they are held)
OPAQUE = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, np.dtype)
#: numpy arrays up to this size held by state are guarded by their contents
ARRAY_GUARD_SIZE = 1 << 16
#: objects a world may hold; past it the capture gives up (runs plainly, saying so)
LIMIT = 100_000

_grad, _flag = attrgetter("grad"), attrgetter("requires_grad")
class World:
    """Snapshots of the containers reachable from some roots (see the module docstring)."""

    def __init__(self):
        self.boxes = []        # [container, snapshot, path]: dicts, lists, sets (compared with ==) ...
        self._box_list, self._snapshot_list = [], []  # ... as two lists (holds() compares them in C)
        self.cells, self.cell_values = [], []        # closure cells and their contents then
        self.globals = []      # [globals dict, names, values then, path]
        self.slots = []        # Slot of every Tensor held
        self.holders = []      # the distinct Tensors held (their requires_grad are guards) ...
        self.flags, self.grads_before = [], []  # ... their flags and .grad when found
        self.grad_holders, self.grads = [], []   # those whose .grad is a guard, and the .grad
        self.arrays = []       # (small numpy array, copy, path)
        self.rngs = []         # (numpy Generator or RandomState, state, path)
        self.exempt = set()    # (id(container), key): no guard, no effect
        self.advance = []      # (box entry, key) of exempt attributes replay callbacks change
        self.namespaces = []   # the user's classes and modules met (see `namespace_attributes`)
        self.pending = []      # Tensors found with pending data (see `settle`)
        self.initial = {}      # id(Tensor held) -> its _cached_data when found
        self.moved = False     # changed() let a slot hold another Tensor: aliases need a look
        self.too_big = False
        self._seen = set()
        self._holder_ids = set()

    # ---- building -------------------------------------------------------------------------
    def add(self, value, path: str) -> None:
        """Walk `value` and everything it holds (once each)."""
        stack = [(value, path)]
        while stack:
            value, path = stack.pop()
            if isinstance(value, SIMPLE) or id(value) in self._seen:
                continue
            if isinstance(value, OPAQUE):
                if isinstance(value, (type, types.ModuleType)) and user_namespace(value):
                    self._seen.add(id(value))
                    self.namespaces.append(value)  # (their attributes the step reads: see `namespace_attributes`)
                continue
            if isinstance(value, Tensor):
                self._hold(value)
                continue
            if len(self._seen) > LIMIT:
                self.too_big = True
                return
            self._seen.add(id(value))
            if isinstance(value, (dict, list, collections.deque)):
                self._box(value, pinned_copy(value), path)
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for key, v in items:
                    self._item(value, key, v, path_of(path, key), stack)
            elif isinstance(value, (set, frozenset)):
                if isinstance(value, set):
                    self._box(value, set(value), path)
            elif isinstance(value, tuple):
                stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
            elif isinstance(value, np.ndarray):
                if value.size <= ARRAY_GUARD_SIZE:
                    self.arrays.append((value, value.copy(), path))
            elif isinstance(value, (np.random.Generator, np.random.RandomState, random.Random)):
                self.rngs.append((value, rng_state(value), path))
            elif isinstance(value, functools.partial):
                stack.extend([(value.func, path + ".func"), (value.args, path + ".args"),
                              (value.keywords, path + ".keywords")])
            elif isinstance(value, types.MethodType):
                stack.extend([(value.__self__, path), (value.__func__, path)])
            elif isinstance(value, types.FunctionType):
                self.add_function(value, path, stack)
            elif getattr(type(value), "holds_no_state", False):
                continue
            else:
                if hasattr(value, "__dict__"):
                    stack.append((value.__dict__, path))
                slots = [n for k in type(value).__mro__ for n in getattr(k, "__slots__", ()) if n != "__dict__"
                         and n != "__weakref__"] if user_namespace(type(value)) else ()
                if slots:
                    self.add_globals(Attrs(value, raw=False), slots, path)
                stack.append((type(value), path + ".__class__"))

    def _box(self, box, snapshot, path) -> None:
        self.boxes.append([box, snapshot, path])
        self._box_list.append(box)
        self._snapshot_list.append(snapshot)

    def _item(self, container, key, value, path, stack) -> None:
        if isinstance(value, Tensor):
            self.slots.append(Slot(container, key, None, path, value))
            self._hold(value)
        elif type(value) is tuple and _has_tensor(value):
            for pos, t in _tensors_in_tuple(value, ()):
                self.slots.append(Slot(container, key, pos, path + "".join(f"[{i}]" for i in pos), t))
                self._hold(t)
            stack.append((value, path))
        else:
            stack.append((value, path))

    def _hold(self, tensor) -> None:
        if id(tensor) not in self._holder_ids:
            self._holder_ids.add(id(tensor))
            self.holders.append(tensor)
            self.grads_before.append(tensor.grad)
            self.grad_holders.append(tensor)
            self.grads.append(tensor.grad)
            self.flags.append(tensor.requires_grad)
            self._found(tensor)
            if isinstance(tensor.grad, Tensor):  # (a slot of state, read where gradients are made outside)
                self.slots.append(Slot(GradOf(tensor), "grad", None, "<.grad>", tensor.grad))
                self._found(tensor.grad)

    def _found(self, tensor) -> None:
        """Note a Tensor's data as it is when found; pending data waits in `pending` (see
        `settle`)."""
        data = tensor._cached_data
        if getattr(data, "is_lazy", False) and data.realized is not None:
            data = tensor._cached_data = data.realized  # (computed already: its buffer)
        self.initial[id(tensor)] = data
        if isinstance(data, tuple) or getattr(data, "is_lazy", False):
            self.pending.append(tensor)

    def settle(self, realize, made=()) -> None:
        """Compute the state found pending (what earlier calls left to compute), so the
        capture reads it as buffers instead of recording its graph; Tensors whose ids are
        in `made` were made by the call being captured and stay as they are."""
        waiting = [t for t in self.pending if id(t) not in made]
        self.pending = [t for t in self.pending if id(t) in made]
        if waiting:
            realize(waiting)
            for t in waiting:
                self.initial[id(t)] = t._cached_data

    def add_function(self, fn, path: str, stack=None) -> None:
        """A function's closure cells (guards: the objects they hold) and defaults."""
        names = fn.__code__.co_freevars
        for name, cell in zip(names, fn.__closure__ or ()):
            self.add_cell(cell, path_of(path, name))
        stack = stack if stack is not None else []
        if fn.__defaults__:
            stack.append((fn.__defaults__, path + ".__defaults__"))
        if fn.__kwdefaults__:
            stack.append((fn.__kwdefaults__, path + ".__kwdefaults__"))
        while stack:
            self.add(*stack.pop())

    def add_cell(self, cell, path: str) -> None:
        if any(c is cell for c in self.cells):
            return
        try:
            value = cell.cell_contents
        except ValueError:
            value = MISSING
        self.cells.append(cell)
        self.cell_values.append(pin(value))
        if value is not MISSING:
            self._item(Cell(cell), 0, value, path, stack := [])
            while stack:
                self.add(*stack.pop())

    def namespace_attributes(self, names) -> None:
        """The attributes `names` (read by the step's code) of the user's classes and
        modules met so far (class attributes read through `self`, `config.SCALE`)."""
        for value in self.namespaces:
            for klass in (value.__mro__ if isinstance(value, type) else (value,)):
                if klass is object or not user_namespace(klass):
                    continue
                found = [n for n in names if n in klass.__dict__ and not isinstance(
                    klass.__dict__[n], (types.FunctionType, staticmethod, classmethod, property))]
                if found:
                    self.add_globals(Attrs(klass), found, getattr(klass, "__qualname__", getattr(klass, "__name__", "")))

    def add_globals(self, namespace, names, path: str = "") -> None:
        """The names `names` of a namespace (a module's globals, an Attrs): bindings guarded
        by identity, their values walked."""
        same = [g for g in self.globals if g[0] is namespace or (
            isinstance(namespace, Attrs) and isinstance(g[0], Attrs) and g[0].obj is namespace.obj)]
        names = tuple(n for n in names if n in namespace and not any(n in g[1] for g in same))
        if not names:
            return
        self.globals.append([namespace, names, tuple(pin(namespace[n]) for n in names), path])
        for name in names:
            self._item(namespace, name, namespace[name], path_of(path, name), stack := [])
            while stack:
                self.add(*stack.pop())

    # ---- guards ---------------------------------------------------------------------------
    def holds(self) -> bool:
        """Whether every guard holds now; compared in C, Tensors by identity.  When this
        says no, `changed()` tells whether a difference matters (and refreshes the
        snapshots when none does)."""
        try:  # (in C: each box against its snapshot, members by identity first)
            if not all(map(eq, self._snapshot_list, self._box_list)):  # (snapshot first: its Same compare)
                return False
        except Exception:  # (a member whose == raises: a numpy array replaced by another)
            return False
        if self.cells and self.cell_values != _contents(self.cells):
            return False
        for namespace, names, values, _ in self.globals:
            try:
                if values != tuple(map(namespace.__getitem__, names)):
                    return False
            except Exception:  # (a KeyError, or a member's == raising)
                return False
        if list(map(_grad, self.grad_holders)) != self.grads or list(map(_flag, self.holders)) != self.flags:
            return False
        for array, copy, _ in self.arrays:
            if not np.array_equal(array, copy):
                return False
        return True

    def changed(self):
        """None when every difference from the snapshots is one a replay follows (a Tensor
        slot holding another Tensor of the same layout, an exempt attribute), after
        refreshing those snapshots; else the first difference: (where, description),
        where as `where_of` gives it."""
        for entry in self.boxes:
            box, snapshot, path = entry
            if _equal(box, snapshot):
                continue
            if not isinstance(box, dict) or len(box) != len(snapshot):
                if not (isinstance(box, list) and len(box) == len(snapshot)
                        and all(same_layout(unpin(a), b) for a, b in zip(snapshot, box))):
                    return (id(box), ALL), f"{path or 'a container'} (was {short(list(map(unpin, snapshot)))}, " \
                                           f"now {short(box)})"
            else:
                for key, before in snapshot.items():
                    now, before = box.get(key, MISSING), unpin(before)
                    if (id(box), key) not in self.exempt and not same_layout(before, now):
                        return (id(box), key), f"{path_of(path, key)} (was {short(before)}, now {short(now)})"
            _refill(entry[1], box)
            self.moved = True
        now = _contents(self.cells) if self.cells else []
        for cell, before, value in zip(self.cells, self.cell_values, now):
            if not same_layout(unpin(before), value):
                return (id(cell), 0), f"a closure variable (was {short(before)}, now {short(value)})"
        self.cell_values = [pin(v) for v in now]
        for entry in self.globals:
            namespace, names, values, path = entry
            current = tuple(namespace.get(n, MISSING) for n in names)
            for name, before, value in zip(names, values, current):
                if not same_layout(unpin(before), value):
                    return (id(namespace), name), f"the global {path_of(path, name)} (was {short(before)}, " \
                                                  f"now {short(value)})"
            entry[2] = tuple(map(pin, current))
        for i, t in enumerate(self.holders):
            if t.requires_grad != self.flags[i]:
                return (id(t), "requires_grad"), f"requires_grad of a {t.shape} tensor (was {self.flags[i]})"
        for i, t in enumerate(self.grad_holders):
            if (t.grad is None) != (self.grads[i] is None) or not same_layout(t.grad, self.grads[i]):
                return (id(t), "grad"), f"the .grad of a {t.shape} tensor (was {short(self.grads[i])}, " \
                                        f"now {short(t.grad)})"
            self.grads[i] = t.grad
        for array, copy, path in self.arrays:
            if not np.array_equal(array, copy):
                return (id(array), ALL), f"the numpy array {path} (its values)"
        self.moved = True  # (what replays remembered of the last one is to be looked up again)
        return None

    # ---- effects --------------------------------------------------------------------------
    def diff(self):
        """[(container, key, value now)] for every guarded value that differs from its
        snapshot now (after the call), exempt ones aside; a list that changed length is
        one entry with key ALL.  Closure cells come as (Cell, 0, value)."""
        found = []
        for box, snapshot, _ in self.boxes:
            if _equal(box, snapshot):
                continue
            if isinstance(box, dict):
                for key in set(snapshot) | set(box):
                    now, before = box.get(key, MISSING), unpin(snapshot.get(key, MISSING))
                    if now is not before and (id(box), key) not in self.exempt:
                        found.append((box, key, now))
            elif isinstance(box, list) and len(box) == len(snapshot):
                found.extend((box, i, now) for i, (now, before) in enumerate(zip(box, snapshot))
                             if now is not unpin(before))
            else:
                found.append((box, ALL, box.copy()))
        for cell, before in zip(self.cells, self.cell_values):
            now = _contents([cell])[0]
            if now is not unpin(before):
                found.append((Cell(cell), 0, now))
        for namespace, names, values, _ in self.globals:
            for name, before in zip(names, values):
                now = namespace.get(name, MISSING)
                if now is not unpin(before):
                    found.append((namespace, name, now))
        for t, before in zip(self.holders, self.grads_before):
            if t.grad is not before:
                found.append((GradOf(t), "grad", t.grad))
        return found

    def path(self, container, key) -> str:
        """A readable name for `container[key]` (for warnings and verify's reports)."""
        if isinstance(container, GradOf):
            for slot in self.slots:
                if slot.pos is None and slot.get() is container.tensor:
                    return slot.path + ".grad"
            return "the .grad of a tensor"
        if isinstance(container, Cell):
            return "a closure variable"
        for box, _, path in self.boxes:
            if box is container:
                return path_of(path, key) if key is not ALL else path
        for namespace, _, _, path in self.globals:
            if namespace is container:
                return path_of(path, key)
        return repr(key)

    def refresher(self, container, key, after):
        """How a replay that writes `container[key]` keeps the snapshot following, so the
        next call's check passes in C: a function of the value written; None when what
        the capture wrote (`after`) is not like what it started from (None before, a
        Tensor after: the guard keeps its None)."""
        if isinstance(container, GradOf):
            for i, t in enumerate(self.grad_holders):
                if t is container.tensor and same_layout(self.grads[i], after):
                    return lambda value: self.grads.__setitem__(i, value)
            return None
        if isinstance(container, Cell):
            for i, cell in enumerate(self.cells):
                if cell is container.cell and same_layout(unpin(self.cell_values[i]), after):
                    return lambda value: self.cell_values.__setitem__(i, pin(value))
            return None
        for entry in self.boxes:
            if entry[0] is container:
                if key is not ALL and same_layout(unpin(entry[1].get(key, MISSING) if isinstance(entry[1], dict)
                                                        else entry[1][key]), after):
                    return lambda value: entry[1].__setitem__(key, pin(value))
                return None
        for entry in self.globals:
            if entry[0] is container and key in entry[1] and same_layout(unpin(entry[2][entry[1].index(key)]), after):
                i = entry[1].index(key)
                return lambda value: entry.__setitem__(2, entry[2][:i] + (pin(value),) + entry[2][i + 1:])
        return None

    def unguard_grads(self, written, read) -> None:
        """The `.grad` of the Tensors whose ids are in `written` is no guard when the call
        set it (reset_grad, backward) and never read the data it had before (ids of the
        Tensors read: `read`)."""
        before = {id(t): g for t, g in zip(self.holders, self.grads_before)}
        written = {i for i in written if before.get(i) is None or id(before[i]) not in read}
        kept = [(t, g) for t, g in zip(self.grad_holders, self.grads) if id(t) not in written]
        self.grad_holders, self.grads = [t for t, _ in kept], [g for _, g in kept]

    def exempt_keys(self, keys, advanced) -> None:
        """Make `keys` ((id(container), key) pairs) no guards and no effects; `advanced`
        among them are changed by replay callbacks (Adam's t): their snapshots follow."""
        self.exempt |= keys
        self.advance = [(entry, key) for entry in self.boxes if isinstance(entry[0], dict)
                        for i, key in advanced if i == id(entry[0])]

    def advanced(self) -> None:
        """After a replay: the snapshots of what its callbacks advanced follow, so the
        next call's check passes in C."""
        for entry, key in self.advance:
            entry[1][key] = pin(entry[0].get(key, MISSING))

    def rng_changes(self) -> list:
        """The paths of the random generators held by state whose state changed."""
        return [path for rng, state, path in self.rngs if not same_rng_state(rng_state(rng), state)]


def _contents(cells) -> list:
    out = []
    for cell in cells:
        try:
            out.append(cell.cell_contents)
        except ValueError:
            out.append(MISSING)
    return out


def _refill(snapshot, box) -> None:
    """`snapshot` made equal to `box` in place (holds() keeps the snapshot object)."""
    snapshot.clear()
    fresh = pinned_copy(box)
    snapshot.update(fresh) if isinstance(snapshot, (dict, set)) else snapshot.extend(fresh)


def _equal(box, snapshot) -> bool:
    """`snapshot == box`: members by identity first (in C), then by value, except for
    the pinned ones (places.Same: identity only); a `==` that raises counts as changed."""
    try:
        return snapshot == box
    except Exception:
        return False


def _has_tensor(value) -> bool:
    return any(isinstance(v, Tensor) or (type(v) is tuple and _has_tensor(v)) for v in value)


def _tensors_in_tuple(value, pos):
    for i, v in enumerate(value):
        if isinstance(v, Tensor):
            yield pos + (i,), v
        elif type(v) is tuple:
            yield from _tensors_in_tuple(v, pos + (i,))


