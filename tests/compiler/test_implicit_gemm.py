"""A convolution's matmul reads the input's windows in place (the implicit GEMM): no
im2col copy is stored, each tile reads a run of input channels per kernel tap, and a
tap that reads padding for some of the tile's rows zero-fills those rows.  Values
against a numpy float64 convolution written out tap by tap; planned and run for each
SIMD width the host can execute."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler import conv_gemm, view_folding
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes


PADDED_COPY_MIN_RATIO = view_folding.PADDED_COPY_MIN_RATIO


@pytest.fixture(autouse=True)
def lazy(monkeypatch):
    """Lazy mode; and every padded image read in place through its mask (the path these
    tests are about), unless a test sets the ratio back."""
    monkeypatch.setattr(view_folding, "PADDED_COPY_MIN_RATIO", float("inf"))
    with ndl.lazy():
        yield


def conv_reference(z, w, stride: int, pad: int):
    """sum over taps (a, b) of the padded input's strided slice times w[a, b], in float64."""
    zp = np.pad(z.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w.shape[:2]
    ho, wo = (zp.shape[1] - kh) // stride + 1, (zp.shape[2] - kw) // stride + 1
    out = np.zeros((z.shape[0], ho, wo, w.shape[3]))
    for a in range(kh):
        for b in range(kw):
            window = zp[:, a:a + (ho - 1) * stride + 1:stride, b:b + (wo - 1) * stride + 1:stride]
            out += np.einsum("nhwc,co->nhwo", window, w[a, b].astype(np.float64))
    return out, (kh * kw * z.shape[3])


def check(got, z, w, stride, pad):
    want, depth = conv_reference(z, w, stride, pad)
    scale, _ = conv_reference(np.abs(z), np.abs(w), stride, pad)
    # float32 dot products of `depth` terms: |error| <= depth * eps * sum |z w|
    eps = np.finfo(got.dtype).eps
    assert np.all(np.abs(got - want) <= depth * eps * scale + 1e-30), np.abs(got - want).max()


def data(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


CASES = [  # N, H, W, C_in, K, C_out, stride, padding
    (16, 32, 32, 64, 3, 64, 1, 1),   # K = 576: a block of 8 taps and one of 1; border taps masked
    (2, 33, 35, 24, 3, 20, 2, 1),    # stride 2, ragged rows and columns
    (1, 16, 16, 130, 3, 40, 1, 1),   # runs of 130 channels: 3 taps a block
    (1, 16, 16, 520, 3, 17, 1, 1),   # a run longer than a K block: one tap a block
    (2, 32, 34, 32, 5, 48, 2, 2),    # 5x5 taps
    (2, 18, 18, 16, 3, 33, 1, 0),    # no padding: no masked taps
    (1, 16, 16, 64, 3, 136, 1, 1),   # more than WINDOW_COLUMNS outputs: packed row blocks
    (2, 33, 35, 24, 5, 150, 2, 2),   # packed row blocks, stride 2, 5x5, ragged
]


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "small-images-padded"])
@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
@pytest.mark.parametrize("n, h, w_, c, k, o, stride, pad", CASES)
def test_conv_reads_its_windows_in_place(monkeypatch, masked, vector_bytes, n, h, w_, c, k, o, stride, pad):
    """`masked`: every image's windows read it in place through the padding's mask;
    else (the default) small images are stored padded first (view_folding
    PADDED_COPY_MIN_RATIO), the only copy stored."""
    if not masked:
        monkeypatch.setattr(view_folding, "PADDED_COPY_MIN_RATIO", PADDED_COPY_MIN_RATIO)
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    z, w = data((n, h, w_, c)), data((k, k, c, o), seed=1)
    y = ops.conv(ndl.Tensor(z), ndl.Tensor(w), stride, pad)
    nodes = output_nodes([y])
    signature = structure(nodes)
    schedule, fused = plan(nodes, target, signature)
    stored = [n.shape for n in fused.order if n.op == "copy" and id(n) in fused.stored]
    # no im2col copy; at most the padded image, and that for a 16 x 16 image padded by 1
    assert not masked or not stored, f"copies stored: {stored}"
    assert all(len(s) == 4 and s[0] == n and s[3] == c and s[1] > h for s in stored), f"copies stored: {stored}"
    if (h, w_, pad) == (16, 16, 1):  # padded to 18 x 18: 1.27 times the image
        assert bool(stored) == (not masked), stored
    assert [c.kernel.name[0] for c in schedule.calls if not c.kernel.name.startswith("PB_")] == ["E"] * len(stored) + ["M"]
    (out,) = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, ndl.cpu())
    check(out.numpy(), z, w, stride, pad)


