"""The kernel IR: loop nests over buffers, shared by the LLVM and CUDA renderers.

Expressions are immutable trees (index arithmetic is int64); statements are
loops, lets, mutable scalars, local arrays, loads and stores.  Loop kinds tell
the renderer how to map a loop:

- serial:   a plain loop
- parallel: split across CPU threads (the kernel gets a [start, stop) slice) or
            across the CUDA grid
- unroll:   fully unrolled by the renderer (constant extent)
- vector:   lanes of one SIMD vector on the CPU (constant extent), each lane the
            loop variable + lane; a plain loop on CUDA
- block / thread: CUDA blocks of the grid / threads of a block (grid- and block-stride)

A kernel reads and writes `Buf` arguments by name and scalar run-time parameters
by index into a float64 array.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

INDEX = "int64"


# ---- expressions -------------------------------------------------------------------------
@dataclass(frozen=True)
class Const:
    value: object
    dtype: str = INDEX


@dataclass(frozen=True)
class Var:
    name: str
    dtype: str = INDEX


@dataclass(frozen=True)
class Special:
    """A hardware index: tid (CUDA threadIdx.x), the only one the lowering reads: the
    block and thread loops render their own strides.  The CPU renderer rejects it."""
    name: str
    dtype: str = INDEX


@dataclass(frozen=True)
class Shuffle:
    """CUDA warp exchange: the value of `x` held by lane (lane ^ mask) of this warp
    (`__shfl_xor_sync` over the full warp, so every lane must execute it).  Used by
    the CUDA lowering's reduction trees; the CPU renderer rejects it."""
    x: object
    mask: int
    dtype: str


@dataclass(frozen=True)
class Param:
    index: int
    dtype: str


@dataclass(frozen=True)
class Load:
    buf: str
    index: object
    dtype: str
    valid: object = None   # bool Expr; when false the load is not performed and reads 0


@dataclass(frozen=True)
class Unary:
    op: str                # neg exp log tanh sqrt abs not
    x: object
    dtype: str


@dataclass(frozen=True)
class Binary:
    op: str                # add sub mul div pow max min lt le eq ne and or | idiv imod (ints)
    a: object
    b: object
    dtype: str
    #: a matmul's product a[i, k] * b[k, j] (printed `*c`): it may be contracted into an fma
    #: with the sum it feeds, which every lowering of a matmul does alike.  Any other product
    #: is rounded, as the eager kernel and numpy round it before summing it.
    contract: bool = False


@dataclass(frozen=True)
class Where:
    cond: object
    a: object
    b: object
    dtype: str


@dataclass(frozen=True)
class Cast:
    x: object
    dtype: str


COMPARE = ("lt", "le", "eq", "ne")


def const(value, dtype=INDEX) -> Const:
    return Const(value, dtype)


def add(a, b):
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(b, Const) and b.value == 0:
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value + b.value, a.dtype)
    return Binary("add", a, b, a.dtype)


def mul(a, b):
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value * b.value, a.dtype)
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            if x.value == 0 and x.dtype == INDEX:
                return x
            if x.value == 1:
                return y
    return Binary("mul", a, b, a.dtype)


