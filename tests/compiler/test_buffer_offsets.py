"""compiler.buffer_offsets: constant index terms moved into buffer pointers, on small
hand-made kernels with known answers, and end to end: an unrolled recurrence whose
per-step kernels become one compiled kernel, against numpy, with and without bounds
checks."""
import numpy as np
import pytest

import needle as ndl
from needle import config, ops
from needle.codegen import kernel_ir as K
from needle.compiler.buffer_offsets import hoist_offsets, split_constant
from needle.compiler.schedule import plan
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes
from needle.runtime import counters


def kernel(body, bufs=("x", "y")):
    return K.Kernel("k", [K.Buf(b, "float32", "in" if b == "x" else "out") for b in bufs], 0, body)


def load(buf, index, valid=None):
    return K.Load(buf, index, "float32", valid)


I = K.Var("i")


def test_split_constant():
    assert split_constant(K.affine([(I, 3)], 7)) == (K.affine([(I, 3)]), 7)
    assert split_constant(K.Binary("add", K.Const(5), I, K.INDEX)) == (I, 5)
    assert split_constant(K.Const(9)) == (None, 9)
    assert split_constant(I) == (I, 0)


def test_smallest_constant_moves_into_the_pointer():
    # y[i + 10] = x[i + 1024] + x[i + 1030]  ->  y[i] = x[i] + x[i + 6], offsets (1024, 10)
    value = K.Binary("add", load("x", K.affine([(I, 1)], 1024)), load("x", K.affine([(I, 1)], 1030)), "float32")
    k = kernel([K.Loop("i", 16, [K.Store("y", K.affine([(I, 1)], 10), value)])])
    new, offsets = hoist_offsets(k)
    assert offsets == [1024, 10]
    store = new.body[0].body[0]
    assert store.index == I
    assert store.value.a.index == I and store.value.b.index == K.affine([(I, 1)], 6)
    assert new.name == k.name and new.bufs == k.bufs


def test_left_alone_masked_local_or_unshifted():
    masked = load("x", K.affine([(I, 1)], 100), valid=K.Binary("lt", I, K.Const(8), "bool"))
    k = kernel([K.LocalArray("acc", "float32", 4),
                K.Loop("i", 16, [K.Store("acc", K.affine([(I, 1)], 2), masked),          # local: not a buffer
                                 K.Store("y", I, load("x", K.affine([(I, 1)], 200)))])])  # y at +0
    new, offsets = hoist_offsets(k)
    assert offsets == [0, 0]  # x is masked once; y has an access without a constant
    assert new is k


def test_shared_subexpressions_stay_shared():
    x = load("x", K.affine([(I, 1)], 64))
    square = K.Binary("mul", x, x, "float32")
    k = kernel([K.Loop("i", 4, [K.Store("y", K.affine([(I, 1)], 3), K.Binary("add", square, square, "float32"))])])
    new, offsets = hoist_offsets(k)
    assert offsets == [64, 3]
    total = new.body[0].body[0].value
    assert total.a is total.b and total.a.a is total.a.b


@pytest.mark.parametrize("bounds_check", [False, True])
def test_an_unrolled_recurrence_compiles_its_step_kernel_once(bounds_check, monkeypatch):
    monkeypatch.setattr(config, "BOUNDS_CHECK", bounds_check)
    schedule_cache.clear()
    rng = np.random.default_rng(0)
    steps, n, d = 12, 16, 32
    xs, w, u = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((steps, n, d), (d, d), (d, d)))
    with ndl.lazy(True):
        X, W, U = (ndl.Tensor(a, requires_grad=False) for a in (xs, w, u))
        h = ndl.Tensor(np.zeros((n, d), np.float32), requires_grad=False)
        for t in range(steps):
            step = ops.reshape(X[t:t + 1], (n, d))  # a slice of the stack: its offset t * n * d
            h = ops.tanh(step @ W + h @ U)
        schedule, _ = plan(output_nodes([h]), cpu_target())
        texts = {}
        for call in schedule.calls:
            texts.setdefault(call.kernel.name, set()).add(call.kernel.code_text())
        shifted = [c for c in schedule.calls if any(c.offsets)]
        assert len(shifted) >= steps - 2  # the steps after the first read their slice through an offset
        # at most the first step (h a leaf), the last (h an output) and the rest
        assert all(len(t) <= 3 for t in texts.values()), {k: len(v) for k, v in texts.items()}
        before = counters.COUNTERS["kernels_compiled"]
        got = h.numpy()
        assert counters.COUNTERS["kernels_compiled"] - before < steps
    expected = np.zeros((n, d))
    for t in range(steps):
        expected = np.tanh(xs[t].astype(np.float64) @ w + expected @ u)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)  # float32 sums of 64 terms of ~0.3^2


def test_the_kernels_dump_shows_where_a_launch_moves_a_pointer():
    x = np.random.default_rng(1).standard_normal((4, 8, 16)).astype(np.float32)
    with ndl.lazy(True):
        X = ndl.Tensor(x, requires_grad=False)
        y = ops.exp(ops.reshape(X[2:3], (8, 16)))  # reads X from element 2 * 8 * 16 on
        text = ndl.ir.dump(y, stage="kernels")
        assert "(launched at in0 + 256 elements)" in text and "256" not in text.split("launched")[0]
        np.testing.assert_allclose(y.numpy(), np.exp(x[2].astype(np.float64)), rtol=2.0 ** -22)
