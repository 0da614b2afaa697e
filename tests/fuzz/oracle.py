"""How far a correct needle result may be from the float64 numpy value.

The numpy program computes every variable in float64 from the same float32
inputs.  Needle computes in float32, in another order (fused kernels, vector
lanes, blocked sums, fma contraction, polynomial exp/log/tanh), so results differ
by rounding, and by a lot where rounding is amplified (cancellation in sums of
+-1e30, division by a number that is zero up to rounding, float32 overflow of
an intermediate).  A fixed tolerance either misses bugs or reports noise, so this
module propagates, alongside the values, a first-order bound on the absolute
error of each variable:

  E  absolute error bound of a correct float32 evaluation (any order), and
  U  "unstable": positions where no useful bound exists (float32 overflow is
     possible, a divisor or a factor of an infinity is zero up to rounding, ...).

The comparison (`mismatches`) then requires, at every stable position: the same
nan, the same infinity, or a finite value within 2 E of the float64 value.
Non-finite values that follow exactly from the inputs (inf - inf = nan,
exp(-inf) = 0, max with a nan) are compared exactly.
"""
from __future__ import annotations

import math

import numpy as np

from .graphs import EPS, Program, Step, _helpers, expression

TINY = 1e-36   # absolute slack: float32 denormals, flushed underflow


def _axes_tuple(axes, ndim: int) -> tuple:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        return (axes % ndim,)
    return tuple(sorted(a % ndim for a in axes))


def _eval(step: Step, arrays: dict, gradient: bool):
    """The step's numpy template applied to other arrays (errors, flags)."""
    env = dict(_helpers())
    env.update(arrays)
    with np.errstate(all="ignore"):
        return np.asarray(eval(expression(step, "numpy", gradient), env))  # noqa: S307


