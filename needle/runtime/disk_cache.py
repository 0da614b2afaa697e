"""The on-disk kernel cache: object code keyed by the kernel's hash.

Each entry is `<dir>/<key[:2]>/<key>.o`: a header line with a magic word, the
key and the SHA-256 of the payload, then the payload.  An entry whose header,
key or checksum does not match (corrupt, truncated, foreign) is deleted and
reported as a miss, so it is recompiled and never executed.  Writes go to a
temporary file that is renamed into place, so two processes compiling the same
kernel at once each write a whole file and the last rename wins.  A cache
directory that cannot be written turns the cache off with one warning.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import warnings

from .. import config

MAGIC = b"NEEDLE-OBJ-1"
_disabled = [False]


def _path(key: str) -> str:
    return os.path.join(config.CACHE_DIR, key[:2], key + ".o")


def load(key: str):
    """The payload stored under `key`, or None (missing or invalid entry)."""
    path = _path(key)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    header, _, payload = data.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC or parts[1] != key.encode() or \
            parts[2] != hashlib.sha256(payload).hexdigest().encode():
        _discard(path)
        return None
    return payload


def store(key: str, payload: bytes) -> None:
    if _disabled[0]:
        return
    path = _path(key)
    header = b" ".join([MAGIC, key.encode(), hashlib.sha256(payload).hexdigest().encode()])
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header + b"\n" + payload)
            os.replace(tmp, path)
        except BaseException:
            _discard(tmp)
            raise
    except OSError as e:
        _disabled[0] = True
        warnings.warn(f"needle: kernel cache directory {config.CACHE_DIR!r} is not writable ({e}); "
                      "kernels are cached in memory only", RuntimeWarning, stacklevel=2)


def discard(key: str) -> None:
    """Remove the entry stored under `key` (found unusable by its reader)."""
    _discard(_path(key))


def _discard(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def clear() -> None:
    """Remove every entry (used by tests and `python -m needle cache --clear`)."""
    import shutil
    shutil.rmtree(config.CACHE_DIR, ignore_errors=True)
