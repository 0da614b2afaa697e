"""What the captured call runs, found while it runs (needle.jit's capture call only).

- `Tracer`: a `sys.setprofile` hook.  At the first call of each piece of user code
  (not needle's, numpy's or the standard library's; an installed package's when the
  user's code calls it), the globals it
  names and its closure's values join the World before that code runs, so the world
  holds what the step could read, and the attribute names it reads are noted (an
  optimizer's lr read by the user's own code is a guard, not a value read at each
  replay).  Calls from user code that a replay cannot repeat (print, input, open,
  next(), the host's clocks and counters: time.*, datetime's class methods, uuid,
  resource; warnings.warn, a numpy random generator other than the global one, any
  method of a file or stream: f.write, sys.stdout.write, a StringIO's; a SimpleQueue's
  put), and what a library does for it (np.load, logging, json.dump, uuid1's clock
  read), are host effects, with
  their line (the global RNGs are compared before and after instead).  A profile hook of the user's written in
  Python gets every event through this one; code that switches the hook itself (a
  profiler enabled inside the step) is a host effect too: it would blind the capture.
  What runs while this thread collects garbage that allocation triggered (finalizers,
  other libraries' gc callbacks) is not the step's: such a collection runs wherever
  allocation happens to trigger it.  A `gc.collect()` the step calls is the step's.

Numpy arguments are traced by numpy_args.py; the notes of what they do come here.
"""
from __future__ import annotations

import _lsprof
import builtins
import gc
import io
import os
import sys
import threading
import types

import numpy as np

from ..engine import capture
from .code import is_package_code, is_user_code, line_of, names_of
from .world import plain_names

_C_EVENTS = ("c_call", "c_return", "c_exception")  # (a "return" event's arg is the value returned)
_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOST_BUILTINS = {print, input, open, next, breakpoint}
#: modules whose functions, and whose classes' class methods (datetime.date.today), read the
#: host: its clocks, its counters, its entropy (warnings.warn is _warnings')
_HOST_MODULES = {"time", "datetime", "_datetime", "secrets", "uuid", "_uuid", "_warnings", "resource"}
_HOST_CODES = {os._Environ.__getitem__.__code__: "os.environ"}


