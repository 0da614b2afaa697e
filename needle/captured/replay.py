"""A captured call and its replay (see jit.py): each schedule's leaf buffers are
bound to where their data lives now — an input, an output of an earlier schedule
of the replay, a fresh random draw, state (found where it lives, see state.py) or a
constant made inside the call — and found by the identity of their storage
(`_handle`), so views of those buffers are rebuilt as views.
"""
from __future__ import annotations

import weakref

from ..autograd import Tensor, TensorTuple
from ..errors import JitError
from ..ir.nodes import RuntimeScalar
from ..engine import capture
from . import state

INPUT, OUTPUT, DRAW, STATE, CONST, SLOT = range(6)


def realized_array(tensor):
    """The realized NDArray of a tensor (computing it if it is pending)."""
    data = tensor._cached_data
    if getattr(data, "is_lazy", False):
        data = tensor.realize_cached_data()
    return data


class _Run:
    """One schedule of a CapturedStep: the compiled entry and how to bind it."""

    __slots__ = ("entry", "device", "leaves", "scalars", "fixed")

    def __init__(self, entry, device, leaves, scalars):
        self.entry, self.device, self.leaves, self.scalars = entry, device, leaves, scalars
        #: the scalars as one tuple when none is read at each call: handed to every
        #: replay as is, so the runtime gathers their values once (cpu.py `prepare`)
        self.fixed = None if any(callable(x) for x in scalars) else tuple(scalars)

    def scalars_now(self):
        """The run-time scalars of this replay."""
        if self.fixed is not None:
            return self.fixed
        return [_Value(s()) if callable(s) else s for s in self.scalars]


