"""Where the user wrote each IR node: recorded only while a profile is active.

`install()` fills two ports: `needle.ir.build.STAMP`, through which the one
constructor of lazy nodes stamps each node's `origin` with the first stack frame
outside the needle library (`needle/cli/` counts as user code: it is written with needle's
public API).  The origin stays a `str` equal to the frontend op's name, so dumps
and schedule keys are unchanged; `origin.where` holds (file, line).  Nodes built
while `backward()` differentiates a Tensor are labelled `d<Op>` and carry the
line of that Tensor's forward op (from its lazy node's origin, or for eager
Tensors from a weak Tensor -> line table filled through `autograd.MADE`).
`uninstall()` empties both, so nothing is paid when not profiling.
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

from .. import observing


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
    from .. import autograd, backward
    return backward.backward_pass.__code__, autograd.Value.make_from_op.__func__.__code__


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
#: seconds spent stamping nodes (the profiler leaves them out of the step time)
SECONDS = 0.0


def _stamp_new(name: str) -> SourcedOrigin:
    """build.STAMP while installed: a new node's origin with the user's line."""
    global SECONDS
    t0 = time.perf_counter()
    origin = stamp(name)
    SECONDS += time.perf_counter() - t0
    return origin


def _note_made(value) -> None:
    """autograd.MADE while installed: the line of the op that made `value` (its node
    was stamped while the op computed; the eager shortcut stands aside meanwhile)."""
    if _last.where is not None:
        _tensor_lines[value] = _last.where
        _last.where = None


def installed() -> bool:
    from ..ir import build
    return build.STAMP is _stamp_new


def install() -> None:
    global _CODES
    from .. import autograd
    from ..ir import build
    if installed():
        return
    _CODES = _codes()
    _last.where = None
    build.STAMP, autograd.MADE = _stamp_new, _note_made
    observing.start("stamping")  # (the eager shortcut builds no node to stamp)


def uninstall() -> None:
    from .. import autograd
    from ..ir import build
    if installed():
        build.STAMP = autograd.MADE = None
        _tensor_lines.clear()
        observing.stop("stamping")


@contextlib.contextmanager
def stamping():
    """Stamp user lines on the nodes and tensors made inside the block (unless a
    profile already does, which then keeps doing so after the block)."""
    mine = not installed()
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
