"""Pass 1, view folding: movement ops disappear into `view` nodes over bases.

Each case checks the pass's guarantees on the folded graph — no movement node
left, every view reads a base, values equal to the original graph's (the
reference executor runs both) — plus what the case is about (copies inserted,
strides of the views).
"""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.backend_ndarray.ndarray import NDArray
from needle.compiler.view_folding import fold_views
from needle.compiler.views import View
from needle.ir import build, reference, toposort
from needle.ir.nodes import ELEMENTWISE, MOVEMENT
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
#: what a view may read: loads and the nodes the compiler stores
BASES = ("buffer", "const", "param", "reduce_sum", "reduce_max", "matmul", "assemble", "copy")


def leaf(x):
    x = np.asarray(x)
    return build.buffer(NDArray(x, device=CPU, dtype=x.dtype.name))


def randn(*shape):
    return np.random.randn(*shape).astype(np.float32)


def fold_and_check(outputs, read_windows: bool = False):
    """Fold `outputs`, check the pass's guarantees, return the folded graph."""
    expected = reference.evaluate(outputs)
    folded = fold_views(outputs, read_windows)
    nodes = toposort(folded.outputs)
    for n in nodes:
        assert n.op not in MOVEMENT, f"movement node {n} left after folding"
        if n.op == "view":
            base = n.srcs[0]
            assert isinstance(n.arg, View) and n.shape == n.arg.shape
            assert base.op in BASES or (base.op in ELEMENTWISE and (id(base) in folded.reasons or any(
                base is o for o in folded.outputs))), \
                f"{n} reads {base}, which is not a base"
        if n.op == "copy":
            assert folded.reasons.get(id(n)), "a copy without a reason"
    got = reference.evaluate(folded.outputs)
    for g, e, o in zip(got, expected, outputs):
        assert g.shape == e.shape == o.shape
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    return folded


def ops_of(folded, op):
    return [n for n in toposort(folded.outputs) if n.op == op]


def test_transposed_input_read_through_strides():
    a = randn(3, 5)
    out = build.elementwise("exp", build.permute(leaf(a), (1, 0)))
    folded = fold_and_check([out])
    assert not ops_of(folded, "copy")
    (view,) = ops_of(folded, "view")
    assert view.srcs[0].op == "buffer"
    assert view.arg.strides == (1, 5) and view.arg.shape == (5, 3)


def test_broadcast_input_read_through_strides():
    a, b = randn(4, 6), randn(6)
    row = build.expand(build.reshape(leaf(b), (1, 6)), (4, 6))
    col = build.expand(build.reshape(leaf(randn(4)), (4, 1)), (4, 6))
    out = build.elementwise("add", build.elementwise("mul", leaf(a), row), col)
    folded = fold_and_check([out])
    assert not ops_of(folded, "copy")
    strides = sorted(v.arg.strides for v in ops_of(folded, "view"))
    assert strides == [(0, 1), (1, 0), (6, 1)]


def test_non_contiguous_leaf_uses_its_own_strides():
    x = NDArray(randn(4, 6), device=CPU).permute((1, 0))  # a transposed NDArray, no copy
    out = build.elementwise("neg", build.buffer(x))
    folded = fold_and_check([out])
    (view,) = ops_of(folded, "view")
    assert view.arg.strides == (1, 6)
    assert not ops_of(folded, "copy")


def test_tensor_transpose_and_broadcast_are_not_copied():
    x = ndl.Tensor(randn(8, 5), device=CPU)
    b = ndl.Tensor(randn(8), device=CPU)
    out = ops.transpose(x) * ops.broadcast_to(ops.reshape(b, (1, 8)), (5, 8))
    folded = fold_and_check(output_nodes([out]))
    assert not ops_of(folded, "copy")
    assert sorted(v.arg.strides for v in ops_of(folded, "view")) == [(0, 1), (1, 5)]


def test_reshape_of_permuted_data_inserts_one_copy():
    a = randn(3, 4)
    moved = build.reshape(build.permute(build.elementwise("exp", leaf(a)), (1, 0)), (12,))
    out = build.elementwise("neg", moved)
    folded = fold_and_check([out])
    copies = ops_of(folded, "copy")
    assert len(copies) == 1
    assert "reshape" in folded.reasons[id(copies[0])]
    # the copy stores the transposed exp, read contiguously afterwards
    assert copies[0].shape == (4, 3)


def test_reshape_of_permuted_leaf_inserts_one_copy():
    a = randn(2, 3, 4)
    out = build.elementwise("add", build.reshape(build.permute(leaf(a), (0, 2, 1)), (2, 12)), leaf(randn(2, 12)))
    folded = fold_and_check([out])
    assert len(ops_of(folded, "copy")) == 1