def land(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return Binary("and", a, b, "bool")


def idiv(a, n: int):
    """a // n for non-negative a, folded when n is 1 or a is a constant."""
    if n == 1:
        return a
    if isinstance(a, Const):
        return Const(a.value // n, INDEX)
    return Binary("idiv", a, Const(n, INDEX), INDEX)


def imod(a, n: int):
    """a % n for non-negative a, folded when n is 1 or a is a constant."""
    if n == 1:
        return Const(0, INDEX)
    if isinstance(a, Const):
        return Const(a.value % n, INDEX)
    return Binary("imod", a, Const(n, INDEX), INDEX)


def affine(terms, offset: int = 0):
    """sum(coeff * var) + offset as an int64 expression (zero and constant terms folded)."""
    expr = None
    for var, coeff in terms:
        if isinstance(var, Const):
            offset += var.value * coeff
            continue
        if coeff == 0:
            continue
        term = var if coeff == 1 else Binary("mul", var, Const(coeff, INDEX), INDEX)
        expr = term if expr is None else Binary("add", expr, term, INDEX)
    if expr is None:
        return Const(offset, INDEX)
    return expr if offset == 0 else Binary("add", expr, Const(offset, INDEX), INDEX)


# ---- statements --------------------------------------------------------------------------
@dataclass
class Loop:
    var: str
    extent: object            # int or Expr
    body: list
    kind: str = "serial"      # serial parallel unroll vector block thread
    start: object = 0         # the loop runs start, start + 1, ..., start + extent - 1


@dataclass
class Let:
    var: str
    expr: object


@dataclass
class Declare:
    var: str
    dtype: str
    init: object


@dataclass
class Assign:
    var: str
    expr: object
    #: a sum made in its order (printed `(in order)`): a matmul's dot product in the plain
    #: loop nest, which then rounds as the tiles and row streams do, whatever else its
    #: kernel computes (a reassociable sum is vectorized by the loop's body)
    ordered: bool = False


@dataclass
class Store:
    buf: str
    index: object
    value: object
    valid: object = None


@dataclass
class LocalArray:
    name: str
    dtype: str
    size: int
    scope: str = "register"   # register | shared


@dataclass
class If:
    cond: object
    body: list


@dataclass
class Barrier:
    pass


@dataclass
class Buf:
    name: str
    dtype: str
    role: str                 # in | out


@dataclass
class Kernel:
    """A kernel and what running it needs: the schedule slot bound to each of `bufs`,
    the run-time scalar slot of each parameter and, for CUDA, the launch shape
    (threads per block, a constant of the code; blocks wanted, which the runtime may
    cap: every mapping is grid-stride) and the name of the mapping (for dumps)."""
    name: str
    bufs: list                # [Buf]
    n_params: int
    body: list
    parallel: Optional[Tuple[str, int]] = None   # (var, extent) of the split loop
    work: int = 0             # elements touched (flops for a matmul), to decide threading
    #: a matmul's flops, on its macro-kernel: it is split across threads by them (the
    #: A panels it packs inside included), not by the elements it touches
    thread_work: int = 0
    transcendentals: int = 0  # elementwise kernels: exp, log, tanh, sigmoid, pow an element
    slots: list = field(default_factory=list)    # schedule slot of each buf
    params: list = field(default_factory=list)   # scalar slot of each parameter
    block: int = 0            # CUDA: threads per block (0: not a CUDA kernel)
    grid: int = 0             # CUDA: blocks wanted
    mapping: str = ""         # CUDA: how loops map onto the grid ("rows", "tiles 64x64x16, ...")
    #: whether the kernel runs enough to pay for code that costs compile time (it touches
    #: Target.unroll_min_work elements or more: compiler.schedule marks it)
    hot: bool = False

    def text(self) -> str:
        if self.body is None:
            return print_kernel(self) + "\n  (statements released after compilation: " \
                "needle.dump(tensor, 'kernels') or NEEDLE_DEBUG=3 prints them)"
        return print_kernel(self)

    def has_short_loop(self, most: int = 32) -> bool:
        """Whether an innermost serial loop of at most `most` constant trips only folds
        values into accumulators (a reduction over rows of 10, four rows jammed at most)
        or copies into a local array (short rows transposed for their lanes): LLVM's
        unrolling of such a loop pays at any size of the kernel (runtime/jit.py
        `level_for`), where unrolling the short loops of a large body (a batch norm's
        fused gradient over 16 rows) or of stores to memory costs compile time."""
        local = set()

        def folds(body) -> bool:
            return 0 < len(body) <= 4 and all(
                isinstance(x, Assign) or (isinstance(x, Store) and x.buf in local) for x in body)

        def walk(stmts) -> tuple:  # (found, has a loop)
            found = loops = False
            for s in stmts:
                if isinstance(s, LocalArray):
                    local.add(s.name)
                elif isinstance(s, Loop):
                    inner_found, inner_loops = walk(s.body)
                    found = found or inner_found or (
                        not inner_loops and s.kind == "serial" and isinstance(s.extent, int) and 1 < s.extent <= most
                        and folds(s.body))
                    loops = True
                elif isinstance(s, If):
                    inner_found, inner_loops = walk(s.body)
                    found, loops = found or inner_found, loops or inner_loops
            return found, loops
        return self.body is not None and walk(self.body)[0]

    def release_body(self) -> None:
        """Drop the statement tree once the kernel is compiled: running it needs only
        the buffers, parameters and extents.  A cached schedule's trees are tens of
        thousands of Python objects (an LSTM step's outnumber the rest of the process)
        that every full garbage collection would walk, step after step."""
        self.body = None

    def code_text(self) -> str:
        """What the CPU code depends on: the text without the name and the parallel
        loop's extent (the renderer runs that loop over [start, stop) given at launch),
        so kernels that differ only in that size share one compiled object; and
        whether it is hot, which the CPU renderer reads."""
        return print_kernel(self, code_only=True) + ("\nhot" if self.hot else "")


# ---- printing ----------------------------------------------------------------------------
_BIN_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "eq": "==",
            "ne": "!=", "and": "&&", "or": "||", "idiv": "//", "imod": "%"}


def expr_str(e) -> str:
    if isinstance(e, Const):
        return repr(e.value) if e.dtype != "bool" else str(bool(e.value)).lower()
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Param):
        return f"p{e.index}"
    if isinstance(e, Special):
        return e.name
    if isinstance(e, Shuffle):
        return f"shuffle_xor({expr_str(e.x)}, {e.mask})"
    if isinstance(e, Load):
        text = f"{e.buf}[{expr_str(e.index)}]"
        return text if e.valid is None else f"({expr_str(e.valid)} ? {text} : 0)"
    if isinstance(e, Unary):
        return f"{e.op}({expr_str(e.x)})"
    if isinstance(e, Binary):
        if e.op in _BIN_SYM:
            return f"({expr_str(e.a)} {_BIN_SYM[e.op]}{'c' if e.contract else ''} {expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, Where):
        return f"({expr_str(e.cond)} ? {expr_str(e.a)} : {expr_str(e.b)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.x)})"
    raise TypeError(f"not an expression: {e!r}")


