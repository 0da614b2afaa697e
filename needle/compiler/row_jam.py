"""Unroll-and-jam of a reduction's row loop: JAM_ROWS rows reduced together.

A row reduction (a sum or max over the last axis, a layer norm) walked one row
at a time reads one stream of memory per thread, and one stream does not keep
enough cache-line requests in flight to reach the memory's bandwidth on a long row;
four rows at a time read four streams in the same loops.  The loop over the rows
steps by JAM_ROWS; each statement of its body appears JAM_ROWS times, its locals
renamed per row, inside the same loops over the reduced axes; the rows left over at
the end take a body of their own (fewer copies) under an `If`.

Short rows gain more: each row's horizontal folds, loop set-up and ragged tail
(scalar code) overlap with three other rows'.  Rows shorter than JAM_MIN_ROW without
a transcendental lose: the copies cost more than the overlap gives.

A body with a transcendental is jammed only when its rows are shorter than
JAM_MAX_TRANSCENDENTAL_ROW (however short): a long row's passes are bound by the
arithmetic (a softmax's exp), and four rows of it at once only crowd the registers,
while short rows' scalar tails (exp and log lane by lane) overlap.  The sums, layer
norms, softmaxes and cross-entropies of `benchmarks/bench_cpu.py` are the shapes these
limits were chosen on.
"""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import substitute_statement, transcendentals, uses

#: rows reduced together
JAM_ROWS = 4
#: rows of at least this many elements are jammed when the body computes no transcendental
JAM_MIN_ROW = 16
#: rows of fewer elements are jammed when it does (see the module docstring)
JAM_MAX_TRANSCENDENTAL_ROW = 256
#: the loop jammed when it is the only one (so the one split across threads) keeps at
#: least this many iterations
MIN_PARALLEL_STEPS = 16


class _CannotJam(Exception):
    """A body whose loops depend on the row, or that holds statements not handled."""


def jam_rows(loops: list, body: list, row_elements: int):
    """(loops, body) with the innermost of `loops` (each (var, extent)) stepping over
    JAM_ROWS rows at a time, or None when that does not apply or pay."""
    if not loops or (row_elements >= JAM_MAX_TRANSCENDENTAL_ROW if transcendentals(body)
                     else row_elements < JAM_MIN_ROW):
        return None
    var = loops[-1][0]
    return step_rows(loops, body, JAM_ROWS, "q",
                     lambda step: jam(body, var, [K.affine([(step, JAM_ROWS)], u) for u in range(JAM_ROWS)]))


def step_rows(loops: list, body: list, per: int, suffix: str, rows_of):
    """(loops, body) with the innermost of `loops` (its variable + `suffix`) stepping
    over `per` rows at a time: `rows_of(step)` the statements of a whole step, the rows
    left over at the end jammed copies of `body` under an `If`; None without a whole
    step, with fewer than MIN_PARALLEL_STEPS when the loop is the only one (the one
    split across threads), or when a body cannot be built (_CannotJam)."""
    var, n = loops[-1]
    whole, left = divmod(n, per)
    if whole == 0 or (len(loops) == 1 and whole < MIN_PARALLEL_STEPS):
        return None
    step = K.Var(var + suffix)
    try:
        stepped = rows_of(step)
        if left:
            tail = jam(body, var, [K.Const(whole * per + u) for u in range(left)])
            inside = K.Binary("lt", step, K.Const(whole), "bool")
            stepped = [K.If(inside, stepped), K.If(K.Unary("not", inside, "bool"), tail)]
    except _CannotJam:
        return None
    return loops[:-1] + [(step.name, whole + (1 if left else 0))], stepped


def jam(body: list, var: str, rows: list) -> list:
    """`body` once per value of `var` in `rows`, the copies run together: loops stay
    single (their bodies jammed in turn), every other statement is repeated, copy by
    copy, with the locals it declares renamed `<name>_<copy>`."""
    names = declared(body)
    fixed = set(names) | {var}
    copies = [(row, {n: f"{n}_{u}" for n in names}, {}) for u, row in enumerate(rows)]

    def statements(body) -> list:
        out = []
        for s in body:
            if isinstance(s, K.Loop):
                if _uses(s.extent, fixed) or _uses(s.start, fixed):
                    raise _CannotJam(s.var)
                out.append(K.Loop(s.var, s.extent, statements(s.body), s.kind, s.start))
                continue
            for row, renamed, memo in copies:
                out.append(_copy(s, var, row, renamed, memo))
        return out
    return statements(body)


def _uses(e, names) -> bool:  # (an extent or start may be an int)
    return not isinstance(e, int) and uses(e, names)


def declared(body) -> dict:
    """name -> dtype of what a body declares: scalars, lets and local arrays (not loop
    variables, which the copies share).  Every scalar it assigns must be one of them:
    one per row of an enclosing scope's would be wrong (_CannotJam, as for a statement
    other than these, loops and stores)."""
    found, assigned, statements = {}, set(), list(body)
    while statements:
        s = statements.pop()
        if isinstance(s, K.Declare):
            found[s.var] = s.dtype
        elif isinstance(s, K.Let):
            found[s.var] = s.expr.dtype
        elif isinstance(s, K.LocalArray):
            found[s.name] = s.dtype
        elif isinstance(s, K.Assign):
            assigned.add(s.var)
        elif isinstance(s, K.Loop):
            statements += s.body
        elif not isinstance(s, K.Store):
            raise _CannotJam(type(s).__name__)
    if not assigned <= found.keys():
        raise _CannotJam(str(assigned - found.keys()))
    return found


def _copy(s, var: str, row, renamed: dict, memo: dict):
    """Statement `s` of the copy whose `var` is `row` and whose locals are `renamed`."""
    try:
        return substitute_statement(s, {var: row}, renamed, memo)
    except ValueError as unknown:
        raise _CannotJam(str(unknown)) from None
