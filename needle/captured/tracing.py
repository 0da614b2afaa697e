"""What the captured call runs, found while it runs (needle.jit's capture call only).

- `Tracer`: a `sys.setprofile` hook.  At the first call of each piece of user code
  (not needle's, the standard library's or an installed package's), the globals it
  names and its closure's values join the World before that code runs, so the world
  holds what the step could read, and the attribute names it reads are noted (an
  optimizer's lr read by the user's own code is a guard, not a value read at each
  replay).  Calls from user code that a replay cannot repeat (print, input, open,
  next(), time.*, a numpy random generator other than the global one) are host
  effects, with their line (the global RNGs are compared before and after instead).
- `TracedArray`: each numpy argument, during the capture call.  Turned into a Tensor
  as it is, as a view, or as a cast of a view, it is an input of every replay; any
  other numpy computation on it (a ufunc, an np.* function, a value read to Python, a
  write into it) is a host computation a replay cannot repeat.
"""
from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig

import numpy as np

from ..engine.capture import user_line

_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) for p in (
    sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))} | {_NEEDLE_DIR}))
_HOST_BUILTINS = {print, input, open, next, breakpoint}
_HOST_MODULES = {"time", "datetime", "secrets", "uuid"}


@functools.lru_cache(maxsize=4096)
def is_user_code(filename: str) -> bool:
    if filename.startswith("<frozen") or filename.startswith("<built"):
        return False
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return not path.startswith(_LIBRARY_DIRS)


@functools.lru_cache(maxsize=1024)
def global_names(code) -> tuple:
    """The globals a code object (and the comprehensions and functions inside it) loads
    or stores; co_names alone also holds attribute names."""
    names = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "STORE_GLOBAL",
                                                                          "DELETE_GLOBAL")]
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names.extend(global_names(const))
    return tuple(dict.fromkeys(names))


@functools.lru_cache(maxsize=1024)
def attribute_names(code) -> frozenset:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_ATTR", "LOAD_METHOD")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= attribute_names(const)
    return frozenset(names)


