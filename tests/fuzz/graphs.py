"""Random Tensor-level programs for differential fuzzing, and the code they become.

A *program* is a straight-line list of steps over variables v0, v1, ...: each step
is a fresh input (a numpy array) or one needle op applied to earlier variables,
with its static parameters (axes, shapes, indices, scalars).  Every op has two
templates, one in needle and one in plain numpy (float64), so a program turns into
two Python functions that compute the same thing independently (`needle_source`,
`numpy_source`).  The fuzz tests execute exactly that source text, and a failing
program is saved as exactly that text: what ran is what you read.

Strategies (hypothesis):
  `programs(kind)` — kind "forward" (float32, values incl. negatives, zeros,
  1e30, inf, -inf, nan, on shapes with dims 0..7) or "gradient" (float64, finite,
  well-conditioned values; ops that divide or take logs get safe operands).

Op families covered: elementwise unary (neg, exp, log|x|, relu, sigmoid, tanh,
sqrt, powers), scalar ops in both orders, binary ops with numpy broadcasting
(operands drawn as existing variables or new inputs of a broadcastable shape),
summation / mean / max / logsumexp over axes with keepdims, a reduction of what reads a
reduction over the same axes and two reductions of one operand (on wide trailing axes
too), reshape (with -1),
transpose, permute, broadcast_to, getitem (ints, steps, negative steps, None,
Ellipsis), pad, flip, dilate, split, concatenate, stack, and matmul (2-D and
batched, batch dims broadcast both ways).  Graphs are DAGs: any earlier variable
can be read again, so fused kernels see shared producers.

Failing cases become regression tests
-------------------------------------
When a fuzz test finds a mismatch, hypothesis shrinks it, calling the test again
with ever smaller failing programs and finally replaying the minimal one.  Every
failing call passes through `harness.save_failure(program, mode, message)`, which
writes the program as a plain pytest file,
`tests/fuzz/regressions/test_regression_<hash>.py` (inputs as literals, the
needle code, the numpy code, the comparison with the tolerances the fuzzer
used), and deletes the file the previous failing call of that test wrote; so
after the run exactly one file per failing test remains: the shrunk
reproducer.  Fix the bug, check the file passes, and commit it with the fix.
Set FUZZ_SAVE=0 to write nothing.  `harness.write_regression(program, mode)` does
the writing and can be called by hand (e.g. from a debugger) on any Program.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from tests.fuzz import numpy_helpers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGRESSION_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")

LONG = os.environ.get("FUZZ", "").strip().lower() == "long"
#: sizes a dimension can take (0 only now and then); CI uses fewer so kernels repeat
DIMS = (2, 3, 1, 4, 5, 6, 7, 3, 2, 0) if LONG else (2, 3, 1, 5, 3, 2, 0, 1)
#: largest number of elements of a new input, and of any variable
MAX_ELEMS, MAX_OUT = 600, 5000
#: sizes of the occasional big matmul (m * n * k >= 48**3: the tiled, packed kernel)
BIG_DIMS = (48, 50, 64, 65, 70)
#: a small constant keeps log|x| finite at 0 (a power of two: exact in float32)
EPS = 0.0009765625
#: scalars of scalar ops, all exact in float32 so both sides use the same value
SCALARS = (2.0, 0.5, -1.5, 3.0, 1.0, 0.0, -0.25, 7.0, float(np.float32(0.1)), float(np.float32(1e30)),
           -1.0, float(np.float32(-3.7)))


# ---- programs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    op: str                 # an OPS key, or "input"
    args: tuple             # variable numbers read
    params: tuple = ()      # sorted (name, value) pairs

    @property
    def p(self) -> dict:
        return dict(self.params)


@dataclass
class Program:
    dtype: str                                  # "float32" or "float64"
    inputs: list = field(default_factory=list)  # numpy arrays, in the dtype
    steps: list = field(default_factory=list)   # Steps; variable k is made by steps[k]
    shapes: list = field(default_factory=list)  # shape of each variable
    outputs: tuple = ()                         # variables returned
    together: bool = True                       # realize the outputs with one needle.realize

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return "\n" + needle_source(self) + "\n" + numpy_source(self) + "\n" + inputs_source(self)


# ---- the op table --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """An op's needle and numpy templates.  `{a}`, `{b}` name operands, `{args}` a
    list of operands, other fields come from the step's parameters (as repr)."""

    needle: str
    numpy: str
    arity: int = 1                 # operands (0: variadic, see `{args}`)
    family: str = "elementwise"    # elementwise | scalar | binary | reduce | movement | matmul | join
    # templates used by gradient programs instead (safe domains: no division by ~0)
    grad_needle: str = ""
    grad_numpy: str = ""


