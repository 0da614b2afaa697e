"""Running fuzzed programs: needle against numpy (values) and against finite
differences (gradients), and saving failing programs as regression tests.

Modes of `check_forward`:
  "lazy"    lazy mode on cpu(): the whole program is one graph, fused and compiled;
  "eager"   eager mode on cpu(): one compiled kernel per primitive;
  "bounds"  lazy mode with config.BOUNDS_CHECK on (a BoundsError is a failure);
  "cuda"    lazy mode on cuda() with config.BOUNDS_CHECK on: the CUDA lowering and
            codegen, run by the GPU emulator (tests/codegen/cuda_emulation) unless a
            real GPU is present; the caller holds `gpu.cuda_runtime()` around it;
  "cuda-small"  the same with the CUDA lowering's size thresholds shrunk
            (regressions/support.SMALL_THRESHOLDS; the caller sets them).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import textwrap

import numpy as np

import needle as ndl
from needle import config

from . import graphs
from .graphs import Program, compile_program
from .oracle import TINY, Bounds, mismatches

CPU = ndl.cpu()


@contextlib.contextmanager
def _mode(mode: str):
    previous = config.BOUNDS_CHECK
    config.BOUNDS_CHECK = mode == "bounds" or mode.startswith("cuda") or previous
    try:
        with ndl.lazy(mode != "eager"):
            yield
    finally:
        config.BOUNDS_CHECK = previous


def run_needle(prog: Program, mode: str = "lazy") -> list:
    needle_fn, _ = compile_program(prog)
    with _mode(mode):
        outs, _ = needle_fn(prog.inputs, ndl.cuda() if mode.startswith("cuda") else CPU)
        if prog.together:
            ndl.realize(*outs)
        return [o.numpy() for o in outs]


def forward_problems(prog: Program, got: list, values: list, bounds: Bounds) -> list:
    """Text of every output that differs from numpy beyond its error bound."""
    problems = []
    for k, g in zip(prog.outputs, got):
        want = values[k]
        if g.shape != want.shape or g.dtype != np.dtype(prog.dtype):
            problems.append(f"v{k}: got {g.dtype}{g.shape}, expected {prog.dtype}{want.shape}")
            continue
        bad = mismatches(g, want, bounds.E[k], bounds.U[k])
        if bad.any():
            where = np.argwhere(bad)[:5]
            details = "; ".join(f"{tuple(int(i) for i in ix)}: got {g[tuple(ix)]!r} want {want[tuple(ix)]!r} "
                                f"(bound {2 * bounds.E[k][tuple(ix)]:.3g})" for ix in where)
            problems.append(f"v{k}: {int(bad.sum())} of {bad.size} values differ: {details}")
    return problems


def check_forward(prog: Program, mode: str = "lazy") -> None:
    """needle (in `mode`) equals the numpy program within the error bounds."""
    _, numpy_fn = compile_program(prog)
    values = numpy_fn(prog.inputs)
    bounds = Bounds(prog, values)
    try:
        got = run_needle(prog, mode)
        problems = forward_problems(prog, got, values, bounds)
        if problems:
            raise AssertionError("needle differs from numpy:\n  " + "\n  ".join(problems))
    except Exception as e:
        save_failure(prog, mode, f"{type(e).__name__}: {e}", bounds)
        raise


# ---- gradients -----------------------------------------------------------------------------------
FD_STEP = 1e-5


def weights_for(shape) -> np.ndarray:
    return np.random.default_rng(1234).uniform(0.5, 1.5, size=shape)


def numerical_gradients(numpy_fn, xs: list, out: int, weights) -> tuple:
    """Central differences of sum(weights * v_out) for every input element, and an
    estimate of their rounding error."""
    grads, scale = [], 0.0
    for i, x in enumerate(xs):
        g = np.zeros(x.shape)
        for j in range(x.size):
            values = []
            for sign in (1, -1):
                moved = [y.copy() for y in xs]
                moved[i].flat[j] += sign * FD_STEP
                v = numpy_fn(moved)[out]
                values.append(float(np.sum(weights * v)))
                scale = max(scale, float(np.sum(np.abs(weights * v))))
            g.flat[j] = (values[0] - values[1]) / (2 * FD_STEP)
        grads.append(g)
    return grads, 8 * 2.0 ** -53 * scale / FD_STEP


def well_conditioned(prog: Program, values: list) -> bool:
    """Finite, moderate values, and no relu input or max tie within reach of the
    finite-difference step (derivatives jump there)."""
    for k, step in enumerate(prog.steps):
        v = values[k]
        if not np.all(np.isfinite(v)) or (v.size and np.max(np.abs(v)) > 1e4):
            return False
        if step.op == "relu" and np.any(np.abs(values[step.args[0]]) < 1e-3):
            return False
        if step.op == "max" and not _clear_maxima(values[step.args[0]], step.p["axes"]):
            return False
    return True


def _clear_maxima(a: np.ndarray, axes) -> bool:
    if a.ndim == 0 or a.size == 0:
        return True
    axes_t = tuple(range(a.ndim)) if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
    axes_t = tuple(sorted(ax % a.ndim for ax in axes_t))
    if not axes_t:
        return True
    kept = [i for i in range(a.ndim) if i not in axes_t]
    groups = np.transpose(a, kept + list(axes_t)).reshape(int(np.prod([a.shape[i] for i in kept])), -1)
    if groups.shape[1] < 2:
        return True
    top = np.sort(groups, axis=1)
    return bool(np.all(top[:, -1] - top[:, -2] > 1e-3))


def gradient_problems(prog: Program, device=CPU) -> list:
    needle_fn, numpy_fn = compile_program(prog)
    values = numpy_fn(prog.inputs)
    out = prog.outputs[0]
    w = weights_for(values[out].shape)
    expected, roundoff = numerical_gradients(numpy_fn, prog.inputs, out, w)
    with ndl.lazy(True):
        outs, tensors = needle_fn(prog.inputs, device, requires_grad=True)
        outs[0].backward(ndl.Tensor(w, device=device, dtype="float64", requires_grad=False))
        got_value = outs[0].numpy()
        grads = [t.grad.numpy() if t.grad is not None else None for t in tensors]
    problems = forward_problems(prog, [got_value], values, Bounds(prog, values))
    atol = 1e-7 + 100 * roundoff
    for i, (g, e) in enumerate(zip(grads, expected)):
        if g is None:
            if np.any(np.abs(e) > atol):
                problems.append(f"input {i}: no gradient, finite differences give {e}")
            continue
        if g.shape != e.shape or g.dtype != np.float64:
            problems.append(f"input {i}: gradient {g.dtype}{g.shape}, expected float64{e.shape}")
            continue
        bad = ~(np.abs(g - e) <= atol + 1e-5 * np.abs(e))
        if bad.any():
            ix = tuple(int(j) for j in np.argwhere(bad)[0])
            problems.append(f"input {i}: {int(bad.sum())} of {bad.size} gradient values differ, e.g. at {ix}: "
                            f"backward {g[ix]!r}, finite differences {e[ix]!r}")
    return problems


def check_gradients(prog: Program, mode: str = "gradient") -> None:
    """backward() equals finite differences; mode "gradient" on cpu(), "cuda-small-gradient"
    on cuda() with the CUDA lowering's thresholds shrunk (set by the caller) and bounds checks."""
    try:
        if mode == "gradient":
            problems = gradient_problems(prog)
        else:
            with _mode("cuda"):
                problems = gradient_problems(prog, ndl.cuda())
        if problems:
            raise AssertionError("gradients differ:\n  " + "\n  ".join(problems))
    except Exception as e:
        save_failure(prog, mode, f"{type(e).__name__}: {e}")
        raise


