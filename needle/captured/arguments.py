"""A call's arguments as needle.jit sees them: the inputs (Tensors, numpy arrays,
NDArrays, by position), the key (everything else, the layouts, which arguments are the
same object), and the argument containers the step must not change."""
from __future__ import annotations

import collections
import dataclasses
import functools
import types

import numpy as np

from .. import autograd
from ..autograd import Tensor
from ..engine.realize import pending_sums
from .numpy_args import traced
from .places import SIMPLE, short

class Call:
    """One call's arguments: `flat` (every leaf, in order), `inputs` (the Tensors),
    `arrays` (their realized arrays, then NDArray arguments), `values` (numpy arrays by
    flat position) and `key` (everything else, and the layouts); `pending`: the inputs
    that were still pending (computed by `_layout`, before the step)."""

    __slots__ = ("flat", "inputs", "arrays", "values", "key", "input_grads", "_positions", "owners", "boxes",
                 "parts", "pending")

    def __init__(self, args, kwargs):
        self.values, self.boxes, self.parts = {}, [], []  # (parts: the containers and structures, in order)
        self._positions, self.pending = None, []
        if not kwargs:
            for a in args:  # (a loop, not a generator: every call)
                if type(a) is not Tensor or a.__dict__:
                    break
            else:  # f(x, y): no walk, no NDArray to look for
                self._tensors(args)
                return
        self.flat, self.inputs, self.arrays, self.owners = [], [], [], []
        template = (self._flatten(args), self._flatten(kwargs) if kwargs else ())
        layouts = [self._layout(t) for t in self.inputs]
        self.owners = list(self.inputs)
        for a in self.flat:
            if type(a).__name__ == "NDArray" and hasattr(a, "_handle"):
                device = a._device.name
                if device != "cpu" and device != "cuda":
                    raise Plain
                layouts.append((a._shape, a._dtype, device, a._strides, a._offset))
                self.arrays.append(a)
                self.owners.append(None)
        self.input_grads = [t.grad for t in self.inputs]
        ids = [id(x) for x in self.flat if not isinstance(x, SIMPLE)]
        aliases = None if len(set(ids)) == len(ids) else tuple(ids.index(i) for i in ids)
        self.key = (template, tuple(layouts), aliases, autograd.GRAD_ENABLED)

    def _tensors(self, args) -> None:
        """`__init__` for arguments that are all Tensors without attributes."""
        self.flat, self.inputs, self.owners, self.arrays = list(args), list(args), list(args), []
        layouts = [self._layout(t) for t in args]
        self.input_grads = [t.grad for t in args]
        n = len(args)
        aliases = None if n < 2 or len({id(t) for t in args}) == n else tuple(
            [next(j for j, u in enumerate(args) if u is t) for t in args])
        self.key = (_tensors_template(n), tuple(layouts), aliases, autograd.GRAD_ENABLED)

    def _layout(self, t) -> tuple:
        """An input's layout (part of the key), its realized array appended to `arrays`."""
        a = t._cached_data
        if getattr(a, "is_lazy", False):
            if pending_sums(t):
                self.pending.append(f"tensor argument {len(self.arrays)}")
            a = t.realize_cached_data()
        if not hasattr(a, "_handle"):
            raise Plain  # (a TensorTuple's data, or the numpy backend)
        device = a._device.name
        if device != "cpu" and device != "cuda":
            raise Plain  # cpu_numpy runs op by op in numpy: nothing to capture
        self.arrays.append(a)
        return (a._shape, a._dtype, device, a._strides, a._offset, t.requires_grad, type(t))  # (isinstance(x, Parameter))

    def _flatten(self, value):
        if isinstance(value, Tensor):
            self.inputs.append(value)
            self.flat.append(value)
            attrs = value.__dict__
            if not attrs:
                return "T"
            self.parts.append(value)  # (a batch's own attributes, `x.sample_weight`: arguments too)
            self.boxes.append((attrs, attrs.copy()))
            return ("T", *[(k, self._flatten(v)) for k, v in attrs.items()])
        if isinstance(value, np.ndarray):
            self.values[len(self.flat)] = value
            self.flat.append(value)
            return ("A", value.shape, value.dtype.str, value.strides)
        if type(value) in (list, tuple) or (isinstance(value, tuple) and hasattr(value, "_fields")):
            self.parts.append(value)
            if type(value) is list:
                self.boxes.append((value, value.copy()))
            return (type(value), *[self._flatten(v) for v in value])
        if type(value) is dict:
            self.parts.append(value)
            self.boxes.append((value, value.copy()))
            return (dict, *[(k, self._flatten(v)) for k, v in value.items()])
        fields = fields_of(value)
        if fields is not None:  # (a batch as a dataclass or namespace: its fields are arguments too)
            self.parts.append(value)
            self.boxes.append((fields, fields.copy()))
            return (type(value), *[(k, self._flatten(v)) for k, v in fields.items()])
        self.flat.append(value)
        if isinstance(value, SIMPLE):
            if isinstance(value, (float, np.floating)) and value == 0:  # (-0.0 == 0.0, but 1 / -0.0 is -inf)
                return (type(value), value, str(value))
            return (type(value), value)
        return ("O", id(value))  # (an object by identity: the capture keeps it, so the id stays its own)

    def watch_attributes(self) -> None:
        """Note the Tensor inputs without attributes, so a step that sets one on its
        argument (`x.stat = ...`, which a replay would not) is seen changing it."""
        for t in self.inputs:
            if not t.__dict__:
                self.boxes.append((t.__dict__, {}))

    def changed_containers(self):
        """Why a replay could not repeat the call, if the call changed a list or dict it was
        given (`batch["x"] = ...`); see `remember_containers`."""
        for container, copy in self.boxes:
            try:
                same = container == copy
            except Exception:
                same = False
            if not same:
                return f"the step changes an argument it was given ({short(copy)} became {short(container)})"
        return None

    def array_owner(self, i):
        return self.owners[i]

    def position(self, value):
        """Where an argument object (not a number) is: ("arg", flat position) or ("part",
        position among the containers and structures), or None."""
        if isinstance(value, SIMPLE):
            return None
        if self._positions is None:
            self._positions = {}
            for i, x in enumerate(self.flat):
                self._positions.setdefault(id(x), ("arg", i))
            for i, x in enumerate(self.parts):
                self._positions.setdefault(id(x), ("part", i))
        return self._positions.get(id(value))

    def objects(self):
        """(position, argument) for the arguments that are neither inputs nor numbers."""
        return [(i, x) for i, x in enumerate(self.flat) if not isinstance(x, (SIMPLE, Tensor, np.ndarray))
                and type(x).__name__ != "NDArray"]