OPS = {
    # elementwise unary (first: hypothesis shrinks towards the start of the table)
    "neg": Op("-{a}", "-{a}"),
    "exp": Op("ndl.ops.exp({a})", "np.exp({a})"),
    "relu": Op("ndl.ops.relu({a})", "np.maximum({a}, 0.0)"),
    "tanh": Op("ndl.ops.tanh({a})", "np.tanh({a})"),
    "sigmoid": Op("ndl.ops.sigmoid({a})", "1.0 / (1.0 + np.exp(-{a}))"),
    "log_abs": Op(f"ndl.ops.log(ndl.ops.relu({{a}}) + ndl.ops.relu(-{{a}}) + {EPS})", f"np.log(np.abs({{a}}) + {EPS})",
                  grad_needle="ndl.ops.log({a} * {a} + 0.5)", grad_numpy="np.log({a} * {a} + 0.5)"),
    "sqrt": Op("ndl.ops.sqrt(ndl.ops.relu({a}))", "np.sqrt(np.maximum({a}, 0.0))",
               grad_needle="ndl.ops.sqrt({a} * {a} + 0.5)", grad_numpy="np.sqrt({a} * {a} + 0.5)"),
    "pow": Op("{a} ** {p}", "{a} ** {p}",
              grad_needle="({a} * {a} + 0.5) ** {p}", grad_numpy="({a} * {a} + 0.5) ** {p}"),
    # with a Python scalar
    "add_scalar": Op("{a} + {c}", "{a} + {c}", family="scalar"),
    "mul_scalar": Op("{a} * {c}", "{a} * {c}", family="scalar"),
    "div_scalar": Op("{a} / {c}", "{a} / {c}", family="scalar"),
    "rsub_scalar": Op("{c} - {a}", "{c} - {a}", family="scalar"),
    "rdiv_scalar": Op("{c} / {a}", "{c} / {a}", family="scalar",
                      grad_needle="{c} / ({a} * {a} + 0.5)", grad_numpy="{c} / ({a} * {a} + 0.5)"),
    # binary, numpy broadcasting
    "add": Op("{a} + {b}", "{a} + {b}", 2, "binary"),
    "sub": Op("{a} - {b}", "{a} - {b}", 2, "binary"),
    "mul": Op("{a} * {b}", "{a} * {b}", 2, "binary"),
    "div": Op("{a} / {b}", "{a} / {b}", 2, "binary",
              grad_needle="{a} / ({b} * {b} + 0.5)", grad_numpy="{a} / ({b} * {b} + 0.5)"),
    # reductions
    "sum": Op("ndl.ops.summation({a}, axes={axes}, keepdims={keepdims})",
              "np.sum({a}, axis={axes}, keepdims={keepdims})", family="reduce"),
    "mean": Op("ndl.ops.mean({a}, axes={axes}, keepdims={keepdims})",
               "np_mean({a}, {axes}, {keepdims})", family="reduce"),
    "max": Op("ndl.ops.max({a}, axes={axes}, keepdims={keepdims})",
              "np.max({a}, axis={axes}, keepdims={keepdims})", family="reduce"),
    "logsumexp": Op("ndl.ops.logsumexp({a}, axes={axes})", "np_logsumexp({a}, {axes})", family="reduce"),
    # a reduction of what reads a reduction over the same axes (a column softmax's sum, a
    # variance), and two reductions of one operand: kernels with several stages (on wide
    # trailing axes too, where reductions over other axes take the column strategy)
    "centered": Op("nd_centered({a}, {inner}, {outer}, {axes}, {keepdims})",
                   "np_centered({a}, {inner}, {outer}, {axes}, {keepdims})", family="reduce_twice"),
    "sum_and_max": Op("ndl.ops.summation({a}, axes={axes}, keepdims={keepdims}) + "
                      "ndl.ops.max({a}, axes={axes}, keepdims={keepdims})",
                      "np.sum({a}, axis={axes}, keepdims={keepdims}) + np.max({a}, axis={axes}, keepdims={keepdims})",
                      family="reduce_twice"),
    # movement
    "reshape": Op("ndl.ops.reshape({a}, {shape})", "np.reshape({a}, {shape})", family="movement"),
    "transpose": Op("ndl.ops.transpose({a}, {axes})", "np_transpose({a}, {axes})", family="movement"),
    "permute": Op("ndl.ops.permute({a}, {axes})", "np.transpose({a}, {axes})", family="movement"),
    "broadcast_to": Op("ndl.ops.broadcast_to({a}, {shape})", "np.broadcast_to({a}, {shape})", family="movement"),
    "getitem": Op("{a}[{index}]", "{a}[{index}]", family="movement"),
    "pad": Op("ndl.ops.pad({a}, {pads})", "np.pad({a}, {pads})", family="movement"),
    "flip": Op("ndl.ops.flip({a}, {axes})", "np.flip({a}, {axes})", family="movement"),
    "dilate": Op("ndl.ops.dilate({a}, {axes}, {dilation})", "np_dilate({a}, {axes}, {dilation})", family="movement"),
    "split": Op("ndl.ops.split({a}, axis={axis})[{i}]", "np.take({a}, {i}, axis={axis})", family="movement"),
    # several operands
    "matmul": Op("{a} @ {b}", "np.matmul({a}, {b})", 2, "matmul"),
    "concatenate": Op("ndl.ops.concatenate({args}, axis={axis})", "np.concatenate({args}, axis={axis})", 0, "join"),
    "stack": Op("ndl.ops.stack({args}, axis={axis})", "np.stack({args}, axis={axis})", 0, "join"),
}

