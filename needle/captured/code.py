"""Which code is the user's, and what it names: the capture follows the user's code
(its globals, the attributes it reads) and the installed packages it calls, not needle's,
numpy's or the standard library's."""
from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig
import types

from ..engine.capture import user_line

_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) for p in (
    sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))} | {_NEEDLE_DIR}))


_PACKAGE_DIRS = tuple(sorted({os.path.abspath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}))
#: installed packages whose code the capture does not follow: numpy's Python layer over its C
#: core (what it computes is guarded through the arrays), needle's own
_FRAMEWORK_DIRS = tuple(os.path.join(d, name) + os.sep for d in _PACKAGE_DIRS for name in ("numpy", "needle")) \
    + (_NEEDLE_DIR + os.sep,)


@functools.lru_cache(maxsize=4096)
def is_package_code(filename: str) -> bool:
    """Code of an installed package other than numpy and needle: followed like the user's
    when the user's code calls it (its globals are guards, its effects are seen)."""
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return path.startswith(_PACKAGE_DIRS) and not path.startswith(_FRAMEWORK_DIRS)


@functools.lru_cache(maxsize=4096)
def is_user_code(filename: str) -> bool:
    """Code the user wrote: not needle's, the standard library's or an installed package's."""
    if filename.startswith("<frozen") or filename.startswith("<built"):
        return False
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return not path.startswith(_LIBRARY_DIRS)


def user_namespace(value) -> bool:
    """A class or module the user wrote (its attributes can be read by the step): from a
    file of the user's, or made at run time (a module without a spec, a class whose
    module is none of sys.modules)."""
    module = value if isinstance(value, types.ModuleType) else sys.modules.get(getattr(value, "__module__", None))
    if module is None:
        return True
    filename = getattr(module, "__file__", None)
    if filename is None:
        return getattr(module, "__spec__", None) is None and module.__name__ not in sys.builtin_module_names
    return is_user_code(filename)


@functools.lru_cache(maxsize=1024)
def names_of(code) -> tuple:
    """(globals, attributes, modules) a code object — and the comprehensions and functions
    inside it — may read or write by name: the globals it loads or stores (LOAD_NAME too:
    `eval`'s code), the attribute names it reads or writes, the modules it imports.  Its
    string constants that are names count as both (`globals()["SCALE"]`, `getattr(cfg,
    "SCALE")`, `sys.modules["cfg"]`): names looked up at run time."""
    globals_, attributes, modules = [], set(), set()
    for i in dis.get_instructions(code):
        if i.opname in ("LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME"):
            globals_.append(i.argval)
        elif i.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR", "IMPORT_FROM"):
            attributes.add(i.argval)
        elif i.opname == "IMPORT_NAME":
            modules.add(i.argval)
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            inner = names_of(const)
            globals_.extend(inner[0])
            attributes |= inner[1]
            modules |= inner[2]
        elif isinstance(const, str) and const.replace(".", "_").isidentifier():
            globals_.append(const)
            attributes.add(const)
            modules.add(const)
    return tuple(dict.fromkeys(globals_)), frozenset(attributes), frozenset(modules)


def global_names(code) -> tuple:
    return names_of(code)[0]


def attribute_names(code) -> frozenset:
    return names_of(code)[1]


def line_of(frame) -> str:
    """`user_line` from the innermost frame of the user's own code (not numpy's either)."""
    while frame is not None and not is_user_code(frame.f_code.co_filename):
        frame = frame.f_back
    return user_line(frame) if frame is not None else "<unknown>"