class Tracer:
    """`with Tracer(world):` around the capture call (see the module docstring)."""

    def __init__(self, world, settle=lambda: None):
        self.world, self.settle = world, settle
        self.codes = set()
        self.attributes = set()  # attribute names user code reads or writes
        self.touched = {}        # id(object) -> names of needle methods user code called on it
        self.effects = []        # (what, user line) a replay could not repeat
        self.shape_reads = {}    # id(recipe) -> (recipe, shape): arrays computed from numpy arguments (numpy_args)
        #: user code looked names up at run time (getattr, vars, globals, eval): any attribute
        #: or global may have been read, so all of them are guards (nothing read at each replay)
        self.dynamic = False
        #: this thread is collecting garbage that allocation triggered: what runs then (a __del__
        #: or weakref callback of an object an earlier step left in a cycle, another library's gc
        #: callback) is not the step's.  A gc.collect() the step calls is: what it runs is traced
        self.collecting = False
        self.collect_calls = 0
        self.thread = threading.get_ident()

    def __enter__(self):
        self.previous = sys.getprofile()
        # a hook of the user's written in Python (profile, a debugger's) sees every event
        # through ours, so it finds its calls and returns paired when it gets its hook back
        self.chained = self.previous if callable(self.previous) else None
        recorder = capture.current()
        if recorder is not None:
            recorder.quiet_hook = self.chained
        # first to hear a collection start and last to hear it stop: other libraries' gc
        # callbacks run inside it (hypothesis and jax time collections with perf_counter)
        gc.callbacks.insert(0, self._collection_starts)
        gc.callbacks.append(self._collection_stops)
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc):
        capture.set_profile(self.previous)  # (a cProfile around the loop: enabled again)
        for callback in (self._collection_starts, self._collection_stops):
            if callback in gc.callbacks:  # (the step may have cleared the list)
                gc.callbacks.remove(callback)
        self.collecting = False
        return False

    def _collection_starts(self, phase, info) -> None:
        if phase == "start" and threading.get_ident() == self.thread and not self.collect_calls:
            self.collecting = True  # (not another thread's, nor one the step asked for)

    def _collection_stops(self, phase, info) -> None:
        if phase == "stop" and threading.get_ident() == self.thread:
            self.collecting = False

    def note(self, what: str, frame=None) -> None:
        self.effects.append((what, line_of(frame or sys._getframe(1))))

    def _event(self, frame, event, arg) -> None:
        if self.chained is not None:
            self.chained(frame, event, arg)
        if self.collecting:
            return
        if arg is gc.collect and event in _C_EVENTS:  # (c_call, then c_return or c_exception)
            self.collect_calls += 1 if event == "c_call" else -1
        if event == "c_call" and _switches_profile(arg) and not frame.f_code.co_filename.startswith(_NEEDLE_DIR):
            self.note(f"{getattr(arg, '__qualname__', arg)}() (it takes the hook through which needle watches the "
                      "call)", frame)
        if event == "call":
            code = frame.f_code
            if code in _HOST_CODES and _called_by_user(frame):
                self.note(f"a read of {_HOST_CODES[code]}", frame)
            if code not in self.codes:
                self.codes.add(code)
                if (is_user_code(code.co_filename) or (is_package_code(code.co_filename)
                                                       and _library_call_of_user(frame.f_back))) \
                        and not _below_the_frontend(frame):
                    self._enter(frame, code)  # (a package's code the user calls: its globals too)
            if code.co_varnames[:1] == ("self",) and frame.f_back is not None \
                    and is_user_code(frame.f_back.f_code.co_filename):
                owner = frame.f_locals.get("self")  # (a method of needle's called by the user's code)
                self.touched.setdefault(id(owner), set()).add(code.co_name)
        elif event == "c_call" and not is_user_code(frame.f_code.co_filename):
            if (_reaches_the_host(arg, _LIBRARY_HOST_CALLS) or _of_host_module(getattr(arg, "__self__", None))) \
                    and _library_call_of_user(frame):
                # (np.load, logging, json.dump, os.path.exists, a library's print: for the user)
                self.note(f"{getattr(arg, '__qualname__', arg)}() (through a library)", frame)
        elif event == "c_call":
            owner = getattr(arg, "__self__", None)
            if arg in _DYNAMIC_LOOKUPS:
                self._looks_up_names(frame)
            elif isinstance(owner, (np.random.Generator, np.random.RandomState)) \
                    and owner is not np.random.mtrand._rand:
                self.note(f"a random generator other than numpy's global one ({arg.__qualname__})", frame)
            elif arg in _HOST_BUILTINS or _of_host_module(owner):
                self.note(f"{getattr(arg, '__qualname__', arg)}()", frame)
            elif isinstance(owner, np.ndarray) and id(owner) in self.world.unguarded_arrays:
                self.note(f"ndarray.{arg.__name__}() of a numpy array too big to guard by its values", frame)
            elif _reaches_the_host(arg, ()):  # (a file's, sys.stdout's or a StringIO's read or write; os.stat)
                self.note(f"{_call_name(arg)}()", frame)

    def _looks_up_names(self, frame) -> None:
        """A name looked up at run time by the user's code: its module's globals, and every
        attribute of the modules met, now and from here on, are guards."""
        self.dynamic = True
        self.world.add_globals(frame.f_globals, plain_names(frame.f_globals),
                               f"<globals of {os.path.basename(frame.f_code.co_filename)}>")
        self.world.namespace_attributes(None)

    def _enter(self, frame, code) -> None:
        where = os.path.basename(code.co_filename)
        globals_, attributes, modules = names_of(code)
        self.world.add_globals(frame.f_globals, globals_, f"<globals of {where}>")
        # (a global the code names that its module lacks resolves through builtins)
        self.world.add_globals(builtins.__dict__, [n for n in globals_ if n not in frame.f_globals], "<builtins>")
        for name in modules:  # (imported inside, or looked up in sys.modules)
            if sys.modules.get(name) is not None:
                self.world.add(sys.modules[name], name)
        if code.co_freevars:  # (values only: the cells of a function not reached otherwise)
            values = frame.f_locals
            for name in code.co_freevars:
                if name in values and name != "__class__":
                    self.world.add_local(values[name], name)
        self.attributes |= attributes | self.world.attribute_names
        self.world.namespace_attributes(None if self.dynamic else self.attributes)
        self.settle()  # (state found pending: computed before this code reads it)


