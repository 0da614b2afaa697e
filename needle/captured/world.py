"""The Python state a captured step can read (its guards) and what the captured call
changed in it (its effects).

A World is built from roots: the function's bound `self`, closure cells and
`functools.partial` contents, the arguments that are objects, and the globals named
by each piece of user code the captured call ran (added while it runs, before that
code runs: tracing.py).  Every dict (objects' `__dict__` included), list, set, closure
cell and named global reachable from them is snapshot:

- **guards** (checked by world_guards.py): Python values (numbers, strings, None,
  flags, members' identities, lengths, the order of a dict's keys) must be as they
  were for a replay, compared in C (`snapshot == box` compares members by identity
  first, containers and arrays by identity only); a Tensor slot (in a container, an
  object's or a class's attributes) needs a Tensor of the same layout (its data is
  state, read at each replay); `requires_grad` and whether `.grad` is None must be
  as they were;
- **effects** (world_effects.py): after the call, the difference between each box
  and its snapshot; a replay writes it again (with that replay's tensors).

Attributes read at each replay (an optimizer's lr) or advanced by replay callbacks
(Adam's step count) are `exempt`: neither guards nor effects.
"""
from __future__ import annotations

import array
import collections
import contextvars
import ctypes
import decimal
import functools
import io
import mmap
import operator
import random
import threading
import types
import weakref
import zlib
from operator import attrgetter

import numpy as np

from ..autograd import Tensor
from ..engine.realize import pending_sums
from .code import user_namespace
from .places import (MISSING, SIMPLE, Attrs, Cell, GradOf, Read, Slot, bound_object, class_of, path_of, reader,
                     rng_state, pin, pinned_copy, same_rng_state)

#: objects the walk does not enter (their identity is guarded where they are held)
OPAQUE = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, np.dtype)
#: numpy arrays up to this size held by state are guarded by their contents
ARRAY_GUARD_SIZE = 1 << 16
#: objects a world may hold; past it the capture gives up (runs plainly, saying so)
LIMIT = 100_000
#: bytes of numpy arrays a world may guard by their contents (a copy each, compared at
#: every call); past it the capture gives up too (a dataset the step's objects hold)
ARRAY_GUARD_BYTES = 32 << 20
#: bytes of larger arrays guarded by a checksum of their bytes (at every call); past it an
#: array is not guarded, and a method of it called by the step is a host effect
CHECKSUM_GUARD_BYTES = 1 << 20

_grad, _flag = attrgetter("grad"), attrgetter("requires_grad")
#: values that hold nothing else: skipped by the walk (compared by value where they are)
_PLAIN = frozenset({bool, int, float, complex, str, bytes, type(None)})
#: builtin types whose subclasses' instances may carry attributes of their own
_BUILTIN_HOLDERS = (int, float, complex, str, bytes, dict, list, tuple, set, frozenset, collections.deque, np.ndarray)
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))