# ---- source text ---------------------------------------------------------------------------------
def _fmt(value) -> str:
    """Python source for a parameter value (index tuples are rendered by `_index_source`)."""
    return repr(value)


def _index_source(index) -> str:
    parts = []
    for item in index:
        if item is None:
            parts.append("None")
        elif item is Ellipsis:
            parts.append("...")
        elif isinstance(item, tuple):  # (start, stop, step) of a slice
            start, stop, step = ("" if x is None else str(x) for x in item)
            parts.append(f"{start}:{stop}" + (f":{step}" if step else ""))
        else:
            parts.append(str(item))
    return ", ".join(parts) if parts else "()"


def expression(step: Step, side: str, gradient: bool = False) -> str:
    """The right-hand side of a step in needle or numpy source."""
    op = OPS[step.op]
    template = op.needle if side == "needle" else op.numpy
    if gradient and op.grad_needle:
        template = op.grad_needle if side == "needle" else op.grad_numpy
    names = [f"v{k}" for k in step.args]
    fields = {}
    for name, value in step.params:
        fields[name] = _index_source(value) if name == "index" else _fmt(value)
    if op.arity == 0:
        fields["args"] = "[" + ", ".join(names) + "]"
    else:
        fields.update(zip("ab", names))
    return template.format(**fields)


