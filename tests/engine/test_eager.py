"""Eager primitives (engine/eager.py): one op, one compiled kernel, built with the
same scalar policy as lazy graphs (ir.build.scalar)."""
import numpy as np
import pytest

import needle as ndl
from needle.engine import eager, schedule_cache
from needle import backend_ndarray as nd
from needle.ir import build


def scalar_kinds(monkeypatch, mode, make):
    """The const/param leaves of the graph(s) computing `make()` in `mode`."""
    kinds, original = [], schedule_cache.realize

    def realize(nodes):  # read the graph before it is computed (computed nodes drop their sources)
        stack = list(nodes)
        while stack:
            n = stack.pop()
            if n.op in ("const", "param"):
                kinds.append((n.op, float(getattr(n.arg, "value", n.arg))))
            stack.extend(n.srcs)
        original(nodes)

    monkeypatch.setattr(schedule_cache, "realize", realize)
    monkeypatch.setattr(eager, "_KNOWN", {})  # build the graph, not the shortcut of a repeated op
    ndl.engine.forget_later()  # state other tests left for "the next schedule" is not ours
    with ndl.lazy(mode == "lazy"):
        make().numpy()
    return kinds


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("value,kind", [(2, "const"), (-1, "const"), (0.5, "const"), (3.7, "param")])
def test_eager_and_lazy_bake_the_same_scalars(monkeypatch, mode, value, kind):
    x = ndl.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=False)
    assert scalar_kinds(monkeypatch, mode, lambda: x * value) == [(kind, np.float32(value))]


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_a_power_exponent_is_part_of_the_program(monkeypatch, mode):
    x = ndl.Tensor(np.arange(1, 13, dtype=np.float32).reshape(3, 4), requires_grad=False)
    assert scalar_kinds(monkeypatch, mode, lambda: x ** 3.0) == [("const", 3.0)]


def test_the_scalar_policy():
    cpu = ndl.cpu()
    for value, kind in [(2, "const"), (0.5, "const"), (-1, "const"), (3.7, "param"), (10, "param")]:
        assert build.scalar(value, (3,), "float32", cpu).op == kind, value
    assert build.scalar(3.7, (3,), "float32", cpu, exponent=True).op == "const"


def test_a_repeated_eager_op_runs_its_compiled_schedule_directly(monkeypatch):
    """The second time, no graph is built (realize is not called), and the result is
    still right for new values of a run-time scalar, aliased operands, other
    offsets, and another layout (which is another schedule)."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((6, 8)).astype(np.float32)
    a, b = nd.array(base, device=ndl.cpu()), nd.array(base[::-1].copy(), device=ndl.cpu())
    graphs = []
    original = schedule_cache.realize
    monkeypatch.setattr(schedule_cache, "realize", lambda nodes: (graphs.append(nodes), original(nodes))[1])
    for k, s in enumerate([1.75, -3.25, 1.75]):
        np.testing.assert_array_equal((a * s).numpy(), base * np.float32(s))
        np.testing.assert_array_equal((a + b).numpy(), base + base[::-1])
        np.testing.assert_array_equal((a + a).numpy(), base + base)
        for rows in (slice(1, 3), slice(2, 4)):  # one layout, another offset
            want = base[rows].astype(np.float64).sum(axis=1)
            bound = 8 * np.finfo(np.float32).eps * np.abs(base[rows]).sum(axis=1)  # 8 float32 additions
            assert np.all(np.abs(a[rows].sum(axis=(1,)).numpy() - want) <= bound)
        if k == 0:
            built = len(graphs)
    assert len(graphs) == built  # later rounds built no graph
    t = a.permute((1, 0))
    np.testing.assert_array_equal((t * 1.75).numpy(), base.T * np.float32(1.75))
    assert len(graphs) == built + 1  # a new layout is a new graph


def test_a_repeated_eager_op_follows_the_schedule_cache_letting_its_schedule_go(monkeypatch):
    """A repeated op remembers the schedule it found (weakly) and skips the lookup only
    while the cache has let nothing go since: with room for one schedule, two ops in
    turn evict each other and each must be planned again, with the right values, and
    a remembered schedule the cache let go is not kept alive."""
    import gc
    from needle import config
    rng = np.random.default_rng(7)
    base = rng.standard_normal((5, 7)).astype(np.float32)
    a = nd.array(base, device=ndl.cpu())
    cache = schedule_cache.CACHES["cpu"]
    cache.clear()
    monkeypatch.setattr(config, "SCHEDULE_CACHE_SIZE", 1)
    graphs = []
    original = schedule_cache.realize
    monkeypatch.setattr(schedule_cache, "realize", lambda nodes: (graphs.append(nodes), original(nodes))[1])
    for _ in range(3):
        np.testing.assert_array_equal((a + a).numpy(), base + base)
        np.testing.assert_array_equal((a * a).numpy(), base * base)
    assert len(graphs) == 6  # each op evicted the other's schedule: planned again every time
    monkeypatch.setattr(config, "SCHEDULE_CACHE_SIZE", 64)
    (a - a).numpy()
    (a - a).numpy()
    assert len(graphs) == 7  # with room, the second is a remembered schedule
    layout = (a._shape, a._strides, a._dtype)
    known = eager._KNOWN[(("binary", "sub"), (layout, layout), (True, True, True, True), cache.target())]
    assert known[3]() is not None
    cache.clear()
    gc.collect()
    assert known[3]() is None  # the memo does not hold what the cache let go
    np.testing.assert_array_equal((a - a).numpy(), base - base)
    assert len(graphs) == 8


def test_an_operand_s_remembered_address_is_its_view_s_first_element():
    """Kernels read a leaf at the address remembered on the NDArray (set at its first
    launch): views of one storage at other offsets, and an array made from another
    (`_init_from`), each read their own elements."""
    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    a = nd.array(base, device=ndl.cpu())
    for rows in (slice(0, 2), slice(2, 4), slice(4, 6), slice(1, 3)):
        np.testing.assert_array_equal((a[rows] + 1.0).numpy(), base[rows] + 1)
        np.testing.assert_array_equal((a[rows] + 1.0).numpy(), base[rows] + 1)  # (remembered now)
    copy = nd.NDArray(a[2:4])
    np.testing.assert_array_equal((copy * 2.0).numpy(), base[2:4] * 2)
    import copy as copying
    import pickle
    np.testing.assert_array_equal((a + 1.0).numpy(), base + 1)  # (a's address remembered)
    copies = [copying.deepcopy(a), pickle.loads(pickle.dumps(a))]  # (other storage: no address of a's)
    a[:, :] = nd.array(np.zeros((6, 8), dtype=np.float32), device=ndl.cpu())
    for c in copies:
        np.testing.assert_array_equal((c + 1.0).numpy(), base + 1)


def test_an_eager_op_first_planned_inside_a_profile_runs_directly_afterwards(monkeypatch):
    # (a plan made while a profile stamps source lines also serves unstamped graphs; the
    # shortcut had looked for an unstamped plan only, and built a graph for every op after)
    base = np.random.default_rng(6).standard_normal((16, 16)).astype(np.float32)
    a = nd.array(base, device=ndl.cpu())
    with ndl.profile():
        (a * 3.0 + a).exp()
    (a * 3.0 + a).exp()
    graphs = []
    original = schedule_cache.realize
    monkeypatch.setattr(schedule_cache, "realize", lambda nodes: (graphs.append(nodes), original(nodes))[1])
    got = (a * 3.0 + a).exp().numpy()
    assert not graphs
    np.testing.assert_allclose(got, np.exp(base * np.float32(3.0) + base), rtol=4 * np.finfo(np.float32).eps)
