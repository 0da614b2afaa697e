"""A fused op's forward in eager compiled mode is one schedule (engine.eager.fused),
and a repeated call runs the schedule found the first time without building the
graph: values against float64 numpy, the remembered path bit for bit against a
freshly built one, keys that keep apart what changes the graph or its scalars (eps,
layouts, aliasing), and the values the forward keeps (a batch norm's statistics)."""
import numpy as np
import pytest

import needle as ndl
from needle import autograd, ops
from needle.backend_ndarray.ndarray import NDArray
from needle.engine import eager, schedule_cache
from needle.ops.ops_fused import Fused
from needle.runtime.counters import COUNTERS

pytestmark = pytest.mark.skipif(autograd.BACKEND != "nd", reason="the compiled backend's eager mode")

F32 = np.finfo(np.float32).eps


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def tensor(array):
    return ndl.Tensor(array, requires_grad=False)


def standardized(x, axis, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps), mean, var


def built_graphs(monkeypatch) -> list:
    """The graphs realized from now on (a remembered call realizes none)."""
    graphs, original = [], schedule_cache.realize
    monkeypatch.setattr(schedule_cache, "realize", lambda nodes: (graphs.append(nodes), original(nodes))[1])
    return graphs


# (name, op on Tensors, numpy reference in float64, input shapes); each value a few
# float32 roundings of terms of size about 1
CASES = [
    ("matmul_bias", lambda x, w, b: ops.matmul_bias(x, w, b),
     lambda x, w, b: x @ w + b, [(7, 5), (5, 3), (3,)]),
    ("scale_shift", lambda x, w, b: ops.scale_shift(x, w, b),
     lambda x, w, b: x * w + b, [(6, 4), (4,), (4,)]),
    ("standardize", lambda x: ops.standardize(x, 0, 1e-5),
     lambda x: standardized(x, 0, 1e-5)[0], [(9, 4)]),
    ("lstm_cell", lambda g, c: ops.lstm_cell(g, c)[0] * 1.0 + ops.lstm_cell(g, c)[1],
     None, [(3, 8), (3, 2)]),
    ("logsumexp_less", lambda z, b: ops.logsumexp_less(z, b, (1,)),
     lambda z, b: np.log(np.exp(z).sum(1)) - b, [(5, 7), (5,)]),
    ("logsumexp_list_axes", lambda z: ops.logsumexp(z, [0]),  # (a list: keyed by its text)
     lambda z: np.log(np.exp(z).sum(0)), [(4, 3)]),
    ("logsoftmax", lambda z: ops.logsoftmax(z),
     lambda z: z - np.log(np.exp(z).sum(1, keepdims=True)), [(3, 6)]),
]


def lstm_reference(g, c0):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, gg, o = np.split(g, 4, axis=1)
    c = sig(f) * c0 + sig(i) * np.tanh(gg)
    return sig(o) * np.tanh(c) + c


@pytest.mark.parametrize("name,op,reference,shapes", CASES, ids=[c[0] for c in CASES])
def test_values_against_numpy_and_the_remembered_schedule_bit_for_bit(monkeypatch, name, op, reference, shapes):
    reference = reference or lstm_reference
    monkeypatch.setattr(eager, "_KNOWN", {})
    graphs = built_graphs(monkeypatch)
    with ndl.lazy(False):
        results = []
        for seed in (1, 2):  # the first call builds the graph, the second runs it again
            arrays = [data(*s, seed=seed * 10 + k) for k, s in enumerate(shapes)]
            got = op(*[tensor(a) for a in arrays]).numpy()
            want = reference(*[a.astype(np.float64) for a in arrays])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            results.append((arrays, got))
        built = len(graphs)
        monkeypatch.setattr(eager, "_KNOWN", {})  # now the second inputs through a graph built anew
        arrays, remembered = results[1]
        fresh = op(*[tensor(a) for a in arrays]).numpy()
    assert len(graphs) > built
    np.testing.assert_array_equal(remembered, fresh)


def test_one_schedule_per_call_and_no_graph_the_second_time(monkeypatch):
    monkeypatch.setattr(eager, "_KNOWN", {})
    graphs = built_graphs(monkeypatch)
    x = tensor(data(16, 8))
    with ndl.lazy(False):
        ops.standardize(x, 0, 1e-5)
        assert len(graphs) == 1 and len(graphs[0]) == 3  # the result, the mean, the variance
        before = COUNTERS["schedules"]
        ops.standardize(x, 0, 1e-5)
        assert COUNTERS["schedules"] - before == 1 and len(graphs) == 1


def test_eps_and_axis_are_part_of_the_key():
    """Two eps on one shape share a compiled schedule but not a scalar: each call gets
    its own eps, in either order, and another axis another graph."""
    xv = data(5, 6, seed=3) * 1e-2  # a variance near eps: eps shows in the result
    x = tensor(xv)
    with ndl.lazy(False):
        for eps in (1e-5, 1e-3, 1e-5, 1e-3):
            for axis in (0, 1):
                got = ops.standardize(x, axis, eps).numpy()
                np.testing.assert_allclose(got, standardized(xv, axis, eps)[0], rtol=1e-4, atol=1e-5)