# ---- regression files ----------------------------------------------------------------------------
_written = {}  # mode -> the file the previous failing call wrote (replaced by the next, smaller one)


def save_failure(prog: Program, mode: str, message: str, bounds: Bounds = None) -> None:
    if os.environ.get("FUZZ_SAVE", "1") == "0":
        return
    previous = _written.pop(mode, None)
    if previous and os.path.exists(previous):
        os.remove(previous)
    _written[mode] = write_regression(prog, mode, message, bounds)


def write_regression(prog: Program, mode: str, message: str = "", bounds: Bounds = None,
                     directory: str = graphs.REGRESSION_DIR) -> str:
    """Write `prog` as tests/fuzz/regressions/test_regression_<hash>.py; returns the path."""
    body = _regression_body(prog, mode, bounds)
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    note = "\n".join(line for part in message.splitlines() for line in textwrap.wrap(part, 96))
    note = "\n".join(note.splitlines()[:8])
    head = (f'"""Fuzzer regression ({mode} mode): a program on which needle and numpy disagreed.\n\n'
            + (f"It failed with:\n{textwrap.indent(note, '    ')}\n" if note else "") + '"""\n')
    text = head + body.replace("test_regression_HASH", f"test_regression_{digest}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"test_regression_{digest}.py")
    with open(path, "w") as f:
        f.write(text)
    return path


def _regression_body(prog: Program, mode: str, bounds: Bounds) -> str:
    parts = ["import numpy as np", "from numpy import inf, nan  # noqa: F401", "",
             "import needle as ndl  # noqa: F401",
             "from tests.fuzz.numpy_helpers import *  # noqa: F401,F403",
             "from tests.fuzz.regressions.support import check_forward, check_gradient  # noqa: F401", "", "",
             graphs.inputs_source(prog), "", "",
             graphs.needle_source(prog), "", "", graphs.numpy_source(prog), "", ""]
    if mode == "gradient":
        parts.append(_GRADIENT_TEST.format(out=prog.outputs[0], step=FD_STEP, fixture="", args=""))
    elif mode.endswith("gradient"):
        parts.insert(6, "from tests.codegen.cuda_emulation.gpu import gpu, pytestmark  # noqa: F401")
        parts.append(_GRADIENT_TEST.format(out=prog.outputs[0], step=FD_STEP, fixture="gpu, monkeypatch",
                                           args=", device=gpu, small_thresholds=True, monkeypatch=monkeypatch"))
    else:
        if bounds is None:
            _, numpy_fn = compile_program(prog)
            bounds = Bounds(prog, numpy_fn(prog.inputs))
        tolerances = []
        for k in prog.outputs:
            tol = 2 * bounds.E[k] + TINY
            if tol.size == 0 or np.all(tol == tol.flat[0]):
                tol = float(tol.flat[0]) if tol.size else 0.0
            else:
                tol = tol.tolist()
            skip = bounds.U[k].tolist() if bounds.U[k].any() else False
            tolerances.append(f"({k}, {tol!r}, {skip!r})")
        cuda = mode.startswith("cuda")
        checked = mode == "bounds" or cuda
        bounds_args = ", bounds_check=True, monkeypatch=monkeypatch" if checked else ""
        if cuda:
            parts.insert(6, "from tests.codegen.cuda_emulation.gpu import gpu, pytestmark  # noqa: F401")
            bounds_args += ", device=gpu" + (", small_thresholds=True" if mode == "cuda-small" else "")
        fixture = ", ".join(["gpu"] * cuda + ["monkeypatch"] * checked)
        parts.append(_FORWARD_TEST.format(
            fixture=fixture, tolerances=",\n    ".join(tolerances),
            args=f"lazy={mode != 'eager'}, together={bool(prog.together)}{bounds_args}"))
    return "\n".join(parts)


_FORWARD_TEST = '''#: per output: (variable, absolute tolerance per value, values to skip: float32 rounding makes them
#: unstable, e.g. a divisor that is zero up to rounding); tolerances are the fuzzer's error bounds
CHECKS = [
    {tolerances},
]


def test_regression_HASH({fixture}):
    check_forward(inputs, needle_program, numpy_program, CHECKS, {args})
'''

_GRADIENT_TEST = '''def test_regression_HASH({fixture}):
    check_gradient(inputs, needle_program, numpy_program, out={out}, step={step}{args})
'''
