"""Threading does not change results: config.THREADS = 1 and 2 give equal values
(each output element is computed by the same code on one thread, whatever the
split), and the big kernels really are split when two threads are allowed."""
import time

import numpy as np
import pytest

import needle as ndl
from needle import config
from needle.backend_ndarray.ndarray import NDArray
from needle.ir import build
from needle.engine import schedule_cache
from needle.runtime import cpu_tables, cpu_threads
from needle.runtime import jit

CPU = ndl.cpu()


@pytest.fixture(autouse=True)
def whole_team(monkeypatch):
    """Every CPU free for the team (runtime/team.py measures the machine's load; these
    tests are about the launch paths, whatever else the machine runs)."""
    monkeypatch.setattr(cpu_threads.TEAM, "now", lambda now: 2)


def leaf(x):
    return build.buffer(NDArray(x, device=CPU, dtype=x.dtype.name))


def chain(x, y):
    X, Y = leaf(x), leaf(y)
    return build.elementwise("add", build.elementwise("mul", build.elementwise("exp", X), Y),
                             build.elementwise("tanh", build.elementwise("sub", X, Y)))


def matmul(a, b):
    return build.elementwise("max", build.matmul(leaf(a), leaf(b)), build.const(0.0, (a.shape[0], b.shape[1]),
                                                                                   "float32", CPU))


def column_sums(x):
    return build.reduce("reduce_sum", leaf(x), (0,))


def run_with(monkeypatch, threads, make, *arrays):
    """(values, whether each kernel was split across threads)."""
    monkeypatch.setattr(config, "THREADS", threads)
    node = make(*arrays)
    entry, _, _ = schedule_cache.compiled_schedule([node])
    flags = list(entry.threaded)
    return node.numpy(), flags


