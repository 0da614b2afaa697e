"""Where the user wrote each IR node: recorded only while a profile is active.

`install()` swaps `needle.ir.build._new` (the one constructor of lazy nodes) for a
version that also stamps each node's `origin` with the first stack frame outside
the needle library (`needle/cli/` counts as user code: it is written with needle's
public API).  The origin stays a `str` equal to the frontend op's name, so dumps
and schedule keys are unchanged; `origin.where` holds (file, line).  Nodes built
while `backward()` differentiates a Tensor are labelled `d<Op>` and carry the
line of that Tensor's forward op (from its lazy node's origin, or for eager
Tensors from a weak Tensor -> line table filled by a wrapped `make_from_op`).
`uninstall()` restores both originals, so nothing is paid when not profiling.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import weakref
from typing import Optional, Tuple


_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # needle/
_USER_INSIDE = (_LIBRARY + "cli" + os.sep,)
_is_library_cache = {}


class SourcedOrigin(str):
    """A node origin (the frontend op's name) that also knows the user's line."""

    where: Optional[Tuple[str, int]] = None


def is_library(filename: str) -> bool:
    hit = _is_library_cache.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        hit = _is_library_cache[filename] = path.startswith(_LIBRARY) and not path.startswith(_USER_INSIDE)
    return hit


def _codes():
    from .. import autograd
    return autograd.compute_gradient_of_variables.__code__, autograd.Value.make_from_op.__func__.__code__


def stamp(name: str) -> SourcedOrigin:
    """`name` (possibly empty in eager mode) with the user's line and, inside
    backward(), the op being differentiated."""
    grad_code, make_code = _CODES
    frame = sys._getframe(2)
    forward = None
    while frame is not None and is_library(frame.f_code.co_filename):
        code = frame.f_code
        if code is make_code and not name:
            op = frame.f_locals.get("op")
            name = getattr(op, "name", "") or name
        elif code is grad_code and forward is None:
            forward = frame.f_locals.get("node")
        frame = frame.f_back
    where = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None
    if forward is not None and getattr(forward, "op", None) is not None:
        name = f"d{forward.op.name}"
        data = forward._cached_data
        forward_where = getattr(getattr(data, "origin", None), "where", None) or _tensor_lines.get(forward)
        if forward_where is not None:
            where = forward_where
    origin = SourcedOrigin(name)
    origin.where = _last.where = where
    return origin


class _Last(threading.local):
    where = None


_last = _Last()
#: Tensor -> line of the op that made it (for eager Tensors, whose data keeps no origin)
_tensor_lines = weakref.WeakKeyDictionary()


_CODES = (None, None)
_original_new = None
_original_make = None
#: seconds spent stamping nodes (the profiler leaves them out of the step time)
SECONDS = 0.0


def install() -> None:
    global _original_new, _CODES
    from ..ir import build
    if _original_new is not None:
        return
    _CODES = _codes()
    original = _original_new = build._new

    def _new_with_source(op, srcs, arg, shape, dtype, device):
        global SECONDS
        node = original(op, srcs, arg, shape, dtype, device)
        if not isinstance(node.origin, SourcedOrigin):
            t0 = time.perf_counter()
            node.origin = stamp(node.origin)
            SECONDS += time.perf_counter() - t0
        return node

    build._new = _new_with_source
    _install_make_from_op()


def _install_make_from_op() -> None:
    """Remember the line of each Tensor an op makes (its kernel's stamp), so that
    backward() can point eager gradient kernels at the forward op's line."""
    global _original_make
    from ..autograd import Value
    _original_make = Value.__dict__["make_from_op"]
    make = _original_make.__func__

    def make_from_op(cls, op, inputs):
        _last.where = None
        value = make(cls, op, inputs)
        if _last.where is not None:
            _tensor_lines[value] = _last.where
        return value

    Value.make_from_op = classmethod(make_from_op)


def uninstall() -> None:
    global _original_new, _original_make
    from ..ir import build
    if _original_new is not None:
        build._new = _original_new
        _original_new = None
    if _original_make is not None:
        from ..autograd import Value
        Value.make_from_op = _original_make
        _original_make = None
        _tensor_lines.clear()


@contextlib.contextmanager
def stamping():
    """Stamp user lines on the nodes and tensors made inside the block (unless a
    profile already does, which then keeps doing so after the block)."""
    mine = _original_new is None
    if mine:
        install()
    try:
        yield
    finally:
        if mine:
            uninstall()


@functools.lru_cache(maxsize=4096)
def short(where) -> str:
    """`models.py:24` (relative to the working folder when under it)."""
    if where is None:
        return "?"
    path, line = where
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    if rel.startswith(".."):
        rel = os.path.basename(path)
    return f"{rel}:{line}"
