"""The on-disk kernel cache under abuse: corrupt, truncated and foreign entries
are detected (header, key, SHA-256 checksum) and recompiled, never executed; two
processes compiling the same kernels at once leave a valid cache; a cache
directory that cannot be written degrades to memory-only with one warning.

Every scenario runs in fresh processes (a process keeps compiled kernels in
memory, and the JIT engine never unloads them), on a cache directory of its own.
"""
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from needle import config
from needle.runtime import disk_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# N distinct graphs (shapes depend on i + offset), checked against numpy in the child
SCRIPT = r"""
import json, os, sys, time, warnings
import numpy as np
caught = []
warnings.simplefilter("always")
warnings.showwarning = lambda message, category, *args, **kwargs: caught.append(f"{category.__name__}: {message}")
import needle as ndl, needle.runtime as rt
n, offset, start_at = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
while time.time() < start_at:  # concurrent runs start together
    time.sleep(0.001)


def graph(i):
    x = np.linspace(-2, 2, 3 * (5 + i + offset), dtype=np.float32).reshape(3, -1)
    t = ndl.Tensor(x, device=ndl.cpu())
    y = ndl.ops.tanh(ndl.ops.exp(t) * 1.25 - 0.5) + ndl.ops.summation(t, axes=(1,), keepdims=True).broadcast_to(x.shape)
    x64 = x.astype(np.float64)
    return bool(np.allclose(y.numpy(), np.tanh(np.exp(x64) * 1.25 - 0.5) + x64.sum(1, keepdims=True),
                            rtol=1e-5, atol=1e-5))


rt.reset_stats()
ok = all([graph(i) for i in range(n)])
ndl.engine.schedule_cache.clear()
ok &= graph(0)  # the passes run again; its kernels come from the in-memory cache
print(json.dumps({"stats": rt.stats(), "ok": ok, "warnings": caught}))
"""


def _env(cache_dir):
    env = dict(os.environ)
    env.pop("NEEDLE_CACHE", None)
    env["NEEDLE_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start(cache_dir, n, offset=0, start_at=0.0):
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(n), str(offset), str(start_at)], env=_env(cache_dir),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=240) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{err[-3000:]}"
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"], "wrong values"
    return result


def run(cache_dir, n, offset=0) -> dict:
    return finish(start(cache_dir, n, offset))


def entries(cache_dir) -> list:
    return sorted(glob.glob(os.path.join(str(cache_dir), "*", "*.o")))


def valid_entries(cache_dir, monkeypatch) -> list:
    """Entries that `disk_cache.load` accepts (it deletes the ones it rejects)."""
    monkeypatch.setattr(config, "CACHE_DIR", str(cache_dir))
    keys = [os.path.basename(p)[:-2] for p in entries(cache_dir)]
    return [k for k in keys if disk_cache.load(k) is not None]


def _flip_payload_byte(data):
    return data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]


