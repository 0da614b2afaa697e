"""Pass 2, fusion: known kernel counts for small graphs, and a reason for every
stored node.

Kernels are counted twice: statically (`plan(...)[0].calls`) and at run time
(`needle.runtime.stats()["kernels_launched"]` around the realization).  Values
are checked against numpy.
"""
import numpy as np
import pytest

import needle as ndl
import needle.runtime as rt
from needle import nn, ops
from needle.compiler.schedule import plan, structure
from needle.compiler.views import View
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

CPU = ndl.cpu()


def tensor(*shape, scale=1.0):
    return ndl.Tensor((np.random.randn(*shape) * scale).astype(np.float32), device=CPU)


def planned(*tensors):
    schedule, fused = plan(output_nodes(tensors), cpu_target())
    return schedule, fused


def launched(*tensors) -> int:
    """Kernels launched to realize `tensors` (one schedule)."""
    rt.reset_stats()
    ndl.realize(*tensors)
    return rt.stats()["kernels_launched"]


def check_reasons(fused) -> None:
    """Every stored node (every kernel boundary) says why it is stored."""
    for node_id in fused.stored:
        why = fused.reasons.get(node_id)
        assert isinstance(why, str) and why.strip(), f"stored node without a reason: {node_id}"
    for g in fused.groups:
        assert id(g.root) in fused.stored


def test_elementwise_chain_is_one_kernel():
    a, b, c = tensor(17, 33), tensor(17, 33), tensor(17, 33)
    out = ops.relu(a * b + c) * 2
    schedule, fused = planned(out)
    assert len(schedule.calls) == 1 and len(fused.groups) == 1
    check_reasons(fused)
    a64, b64, c64 = (t.numpy().astype(np.float64) for t in (a, b, c))
    expected = np.maximum(a64 * b64 + c64, 0) * 2
    assert launched(out) == 1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)  # a * b + c may be one fma


def test_broadcast_and_transposed_operands_stay_one_kernel():
    a, b, c = tensor(6, 9), tensor(9, 6), tensor(9)
    out = ops.exp(a) * ops.transpose(b) + ops.broadcast_to(c, (6, 9))
    schedule, fused = planned(out)
    assert len(schedule.calls) == 1
    expected = np.exp(a.numpy()) * b.numpy().T + c.numpy()
    assert launched(out) == 1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)


def softmax(x):
    m = ops.broadcast_to(ops.max(x, axes=(1,), keepdims=True), x.shape)
    e = ops.exp(x - m)
    return e / ops.broadcast_to(ops.summation(e, axes=(1,), keepdims=True), x.shape)


def test_row_softmax_at_most_two_kernels():
    x = tensor(64, 100, scale=3.0)
    out = softmax(x)
    schedule, fused = planned(out)
    assert len(schedule.calls) <= 2
    assert len(schedule.calls) == 1  # today: both reductions are stages of one kernel
    (group,) = fused.groups
    assert [s.op for s in group.stages] == ["reduce_max", "reduce_sum"]
    check_reasons(fused)
    xs = x.numpy()
    e = np.exp(xs - xs.max(1, keepdims=True))
    assert launched(out) == 1
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_logsumexp_is_one_kernel():
    x = tensor(32, 50, scale=4.0)
    out = ops.logsumexp(x, axes=(1,))
    schedule, fused = planned(out)
    assert len(schedule.calls) == 1
    check_reasons(fused)
    xs = x.numpy().astype(np.float64)
    m = xs.max(1)
    assert launched(out) == 1
    np.testing.assert_allclose(out.numpy(), np.log(np.exp(xs - m[:, None]).sum(1)) + m, rtol=1e-5)


def test_layernorm_last_axis_kernel_count():
    x = tensor(64, 100)
    ln = nn.LayerNorm1d(100, device=CPU)
    out = ln(x)
    schedule, fused = planned(out)
    # mean and variance become stages of the normalizing kernel: 1 kernel today
    assert len(schedule.calls) == 1
    assert len(fused.groups[0].stages) == 2
    check_reasons(fused)
    xs = x.numpy().astype(np.float64)
    expected = (xs - xs.mean(1, keepdims=True)) / np.sqrt(xs.var(1, keepdims=True) + 1e-5)
    assert launched(out) == 1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("m,k,n,calls", [(16, 20, 12, 1), (48, 256, 96, 1), (640, 512, 96, 1)],
                         ids=["small", "tiled", "tiled-packed"])
