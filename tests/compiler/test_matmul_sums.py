"""Pass 0, sums of matmuls: A1 @ B1 + A2 @ B2 + ... whose inner sizes are short
(K (M + N) < M N) becomes one matmul of the operands laid side by side; terms that
do not qualify, that something else reads, or batched matmuls are left alone.
Structure on small graphs with a known answer; values against float64 numpy within
the dot product's error bound (n u times the sum of the terms' magnitudes)."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler.matmul_sums import merge_matmul_sums
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.nodes import toposort
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
U = 2.0 ** -24


def tensor(rng, *shape):
    return ndl.Tensor(rng.standard_normal(shape).astype(np.float32), device=CPU, requires_grad=False)


def ops_of(*tensors) -> list:
    """The rewritten graph's ops, sources first."""
    return [n.op for n in toposort(merge_matmul_sums(output_nodes(list(tensors))))]


def within_dot_bound(got, terms):
    """|got - sum| <= K u sum |a| |b| over every term's products, K all their lengths."""
    k = sum(a.shape[1] for a, _ in terms)
    want = sum(a.astype(np.float64) @ b.astype(np.float64) for a, b in terms)
    bound = (k + len(terms)) * U * sum(np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) for a, b in terms)
    assert np.all(np.abs(got - want) <= bound + 1e-30)


def test_a_recurrent_weight_gradient_becomes_one_matmul():
    """sum over 12 steps of h_t^T @ d_t (64x16 by 16x256, as an LSTM's): one matmul of
    K = 192 over two assembles, three kernels instead of twelve matmuls."""
    rng = np.random.default_rng(0)
    hs, ds = [tensor(rng, 16, 64) for _ in range(12)], [tensor(rng, 16, 256) for _ in range(12)]
    total = None
    for h, d in zip(hs, ds):
        term = ops.transpose(h) @ d
        total = term if total is None else total + term
    graph = ops_of(total)
    assert graph.count("matmul") == 1 and graph.count("assemble") == 2 and "add" not in graph
    names = [c.kernel.name for c in plan(output_nodes([total]), cpu_target())[0].calls]
    assert [n for n in names if n.startswith("M_")] == ["M_64_256_192"], names
    within_dot_bound(total.numpy(), [(h.numpy().T, d.numpy()) for h, d in zip(hs, ds)])


def test_other_terms_are_added_back_and_long_inner_sizes_stay():
    """(a1 @ b1) + c + (a2 @ b2) + (p @ q): the two short-K matmuls merge, c is added back,
    p @ q (K = 64 with M = N = 8: its operands cost more to copy than its product) stays
    a matmul of its own."""
    rng = np.random.default_rng(1)
    a1, b1, a2, b2 = tensor(rng, 8, 2), tensor(rng, 2, 8), tensor(rng, 8, 3), tensor(rng, 3, 8)
    c, p, q = tensor(rng, 8, 8), tensor(rng, 8, 64), tensor(rng, 64, 8)
    total = a1 @ b1 + c + a2 @ b2 + p @ q
    graph = ops_of(total)
    assert graph.count("matmul") == 2 and graph.count("assemble") == 2 and graph.count("add") == 2
    merged = [n for n in toposort(merge_matmul_sums(output_nodes([total]))) if n.op == "matmul"]
    assert sorted(n.srcs[0].shape for n in merged) == [(8, 5), (8, 64)]
    got = total.numpy()
    want = (a1.numpy().astype(np.float64) @ b1.numpy() + c.numpy() + a2.numpy().astype(np.float64) @ b2.numpy()
            + p.numpy().astype(np.float64) @ q.numpy())
    scale = np.abs(p.numpy()).astype(np.float64) @ np.abs(q.numpy()) + 10 * np.abs(want) + 10
    assert np.all(np.abs(got - want) <= 80 * U * scale)


