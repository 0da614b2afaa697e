"""Small rewrites of kernel IR expressions for the lowering (pure functions).

Lowering memoizes each (node, index) to one expression object, so a value used
twice is the same object twice: `contains` and `replace` go by identity.
"""
from __future__ import annotations

from ..codegen import kernel_ir as K


def is_float(dtype: str) -> bool:
    return dtype in ("float32", "float64")


def costly(e) -> bool:
    """Whether recomputing e costs more than a load: a transcendental, a power or a division."""
    if isinstance(e, K.Unary):
        return e.op in ("exp", "log", "tanh", "sqrt", "sigmoid") or costly(e.x)
    if isinstance(e, K.Binary):
        return e.op in ("pow", "div") or costly(e.a) or costly(e.b)
    if isinstance(e, K.Where):
        return costly(e.cond) or costly(e.a) or costly(e.b)
    return isinstance(e, K.Cast) and costly(e.x)


#: the ops codegen computes by polynomials (codegen/vecmath.py; sqrt is one instruction)
TRANSCENDENTAL = ("exp", "log", "tanh", "sigmoid", "pow")


def transcendentals(body) -> int:
    """How many TRANSCENDENTAL ops a kernel's statements spell out (each one each time
    it is written): what its elements cost beyond loads and stores."""
    statements, exprs = list(body), []
    while statements:
        s = statements.pop()
        if isinstance(s, (K.Loop, K.If)):
            statements.extend(s.body)
        exprs.extend(statement_exprs(s))
    count = 0
    while exprs:
        e = exprs.pop()
        count += isinstance(e, (K.Unary, K.Binary)) and e.op in TRANSCENDENTAL
        exprs.extend(children(e))
    return count


def statement_exprs(s) -> tuple:
    """The expressions a statement holds itself (not those of a loop's or an if's body;
    None where an optional one is absent)."""
    if isinstance(s, K.Loop):
        return (s.extent, s.start)
    if isinstance(s, (K.Let, K.Assign)):
        return (s.expr,)
    if isinstance(s, K.Declare):
        return (s.init,)
    if isinstance(s, K.Store):
        return (s.index, s.value, s.valid)
    if isinstance(s, K.If):
        return (s.cond,)
    return ()


def children(e) -> tuple:
    if isinstance(e, K.Unary) or isinstance(e, K.Cast):
        return (e.x,)
    if isinstance(e, K.Binary):
        return (e.a, e.b)
    if isinstance(e, K.Where):
        return (e.cond, e.a, e.b)
    return ()


def uses(e, names) -> bool:
    """Whether e reads any of the variables `names` (in an index too)."""
    if isinstance(e, K.Var):
        return e.name in names
    if isinstance(e, K.Load):
        return uses(e.index, names) or (e.valid is not None and uses(e.valid, names))
    return any(uses(c, names) for c in children(e))


def loads(e):
    """The Loads of an arithmetic expression (loads, constants, variables, parameters
    and the ops on them), outermost first; None if it holds anything else."""
    found, stack = [], [e]
    while stack:
        e = stack.pop()
        if isinstance(e, K.Load):
            found.append(e)
        elif isinstance(e, (K.Unary, K.Cast, K.Binary, K.Where)):
            stack += children(e)
        elif not isinstance(e, (K.Const, K.Var, K.Param)):
            return None
    return found


def coefficient(index, var: str):
    """The coefficient of `var` in an affine index expression (None if not affine)."""
    if isinstance(index, K.Var):
        return 1 if index.name == var else 0
    if isinstance(index, K.Const):
        return 0
    if isinstance(index, K.Binary) and index.op in ("add", "sub"):
        a, b = coefficient(index.a, var), coefficient(index.b, var)
        return None if a is None or b is None else a + b if index.op == "add" else a - b
    if isinstance(index, K.Binary) and index.op == "mul":
        a, b = coefficient(index.a, var), coefficient(index.b, var)
        if a == 0 and b is not None and isinstance(index.a, K.Const):
            return index.a.value * b
        if b == 0 and a is not None and isinstance(index.b, K.Const):
            return index.b.value * a
        return 0 if a == 0 and b == 0 else None
    return None


