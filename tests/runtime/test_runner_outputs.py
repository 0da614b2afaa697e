"""The runner's output plan: each requested output gets an array of its own shape,
also when several requests are one computed result (or views of it)."""
import numpy as np
import pytest

import needle as ndl


def test_repeated_and_reshaped_outputs_of_one_result():
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((4, 6)).astype("float32"), rng.standard_normal((4, 6)).astype("float32")
    for _ in range(2):  # the second time runs the cached schedule
        with ndl.lazy(True):
            a, b = ndl.Tensor(a_np, requires_grad=False), ndl.Tensor(b_np, requires_grad=False)
            y = ops_exp(a + b)
            flat, again, t = y.reshape((24,)), y, y.transpose()
            ndl.realize(y, flat, again, t)
        expected = np.exp(a_np + b_np)
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(flat.numpy(), expected.reshape(24), rtol=1e-6)
        np.testing.assert_allclose(again.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(t.numpy(), expected.T, rtol=1e-6)
        assert flat.shape == (24,) and t.shape == (6, 4)


def test_empty_and_scalar_free_outputs():
    with ndl.lazy(True):
        a = ndl.Tensor(np.zeros((0, 3), "float32"), requires_grad=False)
        x = ndl.Tensor(np.arange(5, dtype="float32"), requires_grad=False)
        e, s, p = a + a, x * 2, x * 3.5  # no run-time scalar, then one
        ndl.realize(e, s, p)
    assert e.numpy().shape == (0, 3)
    np.testing.assert_allclose(s.numpy(), np.arange(5) * 2)
    np.testing.assert_allclose(p.numpy(), np.arange(5) * 3.5)


def ops_exp(x):
    return ndl.ops.exp(x)


@pytest.mark.parametrize("kept", [True, False])
def test_temps_are_one_block_of_aligned_disjoint_parts(monkeypatch, kept):
    """A schedule with several intermediate results takes one block from the pool per
    run, or, when its temps are small (runtime/cpu.py KEPT_TEMP_BYTES), on its first run
    only and keeps it with its tables; each temp starts on a 64-byte line and no two
    overlap; values match numpy."""
    from needle.engine import schedule_cache
    from needle.runtime import cpu, pool
    monkeypatch.setattr(cpu, "KEPT_TEMP_BYTES", 1 << 20 if kept else 0)
    schedule_cache.clear()
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((48, 40)).astype("float32")
    w_np = rng.standard_normal((40, 40)).astype("float32")

    def graph(x, w):  # two row reductions and matmuls between elementwise work: stored temps
        h = ndl.ops.relu(x @ w)
        e = ndl.ops.exp(h - ndl.ops.broadcast_to(h.max((1,), keepdims=True), h.shape))
        s = e / ndl.ops.broadcast_to(e.sum((1,), keepdims=True), e.shape)
        return (s @ w).sum((1,))

    h = np.maximum(x_np.astype(np.float64) @ w_np, 0)
    e = np.exp(h - h.max(1, keepdims=True))
    s = e / e.sum(1, keepdims=True)
    expected = (s @ w_np).sum(1)
    # float32 error bound, worst case, step by step (u = 2^-24): h's dot products of 40 terms,
    # h - max(h) twice that, exp one more ulp, the softmax's sum of 40 and division, then the
    # last matmul and sum (40 + 40 terms) of magnitudes sum_jk s_ik |w_kj|
    u = 2.0 ** -24
    h_err = 40 * u * (np.abs(x_np.astype(np.float64)) @ np.abs(w_np))
    e_rel = 2 * h_err.max(1) + 2 * u
    s_rel = 2 * e_rel + 41 * u
    bound = (s_rel + 80 * u) * (s @ np.abs(w_np)).sum(1)
    takes, general = [], []
    original = pool.POOL.acquire
    monkeypatch.setattr(pool.POOL, "acquire", lambda n: (takes.append(n), original(n))[1])
    from needle.runtime import runner as runner_module
    loop = runner_module.ScheduleRunner._launch_every
    monkeypatch.setattr(runner_module.ScheduleRunner, "_launch_every", lambda *a: (general.append(1), loop(*a))[1])
    for run in range(3):
        takes.clear()
        with ndl.lazy(True):
            out = graph(ndl.Tensor(x_np, requires_grad=False), ndl.Tensor(w_np, requires_grad=False))
            got = out.numpy()
        assert (np.abs(got - expected) <= bound).all()
        assert len(takes) == (1 if run == 0 or not kept else 0), takes
        assert not general  # (pooled temps too take the common run, not the general loop)
    runners = [e for e, _ in schedule_cache.CACHES["cpu"].entries.entries.values() if e.temp_slots]
    assert runners
    for runner in runners:  # each physical temp: its offset in the block and its planned size
        kinds, offsets = runner.schedule.slot_kinds, dict(runner.temp_slots)
        spans = sorted({(offsets[slot], offsets[slot] + runner.schedule.temp_bytes[kinds[slot][1]])
                        for slot in offsets})
        assert all(start % 64 == 0 for start, _ in spans)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
        assert spans[-1][1] <= runner.temp_total


def test_temps_follow_their_block_when_the_pool_hands_out_another(monkeypatch):
    """The CPU runner rebinds a schedule's temp slots only when its block moved
    (runtime/cpu.py bind_temps): with every block kept out of the pool, each run gets
    a new one; after each run the slots point into that run's block, and the values
    match numpy."""
    from needle.backend_ndarray import host_memory
    from needle.engine import schedule_cache
    from needle.runtime import cpu, pool
    monkeypatch.setattr(cpu, "KEPT_TEMP_BYTES", 0)  # (small temps stay with their tables)
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal((32, 24)).astype("float32")
    w_np = rng.standard_normal((24, 24)).astype("float32")
    held, bases = [], []
    original = pool.POOL.acquire
    monkeypatch.setattr(pool.POOL, "release", lambda block: held.append(block))  # never back to the pool

    def acquire(n):
        block = original(n)
        bases.append(host_memory.address_of(block))
        return block
    monkeypatch.setattr(pool.POOL, "acquire", acquire)
    schedule_cache.clear()
    h = np.maximum(x_np.astype(np.float64) @ w_np, 0)
    for run in range(3):
        x = ndl.Tensor(x_np * (run + 1), requires_grad=False)  # new data each run, one schedule
        with ndl.lazy(True):
            hh = ndl.ops.relu(x @ ndl.Tensor(w_np, requires_grad=False))
            y = (hh / ndl.ops.broadcast_to(hh.sum((1,), keepdims=True) + 1, hh.shape)) @ ndl.Tensor(w_np)
            got = y.numpy()
        want = ((h * (run + 1)) / (1 + (h * (run + 1)).sum(1, keepdims=True))) @ w_np
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # float32 sums of 24 terms
        (runner,) = [e for e, _ in schedule_cache.CACHES["cpu"].entries.entries.values() if e.temp_slots]
        np.testing.assert_array_equal(runner.tables.ptrs[runner.temp_slot_index], bases[-1] + runner.temp_offsets)
    assert len(held) == 3 and len(set(bases)) == 3  # three runs, three different blocks


def _address(t) -> int:
    from needle.runtime import cpu_tables
    return cpu_tables.address(t.realize_cached_data()._handle)


def _doubler(n: int):
    """A captured x * 2 over n floats, past its capture, and two inputs."""
    g = ndl.jit(lambda a: a * 2)
    ones = ndl.Tensor(np.ones(n, np.float32), requires_grad=False)
    threes = ndl.Tensor(np.full(n, 3, np.float32), requires_grad=False)
    for _ in range(3):
        g(ones).realize()
    return g, ones, threes


# 16 floats: a Buffer that owns its memory; 4096: a view of an aligned allocation
SIZES = [16, 4096]


@pytest.mark.parametrize("n", SIZES)
def test_an_output_nothing_holds_is_reused_by_the_next_run(n):
    g, ones, _ = _doubler(n)
    first = g(ones)
    address = _address(first)
    del first
    again = g(ones)
    assert _address(again) == address
    np.testing.assert_array_equal(again.numpy(), np.full(n, 2, np.float32))


@pytest.mark.parametrize("hold", ["tensor", "numpy", "numpy slice", "numpy copy of view"])
@pytest.mark.parametrize("n", SIZES)
def test_an_output_still_referred_to_is_never_overwritten(n, hold):
    """Whatever still reads the memory (the Tensor, .numpy()'s zero-copy view, a view of
    that view) keeps it from the next run; a copy does not."""
    g, ones, threes = _doubler(n)
    first = g(ones)
    address = _address(first)
    if hold == "tensor":
        kept = first
    elif hold == "numpy":
        kept = first.numpy()
    elif hold == "numpy slice":
        kept = first.numpy()[1:]
    else:
        kept = first.numpy().copy()
    del first
    second = g(threes)
    np.testing.assert_array_equal(second.numpy(), np.full(n, 6, np.float32))
    if hold == "numpy copy of view":
        assert _address(second) == address  # nothing refers to the buffer: reused
    else:
        assert _address(second) != address
        values = kept.numpy() if hold == "tensor" else kept
        np.testing.assert_array_equal(values, np.full(values.shape, 2, np.float32))


@pytest.mark.parametrize("n", SIZES)
def test_state_replaced_after_each_run_reuses_the_output_of_the_run_before(n, monkeypatch):
    """A step's new state (a parameter, a gradient) replaces the old only after the
    kernels ran, so the last run's output is still held when the next run starts: the
    output of the run before is reused, no fresh allocation after the first replays."""
    from needle.runtime import cpu
    state = {"w": ndl.Tensor(np.ones(n, np.float32), requires_grad=False)}

    @ndl.jit
    def step():
        state["w"] = state["w"] * 2

    for _ in range(4):
        step()
    fresh = []
    new_output = cpu.CompiledSchedule.new_output
    monkeypatch.setattr(cpu.CompiledSchedule, "new_output",
                        lambda self, size, dtype: fresh.append(size) or new_output(self, size, dtype))
    addresses = []
    for _ in range(4):
        step()
        addresses.append(_address(state["w"]))
    assert fresh == [] and step.replays == 6
    assert addresses[0] == addresses[2] != addresses[1] == addresses[3]  # two buffers, taking turns
    np.testing.assert_array_equal(state["w"].numpy(), np.full(n, 2.0 ** 8, np.float32))


def test_kept_outputs_are_bounded_and_freed_with_their_schedule(monkeypatch):
    import gc
    from needle.engine import schedule_cache
    from needle.runtime import cpu_outputs

    def drop_schedules():
        for cache in schedule_cache.CACHES.values():
            cache.entries.clear()
        gc.collect()
    drop_schedules()
    before = cpu_outputs.Spares.total
    monkeypatch.setattr(cpu_outputs, "SPARE_BYTES", before + 4096 * 4)
    small, ones, _ = _doubler(4096)
    assert cpu_outputs.Spares.total - before == 4096 * 4
    big, ones_big, _ = _doubler(8192)  # over the bound: runs with a fresh output each time
    assert cpu_outputs.Spares.total - before == 4096 * 4
    np.testing.assert_array_equal(big(ones_big).numpy(), np.full(8192, 2, np.float32))
    del small, big
    drop_schedules()
    assert cpu_outputs.Spares.total == before


def test_leaf_addresses_follow_new_arrays_between_runs():
    """A compiled schedule run again with other leaf arrays (new ones each time, the old
    ones freed, so that memory and ids are reused) reads the new arrays."""
    from needle.compiler.schedule import plan, structure
    from needle.engine import schedule_cache
    from needle.engine.schedule_cache import cpu_target
    from needle.ir.printer import output_nodes
    rng = np.random.default_rng(5)
    a_np, b_np = (rng.standard_normal((64,)).astype("float32") for _ in range(2))
    with ndl.lazy(True):
        a, b = ndl.Tensor(a_np, requires_grad=False), ndl.Tensor(b_np, requires_grad=False)
        nodes = output_nodes([a * 2 + b])
    signature = structure(nodes)
    schedule, _ = plan(nodes, cpu_target(), signature)
    compiled = schedule_cache.compile_schedule(schedule, cpu_target())
    leaves = list(signature.leaves)
    want = {id(a._cached_data): a_np, id(b._cached_data): b_np}
    x, y = (want[id(leaf)] for leaf in leaves)  # (the leaves in the schedule's order)
    for _ in range(2):  # the second run finds both leaves bound
        (out,) = compiled.run(leaves, signature.scalars, ndl.cpu())
        np.testing.assert_array_equal(out.numpy(), x * 2 + y)
    for step in range(3):  # new arrays for the first leaf, the old ones freed each time
        x = rng.standard_normal((64,)).astype("float32")
        leaves[0] = ndl.Tensor(x, requires_grad=False).realize_cached_data()
        (out,) = compiled.run(leaves, signature.scalars, ndl.cpu())
        np.testing.assert_array_equal(out.numpy(), x * 2 + y)