def test_layouts_and_aliasing_are_part_of_the_key():
    """A transposed view, an offset view and one array passed for two operands each
    read what they are."""
    wv, xv = data(4, 4, seed=4), data(4, 4, seed=5)
    w, x = tensor(wv), tensor(xv)
    with ndl.lazy(False):
        for _ in range(2):
            cases = [
                (ops.scale_shift(x, w[0, :].reshape((4,)), w[1, :].reshape((4,))), xv * wv[0] + wv[1]),
                (ops.scale_shift(x, w[1, :].reshape((4,)), w[1, :].reshape((4,))), xv * wv[1] + wv[1]),
                (ops.scale_shift(x.transpose(), w[2, :].reshape((4,)), w[0, :].reshape((4,))),
                 xv.T * wv[2] + wv[0]),
                (ops.matmul_bias(x.transpose(), w, w[3, :].reshape((4,))), xv.T.astype(np.float64) @ wv + wv[3]),
                (ops.matmul_bias(x, x, x[0, :].reshape((4,))), xv.astype(np.float64) @ xv + xv[0]),
            ]
            for got, want in cases:
                np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_batch_norm_keeps_its_statistics_as_arrays():
    """The values the forward keeps come back as NDArrays of the schedule: the running
    statistics after a few steps equal numpy's."""
    from needle import nn
    xs = [data(10, 3, seed=s) * (s + 1) + s for s in range(3)]
    with ndl.lazy(False):
        bn = nn.BatchNorm1d(3, momentum=0.5)
        for xv in xs:
            bn(tensor(xv))
    mean, var = np.zeros(3), np.ones(3)
    for xv in xs:
        x = xv.astype(np.float64)
        mean = 0.5 * mean + 0.5 * x.mean(0)
        var = 0.5 * var + 0.5 * x.var(0)  # (the course's running variance: biased)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5, atol=1e-6)
    with ndl.lazy(False):
        std = ops.Standardize(0, 1e-5)
        std(tensor(xs[1]))
        std(tensor(xs[2]))  # (remembered: the kept values still this call's)
    assert all(isinstance(v, NDArray) for v in std.saved)
    _, want_mean, want_var = standardized(xs[2], 0, 1e-5)
    np.testing.assert_allclose(std.mean.numpy(), want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(std.var.numpy(), want_var, rtol=1e-5, atol=1e-5)


class Doubled(Fused):
    """A user's fused op that names no `static` attributes: op by op in eager mode."""

    def __init__(self, k):
        self.k = k

    def forward(self, x):
        return x * self.k + x

    def vjp(self, k, g, x):
        return g * (self.k + 1)

    def reference(self, x):
        return x * self.k + x


def test_a_fused_op_without_static_attributes_runs_op_by_op():
    x = tensor(data(3, 3, seed=6))
    with ndl.lazy(False):
        before = COUNTERS["schedules"]
        for k in (2.5, 3.5):
            np.testing.assert_allclose(Doubled(k)(x).numpy(), x.numpy() * (k + 1), rtol=1e-6)
        assert COUNTERS["schedules"] - before == 4  # a product and a sum each time


class Scaled(Fused):
    """x * k with k a static attribute: 0.0 and -0.0 are equal numbers but other programs."""

    static = ("k",)

    def __init__(self, k):
        self.k = k

    def forward(self, x):
        return x * self.k

    def vjp(self, k, g, x):
        return g * self.k

    def reference(self, x):
        return x * self.k


def test_a_signed_zero_attribute_is_its_own_key():
    x = tensor(np.array([1.0, 2.0], dtype=np.float32))
    with ndl.lazy(False):
        for k in (0.0, -0.0, 0.0, -0.0):
            got = Scaled(k)(x).numpy()
            assert np.array_equal(np.signbit(got), np.signbit(np.float32(k) * x.numpy())), (k, got)


class Passing(Fused):
    """A forward that keeps one of its operands and returns a view of it."""

    static = ()

    def forward(self, x, y):
        self.saved = (x, y * 2.0)
        return x.reshape(x.shape)

    def vjp(self, k, g, x, y):
        return g if k == 0 else g * 0

    def reference(self, x, y):
        return x


def test_a_forward_may_return_and_keep_its_operands():
    xv, yv = data(2, 3, seed=7), data(2, 3, seed=8)
    with ndl.lazy(False):
        for _ in range(3):
            op = Passing()
            out = op(tensor(xv), tensor(yv))
            np.testing.assert_array_equal(out.numpy(), xv)
            np.testing.assert_array_equal(op.saved[0].numpy(), xv)
            np.testing.assert_array_equal(op.saved[1].numpy(), yv * 2)


class ScaledStandardize(ops.Standardize):
    """A user's subclass of a fused op with an attribute of its own: its parent's
    `static` does not name it, so it runs op by op (a review found the second instance
    running the first one's schedule)."""

    def __init__(self, axis, eps, scale):
        super().__init__(axis, eps)
        self.scale = scale

    def forward(self, x):
        return super().forward(x) * self.scale


class Tempered(ops.ops_logarithmic.LogSumExp):
    """logsumexp(z / T): a subclass of a logsumexp op, keyed as its parent would be."""

    def __init__(self, axes, T):
        super().__init__(axes)
        self.T = T

    def _forward(self, z):
        return super()._forward(z * (1.0 / self.T))


def test_subclasses_of_fused_ops_with_attributes_of_their_own():
    xv = data(4, 3, seed=9)
    x = tensor(xv)
    with ndl.lazy(False):
        for scale in (3.0, 10.0, 3.0):
            got = ScaledStandardize(0, 1e-5, scale)(x).numpy()
            np.testing.assert_allclose(got, standardized(xv, 0, 1e-5)[0] * scale, rtol=1e-5, atol=1e-5)
        for T in (1.0, 4.0, 0.5):
            op = ops.ops_logarithmic.LogSumExp((1,)) if T == 1.0 else Tempered((1,), T)
            want = np.log(np.exp(xv.astype(np.float64) / T).sum(1))
            np.testing.assert_allclose(op(x).numpy(), want, rtol=1e-5, atol=1e-6)
