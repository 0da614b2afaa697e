"""A kernel's constant buffer offsets, moved into its buffer pointers.

An unrolled RNN's kernels of time step t read that step's slice of a stacked
buffer at `index + t * size` and are otherwise the same kernel: each was compiled
on its own (an LSTM's fused gate kernel once per time step, most of its first step's
time).  `hoist_offsets` takes the smallest constant
term of each buffer's indices out of the kernel; the runtime adds it to that
buffer's pointer at launch (Call.offsets), and the kernels of all steps share one
compiled object.

Only a buffer read and written without masks is rewritten: a masked access turns
into index 0 when its mask is off, and index 0 must stay the buffer's own start.
Every index of a rewritten buffer keeps a non-negative constant, and the pointer
moves by the smallest constant term of its indices: the index an access reads with
its loop variables at 0, inside the buffer.  Only a positive offset moves.
"""
from __future__ import annotations

import dataclasses

from ..codegen import kernel_ir as K
from .kernel_exprs import children, statement_exprs


def hoist_offsets(kernel: K.Kernel) -> tuple:
    """(kernel with the offsets taken out, offset in elements of each of kernel.bufs)."""
    names = {b.name for b in kernel.bufs}
    found = {}  # buffer name -> [smallest constant term, masked anywhere]
    _visit_body(kernel.body, lambda buf, index, valid: _note(found, names, buf, index, valid))
    base = {name: c for name, (c, masked) in found.items() if not masked and c > 0}
    offsets = [base.get(b.name, 0) for b in kernel.bufs]
    if not base:
        return kernel, offsets
    rewrite = _Rewrite(base)
    return dataclasses.replace(kernel, body=rewrite.body(kernel.body)), offsets


def split_constant(index) -> tuple:
    """(rest, c) with index == rest + c for the constant term `c` at its top (0 if
    none; rest None when the index is that constant)."""
    if isinstance(index, K.Const):
        return None, index.value
    if isinstance(index, K.Binary) and index.op == "add":
        if isinstance(index.b, K.Const):
            return index.a, index.b.value
        if isinstance(index.a, K.Const):
            return index.b, index.a.value
    return index, 0


def _note(found, names, buf, index, valid) -> None:
    if buf not in names:
        return  # a local array
    c = split_constant(index)[1]
    entry = found.setdefault(buf, [c, False])
    entry[0] = min(entry[0], c)
    entry[1] = entry[1] or valid is not None


def _visit_body(body, note) -> None:
    """note(buffer, index, valid) for every load and store in the statements."""
    seen = set()

    def expr(e) -> None:
        if e is None or id(e) in seen:
            return
        seen.add(id(e))
        if isinstance(e, K.Load):
            note(e.buf, e.index, e.valid)
        for child in _expr_children(e):
            expr(child)

    def stmts(body) -> None:
        for s in body:
            if isinstance(s, K.Store):
                note(s.buf, s.index, s.valid)
            for child in statement_exprs(s):
                expr(child)
            if isinstance(s, (K.Loop, K.If)):
                stmts(s.body)
    stmts(body)


def _expr_children(e) -> tuple:
    """kernel_exprs.children, and a load's index and mask, a shuffle's value."""
    if isinstance(e, K.Load):
        return (e.index, e.valid)
    if isinstance(e, K.Shuffle):
        return (e.x,)
    return children(e)


_COMPOUND = (K.Load, K.Unary, K.Cast, K.Shuffle, K.Binary, K.Where)


class _Rewrite:
    """The statements with each access to a buffer of `base` indexed from its offset;
    a shared subexpression is rewritten once and stays shared."""

    def __init__(self, base: dict):
        self.base, self.memo = base, {}

    def index(self, buf: str, index):
        if buf not in self.base:
            return index
        rest, c = split_constant(index)
        c -= self.base[buf]
        if rest is None:
            return K.Const(c, K.INDEX)
        return rest if c == 0 else K.Binary("add", rest, K.Const(c, K.INDEX), K.INDEX)

    def expr(self, e):
        if not isinstance(e, _COMPOUND):
            return e
        done = self.memo.get(id(e))
        if done is not None:
            return done[1]
        x = self.expr
        if isinstance(e, K.Load):
            index, valid = self.index(e.buf, x(e.index)), x(e.valid)
            new = e if index is e.index and valid is e.valid else K.Load(e.buf, index, e.dtype, valid)
        elif isinstance(e, K.Binary):
            a, b = x(e.a), x(e.b)
            new = e if a is e.a and b is e.b else K.Binary(e.op, a, b, e.dtype, e.contract)
        elif isinstance(e, K.Where):
            cond, a, b = x(e.cond), x(e.a), x(e.b)
            new = e if cond is e.cond and a is e.a and b is e.b else K.Where(cond, a, b, e.dtype)
        else:
            inner = x(e.x)
            new = e if inner is e.x else dataclasses.replace(e, x=inner)
        self.memo[id(e)] = (e, new)  # (e kept alive: its id stays its own)
        return new

    def body(self, body) -> list:
        x, out = self.expr, []
        for s in body:
            if isinstance(s, K.Store):
                s = K.Store(s.buf, self.index(s.buf, x(s.index)), x(s.value), x(s.valid))
            elif isinstance(s, K.Loop):
                s = dataclasses.replace(s, extent=x(s.extent), start=x(s.start), body=self.body(s.body))
            elif isinstance(s, K.If):
                s = K.If(x(s.cond), self.body(s.body))
            elif isinstance(s, (K.Let, K.Assign)):
                s = dataclasses.replace(s, expr=x(s.expr))
            elif isinstance(s, K.Declare):
                s = dataclasses.replace(s, init=x(s.init))
            out.append(s)
        return out
