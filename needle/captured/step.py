"""A captured call and its replay, as data.

Every leaf buffer of every schedule is bound to where its data comes from at each
replay (found at capture by the identity of its storage, `_handle`, so views are
rebuilt as views):

- a **source**, resolved before anything runs: a Tensor argument's array, a numpy
  argument converted as the call converted it, or state (the Tensor in a slot of the
  world, or a Tensor read that lives nowhere the world reaches);
- an **output** of an earlier schedule of the same replay;
- a random **draw**, made afresh in the order the call made it;
- a **constant** made inside the call.

A replay runs in three phases: resolve (every source found, its layout and aliasing
as at capture, input checks made; nothing changed yet, so a replay that cannot happen
changes nothing), run (draws, callbacks and schedules in the captured order), write
(the effects: state Tensors' new data, slots given new Tensors, Python values, the
return value, each made anew so earlier results stay valid).
"""
from __future__ import annotations

import collections
from operator import attrgetter, is_

from ..autograd import Tensor
from ..engine.realize import pending_sums
from . import world_guards
from .places import ALL, MISSING, GradOf, Slot, where_of
from .records import (CONST, DRAW, OUT, REPLAYED, SRC, ShapeChanged, host_values, host_run, layout, place_in_pool,
                      realized_array, templates_in)
STALE = object()  # a replay found a source gone or changed: the call takes another capture
FAILS = object()  # an input check failed: the call runs plainly (and raises where a plain call does)


