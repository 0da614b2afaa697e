"""From one recorded call to a CapturedStep: which storage each leaf buffer is
(found by the identity of its `_handle`), what the call changed, what it returned.

Precedence for a leaf: an output of an earlier schedule of the call, a random draw,
an argument, state in the world, state read from a Tensor the world does not reach,
else a constant made inside the call.
"""
from __future__ import annotations

import enum
import numbers
import types

import numpy as np

from ..autograd import Tensor, TensorTuple
from ..backend_ndarray.device_identity import DeviceIdentity
from ..backend_selection import array_api
from .records import CONST, DRAW, OUT, SRC, Run, ShapeChanged, Source, layout, scalars_of
from .step import CapturedStep
from .numpy_args import TracedArray, recipe_of
from . import world_effects
from .places import ALL, MISSING, SIMPLE, GradOf, Read, Slot, bound_object, where_of
from .world import ARRAY_GUARD_SIZE


class Unsupported(Exception):
    """The call did something a replay cannot repeat: it runs plainly, saying this."""


class Builder:
    """Collects the sources of one call's buffers, then binds its schedules."""

    def __init__(self, call, world, initial):
        self.call, self.world = call, world
        self.initial = initial      # id(Tensor) -> its _cached_data when the call began
        self.sources, self.bases, self.by_handle = [], [], {}
        self.templates = {}         # id(object) -> (its template, the object: kept alive meanwhile)
        self.making = set()         # ids of the objects whose templates are being made (a cycle: unsupported)
        #: whether a tensor's template gives it back its .grad: a returned one's (`logits.grad`
        #: read after the call), not a stored intermediate's (an attention's probabilities kept
        #: on its module: their gradient would have to be stored by every replay)
        self.with_grads = False
        self.source_of_tensor = {}  # id(Tensor existing before the call) -> source number

    def add(self, handle, source, tensor=None, base=None) -> int:
        found = self.by_handle.get(id(handle))
        if found is not None:
            return found
        self.sources.append(source)
        self.bases.append(base)
        k = self.by_handle[id(handle)] = len(self.sources) - 1
        if tensor is not None:
            source.tensor = tensor
            self.source_of_tensor.setdefault(id(tensor), k)
        return k

    def alias(self, handle, where, tensor=None) -> None:
        k = self.by_handle.get(id(handle))
        if k is not None:
            source = self.sources[k]
            (source.twins if tensor is not None and tensor is source.tensor and source.kind != "input"
             else source.aliases).append(where)

    # ---- sources --------------------------------------------------------------------------
    def inputs(self) -> None:
        seen = set()
        for i, array in enumerate(self.call.arrays):
            if id(array._handle) in seen:
                self.alias(array._handle, i)
            seen.add(id(array._handle))
            self.add(array._handle, Source("input", i), self.call.array_owner(i))

    def host_arrays(self, recorded, constants) -> None:
        """Tensors made from numpy arguments (or from what numpy computed from them), or
        from numpy arrays the state holds, are inputs, made again at each replay from that
        replay's arguments, or that array as it is then."""
        # (an array numpy made in the call, not traced from an argument nor read from the
        # state, may still have been computed from a numpy argument in C where needle could
        # not see: `np.eye(n)[labels]` indexes a new array with one.  With numpy arguments,
        # such an array is no constant: the step runs plainly, saying so)
        unseen = " or ".join(what for what, present in (
            ("the numpy arguments", bool(self.call.values)),
            ("a large numpy array the step's objects hold (not guarded by its values)",
             any(a.size > ARRAY_GUARD_SIZE for a in self.world.host_arrays))) if present)
        for array, data, line in recorded:
            if not hasattr(data, "_handle"):
                continue
            try:
                recipe = recipe_of(array, self.call.values, self.world.host_arrays,
                                   "" if id(array) in constants else unseen)
            except ValueError as e:
                raise Unsupported(f"{e} (a tensor made at {line})") from None
            if recipe is not None:
                self.add(data._handle, Source("array", recipe, convert=_converter(recipe, data)))

    def state(self, readers, created_ids) -> None:
        """Where state may come from: the world's Tensors, then Tensors read that the world
        does not reach; each becomes a source when a buffer of the call is its storage."""
        self.candidates = {}  # id(handle) -> [(kind, where, NDArray, Tensor)], the first found first
        for slot in self.world.slots:
            data = self.initial.get(id(slot.initial))
            if data is not None and hasattr(data, "_handle"):  # (else pending when found: the call's own)
                self.candidates.setdefault(id(data._handle), []).append(("slot", slot, data, slot.initial))
        argument_grads = {id(g) for g in self.call.input_grads if g is not None}
        for tensor, array in readers.values():
            if id(tensor) in argument_grads:
                raise Unsupported("the step reads the .grad of a Tensor argument, which a replay would not find "
                                  "again (pass the module or optimizer instead: their parameters' gradients are "
                                  "followed)")
            if id(tensor) not in created_ids and hasattr(array, "_handle") and id(array._handle) not in self.candidates:
                self.candidates[id(array._handle)] = [("object", tensor, array, tensor)]

    def use(self, h):
        """The source number of storage `h` (an id), made from its candidates on first use; or None."""
        k = self.by_handle.get(h)
        if k is not None or h not in self.candidates:
            return k
        places = self.candidates[h]
        for kind, where, array, tensor in places:
            if k is None:
                k = self.add(array._handle, Source(kind, where, layout(array)), tensor, array)
            else:
                self.alias(array._handle, where, tensor)
        return k

    # ---- schedules ------------------------------------------------------------------------
    def runs(self, recorder):
        draws = {id(array._handle): k for k, (_, _, _, array) in enumerate(recorder.draws)
                 if hasattr(array, "_handle")}
        self.outputs, runs = {}, []
        for s, run in enumerate(recorder.runs):
            leaves = [self.binding(leaf, draws) for leaf in run.leaves]
            if hasattr(run, "entry"):
                runs.append(Run(run.entry, run.device, leaves, scalars_of(run), len(run.outputs)))
            else:
                runs.append(Run(None, run.device, leaves, [], len(run.outputs), fn=run.fn))
            for j, array in enumerate(run.outputs):
                self.outputs.setdefault(id(array._handle), (s, j, array))
        self.draws = draws
        return runs

    def binding(self, array, draws=None):
        """(kind, a, b, view) of an array: where a replay finds it."""
        draws = self.draws if draws is None else draws
        h = id(getattr(array, "_handle", None))
        found = self.outputs.get(h)
        if found is not None:
            base, where = found[2], (OUT, found[0], found[1])
        elif h in draws:
            base, where = self._draw_array(draws[h]), (DRAW, draws[h], None)
        elif self.use(h) is not None:
            k = self.by_handle[h]
            base, where = self._source_array(k), (SRC, k, None)
        else:
            return (CONST, array, None, None)
        same = layout(array)[:3] == layout(base)[:3]
        return (*where, None if same else (array.shape, array.strides, array.offset))

    def _draw_array(self, k):
        return self.recorder_draws[k][3]

    def _source_array(self, k):
        source = self.sources[k]
        if source.kind == "input":
            return self.call.arrays[source.where]
        if source.kind == "array":
            return source.convert.made
        return self.bases[k]

    # ---- effects and the result -----------------------------------------------------------
    def template(self, value):
        """How a replay makes `value` again (see CapturedStep.make); one template per
        object, so an object returned twice is one object at each replay."""
        if not isinstance(value, SIMPLE):
            made = self.templates.get(id(value))
            if made is None:
                if id(value) in self.making:  # (`t.me = t`, a gradient that refers back to its tensor)
                    raise Unsupported(f"the call returns or stores a {type(value).__name__} that refers to itself")
                self.making.add(id(value))
                made = self.templates[id(value)] = (self._template(value), value)
                self.making.discard(id(value))
            return made[0]
        return self._template(value)

    def _template(self, value):
        position = self.call.position(value)
        if position is not None:
            return position  # ("arg", i) or ("part", i): this call's own
        if isinstance(value, TracedArray):  # (a numpy argument, or numpy's result from one)
            try:
                return ("numpy", recipe_of(value, self.call.values))
            except ValueError as e:
                raise Unsupported(f"the call returns or keeps {e}") from None
        if isinstance(value, Tensor):
            before = self.initial.get(id(value))  # (a Tensor that existed before the call)
            if before is not None and hasattr(before, "_handle") and self.use(id(before._handle)) is not None \
                    and id(value) in self.source_of_tensor:
                return ("was", self.source_of_tensor[id(value)])
            data = _realized(value)
            if getattr(data, "is_lazy", False):
                raise Unsupported("a tensor the call made was still pending after it")
            if isinstance(value, TensorTuple) or isinstance(data, tuple) or not hasattr(data, "_handle"):
                raise Unsupported("the call returns or stores a tuple-valued tensor (TensorTuple)")
            graph = value.op is not None and value.requires_grad  # (backward through it: JitError)
            extras = [("grad", self.template(value.grad))] if value.grad is not None and self.with_grads else []
            extras += [(name, self.template(v)) for name, v in object.__getattribute__(value, "__dict__").items()]
            return ("tensor", self.binding(data), value.requires_grad, graph, type(value), tuple(extras))
        if type(value) in (list, tuple) or (isinstance(value, tuple) and hasattr(value, "_fields")):
            make = type(value) if type(value) in (list, tuple) else (lambda items, t=type(value): t(*items))
            return ("seq", make, [self.template(v) for v in value])
        if type(value) is dict:
            return ("dict", [(k, self.template(v)) for k, v in value.items()])
        if value is MISSING:  # (a key the call deleted: the replay deletes it too)
            return ("const", MISSING)
        if _immutable(value) or self.world.reached(value) or \
                isinstance(value, types.MethodType) and self.world.reached(value.__self__):  # (`model.forward`)
            return ("const", value)  # (the same object a plain call gives, or one equal to it)
        raise Unsupported(f"the call returns or stores a {type(value).__name__} it made (a replay, which does not "
                          "run the step's Python, cannot make it again)")

    def writes(self, holders, grads_set=()) -> list:
        """The call's effects: new data of Tensors that existed before it (first), then
        slots of the world and the inputs' gradients given new values.  A gradient needle
        set during the call (`grads_set`: reset_grad, backward) is written at every replay
        even where the call left it as it found it (None): it is no guard, so a replay may
        find another there."""
        out = []
        slot_of = {}  # (a Tensor sharing a source's storage, Adam's twin moments: found where it lives)
        for slot in self.world.slots:
            slot_of.setdefault(id(slot.initial), slot)
        for t in holders:
            before = self.initial.get(id(t))
            if before is not None and t._cached_data is not before:
                k = self.source_of_tensor.get(id(t))
                where = ("input", self.call.inputs.index(t)) if any(t is x for x in self.call.inputs) else \
                    ("source", k) if k is not None else ("slot", slot_of[id(t)]) if id(t) in slot_of else \
                    ("object", t)
                out.append(("data", where, ("array", self.binding(_realized(t))), None, ()))
        fed = {}  # the slots the sources were found in: a write there replaces the source's Tensor
        for k, source in enumerate(self.sources):
            if source.kind == "slot":
                fed.setdefault(where_of(source.where.container, source.where.key), []).append((k, source.where.pos))
        changes = world_effects.diff(self.world)
        found = {id(c.tensor) for c, _, _ in changes if isinstance(c, GradOf)}
        changes += [(GradOf(t), "grad", t.grad) for t in self.world.holders if id(t) in grads_set and id(t) not in found]
        for container, key, now in changes:
            if isinstance(container, Read):
                raise Unsupported(f"the step changes {world_effects.path(self.world, container, key)} (read through a reference)")
            template = self.template(now) if key is not ALL else ("seq", list, [self.template(v) for v in now])
            out.append(("slot", (container, key), template, world_effects.refresher(self.world, container, key, now),
                        fed.get(where_of(container, key), ())))
        for i, x in enumerate(self.call.inputs):
            if x.grad is not self.call.input_grads[i]:
                out.append(("input grad", (i, None), self.template(x.grad), None, ()))
        return out


