"""Kernel caches: on disk across processes, in memory per schedule, and what a
cached kernel must not remember (scalar values, leaf data)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
import needle.runtime as rt
from needle import config
from needle.runtime import disk_cache

CPU = ndl.cpu()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A kernel no other test compiles (odd shape, odd constants), and its value.
SCRIPT = r"""
import json, numpy as np, needle as ndl, needle.runtime as rt
x = ndl.Tensor(np.linspace(-2, 2, 3 * 29, dtype=np.float32).reshape(3, 29), device=ndl.cpu())
y = ndl.ops.tanh(ndl.ops.exp(x) * 1.375 - 0.625) + ndl.ops.summation(x, axes=(1,), keepdims=True).broadcast_to((3, 29))
rt.reset_stats()
value = y.numpy()
print(json.dumps({"stats": rt.stats(), "value": value.tolist()}))
"""


def run_process(env_updates) -> dict:
    env = dict(os.environ)
    env.pop("NEEDLE_CACHE", None)
    env.update(env_updates)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def expected_value():
    x = np.linspace(-2, 2, 3 * 29, dtype=np.float32).reshape(3, 29).astype(np.float64)
    return np.tanh(np.exp(x) * 1.375 - 0.625) + x.sum(1, keepdims=True)


def cache_files(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


def test_disk_cache_across_processes(tmp_path):
    cache = tmp_path / "kernels"
    first = run_process({"NEEDLE_CACHE_DIR": str(cache)})
    assert first["stats"]["kernels_compiled"] >= 1
    assert first["stats"]["disk_cache_hits"] == 0
    files = cache_files(cache)
    assert len(files) == first["stats"]["kernels_compiled"]
    assert all(f.endswith(".o") for f in files)
    second = run_process({"NEEDLE_CACHE_DIR": str(cache)})
    assert second["stats"]["kernels_compiled"] == 0
    assert second["stats"]["disk_cache_hits"] == first["stats"]["kernels_compiled"]
    assert cache_files(cache) == files
    np.testing.assert_array_equal(second["value"], first["value"])
    np.testing.assert_allclose(second["value"], expected_value(), rtol=1e-5, atol=1e-5)

    # a corrupt entry is detected, recompiled and rewritten, never executed
    for f in files:
        data = bytearray(open(f, "rb").read())
        data[-10] ^= 0xFF
        open(f, "wb").write(bytes(data))
    third = run_process({"NEEDLE_CACHE_DIR": str(cache)})
    assert third["stats"]["disk_cache_hits"] == 0
    assert third["stats"]["kernels_compiled"] == first["stats"]["kernels_compiled"]
    np.testing.assert_array_equal(third["value"], first["value"])


def test_cache_off_writes_nothing(tmp_path):
    cache = tmp_path / "kernels"
    out = run_process({"NEEDLE_CACHE_DIR": str(cache), "NEEDLE_CACHE": "0"})
    assert out["stats"]["kernels_compiled"] >= 1
    assert not cache.exists() or cache_files(cache) == []
    np.testing.assert_allclose(out["value"], expected_value(), rtol=1e-5, atol=1e-5)


def test_disk_cache_entries_are_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path))
    key = "ab" + "0" * 62
    disk_cache.store(key, b"object code")
    assert disk_cache.load(key) == b"object code"
    path = os.path.join(str(tmp_path), key[:2], key + ".o")
    assert os.path.exists(path)
    # truncated payload: detected and deleted
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-3])
    assert disk_cache.load(key) is None
    assert not os.path.exists(path)
    # an entry stored under another key
    other = "ab" + "1" * 62
    disk_cache.store(other, b"object code")
    os.replace(os.path.join(str(tmp_path), other[:2], other + ".o"), path)
    assert disk_cache.load(key) is None
    assert disk_cache.load("cd" + "2" * 62) is None  # missing


def test_schedule_cache_reuses_compiled_graph():
    def graph(seed):
        rng = np.random.RandomState(seed)
        a = ndl.Tensor(rng.randn(6, 11).astype(np.float32), device=CPU)
        b = ndl.Tensor(rng.randn(11, 5).astype(np.float32), device=CPU)
        return a, b, ndl.ops.relu(a @ b) + ndl.ops.summation(a, axes=(1,), keepdims=True).broadcast_to((6, 5))

    a, b, out = graph(0)
    out.numpy()
    a, b, out = graph(1)  # same structure, new data
    rt.reset_stats()
    got = out.numpy()
    stats = rt.stats()
    assert stats["kernels_compiled"] == 0
    assert stats["schedule_cache_hits"] == 1
    assert stats["kernels_launched"] >= 1
    an, bn = a.numpy().astype(np.float64), b.numpy()
    np.testing.assert_allclose(got, np.maximum(an @ bn, 0) + an.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_new_scalar_value_reuses_the_kernel():
    x = ndl.Tensor(np.linspace(-1, 1, 23, dtype=np.float32), device=CPU)
    first = (x * 0.3 + 1.7).numpy()
    rt.reset_stats()
    second = (x * 0.7 + 2.9).numpy()
    stats = rt.stats()
    assert stats["kernels_compiled"] == 0 and stats["schedule_cache_hits"] == 1
    xs = x.numpy()
    np.testing.assert_allclose(first, xs * np.float32(0.3) + np.float32(1.7), rtol=1e-6)
    np.testing.assert_allclose(second, xs * np.float32(0.7) + np.float32(2.9), rtol=1e-6)


def test_leaf_storage_changed_in_place_is_seen():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ndl.Tensor(data, device=CPU)
    np.testing.assert_array_equal((t * 2.5).numpy(), data * 2.5)
    for j in (0, 5, 11):
        t.realize_cached_data().flat[j] += 1
        data.flat[j] += 1
        rt.reset_stats()
        np.testing.assert_array_equal((t * 2.5).numpy(), data * 2.5)
        assert rt.stats()["kernels_compiled"] == 0  # same kernel, new data
    # a transposed leaf (a view of the same storage) too
    np.testing.assert_array_equal(ndl.ops.transpose(t).numpy() * 1.0, data.T)


def test_different_layouts_get_their_own_schedule():
    """Leaf strides are part of the schedule key: the same ops over a transposed
    leaf must not reuse the kernel compiled for a contiguous one."""
    from needle.backend_ndarray.ndarray import NDArray
    from needle.ir import build
    a = np.random.randn(5, 7).astype(np.float32)
    contiguous = NDArray(a, device=CPU)
    transposed = NDArray(a.T.copy(), device=CPU).permute((1, 0))  # same values, strides (1, 5)
    first = build.elementwise("exp", build.buffer(contiguous))
    np.testing.assert_allclose(first.numpy(), np.exp(a), rtol=1e-6)
    rt.reset_stats()
    second = build.elementwise("exp", build.buffer(transposed))
    np.testing.assert_allclose(second.numpy(), np.exp(a), rtol=1e-6)
    assert rt.stats()["schedule_cache_hits"] == 0


@pytest.mark.parametrize("sizes", [(37, 53), (40000, 70001)], ids=["small", "threaded"])
def test_new_size_of_a_flat_kernel_reuses_its_code(sizes):
    """A flat elementwise kernel's code does not depend on its length (the parallel
    loop runs over the range given at launch): a new length compiles nothing, and
    each length still computes all of its own elements."""
    def f(t):
        return ndl.ops.exp(t * 0.25) - t * 1.5
    first, second = (np.linspace(-3, 3, n, dtype=np.float32) for n in sizes)
    got_first = f(ndl.Tensor(first, device=CPU)).numpy()
    rt.reset_stats()
    got_second = f(ndl.Tensor(second, device=CPU)).numpy()
    assert rt.stats()["kernels_compiled"] == 0
    for x, got in ((first, got_first), (second, got_second)):
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(got, np.exp(x64 * 0.25) - x64 * 1.5, rtol=2e-6, atol=1e-6)
