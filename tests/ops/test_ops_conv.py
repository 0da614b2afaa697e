"""conv (NHWC, W of shape (K, K, C_in, C_out)) against a naive numpy loop."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.ops.ops_conv import ConvInputGradient, ConvWeightGradient
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


def conv_reference(Z, W, stride, padding):
    """The definition, one output pixel at a time."""
    Zp = np.pad(Z, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    N, H, Wd, _ = Zp.shape
    KH, KW, _, O = W.shape
    Ho, Wo = (H - KH) // stride + 1, (Wd - KW) // stride + 1
    out = np.zeros((N, Ho, Wo, O))
    for n in range(N):
        for i in range(Ho):
            for j in range(Wo):
                patch = Zp[n, i * stride:i * stride + KH, j * stride:j * stride + KW, :]
                for o in range(O):
                    out[n, i, j, o] = np.sum(patch * W[:, :, :, o])
    return out


# (N, H, W, C_in, C_out, K, stride, padding)
FORWARD_CASES = [
    (2, 5, 5, 3, 4, 3, 1, 0),
    (1, 7, 5, 2, 3, 3, 2, 1),
    (2, 6, 9, 1, 2, 3, 3, 2),
    (1, 5, 4, 2, 2, 1, 1, 0),
    (1, 4, 4, 2, 3, 5, 1, 3),
    (1, 9, 7, 3, 2, 3, 2, 0),
    (2, 8, 8, 2, 2, 2, 2, 1),
    (1, 5, 6, 1, 1, 5, 3, 2),
    (1, 11, 6, 2, 3, 4, 3, 3),
    (3, 3, 3, 4, 1, 3, 1, 1),
    (1, 1, 1, 2, 2, 1, 1, 0),
    # taps that read only padding for every output (cropped from the matmul)
    (2, 1, 1, 3, 4, 3, 1, 1),
    (1, 2, 2, 2, 3, 3, 2, 1),
    (1, 2, 3, 2, 2, 3, 2, 1),
    (1, 1, 2, 2, 2, 5, 1, 2),
    # runs of 16 channels in small padded images: stored padded before their windows are read
    (2, 6, 6, 16, 4, 3, 1, 1),
    (1, 5, 7, 16, 3, 3, 2, 2),
]
GRAD_CASES = [
    (1, 4, 4, 2, 2, 3, 1, 0),
    (1, 5, 4, 2, 2, 3, 1, 1),
    (2, 5, 3, 1, 2, 3, 2, 1),
    (1, 6, 5, 1, 2, 2, 2, 0),
    (1, 7, 5, 1, 1, 3, 3, 2),
    (1, 3, 3, 2, 1, 3, 1, 3),
    (1, 4, 5, 2, 2, 1, 2, 0),
    (1, 5, 5, 1, 2, 3, 2, 0),
    (2, 1, 1, 2, 3, 3, 1, 1),
    (1, 2, 2, 2, 2, 3, 2, 1),
    (1, 1, 2, 1, 2, 5, 1, 2),
    (1, 3, 2, 2, 1, 5, 2, 3),
]


# strides 2-4, odd sizes, kernels smaller than the stride (residues no tap reaches)
STRIDED_CASES = [(1, 8, 8, 3, 2, 3, 2, 1), (2, 9, 7, 2, 3, 3, 2, 1), (1, 11, 10, 2, 2, 7, 4, 3),
                 (1, 8, 9, 2, 2, 2, 3, 0), (1, 7, 7, 1, 2, 5, 3, 2), (1, 6, 6, 2, 1, 1, 2, 0)]


def _ids(cases):
    return ["N{}H{}W{}C{}O{}K{}s{}p{}".format(*c) for c in cases]


@pytest.mark.parametrize("case", FORWARD_CASES, ids=_ids(FORWARD_CASES))
def test_conv_forward(device, case):
    N, H, W, C, O, K, s, p = case
    Z, Wt = randn((N, H, W, C), device, dtype="float32"), randn((K, K, C, O), device, dtype="float32")
    expected = conv_reference(Z.numpy().astype(np.float64), Wt.numpy().astype(np.float64), s, p)
    out = ops.conv(Z, Wt, stride=s, padding=p)
    assert out.shape == expected.shape
    assert out.shape == (N, (H + 2 * p - K) // s + 1, (W + 2 * p - K) // s + 1, O)
    assert out.dtype == "float32"
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_conv_positional_arguments(device):
    Z, Wt = randn((1, 5, 5, 2), device), randn((3, 3, 2, 2), device)
    # conv(Z, W, stride, padding): the course's argument order
    np.testing.assert_allclose(ops.conv(Z, Wt, 2, 1).numpy(), conv_reference(Z.numpy(), Wt.numpy(), 2, 1),
                               rtol=1e-10, atol=1e-12)


def test_conv_rectangular_kernel(device):
    Z, Wt = randn((1, 6, 5, 2), device), randn((2, 3, 2, 2), device)
    expected = conv_reference(Z.numpy(), Wt.numpy(), 2, 1)
    np.testing.assert_allclose(ops.conv(Z, Wt, stride=2, padding=1).numpy(), expected, rtol=1e-10, atol=1e-12)
    gradient_check(lambda z, w: ops.conv(z, w, stride=2, padding=1), Z, Wt)


@pytest.mark.parametrize("case", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_conv_gradient(device, case):
    N, H, W, C, O, K, s, p = case
    Z, Wt = randn((N, H, W, C), device), randn((K, K, C, O), device)
    gradient_check(lambda z, w: ops.conv(z, w, stride=s, padding=p), Z, Wt)


@pytest.mark.parametrize("case", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_conv_weight_gradient_op(device, case):
    # the weight gradient as its own op: values against the definition
    # dW[a, b, c, o] = sum_{n,i,j} Zp[n, i*s + a, j*s + b, c] G[n, i, j, o], and its own
    # gradients (in Z and in G) against finite differences
    N, H, W, C, O, K, s, p = case
    Z = randn((N, H, W, C), device)
    Ho, Wo = (H + 2 * p - K) // s + 1, (W + 2 * p - K) // s + 1
    G = randn((N, Ho, Wo, O), device)
    Zp = np.pad(Z.numpy(), ((0, 0), (p, p), (p, p), (0, 0)))
    expected = np.zeros((K, K, C, O))
    for a in range(K):
        for b in range(K):
            patch = Zp[:, a:a + s * (Ho - 1) + 1:s, b:b + s * (Wo - 1) + 1:s, :]  # (N, Ho, Wo, C)
            expected[a, b] = np.einsum("nijc,nijo->co", patch, G.numpy())
    op = ConvWeightGradient((K, K), s, p)
    np.testing.assert_allclose(op(Z, G).numpy(), expected, rtol=1e-10, atol=1e-12)
    gradient_check(lambda z, g: op(z, g), Z, G)


@pytest.mark.parametrize("case", GRAD_CASES + STRIDED_CASES, ids=_ids(GRAD_CASES + STRIDED_CASES))
def test_conv_input_gradient_op(device, case):
    # the input gradient as its own op: its gradients (in G: the forward conv, in W: the
    # weight gradient, as conv's adjoint in Z) against finite differences
    N, H, W, C, O, K, s, p = case
    Ho, Wo = (H + 2 * p - K) // s + 1, (W + 2 * p - K) // s + 1
    op = ConvInputGradient((N, H, W, C), s, p)
    gradient_check(lambda g, w: op(g, w), randn((N, Ho, Wo, O), device), randn((K, K, C, O), device))


def test_conv_of_a_permuted_input(device):
    # NCHW data permuted to NHWC (a non-contiguous view), as nn.Conv does
    X = randn((1, 2, 5, 4), device)
    Wt = randn((3, 3, 2, 2), device)
    out = ops.conv(ops.permute(X, (0, 2, 3, 1)), Wt, stride=1, padding=1)
    np.testing.assert_allclose(out.numpy(), conv_reference(X.numpy().transpose(0, 2, 3, 1), Wt.numpy(), 1, 1),
                               rtol=1e-10, atol=1e-12)
    gradient_check(lambda x, w: ops.conv(ops.permute(x, (0, 2, 3, 1)), w, stride=2, padding=1), X, Wt)


def test_conv_hand_values(device):
    # a 3x3 image of ones with a 2x2 kernel of ones: every window sums 4 ones
    Z = tensor(np.ones((1, 3, 3, 1)), device)
    Wt = tensor(np.ones((2, 2, 1, 1)), device)
    np.testing.assert_array_equal(ops.conv(Z, Wt).numpy()[0, :, :, 0], [[4, 4], [4, 4]])
    np.testing.assert_array_equal(ops.conv(Z, Wt, padding=1).numpy()[0, :, :, 0],
                                  [[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]])
    ops.conv(Z, Wt).backward()
    # each input pixel's gradient counts the windows it falls in
    np.testing.assert_array_equal(Z.grad.numpy()[0, :, :, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])
    np.testing.assert_array_equal(Wt.grad.numpy()[:, :, 0, 0], [[4, 4], [4, 4]])


def test_conv_bad_arguments(device):
    Z = randn((1, 5, 5, 2), device)
    with pytest.raises(ndl.errors.ShapeError, match=r"conv.*\(1, 5, 5, 2\)"):
        ops.conv(Z, randn((3, 3, 3, 2), device))
    with pytest.raises(ndl.errors.ShapeError, match="conv"):
        ops.conv(randn((5, 5, 2), device), randn((3, 3, 2, 2), device))
    with pytest.raises(ndl.errors.ShapeError, match="conv"):
        ops.conv(Z, randn((7, 7, 2, 1), device))
    with pytest.raises(ndl.errors.DTypeError, match=r"conv.*\(1, 5, 5, 2\) float64.*float32"):
        ops.conv(Z, randn((3, 3, 2, 2), device, dtype="float32"))
    with pytest.raises(ValueError, match="stride"):
        ops.conv(Z, randn((3, 3, 2, 2), device), stride=0)
    with pytest.raises(ValueError, match="padding"):
        ops.conv(Z, randn((3, 3, 2, 2), device), padding=-1)


def input_gradient_reference(G, W, z_shape, stride, padding):
    """dZ by the definition: every output pixel adds G * W back into its window."""
    N, H, Wd, C = z_shape
    KH, KW = W.shape[:2]
    dzp = np.zeros((N, H + 2 * padding, Wd + 2 * padding, C))
    for i in range(G.shape[1]):
        for j in range(G.shape[2]):
            dzp[:, i * stride:i * stride + KH, j * stride:j * stride + KW, :] += np.einsum(
                "no,abco->nabc", G[:, i, j, :], W)
    return dzp[:, padding:padding + H, padding:padding + Wd, :]



@pytest.mark.parametrize("case", STRIDED_CASES, ids=_ids(STRIDED_CASES))
def test_strided_conv_input_gradient_by_phases(device, case):
    """dZ of a strided conv is s**2 stride-1 correlations with the kernel's taps of each
    residue, interleaved (odd sizes, kernels smaller than the stride: residues no tap
    reaches get zero), against the scatter definition; and no dilated out_grad is built."""
    from needle.ops.ops_conv import conv_input_gradient
    from needle.ops.ops_movement import Dilate
    N, H, W, C, O, K, s, p = case
    Z = randn((N, H, W, C), device)
    Wt = randn((K, K, C, O), device)
    y = ops.conv(Z, Wt, stride=s, padding=p)
    G = randn(y.shape, device)
    dz = conv_input_gradient(G, Wt, Z.shape, s, ((p, p), (p, p)))
    want = input_gradient_reference(G.numpy().astype(np.float64), Wt.numpy().astype(np.float64), Z.shape, s, p)
    scale = input_gradient_reference(np.abs(G.numpy()).astype(np.float64), np.abs(Wt.numpy()).astype(np.float64),
                                     Z.shape, s, p)
    eps = np.finfo(dz.numpy().dtype).eps
    assert np.all(np.abs(dz.numpy() - want) <= 4 * K * K * O * eps * scale + 1e-30)
    seen, todo = set(), [dz]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        assert not isinstance(t.op, Dilate)
        todo.extend(t.inputs)
