"""`needle.jit(fn)`: capture a step once, replay its kernels without running `fn`'s
Python, and never be silently different from a plain call (SPEC "Captured steps").

Everything a capture depends on is one of:

- an **input**: every Tensor, numpy array and NDArray among the arguments (inside
  lists, tuples and dicts too), bound by position at each call; shapes, dtypes,
  which arguments are the same object, and every other argument (numbers, strings,
  objects by identity) make up the key;
- **state**: Tensors `fn` reads without receiving them, found where they live
  (world.py), updated at each replay as a plain call would;
- a **guard**: the Python values reachable from `fn` (world.py), checked before a
  replay does anything; a change selects or makes another capture;
- a reason to **run plainly**, with a warning naming it: host effects found while
  capturing (tracing.py: print, time, numpy's RNG used directly, a numpy computation
  on an argument), a result differentiated after the call, a step that keeps
  changing what it depends on.

Call 1 runs `fn` plainly (optimizers make their state); call 2 runs it under a
Recorder and a Tracer and builds a CapturedStep (build.py); later calls whose key and
guards match replay it (step.py).  `verify=N` checks the first N replays against
plain calls (verify.py).
"""
from __future__ import annotations

import copy
import functools
import os
import random
import sys
import threading
import types
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from .. import autograd, config
from ..autograd import Tensor, tensors_in
from ..errors import JitError
from ..engine import capture
from ..engine.realize import pending_nodes, realize_nodes
from . import verify as verifying, world_effects
from .build import Unsupported, build
from .step import FAILS, STALE
from .arguments import Call, Plain, traced_arguments, untraced
from .numpy_args import TracedArray
from .code import global_names
from .places import same_rng_state
from .records import realized_array
from .tracing import Tracer
from .world import World

_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: captures in a row that changed what they depend on (`self.seen += 1`), after which
#: a function runs plainly
UNKEPT_LIMIT = 2
#: calls in a row that captured, as a multiple of max_captures, after which a function
#: that never replays runs plainly
MISSES_LIMIT = 2
#: changes of each numpy argument's values checked against a plain call (see _replay)
CHANGES_CHECKED = 3
#: calls in a row that captured because a Python number argument had a new value, or
#: because the same guard had (a step counter kept on the model), after which a function
#: runs plainly (each capture costs more than the plain call it replaces)
NEW_NUMBERS_LIMIT = 3


class _Running(threading.local):
    depth = 0  # calls of jitted functions running on this thread


_RUNNING = _Running()

#: numpy arguments of a capture call kept, up to this many bytes, to check its first replay
#: with other values against a plain call (a batch; a whole dataset passed at every call,
#: compared at every call, would cost more than the check is worth)
FIRST_VALUES_BYTES = 16 << 20

#: instances whose captures a jitted method keeps (the least recently used go first; a
#: capture may hold its instance, so they would not go with it; see JitFunction.__get__)
BOUND_INSTANCES = 32


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


class _BoundJit:
    """`obj.step` for a jitted method: the instance's JitFunction (which holds the
    instance weakly), with the instance held while this lives, as a bound method holds
    it (`Trainer(model).step(x)`: nothing else holds that Trainer)."""

    __slots__ = ("jit", "__self__")

    def __init__(self, jit, obj):
        object.__setattr__(self, "jit", jit)
        object.__setattr__(self, "__self__", obj)

    def __call__(self, *args, **kwargs):
        return self.jit(*args, **kwargs)

    def __getattr__(self, name):  # (reset(), explain(), calls, replays, __doc__, __wrapped__, ...)
        return getattr(self.jit, name)

    def __setattr__(self, name, value):  # (`trainer.step.verify = 2`)
        setattr(self.jit, name, value)

    def __eq__(self, other):  # (as bound methods: `callbacks.remove(trainer.step)`)
        return isinstance(other, _BoundJit) and other.jit is self.jit and other.__self__ is self.__self__

    def __hash__(self):
        return hash((id(self.jit), id(self.__self__)))

    @property
    def __doc__(self):
        return self.jit.__doc__


