"""matmul: 2-d, batched, batch dimensions broadcast both ways."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)

MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((1, 4), (4, 1)),
    ((5, 1), (1, 3)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),        # b broadcast over a's batch
    ((3, 4), (2, 4, 5)),        # a broadcast over b's batch
    ((2, 1, 3, 4), (5, 4, 2)),  # both broadcast
    ((1, 3, 4), (2, 4, 2)),     # size-1 batch dim
    ((2, 2, 3), (1, 3, 3)),
    ((4, 4), (4, 4)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_CASES, ids=[f"{a}@{b}" for a, b in MATMUL_CASES])
def test_matmul_forward(device, sa, sb):
    a, b = randn(sa, device, dtype="float32"), randn(sb, device, dtype="float32")
    expected = np.matmul(a.numpy(), b.numpy())
    for out in (ops.matmul(a, b), a @ b, a.matmul(b)):
        assert out.shape == expected.shape
        assert out.dtype == "float32"
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sa,sb", MATMUL_CASES, ids=[f"{a}@{b}" for a, b in MATMUL_CASES])
def test_matmul_gradient(device, sa, sb):
    gradient_check(ops.matmul, randn(sa, device), randn(sb, device))


def test_matmul_hand_values(device):
    a = tensor([[1.0, 2.0], [3.0, 4.0]], device)
    b = tensor([[5.0, 6.0], [7.0, 8.0]], device)
    out = a @ b
    np.testing.assert_array_equal(out.numpy(), [[19, 22], [43, 50]])
    out.backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[11, 15], [11, 15]])  # ones @ b^T
    np.testing.assert_array_equal(b.grad.numpy(), [[4, 4], [6, 6]])      # a^T @ ones


def test_matmul_of_views(device):
    # transposed and sliced operands (non-contiguous data)
    x = randn((5, 4), device)
    y = randn((3, 6), device)
    out = ops.transpose(x)[:, ::2] @ y[:, 1:4]
    np.testing.assert_allclose(out.numpy(), x.numpy().T[:, ::2] @ y.numpy()[:, 1:4], rtol=1e-12)
    gradient_check(lambda s, t: ops.transpose(s)[:, ::2] @ t[:, 1:4], x, y)


def test_matmul_same_tensor(device):
    x = randn((3, 3), device)
    gradient_check(lambda t: t @ t, x)


def test_matmul_with_numpy_operand(device):
    a = randn((2, 3), device)
    w = np.random.randn(3, 2)
    np.testing.assert_allclose((a @ w).numpy(), a.numpy() @ w, rtol=1e-12)


@pytest.mark.parametrize("sa,sb", [((2, 3), (2, 3)), ((3,), (3, 2)), ((2, 3, 4), (3, 4, 5)), ((2, 3), (4,))])
def test_matmul_bad_shapes(device, sa, sb):
    with pytest.raises(ndl.errors.ShapeError, match="matmul"):
        ops.matmul(randn(sa, device), randn(sb, device))


def test_matmul_error_names_shapes(device):
    with pytest.raises(ndl.errors.ShapeError, match=r"\(2, 3\).*\(2, 3\)"):
        ops.matmul(randn((2, 3), device), randn((2, 3), device))


TRANSPOSED_CASES = [((4, 3), (5, 4)), ((2, 4, 3), (5, 4)), ((4, 3), (2, 1, 5, 4))]


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("sa,sb", TRANSPOSED_CASES, ids=[f"{a}@{b}" for a, b in TRANSPOSED_CASES])
def test_matmul_with_transposed_operands(device, ta, tb, sa, sb):
    # the op the gradients build: op(a) @ op(b), op swapping the last two axes; stored
    # shapes here are for ta = tb = True, so undo the swap for the flags not set
    from needle.ops.ops_reduce import MatMul
    sa = sa if ta else sa[:-2] + sa[-1:] + sa[-2:-1]
    sb = sb if tb else sb[:-2] + sb[-1:] + sb[-2:-1]
    a, b = randn(sa, device), randn(sb, device)
    swap = lambda x, t: np.swapaxes(x, -1, -2) if t else x  # noqa: E731
    expected = np.matmul(swap(a.numpy(), ta), swap(b.numpy(), tb))
    np.testing.assert_allclose(MatMul(ta, tb)(a, b).numpy(), expected, rtol=1e-12)
    gradient_check(lambda x, y: MatMul(ta, tb)(x, y), a, b)


def test_matmul_gradient_is_one_op_per_operand(device):
    # (a transposed matmul, not a transpose and a matmul: the graph every step rebuilds)
    from needle.ops.ops_reduce import MatMul
    a, b = randn((3, 4), device), randn((4, 5), device)
    (a @ b).backward()
    for grad, flags in ((a.grad, (False, True)), (b.grad, (True, False))):
        assert isinstance(grad.op, MatMul) and (grad.op.transpose_a, grad.op.transpose_b) == flags
