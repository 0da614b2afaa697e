"""Captured steps: `needle.jit(fn)` records the compiled schedules one call of `fn`
launches and replays them on later calls without running `fn`'s Python
(capture.py records, state.py finds state, replay.py binds and runs).

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
import warnings
import weakref
from collections import OrderedDict

from .. import autograd, config
from ..autograd import Tensor
from ..errors import JitError
from ..ir import lazy as lazy_ir
from ..engine import capture, schedule_cache
from ..engine.realize import pending_nodes, realize_nodes
from . import state
from .replay import INPUT, STALE, CapturedStep, host_values, realized_array


#: captures in a row that a call's new state kept from being kept, after which a function
#: runs plainly (each capture costs a plain call and a recording)
UNKEPT_LIMIT = 3
#: calls in a row that captured, as a multiple of max_captures, after which a function
#: that never replays runs plainly
MISSES_LIMIT = 2


# ---- the function's arguments -------------------------------------------------------------
def _flatten(value, tensors: list):
    """A hashable template of `value` with its Tensors replaced by their index in
    `tensors` (appended), so two calls match when their templates do."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return (INPUT, len(tensors) - 1)
    if isinstance(value, (list, tuple)):  # (a list, not a generator: this runs on every call)
        return (type(value).__name__, *[_flatten(v, tensors) for v in value])
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _flatten(v, tensors)) for k, v in value.items())
    try:
        hash(value)
        return ("value", type(value), value)
    except TypeError:
        return ("object", id(value))


def _pending(value) -> list:
    """The pending nodes of a slot's value: a Tensor or a tuple of them."""
    return [n for t in (value if isinstance(value, tuple) else (value,)) for n in pending_nodes(t)]


def _all_tensors(values) -> bool:
    for v in values:  # (a loop, not a generator: this runs on every call)
        if type(v) is not Tensor:
            return False
    return True


@functools.lru_cache(maxsize=64)
def _tensor_args(n: int) -> tuple:
    """The key `_flatten` gives the arguments of f(t_0, ..., t_{n-1}), all Tensors
    (and no keywords)."""
    return (("tuple", *[(INPUT, i) for i in range(n)]), ())


#: the key of a call without arguments (what the general walk gives it)
_NO_ARGUMENTS = (*_tensor_args(0), ())


class _WeakMethod:
    """`fn` bound to `obj` through a weak reference; `__func__` and `__self__` as a bound
    method's, so the capture finds the instance's state the same way."""

    def __init__(self, fn, obj):
        self.__func__, self._ref = fn, weakref.ref(obj)
        functools.update_wrapper(self, fn)

    @property
    def __self__(self):
        return self._ref()

    def __call__(self, *args, **kwargs):
        return self.__func__(self._ref(), *args, **kwargs)


