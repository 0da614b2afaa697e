"""Numpy arguments during the capture call: each is handed to the step as a
TracedArray, which follows what numpy computes from it (views, casts, ufuncs, np.*
functions, indexing) as a recipe, so a Tensor made from it is an input of every replay,
computed again from that replay's arguments; a value read back to Python or a write into
an argument is a host effect (noted on the tracer)."""
from __future__ import annotations

import functools
import sys

import numpy as np

from .code import is_user_code

class TracedArray(np.ndarray):
    """A numpy argument seen by the capture call, or an array numpy computed from one.
    `_needle` is (tracer, argument number, recipe): recipe(values) computes this array
    again from a call's numpy arguments (values: flat position -> array), so a Tensor made
    from it is an input of every replay.  A value read back to Python (a scalar, `item`,
    `tolist`, printing) or a write into the argument is a host effect."""

    _needle = None

    def __array_finalize__(self, obj) -> None:  # (views numpy makes in C: `.T`, reshape)
        tag = getattr(obj, "_needle", None)
        if tag is not None:
            view = _view_in(self, obj)
            self._needle = (tag[0], tag[1], None if view is None or tag[2] is None else
                            functools.partial(_viewed, tag[2], view))

    def _note(self, what: str) -> None:
        tag = self._needle
        if tag is not None:
            tag[0].note(f"{what} of numpy argument {tag[1]}", sys._getframe(2))

    def _made(self, out, make):
        """`out`, computed from traced arrays by `make(resolve)`: traced, with its recipe."""
        if isinstance(out, np.ndarray):
            out = out.view(TracedArray) if type(out) is not TracedArray else out
            out._needle = (self._needle[0], self._needle[1], functools.partial(_recipe, make))
        elif isinstance(out, np.generic) or out is None or isinstance(out, (int, float, bool)):
            self._note("a value read")
        return out

    def __getitem__(self, key):
        out = super().__getitem__(_plain(key))
        if not isinstance(out, np.ndarray):
            self._note("a value read")
            return out
        return self._made(out, lambda r: r(self)[r(key)])

    def __setitem__(self, key, value) -> None:
        self._note("a write")
        super().__setitem__(key, value)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(isinstance(x, TracedArray) for x in kwargs.get("out", ())):
            self._note(f"a write (np.{ufunc.__name__}(out=...))")
        out = getattr(ufunc, method)(*_plain(inputs), **_plain(kwargs))
        return self._made(out, lambda r: getattr(ufunc, method)(*r(inputs), **r(kwargs)))

    def __array_function__(self, func, types, args, kwargs):
        out = func(*_plain(args), **_plain(kwargs))
        if isinstance(out, (list, tuple)):  # (np.split: each part its own recipe)
            return type(out)(self._made(o, lambda r, i=i: func(*r(args), **r(kwargs))[i]) for i, o in enumerate(out))
        return self._made(out, lambda r: func(*r(args), **r(kwargs)))

    def __iter__(self):
        if self.ndim == 1:
            self._note("a value read")
        return super().__iter__()

    def __len__(self):
        self._shape_read()
        return np.ndarray.__len__(self)

    @property
    def shape(self):
        self._shape_read()
        return np.ndarray.shape.__get__(self)

    @shape.setter
    def shape(self, value):
        np.ndarray.shape.__set__(self, value)

    @property
    def size(self):
        self._shape_read()
        return np.ndarray.size.__get__(self)

    def _shape_read(self) -> None:
        """The step's code read the shape of an array numpy computed from an argument
        (len(np.unique(y))), which its values may decide: a guard, its recipe run at each
        replay (an argument's own shape is part of the key)."""
        tag = self._needle
        if tag is None:
            return
        tracer, number, recipe = tag
        root = recipe is not None and not isinstance(recipe, functools.partial)  # (the argument itself)
        frame = sys._getframe(2)
        if root or not is_user_code(frame.f_code.co_filename):
            return
        if recipe is None:
            tracer.note(f"a shape read of an array computed from numpy argument {number}", frame)
        else:  # (one guard an array, however often its shape is read)
            tracer.shape_reads.setdefault(id(recipe), (recipe, np.ndarray.shape.__get__(self)))

    def _method(name):
        def method(self, *args, **kwargs):
            out = getattr(np.ndarray, name)(self.view(np.ndarray), *_plain(args), **_plain(kwargs))
            return self._made(out, lambda r: getattr(r(self), name)(*r(args), **r(kwargs)))
        method.__name__ = name
        return method

    def _reads(what):
        def method(self, *args, **kwargs):
            self._note(what)
            return getattr(np.ndarray, method.__name__)(self, *args, **kwargs)
        return method

    for _name in ("astype", "copy", "reshape", "transpose", "ravel", "flatten", "squeeze", "swapaxes", "clip",
                  "round", "repeat", "take", "sum", "mean", "max", "min", "std", "var", "prod", "argmax", "argmin",
                  "cumsum", "dot", "any", "all"):
        locals()[_name] = _method(_name)
    for _name in ("item", "tolist", "tobytes", "__float__", "__int__", "__bool__", "__index__", "__repr__",
                  "__str__", "__format__"):
        locals()[_name] = _reads("a value read")
        locals()[_name].__name__ = _name
    for _name in ("fill", "sort", "put", "partition", "resize", "itemset", "setfield", "byteswap"):
        locals()[_name] = _reads("a write")
        locals()[_name].__name__ = _name
    del _name, _reads, _method