class CapturedStep:
    """The schedules of one captured call, its guards and its effects."""

    def __init__(self, world, sources, runs, actions, draws, guards, checks, writes, result, input_ids):
        self.world = world
        self.sources = sources      # [Source]
        self.runs = runs            # [Run]
        self.actions = actions      # [("draw", k, upto) | ("call", callback, upto)]
        self.draws = draws          # [(fn, args, kwargs)]
        self.guards = guards        # [(read, value)]
        self.checks = checks        # [(source number, fn(numpy values))]
        self.consts, self._place = place_in_pool(sources, runs, actions, writes, result)
        placed = {}  # (one placed template per template: an object stored and returned stays one)
        writes = [(kind, where, self._placed(template, placed), refresh, feeds)
                  for kind, where, template, refresh, feeds in writes]
        result = self._placed(result, placed)
        shared = templates_in(result)
        #: (Tensor, place, requires_grad, had a graph, refresh): gradients of state Tensors given
        #: new Tensors (what backward() does), written without the general path ...
        self.grad_writes = [(where[0].tensor, t[1][0], t[2], t[3], refresh) for kind, where, t, refresh, feeds
                            in writes if kind == "slot" and isinstance(where[0], GradOf) and t[0] == "tensor"
                            and t[1][1] is None and not feeds and id(t) not in shared]
        writes = [w for w in writes if not (w[0] == "slot" and isinstance(w[1][0], GradOf) and w[2][0] == "tensor"
                                            and w[2][1][1] is None and not w[4] and id(w[2]) not in shared)]
        #: (source, place): state Tensors given new data (parameters, optimizer moments) ...
        self.data_writes = [(where[1], template[1][0]) for kind, where, template, _, _ in writes
                            if kind == "data" and where[0] == "source" and template[1][1] is None]
        #: ... and every other write: [(kind, where, template, refresh, feeds)], see `_write`;
        #: feeds: (source, position in a tuple or None) whose Tensor the write replaces
        self.writes = [w for w in writes if not (w[0] == "data" and w[1][0] == "source" and w[2][1][1] is None)]
        self.state = [k for k, s in enumerate(sources) if s.kind in ("slot", "object")]
        self.fresh = [(k, s) for k, s in enumerate(sources) if s.kind in ("input", "array")]
        self.found_pending = []  # state found pending by `_find` (see JitFunction._computed_first)
        #: (recipe, shape) of arrays numpy computed from numpy arguments whose shape the step's
        #: code read (len(np.unique(y))): the shape is a guard, the recipe run at each replay
        self.shape_checks = []
        #: (arrays, state Tensors, their arrays, every source's Tensor) as the last replay left
        #: them: while the world holds and those Tensors hold those arrays, `resolve` is a look
        self.expected = None
        #: whether places shared storage at capture: their sharing is checked at every replay
        #: (`_find`), the last replay's own writes may have ended it (`p.data` replaced, its
        #: anchor `q` left on the old storage)
        self.aliased = any(s.aliases for s in sources)
        self.result = result        # template of the return value
        self.input_ids = input_ids  # ids of world Tensors the inputs were at capture ({} mostly)
        self.replays = 0
        #: flat position -> (values last checked, changes left to check) of the numpy
        #: arguments whose new values a replay checks against a plain call (JitFunction._replay)
        self.unchecked = {}
        #: where the capture call wrote Python values (world.where_of): a next call that finds
        #: one of them changed found what this capture did, not what the user did
        self.changes = {where_of(*where) for kind, where, _, _, _ in writes if kind == "slot"}

    # ---- phase 0: is this the capture for now? ------------------------------------------------
    def why_not(self):
        """None when this capture is what the function would do now, else why not:
        (where, description), see World.changed."""
        for read, value in self.guards:
            if read() != value:
                return (id(read), None), f"a value needle's code branched on (was {value!r})"
        if world_guards.holds(self.world):
            return None
        return world_guards.changed(self.world)

    # ---- phase 1: resolve ------------------------------------------------------------------------
    def resolve(self, call):
        """The arrays of the sources now and the state Tensors they come from, or STALE
        (nothing is changed either way; also when a numpy argument's values give an array
        of another shape than at capture)."""
        try:
            for recipe, shape in self.shape_checks:
                if recipe(call.values).shape != shape:
                    return STALE
            return self._resolve(call)
        except ShapeChanged:
            return STALE

    def _resolve(self, call):
        expected = self.expected
        if expected is not None and not self.world.moved and not self.aliased and \
                all(map(is_, map(_data, expected[1]), expected[2])):
            arrays, tensors = list(expected[0]), expected[3]  # (state as the last replay left it)
            for k, source in self.fresh:
                arrays[k] = call.arrays[source.where] if source.kind == "input" else source.convert(call.values)
        else:
            found = self._find(call)
            if found is STALE:
                return STALE
            arrays, tensors = found
        if self.input_ids is not None:
            for i, x in enumerate(call.inputs):
                if id(x) in self.world._holder_ids and self.input_ids.get(id(x)) != i:
                    return STALE  # (a state tensor passed as an argument: not what was captured)
        if self.checks:
            values = {}
            try:
                for k, fn in self.checks:  # (labels in range, as without needle.jit)
                    if k not in values:
                        values[k] = host_values(arrays[k])
                    fn(values[k])
            except Exception:
                return FAILS  # (a plain call raises it, after what it does first)
        self.world.moved = False
        return arrays, tensors

    def _find(self, call):
        """`resolve` the long way: every source looked up where it lives."""
        arrays, tensors = [], []
        moved = self.world.moved
        for source in self.sources:
            kind = source.kind
            if kind == "input":
                array, t = call.arrays[source.where], None
            elif kind == "array":
                array, t = source.convert(call.values), None
            else:
                t = source.where.get() if kind == "slot" else source.where
                if t is None:
                    return STALE
                if getattr(t._cached_data, "is_lazy", False) and pending_sums(t):
                    self.found_pending.append(source.where.path if kind == "slot" else "a state tensor")
                array = realized_array(t)
                if layout(array) != source.layout:
                    return STALE  # (state of another layout: capture again)
            for alias in (source.aliases + source.twins if moved else source.aliases):
                other = alias.get() if isinstance(alias, Slot) else alias if isinstance(alias, Tensor) else \
                    call.arrays[alias]
                other = realized_array(other) if isinstance(other, Tensor) else other
                if other is None or getattr(other, "_handle", None) is not array._handle:
                    return STALE  # (two places that shared storage at capture share it no more)
            arrays.append(array)
            tensors.append(t)
        return arrays, tensors

    # ---- phases 2 and 3 ---------------------------------------------------------------------------
    def replay(self, call):
        resolved = self.resolve(call)
        if resolved is STALE or resolved is FAILS:
            return resolved
        arrays, tensors = resolved
        pool = arrays + self.consts  # (then each draw and each schedule's outputs, in order)
        actions, done = self.actions, 0
        for s, run in enumerate(self.runs):
            while done < len(actions) and actions[done][2] <= s:
                self._act(actions[done], pool)
                done += 1
            leaves = [pool[i] for i in run.index]
            for pos, view in run.views:
                leaves[pos] = leaves[pos]._view(*view)
            if run.fn is not None:
                pool.extend(host_run(run, leaves))
            else:
                pool.extend(run.entry.run(leaves, run.scalars_now(), run.device))
        while done < len(actions):  # (a scheduler's step after the optimizer's)
            self._act(actions[done], pool)
            done += 1
        bound = (pool, tensors, call, {})
        next_arrays = list(arrays)
        for k, i in self.data_writes:  # (state Tensors given new data: parameters, moments)
            next_arrays[k] = tensors[k]._cached_data = pool[i]
        for t, i, requires_grad, graph, refresh in self.grad_writes:
            g = _new(Tensor)
            g._init(REPLAYED if graph else None, _NO_INPUTS, 1, pool[i], requires_grad)
            t.grad = g
            if refresh is not None:
                refresh(g)
        next_tensors = list(tensors)
        for kind, where, template, refresh, feeds in self.writes:
            value = self._write(kind, where, template, refresh, bound)
            for k, pos in feeds:
                t = value if pos is None else _at(value, pos)
                if isinstance(t, Tensor):
                    next_tensors[k], next_arrays[k] = t, t._cached_data
        self.expected = (next_arrays, [next_tensors[k] for k in self.state],
                         [next_arrays[k] for k in self.state], next_tensors)
        self.world.advanced()
        self.replays += 1
        return self.make(self.result, bound)

    def _act(self, action, pool) -> None:
        if action[0] == "draw":
            fn, args, kwargs = self.draws[action[1]]
            pool.append(realized_array(fn(*args, **kwargs)))
        else:
            action[1]()

    def _write(self, kind, where, template, refresh, bound):
        if kind == "data":  # a Tensor that existed before the call was given new data
            t = self._tensor_at(where, bound)
            if t is not None:
                t._cached_data = self.make(template, bound)
            return t
        container, key = where
        value = self.make(template, bound)
        if kind == "input grad":
            bound[2].inputs[container].grad = value
        elif key is ALL:  # (a list, deque, set or buffer that changed: its new members)
            if isinstance(container, (set, collections.deque)):
                container.clear()
                container.update(value) if isinstance(container, set) else container.extend(value)
            else:
                container[:] = value
        elif value is MISSING:  # (a key the call deleted: dict.clear(), del obj.attr)
            try:
                del container[key]
            except (KeyError, IndexError, AttributeError):
                pass
        else:
            container[key] = value
        if refresh is not None:
            refresh(value)
        return value

    @staticmethod
    def _tensor_at(where, bound):
        kind, what = where
        if kind == "input":
            return bound[2].inputs[what]
        if kind == "source":
            return bound[1][what]
        return what.get() if isinstance(what, Slot) else what

    def make(self, template, bound):
        """The value a template stands for in this replay: one object per template in a
        replay (an object the call returned twice, or stored and returned, is one)."""
        memo = bound[3]
        value = memo.get(id(template), MISSING)
        if value is MISSING:
            value = memo[id(template)] = self._make(template, bound)
        return value

    def _make(self, template, bound):
        kind = template[0]
        if kind == "tensor":  # ("tensor", binding, requires_grad, had a graph, class, ((name, template), ...))
            t = _new(template[4])
            t._init(REPLAYED if template[3] else None, _NO_INPUTS, 1, self.array(template[1], bound), template[2])
            for name, part in template[5]:  # (the gradient backward() left on it, the user's attributes)
                if name == "grad":
                    t.grad = self.make(part, bound)
                else:
                    object.__getattribute__(t, "__dict__")[name] = self.make(part, bound)
            return t
        if kind == "array":
            return self.array(template[1], bound)
        if kind == "const":
            return template[1]
        if kind == "numpy":  # (computed from this call's numpy arguments)
            return template[1](bound[2].values)
        if kind == "arg":
            return bound[2].flat[template[1]]
        if kind == "part":
            return bound[2].parts[template[1]]
        if kind == "was":  # the Tensor a source slot held when the call began
            return bound[1][template[1]]
        if kind == "dict":
            return {k: self.make(t, bound) for k, t in template[1]}
        return template[1]([self.make(t, bound) for t in template[2]])  # ("seq", type, items)

    @staticmethod
    def array(place, bound):
        i, view = place
        base = bound[0][i]
        return base if view is None else base._view(*view)

    def _placed(self, template, memo=None):
        """`template` with its bindings as places in the pool (one object per template)."""
        memo = {} if memo is None else memo
        if id(template) in memo:
            return memo[id(template)]
        kind = template[0]
        if kind == "tensor":
            out = (kind, self._place(template[1])) + template[2:5] + \
                (tuple((name, self._placed(t, memo)) for name, t in template[5]),)
        elif kind == "array":
            out = (kind, self._place(template[1])) + template[2:]
        elif kind == "dict":
            out = (kind, [(k, self._placed(t, memo)) for k, t in template[1]])
        elif kind == "seq":
            out = (kind, template[1], [self._placed(t, memo) for t in template[2]])
        else:
            out = template
        memo[id(template)] = out
        return out

    def explain(self) -> str:
        kinds = {SRC: "input or state", OUT: "earlier output", DRAW: "random draw", CONST: "constant"}
        schedules = [r for r in self.runs if r.fn is None]
        w = self.world
        lines = [f"  {len(schedules)} schedule(s), {sum(len(r.entry.schedule.calls) for r in schedules)} kernel(s), "
                 f"{len(self.runs) - len(schedules)} host call(s), {len(self.draws)} random draw(s), "
                 f"{sum(1 for a in self.actions if a[0] == 'call')} replay callback(s)",
                 "  sources: " + ", ".join(f"{n} {k}" for k, n in _count(s.kind for s in self.sources).items()),
                 f"  guards: {len(w.boxes)} containers, {len(w.cells)} closure cells, "
                 f"{sum(len(g[1]) for g in w.globals)} globals, {len(w.holders)} tensors' flags, "
                 f"{len(w.arrays)} numpy arrays, {len(self.guards)} branch values",
                 "  writes: " + (", ".join(f"{n} {k}" for k, n in _count(w[0] for w in self.writes + [('data',)] * len(self.data_writes)).items())
                                 or "none")]
        for s, run in enumerate(self.runs):
            counts = _count(kinds[leaf[0]] for leaf in run.leaves)
            text = ", ".join(f"{n} {k}" for k, n in counts.items())
            if run.fn is not None:
                lines.append(f"  host call {s} ({getattr(run.fn, '__name__', run.fn)}): {text}")
                continue
            live = sum(1 for x in run.scalars if callable(x))
            lines.append(f"  schedule {s} on {run.device}: leaves {text}; scalars {len(run.scalars)} "
                         f"({live} read at each call)")
            lines.extend(f"    {c.kernel.name}" for c in run.entry.schedule.calls)
        return "\n".join(lines)


_data = attrgetter("_cached_data")
_new = Tensor.__new__
_NO_INPUTS = ()


def _at(value, pos):
    for i in pos:
        value = value[i]
    return value


def _count(items) -> dict:
    out = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