def test_float64_conv_reads_its_windows_in_place():
    z, w = data((1, 16, 16, 24), np.float64), data((3, 3, 24, 20), np.float64, seed=1)
    y = ops.conv(ndl.Tensor(z, dtype="float64"), ndl.Tensor(w, dtype="float64"), 1, 1)
    check(y.numpy(), z, w, 1, 1)


def test_small_conv_reads_its_windows_through_the_plain_loop_nest():
    """Too little work for tiling: the plain loop nest reads the same unstored windows
    (each element's position divided out of the matmul's row and depth)."""
    z, w = data((1, 16, 16, 16)), data((3, 3, 16, 2), seed=1)
    y = ops.conv(ndl.Tensor(z), ndl.Tensor(w), 1, 1)
    _, fused = plan(output_nodes([y]), cpu_target())
    assert not any(n.op == "copy" and id(n) in fused.stored for n in fused.order)
    check(y.numpy(), z, w, 1, 1)


@pytest.mark.parametrize("size, c, o, stored", [
    (16, 3, 16, True),                          # an RGB image's 3-channel runs: the copy is packed
    (16, 32, conv_gemm.WINDOW_COLUMNS + 1, False),  # packed from the windows, not read in place
    (4, 32, 16, False),                         # a small image: mostly border taps
    (16, 32, 16, False),
])
def test_which_convs_store_their_im2col_copy(size, c, o, stored):
    z, w = data((2, size, size, c)), data((3, 3, c, o), seed=1)
    y = ops.conv(ndl.Tensor(z), ndl.Tensor(w), 1, 1)
    _, fused = plan(output_nodes([y]), cpu_target())
    assert any(n.op == "copy" and id(n) in fused.stored for n in fused.order) == stored
    if not stored:  # the matmul's kernel evaluates the windows: dumps and drawings show them
        (matmul,) = [g for g in fused.groups if g.kind == "matmul"]
        assert any(n.op == "copy" for n in matmul.members)
        assert "implicit GEMM" in ndl.ir.dump(y, stage="fused")
    check(y.numpy(), z, w, 1, 1)


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
def test_forward_and_gradients_read_the_windows_themselves(vector_bytes):
    """Forward and gradients in one schedule: the forward reads the input's windows in
    place, the weight gradient (im2col^T @ G) packs its A from them, so no im2col copy
    of the input is stored; the input gradient (a conv of the output gradient, 24
    channels, with the flipped weight) reads its own windows in place, while the
    flipped weight's copy, its B, stays stored."""
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    z = ndl.Tensor(data((2, 16, 16, 32)), requires_grad=True)
    w = ndl.Tensor(data((3, 3, 32, 24), seed=1), requires_grad=True)
    y = ops.conv(z, w, 1, 1)
    g = data(y.shape, seed=2)
    y.backward(ndl.Tensor(g))
    nodes = output_nodes([y, w.grad, z.grad])
    signature = structure(nodes)
    schedule, fused = plan(nodes, target, signature)
    stored = [n.shape for n in fused.order if n.op == "copy" and id(n) in fused.stored]
    assert stored == [(3, 3, 24, 32)], stored
    runner = schedule_cache.compile_schedule(schedule, target)
    got_y, got_dw, got_dz = (t.numpy() for t in runner.run(signature.leaves, signature.scalars, ndl.cpu()))
    check(got_y, z.numpy(), w.numpy(), 1, 1)
    flipped = np.transpose(w.numpy()[::-1, ::-1], (0, 1, 3, 2))  # dZ = conv(g, flipped w), padding 1
    check(got_dz, g, flipped, 1, 1)
    zp = np.pad(z.numpy().astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want_dw = np.stack([np.stack([np.einsum("nhwc,nhwo->co", zp[:, a:a + 16, b:b + 16], g)
                                  for b in range(3)]) for a in range(3)])
    bound = 513 * np.finfo(np.float32).eps * np.stack([np.stack([  # sums of 2 * 16 * 16 terms
        np.einsum("nhwc,nhwo->co", np.abs(zp[:, a:a + 16, b:b + 16]), np.abs(g)) for b in range(3)]) for a in range(3)])
    assert np.all(np.abs(got_dw - want_dw) <= bound)


def test_channels_first_network_reads_its_windows_in_place():
    """Two nn.Conv layers on NCHW data, a ReLU between (a network's forward in eval):
    the input is stored channels-last and padded, the ReLU's output likewise (computed
    once, not at each of its 9 window positions), and neither conv stores an im2col
    copy.  Values against numpy float64, with the first layer's rounding carried
    through the second in the bound."""
    from needle import nn
    conv1, conv2 = nn.Conv(16, 24, 3), nn.Conv(24, 20, 3)
    x = data((1, 16, 16, 16))
    y = conv2(ops.relu(conv1(ndl.Tensor(x))))
    _, fused = plan(output_nodes([y]), cpu_target())
    stored = sorted(n.shape for n in fused.order if n.op == "copy" and id(n) in fused.stored)
    assert stored == [(1, 18, 18, 16), (1, 18, 18, 24)], stored
    w1, b1, w2, b2 = (t.numpy() for t in (conv1.weight, conv1.bias, conv2.weight, conv2.bias))
    h, d1 = conv_reference(x.transpose(0, 2, 3, 1), w1, 1, 1)
    h_scale = conv_reference(np.abs(x.transpose(0, 2, 3, 1)), np.abs(w1), 1, 1)[0] + np.abs(b1)
    h = np.maximum(h + b1, 0)
    want, d2 = conv_reference(h, w2, 1, 1)
    eps = np.finfo(np.float32).eps
    bound = conv_reference((d1 + 1) * eps * h_scale, np.abs(w2), 1, 1)[0] + \
        (d2 + 1) * eps * (conv_reference(h, np.abs(w2), 1, 1)[0] + np.abs(b2))
    got = y.numpy().transpose(0, 2, 3, 1)
    assert np.all(np.abs(got - (want + b2)) <= bound)


def test_float64_gradients_read_the_windows_themselves():
    """float64 (AVX2: 4-lane vectors, 8-lane on AVX-512): the weight gradient's A packed
    from the windows, the input gradient's windows read in place; against numpy."""
    z = ndl.Tensor(data((1, 16, 16, 24), np.float64), dtype="float64", requires_grad=True)
    w = ndl.Tensor(data((3, 3, 24, 20), np.float64, seed=1), dtype="float64", requires_grad=True)
    g = data((1, 16, 16, 20), np.float64, seed=2)
    ops.conv(z, w, 1, 1).backward(ndl.Tensor(g, dtype="float64"))
    _, fused = plan(output_nodes([w.grad, z.grad]), cpu_target())
    assert [n.shape for n in fused.order if n.op == "copy" and id(n) in fused.stored] == [(3, 3, 20, 24)]
    zp = np.pad(z.numpy(), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want_dw = np.stack([np.stack([np.einsum("nhwc,nhwo->co", zp[:, a:a + 16, b:b + 16], g)
                                  for b in range(3)]) for a in range(3)])
    np.testing.assert_allclose(w.grad.numpy(), want_dw, rtol=1e-10, atol=1e-10)
    check(z.grad.numpy(), g, np.transpose(w.numpy()[::-1, ::-1], (0, 1, 3, 2)), 1, 1)