class JitFunction:
    """`fn` with captured steps; see the module docstring and SPEC "Captured steps"."""

    holds_no_state = True  # a world does not walk into it

    def __init__(self, fn, max_captures: int = 8, verify: int = 0):
        if not callable(fn) and not isinstance(fn, classmethod):
            raise JitError(f"needle.jit: expected a function, got {type(fn).__name__}")
        if not isinstance(max_captures, int) or max_captures < 1:
            raise JitError(f"needle.jit: max_captures must be a positive integer, got {max_captures!r}")
        if not isinstance(verify, int) or verify < 0:
            raise JitError(f"needle.jit: verify must be a non-negative integer, got {verify!r}")
        self.fn, self.max_captures = fn, max_captures
        self._static = isinstance(fn, staticmethod)  # (@needle.jit over @staticmethod: a plain function)
        if self._static:
            self.fn = fn = fn.__func__
        self._lock = threading.RLock()
        self.verify = verify or int(os.environ.get("NEEDLE_JIT_VERIFY", "0") or 0)
        functools.update_wrapper(self, fn)
        self.reset()

    def __deepcopy__(self, memo):
        """A copy of the function (and what it is bound to), without the captures: the copy
        captures its own (a trainer holding a jitted closure, deep-copied)."""
        return JitFunction(copy.deepcopy(self.fn, memo), self.max_captures, self.verify)

    def reset(self) -> None:
        """Drop every capture; the next call runs the function plainly again."""
        self.captures: "OrderedDict[object, list]" = OrderedDict()
        self.calls = self.replays = self.verified = 0
        self.unkept = 0    # captures in a row that changed what they depend on
        self.misses = 0    # calls in a row that captured instead of replaying
        self.new_numbers = 0  # ... because a number argument was new (see _numbers_changed)
        self.guard_misses, self._last_guard = 0, None  # ... because the same guard changed
        self._last_key = None
        self.plain = False
        self._results = []  # (weak Tensor returned with a graph, its .grad then)
        self._told_pending = False
        self._left = weakref.WeakSet()  # gradients the last capture left pending (see _close)

    def __get__(self, obj, objtype=None):
        """@needle.jit on a method: captures per instance (by identity: two instances that
        compare equal are two, and an unhashable one is one too), for the BOUND_INSTANCES
        used last, each dropped when its instance goes."""
        fn = self.fn
        if self._static:
            return self
        if isinstance(fn, classmethod):
            obj, fn = objtype if objtype is not None else type(obj), fn.__func__
        if obj is None:
            return self
        bound = self.__dict__.setdefault("_bound", OrderedDict())  # id(obj) -> (reference, JitFunction)
        entry = bound.get(id(obj))
        if entry is not None and entry[0]() is obj:
            bound.move_to_end(id(obj))
            return _BoundJit(entry[1], obj)
        try:  # (forgotten when the instance goes, unless its captures hold it)
            ref = weakref.ref(obj, lambda _, key=id(obj), bound=bound: bound.pop(key, None))
            method = _WeakMethod(fn, obj)
        except TypeError:  # (no weak references to it: held)
            ref, method = (lambda obj=obj: obj), types.MethodType(fn, obj)
        bound[id(obj)] = entry = (ref, JitFunction(method, self.max_captures, self.verify))
        while len(bound) > BOUND_INSTANCES:  # (the least recently used instance's captures go)
            bound.popitem(last=False)
        return _BoundJit(entry[1], obj)

    @property
    def name(self) -> str:
        fn = getattr(self.fn, "__func__", self.fn)
        code = getattr(fn, "__code__", None)
        where = f" at {code.co_filename}:{code.co_firstlineno}" if code is not None else ""
        return f"{getattr(self.fn, '__qualname__', type(self.fn).__name__)}{where}"

    def __call__(self, *args, **kwargs):
        if not config.JIT or not autograd.lazy_mode() or self.plain or _RUNNING.depth:
            # (eager ops compute outside kernels; a jitted function called while another call of
            # a jitted function runs on this thread, or of itself, runs inline: a plain call's
            # inner calls are plain, a capture's are captured, a replay runs none)
            return self.fn(*args, **kwargs)
        with self._lock:  # (one call at a time: a capture's world is one)
            _RUNNING.depth += 1
            try:
                return self._call(args, kwargs)
            finally:
                _RUNNING.depth -= 1

    def _call(self, args, kwargs):
        self.calls += 1
        if self._differentiated_outside():
            self._run_plainly("its result was differentiated after the call (backward() outside the jitted "
                              "function needs the graph a replay does not build: move backward() and "
                              "opt.step() inside)")
            return self.fn(*args, **kwargs)
        try:
            call = Call(args, kwargs)
        except Plain:
            return self.fn(*args, **kwargs)
        self._computed_first(call.pending)
        if self.calls == 1:  # the warm-up (optimizers make their state)
            return self._remember(self.fn(*args, **kwargs))
        why, last = None, None
        for step in self.captures.get(call.key, ()):
            last, why = step, step.why_not()
            if why is None:
                result = self._replay(step, call, args, kwargs)
                if result is not STALE:
                    return result
                why = (None, "a state tensor changed layout or storage")
        self.misses += 1
        changed = _number_changed(self._last_key, call.key) if last is None else None
        self.new_numbers, self._last_key = (self.new_numbers + 1 if changed else 0), call.key
        if self.new_numbers >= NEW_NUMBERS_LIMIT:
            self._run_plainly(f"the Python number in {changed} has a new value at every call, and a number argument "
                              "is part of what a capture is for (Python code may branch on it): pass it as a "
                              "Tensor (needle.Tensor(value)) or a numpy array, which are inputs")
            return self.fn(*args, **kwargs)
        if last is not None and why[0] in last.changes:  # (the capture changed what it depends on)
            self.unkept += 1
            if self.unkept >= UNKEPT_LIMIT:
                self._run_plainly(f"each call changes {why[1]}, which a replay could not do (keep such Python "
                                  "state outside the jitted function)")
                return self.fn(*args, **kwargs)
        else:
            self.unkept = 0
            same = last is not None and why[0] is not None and why[0] == self._last_guard
            self.guard_misses = self.guard_misses + 1 if same else 1
            self._last_guard = why[0] if last is not None else None
            if self.guard_misses >= NEW_NUMBERS_LIMIT:
                self._run_plainly(f"{why[1]}: it is new at each of the last {self.guard_misses} calls, and each value "
                                  "needs a capture of its own (a Python value the step reads is a guard; a value the "
                                  "step computes with belongs in a Tensor, which is state or an input)")
                return self.fn(*args, **kwargs)
        if self.misses > MISSES_LIMIT * self.max_captures:
            self._run_plainly(f"{self.misses - 1} calls in a row made new captures and none replayed (last "
                              f"change: {why[1] if why else 'new arguments'}; a non-Tensor argument new at every "
                              "call?)")
            return self.fn(*args, **kwargs)
        return self._capture(call, args, kwargs)

    def _replay(self, step, call, args, kwargs):
        if len(self.captures) > 1:
            self.captures.move_to_end(call.key)
        # Checked against a plain call: each capture's first replay, and every replay where
        # a numpy argument has new values, for each argument's first CHANGES_CHECKED changes
        # (numpy may compute from it where needle cannot see: TABLE[labels] indexes another
        # array with it in C; the first replays may have had the same labels, or a change
        # that the table maps alike)
        changed = _changed_values(step.unchecked, call.values) if step.unchecked else ()
        new_values = bool(changed)
        first = step.replays == 0
        if self.verified < self.verify or first or new_values:
            checked = verifying.check(self, step, call, args, kwargs)
            if checked is STALE:
                return checked
            if checked is FAILS:  # (bad input data: the plain call raises as it does without needle.jit)
                return self.fn(*args, **kwargs)
            result, difference = checked
            if new_values and difference is None:
                for k in changed:
                    left = step.unchecked[k][1] - 1
                    if left:
                        step.unchecked[k] = (np.array(call.values[k], copy=True), left)
                    else:
                        del step.unchecked[k]
            if self.verified < self.verify:
                self.verified += 1
                if difference is not None:
                    raise JitError(f"needle.jit({self.name}): verify: replay {self.replays + 1} (call {self.calls}) "
                                   f"differs from a plain call in {difference}; please report this with your step "
                                   "(NEEDLE_JIT=0 runs plainly)")
            elif difference is not None:
                graphs = [k for k, x in enumerate(call.inputs) if x.op is not None and x.requires_grad]
                cause = (f"tensor argument {graphs[0]} carries the graph of earlier calls, which backward() "
                         "reaches (detach() it, as a hidden state carried between steps)") if graphs else \
                    ("the step depends on something needle does not follow (numpy computing from an argument "
                     "where needle could not see, state outside Python objects?)")
                self._run_plainly(f"its first replay{'' if first else ' with new numpy argument values'} "
                                  f"differed from a plain call in {difference}: {cause}")
                return result
        else:
            result = step.replay(call)
        self._computed_first(step.found_pending)
        step.found_pending.clear()
        if result is FAILS:  # (bad input data: the plain call raises as it does without needle.jit)
            return self.fn(*args, **kwargs)
        if result is not STALE:
            self.replays += 1
            self.misses = self.unkept = self.guard_misses = 0
        return result

    def _run_plainly(self, why: str) -> None:
        """From now on (until reset()) every call runs the function, saying why."""
        self.plain = True
        self._warn(f"{why}; it runs without capture from now on (reset() tries again)")

    def _computed_first(self, what: list) -> None:
        """Say once that values the call reads were still pending when it started (computed
        outside it: a gradient from a backward() before the call, an argument built by lazy
        ops): the call computes them first, a plain lazy call computes them in the step's
        own schedule, and a sum's last bits depend on the kernel that computes it."""
        if what and not self._told_pending:
            self._told_pending = True
            self._warn(f"{', '.join(dict.fromkeys(what))} {'was' if len(what) == 1 else 'were'} still pending when "
                       "the call started, so it computes them first, where a call without needle.jit computes "
                       "them together with the step: their sums may round differently in the last bits. Realize "
                       "them before the call (needle.realize(...) or .realize()) to make the two runs the same")

    def _read_after_pending(self, world, step) -> list:
        """The paths of the state the capture found pending and computed first (a sum),
        that its schedules read, but for what the last capture left pending itself (a
        plain call leaves that alike)."""
        used = {i for run in step.runs for i in run.index if i < len(step.sources)}  # (sources lead the pool)
        read = {id(s.where.initial if s.kind == "slot" else s.where) for k, s in enumerate(step.sources)
                if k in used and s.kind in ("slot", "object")}
        return [path for t, path in world.computed_first if id(t) in read and t not in self._left]

    def _warn(self, what: str) -> None:
        frame, level = sys._getframe(0), 1  # (the warning names the user's line)
        while frame is not None and frame.f_code.co_filename.startswith(_NEEDLE_DIR):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"needle.jit({self.name}): {what}", stacklevel=level)

    def _remember(self, result):
        """Note returned Tensors that carry a graph: a backward() through one of them
        after the call means the graph was needed (see `_differentiated_outside`)."""
        self._results = [(weakref.ref(t), t.grad) for t in tensors_in(result)
                         if t.op is not None and t.requires_grad]
        return result

    def _differentiated_outside(self) -> bool:
        for ref, grad in self._results:
            t = ref()
            if t is not None and t.grad is not grad:
                return True
        self._results = []
        return False

    # ---- capture ------------------------------------------------------------------------------
    def _world(self, call) -> World:
        """The world before the call: what `fn` is bound to, and the object arguments
        (the globals of the code it runs join while it runs, see tracing.Tracer)."""
        world, fn = World(), self.fn
        if isinstance(fn, functools.partial):
            world.add(fn, "partial")
        elif hasattr(fn, "__func__"):  # a bound method (or a weakly bound one)
            world.add(fn.__self__, "self")
            if isinstance(fn.__func__, types.FunctionType):
                world.add_function(fn.__func__, "")
        elif isinstance(fn, types.FunctionType):
            world.add_function(fn, "")
        else:
            world.add(fn, type(fn).__name__)  # a callable object
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is not None:
            world.add_globals(getattr(fn, "__func__", fn).__globals__, global_names(code))
        for i, x in call.objects():
            world.add(x, f"<argument {i}>")
        world.settle(_realize_now)
        with capture.recording(None):  # (what the last call left to compute with the next schedule,
            realize_nodes([])           # state the world may find only while the call runs: not captured)
        return world

    def _capture(self, call, args, kwargs):
        hook = sys.getprofile()
        if not capture.can_give_back(hook):  # (the Tracer takes the hook for the call)
            self._warn(f"a profiler whose hook needle cannot give back ({type(hook).__name__}) is on, so this call "
                       "runs without capture (calls after the profiler ends are captured)")
            return self.fn(*args, **kwargs)
        world = self._world(call)
        if world.unguardable:
            self._run_plainly(world.unguardable)
            return self.fn(*args, **kwargs)
        for t in call.inputs:
            world.initial.setdefault(id(t), realized_array(t))
        rng, py_rng = np.random.get_state(), random.getstate()
        call.watch_attributes()
        recorder = capture.Recorder()
        tracer = Tracer(world, lambda: world.settle(_realize_now, recorder.created_ids))
        args, kwargs, restore = traced_arguments(call, args, kwargs, tracer)
        try:
            with capture.recording(recorder), tracer, capture.STAMP_SOURCES():
                result = self.fn(*args, **kwargs)
                self._left = weakref.WeakSet(_close(result, world, call))
        finally:
            restore()
        if recorder.refused:  # the step caught the error a value read raised and went on
            self.plain = True
            raise JitError(f"needle.jit({self.name}): the step caught this error and went on, so this call did "
                           f"not do what a plain call does: {recorder.refused[0]} (it runs plainly from now "
                           "on)") from recorder.refused[0]
        world.library_classes()
        why = world.unguardable or _host_effects(recorder, tracer, world, rng, py_rng) or call.changed_containers()
        world.exempt_keys(*_exemptions(recorder, tracer, world))
        world.unguard_grads(recorder.grads_set, {id(t) for t, _ in recorder.readers.values()})
        try:
            if why is None:
                holders = list(world.holders) + [t for t in call.inputs if id(t) not in world._holder_ids]
                step = build(recorder, call, world, world.initial, result, holders, recorder.created_ids)
                step.shape_checks = list(tracer.shape_reads.values())
                self._computed_first(self._read_after_pending(world, step))
        except Unsupported as e:
            why = str(e)
        world.built()
        result = untraced(result, call)
        for container, key, now in world_effects.diff(world) if call.values else ():  # (what it kept: the user's arrays)
            if isinstance(now, TracedArray):
                container[key] = untraced(now, call)
        if why is not None:
            self._run_plainly(why if why == world.unguardable else f"{why}, which a replay cannot repeat")
            return result
        self._remember(result)
        if call.values and sum(v.nbytes for v in call.values.values()) <= FIRST_VALUES_BYTES:
            step.unchecked = {k: (np.array(v, copy=True), CHANGES_CHECKED) for k, v in call.values.items()}
        self.captures.setdefault(call.key, []).append(step)
        self.captures.move_to_end(call.key)
        while sum(len(v) for v in self.captures.values()) > self.max_captures:
            oldest = next(iter(self.captures))
            self.captures[oldest].pop(0)
            if not self.captures[oldest]:
                del self.captures[oldest]
        return result

    def explain(self) -> str:
        """The captured kernels, buffers, state and guards, one block per capture (also printed)."""
        lines = [f"needle.jit({self.name}): {self.calls} call(s), {self.replays} replay(s), "
                 f"{sum(len(v) for v in self.captures.values())} capture(s)" + (" (runs plainly)" if self.plain else "")]
        for key, steps in self.captures.items():
            shapes = ", ".join(f"{tuple(s[0])} {s[1]} on {s[2]}()" for s in key[1]) or "no tensor inputs"
            for step in steps:
                lines.append(f"capture for inputs [{shapes}]:")
                lines.append(step.explain())
        text = "\n".join(lines)
        print(text)
        return text