#: what a class holds that is code, walked where the call runs it (tracing.py), not as state
_CODE = (types.FunctionType, classmethod, staticmethod, property, type, types.MemberDescriptorType,
         types.GetSetDescriptorType)


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
        self.namespaces = []   # the modules met (see `namespace_attributes`)
        self.host_arrays = []  # the numpy arrays met (a Tensor made from one reads it at each replay)
        self.attribute_names = set()  # attribute names the objects met read (an operator.attrgetter)
        self._classes = set()  # ids of the classes guarded ...
        self._library_classes = []
        self._class_refs, self._class_then, self._class_paths = [], [], []  # (each object's class: a guard)
        self._class_of = {}    # ... and id(its mapping proxy, a box) -> the class
        self.pending = []      # (Tensor, path) found with pending data (see `settle`)
        self.computed_first = []  # (Tensor, path) of those that sum, computed before the call
        self.initial = {}      # id(Tensor held) -> its _cached_data when found
        self.moved = False     # changed() let a slot hold another Tensor: aliases need a look
        self.unguardable = ""  # why the world cannot be guarded (too big, an iterator), if so
        self.big_arrays = []   # (array, checksum, path): arrays too big to copy, guarded by a checksum
        self.unguarded_arrays = {}  # id -> array past CHECKSUM_GUARD_BYTES
        self.thread = None     # the capturing thread, where a threading.local was met (a guard)
        self._decimal_guarded = False
        self.ordered, self.orders, self.order_paths = [], [], []  # dicts of several keys, their keys' order
        self._array_bytes = self._checksum_bytes = 0
        self._seen = set()
        self._walked = []      # the objects met
        self._locals = set()   # ids of those met through a call's own variables (see `add_local`)
        self._holder_ids = set()

    # ---- building -------------------------------------------------------------------------
    def add(self, value, path: str) -> None:
        """Walk `value` and everything it holds (once each)."""
        stack = [(value, path)]
        while stack:
            value, path = stack.pop()
            if type(value) in _PLAIN or id(value) in self._seen:
                continue
            if isinstance(value, SIMPLE) and not _carries_state(value):
                continue
            if isinstance(value, Tensor):
                self._hold(value, path, stack)
                continue
            if len(self._seen) > LIMIT:
                self.unguardable = "it reaches too many Python objects to guard"
                return
            self._seen.add(id(value))
            self._walked.append(value)  # (held until `built`: an id stays its object's)
            if type(value) not in _BUILTIN_HOLDERS and isinstance(value, _BUILTIN_HOLDERS) \
                    and not isinstance(value, np.memmap):  # (its mmap is its data: guarded as an array's)
                # (a subclass of a number, a string, a container or an array: `class Config(dict)`,
                # an IntEnum member: its own attributes and its class's, besides its value or items)
                own = _own_dict(value)
                if own:
                    stack.append((own, path))
                stack.append((type(value), path + ".__class__"))
            if isinstance(value, SIMPLE):
                if isinstance(value, np.void):  # (a structured array's record: a view of its memory)
                    self.add_globals(Read(value.tobytes), ("value",), path)
                continue
            if (value is decimal or value is decimal.Decimal) and not self._decimal_guarded:
                # (Decimal arithmetic reads this thread's context, C state: its settings are a guard)
                self._decimal_guarded = True
                self.add_globals(Read(_decimal_context), ("value",), "decimal.getcontext()")
            if isinstance(value, (dict, list, collections.deque)):
                self._box(value, pinned_copy(value), path)
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for key, v in items:
                    self._item(value, key, v, path_of(path, key), stack)
                    if not isinstance(key, SIMPLE) and isinstance(value, dict):  # (`{layer: mult}`: its key)
                        stack.append((key, f"{path}{{key}}"))
            elif isinstance(value, tuple):
                stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
            elif isinstance(value, type):  # (a class: its methods and attributes, for every class it inherits)
                for klass in value.__mro__[:-1]:
                    if id(klass) not in self._classes:
                        self._classes.add(id(klass))
                        if user_namespace(klass):
                            self._class_box(klass)
                        else:  # (needle's own classes: snapshot after the call, whose profiling stamps them)
                            self._library_classes.append(klass)
            elif isinstance(value, types.ModuleType):
                self.namespaces.append(value)  # (the attributes its users read: see `namespace_attributes`)
            elif bound_object(value) is not None:
                stack.append((value.__self__, path))  # (`get = CFG.get`: what it reads is the dict's)
            elif isinstance(value, OPAQUE):
                continue
            elif isinstance(value, (set, frozenset, bytearray, array.array, types.MappingProxyType)):
                if not isinstance(value, frozenset):
                    self._box(value, copy_box(value), path)
                if isinstance(value, (set, frozenset)):  # (its members: a hook object's attributes)
                    stack.extend((v, f"{path}{{member}}") for v in value if not isinstance(v, SIMPLE))
            elif isinstance(value, np.ndarray):
                if value.dtype == object:  # (its members: by identity, and what they hold: `table[0]["scale"]`)
                    if value.size > ARRAY_GUARD_SIZE:
                        self.unguardable = f"it reaches a numpy array of {value.size} objects at {path}"
                        return
                    self.add_globals(Read(functools.partial(_member_ids, value)), ("value",), path)
                    stack.extend((v, f"{path}.flat[{i}]") for i, v in enumerate(value.flat))
                elif value.size <= ARRAY_GUARD_SIZE:
                    self._array_bytes += value.nbytes
                    if self._array_bytes > ARRAY_GUARD_BYTES:
                        self.unguardable = (f"it reaches more than {ARRAY_GUARD_BYTES >> 20} MB of numpy arrays to "
                                            f"guard (at {path}; keep a dataset out of the objects the step reads)")
                        return
                    self.arrays.append((value, value.copy(), path))
                else:
                    self._checksum_bytes += value.nbytes
                    if self._checksum_bytes <= CHECKSUM_GUARD_BYTES:
                        self.big_arrays.append((value, _fingerprint(value), path))
                    else:
                        self.unguarded_arrays[id(value)] = value
                self.host_arrays.append(value)
            elif isinstance(value, (np.random.Generator, np.random.RandomState, random.Random)):
                # (the global ones are checked apart; a SystemRandom has no state: its draws read
                # os.urandom, a host effect the tracer notes)
                if value is not np.random.mtrand._rand and value is not random._inst \
                        and not isinstance(value, random.SystemRandom):
                    self.rngs.append((value, rng_state(value), path))
            elif isinstance(value, functools.partial):
                stack.extend([(value.func, path + ".func"), (value.args, path + ".args"),
                              (value.keywords, path + ".keywords")])
            elif isinstance(value, types.MethodType):
                stack.extend([(value.__self__, path), (value.__func__, path)])
            elif isinstance(value, types.FunctionType):
                self.add_function(value, path, stack)
            elif isinstance(value, operator.attrgetter):  # (names it reads: guarded where they are)
                self.attribute_names |= {n for name in value.__reduce__()[1] for n in name.split(".")}
            elif isinstance(value, ctypes.Array):  # (shared memory, multiprocessing.Array's: its values)
                try:
                    stack.append((np.ctypeslib.as_array(value), path))
                except (TypeError, ValueError, NotImplementedError):  # (not numbers: pointers, structures)
                    stack.append((_bytes_of(value), path))
            elif isinstance(value, (ctypes.Structure, ctypes.Union)):  # (a RawValue's structure: its bytes)
                stack.append((_bytes_of(value), path))
            elif isinstance(value, ctypes._Pointer):
                if value:
                    stack.append((value.contents, path + ".contents"))
            elif isinstance(value, _DICT_VIEWS):  # (`weights.values()`: the dict behind it)
                stack.append((value.mapping, path))
            elif isinstance(value, functools._lru_cache_wrapper):
                # (a hit runs nothing the tracer sees, a host read included: the cache's size
                # is a guard, so cache_clear() makes the next call capture, running it)
                self.add_globals(Read(lambda f=value: f.cache_info().currsize), ("value",), path)
                stack.append((value.__wrapped__, path))
            elif isinstance(value, (memoryview, mmap.mmap)):  # (SharedMemory.buf, a mapped file: its bytes)
                try:
                    nbytes = value.nbytes if isinstance(value, memoryview) else len(value)
                except ValueError:  # (released, or closed: nothing a step can read)
                    continue
                if nbytes > ARRAY_GUARD_SIZE:
                    self.unguardable = f"it reaches {nbytes} bytes of memory at {path}, too many to guard"
                    return
                self.add_globals(Read(reader(value)), ("value",), path)
            elif _is_opaque_iterator(value) or isinstance(value, (types.CoroutineType, types.AsyncGeneratorType)):
                self.unguardable = (f"it reaches an iterator at {path} ({type(value).__name__}), whose position a "
                                    "replay would not advance (draw the items outside the step and pass them as "
                                    "arguments)")
                return
            elif isinstance(value, (weakref.ref, contextvars.ContextVar, ctypes._SimpleCData)):
                self.add_globals(Read(reader(value)), ("value",), path)  # (what it refers to, or holds)
            elif not getattr(type(value), "holds_no_state", False):
                if isinstance(value, threading.local):  # (its values are this thread's: replayed on this one only)
                    self.thread = threading.current_thread()
                own = _own_dict(value)
                if own is not None:
                    stack.append((own, path))
                slots = [n for k in type(value).__mro__ for n in getattr(k, "__slots__", ()) if n != "__dict__"
                         and n != "__weakref__"] if user_namespace(type(value)) else ()
                if slots:
                    self.add_globals(Attrs(value, raw=False), slots, path)
                self._class_refs.append(class_of(value))  # (`obj.__class__ = Other`)
                self._class_then.append(type(value))
                self._class_paths.append(path)
                stack.append((type(value), path + ".__class__"))

    def add_local(self, value, path: str) -> None:
        """`add` for a value the running call may have made (a closure variable of the
        code it enters): not `reached`."""
        start = len(self._walked)
        self.add(value, path)
        self._locals.update(map(id, self._walked[start:]))

    def built(self) -> None:
        """The capture is built: `reached` is asked no more, the objects met need not be held
        (a jitted method's instance must be free to go)."""
        self._walked = []

    def reached(self, value) -> bool:
        """Whether the walk met `value` where it was before the call (the roots, the
        globals of the code the call ran): an object a plain call gives back as it is, not
        one it makes."""
        return id(value) in self._seen and id(value) not in self._locals

    def _class_box(self, klass) -> None:
        proxy = klass.__dict__
        path = getattr(klass, "__qualname__", "a class")
        self._class_of[id(proxy)] = klass
        self._box(proxy, copy_box(proxy), path)
        stack = []
        for key, value in proxy.items():  # (a Tensor in a class attribute: state, where it lives)
            if isinstance(value, Tensor) or type(value) is tuple and _has_tensor(value):
                self._item(Attrs(klass), key, value, path_of(path, key), stack)
            elif not isinstance(value, _CODE) and not key.startswith("__"):  # (an object it holds: `Outer.inner`)
                stack.append((value, path_of(path, key)))
            else:  # (a property or static method that is a builtin bound method reads its object)
                for fn in _functions_of(value):
                    if bound_object(fn) is not None:
                        stack.append((bound_object(fn), path_of(path, key)))
        while stack:
            self.add(*stack.pop())

    def library_classes(self) -> None:
        """Guard the library classes met (a method monkeypatched between calls), as they
        are after the capture call."""
        for klass in self._library_classes:
            self._class_box(klass)
        self._library_classes = []

    def _box(self, box, snapshot, path) -> None:
        self.boxes.append([box, snapshot, path])
        self._box_list.append(box)
        self._snapshot_list.append(snapshot)
        if isinstance(box, (dict, set)) and len(box) > 1:  # (== ignores the order a step may iterate in)
            self.ordered.append(box)
            self.orders.append(tuple(box))
            self.order_paths.append(path)

    def _item(self, container, key, value, path, stack) -> None:
        if isinstance(value, Tensor):
            self.slots.append(Slot(container, key, None, path, value))
            self._hold(value, path, stack)
        elif type(value) is tuple and _has_tensor(value):
            for pos, t in _tensors_in_tuple(value, ()):
                where = path + "".join(f"[{i}]" for i in pos)
                self.slots.append(Slot(container, key, pos, where, t))
                self._hold(t, where, stack)
            stack.append((value, path))
        else:
            stack.append((value, path))

    def _hold(self, tensor, path: str, stack) -> None:
        if id(tensor) not in self._holder_ids:
            self._holder_ids.add(id(tensor))
            # The user's own attributes on a tensor (`p.frozen`, `p.lr_mult`, `w.mask`): a box
            # like any object's dict, made empty where it was not (one set later then shows).
            attrs = object.__getattribute__(tensor, "__dict__")
            self._box(attrs, pinned_copy(attrs), path + ".__dict__")
            for key, v in attrs.items():
                self._item(attrs, key, v, path_of(path, key), stack)
            self.holders.append(tensor)
            self.grads_before.append(tensor.grad)
            self.grad_holders.append(tensor)
            self.grads.append(tensor.grad)
            self.flags.append(tensor.requires_grad)
            self._found(tensor, path)
            if isinstance(tensor.grad, Tensor):  # (a slot of state, read where gradients are made outside)
                self.slots.append(Slot(GradOf(tensor), "grad", None, path + ".grad", tensor.grad))
                self._found(tensor.grad, path + ".grad")

    def _found(self, tensor, path: str) -> None:
        """Note a Tensor's data as it is when found; pending data waits in `pending` (see
        `settle`)."""
        data = tensor._cached_data
        if getattr(data, "is_lazy", False) and data.realized is not None:
            data = tensor._cached_data = data.realized  # (computed already: its buffer)
        self.initial[id(tensor)] = data
        if isinstance(data, tuple) or getattr(data, "is_lazy", False):
            self.pending.append((tensor, path))

    def big_array_changed(self):
        """(array, path) of the first array guarded by its checksum that changed since it
        was found, or None."""
        return next(((a, path) for a, before, path in self.big_arrays if _fingerprint(a) != before), None)

    def settle(self, realize, made=()) -> None:
        """Compute the state found pending (what code outside the call left to compute), so
        the capture reads it as buffers instead of recording its graph; Tensors whose ids
        are in `made` were made by the call being captured and stay as they are.  Those
        that sum (see pending_sums) are noted in `computed_first`."""
        waiting = [(t, path) for t, path in self.pending if id(t) not in made]
        self.pending = [(t, path) for t, path in self.pending if id(t) in made]
        self.computed_first += [(t, path) for t, path in waiting if pending_sums(t)]
        if waiting:
            realize([t for t, _ in waiting])
            for t, _ in waiting:
                self.initial[id(t)] = t._cached_data

    def add_function(self, fn, path: str, stack=None) -> None:
        """A function's code, closure cells (guards: the objects they hold), defaults and
        attributes."""
        names = fn.__code__.co_freevars
        for name, cell in zip(names, fn.__closure__ or ()):
            self.add_cell(cell, path_of(path, name))
        self.add_globals(Attrs(fn, raw=False), ("__code__", "__defaults__", "__kwdefaults__"), path)
        stack = stack if stack is not None else []
        if fn.__dict__:
            stack.append((fn.__dict__, path + ".__dict__"))
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
        if isinstance(value, str) and value.isidentifier():
            self.attribute_names.add(value)  # (a name the step may look up: getattr(module, name))
        if value is not MISSING:
            self._item(Cell(cell), 0, value, path, stack := [])
            while stack:
                self.add(*stack.pop())

    def namespace_attributes(self, names) -> None:
        """The attributes `names` (read by the step's code; None: all of them, for code that
        looks names up at run time) of the modules met so far (`config.SCALE`, `ops.relu`):
        a module rebinding one is a change the step sees."""
        for module in self.namespaces:
            if names is None:  # (a user module's plain values and containers: what a name built at run time reads)
                found = plain_names(module.__dict__) if user_namespace(module) else []
            else:
                found = [n for n in names if n in module.__dict__]
            if found:
                self.add_globals(module.__dict__, found, module.__name__)

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