def test_matmul_bias_relu_is_one_group(m, k, n, calls):
    x, w, b = tensor(m, k), tensor(k, n), tensor(n)
    out = ops.relu(x @ w + ops.broadcast_to(ops.reshape(b, (1, n)), (m, n)))
    schedule, fused = planned(out)
    assert len(fused.groups) == 1
    (group,) = fused.groups
    assert group.kind == "matmul" and group.root.op == "max"
    # tiled: the macro-kernel with the epilogue; it packs A itself when A is too large to read in place
    assert len(schedule.calls) == calls
    check_reasons(fused)
    expected = np.maximum(x.numpy().astype(np.float64) @ w.numpy() + b.numpy(), 0)
    assert launched(out) == calls
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_matmul_read_twice_is_not_an_epilogue():
    x, w = tensor(16, 20), tensor(20, 12)
    y = x @ w
    out = ops.exp(y) + ops.transpose(ops.transpose(y)) * 2.0
    schedule, fused = planned(out)
    check_reasons(fused)
    expected = np.exp(x.numpy() @ w.numpy()) + 2 * (x.numpy() @ w.numpy())
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_an_epilogue_read_by_two_kernels_is_stored_by_the_matmul():
    """A ReLU layer's backward: dh = (dz @ w2.T) * (h > 0) is read by the weight's
    gradient (a matmul) and the bias's (a sum).  The matmul kernel stores dh as its
    epilogue; the two readers read dh (the weight gradient's B in place: no packing
    kernel recomputing the mask); values against numpy."""
    x, h, dz, w2 = tensor(128, 96), tensor(128, 256), tensor(128, 10), tensor(256, 10)
    dh = (dz @ ops.transpose(w2)) * (h > 0.0)
    dw, db = ops.transpose(x) @ dh, dh.sum((0,))
    schedule, fused = planned(dw, db)
    check_reasons(fused)
    epilogue = next(g for g in fused.groups if g.kind == "matmul" and g.matmul.shape == (128, 256))
    assert epilogue.root.op == "mul"  # the matmul's kernel stores dh itself
    assert not any(c.kernel.name.startswith("PB_128_256") for c in schedule.calls)
    x64, h64, dz64, w64 = (t.numpy().astype(np.float64) for t in (x, h, dz, w2))
    dh64 = (dz64 @ w64.T) * (h64 > 0)
    got_w, got_b = (t.numpy() for t in ndl.realize(dw, db))
    # float32 dot products: K terms are off by at most (K + 2) eps sum|a||b|; dh's own error
    # (K = 10) carries into both gradients
    eps = np.finfo(np.float32).eps
    err_dh = 12 * eps * (np.abs(dz64) @ np.abs(w64).T) * (h64 > 0)
    err_w = 130 * eps * (np.abs(x64).T @ np.abs(dh64)) + np.abs(x64).T @ err_dh
    err_b = 130 * eps * np.abs(dh64).sum(0) + err_dh.sum(0)
    assert np.all(np.abs(got_w - x64.T @ dh64) <= err_w)
    assert np.all(np.abs(got_b - dh64.sum(0)) <= err_b)


def test_mlp_forward_at_most_one_group_per_matmul_plus_a_few():
    np.random.seed(1)
    model = nn.Sequential(nn.Linear(784, 256, device=CPU), nn.ReLU(), nn.Linear(256, 10, device=CPU))
    x = tensor(128, 784)
    out = model(x)
    schedule, fused = planned(out)
    matmuls = [g for g in fused.groups if g.kind == "matmul"]
    assert len(matmuls) == 2
    assert len(fused.groups) <= 2 + 2
    assert len(fused.groups) == 2  # today: bias and relu are matmul epilogues
    assert len(schedule.calls) <= 3 * 2 + 2
    check_reasons(fused)
    w1, b1 = model.modules[0].weight.numpy(), model.modules[0].bias.numpy()
    w2, b2 = model.modules[2].weight.numpy(), model.modules[2].bias.numpy()
    h = np.maximum(x.numpy().astype(np.float64) @ w1 + b1, 0)
    expected = h @ w2 + b2
    assert launched(out) == len(schedule.calls)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-3, atol=1e-3)


