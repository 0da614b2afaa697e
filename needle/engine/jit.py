"""Captured steps: `needle.jit(fn)` records the compiled schedules one call of `fn`
launches and replays them on later calls without running `fn`'s Python.

Call 1 runs `fn` plainly (optimizers create their state); call 2 runs it under a
`capture.Recorder` and turns what it saw into a `CapturedStep`; later calls with
the same key replay it.  A replay binds every leaf buffer of every schedule to
where that data lives *now*:

- an input: the Tensor arguments of this call;
- an output of an earlier schedule of this replay;
- a random draw: made afresh, in the order the function made them;
- state: the current data of the Tensor the function read (parameters), or of the
  Tensor that replaced it during the captured call (a module attribute or an
  optimizer's dict entry set to a new Tensor: found by comparing the containers
  reachable from the function before and after the call);
- a constant made inside the function (kept from the capture).

Run-time scalars that are `RuntimeScalar`s (optimizer hyperparameters) are read
again at each replay; others are constants of the capture.  After the kernels,
every Tensor that held a result of the captured call (parameters, optimizer and
module state, gradients) is given the new result, and the return value is rebuilt
from fresh Tensors, so what an earlier call returned stays valid.
"""
from __future__ import annotations

import functools
import gc
import types
import weakref
from collections import OrderedDict

from .. import autograd, config
from ..autograd import Tensor, TensorTuple
from ..errors import JitError
from ..ir import lazy as lazy_ir
from ..ir.nodes import RuntimeScalar
from ..runtime import schedules
from . import capture

_INPUT, _OUTPUT, _DRAW, _STATE, _CONST, _SLOT = range(6)


