"""Pass 1b, common subexpressions: structurally equal nodes are one node (stored and
computed once); values against numpy; equal-looking constants that differ (0.0 and
-0.0) stay apart."""
import numpy as np

import needle as ndl
from needle import ops
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

CPU = ndl.cpu()


def kernels(*tensors) -> list:
    schedule, _ = plan(output_nodes(list(tensors)), cpu_target())
    return [c.kernel.name for c in schedule.calls]


def test_conv_forward_and_weight_gradient_share_the_im2col_copy():
    z = ndl.Tensor(np.random.randn(4, 9, 9, 3).astype(np.float32), device=CPU, requires_grad=True)
    w = ndl.Tensor(np.random.randn(5, 5, 3, 8).astype(np.float32), device=CPU, requires_grad=True)
    y = ops.conv(z, w, 2, 2)
    g = np.random.randn(*y.shape).astype(np.float32)
    y.backward(ndl.Tensor(g, device=CPU))
    names = kernels(y, w.grad)
    assert names.count("E_4_5_5_5_5_3") == 1, names  # the (N, Ho, Wo, K, K, C) windows, once
    zp = np.pad(z.numpy().astype(np.float64), ((0, 0), (2, 2), (2, 2), (0, 0)))
    cols = np.stack([np.stack([zp[:, a:a + 9:2, b:b + 9:2] for b in range(5)], 3) for a in range(5)], 3)
    want_y = np.einsum("nhwabc,abco->nhwo", cols, w.numpy())
    want_dw = np.einsum("nhwabc,nhwo->abco", cols, g)
    got_y, got_dw = (t.numpy() for t in ndl.realize(y, w.grad))  # one schedule
    np.testing.assert_allclose(got_y, want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_dw, want_dw, rtol=1e-4, atol=1e-3)


def test_the_same_expression_built_twice_is_computed_once():
    x = ndl.Tensor(np.linspace(-1, 1, 40, dtype=np.float32).reshape(5, 8), device=CPU)
    a, b = ops.exp(x) * 3.0 - x, ops.exp(x) * 3.0 - x
    assert len(kernels(a, b)) == 1
    want = np.exp(x.numpy().astype(np.float64)) * 3 - x.numpy()
    np.testing.assert_allclose(a.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), want, rtol=1e-6)


def test_zero_and_negative_zero_stay_apart():
    """0.0 == -0.0 in Python, but x + 0.0 and x + -0.0 are two expressions (the kernels
    may still fold -0.0's sign away, as LLVM's no-signed-zeros flag allows)."""
    x = ndl.Tensor(np.array([-0.0, 1.0], dtype=np.float32), device=CPU)
    plus, minus, again = x + 0.0, x + (-0.0), x + 0.0
    _, fused = plan(output_nodes([plus, minus, again]), cpu_target())
    a, b, c = fused.outputs
    assert a is c and a is not b