def test_reshape_that_strides_express_needs_no_copy():
    a = randn(2, 3, 4)
    moved = build.reshape(build.permute(leaf(a), (1, 0, 2)), (3, 2, 2, 2))  # only splits
    out = build.elementwise("exp", build.reshape(leaf(a), (6, 4)))
    folded = fold_and_check([build.elementwise("neg", moved), out])
    assert not ops_of(folded, "copy")


def test_pad_through_elementwise_is_zero_in_the_padding():
    # exp(0) = 1: padding must not be pushed below the exp as plain zeros
    a = randn(3, 4)
    padded = build.pad(build.elementwise("exp", leaf(a)), ((1, 2), (0, 3)))
    out = build.elementwise("add", padded, build.const(1.0, padded.shape, "float32", CPU))
    folded = fold_and_check([out])
    assert not ops_of(folded, "copy")
    value = reference.evaluate(folded.outputs)[0]
    np.testing.assert_allclose(value, np.pad(np.exp(a), ((1, 2), (0, 3))) + 1, rtol=1e-6)


def test_pad_of_pad_flip_and_shrink():
    a = randn(5, 3)
    x = build.elementwise("tanh", leaf(a))
    x = build.pad(build.flip(x, (0,)), ((2, 0), (1, 1)))
    x = build.shrink(build.elementwise("mul", x, x), ((1, 6), (0, 4)))
    x = build.pad(build.stride(x, (2, 1)), ((0, 1), (2, 0)))
    folded = fold_and_check([build.elementwise("neg", x)])
    assert not ops_of(folded, "copy")


def test_conv_im2col_is_a_view():
    z = ndl.Tensor(randn(2, 7, 6, 3), device=CPU)
    w = ndl.Tensor(randn(3, 3, 3, 4), device=CPU)
    out = ops.conv(z, w, stride=2, padding=1)
    folded = fold_and_check(output_nodes([out]))
    mm = ops_of(folded, "matmul")
    assert len(mm) == 1
    # the window view of the padded input cannot be flattened into (rows, cols) by
    # strides, so it is stored once (the im2col matrix); the weights are a view
    assert len(ops_of(folded, "copy")) == 1


def test_getitem_with_negative_steps():
    x = ndl.Tensor(randn(9, 8, 3), device=CPU)
    out = x[::-2, 6:1:-3, 1] * 2.0
    folded = fold_and_check(output_nodes([out]))
    assert not ops_of(folded, "copy")
    np.testing.assert_allclose(reference.evaluate(folded.outputs)[0], x.numpy()[::-2, 6:1:-3, 1] * 2.0, rtol=1e-6)


def test_stack_concatenate_dilate():
    a, b = ndl.Tensor(randn(3, 4), device=CPU), ndl.Tensor(randn(3, 4), device=CPU)
    outs = [ops.stack([a, ops.exp(b)], 1),
            ops.concatenate([a, ops.transpose(b)[1:, ::-1] + 1.0], 1),
            ops.dilate(ops.transpose(a), (0, 1), 2)]
    folded = fold_and_check(output_nodes(outs))
    assert len(ops_of(folded, "assemble")) == 3


def test_concatenate_of_views():
    a = leaf(randn(3, 4))
    b = build.permute(leaf(randn(5, 3)), (1, 0))  # (3, 5)
    cat = build.elementwise("neg", build.permute(leaf(randn(2, 3)), (1, 0)).concatenate([
        build.permute(leaf(randn(2, 3)), (1, 0)), a, b], axis=1))
    fold_and_check([cat])


def test_scatter_getitem_adjoint():
    g = leaf(randn(3, 2))
    out = build.elementwise("exp", g.scatter((7, 5), (slice(None, None, -3), slice(1, 5, 2))))
    fold_and_check([out])


def test_as_strided_and_window_of_computed_values():
    a = randn(4, 6)
    e = build.elementwise("exp", leaf(a))
    strided = build.as_strided(e, (3, 4), (5, 1), 2)
    win = build.window(build.reshape(e, (1, 4, 6, 1)), (1, 2), (2, 3), 1)
    fold_and_check([build.elementwise("neg", strided), build.elementwise("neg", win)])


def test_an_output_read_through_a_view_is_read_stored():
    # A cheap elementwise output (a clipped weight the schedule stores) read transposed by
    # a matmul: the matmul reads the stored value, not a copy of its expression over the
    # view (which would be a different kernel body, so a differently rounded sum).
    w = leaf(randn(6, 4))
    clipped = build.elementwise("mul", w, w)
    mm = build.matmul(leaf(randn(3, 4)), build.permute(clipped, (1, 0)))
    folded = fold_and_check([clipped, mm])
    stored_clip = folded.outputs[0]
    assert stored_clip.op == "mul"
    matmul = ops_of(folded, "matmul")[0]
    operand = matmul.srcs[1]
    assert operand.op == "view" and operand.srcs[0] is stored_clip
    assert len(ops_of(folded, "mul")) == 1