def _realize_now(tensors) -> None:
    """Compute `tensors` outside any recording (state earlier calls left pending)."""
    with capture.recording(None):
        for t in tensors:
            t.realize_cached_data()


def _pending(value) -> list:
    return [n for t in (value if isinstance(value, tuple) else (value,)) if isinstance(t, Tensor)
            for n in pending_nodes(t)]


def _changed_values(unchecked: dict, now: dict) -> list:
    """The numpy arguments (by position) whose values differ from the last checked ones."""
    return [k for k, (a, _) in unchecked.items() if not np.array_equal(a, now[k])]


def _number_changed(before, now):
    """The arguments ("argument 1", "argument 'lr'") in which `now`, a call's key,
    differs from the key `before` by Python numbers only, or None."""
    if before is None or before[1:] != now[1:] or len(before[0][0]) != len(now[0][0]) or \
            len(before[0][1]) != len(now[0][1]):
        return None
    (args0, kwargs0), (args1, kwargs1) = before[0], now[0]
    pairs = [(f"argument {i}", a, b) for i, (a, b) in enumerate(zip(args0[1:], args1[1:]))]
    pairs += [(f"argument {a[0]!r}", a[1], b[1]) for a, b in zip(kwargs0[1:], kwargs1[1:])]
    changed = [name for name, a, b in pairs if a != b]
    if not changed or not all(_numbers_only(a, b) for name, a, b in pairs if name in changed):
        return None
    return " and ".join(changed)