class JitFunction:
    """`fn` with captured steps; see the module docstring and SPEC "Captured steps"."""

    holds_no_state = True  # state.slots does not walk into it

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
        self.unkept = 0  # captures in a row not kept: the call made new state each time
        self.misses = 0  # calls in a row that captured instead of replaying
        self.plain = False  # no capture can hold: every call runs the function (see _run_plainly)

    def __get__(self, obj, objtype=None):  # @needle.jit on a method: captures per instance
        if obj is None:
            return self
        bound = self.__dict__.setdefault("_bound", weakref.WeakKeyDictionary())
        if obj not in bound:  # (the method holds its instance weakly: else the dict's value kept its key alive)
            bound[obj] = JitFunction(_WeakMethod(self.fn, obj), self.max_captures)
        return bound[obj]

    def __call__(self, *args, **kwargs):
        if not config.JIT or not autograd.LAZY_MODE:
            # eager ops compute some results (copies, reshapes) outside kernels, where a
            # capture cannot see them: eager mode and the numpy backend run plainly
            return self.fn(*args, **kwargs)
        if capture.CURRENT is not None:  # a jitted function called inside a capture: inline it
            return self.fn(*args, **kwargs)
        self.calls += 1
        if self.calls == 1 or self.plain:
            return self.fn(*args, **kwargs)  # warm-up (optimizers create their state), or no capture holds
        if not args and not kwargs:  # f(): nothing to key (a closure over its state)
            inputs, arrays, key = (), [], _NO_ARGUMENTS
        else:
            if not kwargs and _all_tensors(args):  # f(x, y): the template without the walk
                inputs, key = args, _tensor_args(len(args))
            else:
                inputs = []
                key = (_flatten(args, inputs), _flatten(kwargs, inputs) if kwargs else ())
            arrays, layouts = [], []  # (one pass: this runs on every call)
            for t in inputs:
                a = t._cached_data
                if getattr(a, "is_lazy", False):
                    a = t.realize_cached_data()
                # (a device by its name: equal names are equal devices, and a str hashes in C)
                device = a._device.name
                if device != "cpu" and device != "cuda":
                    return self.fn(*args, **kwargs)  # cpu_numpy runs op by op in numpy: nothing to capture
                arrays.append(a)
                layouts.append((a._shape, a._dtype, device, a._strides, a._offset, t.requires_grad))
            key = (*key, tuple(layouts))
        for step in self.captures.get(key, ()):
            if step.matches():
                if len(self.captures) > 1:
                    self.captures.move_to_end(key)
                result = step.replay(arrays, inputs)
                if result is not STALE:
                    step.switch_modes()
                    self.replays += 1
                    self.misses = 0
                    return result
                self.captures[key].remove(step)
                break
        self.misses += 1
        if self.misses > MISSES_LIMIT * self.max_captures:  # (a float argument new at every call...)
            self._run_plainly(f"{self.misses - 1} calls in a row made new captures and none replayed (a non-Tensor "
                              f"argument new at every call, more input shapes than "
                              f"max_captures={self.max_captures}?)", stacklevel=3)
            return self.fn(*args, **kwargs)
        return self._capture(key, inputs, args, kwargs)

    def _run_plainly(self, why: str, stacklevel: int = 4) -> None:
        """From now on (until reset()) every call runs the function, saying why (the
        warning names the user's line: `stacklevel` frames up from here)."""
        self.plain = True
        warnings.warn(f"needle.jit({getattr(self.fn, '__qualname__', self.fn)}): {why}; it runs without capture "
                      f"from now on (reset() tries again)", stacklevel=stacklevel)

    def _capture(self, key, inputs, args, kwargs):
        roots = state.roots(self.fn, args, kwargs)
        names_before = state.bindings(self.fn)
        numbers = state.dict_numbers(names_before)
        modules, empty, numbers_before = [], [], []
        slots_before = state.slots(roots, modules, empty=empty, numbers=numbers_before)
        modes = [m.training for m in modules]  # (what a call starts from: the step may switch them)
        # state still pending from earlier calls (the warm-up's, a plain lazy loop's) becomes
        # buffers the capture reads; else its graph would be folded into the capture, and
        # every replay would start again from the state those calls began with
        realize_nodes([n for _, _, value in slots_before for n in _pending(value)])
        recorder = capture.Recorder()
        capture.CURRENT, schedule_cache.RECORDER, lazy_ir.HOST_READ = recorder, recorder.schedule, capture.host_read
        try:
            with capture.STAMP_SOURCES():  # once per capture: lines for profiles of replays
                result = self.fn(*args, **kwargs)
                # close the step: nothing it made stays pending, neither what it returns
                # nor the state it replaced (else a replay, which runs only the captured
                # kernels, would never compute that state)
                made = (list(autograd.tensors_in(result)) + list(state.replacements(slots_before).values())
                        + state.filled(empty))
                realize_nodes([n for t in made for n in _pending(t)])
        finally:
            capture.CURRENT, schedule_cache.RECORDER, lazy_ir.HOST_READ = None, None, None
        gc.collect()
        names_after = state.bindings(self.fn)
        changed = state.rebound_values(names_before, names_after) + state.changed_numbers(numbers_before,
                                                                                           recorder.advanced)
        if changed:  # (a replay runs no Python: `counter += 1` would never happen again)
            self._run_plainly(f"the function changes {', '.join(sorted(set(changed)))}, which a replay could not do "
                              f"(change such Python state outside the function)")
            return result
        held = []
        slots_after = state.slots(roots, held=held)
        if state.added(slots_before, slots_after, empty):
            # the call made state it had not (an optimizer's momentum on its first step
            # with momentum, a hidden state that was None): it ran the first-call branch,
            # which replays must not repeat; the next call captures from the state now
            self.unkept += 1
            if self.unkept == UNKEPT_LIMIT:
                self._run_plainly("each call makes state the last one did not have (a list that grows?)")
            return result
        self.unkept = 0
        # (a number the call itself changed is its output, not what it read: a counter)
        numbers = [entry for entry in numbers if state.unchanged(*entry)]
        step = CapturedStep(recorder, inputs, result, slots_before, roots, modules, empty, names_after,
                            held, state.frozen_flags(slots_after), modes, numbers)
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
            shapes = ", ".join(f"{tuple(s)} {d} on {dev}()" for s, d, dev, *_ in key[-1]) or "no tensor inputs"
            for step in steps:
                lines.append(f"capture for inputs [{shapes}]:")
                lines.append(step.explain())
        text = "\n".join(lines)
        print(text)
        return text


def jit(fn=None, *, max_captures: int = 8):
    """Capture a step once and replay it without building the graph in Python
    (SPEC "Captured steps"): `step = needle.jit(fn)` or `@needle.jit`."""
    if fn is None:
        return lambda f: JitFunction(f, max_captures)
    return JitFunction(fn, max_captures)


def host_call(fn, tensors, device) -> list:
    """`fn(*numpy values of tensors)` -> list of numpy arrays, returned as new constant
    Tensors on `device`.  For host work inside a training step (an MPI all-reduce):
    a step captured by needle.jit replays it between its schedules with each replay's
    buffers, where reading the tensors with `.numpy()` would refuse to be captured."""
    arrays = [realized_array(t) for t in tensors]
    results = fn(*[host_values(a) for a in arrays])
    outs = [Tensor(r, device=device, dtype=str(r.dtype), requires_grad=False) for r in results]
    recorder = capture.CURRENT
    if recorder is not None and recorder.mine():
        recorder.host(fn, arrays, [o._cached_data for o in outs], device)
    return outs