class Bounds:
    """Error bounds of every variable of a program (float32 or float64)."""

    def __init__(self, prog: Program, values: list):
        self.prog, self.values = prog, values
        self.u = 2.0 ** -24 if prog.dtype == "float32" else 2.0 ** -53
        self.overflow = 1e38 if prog.dtype == "float32" else 1e300
        self.gradient = prog.dtype == "float64"
        self.E, self.U = [], []
        with np.errstate(all="ignore"):
            for k, step in enumerate(prog.steps):
                v = np.asarray(values[k], dtype=np.float64)
                if step.op == "input":
                    e, u = np.zeros(v.shape), np.zeros(v.shape, dtype=bool)
                else:
                    e, u = self._step(step, v)
                    e = np.broadcast_to(np.asarray(e, dtype=np.float64), v.shape)
                    u = np.broadcast_to(np.asarray(u, dtype=bool), v.shape)
                finite = np.isfinite(v)
                # a correct float32 value may be anywhere within the bound: past the overflow
                # threshold it may be inf already, or become inf in the next op (its square)
                u = u | (finite & (~np.isfinite(e) | (np.abs(v) + 2 * e > self.overflow)))
                e = np.where(finite & np.isfinite(e), e, 0.0)
                self.E.append(e)
                self.U.append(u)

    def _rounding(self, v, k: float = 4.0):
        return k * self.u * np.abs(v) + TINY

    def _step(self, step: Step, v):
        op, p = step.op, step.p
        args = step.args
        a = self.values[args[0]] if args else None
        Ea = self.E[args[0]] if args else None
        Ua = self.U[args[0]] if args else None
        R = self._rounding(v)
        family = _family(op)
        if family in ("movement", "join"):
            names = {f"v{k}": self.E[k] for k in args}
            e = _eval(step, names, self.gradient)
            u = _eval(step, {f"v{k}": self.U[k] for k in args}, self.gradient).astype(bool)
            return e, u
        if family == "reduce":
            return self._reduce(step, a, Ea, Ua, v)
        if family == "reduce_twice":
            return self._reduce_twice(step, a, Ea, Ua, v)
        if op == "matmul":
            return self._matmul(args, v)
        if self.gradient and op in ("log_abs", "sqrt", "pow", "rdiv_scalar", "div"):
            return self._safe_template(step, v)
        if family == "binary":
            b, Eb, Ub = self.values[args[1]], self.E[args[1]], self.U[args[1]]
            u = Ua | Ub
            if op in ("add", "sub"):
                return Ea + Eb + R, u
            if op == "mul":
                za, zb = _near_zero(a, Ea), _near_zero(b, Eb)
                u = u | (~np.isfinite(a) & zb) | (za & ~np.isfinite(b))
                return Ea * np.abs(b) + Eb * np.abs(a) + Ea * Eb + R, u
            if op == "div":
                ab = np.abs(b)
                u = u | (ab <= 2 * Eb)
                return Ea / ab + np.abs(a) * Eb / (ab * (ab - Eb)) + R, u
        if op == "neg":
            return Ea, Ua
        if op == "relu":
            return Ea, Ua
        if op == "exp":
            return np.abs(v) * np.expm1(Ea) + R, Ua
        if op == "tanh":
            return np.minimum(Ea, 2.0) + R, Ua
        if op == "sigmoid":
            return np.minimum(Ea / 4, 1.0) + R, Ua
        if op == "log_abs":
            d = np.abs(a) + EPS
            return Ea / (d - Ea) + 4 * self.u + R, Ua | (Ea > d / 2)
        if op == "sqrt":
            return np.sqrt(Ea) + R, Ua
        if op == "pow":
            q = p["p"]
            if q == 0:
                return np.zeros(v.shape), Ua
            if q == 1:
                return Ea, Ua
            if q == 2:
                return 2 * np.abs(a) * Ea + Ea ** 2 + R, Ua
            if q == 3:
                return 3 * a * a * Ea + 3 * np.abs(a) * Ea ** 2 + Ea ** 3 + R, Ua
            if q == -1:
                aa = np.abs(a)
                return Ea / (aa * (aa - Ea)) + R, Ua | (aa <= 2 * Ea)
            if q == 0.5:  # a zero up to rounding may come out negative in float32: then nan
                return np.sqrt(Ea) + R, Ua | _near_zero(a, Ea)
            raise AssertionError(q)
        if family == "scalar":
            c = p["c"]
            if op in ("add_scalar", "rsub_scalar"):
                return Ea + R, Ua
            if op == "mul_scalar":
                return Ea * abs(c) + R, Ua
            if op == "div_scalar":
                return Ea / abs(c) + R, Ua
            if op == "rdiv_scalar":
                aa = np.abs(a)
                return abs(c) * Ea / (aa * (aa - Ea)) + R, Ua | (aa <= 2 * Ea)
        raise AssertionError(f"no error rule for {op}")

    def _safe_template(self, step, v):
        """Gradient programs' safe forms (operands squared + 0.5): well conditioned;
        a relative bound from the inputs' errors is enough."""
        Es = [self.E[k] for k in step.args]
        vals = [np.abs(self.values[k]) for k in step.args]
        rel = sum(e / (x + 0.5) for e, x in zip(Es, vals))
        u = self.U[step.args[0]] if len(step.args) == 1 else self.U[step.args[0]] | self.U[step.args[1]]
        # + an absolute ulp or two: log(x*x + 0.5) near 0 rounds x*x + 0.5 near 1
        return np.abs(v) * 8 * rel + self._rounding(v, 8.0) + 16 * self.u, u

    def _reduce(self, step, a, Ea, Ua, v):
        p = step.p
        axes = _axes_tuple(p["axes"], a.ndim) if a.ndim else ()
        keep = p.get("keepdims", False)
        n = math.prod(a.shape[ax] for ax in axes)

        def red(x, fn):
            return fn(x, axis=axes, keepdims=keep) if axes else x

        u = red(Ua, np.any)
        if step.op in ("sum", "mean"):
            total = red(np.abs(a), np.sum)
            e = red(Ea, np.sum) + 2 * n * self.u * total + TINY
            u = u | (total > self.overflow)
            if step.op == "mean":
                e = e / max(n, 1) + self._rounding(v)
            return e, u
        if step.op == "max":
            return (red(Ea, np.max) if a.size else np.zeros(v.shape)), u
        if step.op == "logsumexp":
            e = red(Ea, np.max) + (n + 8) * self.u + self._rounding(v)
            return e, red(Ua, np.any)
        raise AssertionError(step.op)

    def _reduce_twice(self, step, a, Ea, Ua, v):
        """Two reductions composed, each bounded as `_reduce` bounds one."""
        p = step.p
        axes = _axes_tuple(p["axes"], a.ndim) if a.ndim else ()

        def reduce(op, x, Ex, Ux, keepdims):
            value = {"sum": np.sum, "mean": np.mean, "max": np.max}[op](x, axis=axes, keepdims=keepdims) \
                if axes else x
            params = (("axes", p["axes"]), ("keepdims", keepdims))
            return (value,) + self._reduce(Step(op, step.args, params), x, Ex, Ux, value)
        if step.op == "sum_and_max":
            _, es, us = reduce("sum", a, Ea, Ua, p["keepdims"])
            _, em, um = reduce("max", a, Ea, Ua, p["keepdims"])
            return es + em + self._rounding(v), us | um
        c, ec, uc = reduce(p["inner"], a, Ea, Ua, True)
        d = a - c
        return reduce(p["outer"], d, Ea + ec + self._rounding(d), Ua | uc, p["keepdims"])[1:]

    def _matmul(self, args, v):
        A, B = self.values[args[0]], self.values[args[1]]
        Ea, Eb = self.E[args[0]], self.E[args[1]]
        Ua, Ub = self.U[args[0]].astype(float), self.U[args[1]].astype(float)
        absA, absB = np.abs(A), np.abs(B)
        k = A.shape[-1]
        magnitude = absA @ absB
        e = absA @ Eb + Ea @ absB + Ea @ Eb + 2 * (k + 2) * self.u * magnitude + TINY
        na, nb = (~np.isfinite(A)).astype(float), (~np.isfinite(B)).astype(float)
        za, zb = _near_zero(A, Ea).astype(float), _near_zero(B, Eb).astype(float)
        flags = Ua @ np.ones(B.shape) + np.ones(A.shape) @ Ub + na @ zb + za @ nb
        return e, (flags > 0) | (magnitude > self.overflow)


def _near_zero(x, e):
    """Zero up to rounding: its sign (or whether it is zero) is not known."""
    return (np.abs(x) <= e) & (e > 0)


def _family(op: str) -> str:
    from .graphs import OPS
    return OPS[op].family


def mismatches(got, want, E, U, safety: float = 2.0) -> np.ndarray:
    """Boolean mask of stable positions where `got` is not within the bound."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    with np.errstate(all="ignore"):
        nan_ok = np.isnan(want) & np.isnan(got)
        inf_ok = np.isinf(want) & (got == want)
        close = np.isfinite(want) & (np.abs(got - want) <= safety * E + TINY)
    return ~U & ~(nan_ok | inf_ok | close)
