"""From one recorded call to a CapturedStep: which storage each leaf buffer is
(found by the identity of its `_handle`), what the call changed, what it returned.

Precedence for a leaf: an output of an earlier schedule of the call, a random draw,
an argument, state in the world, state read from a Tensor the world does not reach,
else a constant made inside the call.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Tensor, TensorTuple
from ..backend_selection import array_api
from .step import CONST, DRAW, OUT, SRC, CapturedStep, Run, Source, layout, scalars_of
from .tracing import DERIVED, apply_view, view_of
from .world import ALL, GradOf, Slot


class Unsupported(Exception):
    """The call did something a replay cannot repeat: it runs plainly, saying this."""


class Builder:
    """Collects the sources of one call's buffers, then binds its schedules."""

    def __init__(self, call, world, initial):
        self.call, self.world = call, world
        self.initial = initial      # id(Tensor) -> its _cached_data when the call began
        self.sources, self.by_handle = [], {}
        self.source_of_tensor = {}  # id(Tensor existing before the call) -> source number

    def add(self, handle, source, tensor=None) -> int:
        found = self.by_handle.get(id(handle))
        if found is not None:
            return found
        self.sources.append(source)
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

    def host_arrays(self, recorded) -> None:
        """Tensors made from numpy arguments (or views, or casts of views) are inputs;
        from anything computed from one, a host computation."""
        for array, data, line in recorded:
            if not hasattr(data, "_handle"):
                continue
            tag = getattr(array, "_needle", None)
            if tag is not None and tag[2] is DERIVED:
                raise Unsupported(f"a numpy computation on argument {tag[1]} made a tensor at {line}")
            found = self._numpy_input(array, tag)
            if found is not None:
                number, view, cast = found
                self.add(data._handle, Source("array", number, convert=_converter(view, cast, data)))

    def _numpy_input(self, array, tag):
        if tag is not None:
            number, how = tag[1], tag[2]
            source, cast = (array, None) if how is None else how
            view = view_of(source, self.call.values[number])
            if view is None:
                raise Unsupported(f"a view of numpy argument {number} needle cannot repeat")
            return number, view, cast
        if isinstance(array, np.ndarray):
            for number, root in self.call.values.items():
                view = view_of(array, root)
                if view is not None:
                    return number, view, None
        return None

    def state(self, readers, created_ids) -> None:
        """The world's Tensors, then Tensors read that the world does not reach."""
        for slot in self.world.slots:
            t = slot.initial
            data = self.initial.get(id(t))
            if data is None or not hasattr(data, "_handle"):
                continue  # (pending when found: made by the call itself)
            if id(data._handle) in self.by_handle:
                self.alias(data._handle, slot, t)
                continue
            self.add(data._handle, Source("slot", slot, layout(data)), t)
        for tensor, array in readers.values():
            if id(tensor) in created_ids or not hasattr(array, "_handle") or id(array._handle) in self.by_handle:
                continue
            self.add(array._handle, Source("object", tensor, layout(array)), tensor)

    # ---- schedules ------------------------------------------------------------------------
    def runs(self, recorder):
        draws = {id(array._handle): k for k, (_, _, _, array) in enumerate(recorder.draws)
                 if hasattr(array, "_handle")}
        self.outputs, runs = {}, []
        for s, run in enumerate(recorder.runs):
            leaves = [self.binding(leaf, draws) for leaf in run.leaves]
            if hasattr(run, "entry"):
                runs.append(Run(run.entry, run.device, leaves, scalars_of(run)))
            else:
                runs.append(Run(None, run.device, leaves, [], fn=run.fn))
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
        elif h in self.by_handle:
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
        return self.initial[id(source.tensor)]

    # ---- effects and the result -----------------------------------------------------------
    def template(self, value, returned=False):
        """How a replay makes `value` again (see CapturedStep.make)."""
        position = self.call.position(value)
        if position is not None:
            return ("arg", position)
        if isinstance(value, Tensor):
            if id(value) in self.source_of_tensor and id(value) in self.initial:
                return ("was", self.source_of_tensor[id(value)])
            data = _realized(value)
            if getattr(data, "is_lazy", False):
                raise Unsupported("a tensor the call made was still pending after it")
            if isinstance(value, TensorTuple) or isinstance(data, tuple) or not hasattr(data, "_handle"):
                raise Unsupported("the call returns or stores a tuple-valued tensor (TensorTuple)")
            graph = returned and value.op is not None and value.requires_grad
            return ("tensor", self.binding(data), value.requires_grad, graph)
        if type(value) in (list, tuple) or (isinstance(value, tuple) and hasattr(value, "_fields")):
            make = type(value) if type(value) in (list, tuple) else (lambda items, t=type(value): t(*items))
            return ("seq", make, [self.template(v, returned) for v in value])
        if type(value) is dict:
            return ("dict", [(k, self.template(v, returned)) for k, v in value.items()])
        return ("const", value)

    def writes(self, holders) -> list:
        """The call's effects: new data of Tensors that existed before it (first), then
        slots of the world and the inputs' gradients given new values."""
        out = []
        for t in holders:
            before = self.initial.get(id(t))
            if before is not None and t._cached_data is not before:
                k = self.source_of_tensor.get(id(t))
                where = ("input", self.call.inputs.index(t)) if any(t is x for x in self.call.inputs) else \
                    ("source", k) if k is not None else ("object", t)
                out.append(("data", where, ("array", self.binding(_realized(t))), None))
        for container, key, now in self.world.diff():
            template = self.template(now) if key is not ALL else ("seq", list, [self.template(v) for v in now])
            out.append(("slot", (container, key), template, self.world.refresher(container, key, now)))
        for i, x in enumerate(self.call.inputs):
            if x.grad is not self.call.input_grads[i]:
                out.append(("input grad", (i, None), self.template(x.grad), None))
        return out


def _realized(t):
    data = t._cached_data
    return data.realized if getattr(data, "is_lazy", False) else data


def _converter(view, cast, made):
    """The conversion a replay makes of its numpy argument: the view, the cast, then an
    array on the device, as Tensor() made `made`."""
    device, dtype = made.device, made.dtype

    def convert(root):
        values = apply_view(root, view)
        if cast is not None:
            values = values.astype(cast)
        return array_api.array(values, device=device, dtype=dtype)
    convert.made = made
    return convert


def build(recorder, call, world, initial, result, holders, created_ids) -> CapturedStep:
    b = Builder(call, world, initial)
    b.recorder_draws = recorder.draws
    b.inputs()
    b.host_arrays(recorder.host_arrays)
    b.state(recorder.readers, created_ids)
    runs = b.runs(recorder)
    writes = b.writes(holders)
    template = b.template(result, returned=True)
    checks = [(b.by_handle[id(a._handle)], fn) for a, fn in recorder.checks
              if id(getattr(a, "_handle", None)) in b.by_handle
              and b.sources[b.by_handle[id(a._handle)]].kind in ("input", "array")]
    input_ids = {id(x): i for i, x in enumerate(call.inputs) if id(x) in world._holder_ids}
    step = CapturedStep(world, b.sources, runs, list(recorder.actions), [d[:3] for d in recorder.draws],
                        list(recorder.guards), checks, writes, template, input_ids)
    return step


__all__ = ["build", "Unsupported", "GradOf", "Slot"]
