"""View algebra (needle.compiler.views) against numpy.

A View is read here by its own definition — element `offset + sum(strides * i)` of
a flat buffer, zero where a mask constraint fails — and compared with numpy
applied to the same chain of movement ops on the same data.
"""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from needle.compiler.views import View


# ---- reading a view by its definition ----------------------------------------------------------
def read(view: View, flat: np.ndarray) -> np.ndarray:
    """The values a kernel reads through `view` from `flat` (independent of the
    reference executor).  Fails if a valid position points outside `flat`."""
    out = np.zeros(view.shape, dtype=flat.dtype)
    for i in np.ndindex(*view.shape):
        if view.empty:
            continue
        if not all(lo <= sum(c * k for c, k in zip(coeffs, i)) < hi for coeffs, lo, hi in view.mask):
            continue
        at = view.offset + sum(s * k for s, k in zip(view.strides, i))
        assert 0 <= at < flat.size, f"{view} reads element {at} of {flat.size} at index {i}"
        out[i] = flat[at]
    return out


def numpy_reshape_ok(shape, funcs, new_shape) -> bool:
    """Whether every linear function (as strides) survives reshape without a copy,
    asked of numpy's own no-copy reshape."""
    if math.prod(shape) == 0:
        return True
    for f in funcs:
        dummy = np.lib.stride_tricks.as_strided(np.zeros(1), shape, tuple(8 * c for c in f))
        try:
            dummy.reshape(new_shape, copy=False)
        except ValueError:
            return False
    return True


# ---- numpy meanings of the movement ops --------------------------------------------------------
def np_window(x, axes, kernel, step):
    w = np.lib.stride_tricks.sliding_window_view(x, kernel, axis=axes)
    w = w[tuple(slice(None, None, step) if d in axes else slice(None) for d in range(x.ndim))]
    last = axes[-1]
    order = list(range(last + 1)) + list(range(x.ndim, x.ndim + len(kernel))) + list(range(last + 1, x.ndim))
    return np.transpose(w, order)


def np_apply(x, op, arg):
    if op == "permute":
        return np.transpose(x, arg)
    if op == "expand":
        return np.broadcast_to(x, arg)
    if op == "shrink":
        return x[tuple(slice(a, b) for a, b in arg)]
    if op == "flip":
        return np.flip(x, arg)
    if op == "stride":
        return x[tuple(slice(None, None, s) for s in arg)]
    if op == "pad":
        return np.pad(x, arg)
    if op == "window":
        return np_window(x, *arg)
    if op == "reshape":
        return x.reshape(arg)
    if op == "as_strided":
        shape, strides, offset = arg
        flat = np.ascontiguousarray(x).reshape(-1)[offset:]
        return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * flat.itemsize for s in strides))
    raise AssertionError(op)


def view_apply(view, op, arg):
    if op == "window":
        return view.window(*arg)
    if op == "as_strided":
        return view.as_strided(*arg)
    return getattr(view, op)(arg)


# ---- random chains -----------------------------------------------------------------------------
OPS = ("permute", "expand", "shrink", "flip", "stride", "pad", "window", "reshape", "as_strided")


