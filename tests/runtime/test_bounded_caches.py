"""Every cache in memory is bounded (training-loop issue, cause 2): the schedule cache,
the compiled kernels and the buffer pool evict the least recently used entries past
their count and byte limits (needle.config), count evictions in stats(), and a loop
that keeps cycling through batch shapes runs in flat memory."""
import gc
import os

import numpy as np
import pytest

import needle as ndl
import needle.runtime as rt
from needle import config, nn, optim
from needle.engine import schedule_cache
from needle.runtime import jit
from needle.runtime.lru import LRUCache
from needle.runtime.pool import BufferPool



@pytest.fixture
def limits(monkeypatch):
    """Set cache limits for one test (restored afterwards, caches cleared)."""
    schedule_cache.clear()  # limits apply as entries are added
    jit._compiled.clear()

    def set_limits(**values):
        for name, value in values.items():
            monkeypatch.setattr(config, name, value)
    yield set_limits
    schedule_cache.clear()


def test_lru_evicts_least_recently_used_by_count_and_bytes():
    bounds = [3, 100]
    cache = LRUCache("schedule", lambda: tuple(bounds), size_of=lambda v: v)
    before = rt.stats()["schedule_evictions"]
    for key in "abc":
        cache.put(key, 10)
    cache.get("a")                      # a is now the most recently used
    cache.put("d", 10)                  # over 3 entries: b goes
    assert list(cache.entries) == ["c", "a", "d"]
    cache.put("e", 85)                  # over 100 bytes: c, then a go
    assert list(cache.entries) == ["d", "e"] and cache.bytes == 95
    assert rt.stats()["schedule_evictions"] - before == 3


def test_pool_keeps_a_bounded_number_of_idle_buffers(limits):
    limits(POOL_BUFFERS=2, POOL_BYTES=1 << 20)
    pool = BufferPool()
    before = rt.stats()["pool_evictions"]
    bufs = [pool.acquire(1024 * (i + 1)) for i in range(4)]
    for b in bufs:
        pool.release(b)
    assert len(pool.order) == 2 and pool.idle_bytes == 1024 * (3 + 4)
    assert rt.stats()["pool_evictions"] - before == 2
    assert pool.acquire(4096) is bufs[3] and pool.acquire(1024) is not bufs[0]
    limits(POOL_BYTES=5000)
    pool.release(np.empty(3000, np.uint8))
    pool.release(np.empty(3000, np.uint8))
    assert pool.idle_bytes <= 5000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def distinct_graphs(n):
    """n graphs of different structure (chains of 1..n ops, so each needs its own
    kernel: kernels differing only in length share code), each realized once."""
    for i in range(n):
        x = ndl.Tensor(np.ones(8 + i, "float32"), requires_grad=False)
        y, expected = x, np.ones(8 + i)
        for _ in range(i + 1):
            y, expected = y * 0.5 + 1.5, expected * 0.5 + 1.5
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)


def test_schedule_and_kernel_caches_stay_within_their_counts(limits):
    limits(SCHEDULE_CACHE_SIZE=3, KERNEL_CACHE_SIZE=2)
    with ndl.lazy(True):
        before = rt.stats()
        distinct_graphs(6)
        after = rt.stats()
    assert len(schedule_cache.CACHES['cpu'].entries) <= 3
    assert len(jit._compiled) <= 2
    assert after["schedule_evictions"] - before["schedule_evictions"] >= 3
    assert after["kernel_evictions"] - before["kernel_evictions"] >= 4


def train_cycling_batch_shapes(steps, shapes=(8, 16, 24)):
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = [(ndl.Tensor(rng.standard_normal((n, 10)).astype("float32"), requires_grad=False),
             ndl.Tensor(rng.integers(0, 4, n).astype("float32"), requires_grad=False)) for n in shapes]
    marks = {}
    for step in range(steps):
        x, y = data[step % len(data)]
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        loss.numpy()
        if step in (steps // 5, steps - 1):
            gc.collect()
            marks[step] = (rss_bytes(), rt.stats())
    (rss0, s0), (rss1, s1) = marks[steps // 5], marks[steps - 1]
    return rss1 - rss0, s0, s1


def test_two_thousand_steps_cycling_three_batch_shapes_keep_rss_flat():
    with ndl.lazy(True):
        growth, s0, s1 = train_cycling_batch_shapes(2000)
    assert s1["kernels_compiled"] == s0["kernels_compiled"]
    # 1,600 steps leaking even 10 KB each would be 16 MB
    assert growth < 8 * 2 ** 20, growth


def test_caches_smaller_than_the_working_set_still_run_in_flat_memory(limits):
    # every step misses: schedules are replanned and kernels reloaded into new JIT
    # engines, which must be freed with the kernels they hold
    limits(SCHEDULE_CACHE_SIZE=2, KERNEL_CACHE_SIZE=4)
    with ndl.lazy(True):
        growth, s0, s1 = train_cycling_batch_shapes(400)
    assert s1["schedule_evictions"] - s0["schedule_evictions"] >= 300
    assert s1["kernel_evictions"] > s0["kernel_evictions"]
    assert growth < 8 * 2 ** 20, growth