def contents(cells) -> list:
    out = []
    for cell in cells:
        try:
            out.append(cell.cell_contents)
        except ValueError:
            out.append(MISSING)
    return out


def _own_dict(obj):
    """An object's `__dict__` (a thread-local's: this thread's), without running its
    `__getattr__` (None when it has none)."""
    try:
        own = type(obj).__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return own if isinstance(own, dict) else None


def plain_names(namespace) -> list:
    """The names of `namespace` bound to numbers, strings, None or plain containers: the
    values a name looked up at run time (`globals()["SCALE_" + phase]`) reads."""
    return [n for n, v in namespace.items() if isinstance(v, SIMPLE) or type(v) in (dict, list, tuple)]


def copy_box(box):
    """A snapshot of a list, deque, set, byte buffer, array.array (which has no .copy())
    or mapping proxy."""
    if isinstance(box, types.MappingProxyType):
        return {k: pin(v) for k, v in box.items()}
    return array.array(box.typecode, box) if isinstance(box, array.array) else type(box)(box)


def refill(snapshot, box) -> None:
    """`snapshot` made equal to `box` in place (holds() keeps the snapshot object)."""
    fresh = pinned_copy(box) if isinstance(box, (dict, list, collections.deque)) else copy_box(box)
    if isinstance(snapshot, (dict, set)):
        snapshot.clear()
        snapshot.update(fresh)
    else:
        snapshot[:] = fresh