def test_mlp_loss_adds_few_kernels():
    np.random.seed(2)
    model = nn.Sequential(nn.Linear(784, 256, device=CPU), nn.ReLU(), nn.Linear(256, 10, device=CPU))
    x = tensor(128, 784)
    y = ndl.Tensor(np.random.randint(0, 10, 128), device=CPU)
    loss = nn.SoftmaxLoss()(model(x), y)
    schedule, fused = planned(loss)
    assert len([g for g in fused.groups if g.kind == "matmul"]) == 2
    assert len(fused.groups) <= 2 + 3
    check_reasons(fused)


def test_shared_cheap_node_is_recomputed():
    x = tensor(16, 20)
    y = x * 2.0 + 1.0
    out = (y + 1.0) * (y * 3.0)
    schedule, fused = planned(out)
    assert len(schedule.calls) == 1
    check_reasons(fused)
    xs = x.numpy()
    np.testing.assert_allclose(out.numpy(), (2 * xs + 2) * ((2 * xs + 1) * 3), rtol=1e-5)


def test_shared_costly_node_is_stored_with_a_reason():
    """Read by two kernels (two outputs): stored once, not computed twice.  The first
    reader's kernel computes and stores it (several outputs), the second reads it."""
    x = tensor(16, 20, scale=0.3)
    y = ops.exp(ops.exp(ops.exp(x)))
    out1, out2 = y + 1.0, y * 3.0
    schedule, fused = planned(out1, out2)
    assert len(schedule.calls) == 2
    check_reasons(fused)
    stored = [n for n in fused.order if id(n) in fused.stored and n.op == "exp"]
    assert len(stored) == 1
    why = fused.reasons[id(stored[0])]
    assert "read by 2" in why and "costly" in why
    assert why in ndl.ir.dump(out1, out2, stage="fused")
    ys = np.exp(np.exp(np.exp(x.numpy().astype(np.float64))))
    np.testing.assert_allclose(out1.numpy(), ys + 1, rtol=1e-5)
    np.testing.assert_allclose(out2.numpy(), ys * 3, rtol=1e-5)


def test_an_activation_of_summed_inputs_read_by_two_kernels_is_stored():
    """An LSTM gate's sigmoid (or an RNN cell's tanh) of its summed pre-activations,
    (a + b) + (c + d), read by two kernels (here two reductions over different axes):
    a transcendental and three ops cost more than recomputing in each reader
    (cost.EXPENSIVE_COST), so it is stored once with its reason; a transcendental of a
    buffer and one op stays cheap and is recomputed."""
    a, b, c, d = (tensor(8, 16, scale=0.5) for _ in range(4))
    h = ops.tanh((a + b) + (c + d))
    rows, cols = h.sum((1,)), h.sum((0,))
    schedule, fused = planned(rows, cols)
    check_reasons(fused)
    (act,) = [n for n in fused.order if n.op == "tanh"]
    assert id(act) in fused.stored and "costly" in fused.reasons[id(act)]
    hs = np.tanh(sum(t.numpy().astype(np.float64) for t in (a, b, c, d)))
    got_rows, got_cols = (t.numpy() for t in ndl.realize(rows, cols))
    np.testing.assert_allclose(got_rows, hs.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_cols, hs.sum(0), rtol=1e-5, atol=1e-5)
    cheap = ops.exp(a) + 1.0
    _, fused = planned(cheap.sum((1,)), cheap.sum((0,)))
    assert not [n for n in fused.order if n.op in ("exp", "add") and id(n) in fused.stored]


def test_shared_costly_node_read_in_one_kernel_is_computed_there():
    """Both readers in one kernel at the same index (sigmoid's shape): no store, the
    kernel computes it once per element."""
    x = tensor(16, 20, scale=0.3)
    y = ops.exp(ops.exp(ops.exp(x)))
    out = (y + 1.0) * (y * 3.0)
    schedule, fused = planned(out)
    assert len(schedule.calls) == 1
    check_reasons(fused)
    (shared,) = [n for n in fused.order if n.op == "exp" and "read by 2" in fused.reasons.get(id(n), "")]
    assert id(shared) not in fused.stored and "computed once" in fused.reasons[id(shared)]
    ys = np.exp(np.exp(np.exp(x.numpy().astype(np.float64))))
    assert launched(out) == 1
    np.testing.assert_allclose(out.numpy(), (ys + 1) * (ys * 3), rtol=1e-5)
    sig = ops.sigmoid(x)
    assert len(planned(sig)[0].calls) == 1
    np.testing.assert_allclose(sig.numpy(), 1 / (1 + np.exp(-x.numpy().astype(np.float64))), rtol=1e-6)