def hoist(e, names, hoisted: list, at, prefix: str):
    """e with each costly subexpression that reads none of `names` (a column's terms,
    in a loop over rows) replaced by a load of local row `<prefix><k>` at `at`;
    `hoisted` collects the (name, expression) pairs, each distinct expression once,
    for the caller to compute a row of each before the loop."""
    if costly(e) and not uses(e, names):
        for name, old in hoisted:
            if old == e:
                return K.Load(name, at, e.dtype)
        hoisted.append((f"{prefix}{len(hoisted)}", e))
        return K.Load(hoisted[-1][0], at, e.dtype)
    return _rebuilt(e, tuple(hoist(p, names, hoisted, at, prefix) for p in children(e)))


def _rebuilt(e, new: tuple):
    """e with its children (`children`) replaced by `new`; e itself when none changed
    (shared subexpressions stay shared)."""
    if all(n is p for n, p in zip(new, children(e))):
        return e
    if isinstance(e, K.Where):
        return K.Where(*new, e.dtype)
    if isinstance(e, K.Binary):
        return K.Binary(e.op, *new, e.dtype, e.contract)
    if isinstance(e, K.Unary):
        return K.Unary(e.op, new[0], e.dtype)
    return K.Cast(new[0], e.dtype)


def substitute(e, values: dict, renamed: dict, memo: dict):
    """e with the variables named in `values` replaced by their expressions and the
    locals in `renamed` (scalars, local arrays) by their new names; shared
    subexpressions stay shared (`memo`, by identity, for one substitution).  ValueError
    for an expression it does not know."""
    found = memo.get(id(e))
    if found is not None:
        return found[1]
    if isinstance(e, K.Var):
        new = values[e.name] if e.name in values else K.Var(renamed[e.name], e.dtype) if e.name in renamed else e
    elif isinstance(e, K.Load):
        new = K.Load(renamed.get(e.buf, e.buf), substitute(e.index, values, renamed, memo), e.dtype,
                     None if e.valid is None else substitute(e.valid, values, renamed, memo))
    elif isinstance(e, (K.Unary, K.Cast, K.Binary, K.Where)):
        new = _rebuilt(e, tuple(substitute(c, values, renamed, memo) for c in children(e)))
    elif isinstance(e, (K.Const, K.Param)):
        new = e
    else:
        raise ValueError(f"substitute: {type(e).__name__}")
    memo[id(e)] = (e, new)  # (e kept alive: its id stays its own)
    return new


def map_loads(e, fn):
    """e with each Load that `fn` rewrites (returns an expression, not None) replaced;
    the rest shared as it is."""
    if isinstance(e, K.Load):
        new = fn(e)
        return e if new is None else new
    kids = children(e)
    return _rebuilt(e, tuple(map_loads(c, fn) for c in kids)) if kids else e


def substitute_statement(s, values: dict, renamed: dict, memo: dict):
    """Statement `s` (not a loop or an if) with `substitute` applied to its expressions
    and the locals it names (a declared or assigned scalar, a stored-to or declared
    local array) renamed as in `renamed`; one that holds neither (a barrier) as it is."""
    def sub(e):
        return None if e is None else substitute(e, values, renamed, memo)
    if isinstance(s, K.Declare):
        return K.Declare(renamed.get(s.var, s.var), s.dtype, sub(s.init))
    if isinstance(s, K.Let):
        return K.Let(renamed.get(s.var, s.var), sub(s.expr))
    if isinstance(s, K.Assign):
        return K.Assign(renamed.get(s.var, s.var), sub(s.expr), s.ordered)
    if isinstance(s, K.Store):
        return K.Store(renamed.get(s.buf, s.buf), sub(s.index), sub(s.value), sub(s.valid))
    if isinstance(s, K.LocalArray):
        return K.LocalArray(renamed.get(s.name, s.name), s.dtype, s.size, s.scope)
    return s


def contains(e, part) -> bool:
    return e is part or any(contains(c, part) for c in children(e))