def equal(box, snapshot) -> bool:
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


def _is_opaque_iterator(value) -> bool:
    """An iterator whose position lives in C (a generator, a list's iterator, itertools',
    zip, map): `for x in it`, islice(it) advance it without a call the tracer sees.  (An
    iterator class written in Python keeps its position in attributes or slots: guarded.)"""
    step = getattr(type(value), "__next__", None)
    return step is not None and not isinstance(step, types.FunctionType) and _own_dict(value) is None \
        and not isinstance(value, io.IOBase)


def _bytes_of(value):
    """A ctypes object's memory as a numpy byte array (its values, guarded like an array's),
    or None where ctypes gives no view of it (a read-only buffer)."""
    try:
        return np.ctypeslib.as_array((ctypes.c_ubyte * ctypes.sizeof(value)).from_buffer(value))
    except (TypeError, ValueError):
        return None


def _fingerprint(array) -> int:
    return zlib.crc32(np.ascontiguousarray(array).view(np.uint8).reshape(-1))


def _carries_state(value) -> bool:
    """A number or string that is more than its value: with attributes of its own (a
    subclass's instance, an enum member) or a structured array's record (a view)."""
    return type(value) not in _PLAIN and (isinstance(value, np.void) or _own_dict(value) is not None)


def _decimal_context() -> str:
    """This thread's decimal settings, as a value a guard compares (a string: a tuple
    read anew would be another object each time)."""
    context = decimal.getcontext()
    return f"prec={context.prec} rounding={context.rounding} Emin={context.Emin} Emax={context.Emax}"


def _functions_of(value) -> tuple:
    """The functions a property, staticmethod or classmethod in a class runs."""
    if isinstance(value, property):
        return value.fget, value.fset, value.fdel
    if isinstance(value, (staticmethod, classmethod)):
        return (value.__func__,)
    return ()


def _member_ids(array) -> bytes:
    """Which objects a numpy object array holds, as a value a guard compares."""
    return np.array([id(x) for x in array.flat], np.int64).tobytes()