def _numbers_only(a, b) -> bool:
    """Whether two argument templates differ in Python numbers only."""
    if a == b:
        return True
    if type(a) is not tuple or type(b) is not tuple or len(a) != len(b):
        return False
    if len(a) == 2 and a[0] in (int, float) and b[0] is a[0]:
        return True
    return all(_numbers_only(x, y) for x, y in zip(a, b))


def _close(result, world, call) -> None:
    """Nothing the call made stays pending: what it returns, the state it replaced, the
    new data and gradients of what existed, so that its kernels are all captured.

    Computed as a plain call's would be after it (a sum's last bits depend on what is
    computed with it): first the state that outlives the step (engine.realize_later:
    the loss and gradients after backward, `.data` assigned, module state), which the
    next schedule computes whatever the user reads; then each other value on its own,
    as reading it would (`p.grad_norm = ...` read after the call)."""
    realize_nodes([])
    made = []
    for t in tensors_in(result):  # (with the gradient a replay gives a returned tensor again)
        made += [t, t.grad]
    made += [now for _, _, now in world_effects.diff(world) if isinstance(now, (Tensor, tuple))]
    for t in list(tensors_in(made)):  # (and the tensors among the user's attributes on them)
        made += tensors_in(list(object.__getattribute__(t, "__dict__").values()))
    for t in list(world.holders) + call.inputs:
        made += [t, t.grad]
    for t in made:
        if t is not None:
            nodes = _pending(t)
            if nodes:
                realize_nodes(nodes)
    for t in list(world.holders) + call.inputs:  # (the realized buffers, not their lazy nodes)
        if getattr(t._cached_data, "is_lazy", False):
            t.realize_cached_data()
    return [t.grad for t in tensors_in(made) if isinstance(t.grad, Tensor) and _pending(t.grad)]