def needle_source(prog: Program, name: str = "needle_program") -> str:
    gradient = prog.dtype == "float64"
    lines = [f"def {name}(x, device, requires_grad=False):",
             "    \"\"\"The outputs (needle Tensors) and the inputs' tensors.\"\"\""]
    inputs = []
    for k, step in enumerate(prog.steps):
        if step.op == "input":
            lines.append(f"    v{k} = ndl.Tensor(x[{step.p['i']}], device=device, dtype={prog.dtype!r}, "
                         "requires_grad=requires_grad)")
            inputs.append(f"v{k}")
        else:
            lines.append(f"    v{k} = {expression(step, 'needle', gradient)}")
    lines.append(f"    return [{', '.join(f'v{k}' for k in prog.outputs)}], [{', '.join(inputs)}]")
    return "\n".join(lines)


def numpy_source(prog: Program, name: str = "numpy_program") -> str:
    gradient = prog.dtype == "float64"
    lines = [f"def {name}(x):",
             "    \"\"\"Every variable, in float64 (numpy only).\"\"\"",
             "    with np.errstate(all=\"ignore\"):"]
    for k, step in enumerate(prog.steps):
        if step.op == "input":
            lines.append(f"        v{k} = np.asarray(x[{step.p['i']}], dtype=np.float64)")
        else:
            lines.append(f"        v{k} = np.asarray({expression(step, 'numpy', gradient)})")
    lines.append(f"    return [{', '.join(f'v{k}' for k in range(len(prog.steps)))}]")
    return "\n".join(lines)


def _array_source(a: np.ndarray) -> str:
    flat = ", ".join(_float_source(float(v)) for v in a.reshape(-1))
    return f"np.array([{flat}], dtype=np.{a.dtype.name}).reshape({a.shape!r})"


def _float_source(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def inputs_source(prog: Program) -> str:
    lines = ["def inputs():", "    return ["]
    for a in prog.inputs:
        lines.append(f"        {_array_source(a)},")
    lines.append("    ]")
    return "\n".join(lines)


_compiled = {}
_helper_namespace = {}


def _helpers() -> dict:
    """np and the numpy helpers, defined once."""
    if not _helper_namespace:
        _helper_namespace.update({"np": np, "nan": np.nan, "inf": np.inf})
        _helper_namespace.update({name: getattr(numpy_helpers, name) for name in numpy_helpers.__all__})
    return _helper_namespace


def compile_program(prog: Program):
    """(needle_fn, numpy_fn) executed from the source text."""
    src = needle_source(prog) + "\n\n" + numpy_source(prog)
    fns = _compiled.get(src)
    if fns is None:
        import needle as ndl
        namespace = dict(_helpers(), ndl=ndl)
        exec(src, namespace)  # noqa: S102
        fns = _compiled[src] = (namespace["needle_program"], namespace["numpy_program"])
        if len(_compiled) > 256:
            _compiled.clear()
    return fns


# ---- values --------------------------------------------------------------------------------------
#: forward values: hypothesis shrinks towards the first kind (small integers: exact, with ties)
FORWARD_KINDS = ("ints", "normal", "zeros", "negative", "positive", "large", "mixed", "special")
GRADIENT_KINDS = ("normal", "uniform", "positive", "negative")
SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, 1e-40, 3e38, 88.5, -104.0)


def _base_values(kind: str, shape, rng) -> np.ndarray:
    size = math.prod(shape)
    if kind == "ints":
        return rng.integers(-3, 4, size).astype(np.float64)
    if kind == "normal":
        return rng.standard_normal(size) * 2.0
    if kind == "uniform":
        return rng.uniform(-2.0, 2.0, size)
    if kind == "zeros":
        return np.zeros(size)
    if kind == "negative":
        return -rng.uniform(0.1, 4.0, size)
    if kind == "positive":
        return rng.uniform(0.1, 4.0, size)
    if kind == "large":
        return rng.choice([-1.0, 1.0], size) * 10.0 ** rng.uniform(25, 30, size)
    if kind == "mixed":
        pools = [rng.standard_normal(size), rng.choice([-1e30, 1e30, 1e-30, 0.0], size),
                 rng.integers(-2, 3, size).astype(np.float64)]
        return np.choose(rng.integers(0, 3, size), pools)
    if kind == "special":
        return np.asarray(SPECIALS)[rng.integers(0, len(SPECIALS), size)]
    raise ValueError(kind)


