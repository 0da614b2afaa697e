"""NDArray against numpy: strided views (shape, element strides, offset, values,
shared storage), copies, writes through views, arithmetic, reductions, matmul,
dtypes, devices and errors."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import needle as ndl
from needle import backend_ndarray as nd
from needle.backend_ndarray import NDArray

DEVICES = [nd.cpu(), nd.cpu_numpy()] + ([nd.cuda()] if nd.cuda().enabled() else [])
device_param = pytest.mark.parametrize("device", DEVICES, ids=[str(d) for d in DEVICES])


# ---- helpers -----------------------------------------------------------------------------
def element_strides(a: np.ndarray) -> tuple:
    return tuple(s // a.itemsize for s in a.strides)


def element_offset(view: np.ndarray, base: np.ndarray) -> int:
    """Offset of `view`'s first element in `base`'s buffer, in elements."""
    delta = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert delta % view.itemsize == 0
    return delta // view.itemsize


def check_view(got: NDArray, want: np.ndarray, base: np.ndarray = None):
    """`got` has numpy's shape, values, strides and offset.  Strides of length-1 axes
    carry no information (numpy itself leaves them unspecified), so they are skipped;
    strides and offset of empty arrays likewise."""
    assert isinstance(got, NDArray)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    if want.size == 0:
        return
    for axis, (n, s, t) in enumerate(zip(want.shape, got.strides, element_strides(want))):
        if n != 1:
            assert s == t, f"stride of axis {axis}: {got.strides} vs numpy's {element_strides(want)}"
    if base is not None:
        assert got.offset == element_offset(want, base)


def same_storage(a: NDArray, b: NDArray) -> bool:
    """Write through all of `a` and see whether `b` changes (then undo)."""
    if a.size == 0 or b.size == 0:
        return False
    before, saved = b.numpy().copy(), a.numpy().copy()  # numpy() of a compact array shares its storage
    a.flat[:] = (saved + 100).ravel()
    changed = not np.array_equal(before, b.numpy())
    a.flat[:] = saved.ravel()
    return changed


def arange(shape, device, dtype="float32"):
    base = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    return nd.array(base, device=device, dtype=dtype), base


# ---- construction and metadata -----------------------------------------------------------
@device_param
def test_array_from_numpy_and_lists(device):
    a = nd.array([[1, 2, 3], [4, 5, 6]], device=device)
    assert a.shape == (2, 3) and a.strides == (3, 1) and a.offset == 0
    assert a.dtype == "float32"  # course default
    assert a.device == device
    assert a.size == 6 and a.ndim == 2 and len(a) == 2
    assert a.is_compact()
    np.testing.assert_array_equal(a.numpy(), [[1, 2, 3], [4, 5, 6]])
    x = np.random.randn(3, 2)
    b = nd.array(x, device=device, dtype="float64")
    assert b.dtype == "float64"
    np.testing.assert_array_equal(b.numpy(), x)
    x[0, 0] = 99.0  # nd.array copies its input
    assert b.numpy()[0, 0] != 99.0
    c = NDArray(b)  # copying an NDArray keeps its dtype and device and copies the storage
    assert c.dtype == "float64" and c.device == device and not same_storage(b, c)
    assert nd.from_numpy(np.arange(3)).dtype == "int64"


@device_param
def test_make_allocates_or_wraps(device):
    a = NDArray.make((2, 3), device=device)
    assert a.shape == (2, 3) and a.strides == (3, 1) and a.offset == 0 and a.dtype == "float32"
    assert a.is_compact() and a.device == device
    base, _ = arange((12,), device)
    view = NDArray.make((3, 2), strides=(4, 2), device=device, handle=base._handle, offset=1)
    np.testing.assert_array_equal(view.numpy(), [[1 + 4 * i + 2 * j for j in range(2)] for i in range(3)])
    assert same_storage(base, view) and same_storage(view, base)
    assert not view.is_compact()


@device_param
def test_empty_full(device):
    a = nd.full((2, 2), 7.5, device=device)
    np.testing.assert_array_equal(a.numpy(), np.full((2, 2), 7.5))
    assert nd.empty((3, 1), device=device).shape == (3, 1)
    assert nd.full((2,), 3, dtype="int32", device=device).dtype == "int32"
    np.testing.assert_array_equal(device.zeros(2, 3).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(device.ones((2,)).numpy(), np.ones(2))


@device_param
def test_zero_d_arrays(device):
    s = nd.array(5.0, device=device)
    assert s.shape == () and s.strides == () and s.size == 1 and s.ndim == 0
    assert s.is_compact()
    assert s.item() == 5.0 and float(s) == 5.0
    np.testing.assert_array_equal(s.numpy(), np.array(5.0))
    assert s[None].shape == (1,)
    assert s[...].shape == ()
    np.testing.assert_array_equal((s * 2 + 1).numpy(), 11.0)
    assert s.reshape((1, 1)).shape == (1, 1)
    assert s.broadcast_to((2, 3)).strides == (0, 0)
    assert s.sum().shape == () and s.max().item() == 5.0
    with pytest.raises(TypeError):
        len(s)


@device_param
def test_size_zero_arrays(device):
    z = nd.array(np.zeros((0, 3)), device=device)
    assert z.shape == (0, 3) and z.size == 0
    assert z.numpy().shape == (0, 3)
    assert z.reshape((3, 0)).shape == (3, 0)
    assert z.permute((1, 0)).shape == (3, 0)
    assert z[1:].shape == (0, 3)
    assert z.broadcast_to((2, 0, 3)).shape == (2, 0, 3)
    assert (z + 1).shape == (0, 3)
    np.testing.assert_array_equal(z.sum(axis=0).numpy(), np.zeros(3))
    np.testing.assert_array_equal(z.sum().numpy(), 0.0)
    # max over an empty axis gives max's identity, -inf (numpy raises instead)
    np.testing.assert_array_equal(z.max(axis=0).numpy(), np.full(3, -np.inf))
    assert z.sum(axis=1).shape == (0,)
    assert (z @ nd.array(np.ones((3, 2)), device=device)).shape == (0, 2)
    y = nd.array(np.ones((2, 0)), device=device)
    np.testing.assert_array_equal((y @ nd.array(np.ones((0, 4)), device=device)).numpy(), np.zeros((2, 4)))


# ---- views -------------------------------------------------------------------------------
PERMUTE_CASES = [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (1, 0, 2)), ((3, 4), (1, 0)), ((2, 3, 4, 5), (3, 2, 1, 0)),
                 ((1, 3, 1), (2, 1, 0)), ((5,), (0,)), ((2, 3, 4), (-1, 0, 1))]


@device_param
@pytest.mark.parametrize("shape,axes", PERMUTE_CASES, ids=[f"{s}-{a}" for s, a in PERMUTE_CASES])
def test_permute_is_a_view(device, shape, axes):
    A, a = arange(shape, device)
    P = A.permute(axes)
    check_view(P, np.transpose(a, axes), a)
    assert same_storage(A, P)


BROADCAST_CASES = [((1, 3, 4), (6, 3, 4)), ((3, 1), (3, 5)), ((4,), (2, 3, 4)), ((), (2, 2)), ((1,), (3,)),
                   ((2, 1, 3), (2, 4, 3)), ((3, 1), (2, 3, 1))]


@device_param
@pytest.mark.parametrize("src,dst", BROADCAST_CASES, ids=[f"{a}->{b}" for a, b in BROADCAST_CASES])
def test_broadcast_to_is_a_view(device, src, dst):
    A, a = arange(src, device)
    B = A.broadcast_to(dst)
    check_view(B, np.broadcast_to(a, dst), a)
    assert same_storage(A, B)
    for axis, (n, m) in enumerate(zip((1,) * (len(dst) - len(src)) + src, dst)):
        if n == 1 and m != 1:
            assert B.strides[axis] == 0


RESHAPE_COMPACT_CASES = [((8, 16), (2, 4, 16)), ((2, 4, 16), (8, 16)), ((6,), (6, 1)), ((6,), (1, 6)),
                         ((6,), (2, 3, 1)), ((6,), (1, 1, 6, 1)), ((2, 3), (-1,)), ((4, 3), (2, -1, 3)),
                         ((1,), ()), ((), (1, 1)), ((2, 1, 3), (3, 2))]


@device_param
@pytest.mark.parametrize("src,dst", RESHAPE_COMPACT_CASES, ids=[f"{a}->{b}" for a, b in RESHAPE_COMPACT_CASES])
def test_reshape_of_compact_arrays_is_a_compact_view(device, src, dst):
    A, a = arange(src, device)
    R = A.reshape(dst)
    want = a.reshape(dst)
    assert R.shape == want.shape
    np.testing.assert_array_equal(R.numpy(), want)
    assert R.strides == element_strides(want)  # every axis, as the course compares
    assert R.is_compact()
    assert same_storage(A, R) and same_storage(R, A)


@device_param
def test_reshape_of_non_contiguous_arrays(device):
    A, a = arange((4, 6), device)
    # a column slice: (4, 3) with strides (6, 1) -> (2, 2, 3) can be a view, (12,) cannot
    v, V = a[:, 1:4], A[:, 1:4]
    R, r = V.reshape((2, 2, 3)), v.reshape((2, 2, 3))
    assert np.shares_memory(r, a)
    check_view(R, r, a)
    assert same_storage(A, R)
    R, r = V.reshape((12,)), v.reshape((12,))
    assert not np.shares_memory(r, a)
    np.testing.assert_array_equal(R.numpy(), r)
    assert R.is_compact() and not same_storage(A, R)
    # a transpose: merging the two swapped axes needs a copy, splitting one does not
    T = A.permute((1, 0))
    R = T.reshape((24,))
    np.testing.assert_array_equal(R.numpy(), a.T.reshape(24))
    assert not same_storage(A, R)
    R, r = T.reshape((3, 2, 4)), a.T.reshape((3, 2, 4))
    assert np.shares_memory(r, a)
    check_view(R, r, a)
    assert same_storage(A, R)


@device_param
def test_reshape_infers_minus_one_and_accepts_an_int(device):
    A, a = arange((3, 4), device)
    assert A.reshape((-1, 6)).shape == (2, 6)
    assert A.reshape(12).shape == (12,)
    assert A.reshape((3, 4)).shape == (3, 4) and same_storage(A, A.reshape((3, 4)))


GETITEM_CASES = [
    (slice(1, 3),), (1,), (-1,), (slice(None, None, 2),), (slice(None, None, -1),), (slice(3, 0, -2),),
    (1, 2), (1, 2, 3), (slice(None), -1), (None,), (None, 1, None), (Ellipsis, 0), (Ellipsis, None),
    (0, Ellipsis, slice(None, None, -2)), (slice(1, 2), None, slice(0, 5, 3)), (slice(2, 2),),
    (slice(-100, 100),), (slice(None), slice(None), slice(1, -1, 2)), (slice(1, None), slice(None, None, -3), 0),
    (np.int64(1),), (),
]


@device_param
@pytest.mark.parametrize("idx", GETITEM_CASES, ids=[str(i) for i in range(len(GETITEM_CASES))])
def test_getitem_is_a_view(device, idx):
    A, a = arange((3, 4, 5), device)
    G = A[idx]
    check_view(G, a[idx if Ellipsis in idx else idx + (Ellipsis,)], a)  # `...`: numpy's 0-d views
    if G.size:
        assert same_storage(A, G)


@device_param
def test_getitem_bad_indices(device):
    A, _ = arange((3, 4), device)
    for idx in [(3,), (-4,), (0, 4), (0, 0, 0), (Ellipsis, Ellipsis)]:
        with pytest.raises(IndexError):
            A[idx]
    with pytest.raises(IndexError):
        A[1.5]


FLIP_CASES = [((3, 4), (0,)), ((3, 4), (1,)), ((3, 4), (0, 1)), ((2, 3, 4), (-1, 0)), ((5,), 0), ((1, 3), (0,))]


@device_param
@pytest.mark.parametrize("shape,axes", FLIP_CASES, ids=[f"{s}-{a}" for s, a in FLIP_CASES])
def test_flip_has_negative_strides(device, shape, axes):
    A, a = arange(shape, device)
    F = A.flip(axes)
    check_view(F, np.flip(a, axes), a)
    assert same_storage(A, F)
    for ax in np.atleast_1d(axes):
        if shape[ax] > 1:
            assert F.strides[ax] < 0
    np.testing.assert_array_equal(F.compact().numpy(), np.flip(a, axes))
    np.testing.assert_array_equal((F + 0).numpy(), np.flip(a, axes))


@device_param
def test_as_strided(device):
    A, a = arange((4, 5), device)
    cases = [((3, 3, 2, 2), (5, 1, 5, 1)), ((5, 4), (1, 5)), ((2, 20), (0, 1)), ((3,), (6,))]
    for shape, strides in cases:
        S = A.as_strided(shape, strides)
        want = np.lib.stride_tricks.as_strided(a, shape, tuple(s * a.itemsize for s in strides))
        check_view(S, want, a)
        assert same_storage(A, S)
    with pytest.raises(ndl.errors.ShapeError, match="as_strided"):
        A.as_strided((2, 2), (1,))


@device_param
def test_compact_copies_only_when_needed(device):
    A, a = arange((3, 4), device)
    assert A.compact() is A
    for view, want in [(A.permute((1, 0)), a.T), (A[1:, ::2], a[1:, ::2]), (A[1:], a[1:]),
                       (A.flip((1,)), a[:, ::-1]), (A[0:1].broadcast_to((3, 4)), np.broadcast_to(a[0:1], (3, 4)))]:
        assert not view.is_compact()
        C = view.compact()
        assert C.is_compact() and C.strides == element_strides(np.ascontiguousarray(want)) and C.offset == 0
        np.testing.assert_array_equal(C.numpy(), want)
        assert not same_storage(A, C)


@device_param
def test_is_compact(device):
    A, _ = arange((2, 3), device)
    assert A.is_compact()
    assert not A[:1].is_compact()  # contiguous but not the whole storage (the course's definition)
    assert not A.permute((1, 0)).is_compact()
    assert A.reshape((3, 2)).is_compact()
    assert A.reshape((6, 1)).is_compact()
    assert A.broadcast_to((2, 3)).is_compact()


# ---- random chains of views, against the same chain on numpy -----------------------------
@st.composite
def _view_chain(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    steps = draw(st.lists(st.sampled_from(["permute", "slice", "broadcast", "reshape", "flip"]),
                          min_size=1, max_size=5))
    return shape, steps, draw(st.randoms(use_true_random=False))


def _random_factorization(size, rng):
    factors = []
    n = size
    p = 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    rng.shuffle(factors)
    dims, i = [], 0
    while i < len(factors):
        k = rng.randint(1, max(1, len(factors) - i))
        dims.append(math.prod(factors[i:i + k]))
        i += k
    for _ in range(rng.randint(0, 2)):
        dims.insert(rng.randint(0, len(dims)), 1)
    return tuple(dims) if dims else (1,) * rng.randint(0, 2)


def _random_step(kind, shape, rng):
    ndim = len(shape)
    if kind == "permute":
        axes = list(range(ndim))
        rng.shuffle(axes)
        return ("permute", tuple(axes))
    if kind == "slice":
        idx = []
        for n in shape:
            r = rng.random()
            if r < 0.2 and n > 0:
                idx.append(rng.randint(-n, n - 1))
            elif r < 0.3:
                idx.append(None)
                idx.append(slice(None))
            else:
                step = rng.choice([1, 1, 2, 3, -1, -2])
                start = rng.choice([None, rng.randint(-n - 1, n + 1)])
                stop = rng.choice([None, rng.randint(-n - 1, n + 1)])
                idx.append(slice(start, stop, step))
        if rng.random() < 0.3:
            idx.insert(rng.randint(0, len(idx)), None)
        return ("slice", tuple(idx))
    if kind == "broadcast":
        lead = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 1 if ndim >= 4 else 2)))
        return ("broadcast", lead + tuple(rng.randint(1, 3) if n == 1 else n for n in shape))
    if kind == "reshape":
        return ("reshape", _random_factorization(math.prod(shape), rng))
    axes = tuple(i for i in range(ndim) if rng.random() < 0.5)
    return ("flip", axes)


def _apply(step, x, is_numpy):
    kind, arg = step
    if kind == "permute":
        return np.transpose(x, arg) if is_numpy else x.permute(arg)
    if kind == "slice":  # numpy gives a scalar copy for all-int indices unless `...` is there
        return x[arg + (Ellipsis,)] if is_numpy and Ellipsis not in arg else x[arg]
    if kind == "broadcast":
        return np.broadcast_to(x, arg) if is_numpy else x.broadcast_to(arg)
    if kind == "reshape":
        return np.reshape(x, arg) if is_numpy else x.reshape(arg)
    return np.flip(x, arg) if is_numpy else x.flip(arg)


@pytest.mark.parametrize("device", [nd.cpu(), nd.cpu_numpy()], ids=["cpu()", "cpu_numpy()"])
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(chain=_view_chain())
def test_random_view_chains_match_numpy(device, chain):
    shape, kinds, rng = chain
    a = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    A = nd.array(a, device=device)
    x, X, np_base = a, A, a
    for kind in kinds:
        if x.size == 0 or x.ndim == 0 and kind in ("permute", "flip"):
            break
        step = _random_step(kind, x.shape, rng)
        y, Y = _apply(step, x, True), _apply(step, X, False)
        if not np.shares_memory(y, np_base):  # numpy copied (a reshape): so must we, into a fresh array
            np_base = y
            assert y.flags.c_contiguous
        check_view(Y, y, np_base)
        x, X = y, Y
    # views share storage and copies do not, exactly as in numpy: write to both bases
    a[...] = -a - 1
    A[...] = nd.array(a, device=device)
    np.testing.assert_array_equal(X.numpy(), x)


# ---- writes through views ----------------------------------------------------------------
SETITEM_CASES = [
    ((slice(1, 3), slice(None, None, 2)), "scalar"),
    ((slice(None), 1), "array"),
    ((1,), "row"),
    ((slice(None, None, -1), slice(1, 3)), "array"),
    ((slice(None), slice(None, None, 3)), "column"),
    ((Ellipsis, -1), "scalar"),
    ((0, 2), "scalar"),
    ((slice(0, 3, 2), slice(3, 0, -1)), "array"),
    ((None, slice(1, 2)), "array"),
    ((), "row"),
]


@device_param
@pytest.mark.parametrize("idx,kind", SETITEM_CASES, ids=[f"{i}-{k}" for i, (_, k) in enumerate(SETITEM_CASES)])
def test_setitem_writes_through(device, idx, kind):
    A, a = arange((3, 4), device)
    target_shape = a[idx].shape
    if kind == "scalar":
        value, nd_value = -7.5, -7.5
    elif kind == "array":
        value = np.random.randn(*target_shape).astype(np.float32)
        nd_value = nd.array(value, device=device)
    elif kind == "row":  # broadcast over leading axes
        value = np.random.randn(target_shape[-1]).astype(np.float32)
        nd_value = nd.array(value, device=device)
    else:  # a column (k, 1) broadcast over the last axis
        value = np.random.randn(target_shape[0], 1).astype(np.float32)
        nd_value = nd.array(value, device=device)
    a[idx] = value
    A[idx] = nd_value
    np.testing.assert_array_equal(A.numpy(), a)
    assert A.is_compact()


@device_param
def test_setitem_through_a_view_reaches_the_base(device):
    A, a = arange((3, 4), device)
    T = A.permute((1, 0))
    T[1:3, ::2] = nd.array(np.array([[10.0, 20.0], [30.0, 40.0]]), device=device)
    a.T[1:3, ::2] = [[10.0, 20.0], [30.0, 40.0]]
    assert not np.array_equal(a, np.arange(12).reshape(3, 4))
    np.testing.assert_array_equal(A.numpy(), a)
    F = A.flip((0,))
    F[0] = 5.0
    a[::-1][0] = 5.0
    np.testing.assert_array_equal(A.numpy(), a)


@device_param
def test_setitem_values_of_other_forms(device):
    A, a = arange((2, 3), device)
    A[0] = [7, 8, 9]  # a list
    a[0] = [7, 8, 9]
    A[1, :] = np.array([1.5, 2.5, 3.5])  # numpy, float64 into float32
    a[1, :] = [1.5, 2.5, 3.5]
    A[:, 0] = np.float32(-1)  # numpy scalar
    a[:, 0] = -1
    np.testing.assert_array_equal(A.numpy(), a)
    # the course's setitem: a value with the same number of elements is reshaped
    A[:, :] = nd.array(np.arange(6.0), device=device)
    np.testing.assert_array_equal(A.numpy(), np.arange(6.0).reshape(2, 3))
    # a value of another dtype is cast
    A[0] = nd.array([1, 2, 3], dtype="int32", device=device)
    np.testing.assert_array_equal(A.numpy()[0], [1, 2, 3])


@device_param
def test_setitem_overlapping_self_view(device):
    A, a = arange((6,), device)
    A[1:] = A[:-1]
    a[1:] = a[:-1].copy()
    np.testing.assert_array_equal(A.numpy(), a)


@device_param
def test_setitem_errors(device):
    A, _ = arange((2, 3), device)
    with pytest.raises(ndl.errors.ShapeError):
        A[0] = nd.array(np.ones(2), device=device)
    other = [d for d in (nd.cpu(), nd.cpu_numpy()) if d != device][0]
    with pytest.raises(ndl.errors.DeviceError):
        A[0] = nd.array(np.ones(3), device=other)


@device_param
def test_flat_writes_through(device):
    A, a = arange((3, 4), device)
    A.flat[5] += 0.25
    a.flat[5] += 0.25
    np.testing.assert_array_equal(A.numpy(), a)
    V = A[1:, ::-2]  # a non-contiguous view: flat index j is the j-th element in logical order
    v = a[1:, ::-2]
    V.flat[3] += 100
    v.flat[3] += 100
    np.testing.assert_array_equal(A.numpy(), a)
    assert V.flat[3] == v.flat[3]
    T = A.permute((1, 0))
    T.flat[1] -= 1e-3
    a.T.flat[1] -= np.float32(1e-3)
    np.testing.assert_allclose(A.numpy(), a)


# ---- arithmetic --------------------------------------------------------------------------
EWISE = {
    "add": (lambda x, y: x + y), "sub": (lambda x, y: x - y), "mul": (lambda x, y: x * y),
    "div": (lambda x, y: x / y), "pow": (lambda x, y: x ** y),
    "maximum": (lambda x, y: x.maximum(y) if isinstance(x, NDArray) else np.maximum(x, y)),
}


@device_param
@pytest.mark.parametrize("name", list(EWISE))
@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 2)), ((2, 3), ())])
def test_elementwise_ops(device, name, sa, sb):
    fn = EWISE[name]
    a = np.random.uniform(0.5, 2, sa).astype(np.float32)
    b = np.random.uniform(0.5, 2, sb).astype(np.float32)
    out = fn(nd.array(a, device=device), nd.array(b, device=device))
    assert out.dtype == "float32" and out.device == device
    np.testing.assert_allclose(out.numpy(), fn(a, b), rtol=1e-6)


@device_param
@pytest.mark.parametrize("scalar", [2.0, -1.5, 3, 0.5])
def test_scalar_ops(device, scalar):
    a = np.random.uniform(0.5, 2, (3, 4)).astype(np.float32)
    A = nd.array(a, device=device)
    s = np.float32(scalar)
    cases = [(A + scalar, a + s), (scalar + A, s + a), (A - scalar, a - s), (scalar - A, s - a),
             (A * scalar, a * s), (scalar * A, s * a), (A / scalar, a / s), (scalar / A, s / a),
             (A ** scalar, a ** s), (A.maximum(scalar), np.maximum(a, s)), (-A, -a)]
    for out, want in cases:
        assert out.dtype == "float32"
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


@device_param
def test_ops_on_views(device):
    A, a = arange((4, 6), device)
    V, v = A.permute((1, 0))[::2, 1:], a.T[::2, 1:]
    W, w = A[::-1, ::2][:3], a[::-1, ::2][:3]
    np.testing.assert_array_equal((V + 1).numpy(), v + 1)
    np.testing.assert_array_equal((V * W.permute((1, 0))).numpy(), v * w.T)
    np.testing.assert_array_equal(V.sum(axis=0).numpy(), v.sum(axis=0))
    np.testing.assert_allclose((V @ W).numpy(), v @ w)


@device_param
def test_unary_ops(device):
    a = np.random.uniform(0.1, 3, (2, 5)).astype(np.float32)
    A = nd.array(a, device=device)
    for got, want in [(A.exp(), np.exp(a)), (A.log(), np.log(a)), (A.tanh(), np.tanh(a)), (A.sqrt(), np.sqrt(a)),
                      ((-A).abs(), a), (nd.exp(A), np.exp(a)), (nd.log(A), np.log(a)), (nd.tanh(A), np.tanh(a))]:
        assert got.dtype == "float32"
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


COMPARISONS = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
               "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y}


@device_param
@pytest.mark.parametrize("name", list(COMPARISONS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_comparisons_give_zero_one_in_the_array_dtype(device, name, dtype):
    fn = COMPARISONS[name]
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype=dtype)
    b = np.array([2, 2, 2], dtype=dtype)
    A, B = nd.array(a, device=device, dtype=dtype), nd.array(b, device=device, dtype=dtype)
    for got, want in [(fn(A, B), fn(a, b)), (fn(A, 2), fn(a, 2)), (fn(2, A), fn(2, a))]:
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want.astype(dtype))


@device_param
def test_where(device):
    c = np.array([1.0, 0.0, 2.0, 0.0], dtype=np.float32)
    a = np.arange(4, dtype=np.float32)
    C, A = nd.array(c, device=device), nd.array(a, device=device)
    np.testing.assert_array_equal(C.where(A, -A).numpy(), np.where(c != 0, a, -a))
    np.testing.assert_array_equal(nd.where(C, A, nd.array([9.0], device=device)).numpy(), np.where(c != 0, a, 9.0))


# ---- reductions --------------------------------------------------------------------------
REDUCE_CASES = [None, 0, 1, -1, (0, 2), (-1, -2), (0, 1, 2), ()]


@device_param
@pytest.mark.parametrize("axis", REDUCE_CASES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_reductions(device, axis, keepdims, op):
    a = np.random.randn(2, 3, 4).astype(np.float32)
    A = nd.array(a, device=device)
    got = getattr(A, op)(axis=axis, keepdims=keepdims)
    want = getattr(np, op)(a, axis=axis, keepdims=keepdims)
    assert got.shape == want.shape and got.dtype == "float32"
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    got = getattr(A.permute((2, 0, 1)), op)(axis=axis, keepdims=keepdims)  # on a view
    np.testing.assert_allclose(got.numpy(), getattr(np, op)(a.transpose(2, 0, 1), axis=axis, keepdims=keepdims),
                               rtol=1e-5, atol=1e-6)


@device_param
def test_reduction_module_functions(device):
    a = np.random.randn(3, 4).astype(np.float32)
    A = nd.array(a, device=device)
    np.testing.assert_allclose(nd.sum(A, axis=1).numpy(), a.sum(1), rtol=1e-6)
    np.testing.assert_allclose(nd.summation(A, axis=0, keepdims=True).numpy(), a.sum(0, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(nd.max(A, axis=(0, 1)).numpy(), a.max())


@device_param
def test_integer_reductions(device):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    A = nd.array(a, device=device, dtype="int32")
    assert A.sum(axis=0).dtype == "int32"
    np.testing.assert_array_equal(A.sum(axis=0).numpy(), a.sum(0))
    np.testing.assert_array_equal(A.max(axis=1).numpy(), a.max(1))


# ---- matmul ------------------------------------------------------------------------------
@device_param
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((1, 1), (1, 1)), ((7, 9), (9, 1))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul(device, sa, sb, dtype):
    a, b = np.random.randn(*sa).astype(dtype), np.random.randn(*sb).astype(dtype)
    out = nd.array(a, device=device, dtype=dtype) @ nd.array(b, device=device, dtype=dtype)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    A, B = nd.array(a, device=device, dtype=dtype), nd.array(b, device=device, dtype=dtype)
    np.testing.assert_allclose(nd.matmul(A, B).numpy(), a @ b, rtol=1e-5, atol=1e-5)


@device_param
def test_matmul_errors(device):
    with pytest.raises(ndl.errors.ShapeError, match=r"matmul.*\(3, 4\).*\(3, 4\)"):
        nd.array(np.ones((3, 4)), device=device) @ nd.array(np.ones((3, 4)), device=device)
    with pytest.raises(ndl.errors.ShapeError, match="matmul"):
        nd.array(np.ones(3), device=device) @ nd.array(np.ones((3, 4)), device=device)
    with pytest.raises(ndl.errors.ShapeError, match="matmul"):
        nd.array(np.ones((2, 3, 4)), device=device) @ nd.array(np.ones((3, 4, 2)), device=device)


# ---- dtypes ------------------------------------------------------------------------------
@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
def test_dtypes(device, dtype):
    a = (np.arange(6).reshape(2, 3) % 4).astype(dtype)
    A = nd.array(a, device=device, dtype=dtype)
    assert A.dtype == dtype
    assert A.numpy().dtype == np.dtype(dtype)
    np.testing.assert_array_equal(A.numpy(), a)
    check_view(A.permute((1, 0))[::-1], a.T[::-1])
    np.testing.assert_array_equal(A.compact().numpy(), a)
    assert A.astype("float64").dtype == "float64"
    np.testing.assert_array_equal(A.astype("float64").numpy(), a.astype(np.float64))
    assert A.astype(dtype) is A
    np.testing.assert_array_equal((A == A).numpy(), np.ones((2, 3), dtype))
    if dtype != "bool":
        np.testing.assert_array_equal((A + A).numpy(), a + a)
        assert (A + A).dtype == dtype
        np.testing.assert_array_equal(A.max(axis=1).numpy(), a.max(1))
        np.testing.assert_array_equal((A @ A.permute((1, 0))).numpy(), a @ a.T)


@device_param
def test_float_only_ops_reject_integers(device):
    A = nd.array([1, 2], dtype="int32", device=device)
    for fn in (lambda x: x.exp(), lambda x: x.log(), lambda x: x.sqrt(), lambda x: x.tanh()):
        with pytest.raises(ndl.errors.DTypeError, match="int32"):
            fn(A)


def test_unknown_dtypes():
    with pytest.raises(ndl.errors.DTypeError, match="complex64"):
        nd.array([1.0], dtype="complex64")
    with pytest.raises(ndl.errors.DTypeError):
        nd.array([1.0], dtype="float17")


# ---- devices and conversion --------------------------------------------------------------
@device_param
def test_to_device_and_numpy(device):
    a = np.random.randn(2, 3).astype(np.float32)
    A = nd.array(a, device=device)
    assert A.to(device) is A
    for other in (nd.cpu(), nd.cpu_numpy()):
        B = A.permute((1, 0)).to(other)
        assert B.device == other
        np.testing.assert_array_equal(B.numpy(), a.T)
    out = A.numpy()
    out[0, 0] = 123.0  # numpy() of a compact array shares its storage, as torch.Tensor.numpy()
    assert A.numpy()[0, 0] == 123.0
    out[0, 0] = a[0, 0]
    np.testing.assert_array_equal(np.asarray(A), a)
    assert np.array(A, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(A[:, ::-1]), a[:, ::-1])


@device_param
def test_numpy_interop_in_arithmetic(device):
    A, a = arange((2, 3), device)
    # NDArray's __array_priority__ makes numpy defer to NDArray for `ndarray op NDArray`
    np.testing.assert_array_equal(np.float32(2) * A.numpy(), (A * np.float32(2)).numpy())
    np.testing.assert_array_equal((A + np.float64(1.5)).numpy(), a + np.float32(1.5))


def test_devices_and_names():
    assert str(nd.cpu()) == "cpu()" and str(nd.cuda()) == "cuda()" and str(nd.cpu_numpy()) == "cpu_numpy()"
    assert nd.cpu() == nd.cpu() and nd.cpu() != nd.cpu_numpy()
    assert nd.cpu() is ndl.cpu() and nd.cpu_numpy() is ndl.cpu_numpy()
    assert len({nd.cpu(), nd.cpu(), nd.cpu_numpy()}) == 2
    assert nd.default_device() == nd.cpu()
    assert nd.cpu().enabled() and nd.cpu_numpy().enabled()
    assert set(map(str, nd.all_devices())) >= {"cpu()", "cpu_numpy()", "cuda()"}


@pytest.mark.skipif(nd.cuda().enabled(), reason="a GPU is usable here")
def test_cuda_without_gpu():
    assert nd.cuda().enabled() is False
    with pytest.raises(ndl.errors.DeviceError, match="cuda"):
        nd.array([1.0], device=nd.cuda())


# ---- errors ------------------------------------------------------------------------------
@device_param
def test_errors_name_the_op_and_shapes(device):
    A, _ = arange((2, 3), device)
    with pytest.raises(ndl.errors.ShapeError, match=r"reshape.*\(2, 3\).*\(4, 2\)"):
        A.reshape((4, 2))
    with pytest.raises(ndl.errors.ShapeError, match=r"reshape.*\(2, 3\)"):
        A.reshape((-1, -1))
    with pytest.raises(ndl.errors.ShapeError, match=r"reshape.*\(2, 3\)"):
        A.reshape((-1, 4))
    with pytest.raises(ndl.errors.AxisError, match=r"permute.*\(2, 3\)"):
        A.permute((0, 0))
    with pytest.raises(ndl.errors.AxisError, match=r"permute.*\(2, 3\)"):
        A.permute((0, 1, 2))
    with pytest.raises(ndl.errors.AxisError, match=r"permute.*\(0, 4\).*\(2, 3\)"):
        A.permute((0, 4))  # out of range, even though 4 % 2 == 0 would make it look like one
    with pytest.raises(ndl.errors.AxisError, match="permute"):
        A.permute((-3, 1))
    with pytest.raises(ndl.errors.AxisError, match=r"sum.*axis 2.*\(2, 3\)"):
        A.sum(axis=2)
    with pytest.raises(ndl.errors.AxisError, match=r"max.*\(2, 3\)"):
        A.max(axis=(-3,))
    with pytest.raises(ndl.errors.AxisError, match="flip"):
        A.flip((5,))
    with pytest.raises(ndl.errors.ShapeError, match=r"broadcast_to.*\(2, 3\).*\(3, 3\)"):
        A.broadcast_to((3, 3))
    with pytest.raises(ndl.errors.ShapeError, match=r"broadcast_to.*\(2, 3\).*\(3,\)"):
        A.broadcast_to((3,))
    with pytest.raises(ndl.errors.ShapeError, match=r"add.*\(2, 3\).*\(2,\)"):
        A + nd.array([1.0, 2.0], device=device)
    with pytest.raises(ndl.errors.DTypeError, match=r"mul.*\(2, 3\).*float32.*float64"):
        A * nd.array(np.ones((2, 3)), device=device, dtype="float64")
    other = [d for d in (nd.cpu(), nd.cpu_numpy()) if d != device][0]
    with pytest.raises(ndl.errors.DeviceError, match=r"sub.*\(2, 3\).*\(2, 3\)"):
        A - nd.array(np.ones((2, 3)), device=other)
    with pytest.raises(ndl.errors.DeviceError, match="matmul"):
        A @ nd.array(np.ones((3, 2)), device=other)
    with pytest.raises(ndl.errors.DTypeError, match="matmul"):
        A @ nd.array(np.ones((3, 2)), device=device, dtype="float64")
    with pytest.raises(ndl.errors.ShapeError, match=r"pad.*\(2, 3\)"):
        A.pad(((1, 1),))
    # every needle error is also a ValueError / TypeError
    assert issubclass(ndl.errors.ShapeError, ValueError) and issubclass(ndl.errors.DTypeError, TypeError)


@device_param
def test_pad(device):
    A, a = arange((2, 3), device)
    np.testing.assert_array_equal(A.pad(((1, 0), (2, 1))).numpy(), np.pad(a, ((1, 0), (2, 1))))
    np.testing.assert_array_equal(A.permute((1, 0)).pad(((0, 1), (1, 1))).numpy(), np.pad(a.T, ((0, 1), (1, 1))))


# ---- zero-copy reads --------------------------------------------------------------------------
def test_numpy_of_a_compact_array_shares_its_storage():
    a = nd.array(np.arange(6, dtype=np.float32).reshape(2, 3), device=nd.cpu())
    first, second = a.numpy(), a.numpy()
    assert np.shares_memory(first, second)
    first[0, 0] = 41.0  # as torch.Tensor.numpy(): a write shows in the array
    assert a.numpy()[0, 0] == 41.0


def test_numpy_of_a_strided_view_is_a_copy():
    a = nd.array(np.arange(6, dtype=np.float32).reshape(2, 3), device=nd.cpu())
    t = a.permute((1, 0))
    out = t.numpy()
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3).T)
    assert not np.shares_memory(out, a.numpy())


def test_a_zero_copy_result_stays_valid_after_its_tensor_and_later_work():
    """The numpy array keeps the storage alive, and no later schedule reuses it."""
    import gc
    x = ndl.Tensor(np.arange(1024, dtype=np.float32), requires_grad=False)
    y = x * 2.0 + 1.0
    out = y.numpy()
    want = np.arange(1024, dtype=np.float32) * 2 + 1
    del y
    gc.collect()
    for k in range(20):  # fresh schedules and pooled temps of the same size
        ((x * float(k) + 3.0).exp().sum()).numpy()
    np.testing.assert_array_equal(out, want)


class _Tagged(nd.NDArray):  # (module level: pickled by name)
    pass


class _Slotted(nd.NDArray):
    __slots__ = ("tag",)


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_copy_keeps_a_subclass_s_attributes_and_drops_what_belongs_to_the_storage(how):
    """A copy or pickle of an NDArray (or of a subclass: its __dict__, its own slots)
    keeps its fields, not the remembered address or the cached numpy view of the
    original's storage: a write into a deep copy shows in its kernels and its numpy()."""
    import copy
    import pickle
    take = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": lambda x: pickle.loads(pickle.dumps(x))}[how]
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    tagged, slotted = _Tagged(base, device=nd.cpu()), _Slotted(base, device=nd.cpu())
    tagged.name, slotted.tag = "weights", 1
    for a in (tagged, slotted):
        a.numpy()
        (a + 1.0).numpy()  # (the address and the numpy view are remembered now)
    c, s = take(tagged), take(slotted)
    assert c.name == "weights" and s.tag == 1
    np.testing.assert_array_equal((s + 1.0).numpy(), base + 1)
    if how != "copy":  # (a shallow copy shares the storage)
        c[0, 0] = 7.0
        assert (c + 0.0).numpy()[0, 0] == 7.0 and c.numpy()[0, 0] == 7.0
        assert tagged.numpy()[0, 0] == 0.0