def _host_effects(recorder, tracer, world, rng, py_rng):
    """Why a replay could not repeat the call, or None."""
    if recorder.host_effects:
        what, line = recorder.host_effects[0]
        return f"the step {what} at {line}"
    if tracer.effects:
        what, line = tracer.effects[0]
        return f"the step calls {what} at {line}"
    written = world.big_array_changed()  # (a replay would not write it again)
    if written is not None:
        return f"the step writes the numpy array at {written[1]}, too big to guard by its values"
    after = np.random.get_state()
    np.random.set_state(rng)  # (needle's own draws, made again, must account for every use)
    for fn, args, kwargs, _ in recorder.draws:
        fn(*args, **kwargs)
    ours = np.random.get_state()
    np.random.set_state(after)
    if not same_rng_state(ours, after):
        return "the step draws from numpy's global RNG directly (np.random.*; use needle.init.rand/randn)"
    if not same_rng_state(random.getstate(), py_rng):
        return "the step draws from Python's random module"
    changed = world.rng_changes()
    if changed:
        return f"the step draws from the random generator {changed[0]}"
    return None


#: what user code may call on an object whose attributes are read at each replay
#: or advanced by replay callbacks (anything else may hand those values to Python)
STEP_METHODS = {"step", "reset_grad", "zero_grad"}