@st.composite
def arrays(draw, shape, dtype: str, kinds=FORWARD_KINDS, overlay: bool = True) -> np.ndarray:
    """Values of one input: a kind and a seed (cheap for big arrays), then a few
    special values at drawn positions (so inf/nan/1e30 show up in any kind)."""
    kind = pick_one(draw, kinds)
    seed = draw(st.integers(0, 2 ** 16 - 1))
    values = _base_values(kind, shape, np.random.default_rng(seed))
    size = values.size
    if overlay and size:
        for _ in range(draw(st.integers(0, min(3, size)))):
            values[draw(st.integers(0, size - 1))] = pick_one(draw, SPECIALS)
    return values.astype(dtype).reshape(shape)


# ---- strategies ----------------------------------------------------------------------------------
def pick_one(draw, options):
    """One of `options`, close to uniformly (hypothesis's sampled_from favours the
    first ones while generating); shrinks towards the first."""
    return options[draw(st.integers(0, 2 ** 16 - 1)) % len(options)]


FORWARD_OPS = tuple(OPS)
#: gradient programs: every op (those that divide or take logs use their safe templates), but
#: a max of a sum and a max (ties in its gradient)
GRADIENT_OPS = tuple(op for op in OPS if op != "sum_and_max")
GRADIENT_SCALARS = (2.0, 0.5, -1.5, 3.0, 1.0, 0.0, -0.25)


