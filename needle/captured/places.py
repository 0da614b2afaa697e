"""Where a value lives — `container[key]` for every kind of place: a dict or list, an
object's attributes (Attrs), a closure cell, a Tensor's `.grad`, a position inside a
tuple (Slot) — and how two values a capture saw are compared and named."""
from __future__ import annotations

import collections
import math
import mmap
import random
import types
import weakref

import numpy as np

from ..autograd import Tensor

MISSING = object()
#: values compared by value (what a guard holds); np.generic: numpy scalars
SIMPLE = (bool, int, float, complex, str, bytes, type(None), np.generic)

class Attrs:
    """An object's attributes as a namespace a guard reads and an effect writes: a class's
    or a module's (their own `__dict__`), or the `__slots__` of an object (getattr)."""

    __slots__ = ("obj", "raw")

    def __init__(self, obj, raw: bool = True):
        self.obj, self.raw = obj, raw

    def __getitem__(self, name):
        try:
            return self.obj.__dict__[name] if self.raw else getattr(self.obj, name)
        except AttributeError:
            raise KeyError(name) from None

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name) -> bool:
        return self.get(name, MISSING) is not MISSING

    def __setitem__(self, name, value) -> None:
        setattr(self.obj, name, value)

    def __delitem__(self, name) -> None:
        delattr(self.obj, name)


class Read:
    """A value read through a function — what a weak reference refers to, a ContextVar's
    value, a ctypes number's — as a namespace of one key, "value" (a
    guard; never written)."""

    __slots__ = ("read",)

    def __init__(self, read):
        self.read = read

    def __getitem__(self, name):
        return self.read()

    def get(self, name, default=None):
        return self.read()

    def __contains__(self, name) -> bool:
        return name == "value"


def reader(obj):
    """The function a Read of `obj` calls (no strong reference to an object held weakly)."""
    if isinstance(obj, weakref.ref):
        return obj
    if hasattr(obj, "get") and hasattr(obj, "set"):  # (a ContextVar)
        return lambda: obj.get(MISSING)
    if isinstance(obj, (memoryview, mmap.mmap)):  # (a copy of its bytes: a view would keep it from closing)
        return lambda: _bytes_now(obj)
    return lambda: obj.value


def _bytes_now(buffer):
    try:
        return buffer[:].tobytes() if isinstance(buffer, memoryview) else buffer[:]
    except ValueError:  # (released or closed since)
        return MISSING


def bound_object(value):
    """The object a builtin method or method-wrapper is bound to (`CFG.get`'s dict), or
    None for any other value (a module's function, an unbound builtin)."""
    if isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and \
            not isinstance(value.__self__, (types.ModuleType, type(None))):
        return value.__self__
    return None


def class_of(obj):
    """A function giving `obj` (so its class now), holding it weakly where it can."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class GradOf:
    """A Tensor's `.grad` as a container of one key, so a gradient is found and set
    like any other slot."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __getitem__(self, key):
        return self.tensor.grad

    def __setitem__(self, key, value) -> None:
        self.tensor.grad = value


class Slot:
    """Where a Tensor lives: `container[key]`, at `pos` inside a tuple there (or None);
    `initial` is the Tensor it held when the world found it."""

    __slots__ = ("container", "key", "pos", "path", "initial")

    def __init__(self, container, key, pos, path, initial):
        self.container, self.key, self.pos, self.path, self.initial = container, key, pos, path, initial

    def get(self):
        """The Tensor there now, or None (the slot emptied, not a Tensor)."""
        try:
            value = self.container[self.key]
            for i in self.pos or ():
                value = value[i]
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
        return value if isinstance(value, Tensor) else None


def path_of(parent: str, key) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{key!r}]"


def same_layout(a, b) -> bool:
    """Two slot values a replay may bind alike: the same object, or Tensors (tuples of
    them) of one shape, dtype, device and requires_grad."""
    if a is b:
        return True
    if type(a) is float and type(b) is float and a == 0 == b:
        return math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        x, y = a._cached_data, b._cached_data
        return (a.requires_grad == b.requires_grad and x is not None and y is not None and x.shape == y.shape
                and x.dtype == y.dtype and getattr(x, "device", None) == getattr(y, "device", None))
    if type(a) is tuple and type(b) is tuple and len(a) == len(b):
        return all(same_layout(u, v) for u, v in zip(a, b))
    if type(pin(a)) is Same or type(a) is not type(b):
        return False  # (another container, array or value-compared object: not what was walked)
    return bool(a == b)  # (numbers, strings: by value)



class Same:
    """A snapshot's stand-in for a mutable or value-compared member (a dict, a list, an
    array, a dataclass): equal only to that very object, so `box == snapshot` in C sees a
    container replaced by an equal new one (whose later changes the world would miss)."""

    __slots__ = ("obj",)
    __array_ufunc__ = None  # (numpy compares with it through its __eq__)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return other is self.obj

    def __ne__(self, other):
        return other is not self.obj

    __hash__ = None


def pin(value):
    """`value` as a snapshot holds it: itself when `==` means identity or a value that
    cannot change (numbers, strings, tuples, Tensors, modules), else a Same; a float zero
    as a SignedZero (-0.0 == 0.0, but code may branch on the sign)."""
    kind = type(value)
    if kind is float and value == 0:
        return SignedZero(value)
    if kind.__eq__ is object.__eq__ or isinstance(value, SIMPLE) or kind is tuple or kind is frozenset:
        return value
    return Same(value)


class SignedZero(Same):
    """A snapshot's stand-in for a float zero: equal to a zero of the same sign."""

    __slots__ = ()

    def __eq__(self, other):
        return type(other) is float and other == 0 and math.copysign(1.0, other) == math.copysign(1.0, self.obj)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None


def unpin(value):
    return value.obj if isinstance(value, Same) else value


def pinned_copy(box):
    """A snapshot of a dict, list, deque or set, its members pinned."""
    if isinstance(box, dict):
        return {k: pin(v) for k, v in box.items()}
    if isinstance(box, (set, frozenset)):
        return set(box)
    copy = [pin(v) for v in box]
    return collections.deque(copy, box.maxlen) if isinstance(box, collections.deque) else copy


ALL = object()  # a diff's key for a list that changed length: its whole contents


def where_of(container, key) -> tuple:
    """A comparable name of `container[key]` (what `changed()` reports)."""
    if isinstance(container, GradOf):
        return id(container.tensor), "grad"
    if isinstance(container, Cell):
        return id(container.cell), 0
    if isinstance(container, Attrs):
        return id(container.obj), key
    return id(container), key


class Cell:
    """A closure cell as a container of one key (0)."""

    __slots__ = ("cell",)

    def __init__(self, cell):
        self.cell = cell

    def __getitem__(self, key):
        return self.cell.cell_contents

    def __setitem__(self, key, value) -> None:
        self.cell.cell_contents = value



def rng_state(rng):
    if isinstance(rng, random.Random):
        return rng.getstate()
    return rng.bit_generator.state if isinstance(rng, np.random.Generator) else rng.get_state()


def _same_state(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def same_rng_state(a, b) -> bool:
    """Whether two states of numpy's RNG (get_state()) or Python's random are one."""
    return _same_state(a, b)


def short(value) -> str:
    if value is MISSING:
        return "nothing"
    if isinstance(value, Tensor):
        return f"a {value.shape} tensor"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