def test_terms_read_elsewhere_and_batched_matmuls_are_left_alone():
    """A matmul that is also an output, or read by another op, keeps its product; a
    batched (3-D) matmul is not merged; a single qualifying matmul has nothing to merge."""
    rng = np.random.default_rng(2)
    a1, b1, a2, b2 = tensor(rng, 8, 2), tensor(rng, 2, 8), tensor(rng, 8, 2), tensor(rng, 2, 8)
    m1 = a1 @ b1
    assert ops_of(m1 + a2 @ b2, m1).count("matmul") == 2  # m1 requested too
    assert ops_of(m1 + a2 @ b2, ops.exp(m1)).count("matmul") == 2  # m1 read by exp
    x1, y1, x2, y2 = tensor(rng, 3, 8, 2), tensor(rng, 3, 2, 8), tensor(rng, 3, 8, 2), tensor(rng, 3, 2, 8)
    assert ops_of(x1 @ y1 + x2 @ y2).count("matmul") == 2
    assert ops_of(m1 + tensor(rng, 8, 8)).count("assemble") == 0
    e1, f1, e2, f2 = tensor(rng, 8, 0), tensor(rng, 0, 8), tensor(rng, 8, 0), tensor(rng, 0, 8)
    empty = e1 @ f1 + e2 @ f2  # K = 0: zeros, nothing to lay side by side
    assert ops_of(empty).count("assemble") == 0
    np.testing.assert_array_equal(empty.numpy(), np.zeros((8, 8), np.float32))


def test_a_partial_sum_that_is_requested_stays_a_boundary():
    """s = m1 + m2 is an output and also a term of s + m3 + m4: m1 + m2 merge into one
    matmul, m3 + m4 into another, and the values are both sums."""
    rng = np.random.default_rng(3)
    pairs = [(tensor(rng, 8, 2), tensor(rng, 2, 8)) for _ in range(4)]
    m = [a @ b for a, b in pairs]
    s = m[0] + m[1]
    t = s + m[2] + m[3]
    graph = ops_of(s, t)
    assert graph.count("matmul") == 2 and graph.count("assemble") == 4
    got_s, got_t = (x.numpy() for x in ndl.realize(s, t))
    arrays = [(a.numpy(), b.numpy()) for a, b in pairs]
    within_dot_bound(got_s, arrays[:2])
    # t = s + (m3 + m4): two roundings more than one dot product of all four
    want = sum(a.astype(np.float64) @ b for a, b in arrays)
    scale = sum(np.abs(a.astype(np.float64)) @ np.abs(b) for a, b in arrays)
    assert np.all(np.abs(got_t - want) <= 12 * U * scale)


@pytest.mark.parametrize("device, lazy", [(ndl.cpu_numpy(), False), (CPU, False), (CPU, True)],
                         ids=["eager-numpy", "eager-compiled", "lazy"])
@pytest.mark.parametrize("steps", [3, 7])
def test_weight_gradient_of_a_shared_weight_in_every_mode(device, lazy, steps):
    """W used at every step of a recurrence, y = sum_t tanh(x_t @ W): its gradient (a
    sum of short matmuls, merged in lazy mode) against float64 numpy, in eager numpy,
    eager compiled and lazy modes."""
    rng = np.random.default_rng(steps)
    xs = [rng.standard_normal((4, 24)).astype(np.float32) for _ in range(steps)]
    w0 = (rng.standard_normal((24, 40)) * 0.2).astype(np.float32)
    with ndl.lazy(lazy):
        w = ndl.Tensor(w0, device=device, requires_grad=True)
        loss = None
        for x in xs:
            term = ops.tanh(ndl.Tensor(x, device=device, requires_grad=False) @ w).sum()
            loss = term if loss is None else loss + term
        loss.backward()
    want = sum(x.astype(np.float64).T @ (1 - np.tanh(x.astype(np.float64) @ w0) ** 2) for x in xs)
    scale = sum(np.abs(x.astype(np.float64)).T @ np.ones((4, 40)) for x in xs)
    assert np.all(np.abs(w.grad.numpy() - want) <= (4 * steps + 8) * 4 * U * scale)
