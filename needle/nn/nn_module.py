"""`Module` and `Parameter`: the containers every layer is built from.

Course semantics: a module's parameters are whatever `Parameter`s hang off its
attributes, found by walking `__dict__` (through sub-modules, lists, tuples and
dicts) in attribute order.  On top of that, PyTorch-style dotted names
(`named_parameters`, `state_dict`, `load_state_dict`), with *buffers*: tensors
such as BatchNorm's running statistics that are state but not trained.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

import numpy as np

from .. import autograd
from ..autograd import Tensor
from ..engine.realize import realize_later
from ..errors import NeedleError, ShapeError, fmt_shape


class Parameter(Tensor):
    """A tensor that a module trains (found by `Module.parameters()`)."""


class StateDictKeyError(NeedleError, KeyError):
    """`load_state_dict` got a state whose names do not match the module's."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def _walk(value: Any, name: str, seen: set, buffers: bool) -> Iterator[Tuple[str, Tensor]]:
    """Yield (dotted name, tensor) for the Parameters (and registered buffers) found in
    `value`, descending into Modules and containers.  Each object is reported once, at
    the first name it is reached by, so shared weights are not counted twice."""
    if isinstance(value, Parameter):
        if id(value) not in seen:
            seen.add(id(value))
            yield name, value
    elif isinstance(value, Module):
        if id(value) not in seen:
            seen.add(id(value))
            yield from value._named_tensors(name + ".", seen, buffers)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{name}.{key}", seen, buffers)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, f"{name}.{i}", seen, buffers)


def _modules_in(value: Any, seen: set) -> List["Module"]:
    """Every Module reachable from `value` (itself included), depth first."""
    if isinstance(value, Module):
        if id(value) in seen:
            return []
        seen.add(id(value))
        return [value] + _modules_in(value.__dict__, seen)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [m for item in value for m in _modules_in(item, seen)]
    return []


def _collect_modules(value: Any, name: str, seen: set, out: list) -> None:
    """Append (dotted name, module) for `value` and what it holds, depth first."""
    if isinstance(value, Module):
        out.append((name, value))
        for key, item in value.__dict__.items():
            _collect_children(item, f"{name}.{key}" if name else key, seen, out)