# ---- the function's arguments -------------------------------------------------------------
def _flatten(value, tensors: list):
    """A hashable template of `value` with its Tensors replaced by their index in
    `tensors` (appended), so two calls match when their templates do."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return (_INPUT, len(tensors) - 1)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_flatten(v, tensors) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _flatten(v, tensors)) for k, v in value.items())
    try:
        hash(value)
        return ("value", type(value), value)
    except TypeError:
        return ("object", id(value))


def _array(tensor):
    """The realized NDArray of a tensor (computing it if it is pending)."""
    data = tensor._cached_data
    if getattr(data, "is_lazy", False):
        data = tensor.realize_cached_data()
    return data


# ---- where state lives: the containers reachable from the function -----------------------
def _roots(fn, args, kwargs) -> list:
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


def _slots(roots, limit: int = 200_000) -> list:
    """(container, key, value) for every Tensor (or tuple of them) held in a dict, a
    list or an object's attributes reachable from `roots` (modules, optimizers, user
    objects), so that a value the call replaced can be matched with its successor."""
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
        elif hasattr(obj, "__dict__") and not isinstance(obj, JitFunction):
            stack.append((obj.__dict__, depth + 1))  # modules, optimizers, a user's objects
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


def _slot_of(slots) -> dict:
    """id(Tensor) -> (container, key, position in a tuple or None) where it now lives."""
    where = {}
    for container, key, value in slots:
        if isinstance(value, tuple):
            for pos, t in enumerate(value):
                where.setdefault(id(t), (container, key, pos))
        else:
            where.setdefault(id(value), (container, key, None))
    return where


def _in_slot(container, key, pos):
    value = container[key]
    return value if pos is None else value[pos]


def _replacements(slots) -> dict:
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


def _modules_in(roots) -> list:
    from ..nn import Module
    out, seen = [], set()
    for r in roots:
        if isinstance(r, Module):
            for m in [r] + r._children():
                if id(m) not in seen:
                    seen.add(id(m))
                    out.append(m)
    return out


# ---- a captured call ----------------------------------------------------------------------
class _Run:
    """One schedule of a CapturedStep: the compiled entry and how to bind it."""

    __slots__ = ("entry", "device", "leaves", "scalars")

    def __init__(self, entry, device, leaves, scalars):
        self.entry, self.device, self.leaves, self.scalars = entry, device, leaves, scalars


class CapturedStep:
    """The schedules of one call and the bindings that replay them."""

    def __init__(self, recorder: capture.Recorder, inputs: list, result, slots_before, roots, modules):
        self.modules = modules
        self.training = tuple(m.training for m in modules)
        self.actions = list(recorder.actions)
        self.draws = [(fn, args, kwargs) for fn, args, kwargs, _ in recorder.draws]
        # where each buffer comes from, by the identity of its storage (`_handle`):
        # eager ops hand views (reshapes, broadcasts) of their inputs to kernels
        sources = {}
        for i, t in enumerate(inputs):
            sources.setdefault(id(_array(t)._handle), ((_INPUT, i), _array(t)))
        for k, (_, _, _, array) in enumerate(recorder.draws):
            sources.setdefault(id(array._handle), ((_DRAW, k), array))
        self._state_sources(recorder, slots_before, roots, sources)
        outputs = {}
        self.runs = []
        for s, run in enumerate(recorder.runs):
            leaves = [self._bind(leaf, outputs, sources) for leaf in run.leaves]
            if isinstance(run, capture.HostRun):
                self.runs.append(_HostRun(run.fn, run.device, leaves))
            else:
                scalars = [sc.value.provider if isinstance(sc.value, RuntimeScalar) else sc for sc in run.scalars]
                self.runs.append(_Run(run.entry, run.device, leaves, scalars))
            for j, array in enumerate(run.outputs):
                outputs.setdefault(id(array._handle), ((_OUTPUT, s, j), array))
        returned = set()
        self.result = self._template(result, outputs, returned, recorder.created_ids)
        self.holders = self._holders(recorder, outputs, returned)
        self.n_inputs = len(inputs)

    def _state_sources(self, recorder, slots_before, roots, sources) -> None:
        """Sources of the state the call read: the Tensor read (a parameter), or what
        replaced it in its container (a module attribute, an optimizer's dict entry),
        found at each replay in that container."""
        replaced = _replacements(slots_before)
        self.slot_of = slot_of = _slot_of(_slots(roots))
        for ref, made_here, array in recorder.readers.values():
            if made_here or id(array._handle) in sources:
                continue  # made inside the call: a constant (or an input, a draw)
            anchor, hops = ref(), 0
            while anchor is not None and id(anchor) in replaced and hops < 64:
                anchor, hops = replaced[id(anchor)], hops + 1
            if anchor is None:
                raise JitError("needle.jit: the function replaced a tensor it reads as state in a place "
                               "needle cannot follow (keep state in module attributes, optimizer state or "
                               "containers the function can reach); pass it as an argument instead")
            where = (_SLOT,) + slot_of[id(anchor)] if id(anchor) in slot_of else (_STATE, anchor)
            sources[id(array._handle)] = (where, array)

    @staticmethod
    def _bind(leaf, outputs, sources):
        """(where, view, layout to check): how a replay finds this leaf buffer."""
        found = outputs.get(id(leaf._handle)) or sources.get(id(leaf._handle))
        if found is None:
            return ((_CONST, leaf), None, None)  # made inside the call: a constant
        where, base = found
        view = None if _layout(leaf) == _layout(base) else (leaf.shape, leaf.strides, leaf.offset)
        return (where, view, _layout(base) if where[0] in (_STATE, _SLOT) else None)

    def _template(self, value, outputs, returned, made_here):
        """The return value with each Tensor the call made replaced by where a replay
        finds its value (a new Tensor each replay, so earlier results stay valid);
        Tensors that existed before (inputs, parameters) are handed back as they are."""
        if isinstance(value, Tensor):
            found = _locate(value._cached_data, outputs)
            if found is not None and id(value) in made_here:
                returned.add(id(value))
                return ("tensor", found, value.requires_grad)
            return (_CONST, value)
        if isinstance(value, (list, tuple)) and not isinstance(value, TensorTuple):
            return ("seq", type(value), [self._template(v, outputs, returned, made_here) for v in value])
        if isinstance(value, dict):
            return ("dict", [(k, self._template(v, outputs, returned, made_here)) for k, v in value.items()])
        return (_CONST, value)

    def _holders(self, recorder, outputs, returned) -> list:
        """(how to find the Tensor, position in its tuple data or None, where its new
        value is) for every live Tensor, other than the returned ones, that holds a
        result of the call; one found in a container is looked up there at each replay."""
        candidates = [r() for r in recorder.created] + [ref() for ref, _, _ in recorder.readers.values()]
        holders, seen = [], set()
        for t in candidates:
            if t is None or id(t) in seen or id(t) in returned:
                continue
            seen.add(id(t))
            data = t._cached_data
            for pos, x in enumerate(data if isinstance(data, tuple) else (data,)):
                found = _locate(x, outputs)
                if found is not None:
                    find = self.slot_of[id(t)] if id(t) in self.slot_of else weakref.ref(t)
                    holders.append((find, pos if isinstance(data, tuple) else None, found))
        return holders

    # ---- replay ----------------------------------------------------------------------------
    def matches(self) -> bool:
        return all(m.training == f for m, f in zip(self.modules, self.training))

    def replay(self, inputs: list):
        draws = []
        for kind, what in self.actions:
            if kind == "draw":
                fn, args, kwargs = self.draws[what]
                draws.append(_array(fn(*args, **kwargs)))
            else:
                what()
        arrays = [_array(t) for t in inputs]
        outs = []
        for run in self.runs:
            leaves = []
            for where, view, layout in run.leaves:
                base = _find(where, arrays, outs, draws)
                if layout is not None and _layout(base) != layout:
                    return _STALE  # state changed layout since the capture: capture again
                leaves.append(base if view is None else base._view(*view))
            if type(run) is _HostRun:
                outs.append(run.call(leaves))
                continue
            scalars = [_Value(s()) if callable(s) else s for s in run.scalars]
            outs.append(run.entry.run(leaves, scalars, run.device))
        for find, pos, (where, view, _) in self.holders:
            t = find() if callable(find) else _in_slot(*find)
            if t is not None:
                new = _find(where, arrays, outs, draws)
                new = new if view is None else new._view(*view)
                if pos is None:
                    t._cached_data = new
                else:
                    t._cached_data = t._cached_data[:pos] + (new,) + t._cached_data[pos + 1:]
        return self._rebuild(self.result, arrays, outs, draws)

    def _rebuild(self, template, arrays, outs, draws):
        kind = template[0]
        if kind == "tensor":
            where, view, _ = template[1]
            new = _find(where, arrays, outs, draws)
            return Tensor.make_const(new if view is None else new._view(*view), requires_grad=template[2])
        if kind == "seq":
            return template[1](self._rebuild(t, arrays, outs, draws) for t in template[2])
        if kind == "dict":
            return {k: self._rebuild(t, arrays, outs, draws) for k, t in template[1]}
        return template[1]

    def explain(self) -> str:
        kinds = {_INPUT: "input", _OUTPUT: "earlier output", _DRAW: "random draw", _STATE: "state",
                 _SLOT: "state", _CONST: "constant"}
        schedules = [r for r in self.runs if type(r) is _Run]
        lines = [f"  {len(schedules)} schedule(s), {sum(len(r.entry.schedule.calls) for r in schedules)} kernel(s), "
                 f"{len(self.runs) - len(schedules)} host call(s), "
                 f"{len(self.holders)} state tensor(s) updated in place, {len(self.draws)} random draw(s), "
                 f"{sum(1 for k, _ in self.actions if k == 'call')} replay callback(s)"]
        for s, run in enumerate(self.runs):
            counts = {}
            for (where, _, _) in run.leaves:
                counts[kinds[where[0]]] = counts.get(kinds[where[0]], 0) + 1
            if type(run) is _HostRun:
                lines.append(f"  host call {s} ({getattr(run.fn, '__name__', run.fn)}): " +
                             ", ".join(f"{n} {k}" for k, n in counts.items()))
                continue
            live = sum(1 for x in run.scalars if callable(x))
            lines.append(f"  schedule {s} on {run.device}: leaves " +
                         ", ".join(f"{n} {k}" for k, n in counts.items()) +
                         f"; scalars {len(run.scalars)} ({live} read at each call)")
            for c in run.entry.schedule.calls:
                lines.append(f"    {c.kernel.name}")
        return "\n".join(lines)


def _layout(array) -> tuple:
    return (array.shape, array.strides, array.offset, array.dtype)


def _locate(data, outputs):
    """(where, view, None) when `data` (an NDArray or a realized lazy node) is an output
    of the capture or a view of one, else None."""
    array = data.arg if getattr(data, "is_lazy", False) and data.op == "buffer" else data
    found = outputs.get(id(getattr(array, "_handle", None)))
    if found is None:
        return None
    where, base = found
    return (where, None if _layout(array) == _layout(base) else (array.shape, array.strides, array.offset), None)


def _find(where, arrays, outs, draws):
    """The array a binding names, in this replay."""
    kind = where[0]
    if kind == _SLOT:
        return _array(_in_slot(where[1], where[2], where[3]))
    if kind == _STATE:
        return _array(where[1])
    if kind == _INPUT:
        return arrays[where[1]]
    if kind == _OUTPUT:
        return outs[where[1]][where[2]]
    if kind == _DRAW:
        return draws[where[1]]
    return where[1]


class _HostRun:
    """A host call of a CapturedStep: numpy in, numpy out, new buffers on `device`."""

    __slots__ = ("fn", "device", "leaves")

    def __init__(self, fn, device, leaves):
        self.fn, self.device, self.leaves = fn, device, leaves

    def call(self, arrays) -> list:
        results = self.fn(*[_host(a) for a in arrays])
        return [_array(Tensor(r, device=self.device, dtype=str(r.dtype), requires_grad=False)) for r in results]


def _host(array):
    """An array's values as numpy (NEEDLE_BACKEND=np holds numpy arrays already)."""
    return array.numpy() if hasattr(array, "_handle") else array


def host_call(fn, tensors, device) -> list:
    """`fn(*numpy values of tensors)` -> list of numpy arrays, returned as new constant
    Tensors on `device`.  For host work inside a training step (an MPI all-reduce):
    a step captured by needle.jit replays it between its schedules with each replay's
    buffers, where reading the tensors with `.numpy()` would refuse to be captured."""
    arrays = [_array(t) for t in tensors]
    results = fn(*[_host(a) for a in arrays])
    outs = [Tensor(r, device=device, dtype=str(r.dtype), requires_grad=False) for r in results]
    recorder = capture.CURRENT
    if recorder is not None and recorder.mine():
        recorder.host(fn, arrays, [o._cached_data for o in outs], device)
    return outs


class _Value:
    """A run-time scalar's value for one replay (what a Scalar offers the runtime)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


_STALE = object()  # a replay found state with another layout: capture again


# ---- the user-facing function -------------------------------------------------------------
class JitFunction:
    """`fn` with captured steps; see the module docstring and SPEC "Captured steps"."""

    def __init__(self, fn, max_captures: int = 8):
        if not callable(fn):
            raise JitError(f"needle.jit: expected a function, got {type(fn).__name__}")
        if not isinstance(max_captures, int) or max_captures < 1:
            raise JitError(f"needle.jit: max_captures must be a positive integer, got {max_captures!r}")
        self.fn, self.max_captures = fn, max_captures
        functools.update_wrapper(self, fn)
        self.reset()

    def reset(self) -> None:
        """Drop every capture; the next call runs the function plainly again."""
        self.captures: "OrderedDict[object, list]" = OrderedDict()
        self.calls = 0
        self.replays = 0

    def __get__(self, obj, objtype=None):  # @needle.jit on a method: captures per instance
        if obj is None:
            return self
        bound = self.__dict__.setdefault("_bound", weakref.WeakKeyDictionary())
        if obj not in bound:
            bound[obj] = JitFunction(types.MethodType(self.fn, obj), self.max_captures)
        return bound[obj]

    def __call__(self, *args, **kwargs):
        if not config.JIT or not autograd.LAZY_MODE:
            # eager ops compute some results (copies, reshapes) outside kernels, where a
            # capture cannot see them: eager mode and the numpy backend run plainly
            return self.fn(*args, **kwargs)
        if capture.CURRENT is not None:  # a jitted function called inside a capture: inline it
            return self.fn(*args, **kwargs)
        self.calls += 1
        inputs = []
        key = (_flatten(args, inputs), _flatten(kwargs, inputs))
        if self.calls == 1:
            return self.fn(*args, **kwargs)  # warm-up: optimizers create their state
        arrays = [_array(t) for t in inputs]
        if any(a.device.name not in ("cpu", "cuda") for a in arrays):
            return self.fn(*args, **kwargs)  # cpu_numpy runs op by op in numpy: nothing to capture
        key = key + (tuple((a._shape, a._dtype, a._device, a._strides, a._offset) for a in arrays),)
        for step in self.captures.get(key, ()):
            if step.matches():
                self.captures.move_to_end(key)
                result = step.replay(inputs)
                if result is not _STALE:
                    self.replays += 1
                    return result
                self.captures[key].remove(step)
                break
        return self._capture(key, inputs, args, kwargs)

    def _capture(self, key, inputs, args, kwargs):
        from ..runtime import realize_nodes
        realize_nodes([])  # state still pending from earlier calls becomes buffers the capture can read
        roots = _roots(self.fn, args, kwargs)
        slots_before = _slots(roots)
        recorder = capture.Recorder()
        capture.CURRENT, schedules.RECORDER, lazy_ir.HOST_READ = recorder, recorder.schedule, capture.host_read
        try:
            result = self.fn(*args, **kwargs)
            pending = [x for t in _tensors_in(result) for x in _pending(t)]
            realize_nodes(pending)  # close the step: nothing it made stays pending
        finally:
            capture.CURRENT, schedules.RECORDER, lazy_ir.HOST_READ = None, None, None
        gc.collect()
        step = CapturedStep(recorder, inputs, result, slots_before, roots, _modules_in(roots))
        self.captures.setdefault(key, []).append(step)
        self.captures.move_to_end(key)
        while sum(len(v) for v in self.captures.values()) > self.max_captures:
            oldest = next(iter(self.captures))
            self.captures[oldest].pop(0)
            if not self.captures[oldest]:
                del self.captures[oldest]
        return result

    def explain(self) -> str:
        """The captured kernels, buffers and state, one block per capture (also printed)."""
        lines = [f"needle.jit({getattr(self.fn, '__qualname__', self.fn)}): {self.calls} call(s), "
                 f"{self.replays} replay(s), {sum(len(v) for v in self.captures.values())} capture(s)"]
        for key, steps in self.captures.items():
            shapes = ", ".join(f"{tuple(s)} {d} on {dev}" for s, d, dev, *_ in key[-1]) or "no tensor inputs"
            for step in steps:
                lines.append(f"capture for inputs [{shapes}]:")
                lines.append(step.explain())
        text = "\n".join(lines)
        print(text)
        return text


def _tensors_in(value):
    if isinstance(value, (Tensor, TensorTuple)):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v)


def _pending(t):
    data = t._cached_data
    return [x for x in (data if isinstance(data, tuple) else (data,)) if autograd.is_pending(x)]


def jit(fn=None, *, max_captures: int = 8):
    """Capture a step once and replay it without building the graph in Python
    (SPEC "Captured steps"): `step = needle.jit(fn)` or `@needle.jit`."""
    if fn is None:
        return lambda f: JitFunction(f, max_captures)
    return JitFunction(fn, max_captures)
