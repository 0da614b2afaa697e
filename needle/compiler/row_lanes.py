"""Short rows in SIMD lanes: a row reduction over rows of a few elements computed for
`lanes` rows at once, one row a lane.

A reduction walks its row with vectors along the row (LLVM's loop vectorizer): a row
of 10 floats is one vector of 8 and two scalar steps, and every row ends in horizontal
folds; with a transcendental (a cross-entropy's exp and log) each row costs three exp
evaluations.  Here the loop over the rows steps by `lanes` rows: the rows' elements are
first copied, transposed, to a local tile (element r of every row contiguous; reading
them with a stride of the row length would be gathers, several times the cost of a
vector load); every accumulator becomes a local array of `lanes` values and
every statement a vector loop over the lanes, reading element r of all rows as one
vector from the tile; the rows' results are one contiguous vector store.  Only bodies
that store one value a row qualify (a loss, a row sum, logsumexp).  The rows left over
at the end take the row body as it was (jammed copies, row_jam.jam) under an `If`.
"""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .kernel_exprs import coefficient, map_loads, substitute, transcendentals, uses
from .row_jam import _CannotJam, declared, step_rows

#: rows of at most this many elements are put in lanes when the body computes a
#: transcendental (see the module docstring): a loss over ten classes gains most, rows
#: of 16 still gain.  Without a transcendental the copy to the tile costs what the
#: lanes save (row sums and maxima of short rows), so those stay as they were
LANES_MAX_ROW = 16


class _CannotLane(_CannotJam):
    """A statement or an access the lane form does not handle."""


def lane_rows(loops: list, body: list, row_elements: int, lanes: int):
    """(loops, body) with the innermost of `loops` (each (var, extent)) stepping over
    `lanes` rows at a time, one row a lane, or None when that does not apply."""
    if lanes < 4 or not loops or row_elements > LANES_MAX_ROW or not transcendentals(body):
        return None
    var = loops[-1][0]

    def in_lanes(step) -> list:
        lane = K.Var(var + "c")
        row = K.affine([(step, lanes), (lane, 1)])
        locals_ = declared(body)  # (every scalar the body assigns is one of them)
        tiles = {}
        staged = _staged(body, var, lanes, lane, tiles, set(locals_) | _loop_vars(body))
        return ([s for t in tiles.values() for s in _tile_copy(t, var, row, lane.name, lanes)]
                + _statements(staged, var, row, lane.name, lanes, locals_))
    return step_rows(loops, body, lanes, "l", in_lanes)


def _loop_vars(body) -> set:
    found, statements = set(), list(body)
    while statements:
        s = statements.pop()
        if isinstance(s, K.Loop):
            found.add(s.var)
            statements += s.body
    return found


def _staged(body, var: str, lanes: int, lane, tiles: dict, inner_names: set) -> list:
    """`body` with each load of a row's element r inside a loop over r (index: a row's
    start, var * extent, plus r) reading the tile that holds it (`tiles`: (buffer, start)
    -> (tile, load at r = 0 and row 0, r's loop)) at r * lanes + lane.  A start that
    reads a name of the body (`inner_names`: its locals and loops) is not known before
    the body runs: such a load stays."""
    out = []
    for s in body:
        if isinstance(s, K.Loop):
            inner = s.body
            if isinstance(s.extent, int) and not any(isinstance(x, K.Loop) for x in inner):
                inner = [_map_statement(x, lambda e: _tile_load(e, s, var, lanes, lane, tiles, inner_names))
                         for x in inner]
            out.append(K.Loop(s.var, s.extent, _staged(inner, var, lanes, lane, tiles, inner_names), s.kind, s.start))
        else:
            out.append(s)
    return out


def _tile_load(e, loop, var: str, lanes: int, lane, tiles: dict, inner_names: set):
    if e.valid is not None or coefficient(e.index, loop.var) != 1 or coefficient(e.index, var) != loop.extent:
        return None
    start = substitute(e.index, {loop.var: K.Const(0), var: K.Const(0)}, {}, {})
    if uses(start, inner_names):
        return None
    key = (e.buf, start, loop.extent)
    if key not in tiles:
        tiles[key] = (f"tile{len(tiles)}", e, loop)
    return K.Load(tiles[key][0], K.affine([(K.Var(loop.var), lanes), (lane, 1)]), e.dtype)


def _tile_copy(tile, var: str, row, lane: str, lanes: int) -> list:
    """The rows' elements into `tile`, transposed: a row after the other, along each
    (contiguous reads)."""
    name, load, loop = tile
    r = K.Var(loop.var)
    source = K.Load(load.buf, substitute(load.index, {var: row}, {}, {}), load.dtype)
    copy = K.Store(name, K.affine([(r, lanes), (K.Var(lane), 1)]), source)
    return [K.LocalArray(name, load.dtype, loop.extent * lanes),
            K.Loop(lane, lanes, [K.Loop(loop.var, loop.extent, [copy])])]


def _map_statement(s, fn):
    """Statement `s` with every load `fn` rewrites (not None) rewritten."""
    def sub(e):
        return None if e is None else map_loads(e, fn)
    if isinstance(s, K.Assign):
        return K.Assign(s.var, sub(s.expr), s.ordered)
    if isinstance(s, K.Let):
        return K.Let(s.var, sub(s.expr))
    if isinstance(s, K.Store):
        return K.Store(s.buf, s.index, sub(s.value), s.valid)
    return s


def _statements(body, var: str, row, lane: str, lanes: int, locals_: dict) -> list:
    """`body` for the `lanes` rows `row` (an expression of the lane variable `lane`)."""
    out = []
    for s in body:
        if isinstance(s, K.Loop):
            if s.kind != "serial" or (not isinstance(s.extent, int) and uses(s.extent, {var} | set(locals_))):
                raise _CannotLane(s.var)
            out.append(K.Loop(s.var, s.extent, _statements(s.body, var, row, lane, lanes, locals_), s.kind, s.start))
            continue
        lane_var = K.Var(lane)
        # (new Loads of the locals for each statement: the renderer caches expressions by identity)
        values = {var: row, **{name: K.Load(name, lane_var, dtype) for name, dtype in locals_.items()}}

        def sub(e):
            return None if e is None else substitute(e, values, {}, {})
        if isinstance(s, (K.Declare, K.Let)):
            value = sub(s.init if isinstance(s, K.Declare) else s.expr)
            out.append(K.LocalArray(s.var, locals_[s.var], lanes))
            out.append(K.Loop(lane, lanes, [K.Store(s.var, lane_var, value)], "vector"))
        elif isinstance(s, K.Assign):
            out.append(K.Loop(lane, lanes, [K.Store(s.var, lane_var, sub(s.expr))], "vector"))
        elif isinstance(s, K.Store):  # one value a row, at consecutive places
            index, valid = sub(s.index), sub(s.valid)
            if valid is not None and uses(valid, {lane}):
                raise _CannotLane("a guard that differs by row")
            if coefficient(index, lane) != 1:
                raise _CannotLane("a store that is not one a row")
            out.append(K.Loop(lane, lanes, [K.Store(s.buf, index, sub(s.value), valid)], "vector"))
        else:  # (a local array: a row's array would be lanes of them)
            raise _CannotLane(type(s).__name__)
    return out
