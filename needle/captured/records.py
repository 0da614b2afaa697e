"""The typed records a capture is made of: a Source per storage a replay resolves
before it runs (an input, a numpy argument, state), a Run per schedule (how its leaves
are found in the replay's pool), and the pool's layout; plus the op that marks what a
replay returns without a graph."""
from __future__ import annotations

from ..autograd import Tensor, TensorOp
from ..errors import JitError
from ..ir.nodes import RuntimeScalar

SRC, OUT, DRAW, CONST = range(4)


class ShapeChanged(Exception):
    """A numpy argument's values gave an array of another shape than at capture (np.unique,
    x[y == 0]): the replay cannot run its kernels on it (the call captures again)."""


def realized_array(tensor):
    """The realized NDArray of a tensor (computing it if it is pending)."""
    data = tensor._cached_data
    if getattr(data, "is_lazy", False):
        data = tensor.realize_cached_data()
    return data


def layout(array) -> tuple:
    return (array._shape, array._strides, array._offset, array._dtype, array._device)


def host_values(array):
    """An array's values as numpy (NEEDLE_BACKEND=np holds numpy arrays already)."""
    return array.numpy() if hasattr(array, "_handle") else array


class Source:
    """Where a source comes from: `kind` is "input" (argument array `where`), "array"
    (numpy argument `where`, converted by `convert`), "slot" (a world Slot) or "object"
    (a Tensor); `aliases` are other places that held the same storage at capture."""

    __slots__ = ("kind", "where", "layout", "convert", "aliases", "twins", "tensor")

    def __init__(self, kind, where, layout=None, convert=None):
        self.kind, self.where, self.layout, self.convert = kind, where, layout, convert
        self.aliases = []  # (checked at every replay)
        self.twins = []    # slots that held the very same Tensor (checked after the world moved)
        self.tensor = None  # (the capture's Tensor for a slot or object: names it in reports)


class Run:
    """One schedule of a CapturedStep (or a host call, `fn`): the compiled entry and how
    to bind it: `index` (each leaf's place in the replay's pool), `views` (leaves that
    are views: (position, view)), `n_out` (outputs it adds to the pool)."""

    __slots__ = ("entry", "device", "leaves", "scalars", "fixed", "fn", "n_out", "index", "views")

    def __init__(self, entry, device, leaves, scalars, n_out, fn=None):
        self.entry, self.device, self.leaves, self.scalars, self.fn = entry, device, leaves, scalars, fn
        self.n_out = n_out
        #: the scalars as one tuple when none is read at each call (the runtime gathers
        #: their values once, cpu.py `prepare`)
        self.fixed = None if any(callable(x) for x in scalars) else tuple(scalars)

    def scalars_now(self):
        if self.fixed is not None:
            return self.fixed
        return [_Value(float(s())) if callable(s) else s for s in self.scalars]  # (float: as RuntimeScalar() is)


class _Value:
    """A run-time scalar's value for one replay (what a Scalar offers the runtime)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Replayed(TensorOp):
    """The op of a returned Tensor whose graph a replay did not build: a backward pass
    through it is an error, not gradients that silently stay None."""

    def gradient(self, out_grad, node):
        raise JitError("needle.jit: backward() through a tensor returned by a replayed step: a replay keeps no "
                       "graph. Call backward() (and opt.step()) inside the jitted function, or use NEEDLE_JIT=0")


REPLAYED = Replayed()


def place_in_pool(sources, runs, actions, writes, result):
    """(the constants, place(binding) -> (pool index, view)): a replay's pool holds the
    sources' arrays, the constants, then each random draw and each schedule's outputs in
    the order the replay makes them."""
    consts, const_at = [], {}

    def note(binding):
        if binding[0] == CONST and id(binding[1]) not in const_at:
            const_at[id(binding[1])] = len(sources) + len(consts)
            consts.append(binding[1])

    def walk(template):
        if template[0] in ("tensor", "array"):
            note(template[1])
        for part in parts_of(template):
            walk(part)
    for run in runs:
        for leaf in run.leaves:
            note(leaf)
    for w in writes:
        walk(w[2])
    walk(result)
    at, end, done = {}, len(sources) + len(consts), 0
    for s, run in enumerate(runs + [None]):
        while done < len(actions) and (run is None or actions[done][2] <= s):
            if actions[done][0] == "draw":
                at[(DRAW, actions[done][1], None)] = end
                end += 1
            done += 1
        if run is not None:
            for j in range(run.n_out):
                at[(OUT, s, j)] = end + j
            end += run.n_out

    def place(binding):
        kind, a, b, view = binding
        i = a if kind == SRC else const_at[id(a)] if kind == CONST else at[(kind, a, b)]
        return i, view
    for run in runs:
        placed = [place(leaf) for leaf in run.leaves]
        run.index = [i for i, _ in placed]
        run.views = [(pos, view) for pos, (_, view) in enumerate(placed) if view is not None]
    return consts, place


def parts_of(template) -> list:
    """The templates inside `template` (see CapturedStep.make): a dict's values, a
    sequence's items, a Tensor's gradient and attributes."""
    kind = template[0]
    if kind == "dict":
        return [t for _, t in template[1]]
    if kind == "seq":
        return template[2]
    if kind == "tensor":
        return [t for _, t in template[5]]
    return ()


def templates_in(template) -> set:
    """The ids of a template and of every template inside it."""
    found = {id(template)}
    for part in parts_of(template):
        found |= templates_in(part)
    return found


def host_run(run, leaves) -> list:
    results = run.fn(*[host_values(a) for a in leaves])
    return [realized_array(Tensor(r, device=run.device, dtype=str(r.dtype), requires_grad=False)) for r in results]


def scalars_of(run) -> list:
    """A captured schedule's scalars: RuntimeScalars become providers read at each replay."""
    return [sc.value.provider if isinstance(sc.value, RuntimeScalar) else sc for sc in run.scalars]