def fields_of(value):
    """The fields of an argument passed as structure — a dataclass instance, a
    SimpleNamespace, a UserDict — as its attribute dict (or the UserDict's data); None
    for anything else (an object by identity)."""
    if isinstance(value, collections.UserDict):
        return value.data
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)) or type(value) is types.SimpleNamespace:
        try:
            return object.__getattribute__(value, "__dict__")
        except AttributeError:  # (a dataclass with slots: by identity)
            return None
    return None


@functools.lru_cache(maxsize=64)
def _tensors_template(n: int) -> tuple:
    """What `Call._flatten` makes of f(t_0, ..., t_{n-1}), all Tensors, no keywords."""
    return ((tuple,) + ("T",) * n, ())


class Plain(Exception):
    """These arguments cannot be captured (the numpy backend's arrays): run plainly."""


def traced_arguments(call, args, kwargs, tracer):
    """The arguments with each numpy array replaced by a TracedArray view of it (lists
    and dicts that hold one are edited in place and restored after the call)."""
    if not call.values:
        return args, kwargs, lambda: None
    swapped = []

    def swap(value):
        if isinstance(value, np.ndarray):
            return traced(value, tracer, call.position(value)[1])
        fields = value if type(value) in (list, dict) else value.__dict__ if isinstance(value, Tensor) else \
            fields_of(value)
        if fields is not None:
            items = list(fields.items()) if isinstance(fields, dict) else list(enumerate(fields))
            for k, v in items:
                new = swap(v)
                if new is not v:
                    swapped.append((fields, k, v))
                    fields[k] = new
            return value
        if isinstance(value, tuple) and type(value) in (tuple,):
            return tuple(swap(v) for v in value)
        return value

    def restore():
        for container, k, v in reversed(swapped):
            container[k] = v
    return tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}, restore


def untraced(value, call):
    """What the capture call returns or keeps, with each TracedArray the caller's own
    array (an argument) or a plain one (numpy's result from one)."""
    tag = getattr(value, "_needle", None) if isinstance(value, np.ndarray) else None
    if tag is not None:
        original = call.flat[tag[1]]
        same = value.base is original and value.shape == original.shape and value.strides == original.strides
        return original if same else value.view(np.ndarray)
    if type(value) in (list, tuple):
        return type(value)(untraced(v, call) for v in value)
    if type(value) is dict:
        return {k: untraced(v, call) for k, v in value.items()}
    return value