def replace(e, part, new):
    """e with every occurrence of the subexpression `part` (by identity) replaced by `new`."""
    if e is part:
        return new
    if isinstance(e, K.Unary):
        return K.Unary(e.op, replace(e.x, part, new), e.dtype)
    if isinstance(e, K.Cast):
        return K.Cast(replace(e.x, part, new), e.dtype)
    if isinstance(e, K.Binary):
        return K.Binary(e.op, replace(e.a, part, new), replace(e.b, part, new), e.dtype, e.contract)
    if isinstance(e, K.Where):
        return K.Where(replace(e.cond, part, new), replace(e.a, part, new), replace(e.b, part, new), e.dtype)
    return e


def select(cond, a, b, dtype: str):
    """where(cond, a, b), simplified, so that padding's masks do not pile up (a relu
    under a conv's padding read `c ? max(c ? x : 0, c ? 0.0 : 0) : 0`; it is now
    `c ? max(x, 0.0) : 0`, less for LLVM to chew on): a constant condition picks its arm,
    selects on `cond` inside either arm take the arm `cond` implies, equal arms need no
    select, and `cond ? true : false` is `cond`.  Guarded loads keep their guards."""
    if isinstance(cond, K.Const):
        return a if cond.value else b
    a, b = assume(a, cond, True), assume(b, cond, False)
    if a == b:
        return a
    if dtype == "bool" and a == K.Const(True, "bool") and b == K.Const(False, "bool"):
        return cond
    return K.Where(cond, a, b, dtype)


def assume(e, cond, truth: bool):
    """`e` where `cond` is known to be `truth`: its selects on `cond` take that arm.
    Subexpressions it does not change stay the same objects (lowering shares them)."""
    if isinstance(e, K.Where) and e.cond == cond:
        return assume(e.a if truth else e.b, cond, truth)
    if not isinstance(e, (K.Where, K.Binary, K.Unary, K.Cast)):
        return e
    return _rebuilt(e, tuple(assume(p, cond, truth) for p in children(e)))


def unravel(flat, shape) -> tuple:
    """Row-major indices of `flat` over `shape`, each `flat // stride % n` (independent
    of the others: no chain of divisions), without the mod for the outermost dim and
    0 for size-1 dims: the one unravelling of every lowering."""
    out, stride = [], 1
    for d in range(len(shape) - 1, -1, -1):
        n = shape[d]
        index = K.idiv(flat, stride)
        out.append(K.Const(0) if n == 1 else index if d == 0 else K.imod(index, n))
        stride *= n
    return tuple(reversed(out))


def unravel_lets(flat, loops) -> list:
    """Lets binding the variable of each (var, extent) of a row-major loop nest from `flat`."""
    return [K.Let(var, e) for (var, _), e in zip(loops, unravel(flat, [n for _, n in loops]))]


def power(x, exponent, dtype: str):
    """x ** c for the constants numpy computes without pow, the way it does (x ** 0.5 is
    sqrt: sqrt(-inf) = nan where pow gives inf), each with one rounding so exact to half
    an ulp; float32's 3, -2 and -0.5 would take two roundings, so they stay pow (each
    renderer's pow is correctly rounded or close to it).  A constant read under padding
    (`c ? 0.5 : 0`) is split into both arms, so the padded side keeps its own value."""
    if is_float(dtype) and isinstance(exponent, K.Where) and isinstance(exponent.a, K.Const) \
            and isinstance(exponent.b, K.Const):
        return select(exponent.cond, power(x, exponent.a, dtype), power(x, exponent.b, dtype), dtype)
    if not is_float(dtype) or not isinstance(exponent, K.Const):
        return K.Binary("pow", x, exponent, dtype)
    c, one = float(exponent.value), K.Const(1.0, dtype)
    if c == 1:
        return x
    if c == 2:
        return K.Binary("mul", x, x, dtype)
    if c == 0.5:
        return K.Unary("sqrt", x, dtype)
    if c == -1:
        return K.Binary("div", one, x, dtype)
    if dtype == "float64" and c in (3, -2, -0.5):
        if c == 3:
            return K.Binary("mul", K.Binary("mul", x, x, dtype), x, dtype)
        return K.Binary("div", one, K.Binary("mul", x, x, dtype) if c == -2 else K.Unary("sqrt", x, dtype), dtype)
    return K.Binary("pow", x, exponent, dtype)