#: objects nothing can change: the same object stands for a plain call's (a tuple is
#: made again item by item)
IMMUTABLE = SIMPLE + (numbers.Number, type, types.BuiltinFunctionType, types.ModuleType, types.MethodDescriptorType,
                      types.WrapperDescriptorType, np.ufunc, np.dtype, range, slice, enum.Enum, DeviceIdentity,
                      type(Ellipsis), type(NotImplemented))


def _immutable(value) -> bool:
    if bound_object(value) is not None:  # (a bound method of a builtin object holds that object)
        return False
    if type(value) in (frozenset, tuple):
        return all(_immutable(v) for v in value)
    return isinstance(value, IMMUTABLE)


def _realized(t):
    data = t._cached_data
    return data.realized if getattr(data, "is_lazy", False) else data


def _converter(recipe, made):
    """The conversion a replay makes of its numpy arguments: the recipe, then an array on
    the device, as Tensor() made `made`."""
    device, dtype = made.device, made.dtype

    def convert(values):
        array = recipe(values)
        if tuple(array.shape) != tuple(made.shape):
            raise ShapeChanged()
        return array_api.array(array, device=device, dtype=dtype)
    convert.made = made
    return convert


def build(recorder, call, world, initial, result, holders, created_ids) -> CapturedStep:
    b = Builder(call, world, initial)
    b.recorder_draws = recorder.draws
    b.inputs()
    b.host_arrays(recorder.host_arrays, recorder.constants)
    b.state(recorder.readers, created_ids)
    runs = b.runs(recorder)
    b.with_grads = True  # (a returned tensor's .grad, first: a tensor also stored is one object)
    template = b.template(result)
    b.with_grads = False
    writes = b.writes(holders, recorder.grads_set)
    checks = [(b.by_handle[id(a._handle)], fn) for a, fn in recorder.checks
              if id(getattr(a, "_handle", None)) in b.by_handle
              and b.sources[b.by_handle[id(a._handle)]].kind in ("input", "array")]
    input_ids = {id(x): i for i, x in enumerate(call.inputs) if id(x) in world._holder_ids}
    step = CapturedStep(world, b.sources, runs, list(recorder.actions), [d[:3] for d in recorder.draws],
                        list(recorder.guards), checks, writes, template, input_ids)
    step.objects = [x for _, x in call.objects()]  # (kept: the key holds their ids)
    return step


__all__ = ["build", "Unsupported", "GradOf", "Slot"]