def _plain(value):
    """`value` with each TracedArray as a plain ndarray (what numpy computes with)."""
    if isinstance(value, TracedArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _recipe(make, values):
    """Run `make` with a resolver that recomputes each traced array from `values`."""
    def resolve(value):
        if isinstance(value, TracedArray):
            recipe = value._needle[2] if value._needle is not None else None
            if recipe is None:
                raise _Untraceable()
            return recipe(values)
        if isinstance(value, (list, tuple)):
            return type(value)(resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value
    return make(resolve)


class _Untraceable(Exception):
    """A traced array whose making needle did not see (see `recipe_of`)."""


def _view_in(array, parent):
    """(byte offset, shape, strides) of `array` inside `parent`'s memory, or None."""
    if not np.may_share_memory(array, parent) or array.dtype != parent.dtype:
        return None
    offset = array.__array_interface__["data"][0] - parent.__array_interface__["data"][0]
    if offset == 0 and array.shape == parent.shape and array.strides == parent.strides:
        return 0, None, None
    return (offset, array.shape, array.strides) if parent.flags.c_contiguous else None


def _viewed(recipe, view, values):
    parent = recipe(values)
    offset, shape, strides = view
    if shape is None:
        return parent
    return np.ndarray(shape, dtype=parent.dtype, buffer=np.ascontiguousarray(parent), offset=offset, strides=strides)


def traced(array: np.ndarray, tracer, number: int) -> TracedArray:
    out = array.view(TracedArray)
    out._needle = (tracer, number, lambda values: values[number])
    return out


def recipe_of(array, values: dict, held=(), unseen: str = ""):
    """How to compute `array` (what Tensor() was given) from a call's numpy arguments, or
    read it from an array the step's state holds (`held`: read again at each replay, a
    buffer refilled between calls): a function of `values`, or None when it is neither
    (a constant); raises ValueError when it is but needle did not see how (a computation
    numpy made in C, say), or the recipe does not give it back bit for bit.  `unseen`
    names what an array the step made may have been computed from without needle seeing
    it (a large array of the state, not guarded by its values, read through a copy): such
    an array is no constant either.  (A numpy argument copied in C is found by the check
    of the first replay with other values, see JitFunction._replay.)"""
    tag = getattr(array, "_needle", None)
    if tag is None:
        if not isinstance(array, np.ndarray):
            if unseen and _holds_arrays(array):
                raise ValueError(f"a list of numpy arrays, which may hold {unseen}")
            return None
        roots = [(f"numpy argument {n}", root, lambda v, n=n: v[n]) for n, root in values.items()]
        for what, root, read in roots + [("a numpy array the step reads", a, lambda v, a=a: a) for a in held]:
            if np.may_share_memory(array, root):  # (np.asarray(argument), a slice of a buffer)
                view = _view_in(array, root)
                if view is None:
                    raise ValueError(f"{what} seen through a view needle cannot repeat")
                return functools.partial(_viewed, read, view)
        if unseen:
            raise ValueError(f"a numpy array the step made, which may have been computed from {unseen} where "
                             "needle could not follow (a copy numpy makes in C: np.array(x, dtype=...), "
                             "np.ascontiguousarray, a write into a new buffer, indexing with an argument); make "
                             "it outside the step, or pass it as an argument")
        return None
    recipe = tag[2]
    try:
        again = recipe(values) if recipe is not None else None
    except _Untraceable:
        again = None
    plain = np.asarray(array)
    if again is None or again.shape != plain.shape or again.dtype != plain.dtype or \
            again.tobytes() != plain.tobytes():
        raise ValueError(f"numpy argument {tag[1]} went through a computation needle cannot repeat")
    return recipe


def _holds_arrays(value) -> bool:
    if isinstance(value, np.ndarray):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_arrays(v) for v in value)