class Tracer:
    """`with Tracer(world):` around the capture call (see the module docstring)."""

    def __init__(self, world):
        self.world = world
        self.codes = set()
        self.attributes = set()  # attribute names user code reads
        self.effects = []        # (what, user line) a replay could not repeat

    def __enter__(self):
        self.previous = sys.getprofile()
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self.previous)
        return False

    def note(self, what: str, frame=None) -> None:
        self.effects.append((what, user_line(frame or sys._getframe(1))))

    def _event(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            if code not in self.codes:
                self.codes.add(code)
                if is_user_code(code.co_filename) and not _below_the_frontend(frame):
                    self._enter(frame, code)
        elif event == "c_call" and is_user_code(frame.f_code.co_filename):
            owner = getattr(arg, "__self__", None)
            if isinstance(owner, (np.random.Generator, np.random.RandomState)) and owner is not np.random.mtrand._rand:
                self.note(f"a random generator other than numpy's global one ({arg.__qualname__})", frame)
            elif arg in _HOST_BUILTINS or getattr(owner, "__name__", None) in _HOST_MODULES:
                self.note(f"{getattr(arg, '__qualname__', arg)}()", frame)

    def _enter(self, frame, code) -> None:
        where = os.path.basename(code.co_filename)
        self.world.add_globals(frame.f_globals, global_names(code), f"<globals of {where}>")
        self.attributes |= attribute_names(code)
        if code.co_freevars:  # (values only: the cells of a function not reached otherwise)
            values = frame.f_locals
            for name in code.co_freevars:
                if name in values and name != "__class__":
                    self.world.add(values[name], name)


_ENGINE_DIRS = tuple(os.path.join(_NEEDLE_DIR, d) + os.sep for d in ("engine", "compiler", "codegen", "runtime",
                                                                      "backend_ndarray"))


def _below_the_frontend(frame) -> bool:
    """Whether needle's engine called this code (a device driver, say): the machinery
    that runs kernels, not what the step reads."""
    frame = frame.f_back
    while frame is not None:
        if frame.f_code.co_filename.startswith(_ENGINE_DIRS):
            return True
        frame = frame.f_back
    return False


# ---- numpy arguments --------------------------------------------------------------------------
DERIVED = "derived"


class TracedArray(np.ndarray):
    """A numpy argument seen by the capture call (see the module docstring).  `_needle`
    is (tracer, argument number, how): how is None for the argument or a view of it,
    (view, dtype) for a cast of such a view, DERIVED for anything computed from it."""

    _needle = None

    def __array_finalize__(self, obj) -> None:
        tag = getattr(obj, "_needle", None)
        if tag is not None:
            view = tag[2] is None and np.may_share_memory(self, obj)
            self._needle = tag if view else (tag[0], tag[1], DERIVED)

    def _note(self, what: str) -> None:
        tag = self._needle
        if tag is not None:
            tag[0].note(f"{what} of numpy argument {tag[1]}", sys._getframe(2))

    def astype(self, dtype, *args, **kwargs):
        out = super().astype(dtype, *args, **kwargs)
        tag = self._needle
        if isinstance(out, TracedArray) and tag is not None and tag[2] is None:
            out._needle = (tag[0], tag[1], (self, np.dtype(dtype)))
        return out

    def copy(self, order="C"):
        return self.astype(self.dtype, order=order, copy=True)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self._note(f"np.{ufunc.__name__}")
        plain = [x.view(np.ndarray) if isinstance(x, TracedArray) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, TracedArray) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*plain, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func not in _VIEW_FUNCTIONS:
            self._note(f"np.{func.__name__}")
        return super().__array_function__(func, types, args, kwargs)

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if not isinstance(out, np.ndarray):
            self._note("a value read")
        return out

    def __setitem__(self, key, value) -> None:
        self._note("a write")
        super().__setitem__(key, value)

    def __iter__(self):
        if self.ndim == 1:
            self._note("a value read")
        return super().__iter__()

    def _reads(what):
        def method(self, *args, **kwargs):
            self._note(what)
            return getattr(np.ndarray, method.__name__)(self, *args, **kwargs)
        return method

    for _name in ("item", "tolist", "tobytes", "__float__", "__int__", "__bool__", "__index__", "__repr__",
                  "__str__", "__format__"):
        locals()[_name] = _reads("a value read")
        locals()[_name].__name__ = _name
    for _name in ("fill", "sort", "put", "partition", "resize", "itemset", "setfield", "byteswap"):
        locals()[_name] = _reads("a write")
        locals()[_name].__name__ = _name
    del _name, _reads


_VIEW_FUNCTIONS = {np.reshape, np.transpose, np.ravel, np.squeeze, np.expand_dims, np.swapaxes, np.moveaxis,
                   np.shape, np.ndim, np.size, np.atleast_1d, np.atleast_2d, np.broadcast_to}


def traced(array: np.ndarray, tracer: Tracer, number: int) -> TracedArray:
    out = array.view(TracedArray)
    out._needle = (tracer, number, None)
    return out


def view_of(array, root: np.ndarray):
    """(byte offset, shape, strides) of `array` inside `root` (a numpy argument), or None
    when it is no plain view of it (another dtype, memory outside it)."""
    array = np.asarray(array)
    if array.dtype != root.dtype or not np.may_share_memory(array, root):
        return None
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if offset == 0 and array.shape == root.shape and array.strides == root.strides:
        return 0, None, None
    if not root.flags.c_contiguous:
        return None
    return offset, array.shape, array.strides


def apply_view(root: np.ndarray, view) -> np.ndarray:
    offset, shape, strides = view
    if shape is None:
        return root
    return np.ndarray(shape, dtype=root.dtype, buffer=root, offset=offset, strides=strides)
