"""Ops that move data: broadcast_to, reshape, transpose, permute, flip, dilate,
undilate, pad, getitem, stack, split, concatenate, make_tuple, tuple_get_item."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.gradcheck import DEVICE_IDS, DEVICES, gradient_check, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)


def check_forward(out, expected, dtype="float64"):
    assert out.shape == expected.shape, f"shape {out.shape} != numpy's {expected.shape}"
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy(), expected)


# ---- broadcast_to ------------------------------------------------------------------------
BROADCAST_CASES = [((3, 1), (3, 4)), ((1, 4), (3, 4)), ((4,), (3, 4)), ((), (2, 3)), ((1,), (5,)),
                   ((2, 1, 3), (4, 2, 5, 3)), ((3, 4), (3, 4)), ((1, 1), (2, 1)), ((3,), (2, 1, 3))]


@pytest.mark.parametrize("src,dst", BROADCAST_CASES, ids=[f"{a}->{b}" for a, b in BROADCAST_CASES])
def test_broadcast_to(device, src, dst):
    x = randn(src, device)
    check_forward(ops.broadcast_to(x, dst), np.broadcast_to(x.numpy(), dst))
    check_forward(x.broadcast_to(dst), np.broadcast_to(x.numpy(), dst))
    gradient_check(lambda t: ops.broadcast_to(t, dst), x)


@pytest.mark.parametrize("src,dst", [((3,), (4,)), ((2, 3), (3,)), ((3, 2), (3, 4)), ((2,), (2, 3))])
def test_broadcast_to_bad_shape(device, src, dst):
    with pytest.raises(ndl.errors.ShapeError, match="broadcast"):
        ops.broadcast_to(randn(src, device), dst)


# ---- reshape -----------------------------------------------------------------------------
RESHAPE_CASES = [((3, 4), (4, 3)), ((3, 4), (12,)), ((3, 4), (2, -1)), ((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)),
                 ((6,), (1, 6, 1)), ((1,), ()), ((), (1, 1)), ((2, 1, 3), (3, 2)), ((4,), 4)]


@pytest.mark.parametrize("src,dst", RESHAPE_CASES, ids=[f"{a}->{b}" for a, b in RESHAPE_CASES])
def test_reshape(device, src, dst):
    x = randn(src, device)
    check_forward(ops.reshape(x, dst), x.numpy().reshape(dst))
    gradient_check(lambda t: ops.reshape(t, dst), x)


def test_reshape_method_forms(device):
    x = randn((2, 6), device)
    for out in (x.reshape(3, 4), x.reshape((3, 4)), x.reshape([3, 4])):
        check_forward(out, x.numpy().reshape(3, 4))


def test_reshape_of_a_transposed_tensor(device):
    # non-contiguous input: the data order is the logical (row-major) one
    x = randn((3, 4), device)
    out = ops.reshape(ops.transpose(x), (2, 6))
    check_forward(out, x.numpy().T.reshape(2, 6))
    gradient_check(lambda t: ops.reshape(ops.transpose(t), (2, 6)), x)


@pytest.mark.parametrize("dst", [(5,), (4, 2), (-1, 5), (-1, -1)])
def test_reshape_bad_shape(device, dst):
    with pytest.raises(ndl.errors.ShapeError, match=r"reshape.*\(2, 3\)"):
        ops.reshape(randn((2, 3), device), dst)


# ---- transpose and permute ---------------------------------------------------------------
TRANSPOSE_CASES = [((3, 4), None), ((2, 3, 4), None), ((2, 3, 4), (0, 1)), ((2, 3, 4), (0, 2)),
                   ((2, 3, 4), (-1, -3)), ((2, 3, 4, 5), (1, 3)), ((1, 3), None), ((3, 4), (1, 0))]


@pytest.mark.parametrize("shape,axes", TRANSPOSE_CASES, ids=[f"{s}-{a}" for s, a in TRANSPOSE_CASES])
def test_transpose(device, shape, axes):
    x = randn(shape, device)
    i, j = (-2, -1) if axes is None else axes
    expected = np.swapaxes(x.numpy(), i, j)
    check_forward(ops.transpose(x, axes), expected)
    check_forward(x.transpose(axes), expected)
    gradient_check(lambda t: ops.transpose(t, axes), x)


def test_transpose_T(device):
    x = randn((2, 3), device)
    check_forward(x.T, x.numpy().T)


def test_transpose_bad_axes(device):
    with pytest.raises(ndl.errors.ShapeError, match="transpose"):
        ops.transpose(randn((3,), device))
    with pytest.raises(ndl.errors.AxisError, match="transpose"):
        ops.transpose(randn((2, 3), device), (0, 2))
    with pytest.raises(ndl.errors.AxisError):
        ops.transpose(randn((2, 3), device), (0, 1, 2))


PERMUTE_CASES = [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (1, 2, 0)), ((2, 3, 4), (0, 1, 2)), ((2, 3), (1, 0)),
                 ((2, 3, 4, 5), (3, 1, 0, 2)), ((2, 3, 4), (-1, 0, 1)), ((1, 3, 1), (2, 1, 0)), ((4,), (0,))]


@pytest.mark.parametrize("shape,axes", PERMUTE_CASES, ids=[f"{s}-{a}" for s, a in PERMUTE_CASES])
def test_permute(device, shape, axes):
    x = randn(shape, device)
    expected = np.transpose(x.numpy(), axes)
    check_forward(ops.permute(x, axes), expected)
    check_forward(x.permute(axes), expected)
    check_forward(x.permute(*axes), expected)
    gradient_check(lambda t: ops.permute(t, axes), x)


@pytest.mark.parametrize("axes", [(0, 0, 1), (0, 1), (0, 1, 3), (0, 1, 5), (0, 1, -4), (0, 1, 2, 3)])
def test_permute_bad_axes(device, axes):
    with pytest.raises(ndl.errors.AxisError, match=r"permute.*\(2, 3, 4\)"):
        ops.permute(randn((2, 3, 4), device), axes)


# ---- flip --------------------------------------------------------------------------------
FLIP_CASES = [((3, 4), (0,)), ((3, 4), (1,)), ((3, 4), (0, 1)), ((2, 3, 4), (-1,)), ((2, 3, 4), (0, 2)),
              ((5,), (0,)), ((1, 3), (0,)), ((2, 3), 1)]


@pytest.mark.parametrize("shape,axes", FLIP_CASES, ids=[f"{s}-{a}" for s, a in FLIP_CASES])
def test_flip(device, shape, axes):
    x = randn(shape, device)
    check_forward(ops.flip(x, axes), np.flip(x.numpy(), axes))
    check_forward(x.flip(axes), np.flip(x.numpy(), axes))
    gradient_check(lambda t: ops.flip(t, axes), x)


def test_flip_twice_and_then_compute(device):
    x = randn((3, 4), device)
    out = ops.flip(ops.flip(x, (0, 1)), (1,)) * 2 + 1
    np.testing.assert_allclose(out.numpy(), np.flip(x.numpy(), 0) * 2 + 1)


# ---- dilate / undilate -------------------------------------------------------------------
def _np_dilate(x, axes, d):
    shape = tuple(s * (d + 1) if i in axes else s for i, s in enumerate(x.shape))
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(None, None, d + 1) if i in axes else slice(None) for i in range(x.ndim))] = x
    return out


DILATE_CASES = [((2, 3), (0,), 1), ((2, 3), (1,), 2), ((2, 3), (0, 1), 1), ((2, 3, 2), (0, 2), 2),
                ((3,), (0,), 0), ((1, 2), (1,), 3), ((2, 3), (-1,), 1)]


@pytest.mark.parametrize("shape,axes,d", DILATE_CASES, ids=[f"{s}-{a}-{d}" for s, a, d in DILATE_CASES])
def test_dilate(device, shape, axes, d):
    x = randn(shape, device)
    norm_axes = tuple(a % len(shape) for a in axes)
    check_forward(ops.dilate(x, axes, d), _np_dilate(x.numpy(), norm_axes, d))
    gradient_check(lambda t: ops.dilate(t, axes, d), x)


def test_dilate_hand_values(device):
    x = tensor([[1.0, 2.0], [3.0, 4.0]], device)
    np.testing.assert_array_equal(ops.dilate(x, (0, 1), 1).numpy(),
                                  [[1, 0, 2, 0], [0, 0, 0, 0], [3, 0, 4, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("shape,axes,d", DILATE_CASES, ids=[f"{s}-{a}-{d}" for s, a, d in DILATE_CASES])
def test_undilate(device, shape, axes, d):
    big = tuple(s * (d + 1) if i in tuple(a % len(shape) for a in axes) else s for i, s in enumerate(shape))
    x = randn(big, device)
    idx = tuple(slice(None, None, d + 1) if i in tuple(a % len(shape) for a in axes) else slice(None)
                for i in range(len(shape)))
    check_forward(ops.undilate(x, axes, d), x.numpy()[idx])
    gradient_check(lambda t: ops.undilate(t, axes, d), x)


def test_undilate_inverts_dilate(device):
    x = randn((2, 3, 4), device)
    np.testing.assert_array_equal(ops.undilate(ops.dilate(x, (0, 2), 2), (0, 2), 2).numpy(), x.numpy())


def test_dilate_bad_arguments(device):
    x = randn((2, 3), device)
    with pytest.raises(ValueError, match="dilate"):
        ops.dilate(x, (0,), -1)
    with pytest.raises(ndl.errors.AxisError, match="dilate"):
        ops.dilate(x, (2,), 1)


# ---- pad ---------------------------------------------------------------------------------
PAD_CASES = [((2, 3), ((1, 0), (0, 2))), ((2, 3), ((0, 0), (0, 0))), ((1, 2, 2, 1), ((0, 0), (1, 1), (2, 2), (0, 0))),
             ((3,), ((2, 3),)), ((2, 2), ((3, 1), (1, 3)))]


@pytest.mark.parametrize("shape,pads", PAD_CASES, ids=[f"{s}-{p}" for s, p in PAD_CASES])
def test_pad(device, shape, pads):
    x = randn(shape, device)
    check_forward(ops.pad(x, pads), np.pad(x.numpy(), pads))
    gradient_check(lambda t: ops.pad(t, pads), x)


def test_pad_of_a_0d_tensor_by_no_axes_copies_it(device):
    """numpy has no pad of a 0-d array; every mode gives the value and a gradient of 1."""
    x = randn((2, 3), device)
    out = ops.pad(x[1, 2], ())
    assert out.shape == ()
    check_forward(out, x.numpy()[1, 2])
    out.backward()
    expected = np.zeros((2, 3), np.float32)
    expected[1, 2] = 1
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_pad_bad_arguments(device):
    x = randn((2, 3), device)
    with pytest.raises(ndl.errors.ShapeError, match=r"pad.*\(2, 3\)"):
        ops.pad(x, ((1, 1),))
    with pytest.raises(ndl.errors.ShapeError, match="pad"):
        ops.pad(x, ((1, 1), (-1, 0)))


# ---- getitem -----------------------------------------------------------------------------
GETITEM_CASES = [
    (1,), (-1,), (slice(1, 3),), (slice(None, None, 2),), (slice(None, None, -1),), (slice(-2, None),),
    (slice(3, 0, -2),), (1, 2), (slice(None), -1), (None,), (None, 1), (Ellipsis, 0), (Ellipsis, None),
    (0, Ellipsis, slice(None, None, -2)), (slice(1, 2), None, slice(0, 4, 3)), (slice(2, 2),),
    (slice(None), slice(None), 1), (-2, None, slice(None), None),
]


def _idx_id(idx):
    return "".join("N" if i is None else "E" if i is Ellipsis else
                   f"{'' if i.start is None else i.start}:{'' if i.stop is None else i.stop}"
                   f"{'' if i.step is None else ':' + str(i.step)}" if isinstance(i, slice) else str(i)
                   for i in idx).replace("::", "..") or "()"


@pytest.mark.parametrize("idx", GETITEM_CASES, ids=[f"{k}:{_idx_id(i)}" for k, i in enumerate(GETITEM_CASES)])
def test_getitem(device, idx):
    x = randn((3, 4, 5), device)
    expected = x.numpy()[idx]
    check_forward(x[idx], expected)
    check_forward(ops.getitem(x, idx), expected)
    gradient_check(lambda t: t[idx], x)


def test_getitem_single_index_forms(device):
    x = randn((4, 3), device)
    for idx in (2, -4, slice(1, None), Ellipsis, None, np.int64(1)):
        check_forward(x[idx], x.numpy()[idx])


def test_getitem_of_view_then_compute(device):
    x = randn((4, 6), device)
    out = ops.transpose(x)[::-2, 1:3] * 3.0
    np.testing.assert_allclose(out.numpy(), x.numpy().T[::-2, 1:3] * 3.0)
    gradient_check(lambda t: ops.exp(ops.transpose(t)[::-2, 1:3]), x)


def test_getitem_same_tensor_twice_accumulates(device):
    x = tensor([1.0, 2.0, 3.0], device)
    out = x[0:2] * x[1:3]
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 1.0 + 3.0, 2.0])


@pytest.mark.parametrize("idx", [(3,), (-4,), (0, 0, 0), (slice(0, 1, 0),), ([0, 5],), (1.5,)])
def test_getitem_bad_index(device, idx):
    with pytest.raises(IndexError, match="getitem"):
        randn((3, 4), device)[idx]


# ---- stack / split / concatenate ---------------------------------------------------------
STACK_CASES = [((2, 3), 0, 3), ((2, 3), 1, 2), ((2, 3), 2, 4), ((2, 3), -1, 2), ((2, 3), -3, 2), ((4,), 0, 1),
               ((), 0, 3)]


@pytest.mark.parametrize("shape,axis,n", STACK_CASES, ids=[f"{s}-{a}-{n}" for s, a, n in STACK_CASES])
def test_stack(device, shape, axis, n):
    xs = [randn(shape, device) for _ in range(n)]
    check_forward(ops.stack(xs, axis), np.stack([x.numpy() for x in xs], axis))
    check_forward(ops.stack(tuple(xs), axis), np.stack([x.numpy() for x in xs], axis))
    gradient_check(lambda *ts: ops.stack(ts, axis), *xs)


def test_stack_same_tensor_twice(device):
    x = tensor([1.0, 2.0], device)
    out = ops.stack([x, x * 2, x], 0)
    out.backward(tensor([[1.0, 1.0], [1.0, 1.0], [5.0, 7.0]], device, requires_grad=False))
    np.testing.assert_allclose(x.grad.numpy(), [1 + 2 + 5, 1 + 2 + 7])


def test_stack_bad_shapes(device):
    with pytest.raises(ndl.errors.ShapeError, match=r"stack.*\(2, 3\).*\(3, 2\)"):
        ops.stack([randn((2, 3), device), randn((3, 2), device)], 0)
    with pytest.raises(ndl.errors.AxisError, match="stack"):
        ops.stack([randn((2, 3), device)] * 2, 3)


SPLIT_CASES = [((3, 4), 0), ((3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), 1), ((1, 2), 0), ((5,), 0)]


@pytest.mark.parametrize("shape,axis", SPLIT_CASES, ids=[f"{s}-{a}" for s, a in SPLIT_CASES])
def test_split(device, shape, axis):
    x = randn(shape, device)
    parts = ops.split(x, axis)
    assert isinstance(parts, ndl.TensorTuple)
    assert len(parts) == shape[axis]
    for i in range(len(parts)):
        check_forward(parts[i], np.take(x.numpy(), i, axis=axis))
    weights = [np.random.randn(*np.take(x.numpy(), 0, axis=axis).shape) for _ in range(len(parts))]

    def f(t):  # uses every piece, each with its own weight
        pieces = ops.split(t, axis)
        total = None
        for i, w in enumerate(weights):
            term = ops.multiply(pieces[i], tensor(w, device, requires_grad=False))
            total = term if total is None else total + term
        return total
    gradient_check(f, x)


def test_split_one_piece_used(device):
    x = randn((3, 2), device)
    ops.split(x, 0)[1].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0], [1, 1], [0, 0]])


def test_split_then_stack_is_identity(device):
    x = randn((2, 3, 4), device)
    np.testing.assert_array_equal(ops.stack(ops.split(x, 1), 1).numpy(), x.numpy())
    gradient_check(lambda t: ops.stack(ops.split(t, 2), 0), x)


CONCAT_CASES = [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 2)], 1), ([(2, 3, 1), (2, 3, 2)], -1),
                ([(3,), (1,)], 0), ([(2, 3)], 1)]


@pytest.mark.parametrize("shapes,axis", CONCAT_CASES, ids=[f"{s}-{a}" for s, a in CONCAT_CASES])
def test_concatenate(device, shapes, axis):
    xs = [randn(s, device) for s in shapes]
    check_forward(ops.concatenate(xs, axis), np.concatenate([x.numpy() for x in xs], axis))
    gradient_check(lambda *ts: ops.concatenate(ts, axis), *xs)


def test_concatenate_bad_shapes(device):
    with pytest.raises(ndl.errors.ShapeError, match=r"concatenate.*\(2, 3\).*\(2, 4\)"):
        ops.concatenate([randn((2, 3), device), randn((2, 4), device)], 0)


# ---- tuples ------------------------------------------------------------------------------
def test_make_tuple_and_tuple_get_item(device):
    a, b = randn((2, 3), device), randn((4,), device)
    t = ops.make_tuple(a, b)
    assert isinstance(t, ndl.TensorTuple)
    assert len(t) == 2
    check_forward(ops.tuple_get_item(t, 0), a.numpy())
    check_forward(t[1], b.numpy())
    check_forward(ops.tuple_get_item(t, -1), b.numpy())
    assert [x.shape for x in t.tuple()] == [(2, 3), (4,)]
    with pytest.raises(IndexError, match="tuple_get_item"):
        ops.tuple_get_item(t, 2)
    with pytest.raises(TypeError, match="tuple_get_item"):
        ops.tuple_get_item(a, 0)


def test_tuple_gradients(device):
    a, b = randn((2, 3), device), randn((3,), device)

    def f(x, y):
        t = ops.make_tuple(ops.exp(x), y * 2)
        return ops.tuple_get_item(t, 0) * ops.tuple_get_item(t, 1) + ops.tuple_get_item(t, 1)
    gradient_check(f, a, b)


def test_tuple_get_item_of_op_output_gradient(device):
    # tuple_get_item on a TensorTuple produced by an op (not make_tuple) has its own gradient
    x = randn((3, 2), device)
    gradient_check(lambda t: ops.tuple_get_item(ops.split(t, 0), 1) * ops.tuple_get_item(ops.split(t, 0), -1), x)


def test_tensor_tuple_addition(device):
    a, b = randn((2,), device), randn((3,), device)
    s = ops.make_tuple(a, b) + ops.make_tuple(b[0:2], a[0:1].broadcast_to((3,)))
    np.testing.assert_allclose(s[0].numpy(), a.numpy() + b.numpy()[:2])
    np.testing.assert_allclose(s[1].numpy(), b.numpy() + a.numpy()[0])