def factorizations(n, parts):
    """Some ways to write n as an ordered product (for reshapes)."""
    if parts == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out += [(d,) + rest for rest in factorizations(n // d, parts - 1)]
    return out


@st.composite
def movement(draw, shape):
    """One movement op that applies to `shape`, with its argument."""
    nd = len(shape)
    op = draw(st.sampled_from(OPS))
    if op == "permute":
        return op, tuple(draw(st.permutations(range(nd))))
    if op == "expand":
        return op, tuple(draw(st.sampled_from([1, 3])) if n == 1 else n for n in shape)
    if op == "shrink":
        bounds = []
        for n in shape:
            a = draw(st.integers(0, n))
            bounds.append((a, draw(st.integers(a, n))))
        return op, tuple(bounds)
    if op == "flip":
        return op, tuple(d for d in range(nd) if draw(st.booleans()))
    if op == "stride":
        return op, tuple(draw(st.integers(1, 3)) for _ in shape)
    if op == "pad":
        return op, tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    if op == "window":
        if nd == 0 or min(shape) == 0:
            return "flip", ()
        first = draw(st.integers(0, nd - 1))
        last = draw(st.integers(first, min(nd - 1, first + 1)))
        kernel = tuple(draw(st.integers(1, shape[a])) for a in range(first, last + 1))
        return op, (tuple(range(first, last + 1)), kernel, draw(st.integers(1, 2)))
    if op == "reshape":
        size = math.prod(shape)
        if size == 0:
            return op, (0,)
        parts = draw(st.integers(1, 3))
        new_shape = draw(st.sampled_from(factorizations(size, parts)))
        return op, new_shape
    # as_strided over the row-major order of the current (size) elements
    size = math.prod(shape)
    if size == 0:
        return "flip", ()
    out_nd = draw(st.integers(1, 2))
    new_shape = tuple(draw(st.integers(1, 3)) for _ in range(out_nd))
    strides = tuple(draw(st.integers(0, 3)) for _ in range(out_nd))
    span = sum((n - 1) * s for n, s in zip(new_shape, strides))
    if span >= size:
        return "flip", ()
    return op, (new_shape, strides, draw(st.integers(0, size - 1 - span)))


@st.composite
def chains(draw):
    base = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    shape, chain = base, []
    for _ in range(draw(st.integers(1, 6))):
        op, arg = draw(movement(shape))
        chain.append((op, arg))
        probe = np_apply(np.zeros(shape), op, arg)
        shape = probe.shape
        if math.prod(shape) > 400:
            break
    return base, chain


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_random_chains_match_numpy(case):
    base, chain = case
    flat = np.arange(1, math.prod(base) + 1, dtype=np.int64)  # no zeros: masked reads are visible
    x = flat.reshape(base)
    view = View.contiguous(base)
    for op, arg in chain:
        new = view_apply(view, op, arg)
        expected_value = np_apply(read(view, flat), op, arg)
        if op == "reshape":
            ok = numpy_reshape_ok(view.shape, view.linear_functions() if not view.empty else [view.strides], arg)
            assert (new is not None) == ok, f"reshape {view} -> {arg}: got {new}, numpy says ok={ok}"
        if op == "as_strided":
            assert (new is not None) == view.is_contiguous(), (view, arg, new)
        if new is None:
            return  # the caller would copy here; nothing more to check on this chain
        x = np_apply(x, op, arg)
        view = new
        assert view.shape == x.shape
        got = read(view, flat)
        np.testing.assert_array_equal(got, x, err_msg=f"{view} after {chain}")
        np.testing.assert_array_equal(got, expected_value)
        check_simplified(view, got)


def check_simplified(view: View, values: np.ndarray) -> None:
    """No always-true constraint survives; an empty view has no constraints and
    reads only zeros; size-1 dims carry no stride."""
    if math.prod(view.shape) == 0:
        return  # nothing is read
    for coeffs, lo, hi in view.mask:
        low = sum(min(0, c * (n - 1)) for c, n in zip(coeffs, view.shape))
        high = sum(max(0, c * (n - 1)) for c, n in zip(coeffs, view.shape))
        assert not (lo <= low and high < hi), f"always-true constraint kept in {view}"
        assert any(coeffs), f"constant constraint kept in {view}"
    if view.empty:
        assert view.mask == ()
        assert not values.any()
    for n, s in zip(view.shape, view.strides):
        if n == 1:
            assert s == 0, f"size-1 dim with stride {s} in {view}"


# ---- specific cases ----------------------------------------------------------------------------
def test_contiguous_and_strided():
    v = View.contiguous((2, 3, 4))
    assert v.strides == (12, 4, 1) and v.offset == 0 and v.mask == () and v.is_contiguous()
    assert View.contiguous((3, 1, 4)).strides == (4, 0, 1)  # size-1 dims: stride 0
    assert View.strided((3, 1), (5, 7)).strides == (5, 0)


def test_permute_then_merge_is_not_expressible():
    v = View.contiguous((3, 4)).permute((1, 0))
    assert v.strides == (1, 4)
    assert v.reshape((12,)) is None
    assert v.reshape((2, 2, 3)) is not None  # splitting a dim is always fine
    assert v.reshape((2, 2, 3)).strides == (2, 1, 4)
    assert View.contiguous((2, 3, 4)).permute((0, 2, 1)).reshape((2, 12)) is None
    assert View.contiguous((2, 3, 4)).permute((1, 0, 2)).reshape((6, 4)) is None
    assert View.contiguous((2, 3, 4)).permute((1, 0, 2)).reshape((3, 8)) is None
    # merging the untouched trailing dims stays expressible
    assert View.contiguous((2, 3, 4, 5)).permute((1, 0, 2, 3)).reshape((3, 2, 20)).strides == (20, 60, 1)


def test_broadcast_merge_and_split():
    v = View.contiguous((1, 4)).expand((3, 4))
    assert v.strides == (0, 1)
    assert v.reshape((12,)) is None  # (0, 1) cannot merge into one stride
    assert View.contiguous((3, 1)).expand((3, 4)).reshape((3, 2, 2)).strides == (1, 0, 0)
    # a broadcast of a broadcast merges: all strides 0
    assert View.contiguous((1, 1)).expand((3, 4)).reshape((12,)).strides == (0,)


def test_pad_mask_and_simplification():
    v = View.contiguous((3,)).pad(((2, 1),))
    assert v.shape == (6,) and v.offset == -2
    assert v.mask == (((1,), 2, 5),)
    # shrinking back to the data drops the constraint
    back = v.shrink(((2, 5),))
    assert back.mask == () and not back.empty and back.offset == 0 and back.strides == (1,)
    # shrinking to one side keeps only a one-sided, still necessary constraint
    assert v.shrink(((0, 4),)).mask == (((1,), 2, 5),)
    # only padding left: flagged empty, no constraints kept
    only_pad = v.shrink(((0, 2),))
    assert only_pad.empty and only_pad.mask == ()
    assert not read(only_pad, np.arange(1, 4)).any()
    only_pad_2d = View.contiguous((2, 2)).pad(((0, 0), (0, 3))).shrink(((0, 2), (3, 5)))
    assert only_pad_2d.empty


def test_pad_then_reshape():
    # merging a padded dim with its outer neighbour: the mask is not linear in the merged index
    v = View.contiguous((2, 3)).pad(((0, 0), (1, 1)))
    assert v.reshape((10,)) is None
    # splitting a padded dim keeps a linear mask
    w = View.contiguous((2, 6)).pad(((0, 0), (3, 3)))
    split = w.reshape((2, 4, 3))
    assert split is not None
    flat = np.arange(1, 13)
    np.testing.assert_array_equal(read(split, flat), np.pad(flat.reshape(2, 6), ((0, 0), (3, 3))).reshape(2, 4, 3))
    np.testing.assert_array_equal(
        read(View.contiguous((2, 6)).pad(((0, 0), (1, 1))).reshape((2, 4, 2)), flat),
        np.pad(flat.reshape(2, 6), ((0, 0), (1, 1))).reshape(2, 4, 2))
    # padding the outer dim then merging: the constraint 1 <= i0 < 3 is 3 <= i < 9 on
    # the merged index, but masks reshape coefficient-wise, so this is (for now) a copy
    assert View.contiguous((2, 3)).pad(((1, 1), (0, 0))).reshape((12,)) is None


def test_flip_and_stride():
    v = View.contiguous((5, 4)).flip((0,)).stride((2, 3))
    flat = np.arange(20)
    np.testing.assert_array_equal(read(v, flat), flat.reshape(5, 4)[::-1][::2, ::3])
    assert v.strides == (-8, 3) and v.offset == 16


def test_window_is_im2col():
    x = np.arange(2 * 5 * 6 * 3).reshape(2, 5, 6, 3)
    v = View.contiguous(x.shape).pad(((0, 0), (1, 1), (1, 1), (0, 0))).window((1, 2), (3, 3), 2)
    assert v.shape == (2, 3, 3, 3, 3, 3)
    np.testing.assert_array_equal(read(v, x.reshape(-1)),
                                  np_window(np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), (1, 2), (3, 3), 2))
    # the im2col matrix of a stride-1 unpadded window is not a view of (rows, cols)
    w = View.contiguous((1, 4, 4, 2)).window((1, 2), (2, 2), 1)
    assert w.reshape((9, 8)) is None
    assert w.reshape((9, 2, 2, 2)) is None
    assert w.reshape((1, 3, 3, 2, 4)) is not None  # (kw, c) merge: contiguous


def test_as_strided_needs_contiguous():
    assert View.contiguous((3, 4)).permute((1, 0)).as_strided((2, 2), (1, 1), 0) is None
    v = View.contiguous((3, 4)).shrink(((1, 3), (0, 4))).as_strided((3, 2), (2, 1), 1)
    assert v is not None and v.offset == 5 and v.strides == (2, 1)
    flat = np.arange(12)
    np.testing.assert_array_equal(read(v, flat), np_apply(flat.reshape(3, 4)[1:3], "as_strided", ((3, 2), (2, 1), 1)))


def test_zero_size_views():
    v = View.contiguous((3, 4)).shrink(((1, 1), (0, 4)))
    assert v.shape == (0, 4) and not v.empty
    assert v.reshape((0,)).shape == (0,)
    assert View.contiguous((2,)).pad(((1, 1),)).shrink(((0, 0),)).empty is False


def test_padding_of_an_empty_dim_is_empty():
    v = View.contiguous((0, 3)).pad(((1, 1), (0, 0)))
    assert v.shape == (2, 3)
    assert v.empty and v.mask == ()