CASES = {
    "elementwise_2^20": (chain, lambda: (np.random.uniform(-3, 3, 1 << 20).astype(np.float32),
                                         np.random.uniform(-1, 1, 1 << 20).astype(np.float32))),
    "matmul_512": (matmul, lambda: (np.random.randn(512, 512).astype(np.float32),
                                    np.random.randn(512, 512).astype(np.float32))),
    "column_sum": (column_sums, lambda: (np.random.randn(300, 2000).astype(np.float32),)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_and_two_threads_agree(monkeypatch, case):
    make, data = CASES[case]
    arrays = data()
    one, flags_one = run_with(monkeypatch, 1, make, *arrays)
    two, flags_two = run_with(monkeypatch, 2, make, *arrays)
    assert not any(flags_one)
    if jit.gomp() is not None:
        assert any(flags_two), "a big kernel should be split across two threads"
    np.testing.assert_array_equal(one, two)
    # and both are right
    a64 = [a.astype(np.float64) for a in arrays]
    if case.startswith("elementwise"):
        expected = np.exp(a64[0]) * a64[1] + np.tanh(a64[0] - a64[1])
        tol = dict(rtol=1e-5, atol=1e-6)
    elif case.startswith("matmul"):
        expected = np.maximum(a64[0] @ a64[1], 0)
        tol = dict(rtol=1e-4, atol=2e-3)
    else:
        expected = a64[0].sum(0, keepdims=True)
        tol = dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(two, expected, **tol)


def test_thread_setting_is_honoured_for_cached_schedules(monkeypatch):
    """Changing config.THREADS after a graph ran must take effect the next time the
    same graph structure runs (the schedule cache keys on it)."""
    x = np.random.randn(4 * cpu_threads.MIN_WORK_PER_THREAD).astype(np.float32)
    make = lambda a: build.elementwise("exp", leaf(a))  # noqa: E731
    _, flags = run_with(monkeypatch, 1, make, x)
    assert not any(flags)
    _, flags = run_with(monkeypatch, 2, make, x)
    if jit.gomp() is not None:
        assert any(flags)


def test_every_kernel_has_an_entry_of_the_native_launcher():
    """A single-threaded kernel's entry is (entry point, pointer list, parameters,
    total, error flag, 0); a threaded one's is its `_omp` wrapper, a data block laid
    out as the wrapper reads it (codegen/llvm.py `_emit_omp`), and its thread count."""
    class Kernel:
        def __init__(self, address):
            self.address, self.omp_address = address, address + 5
    launches = [(Kernel(10 * i + 1), 100 + i, 200 + i, 7 + i, threads, i)
                for i, threads in enumerate([0, 0, 2, 0])]
    table, blocks = cpu_tables.entries(launches, err_ptr=999)
    assert table[[0, 1, 3]].tolist() == [[1, 100, 200, 7, 999, 0], [11, 101, 201, 8, 999, 0],
                                         [31, 103, 203, 10, 999, 0]]
    assert table[2].tolist() == [26, blocks[0].ctypes.data, 0, 0, 0, 2]
    assert blocks[0].tolist() == [102, 202, 9, 0, 999, 0, 0]  # bufs, params, total, limits, err, 2 starts


def _mixed_schedule(monkeypatch):
    """(big x, small y, a schedule computing exp(x) on two threads and y + 1 on one,
    leaves, scalars, device)."""
    if jit.gomp() is None:
        pytest.skip("no libgomp")
    monkeypatch.setattr(config, "THREADS", 2)
    x = np.random.uniform(-3, 3, 4 * cpu_threads.MIN_WORK_PER_THREAD).astype(np.float32)
    y = np.random.uniform(-3, 3, 100).astype(np.float32)
    big = build.elementwise("exp", leaf(x))
    small = build.elementwise("add", leaf(y), build.const(1.0, y.shape, "float32", CPU))
    entry, leaves, scalars = schedule_cache.compiled_schedule([big, small])
    assert sorted(entry.threaded) == [0, 2]
    return x, y, entry, leaves, scalars, big.device


def test_spinning_workers_run_threaded_kernels_from_the_native_loop(monkeypatch):
    """With the team's last launch just now (its workers spin), a schedule's threaded
    kernel is started by the native launcher: no launch goes through Python, the
    values are right, and the launcher notes when its team launch ended."""
    x, y, entry, leaves, scalars, device = _mixed_schedule(monkeypatch)
    monkeypatch.setattr(cpu_threads, "launch", lambda *a: pytest.fail("launched from Python"))
    workers = cpu_threads.WORKERS
    outs = []
    for _ in range(2):
        workers.last_end = time.perf_counter()
        start = workers.last_end
        outs = [o.numpy() for o in entry.run(leaves, scalars, device)]
        assert workers.last_end > start
    np.testing.assert_allclose(outs[0], np.exp(x.astype(np.float64)), rtol=2e-7)
    np.testing.assert_array_equal(outs[1], y + np.float32(1.0))


def test_a_team_that_may_be_asleep_is_left_to_python(monkeypatch):
    """With the team idle longer than ASLEEP_AFTER, the native loop stops at the
    threaded kernel and `_launch` decides whether to wake the team; the kernels before
    and after it still run natively (one Python launch in all), with the right values."""
    x, y, entry, leaves, scalars, device = _mixed_schedule(monkeypatch)
    calls = []
    real = cpu_threads.launch

    def spy(kernel, args, i, total, threads, limits):
        calls.append((i, threads))
        return real(kernel, args, i, total, threads, limits)
    monkeypatch.setattr(cpu_threads, "launch", spy)
    cpu_threads.WORKERS.last_end = -1e9
    outs = [o.numpy() for o in entry.run(leaves, scalars, device)]
    assert calls == [(entry.threaded.index(2), 2)]
    np.testing.assert_allclose(outs[0], np.exp(x.astype(np.float64)), rtol=2e-7)
    np.testing.assert_array_equal(outs[1], y + np.float32(1.0))


class _State:
    """A stand-in for cpu.WORKERS."""

    def __init__(self, last_end, lag, retry_at, hot):
        self.last_end, self.lag, self.retry_at, self.hot = last_end, lag, retry_at, hot


@pytest.mark.parametrize("since_last, lag, hot, retry_in, one_thread", [
    (1e-3, 5e-3, 1e-4, 1.0, False),   # the workers are still spinning: use them
    (0.1, 5e-3, 1e-4, 1.0, True),     # asleep, slow to wake, a short kernel: one thread
    (0.1, 5e-3, 1e-2, 1.0, False),    # asleep and slow, but the kernel is long enough to gain
    (0.1, 80e-6, 2e-4, 1.0, False),   # a quiet host wakes them in 80 us: threads gain
    (0.1, 5e-3, 1e-4, -1.0, False),   # the wake-up is due to be measured again
    (0.1, 5e-3, None, 1.0, False),    # a kernel never timed: threads (and time it)
])
def test_one_thread_when_waking_the_workers_costs_more(since_last, lag, hot, retry_in, one_thread):
    now = 1000.0
    key = (1, 100)
    state = _State(now - since_last, lag, now + retry_in, {} if hot is None else {key: hot})
    assert cpu_threads.one_thread_is_faster(state, key, 2, now) is one_thread


def _threaded_exp(monkeypatch, last_end, lag, retry_at, hot):
    """(x, its exp's threaded schedule, leaves, scalars, node), with cpu.WORKERS set to
    the given state; `hot(kernel, total)` -> the team's timing table."""
    if jit.gomp() is None:
        pytest.skip("no libgomp")
    monkeypatch.setattr(config, "THREADS", 2)
    x = np.random.uniform(-3, 3, 4 * cpu_threads.MIN_WORK_PER_THREAD).astype(np.float32)
    node = build.elementwise("exp", leaf(x))
    entry, leaves, scalars = schedule_cache.compiled_schedule([node])
    assert any(entry.threaded)
    workers = cpu_threads.WORKERS
    for name, value in (("last_end", last_end), ("lag", lag), ("retry_at", retry_at),
                        ("hot", hot(entry.kernels[0], entry.totals[0]))):
        monkeypatch.setattr(workers, name, value)
    return x, entry, leaves, scalars, node


def test_a_kernel_kept_on_one_thread_computes_the_same(monkeypatch):
    """With the workers taken to be asleep and slow to wake, every threaded kernel of
    a schedule runs on the calling thread (GOMP is not called), with the same values."""
    x, entry, leaves, scalars, node = _threaded_exp(monkeypatch, -1e9, 10.0, 1e18,
                                                    lambda kernel, total: {(id(kernel), total): 1e-3})

    class NoGomp:
        def GOMP_parallel(self, *args):
            raise AssertionError("the kernel should have run on this thread")
    monkeypatch.setattr(jit, "gomp", lambda: NoGomp())
    out = entry.run(leaves, scalars, node.device)[0].numpy()
    np.testing.assert_allclose(out, np.exp(x.astype(np.float64)), rtol=2e-7)


def test_a_threaded_launch_measures_how_late_the_workers_start(monkeypatch):
    """Each thread of a threaded kernel notes when it started (the `_omp` wrapper): a
    launch after an idle spell sets the team's measured lag and times the kernel."""
    _, entry, leaves, scalars, node = _threaded_exp(monkeypatch, -1e9, -1.0, 0.0, lambda kernel, total: {})
    workers = cpu_threads.WORKERS
    entry.run(leaves, scalars, node.device)
    assert 0.0 <= workers.lag < 10.0  # measured: seconds from the first thread's start to the last's
    assert list(workers.hot) == [(id(entry.kernels[0]), entry.totals[0])]


def test_transcendentals_weigh_an_elementwise_kernels_work(monkeypatch):
    """At 2^14 elements (below the 2^17 a plain kernel needs) an exp goes to two threads
    (an exp an element counts as 1 + TRANSCENDENTAL_WORK elements), an add stays on one;
    a reduction's kernel is weighed by its elements alone; values against numpy."""
    monkeypatch.setattr(config, "THREADS", 2)
    n = 1 << 14
    assert n * (1 + cpu_threads.TRANSCENDENTAL_WORK) >= 2 * cpu_threads.MIN_WORK_PER_THREAD > 2 * n
    x = np.random.uniform(-3, 3, n).astype(np.float32)
    values, flags = run_with(monkeypatch, 2, lambda a: build.elementwise("exp", leaf(a)), x)
    assert flags == ([2] if jit.gomp() is not None else [0])
    np.testing.assert_allclose(values, np.exp(x.astype(np.float64)), rtol=2e-7)
    values, flags = run_with(monkeypatch, 2, lambda a: build.elementwise("add", leaf(a), leaf(a)), x)
    assert flags == [0]
    np.testing.assert_array_equal(values, x + x)
    rows = x.reshape(1024, 16)  # row sums of exp: parallel over rows, weighed by elements alone
    values, flags = run_with(monkeypatch, 2, lambda a: build.reduce("reduce_sum", build.elementwise("exp", leaf(a)),
                                                                    (1,)), rows)
    assert flags == [0]
    np.testing.assert_allclose(values.reshape(-1), np.exp(rows.astype(np.float64)).sum(1), rtol=1e-6)


def test_a_team_of_one_runs_threaded_kernels_on_the_calling_thread(monkeypatch):
    """When the machine's load leaves one core (TEAM), a threaded kernel runs its `_omp`
    wrapper on the calling thread, from the native loop and from Python, without
    starting GOMP's team; the values are the same."""
    x, y, entry, leaves, scalars, device = _mixed_schedule(monkeypatch)
    monkeypatch.setattr(cpu_threads.TEAM, "now", lambda now: 1)
    workers = cpu_threads.WORKERS
    for spinning in (True, False):  # the native loop runs it; Python would have decided
        monkeypatch.setattr(jit, "gomp", lambda: pytest.fail("GOMP started"))
        workers.last_end = time.perf_counter() if spinning else -1e9
        before = workers.last_end
        outs = [o.numpy() for o in entry.run(leaves, scalars, device)]
        assert workers.last_end == before  # no team launch ended
        np.testing.assert_allclose(outs[0], np.exp(x.astype(np.float64)), rtol=2e-7)
        np.testing.assert_array_equal(outs[1], y + np.float32(1.0))
