"""The base of every optimizer: the parameter list, hyperparameters read again at
each replay of a captured step (`_live`), one realize per step, PyTorch's
param_groups / state_dict views, and the helpers the update rules share."""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Dict, Iterable, List

import functools
import numbers
import threading

from ..autograd import BACKEND, Tensor, tensors_in
from ..errors import ArgumentError, DTypeError
from ..realize import realize
from ..engine import capture as _capture
from ..backend_ndarray.ndarray import NDArray
from ..ir import build as ir_build
from ..ir.lazy import as_lazy
from ..ir.nodes import RuntimeScalar
from ..engine.realize import realize_later


class Optimizer:
    """Base class: holds the parameter list and the learning rate `lr`.

    Subclasses implement `_update(index, param, grad)` on arrays (`data_of`: lazy
    nodes or numpy arrays), returning the new parameter value and keeping
    state as Tensors (`_state`); the base class skips parameters without a gradient,
    assigns the results and realizes everything once.
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01):
        self.params: List[Tensor] = _parameter_list(type(self).__name__, params)
        self.lr = number(type(self).__name__, "lr", lr, low=0.0)

    def _live(self, read):
        """A hyperparameter expression, re-read at each replay of a step captured by
        needle.jit (so a learning-rate scheduler works without recapturing).  One
        RuntimeScalar per expression (the lambda's code and what it closes over) and
        step, shared by every parameter's update: one kernel argument, read once per
        replay, not one per parameter (Adam with weight decay on 28 tensors made 252).
        The numpy backend captures nothing, and numpy would promote a float subclass to
        float64."""
        if BACKEND == "np":
            return read()
        if _capture.CURRENT is not None:  # (the attributes it reads are no guards of the capture)
            _capture.live(self, read)
        scalars = self.__dict__.get("_step_scalars")
        if scalars is None:  # outside step(): nothing to share with
            return RuntimeScalar(read)
        key = (read.__code__, *[c.cell_contents for c in read.__closure__ or ()])
        found = scalars.get(key)
        if found is None:
            found = scalars[key] = RuntimeScalar(read)
        return found

    def _once_per_step(self, make):
        """`make()` (a tuple of `_live` scalars), made at the step's first parameter and
        shared by the others: a `_live` call per scalar and parameter cost a step on many
        small tensors more than its arithmetic."""
        scalars = self.__dict__.get("_step_scalars")
        if scalars is None:  # outside step()
            return make()
        found = scalars.get(make.__func__)
        if found is None:
            found = scalars[make.__func__] = make()
        return found

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:  # a user's own optimizer (course hw2 style)
            cls.step = _state_computed_after(cls.__dict__["step"])

    def step(self) -> None:
        """Apply one update to every parameter that has a gradient."""
        # a captured step replays the branches taken now: a hyperparameter that turns
        # a branch on or off (momentum 0 -> 0.9) must make a new capture
        _capture.guard(self._branches)
        self._begin_step()
        self._step_scalars = {}  # this step's run-time scalars (t, lr), by expression
        updated = []
        origin = ir_build.ORIGIN  # dumps and profiles name the update's nodes after the optimizer
        previous, origin.name = origin.name, type(self).__name__
        # what `_state` and `keep` make, for a subclass that does not say what its state is
        declared = type(self).state_tensors is not Optimizer.state_tensors
        outer, made = _MADE.tensors, (None if declared else [])
        _MADE.tensors = made
        try:
            for i, param in enumerate(self.params):
                grad = getattr(param, "grad", None)  # a fresh Tensor has no .grad attribute
                if grad is None:
                    continue
                g = data_of(grad)
                if grad.dtype != param.dtype:
                    g = g.astype(param.dtype)
                param.data = _state(self._update(i, data_of(param), g))
                updated.append(param)
        finally:
            origin.name = previous
            _MADE.tensors = outer
            del self._step_scalars  # (lambdas: an optimizer stays picklable)
        # One realize for the parameters and the state: one graph per training step.
        realize(*updated, *self.state_tensors(), *(made or ()))

    def reset_grad(self) -> None:
        """Forget all gradients (the course name; `zero_grad` is PyTorch's)."""
        for param in self.params:
            param.grad = None
            if _capture.CURRENT is not None:
                _capture.grad_set(param)

    zero_grad = reset_grad

    # ---- PyTorch-shaped views: param_groups, state_dict ---------------------------------
    #: per-parameter state dicts ({index: Tensor}) and hyperparameters, by attribute name
    _state_names: tuple = ()
    _hyper_names: tuple = ("lr",)

    @property
    def param_groups(self) -> List["ParamGroup"]:
        """One group holding every parameter, as PyTorch's list of dicts: a live view,
        so `opt.param_groups[0]["lr"] = x` sets `opt.lr` and the other way round."""
        return [ParamGroup(self)]

    def state_dict(self) -> dict:
        """{"state": {param index: {name: Tensor}}, "param_groups": [{hyperparameters,
        "params": [indices]}]} — PyTorch's layout; the tensors are detached snapshots
        (later steps make new tensors, so the snapshot stays as it was)."""
        state: Dict[int, dict] = {}
        for name in self._state_names:
            for index, tensor in getattr(self, name).items():
                state.setdefault(index, {})[name] = tensor.detach()
        for entry in state.values():
            entry.update(self._scalar_state())
        group = {key: self.param_groups[0][key] for key in self._hyper_names}
        group["params"] = list(range(len(self.params)))
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what `state_dict()` returned (also after needle.save / needle.load),
        so training resumes exactly.  Everything is checked before anything is set."""
        name = type(self).__name__
        try:
            groups, state = state_dict["param_groups"], state_dict["state"]
        except (KeyError, TypeError):
            raise ArgumentError(f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups', "
                                f"as state_dict() returns") from None
        if len(groups) != 1 or len(groups[0].get("params", ())) != len(self.params):
            raise ArgumentError(f"{name}.load_state_dict: the state is for {sum(len(g.get('params', ())) for g in groups)}"
                                f" parameters in {len(groups)} group(s); this optimizer has {len(self.params)} in one")
        restored = {n: {} for n in self._state_names}
        for index, entry in state.items():
            index = int(index)
            if not 0 <= index < len(self.params):
                raise ArgumentError(f"{name}.load_state_dict: state for parameter {index}, but there are "
                                    f"{len(self.params)}")
            param = self.params[index]
            for key, value in entry.items():
                if key not in restored:
                    continue
                array = value.numpy() if isinstance(value, Tensor) else value
                if tuple(getattr(array, "shape", ())) != tuple(param.shape):
                    raise ArgumentError(f"{name}.load_state_dict: {key!r} of parameter {index} has shape "
                                        f"{tuple(array.shape)}, the parameter {tuple(param.shape)}")
                restored[key][index] = Tensor(array, device=param.device, dtype=param.dtype, requires_grad=False)
        for key in self._hyper_names:
            if key in groups[0]:
                self.param_groups[0][key] = groups[0][key]
        for key, tensors in restored.items():  # (in place: a captured step holds these dicts)
            getattr(self, key).clear()
            getattr(self, key).update(tensors)
        self._load_scalar_state([entry for entry in state.values()])

    def _scalar_state(self) -> dict:
        return {}

    def _load_scalar_state(self, entries: list) -> None:
        pass

    # ---- for subclasses -----------------------------------------------------------------
    def _branches(self) -> tuple:
        """The hyperparameters' values that select code in `_update` (zero or not)."""
        return (bool(getattr(self, "weight_decay", 0)), bool(getattr(self, "momentum", 0)),
                bool(getattr(self, "centered", False)))

    def _begin_step(self) -> None:
        """Hook run once per step before the per-parameter updates (Adam's t += 1)."""

    def _update(self, index: int, param: Tensor, grad: Tensor) -> Tensor:
        raise NotImplementedError()

    def state_tensors(self) -> List[Tensor]:
        """Every tensor of optimizer state (momentum buffers, moments), computed with the
        step's schedule.  By default every Tensor the optimizer holds in its attributes
        but its parameters: a subclass's own `_update` that `keep`s state and names none
        here would otherwise chain each step's graph to the last in lazy mode."""
        params = {id(p) for p in self.params}
        return [t for t in tensors_in(self.__dict__) if id(t) not in params]


class ParamGroup(MutableMapping):
    """`optimizer.param_groups[0]`: "params" and the hyperparameters, read from and
    written to the optimizer's attributes ("betas" is Adam's (beta1, beta2))."""

    def __init__(self, optimizer: Optimizer):
        self._optimizer = optimizer

    def _keys(self) -> tuple:
        return ("params",) + self._optimizer._hyper_names

    def __getitem__(self, key):
        opt = self._optimizer
        if key not in self._keys():
            raise KeyError(key)
        if key == "params":
            return opt.params
        if key == "betas":
            return (opt.beta1, opt.beta2)
        return getattr(opt, key)

    def __setitem__(self, key, value) -> None:
        opt = self._optimizer
        if key not in self._keys():
            raise KeyError(f"{type(opt).__name__} has no hyperparameter {key!r}; it has {', '.join(self._keys())}")
        if key == "params":
            opt.params = _parameter_list(type(opt).__name__, value)
        elif key == "betas":
            opt.beta1, opt.beta2 = (number(type(opt).__name__, "beta", b, 0.0, 1.0) for b in value)
        elif isinstance(value, bool) or key == "centered":
            setattr(opt, key, value)
        else:
            setattr(opt, key, number(type(opt).__name__, key, value, low=0.0))

    def __delitem__(self, key) -> None:
        raise KeyError(f"param_groups: {key!r} cannot be removed")

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {self[k]!r}" if k != "params" else f"'params': [{len(self[k])} tensors]"
                               for k in self) + "}"


def _state_computed_after(step):
    """Wrap a user-written `step` so that the state it stores on the optimizer
    (`self.u[i] = ...`) is computed with the next schedule in lazy mode, like the
    built-in optimizers' state, instead of chaining every step's graph to the last."""
    @functools.wraps(step)
    def wrapped(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        for t in tensors_in(self.__dict__):
            realize_later(t)
        return result
    return wrapped


def _parameter_list(name: str, params) -> List[Tensor]:
    """The parameters as a list of Tensors, or an error naming the optimizer."""
    if hasattr(params, "parameters") and callable(params.parameters):
        raise DTypeError(f"{name}: expected an iterable of parameters, got a {type(params).__name__} module; "
                         "pass model.parameters()")
    try:
        items = list(params)
    except TypeError:
        raise DTypeError(f"{name}: expected an iterable of Tensors, got {type(params).__name__}") from None
    for p in items:
        if not isinstance(p, Tensor):
            raise DTypeError(f"{name}: parameters must be needle Tensors, got {type(p).__name__}")
    return items


def number(name: str, what: str, value, low=None, high=None):
    """A real number in [low, high) (bounds optional), or an error naming it."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ArgumentError(f"{name}: {what} must be a real number, got {value!r}")
    if (low is not None and value < low) or (high is not None and value >= high):
        where = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'})"
        raise ArgumentError(f"{name}: {what} = {value!r} is outside {where}")
    return value


def data_of(t: Tensor):
    """What an update computes on: a lazy node (lazy and eager compiled mode) or the
    numpy array (NEEDLE_BACKEND=np).  Updates need no autograd, and array arithmetic
    builds a step's graph at a fraction of the cost of Tensor ops.  Eager mode too
    builds the update as a graph, realized once per step at the end of `step()`: run
    op by op, Adam launched a kernel for each of its 20 scalar ops per parameter, and
    its update took half of an eager MLPResNet step."""
    data = t._compute_input()
    return as_lazy(data) if isinstance(data, NDArray) else data


class _Made(threading.local):
    """The Tensors `_state` and `keep` gave data during this thread's `step()` of an
    optimizer that does not name its state (None otherwise): computed with the step's schedule wherever the update keeps them (a
    subclass's own objects, which `state_tensors` does not reach), not chained to the
    next step's graph."""
    tensors = None


_MADE = _Made()


def _state(array) -> Tensor:
    """An update's result as a constant Tensor (new parameter data, optimizer state)."""
    tensor = Tensor.make_const(array)
    if _MADE.tensors is not None:
        _MADE.tensors.append(tensor)
    return tensor


def keep(store: dict, index: int, array) -> None:
    """Optimizer state kept as torch keeps it: a Tensor made once, then given each step's
    new data in place (so a captured step writes into the same Tensors), computed with the
    step's schedule as `_state`'s are (`_Made`)."""
    held = store.get(index)
    if held is None:
        store[index] = _state(array)
        return
    held._cached_data = array
    if _MADE.tensors is not None:
        _MADE.tensors.append(held)


def with_weight_decay(grad, param, opt: "Optimizer"):
    """L2 regularization folded into the gradient: grad + wd * p (course and PyTorch)."""
    if opt.weight_decay:
        return grad + param * opt._live(lambda: opt.weight_decay)
    return grad