class CapturedStep:
    """The schedules of one call and the bindings that replay them."""

    def __init__(self, recorder: capture.Recorder, inputs: list, result, slots_before, roots, modules,
                 empty=(), bindings=(), held=(), flags=(), modes=None, numbers=()):
        # (weakly: a method's capture must not keep its instance alive)
        self.modules = [weakref.ref(m) for m in modules]
        #: the modules' train / eval modes the call started from (`modes`), and those the call
        #: switched (a step that starts with `model.train()`), which each replay switches too
        self.training = tuple(modes if modes is not None else (m.training for m in modules))
        self.switched = [(weakref.ref(m), m.training) for m, before in zip(modules, self.training)
                         if m.training != before]
        self.numbers = list(numbers)
        #: what else a replay needs unchanged (see `matches`): the values the function's
        #: Python branched on, the slots that held None, the objects its names held, the
        #: modules and containers where they were, the parameters' requires_grad
        self.guards, self.empty, self.bindings = list(recorder.guards), list(empty), list(bindings)
        self.held, self.flags = list(held), list(flags)
        self.actions = list(recorder.actions)
        self.draws = [(fn, args, kwargs) for fn, args, kwargs, _ in recorder.draws]
        # where each buffer comes from, by the identity of its storage (`_handle`):
        # eager ops hand views (reshapes, broadcasts) of their inputs to kernels
        sources = {}
        for i, t in enumerate(inputs):
            sources.setdefault(id(realized_array(t)._handle), ((INPUT, i), realized_array(t)))
        for k, (_, _, _, array) in enumerate(recorder.draws):
            sources.setdefault(id(array._handle), ((DRAW, k), array))
        self._state_sources(recorder, slots_before, roots, sources)
        #: (input number, check) for each check of an input's values made during the call
        self.checks = [(sources[id(a._handle)][0][1], fn) for a, fn in recorder.checks
                       if sources.get(id(getattr(a, "_handle", None)), ((None,),))[0][0] == INPUT]
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
                outputs.setdefault(id(array._handle), ((OUTPUT, s, j), array))
        returned = set()
        self.result = self._template(result, outputs, returned, recorder.created_ids)
        #: (schedule, output, requires_grad) when the call returns one output as it is (the
        #: common step), rebuilt without walking the template
        self.single = ((self.result[1][0][1], self.result[1][0][2], self.result[2])
                       if self.result[0] == "tensor" and self.result[1][0][0] == OUTPUT and self.result[1][1] is None
                       else None)
        self.holders = self._holders(recorder, outputs, returned, inputs)
        #: a call that is one schedule of inputs, state and constants, returning
        #: its one output and touching nothing else (an inference step, a loss, a
        #: benchmark's call): per leaf (INPUT, STATE, SLOT or CONST; the input's number,
        #: the state Tensor, its slot or the constant array; the state's layout), replayed without the
        #: general walk (`_replay_simple`)
        run = self.runs[0] if len(self.runs) == 1 else None
        self.simple = None
        if (type(run) is _Run and not self.actions and not self.holders and self.single is not None
                and all(view is None and where[0] in (INPUT, STATE, SLOT, CONST) for where, view, _ in run.leaves)):
            self.simple = [(where[0], where[1:] if where[0] == SLOT else where[1], layout)
                           for where, _, layout in run.leaves]

    def _state_sources(self, recorder, slots_before, roots, sources) -> None:
        """Sources of the state the call read: the Tensor read (a parameter), or what
        replaced it in its container (a module attribute, an optimizer's dict entry),
        found at each replay in that container."""
        replaced = state.replacements(slots_before)
        self.slot_of = slot_of = state.slot_of(state.slots(roots))
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
            where = (SLOT,) + slot_of[id(anchor)] if id(anchor) in slot_of else (STATE, anchor)
            sources[id(array._handle)] = (where, array)

    @staticmethod
    def _bind(leaf, outputs, sources):
        """(where, view, layout to check): how a replay finds this leaf buffer."""
        found = outputs.get(id(leaf._handle)) or sources.get(id(leaf._handle))
        if found is None:
            return ((CONST, leaf), None, None)  # made inside the call: a constant
        where, base = found
        view = None if _layout(leaf) == _layout(base) else (leaf.shape, leaf.strides, leaf.offset)
        return (where, view, _layout(base) if where[0] in (STATE, SLOT) else None)

    def _template(self, value, outputs, returned, made_here):
        """The return value with each Tensor the call made replaced by where a replay
        finds its value (a new Tensor each replay, so earlier results stay valid);
        Tensors that existed before (inputs, parameters) are handed back as they are."""
        if isinstance(value, Tensor):
            found = _locate(value._cached_data, outputs)
            if found is not None and id(value) in made_here:
                returned.add(id(value))
                return ("tensor", found, value.requires_grad)
            return (CONST, value)
        if isinstance(value, (list, tuple)) and not isinstance(value, TensorTuple):
            return ("seq", type(value), [self._template(v, outputs, returned, made_here) for v in value])
        if isinstance(value, dict):
            return ("dict", [(k, self._template(v, outputs, returned, made_here)) for k, v in value.items()])
        return (CONST, value)

    def _holders(self, recorder, outputs, returned, inputs) -> list:
        """(how to find the Tensor, position in its tuple data or None, whether it
        requires grad, where its new value is) for every live Tensor, other than the
        returned ones, that holds a result of the call.  One found in a container is
        looked up there at each replay (and made anew there if the slot is empty then:
        gradients after a `reset_grad()` outside the function); an input's gradient
        is found on that replay's input (`find` is the input's number)."""
        candidates = [r() for r in recorder.created] + [ref() for ref, _, _ in recorder.readers.values()]
        input_grads = {id(t.grad): i for i, t in enumerate(inputs) if t.grad is not None}
        holders, seen = [], set()
        for t in candidates:
            if t is None or id(t) in seen or id(t) in returned:
                continue
            seen.add(id(t))
            data = t._cached_data
            for pos, x in enumerate(data if isinstance(data, tuple) else (data,)):
                found = _locate(x, outputs)
                if found is not None:
                    find = (input_grads[id(t)] if id(t) in input_grads else self.slot_of[id(t)]
                            if id(t) in self.slot_of else weakref.ref(t))
                    if type(find) is tuple and find[2] is not None:  # in a tuple: the pos, of how many
                        find = (find[0], find[1], (find[2], len(find[0][find[1]])))
                    holders.append((find, pos if isinstance(data, tuple) else None, t.requires_grad, found))
        return holders

    # ---- replay ----------------------------------------------------------------------------
    def matches(self) -> bool:
        """Whether this capture is what the function would do now: its modules in the
        same train / eval modes, its guards' values the same (an optimizer's momentum
        still zero or not), its parameters' requires_grad the same, the numbers in dicts
        it names the same, the slots that held None still empty, its modules and
        containers where they were (no submodule swapped), and its names bound to the
        same objects."""
        for m, training in zip(self.modules, self.training):  # (no generator: every call)
            m = m()
            if m is None or m.training != training:
                return False
        for read, value in self.guards:
            if read() != value:
                return False
        for t, flag in self.flags:
            if t.requires_grad != flag:
                return False
        for container, key, value in self.numbers:
            if not state.unchanged(container, key, value):
                return False
        return state.still_empty(self.empty) and state.still_held(self.held) and not state.rebound(self.bindings)

    def switch_modes(self) -> None:
        """The train / eval switches the captured call made (none, usually)."""
        for ref, training in self.switched:
            m = ref()
            if m is not None:
                m.training = training

    def replay(self, arrays: list, inputs=()):
        """Run the captured schedules on this call's input arrays (realized NDArrays;
        `inputs`: their Tensors)."""
        for i, check in self.checks:  # (bad labels raise here, as without needle.jit)
            check(host_values(arrays[i]))
        if self.simple is not None:
            return self._replay_simple(arrays)
        draws, done = [], 0
        outs = []
        for s, run in enumerate(self.runs):
            done = self._act(done, s, draws)  # (draws and callbacks made before this schedule ran)
            leaves = []
            for where, view, layout in run.leaves:
                kind = where[0]  # (state in a slot, inputs and earlier outputs inline: the most common)
                if kind == SLOT:
                    base = _state_now(state.in_slot(where[1], where[2], where[3]), layout)
                    if base is STALE:
                        return STALE
                elif kind == INPUT:
                    base = arrays[where[1]]
                elif kind == OUTPUT:
                    base = outs[where[1]][where[2]]
                else:
                    base = _find(where, arrays, outs, draws)
                    if layout is not None and _layout(base) != layout:
                        return STALE  # state changed layout since the capture: capture again
                leaves.append(base if view is None else base._view(*view))
            if type(run) is _HostRun:
                outs.append(run.call(leaves))
                continue
            outs.append(run.entry.run(leaves, run.scalars_now(), run.device))
        self._act(done, len(self.runs), draws)  # (a scheduler's step after the optimizer's)
        refilled = {}  # emptied slots of tuples: (container, key) -> the tuple's new Tensors
        for find, pos, requires_grad, (where, view, _) in self.holders:
            container = in_tuple = None
            if type(find) is int:  # the gradient of input `find`
                container, key = state.GradOf(inputs[find]), "grad"
                t = inputs[find].grad
            elif callable(find):
                t = find()
            else:
                container, key, in_tuple = find
                t = state.in_slot(container, key, None if in_tuple is None else in_tuple[0])
            if t is None and (container is None or pos is not None):
                continue  # (the Tensor is gone, or a position of its own tuple data: nothing to update)
            new = outs[where[1]][where[2]] if where[0] == OUTPUT else _find(where, arrays, outs, draws)
            new = new if view is None else new._view(*view)
            if t is None and in_tuple is not None:  # an emptied tuple slot: made anew, below
                refilled.setdefault((id(container), key), (container, key, [None] * in_tuple[1]))[2][in_tuple[0]] = \
                    Tensor.make_const(new, requires_grad=requires_grad)
            elif t is None:  # an emptied slot gets the value anew, as a call of the function would
                container[key] = Tensor.make_const(new, requires_grad=requires_grad)
            elif pos is None:
                t._cached_data = new
            else:
                t._cached_data = t._cached_data[:pos] + (new,) + t._cached_data[pos + 1:]
        for container, key, tensors in refilled.values():
            if all(t is not None for t in tensors):
                container[key] = tuple(tensors)
        if self.single is not None:
            s, j, requires_grad = self.single
            return Tensor.make_const(outs[s][j], requires_grad=requires_grad)
        return self._rebuild(self.result, arrays, outs, draws)

    def _act(self, done: int, upto: int, draws: list) -> int:
        """Run the recorded actions from number `done` that came before schedule `upto`;
        returns the number done."""
        actions = self.actions
        while done < len(actions) and actions[done][2] <= upto:
            kind, what, _ = actions[done]
            if kind == "draw":
                fn, args, kwargs = self.draws[what]
                draws.append(realized_array(fn(*args, **kwargs)))
            else:
                what()
            done += 1
        return done

    def _replay_simple(self, arrays: list):
        """`replay` of a `simple` step: its leaves are this call's inputs, state found
        where it was (a layout changed since the capture: STALE) and constants."""
        leaves = []
        for kind, what, layout in self.simple:
            if kind == INPUT:
                leaves.append(arrays[what])
            elif kind == CONST:
                leaves.append(what)
            else:
                base = _state_now(state.in_slot(*what) if kind == SLOT else what, layout)
                if base is STALE:
                    return STALE
                leaves.append(base)
        run = self.runs[0]
        _, j, requires_grad = self.single
        return Tensor.make_const(run.entry.run(leaves, run.scalars_now(), run.device)[j], requires_grad=requires_grad)

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
        kinds = {INPUT: "input", OUTPUT: "earlier output", DRAW: "random draw", STATE: "state",
                 SLOT: "state", CONST: "constant"}
        schedules = [r for r in self.runs if type(r) is _Run]
        lines = [f"  {len(schedules)} schedule(s), {sum(len(r.entry.schedule.calls) for r in schedules)} kernel(s), "
                 f"{len(self.runs) - len(schedules)} host call(s), "
                 f"{len(self.holders)} state tensor(s) updated in place, {len(self.draws)} random draw(s), "
                 f"{sum(1 for k, _, _ in self.actions if k == 'call')} replay callback(s)"]
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


