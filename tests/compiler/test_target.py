"""The target is data: any plan can be made on any host, and run where the host
can execute it.  Expected tile shapes are derived by hand from the register
files: AVX-512 has 32 zmm registers (an 8 x 2-vector tile of 16 accumulators),
AVX2 and SSE 16 (a 6 x 2-vector tile of 12)."""
import re

import numpy as np
import pytest

import needle as ndl
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.ir.printer import output_nodes

FLOATS_PER_TILE = {64: 8 * 2 * 16, 32: 6 * 2 * 8, 16: 6 * 2 * 4}  # MR * NR, float32


def matmul_nodes(rng):
    a = ndl.Tensor(rng.standard_normal((200, 300)).astype(np.float32), requires_grad=False)
    b = ndl.Tensor(rng.standard_normal((300, 100)).astype(np.float32), requires_grad=False)
    with ndl.lazy(True):
        out = ndl.relu(a @ b)
    return output_nodes([out]), a.numpy(), b.numpy()


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
def test_matmul_tiles_follow_the_target_not_the_host(vector_bytes):
    nodes, _, _ = matmul_nodes(np.random.default_rng(0))
    target = schedule_cache.cpu_target().with_vector_bytes(vector_bytes)
    schedule, _ = plan(nodes, target)
    macro = schedule.calls[-1].kernel
    assert macro.name.startswith("M_")
    tile = re.search(r"register tile: float32\[(\d+)\]", macro.text())
    assert int(tile.group(1)) == FLOATS_PER_TILE[vector_bytes]


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
def test_a_plan_for_a_narrower_target_runs_on_this_host(vector_bytes):
    host = schedule_cache.cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot execute {vector_bytes}-byte SIMD code")
    nodes, a, b = matmul_nodes(np.random.default_rng(1))
    signature = structure(nodes)
    schedule, _ = plan(nodes, target, signature)
    compiled = schedule_cache.compile_schedule(schedule, target)
    (out,) = compiled.run(signature.leaves, signature.scalars, ndl.cpu())
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    # float32 dot products of 300 terms: error below 300 * eps * sum|a_ik b_kj|
    bound = 300 * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(out.numpy() - want) <= bound)


def test_narrower_targets_turn_off_wider_features():
    host = schedule_cache.cpu_target()
    avx2 = host.with_vector_bytes(32)
    assert "+avx512f" not in avx2.features.split(",")
    assert avx2.can_run_on(host) or "+avx2" not in host.features
    sse = host.with_vector_bytes(16)
    assert not any(f.startswith("+avx") for f in sse.features.split(","))


def test_the_schedule_cache_keys_on_the_target(monkeypatch):
    """Changing the thread count (part of the target) must not reuse a schedule
    made for the old target."""
    x = ndl.Tensor(np.ones((37, 53), np.float32), requires_grad=False)  # a shape no other test uses
    hits = []
    for threads in (1, 2, 1):
        monkeypatch.setattr(ndl.config, "THREADS", threads)
        before = ndl.runtime.stats()["schedule_cache_hits"]
        with ndl.lazy(True):
            (x * 3.0 + 1.5).numpy()
        hits.append(ndl.runtime.stats()["schedule_cache_hits"] - before)
    assert hits[1] == 0 and hits[2] == 1


def test_a_target_hashes_as_its_fields_also_after_pickling_and_replace():
    # (the hash is kept after its first use: a pickled one must not carry it to another
    # process, where strings hash differently, and replace() must not copy it)
    import pickle
    import subprocess
    import sys
    from dataclasses import replace
    from needle.target import Target
    t = Target("cpu", 32, threads=2, cpu="znver3", features="+avx2,+fma")
    hash(t)
    other = replace(t, threads=1)
    assert other != t and hash(other) != hash(t) and hash(replace(other, threads=2)) == hash(t)
    data = pickle.dumps(t)
    code = ("import pickle, sys; from needle.target import Target; t = pickle.loads(sys.stdin.buffer.read()); "
            "print(hash(t) == hash(Target('cpu', 32, threads=2, cpu='znver3', features='+avx2,+fma')))")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.decode().strip() == "True"