def test_several_outputs_share_one_schedule():
    x = tensor(8, 30)
    s = softmax(x)
    total = ops.summation(x, axes=(1,))
    double = x * 2
    schedule, fused = planned(s, total, double)
    check_reasons(fused)
    assert len(schedule.calls) <= 3
    xs = x.numpy()
    assert launched(s, total, double) == len(schedule.calls)
    np.testing.assert_allclose(total.numpy(), xs.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(double.numpy(), 2 * xs)
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(s.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_reductions_over_different_domains_get_reasons():
    x = tensor(12, 10)
    col = ops.summation(x, axes=(0,))          # (10,)
    row = ops.summation(x, axes=(1,))          # (12,)
    out = ops.summation(ops.exp(x) * ops.broadcast_to(ops.reshape(col, (1, 10)), (12, 10)), axes=(1,)) + row
    schedule, fused = planned(out)
    check_reasons(fused)
    xs = x.numpy().astype(np.float64)
    expected = (np.exp(xs) * xs.sum(0)).sum(1) + xs.sum(1)
    assert launched(out) == len(schedule.calls)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4)


def test_conv_kernel_count_and_reasons():
    z, w = tensor(2, 9, 9, 3), tensor(3, 3, 3, 8)
    out = ops.relu(ops.conv(z, w, stride=1, padding=1))
    schedule, fused = planned(out)
    check_reasons(fused)
    # im2col copy + the matmul group (relu as its epilogue)
    assert len(fused.groups) == 2
    assert launched(out) == len(schedule.calls)


def broadcast_max(x):
    return ops.broadcast_to(ops.max(x, axes=(0, 1), keepdims=True), x.shape)


def broadcast_sum(x):
    return ops.broadcast_to(ops.summation(x, axes=(1,), keepdims=True), x.shape)


OUTPUT_READERS = {
    # a broadcast reduction realized together with something that reads it
    "max_and_add": (lambda x: (lambda m: (m, m + x))(broadcast_max(x)),
                    lambda a: (np.broadcast_to(a.max(), a.shape), a.max() + a)),
    "max_and_concat": (lambda x: (lambda m: (m, ops.concatenate([m, x], 0)))(broadcast_max(x)),
                       lambda a: (np.broadcast_to(a.max(), a.shape),
                                  np.concatenate([np.broadcast_to(a.max(), a.shape), a], 0))),
    "sum_and_exp": (lambda x: (lambda m: (m, ops.exp(m) * x))(broadcast_sum(x)),
                    lambda a: (np.broadcast_to(a.sum(1, keepdims=True), a.shape), np.exp(a.sum(1, keepdims=True)) * a)),
    # a transposed output read by another kernel
    "transpose_and_stack": (lambda x: (lambda t: (t, ops.stack([t, t * 2.0], 0)))(ops.transpose(ops.exp(x))),
                            lambda a: (np.exp(a).T, np.stack([np.exp(a).T, 2 * np.exp(a).T], 0))),
}
@pytest.mark.parametrize("case", list(OUTPUT_READERS))
def test_output_read_by_another_kernel(case):
    build_outputs, reference_values = OUTPUT_READERS[case]
    x = tensor(4, 5)
    outs = build_outputs(x)
    schedule, fused = planned(*outs)
    check_reasons(fused)
    ndl.realize(*outs)
    for o, e in zip(outs, reference_values(x.numpy().astype(np.float64))):
        np.testing.assert_allclose(o.numpy(), e, rtol=1e-5, atol=1e-6)


# ---- several outputs in one elementwise kernel ------------------------------------------------
def test_momentum_and_update_are_one_kernel():
    """SGD with momentum: u' = 0.9 u + g and p' = p - 0.1 u' (p' reads u' at its own
    index): one kernel stores both, u' computed once."""
    p, u, g = tensor(37, 29), tensor(37, 29), tensor(37, 29)
    u2 = u * 0.9 + g
    p2 = p - u2 * 0.1
    schedule, fused = planned(u2, p2)
    assert len(schedule.calls) == 1
    check_reasons(fused)
    assert "several outputs" in ndl.ir.dump(u2, p2, stage="fused")
    assert launched(u2, p2) == 1
    p64, u64, g64 = (t.numpy().astype(np.float64) for t in (p, u, g))
    np.testing.assert_allclose(u2.numpy(), u64 * 0.9 + g64, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(p2.numpy(), p64 - (u64 * 0.9 + g64) * 0.1, rtol=1e-6, atol=1e-6)


def test_adam_moments_and_update_are_one_kernel():
    p, g, m, v = tensor(300), tensor(300), tensor(300), tensor(300) ** 2
    m2 = m * 0.9 + g * 0.1
    v2 = v * 0.999 + g * g * 0.001
    p2 = p - m2 / (v2 ** 0.5 + 1e-8) * 0.01
    schedule, fused = planned(m2, v2, p2)
    assert len(schedule.calls) == 1
    check_reasons(fused)
    p64, g64, m64, v64 = (t.numpy().astype(np.float64) for t in (p, g, m, v))
    em, ev = m64 * 0.9 + g64 * 0.1, v64 * 0.999 + g64 * g64 * 0.001
    got = [t.numpy() for t in ndl.realize(m2, v2, p2)]  # one schedule
    np.testing.assert_allclose(got[0], em, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], ev, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], p64 - em / (np.sqrt(ev) + 1e-8) * 0.01, rtol=1e-5, atol=1e-6)


