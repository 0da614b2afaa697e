"""Nested loops that walk memory as one run become one loop.

A reduction over axes that lie one after another in memory (a global average pool
over an NCHW map's 32 x 32: runs of 1024 floats) was a loop nest whose innermost loop
had 32 trips: LLVM's vectorized loop folds its vector accumulators into one float at
the end of each, and starts again.  Two serial loops, an outer one of n_o trips
directly around an inner one of n_i, whose every load and store index reads them as
n_i * outer + inner (the outer variable's coefficient n_i times the inner's), become
one loop of n_o * n_i trips.  A nest where either variable appears anywhere else (a
mask, a value, a bound) stays as it is.
"""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import children, coefficient, statement_exprs, substitute, substitute_statement, uses


def collapse_loops(body: list) -> list:
    """`body` with every collapsible pair of nested loops made one, innermost first
    (three loops over one run become one)."""
    out = []
    for s in body:
        if isinstance(s, K.Loop):
            s = K.Loop(s.var, s.extent, collapse_loops(s.body), s.kind, s.start)
            s = _collapsed(s) or s
        elif isinstance(s, K.If):
            s = K.If(s.cond, collapse_loops(s.body))
        out.append(s)
    return out


def plain_loop(loop) -> bool:
    """A serial loop from 0 over a constant extent."""
    return isinstance(loop, K.Loop) and loop.kind == "serial" and loop.start == 0 and isinstance(loop.extent, int)


def _collapsed(outer):
    """The one loop that `outer` and the loop directly inside it make, or None."""
    if not (plain_loop(outer) and len(outer.body) == 1 and plain_loop(outer.body[0])):
        return None
    inner = outer.body[0]
    names = {outer.var, inner.var}

    def index_ok(index) -> bool:
        if not uses(index, names):
            return True
        a, b = coefficient(index, outer.var), coefficient(index, inner.var)
        return a is not None and b is not None and a == inner.extent * b

    def expr_ok(e) -> bool:
        if e is None or isinstance(e, int):
            return True
        if isinstance(e, K.Load):
            return index_ok(e.index) and not (e.valid is not None and uses(e.valid, names))
        if isinstance(e, K.Var):
            return e.name not in names
        return all(expr_ok(c) for c in children(e))

    def statements_ok(body) -> bool:
        for s in body:
            if isinstance(s, K.Store):
                if not (index_ok(s.index) and expr_ok(s.value) and not (s.valid is not None and uses(s.valid, names))):
                    return False
            elif not all(expr_ok(e) for e in statement_exprs(s)):
                return False
            if isinstance(s, (K.Loop, K.If)) and not statements_ok(s.body):
                return False
        return True

    if not statements_ok(inner.body):
        return None
    var = outer.var + inner.var
    values, memo = {outer.var: K.Const(0), inner.var: K.Var(var)}, {}
    return K.Loop(var, outer.extent * inner.extent, _substituted(inner.body, values, memo))


def _substituted(body, values: dict, memo: dict) -> list:
    out = []
    for s in body:
        if isinstance(s, K.Loop):
            out.append(K.Loop(s.var, s.extent, _substituted(s.body, values, memo), s.kind, s.start))
        elif isinstance(s, K.If):
            out.append(K.If(substitute(s.cond, values, {}, memo), _substituted(s.body, values, memo)))
        else:
            out.append(substitute_statement(s, values, {}, memo))
    return out