def _collect_children(value: Any, name: str, seen: set, out: list) -> None:
    if isinstance(value, Module):
        if id(value) not in seen:
            seen.add(id(value))
            _collect_modules(value, name, seen, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect_children(item, f"{name}.{key}", seen, out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _collect_children(item, f"{name}.{i}", seen, out)


class Module:
    """Base class of layers: `__call__` runs `forward`; `train()` / `eval()` switch the
    `training` flag of the whole tree (Dropout and BatchNorm read it)."""

    training = True  # class default, so subclasses that skip __init__ still work

    def __init__(self) -> None:
        self.training = True

    def __setattr__(self, name: str, value: Any) -> None:
        # State stored on a module (running statistics, a cached hidden state) outlives
        # the step that built it: in lazy mode it is computed with the next schedule,
        # so the next step reads a buffer instead of extending this step's graph.
        if isinstance(value, Tensor) and autograd.lazy_mode():
            realize_later(value)
        object.__setattr__(self, name, value)

    # ---- tree walking -------------------------------------------------------------------
    def _named_tensors(self, prefix: str, seen: set, buffers: bool) -> Iterator[Tuple[str, Tensor]]:
        registered = self.__dict__.get("_buffer_names", ())
        for key, value in self.__dict__.items():
            if buffers and key in registered and isinstance(value, Tensor) and not isinstance(value, Parameter):
                yield prefix + key, value
            else:
                yield from _walk(value, prefix + key, seen, buffers)

    def named_parameters(self) -> List[Tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs, e.g. ("model.0.weight", W), in attribute order."""
        return list(self._named_tensors("", {id(self)}, buffers=False))

    def parameters(self) -> List[Parameter]:
        """All Parameters of this module and its sub-modules (each once)."""
        return [p for _, p in self.named_parameters()]

    def named_modules(self) -> List[Tuple[str, "Module"]]:
        """("", self) and every sub-module by dotted name ("0", "0.fn", "layers.1"), each
        once, parents before children, in attribute order."""
        out: List[Tuple[str, Module]] = []
        _collect_modules(self, "", {id(self)}, out)
        return out

    def named_children(self) -> List[Tuple[str, "Module"]]:
        """The direct sub-modules by name (a list or tuple attribute gives "name.i")."""
        children = []
        for k, v in self.__dict__.items():
            if isinstance(v, Module):
                children.append((k, v))
            elif isinstance(v, (list, tuple)):
                children.extend((f"{k}.{i}", m) for i, m in enumerate(v) if isinstance(m, Module))
        return children

    def children(self) -> List["Module"]:
        return [m for _, m in self.named_children()]

    def to(self, device) -> "Module":
        """Move every parameter and buffer to `device`, in place (parameters keep their
        identity, so an optimizer built before still holds them); returns self."""
        for _, t in self._named_tensors("", {id(self)}, buffers=True):
            if t.device != device:
                t.data = Tensor(t.numpy(), device=device, dtype=t.dtype, requires_grad=False)
                t.grad = None
        for m in [self] + self._children():
            if "device" in m.__dict__:
                object.__setattr__(m, "device", device)
        return self

    def named_buffers(self) -> List[Tuple[str, Tensor]]:
        params = {id(p) for p in self.parameters()}
        return [(n, t) for n, t in self._named_tensors("", {id(self)}, buffers=True) if id(t) not in params]

    def _children(self) -> List["Module"]:
        """Every sub-module, at any depth (not self)."""
        return _modules_in(self.__dict__, {id(self)})

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        """Make `name` a buffer: saved in `state_dict` but not a Parameter.  The attribute
        can be reassigned later (BatchNorm does every step) and stays a buffer."""
        self.__dict__.setdefault("_buffer_names", set()).add(name)
        setattr(self, name, tensor)

    # ---- modes --------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        self.training = bool(mode)
        for m in self._children():
            m.training = bool(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    # ---- state --------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Tensor]:
        """Parameters and buffers by dotted name, as detached tensors (a snapshot: later
        optimizer steps replace a parameter's data, not the snapshot's)."""
        return {name: t.detach() for name, t in self._named_tensors("", {id(self)}, buffers=True)}

    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True) -> None:
        """Copy values (Tensors or array-likes) into the parameters and buffers of the
        same name.  Everything is checked before anything is written, so a bad state
        leaves the module unchanged.  Parameters keep their identity (optimizers
        holding them see the new values)."""
        own = dict(self._named_tensors("", {id(self)}, buffers=True))
        if strict:
            missing = [k for k in own if k not in state_dict]
            unexpected = [k for k in state_dict if k not in own]
            if missing or unexpected:
                parts = []
                if missing:
                    parts.append("missing keys " + ", ".join(map(repr, missing)))
                if unexpected:
                    parts.append("unexpected keys " + ", ".join(map(repr, unexpected)))
                raise StateDictKeyError(f"load_state_dict ({type(self).__name__}): " + "; ".join(parts))
        updates = []
        for name, value in state_dict.items():
            if name not in own:
                continue
            target = own[name]
            array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if tuple(array.shape) != tuple(target.shape):
                raise ShapeError(f"load_state_dict ({type(self).__name__}): {name!r} has shape "
                                 f"{fmt_shape(array.shape)} but the module expects {fmt_shape(target.shape)}")
            updates.append((target, Tensor(array, device=target.device, dtype=target.dtype,
                                           requires_grad=False)))
        for target, new in updates:
            target.data = new

    def num_parameters(self) -> int:
        return int(sum(np.prod(p.shape) for p in self.parameters()))

    def extra_repr(self) -> str:
        """The sizes and settings shown inside the repr's parentheses (PyTorch's hook)."""
        return ""

    def _repr_children(self) -> List[Tuple[str, "Module"]]:
        return self.named_children()

    def __repr__(self) -> str:
        extra, children = self.extra_repr(), self._repr_children()
        if not children:
            return f"{type(self).__name__}({extra})"
        body = "".join(f"\n  ({k}): " + repr(v).replace("\n", "\n  ") for k, v in children)
        return f"{type(self).__name__}({extra + ',' if extra else ''}{body}\n)"