def test_no_second_output_when_read_at_another_index():
    """p' reads u' as is and transposed: another element than the one it computes, so
    u' must be in memory before p's kernel runs: no kernel stores what it reads
    through another view."""
    p, u = tensor(24, 24), tensor(24, 24, scale=0.3)
    u2 = ops.exp(ops.exp(ops.exp(u))) * 0.5  # too costly to recompute through two views
    p2 = p + u2 + ops.transpose(u2)
    schedule, fused = planned(u2, p2)
    for g in fused.groups:
        extra = {id(e) for e in g.extra}
        assert all(m.arg == View.contiguous(g.domain)
                   for m in g.members if m.op == "view" and id(m.srcs[0]) in extra)
    u64 = np.exp(np.exp(np.exp(u.numpy().astype(np.float64)))) * 0.5
    np.testing.assert_allclose(p2.numpy(), p.numpy() + u64 + u64.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(u2.numpy(), u64, rtol=1e-5)


def test_no_second_output_when_another_kernel_reads_it_first():
    """y is read by the kernel of q (a matmul) and by r, which reads q too, so runs
    after it: r's kernel cannot compute y, the matmul needs it in memory first."""
    a, b, w = tensor(20, 16, scale=0.3), tensor(20, 16), tensor(16, 16)
    y = ops.exp(ops.exp(ops.exp(a))) + b  # too costly to compute in both kernels
    q = y @ w
    r = y * 2.0 + q
    schedule, fused = planned(q, r)
    stored_y = [g for g in fused.groups if g.root.op == "add" and g.root.shape == (20, 16) and not g.extra]
    assert stored_y, "y keeps its own kernel"
    y64 = np.exp(np.exp(np.exp(a.numpy().astype(np.float64)))) + b.numpy()
    np.testing.assert_allclose(q.numpy(), y64 @ w.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r.numpy(), y64 * 2 + y64 @ w.numpy(), rtol=1e-4, atol=1e-4)


def test_pieces_of_one_shape_are_one_kernel():
    """stack of four results (an LSTM's gate gradients): one kernel stores every
    piece into its slice; pieces of two shapes (a concatenation): one kernel each."""
    a, b = tensor(9, 13), tensor(9, 13)
    y = ops.stack([ops.exp(a), ops.tanh(b), a * b, a + b], 1)
    schedule, fused = planned(y)
    assert [c.kernel.name for c in schedule.calls] == ["A_9_1_13"]
    check_reasons(fused)
    a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    np.testing.assert_allclose(y.numpy(), np.stack([np.exp(a64), np.tanh(b64), a64 * b64, a64 + b64], 1),
                               rtol=1e-5, atol=1e-6)
    c = tensor(9, 4)
    z = ops.concatenate([ops.exp(a), c * 2.0, ops.tanh(b)], 1)
    schedule, _ = planned(z)
    assert sorted(call.kernel.name for call in schedule.calls) == ["A_9_13", "A_9_4"]
    np.testing.assert_allclose(z.numpy(), np.concatenate([np.exp(a64), c.numpy() * 2.0, np.tanh(b64)], 1),
                               rtol=1e-5, atol=1e-6)


def test_independent_outputs_of_one_shape_are_one_kernel():
    """Three results over one shape that do not read each other (an LSTM cell's
    sigmoid gates): one kernel stores all three."""
    a, b, c = tensor(11, 7), tensor(11, 7), tensor(11, 7)
    outs = (ops.sigmoid(a), ops.sigmoid(b) * c, ops.tanh(c))
    schedule, fused = planned(*outs)
    assert len(schedule.calls) == 1
    check_reasons(fused)
    assert launched(*outs) == 1
    a64, b64, c64 = (t.numpy().astype(np.float64) for t in (a, b, c))
    for got, want in zip(outs, (1 / (1 + np.exp(-a64)), c64 / (1 + np.exp(-b64)), np.tanh(c64))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


# ---- a matmul kernel also stores an optimizer's update -----------------------------------------
@pytest.mark.parametrize("vector_bytes", [64, 32])  # AVX-512 and AVX2 tiles, whatever the host
@pytest.mark.parametrize("m, k, n", [
    (96, 200, 64),    # tiled, one K block
    (50, 700, 45),    # tiled, two K blocks (the update is stored after the last), ragged tiles
    (6, 7, 5),        # the plain loop nest
])
def test_weight_update_is_stored_by_the_gradient_matmul(m, k, n, vector_bytes):
    """g = x.T @ d (a weight gradient, an output), then SGD with momentum: u' = 0.9 u
    + 0.1 g, p' = p - 0.5 u'.  The matmul kernel stores g, u' and p' as it writes g
    back: no elementwise kernel is left; values against numpy float64."""
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot execute {vector_bytes}-byte SIMD code")
    x, d, p, u = tensor(k, m), tensor(k, n), tensor(m, n), tensor(m, n)
    g = ops.transpose(x) @ d
    u2 = u * 0.9 + g * 0.1
    p2 = p - u2 * 0.5
    nodes = output_nodes([g, u2, p2])
    signature = structure(nodes)
    schedule, fused = plan(nodes, target, signature)
    check_reasons(fused)
    assert not any(c.kernel.name.startswith("E_") for c in schedule.calls)
    matmul = next(grp for grp in fused.groups if grp.kind == "matmul")
    assert len(matmul.extra) == 2  # u' and p'
    assert "as it writes that back" in ndl.ir.dump(g, u2, p2, stage="fused")
    compiled = schedule_cache.compile_schedule(schedule, target)
    got = [t.numpy() for t in compiled.run(signature.leaves, signature.scalars, CPU)]
    x64, d64, p64, u64 = (t.numpy().astype(np.float64) for t in (x, d, p, u))
    g64 = x64.T @ d64
    # a float32 dot product of k terms: at most k eps sum|x||d| off, then a few roundings
    err = (k + 4) * np.finfo(np.float32).eps * (np.abs(x64).T @ np.abs(d64))
    assert np.all(np.abs(got[0] - g64) <= err)
    want_u = u64 * 0.9 + g64 * 0.1
    assert np.all(np.abs(got[1] - want_u) <= 0.1 * err + 4 * np.finfo(np.float32).eps * (np.abs(u64) + 1))
    assert np.all(np.abs(got[2] - (p64 - want_u * 0.5)) <= 0.05 * err + 8 * np.finfo(np.float32).eps *
                  (np.abs(p64) + np.abs(u64) + 1))


def test_an_update_reading_a_later_matmul_goes_to_that_matmul():
    """p' = p - 0.1 (g + h) with g and h two weight gradients (outputs): the update
    can be stored only by the kernel of the later of the two, which finds the
    earlier one in memory."""
    x, d, y, e, p = tensor(40, 64), tensor(40, 48), tensor(40, 64), tensor(40, 48), tensor(64, 48)
    g, h = ops.transpose(x) @ d, ops.transpose(y) @ e
    p2 = p - (g + h) * 0.1
    schedule, fused = planned(g, h, p2)
    check_reasons(fused)
    matmuls = [grp for grp in fused.groups if grp.kind == "matmul"]
    assert len(matmuls) == 2 and not matmuls[0].extra and matmuls[1].extra  # in execution order
    assert not any(c.kernel.name.startswith("E_") for c in schedule.calls)
    got = [t.numpy() for t in ndl.realize(g, h, p2)]
    g64 = x.numpy().astype(np.float64).T @ d.numpy()
    h64 = y.numpy().astype(np.float64).T @ e.numpy()
    np.testing.assert_allclose(got[2], p.numpy() - (g64 + h64) * 0.1, rtol=1e-5, atol=1e-4)


def test_a_linear_layers_sgd_step_has_no_update_kernel_for_its_weight():
    """Through the API: a Linear layer trained by SGD with momentum; the weight's
    gradient matmul stores its momentum and new value (no elementwise kernel over
    the weight's shape), and the step matches numpy's."""
    from needle import optim
    np.random.seed(3)
    layer = nn.Linear(30, 20, device=CPU)
    w0, b0 = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    opt = optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    x = tensor(64, 30)
    for _ in range(2):
        with ndl.profile() as prof:
            opt.reset_grad()
            (layer(x) ** 2).sum().backward()
            opt.step()
            ndl.realize(layer.weight, layer.bias)
        names = {e["name"] for e in prof.events if e.get("ph") == "X"}
        assert "M_30_20_64" in names and "E_30_20" not in names, names
    x64, w, b, uw, ub = x.numpy().astype(np.float64), w0, b0, 0.0, 0.0
    for _ in range(2):  # the course's momentum: u = 0.9 u + 0.1 g
        dy = 2 * (x64 @ w + b)
        uw, ub = 0.9 * uw + 0.1 * (x64.T @ dy), 0.9 * ub + 0.1 * dy.sum(0, keepdims=True)
        w, b = w - 0.1 * uw, b - 0.1 * ub
    np.testing.assert_allclose(layer.weight.numpy(), w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.bias.numpy(), b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_an_update_over_the_gradient_reshaped_is_stored_by_the_matmul(vector_bytes):
    """A convolution's weight gradient is a (K*K*Cin, Cout) matmul read as K x K x Cin
    x Cout: the momentum and weight update over that shape read it in memory order, so
    the matmul kernel stores them too (computed over its own shape); values against
    numpy float64."""
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot execute {vector_bytes}-byte SIMD code")
    x, d = tensor(300, 3 * 3 * 8), tensor(300, 16)
    w, u = tensor(3, 3, 8, 16), tensor(3, 3, 8, 16)
    g = ops.transpose(x) @ d
    u2 = u * 0.9 + ops.reshape(g, (3, 3, 8, 16)) * 0.1
    w2 = w - u2 * 0.5
    nodes = output_nodes([g, u2, w2])
    signature = structure(nodes)
    schedule, fused = plan(nodes, target, signature)
    check_reasons(fused)
    assert [c.kernel.name[:2] for c in schedule.calls if not c.kernel.name.startswith("P")] == ["M_"]
    got = [t.numpy() for t in schedule_cache.compile_schedule(schedule, target).run(
        signature.leaves, signature.scalars, CPU)]
    x64, d64, w64, u64 = (t.numpy().astype(np.float64) for t in (x, d, w, u))
    g64 = x64.T @ d64
    eps = np.finfo(np.float32).eps
    err = (300 + 4) * eps * (np.abs(x64).T @ np.abs(d64))  # a float32 dot product of 300 terms
    assert np.all(np.abs(got[0] - g64) <= err)
    want_u = u64 * 0.9 + g64.reshape(3, 3, 8, 16) * 0.1
    err_u = 0.1 * err.reshape(3, 3, 8, 16) + 4 * eps * (np.abs(u64) + np.abs(want_u))
    assert np.all(np.abs(got[1] - want_u) <= err_u)
    assert np.all(np.abs(got[2] - (w64 - want_u * 0.5)) <= 0.5 * err_u + 4 * eps * (np.abs(w64) + np.abs(u64) + 1))