def _state_now(held, layout):
    """The realized array of state `held` (a Tensor, or None where its slot was
    emptied), or STALE when it is gone or changed layout since the capture: then the
    function is captured again."""
    if held is None:
        return STALE
    base = realized_array(held)
    return STALE if _layout(base) != layout else base


def _layout(array) -> tuple:
    return (array._shape, array._strides, array._offset, array._dtype)


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
    if kind == SLOT:
        return realized_array(state.in_slot(where[1], where[2], where[3]))
    if kind == STATE:
        return realized_array(where[1])
    if kind == INPUT:
        return arrays[where[1]]
    if kind == OUTPUT:
        return outs[where[1]][where[2]]
    if kind == DRAW:
        return draws[where[1]]
    return where[1]


class _HostRun:
    """A host call of a CapturedStep: numpy in, numpy out, new buffers on `device`."""

    __slots__ = ("fn", "device", "leaves")

    def __init__(self, fn, device, leaves):
        self.fn, self.device, self.leaves = fn, device, leaves

    def call(self, arrays) -> list:
        results = self.fn(*[host_values(a) for a in arrays])
        return [realized_array(Tensor(r, device=self.device, dtype=str(r.dtype), requires_grad=False)) for r in results]


def host_values(array):
    """An array's values as numpy (NEEDLE_BACKEND=np holds numpy arrays already)."""
    return array.numpy() if hasattr(array, "_handle") else array


class _Value:
    """A run-time scalar's value for one replay (what a Scalar offers the runtime)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


STALE = object()  # a replay found state gone or with another layout: capture again