def _called_by_user(frame) -> bool:
    """Whether the first caller outside the standard library is the user's code (the
    standard library's frozen modules included: os.getenv's code is `<frozen os>`)."""
    frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.startswith((_STDLIB, "<frozen ")):
        frame = frame.f_back
    return frame is not None and is_user_code(frame.f_code.co_filename)


def _library_call_of_user(frame) -> bool:
    """Whether `frame` (library code) runs for the user's code, with no needle code
    between (needle's kernel cache reads files of its own) and no import (a module
    imported the first time a branch runs reads its files once)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_NEEDLE_DIR) or name.startswith("<frozen importlib"):
            return False
        if is_user_code(name):
            return True
        frame = frame.f_back
    return False


_STDLIB = os.path.dirname(os.__file__)
#: calls that look names up at run time, which the names a code spells do not show
_DYNAMIC_LOOKUPS = {getattr, hasattr, vars, globals, eval, exec}
#: what a library may call for the user that reaches the host (besides stream methods and os)
_LIBRARY_HOST_CALLS = {open, io.open, os.open, print, input, breakpoint}
#: the operating system's calls (os.stat, os.listdir, os.getpid, ...), but for the pure ones
_OS_MODULES = {"posix", "nt"}
_PURE_OS_CALLS = {"fspath", "fsencode", "fsdecode", "strerror", "WIFEXITED", "WEXITSTATUS", "WIFSIGNALED",
                  "WTERMSIG", "WIFSTOPPED", "WSTOPSIG", "waitstatus_to_exitcode"}


def _of_host_module(owner) -> bool:
    """Whether a C function bound to `owner` reads the host's clocks or counters: a
    function of one of _HOST_MODULES, or a class method of one of their classes."""
    return getattr(owner, "__name__", None) in _HOST_MODULES or \
        (isinstance(owner, type) and owner.__module__ in _HOST_MODULES)


def _reaches_the_host(fn, calls) -> bool:
    """Whether the C function `fn` reads or writes outside Python: one of `calls`, a
    method of a file or stream, or the operating system's (os.*, not os.fspath)."""
    if fn in calls:
        return True
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, io.IOBase) or type(owner).__module__ in _HOST_TYPES_MODULES \
            or getattr(owner, "__name__", None) in _HOST_FUNCTIONS_MODULES:
        return True
    return getattr(owner, "__name__", None) in _OS_MODULES and getattr(fn, "__name__", "") not in _PURE_OS_CALLS


def _call_name(fn) -> str:
    """`os.stat`, `TextIOWrapper.write`, `Cursor.execute`: what a warning calls `fn`."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, types.ModuleType):
        return f"{'os' if owner.__name__ in _OS_MODULES else owner.__name__}.{fn.__name__}"
    return f"{type(owner).__name__}.{getattr(fn, '__name__', fn)}"


#: modules whose objects' methods reach outside Python (a database, a socket, a csv writer's
#: file, shared memory), and modules whose functions write to or read from files they are given
_HOST_TYPES_MODULES = {"sqlite3", "_sqlite3", "socket", "_socket", "select", "_ssl", "ssl", "mmap", "_csv",
                       "_multiprocessing", "_posixshmem", "_queue"}  # (_queue: SimpleQueue's put and get)
_HOST_FUNCTIONS_MODULES = {"_pickle", "marshal", "_csv", "select", "_socket", "mmap", "_posixshmem"}
_ENGINE_DIRS = tuple(os.path.join(_NEEDLE_DIR, d) + os.sep for d in ("engine", "compiler", "codegen", "runtime",
                                                                      "backend_ndarray"))


def _below_the_frontend(frame) -> bool:
    """Whether needle's engine called this code (a device driver, say): the machinery
    that runs kernels, not what the step reads."""
    frame = frame.f_back
    while frame is not None:
        if frame.f_code.co_filename.startswith(_ENGINE_DIRS):
            return True
        frame = frame.f_back
    return False


def _switches_profile(fn) -> bool:
    """Whether calling `fn` replaces the profile hook: sys.setprofile, or a C profiler's
    (cProfile's) enable or disable."""
    return fn is sys.setprofile or (isinstance(getattr(fn, "__self__", None), _lsprof.Profiler)
                                    and getattr(fn, "__name__", "") in ("enable", "disable"))