CORRUPTIONS = {
    "flipped_payload_byte": _flip_payload_byte,
    "truncated_payload": lambda data: data[: len(data) * 2 // 3],
    "truncated_header": lambda data: data[:20],
    "empty_file": lambda data: b"",
    "wrong_magic": lambda data: b"NEEDLE-OBJ-0" + data[len(b"NEEDLE-OBJ-1"):],
    "garbage": lambda data: os.urandom(len(data)),
    "no_header_line": lambda data: data.partition(b"\n")[2],
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_corrupt_entries_are_recompiled_not_executed(tmp_path, monkeypatch, how):
    cache = tmp_path / "cache"
    first = run(cache, 3)
    files = entries(cache)
    assert len(files) == first["stats"]["kernels_compiled"] >= 3
    for f in files:
        data = open(f, "rb").read()
        open(f, "wb").write(CORRUPTIONS[how](data))
    second = run(cache, 3)  # values are checked in the child
    assert second["stats"]["disk_cache_hits"] == 0
    assert second["stats"]["kernels_compiled"] == first["stats"]["kernels_compiled"]
    assert sorted(valid_entries(cache, monkeypatch)) == sorted(os.path.basename(f)[:-2] for f in files)
    third = run(cache, 3)
    assert third["stats"]["kernels_compiled"] == 0
    assert third["stats"]["disk_cache_hits"] == first["stats"]["kernels_compiled"]


def test_foreign_entries_are_recompiled(tmp_path, monkeypatch):
    """Entries moved under another kernel's name (or copied from another cache) carry
    the wrong key in their header: detected, recompiled, rewritten."""
    cache = tmp_path / "cache"
    first = run(cache, 4)
    files = entries(cache)
    contents = [open(f, "rb").read() for f in files]
    for f, data in zip(files, contents[1:] + contents[:1]):  # rotate: every file holds another's entry
        open(f, "wb").write(data)
    second = run(cache, 4)
    assert second["stats"]["disk_cache_hits"] == 0
    assert second["stats"]["kernels_compiled"] == first["stats"]["kernels_compiled"]
    assert len(valid_entries(cache, monkeypatch)) == len(files)


def test_entry_replaced_by_a_directory(tmp_path):
    cache = tmp_path / "cache"
    first = run(cache, 2)
    for f in entries(cache):
        os.remove(f)
        os.mkdir(f)
    second = run(cache, 2)  # cannot read it, cannot replace it: compiled, and still right
    assert second["stats"]["kernels_compiled"] == first["stats"]["kernels_compiled"]


def test_forged_entry_with_matching_checksum_does_not_crash(tmp_path):
    cache = tmp_path / "cache"
    run(cache, 1)
    for f in entries(cache):
        key = os.path.basename(f)[:-2]
        payload = os.urandom(4000)
        header = b" ".join([disk_cache.MAGIC, key.encode(), hashlib.sha256(payload).hexdigest().encode()])
        open(f, "wb").write(header + b"\n" + payload)
    proc = start(cache, 1)
    proc.communicate(timeout=240)
    assert proc.returncode == 0


def test_two_processes_compiling_the_same_kernels_at_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    n = 24
    start_at = time.time() + 3.0  # both are importing needle by then
    procs = [start(cache, n, 0, start_at) for _ in range(2)]
    results = [finish(p) for p in procs]
    compiled = [r["stats"]["kernels_compiled"] + r["stats"]["disk_cache_hits"] for r in results]
    assert compiled[0] == compiled[1] >= n
    assert not glob.glob(os.path.join(str(cache), "*", ".tmp-*")), "temporary files left behind"
    valid = valid_entries(cache, monkeypatch)
    assert len(valid) == len(entries(cache)) == compiled[0]
    third = run(cache, n)
    assert third["stats"]["kernels_compiled"] == 0
    assert third["stats"]["disk_cache_hits"] == compiled[0]


def _unwritable_dirs(tmp_path):
    """Cache directories this process cannot create files in.  Root ignores mode
    bits, so a 0o555 directory only counts when writing into it really fails."""
    out = []
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    try:
        open(locked / "probe", "w").close()
        os.remove(locked / "probe")
    except OSError:
        out.append(("chmod_555", locked / "cache"))
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    out.append(("under_a_file", a_file / "cache"))
    if os.path.isdir("/proc/self"):
        out.append(("under_proc", "/proc/self/needle-cache"))
    return out


def test_unwritable_cache_dir_degrades_to_memory_with_one_warning(tmp_path):
    cases = _unwritable_dirs(tmp_path)
    if not cases:
        pytest.skip("no way to make an unwritable directory here")
    try:
        for name, cache in cases:
            result = run(cache, 3)  # values right (checked in the child)
            warned = [w for w in result["warnings"] if w.startswith("RuntimeWarning") and "cache" in w]
            assert len(warned) == 1, (name, result["warnings"])
            assert "memory only" in warned[0]
            assert result["stats"]["kernels_compiled"] >= 3
            assert result["stats"]["cache_hits"] >= 1  # graph 0 again: its kernels come from memory
            assert not os.path.exists(str(cache))
    finally:
        os.chmod(tmp_path / "locked", 0o755)