def test_shared_node_seen_through_two_views():
    a = randn(6, 6)
    cheap = build.elementwise("mul", leaf(a), leaf(a))
    costly = build.elementwise("exp", build.elementwise("exp", build.elementwise("exp", leaf(a))))
    out_cheap = build.elementwise("add", cheap, build.permute(cheap, (1, 0)))
    out_costly = build.elementwise("add", costly, build.permute(costly, (1, 0)))
    folded = fold_and_check([out_cheap])
    assert not folded.reasons  # cheap: recomputed by both readers, nothing stored
    folded = fold_and_check([out_costly])
    stored = [n for n in toposort(folded.outputs) if id(n) in folded.reasons]
    assert [n.op for n in stored] == ["exp"]
    assert "views" in folded.reasons[id(stored[0])]


def test_movement_of_a_reduction_reads_the_stored_result():
    a = randn(4, 5)
    s = build.reduce("reduce_sum", leaf(a), (1,))
    out = build.elementwise("mul", build.expand(s, (4, 5)), leaf(a))
    folded = fold_and_check([out])
    views = [v for v in ops_of(folded, "view") if v.srcs[0].op == "reduce_sum"]
    assert len(views) == 1 and views[0].arg.strides == (1, 0)


@pytest.mark.parametrize("channels, stored", [(16, True), (3, False)])
def test_a_computed_activation_is_stored_padded_before_its_windows(channels, stored):
    """exp(x) padded and read through 3x3 windows (a conv of a computed activation):
    with runs of >= 16 channels the padded activation is stored once (the conv's
    matmul reads the windows in place from it, unmasked), with 3 the windows read
    the expression through the im2col copy as before."""
    x = leaf(randn(2, 16, 16, channels))
    padded = build.pad(build.elementwise("exp", x), ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = build.window(padded, (1, 2), (3, 3), 1)
    out = build.reshape(windows, (2 * 16 * 16, 9 * channels))
    folded = fold_and_check([out], read_windows=True)
    shapes = [n.shape for n in ops_of(folded, "copy")]
    assert ((2, 18, 18, channels) in shapes) == stored, shapes
    assert (2, 16, 16, 3, 3, channels) in shapes  # the im2col copy (fusion decides whether it is stored)


def test_channels_first_data_is_stored_channels_last_before_its_windows():
    """NCHW data permuted to NHWC and windowed: its channels lie H*W apart, so the
    permuted, padded data is stored first and the windows read contiguous runs."""
    x = leaf(randn(2, 16, 16, 16))
    nhwc = build.pad(build.permute(x, (0, 2, 3, 1)), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = build.reshape(build.window(nhwc, (1, 2), (3, 3), 1), (2 * 16 * 16, 9 * 16))
    folded = fold_and_check([out], read_windows=True)
    assert sorted(n.shape for n in ops_of(folded, "copy")) == [(2, 16, 16, 3, 3, 16), (2, 18, 18, 16)]
    # a target whose matmuls read no windows in place (CUDA) gathers the im2col copy directly
    assert [n.shape for n in ops_of(fold_and_check([out]), "copy")] == [(2, 16, 16, 3, 3, 16)]


@pytest.mark.parametrize("size, channels, stored", [(8, 16, True), (20, 16, True), (32, 16, False), (8, 3, False)])
def test_a_small_padded_image_is_stored_padded_before_its_windows(size, channels, stored):
    """An NHWC buffer padded by one pixel and read through 3x3 windows: when padding
    makes it at least PADDED_COPY_MIN_RATIO times larger (8 x 8: 1.56; 20 x 20: 1.21;
    32 x 32: 1.13) and runs of channels are long enough to be read in place, the
    padded image is stored once and the windows read it unmasked; otherwise they
    read the buffer through the padding's mask."""
    x = leaf(randn(2, size, size, channels))
    padded = build.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = build.reshape(build.window(padded, (1, 2), (3, 3), 1), (2 * size * size, 9 * channels))
    folded = fold_and_check([out], read_windows=True)
    assert ((2, size + 2, size + 2, channels) in [n.shape for n in ops_of(folded, "copy")]) == stored
    masked = {v.shape for v in ops_of(folded, "view") if v.arg.mask}
    # stored: only the copy reads the padding's mask; else the windows themselves do
    assert masked == ({(2, size + 2, size + 2, channels)} if stored else {(2, size, size, 3, 3, channels)})


def test_windows_over_a_last_axis_of_one_are_not_copied_again_and_again(monkeypatch):
    """A last axis of one element has no stride to fix: with windows read in place from
    runs of one channel (WINDOW_RUN lowered to 1), a copy's windows once recursed
    without end, its size-1 axis seen as strided."""
    from needle.compiler import view_folding
    monkeypatch.setattr(view_folding, "WINDOW_RUN", 1)
    x = leaf(randn(1, 2, 2, 1))
    out = build.reshape(build.window(build.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), (1, 2), (2, 2), 1), (9, 4))
    folded = fold_and_check([out], read_windows=True)
    assert len(ops_of(folded, "copy")) <= 2