def print_kernel(k: Kernel, code_only: bool = False) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}* {b.role}" for b in k.bufs)
    name = "" if code_only else k.name
    lines = [f"kernel {name}({args}{', params: f64[%d]' % k.n_params if k.n_params else ''})"]
    _print_body(k.body or [], lines, 1, code_only)
    return "\n".join(lines)


def _print_body(body, lines, depth, code_only=False) -> None:
    pad = "  " * depth
    for s in body:
        if isinstance(s, Loop):
            kind = "" if s.kind == "serial" else s.kind + " "
            start = "" if s.start == 0 else f"{_s(s.start)}.."
            extent = "[start, stop)" if code_only and s.kind == "parallel" else _s(s.extent)
            lines.append(f"{pad}{kind}for {s.var} in {start}{extent}:")
            _print_body(s.body, lines, depth + 1, code_only)
        elif isinstance(s, Let):
            lines.append(f"{pad}{s.var} = {expr_str(s.expr)}")
        elif isinstance(s, Declare):
            lines.append(f"{pad}var {s.var}: {s.dtype} = {expr_str(s.init)}")
        elif isinstance(s, Assign):
            lines.append(f"{pad}{s.var} = {expr_str(s.expr)}{'  (in order)' if s.ordered else ''}")
        elif isinstance(s, Store):
            guard = f"if {expr_str(s.valid)}: " if s.valid is not None else ""
            lines.append(f"{pad}{guard}{s.buf}[{expr_str(s.index)}] = {expr_str(s.value)}")
        elif isinstance(s, LocalArray):
            lines.append(f"{pad}{s.scope} {s.name}: {s.dtype}[{s.size}]")
        elif isinstance(s, If):
            lines.append(f"{pad}if {expr_str(s.cond)}:")
            _print_body(s.body, lines, depth + 1, code_only)
        elif isinstance(s, Barrier):
            lines.append(f"{pad}barrier")
        else:
            raise TypeError(f"not a statement: {s!r}")


def _s(x) -> str:
    return str(x) if isinstance(x, int) else expr_str(x)