def _exemptions(recorder, tracer, world):
    """(id(container), key) of the attributes that are neither guards nor effects, and
    those of them the replay callbacks advance.  An attribute is exempt when needle
    reads it at each replay (an optimizer's lr) or a replay callback advances it (Adam's
    t, a scheduler's epoch), the call does not write it otherwise, no user code reads it
    by name, and user code calls nothing but `step`/`reset_grad` on its object."""
    exempt, advanced = set(), set()
    changed = {(id(c), k) for c, k, _ in world_effects.diff(world)}

    def allowed(obj):
        return tracer.touched.get(id(obj), set()) <= STEP_METHODS and getattr(obj, "__dict__", None) is not None

    for obj, names in recorder.live if not tracer.dynamic else ():  # (names looked up at run time: all guards)
        if allowed(obj):
            d = obj.__dict__
            exempt |= {(id(d), n) for n in names if n in d and n not in tracer.attributes and (id(d), n) not in changed}
    for obj in recorder.advanced:
        if allowed(obj):
            d = obj.__dict__
            advanced |= {(i, k) for i, k in changed if i == id(d) and k not in tracer.attributes}
    return exempt | advanced, advanced


def jit(fn=None, *, max_captures: int = 8, verify: int = 0):
    """Capture a step once and replay it without building the graph in Python
    (SPEC "Captured steps"): `step = needle.jit(fn)` or `@needle.jit`."""
    if fn is None:
        return lambda f: JitFunction(f, max_captures, verify)
    return JitFunction(fn, max_captures, verify)


def host_call(fn, tensors, device) -> list:
    """`fn(*numpy values of tensors)` -> list of numpy arrays, returned as new constant
    Tensors on `device`.  For host work inside a training step (an MPI all-reduce):
    a step captured by needle.jit replays it between its schedules with each replay's
    buffers, where reading the tensors with `.numpy()` would refuse to be captured."""
    arrays = [realized_array(t) for t in tensors]
    results = fn(*[a.numpy() if hasattr(a, "_handle") else a for a in arrays])
    outs = [Tensor(r, device=device, dtype=str(r.dtype), requires_grad=False) for r in results]
    capture.host(fn, arrays, [o._cached_data for o in outs], device)
    return outs