class _Builder:
    """Grows a Program one step at a time, drawing with hypothesis."""

    def __init__(self, draw, kind: str):
        self.draw, self.kind = draw, kind
        self.gradient = kind == "gradient"
        self.prog = Program("float64" if self.gradient else "float32")
        self.dims = (1, 2, 3, 4, 2) if self.gradient else DIMS
        self.max_elems = 48 if self.gradient else MAX_ELEMS
        self.max_out = 48 if self.gradient else MAX_OUT

    # -- variables --------------------------------------------------------------------------------
    def shape(self, ndim=None) -> tuple:
        if ndim is None:
            ndim = pick_one(self.draw, (2, 1, 3, 0, 4, 2, 3) if not self.gradient else (2, 1, 3, 0))
        shape = [pick_one(self.draw, self.dims) for _ in range(ndim)]
        while math.prod(shape) > self.max_elems:
            shape[shape.index(max(shape))] //= 2
        return tuple(shape)

    def new_input(self, shape) -> int:
        kinds = GRADIENT_KINDS if self.gradient else FORWARD_KINDS
        values = self.draw(arrays(shape, self.prog.dtype, kinds, overlay=not self.gradient))
        self.prog.inputs.append(values)
        return self._add(Step("input", (), (("i", len(self.prog.inputs) - 1),)), tuple(shape))

    def _add(self, step: Step, shape) -> int:
        self.prog.steps.append(step)
        self.prog.shapes.append(tuple(shape))
        return len(self.prog.steps) - 1

    def pick(self, ok=lambda shape: True):
        """An existing variable whose shape passes `ok` (recent ones first), or None."""
        candidates = [k for k in reversed(range(len(self.prog.steps))) if ok(self.prog.shapes[k])]
        if not candidates:
            return None
        return candidates[self.draw(st.integers(0, len(candidates) - 1))]

    def maybe_existing(self, ok):
        """Half the time an existing variable that fits, else None (make a new input)."""
        if self.draw(st.booleans()):
            return self.pick(ok)
        return None

    # -- one step ---------------------------------------------------------------------------------
    def step(self, name: str) -> None:
        op = OPS[name]
        made = getattr(self, "_" + op.family)(name)
        if made is None:
            return
        args, params = made
        step = Step(name, tuple(args), tuple(sorted(params.items())))
        shape = self._out_shape(step)
        if shape is not None and math.prod(shape) <= self.max_out:
            self._add(step, shape)

    def _out_shape(self, step: Step):
        """The numpy template run on zeros: the output shape, or None if invalid."""
        env = dict(_helpers())
        for k in step.args:
            env[f"v{k}"] = np.zeros(self.prog.shapes[k])
        try:
            with np.errstate(all="ignore"):
                return tuple(np.shape(eval(expression(step, "numpy", self.gradient), env)))  # noqa: S307
        except (ValueError, IndexError, TypeError, np.exceptions.AxisError):
            return None

    def _elementwise(self, name):
        a = self.pick()
        params = {}
        if name == "pow":
            params["p"] = pick_one(self.draw, ((2, 3, -1, 0.5, 1.5, -0.5) if self.gradient
                                                    else (2, 3, -1, 0.5, 0, 1)))
        return [a], params

    def _scalar(self, name):
        scalars = GRADIENT_SCALARS if self.gradient else SCALARS
        c = pick_one(self.draw, scalars)
        if name == "div_scalar" and c == 0.0:
            c = 2.0
        return [self.pick()], {"c": c}

    def _broadcastable_to(self, shape):
        """A new shape that broadcasts with `shape` (drop leading dims, set dims to 1,
        sometimes add a leading dim that broadcasts the other way)."""
        drop = self.draw(st.integers(0, len(shape)))
        out = [1 if self.draw(st.integers(0, 3)) == 0 else n for n in shape[drop:]]
        if self.draw(st.integers(0, 4)) == 0:
            out.insert(0, pick_one(self.draw, self.dims))
        return tuple(out)

    def _binary(self, name):
        a = self.pick()
        sa = self.prog.shapes[a]
        mode = self.draw(st.integers(0, 2))
        if mode == 0:
            b = a
        else:
            b = self.pick(lambda s: _broadcasts(sa, s)) if mode == 1 else None
            if b is None:
                b = self.new_input(self._broadcastable_to(sa))
        if self.draw(st.booleans()):
            a, b = b, a
        return [a, b], {}

    def _axes(self, shape, nonempty: bool):
        """None, an int or a tuple of axes (negative now and then); with `nonempty`
        only axes of nonzero size (max of an empty axis is an error; logsumexp's, -inf, is
        tested by hand: the numpy reference below takes a max)."""
        ndim = len(shape)
        allowed = [i for i in range(ndim) if not nonempty or shape[i] > 0]
        mode = self.draw(st.integers(0, 2))
        if mode == 0 and len(allowed) == ndim:
            return None
        if not allowed:
            return ()
        if mode == 1:
            ax = allowed[self.draw(st.integers(0, len(allowed) - 1))]
            return ax - ndim if self.draw(st.booleans()) else ax
        chosen = [i for i in allowed if self.draw(st.booleans())]
        return tuple(i - ndim if self.draw(st.integers(0, 3)) == 0 else i for i in chosen)

    def _reduce(self, name):
        a = self.pick()
        shape = self.prog.shapes[a]
        params = {"axes": self._axes(shape, nonempty=name in ("max", "logsumexp"))}
        if name != "logsumexp":
            params["keepdims"] = self.draw(st.booleans())
        return [a], params

    def _reduce_twice(self, name):
        """Half the time a new input with a wide last axis (8, 9 or 16: the column strategy
        of reductions over the other axes), reduced twice over the same nonempty axes."""
        if self.draw(st.booleans()):
            a = self.new_input(tuple(pick_one(self.draw, (2, 3, 4)) for _ in range(pick_one(self.draw, (1, 2))))
                               + (pick_one(self.draw, (8, 9, 16)),))
        else:
            a = self.pick(lambda s: len(s) > 0 and min(s) > 0)
            if a is None:
                return None
        shape = self.prog.shapes[a]
        axes = self._axes(shape, nonempty=True)
        if axes == () or (axes is None and not shape):
            return None
        params = {"axes": axes, "keepdims": self.draw(st.booleans())}
        if name == "centered":
            inner = ("sum", "mean") if self.gradient else ("max", "sum", "mean")
            params.update(inner=pick_one(self.draw, inner), outer=pick_one(self.draw, ("sum", "mean", "max")
                                                                             if not self.gradient else ("sum", "mean")))
        return [a], params

    def _movement(self, name):
        draw = self.draw
        a = self.pick(lambda s: len(s) >= (2 if name == "transpose" else 0 if name in ("reshape", "broadcast_to")
                                           else 1))
        if a is None:
            return None
        shape = self.prog.shapes[a]
        ndim = len(shape)
        if name == "reshape":
            return [a], {"shape": self._reshape_target(shape)}
        if name == "transpose":
            if draw(st.booleans()):
                return [a], {"axes": None}
            return [a], {"axes": (draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))}
        if name == "permute":
            return [a], {"axes": tuple(draw(st.permutations(range(ndim))))}
        if name == "broadcast_to":
            lead = tuple(pick_one(draw, self.dims) for _ in range(draw(st.integers(0, 2))))
            grown = tuple(pick_one(draw, self.dims) if n == 1 and draw(st.booleans()) else n for n in shape)
            return [a], {"shape": lead + grown}
        if name == "getitem":
            return [a], {"index": self._index(shape)}
        if name == "pad":
            return [a], {"pads": tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)}
        if name == "flip":
            return [a], {"axes": self._axes(shape, nonempty=False)}
        if name == "dilate":
            axes = tuple(i for i in range(ndim) if draw(st.booleans())) or (0,)
            return [a], {"axes": axes, "dilation": draw(st.integers(0, 2))}
        if name == "split":
            allowed = [i for i in range(ndim) if shape[i] > 0]
            if not allowed:
                return None
            axis = allowed[draw(st.integers(0, len(allowed) - 1))]
            return [a], {"axis": axis - ndim if draw(st.booleans()) else axis,
                         "i": draw(st.integers(-shape[axis], shape[axis] - 1))}
        raise AssertionError(name)

    def _reshape_target(self, shape) -> tuple:
        draw = self.draw
        size = math.prod(shape)
        if size == 0:
            out = [pick_one(draw, self.dims) for _ in range(draw(st.integers(1, 3)))]
            out[draw(st.integers(0, len(out) - 1))] = 0
            return tuple(out)
        factors = _prime_factors(size)
        n_dims = draw(st.integers(0 if size == 1 else 1, 4))
        out = [1] * max(n_dims, 1 if factors else 0)
        for f in factors:
            out[draw(st.integers(0, len(out) - 1))] *= f
        if out and draw(st.integers(0, 2)) == 0:
            out[draw(st.integers(0, len(out) - 1))] = -1
        return tuple(out)

    def _index(self, shape) -> tuple:
        draw = self.draw
        index = []
        n_real = draw(st.integers(1, len(shape)))
        for n in shape[:n_real]:
            choice = draw(st.integers(0, 3))
            if choice == 0 and n > 0:
                index.append(draw(st.integers(-n, n - 1)))
            elif choice == 1:
                index.append((None, None, None))
            else:
                step = pick_one(draw, (1, 2, -1, 3, -2))
                start = draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
                stop = draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
                index.append((start, stop, step))
        if draw(st.integers(0, 3)) == 0:
            index.insert(draw(st.integers(0, len(index))), None)
        if n_real < len(shape) and draw(st.integers(0, 3)) == 0:
            index.insert(draw(st.integers(0, len(index))), Ellipsis)
        return tuple(index)

    def _matmul(self, name):
        draw = self.draw
        if not self.gradient and draw(st.integers(0, 5)) == 0:  # big enough for the tiled kernel
            m, k, n = (pick_one(draw, BIG_DIMS) for _ in range(3))
            return [self.new_input((m, k)), self.new_input((k, n))], {}
        if draw(st.booleans()):  # an existing left operand
            a = self.pick(lambda s: len(s) >= 2)
            if a is None:
                return None
            sa = self.prog.shapes[a]
            b = self.maybe_existing(lambda s: len(s) >= 2 and s[-2] == sa[-1] and _broadcasts(sa[:-2], s[:-2]))
            if b is None:
                batch = self._broadcastable_to(sa[:-2]) if len(sa) > 2 or draw(st.integers(0, 3)) == 0 else ()
                b = self.new_input(batch + (sa[-1], pick_one(draw, self.dims)))
        else:  # an existing right operand
            b = self.pick(lambda s: len(s) >= 2)
            if b is None:
                return None
            sb = self.prog.shapes[b]
            batch = self._broadcastable_to(sb[:-2]) if len(sb) > 2 or draw(st.integers(0, 3)) == 0 else ()
            a = self.new_input(batch + (pick_one(draw, self.dims), sb[-2]))
        return [a, b], {}

    def _join(self, name):
        draw = self.draw
        a = self.pick(lambda s: len(s) >= (1 if name == "concatenate" else 0))
        if a is None:
            return None
        shape = self.prog.shapes[a]
        ndim = len(shape)
        if name == "concatenate":
            axis = draw(st.integers(-ndim, ndim - 1))
            ax = axis % ndim

            def fits(s):
                return len(s) == ndim and all(x == y for i, (x, y) in enumerate(zip(s, shape)) if i != ax)
            make = lambda: self.new_input(tuple(pick_one(draw, self.dims) if i == ax else n  # noqa: E731
                                                for i, n in enumerate(shape)))
        else:
            axis = draw(st.integers(-ndim - 1, ndim))
            fits = lambda s: s == shape  # noqa: E731
            make = lambda: self.new_input(shape)  # noqa: E731
        parts = [a]
        for _ in range(draw(st.integers(1, 2))):
            choice = draw(st.integers(0, 2))
            other = a if choice == 0 else self.pick(fits) if choice == 1 else None
            parts.append(other if other is not None else make())
        if draw(st.booleans()):
            parts.reverse()
        return parts, {"axis": axis}


def _broadcasts(s1, s2) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(s1), reversed(s2)))


def _prime_factors(n: int) -> list:
    out, f = [], 2
    while n > 1 and f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


@st.composite
def programs(draw, kind: str = "forward", max_steps: int = 7, ops=None) -> Program:
    """A random program: one or more inputs, then up to `max_steps` ops."""
    b = _Builder(draw, kind)
    ops = ops or (GRADIENT_OPS if kind == "gradient" else FORWARD_OPS)
    b.new_input(b.shape())
    # the ops first, as a list: hypothesis shrinks a list by deleting elements
    for code in draw(st.lists(st.integers(0, 2 ** 16 - 1), min_size=1, max_size=max_steps)):
        b.step(ops[code % len(ops)])
    prog = b.prog
    made = [k for k, s in enumerate(prog.steps) if s.op != "input"]
    if not made:
        b.step("exp")
        made = [len(prog.steps) - 1]
    outputs = [made[-1]]
    if kind != "gradient":
        for _ in range(draw(st.integers(0, 2))):
            k = made[draw(st.integers(0, len(made) - 1))]
            if k not in outputs:
                outputs.append(k)
        prog.together = draw(st.booleans())
    prog.outputs = tuple(outputs)
    return prog
