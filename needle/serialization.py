"""`needle.save(obj, path)` / `needle.load(path)`: tensors and nested containers on disk.

The file is a numpy `.npz` archive: every tensor or array is one member (so its
dtype and shape are stored exactly), and one more member holds a JSON description
of the structure (dicts, lists, tuples, numbers, strings, None) that points at the
arrays by index.  Loading uses `allow_pickle=False`, so reading a file never runs
code from it.  Any file that cannot be read back raises DataError naming it.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from typing import Any, List, Optional, Union

import numpy as np

from .autograd import Tensor
from .backend_selection import Device, all_devices, cpu
from .errors import DataError, DTypeError

FORMAT = "needle-save"
VERSION = 1
_STRUCTURE = "structure"  # npz member holding the JSON; arrays are "a0", "a1", ...

PathLike = Union[str, os.PathLike]


# ---- encoding -----------------------------------------------------------------------------
def _encode(obj: Any, arrays: List[np.ndarray]) -> Any:
    """A JSON-able description of `obj`; arrays are appended to `arrays`."""
    if isinstance(obj, (np.ndarray, np.generic)):  # first: np.float64 is also a float
        arrays.append(np.asarray(obj))
        return {"ndarray": len(arrays) - 1, "scalar": isinstance(obj, np.generic)}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return {"int": str(obj)} if abs(obj) >= 2 ** 53 else obj  # JSON readers lose big ints
    if isinstance(obj, float):
        return {"float": repr(float(obj))}  # keeps nan / inf and every bit of the value
    if isinstance(obj, Tensor):
        arrays.append(np.ascontiguousarray(obj.numpy()))
        return {"tensor": len(arrays) - 1, "device": str(obj.device), "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, (list, tuple)):
        return {"tuple" if isinstance(obj, tuple) else "list": [_encode(x, arrays) for x in obj]}
    if isinstance(obj, dict):
        return {"dict": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    raise DTypeError(f"needle.save: cannot save objects of type {type(obj).__name__}; save tensors, "
                    "numpy arrays, numbers, strings and dicts/lists/tuples of them (e.g. model.state_dict())")


def save(obj: Any, path: Union[PathLike, io.IOBase]) -> None:
    """Write `obj` (a Tensor, or nested dicts/lists/tuples of Tensors, numpy arrays,
    numbers and strings) to `path` (a file name or a writable binary file).
    The file is written whole or not at all: a crash leaves any old file intact."""
    arrays: List[np.ndarray] = []
    structure = {"format": FORMAT, "version": VERSION, "root": _encode(obj, arrays)}
    members = {f"a{i}": a for i, a in enumerate(arrays)}
    members[_STRUCTURE] = np.frombuffer(json.dumps(structure).encode("utf-8"), dtype=np.uint8)
    if hasattr(path, "write"):
        np.savez(path, **members)
        return
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".needle-save-", dir=folder)
    except OSError as e:
        raise DataError(f"needle.save: cannot write {path!r}: {e.strerror} ({folder})") from None
    try:
        with os.fdopen(fd, "wb") as f:  # a file object, so numpy does not append ".npz"
            np.savez(f, **members)
        os.chmod(tmp, 0o666 & ~_umask())  # (mkstemp's file is 0600: as open() would make it)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- decoding -----------------------------------------------------------------------------
def _device_named(name: str) -> Device:
    for device in all_devices():
        if str(device) == name and device.enabled():
            return device
    return cpu()


def _decode(node: Any, arrays, device: Optional[Device]) -> Any:
    if node is None or isinstance(node, (bool, int, str)):
        return node
    if isinstance(node, dict) and len(node) >= 1:
        if "int" in node:
            return int(node["int"])
        if "float" in node:
            return float(node["float"])
        if "tensor" in node:
            array = arrays[f"a{int(node['tensor'])}"]
            target = device if device is not None else _device_named(node.get("device", "cpu()"))
            return Tensor(array, device=target, dtype=array.dtype.name,
                          requires_grad=bool(node.get("requires_grad", False)))
        if "ndarray" in node:
            array = arrays[f"a{int(node['ndarray'])}"]
            return array[()] if node.get("scalar") else array
        if "list" in node:
            return [_decode(x, arrays, device) for x in node["list"]]
        if "tuple" in node:
            return tuple(_decode(x, arrays, device) for x in node["tuple"])
        if "dict" in node:
            return {_decode(k, arrays, device): _decode(v, arrays, device) for k, v in node["dict"]}
    raise ValueError(f"unknown entry {str(node)[:80]}")


def load(path: Union[PathLike, io.IOBase], device: Optional[Device] = None) -> Any:
    """Read what `save` wrote.  Tensors come back with their dtype, on `device` if
    given, else on the device they were saved from when it is available here (else
    `cpu()`).  A missing, truncated or foreign file raises DataError naming it."""
    name = getattr(path, "name", None) if hasattr(path, "read") else os.fspath(path)
    if not hasattr(path, "read") and not os.path.isfile(name):
        raise DataError(f"needle.load: no such file: {name!r}")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            if _STRUCTURE not in arrays.files:
                raise ValueError("it has no needle structure record")
            structure = json.loads(arrays[_STRUCTURE].tobytes().decode("utf-8"))
            if not isinstance(structure, dict) or structure.get("format") != FORMAT:
                raise ValueError("it is not a needle.save file")
            if structure.get("version") != VERSION:
                raise ValueError(f"format version {structure.get('version')!r} is not supported "
                                 f"(this needle reads version {VERSION})")
            return _decode(structure["root"], arrays, device)
    except Exception as e:  # any failure to parse is the file's fault, reported as such
        raise DataError(f"needle.load: cannot read {name!r}: the file is corrupt, truncated or not "
                        f"written by needle.save ({type(e).__name__}: {e})") from None
