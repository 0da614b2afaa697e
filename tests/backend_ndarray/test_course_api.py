"""The course's NDArray API as hw3 code and tests use it: `_handle.ptr()` shared-storage
checks, `process_slice`, a subclass that builds its own views with `NDArray.make`,
`NDArray.make(shape, device=)`, and the device's handle-level functions
(`compact`, `ewise_*`, `scalar_*`, `reduce_*`, `matmul`, `matmul_tiled`).
References: numpy (values, element strides), and slice arithmetic by hand."""
import numpy as np
import pytest

from needle import backend_ndarray as nd
from needle.backend_ndarray import NDArray

HOSTS = [nd.cpu(), nd.cpu_numpy()]
host_param = pytest.mark.parametrize("device", HOSTS, ids=[str(d) for d in HOSTS])


def element_strides(a: np.ndarray) -> tuple:
    return tuple(s // a.itemsize for s in a.strides)


# ---- shared storage, as the course's check_same_memory sees it ---------------------------
VIEWS = {
    "permute": (lambda X: X.permute((2, 0, 1)), lambda X: X.transpose((2, 0, 1))),
    "reshape": (lambda X: X.reshape((4, 30)), lambda X: X.reshape((4, 30))),
    "getitem": (lambda X: X[1:3, ::2, 5:], lambda X: X[1:3, ::2, 5:]),
    "getitem_single": (lambda X: X[2:3, 4:5, 1:2], lambda X: X[2:3, 4:5, 1:2]),
    "broadcast": (lambda X: X[:, 0:1, :].broadcast_to((4, 7, 6)), lambda X: np.broadcast_to(X[:, 0:1, :], (4, 7, 6))),
}


@host_param
@pytest.mark.parametrize("name", VIEWS)
def test_views_keep_the_handle_pointer(device, name):
    nd_fn, np_fn = VIEWS[name]
    _A = np.random.randint(0, 10, size=(4, 5, 6))
    A = nd.array(_A, device=device)
    B, want = nd_fn(A), np_fn(_A)
    assert B._handle.ptr() == A._handle.ptr()
    np.testing.assert_array_equal(B.numpy(), want)
    assert B.strides == element_strides(want)  # the course compares strides in elements


@host_param
def test_broadcast_is_a_view_with_zero_strides(device):
    _A = np.random.randn(4, 1, 6)
    A = nd.array(_A, device=device)
    B = A.broadcast_to((4, 5, 6))
    assert B._handle.ptr() == A._handle.ptr() and B.strides == (6, 0, 1)


@host_param
@pytest.mark.parametrize("lhs, rhs", [((slice(1, 4), slice(2, 3)), (slice(0, 3), slice(1, 2))),
                                      ((slice(None, None, 2), slice(None)), (slice(1, 5), slice(None)))])
def test_setitem_writes_in_place(device, lhs, rhs):
    _A, _B = np.random.randn(7, 5), np.random.randn(5, 5)
    A, B = nd.array(_A, device=device), nd.array(_B, device=device)
    start = A._handle.ptr()
    A[lhs] = B[rhs]
    _A[lhs] = _B[rhs]
    assert A._handle.ptr() == start
    assert A.strides == element_strides(_A)
    np.testing.assert_allclose(A.numpy(), _A, rtol=1e-6)
    A[lhs] = 4.0
    _A[lhs] = 4.0
    assert A._handle.ptr() == start
    np.testing.assert_allclose(A.numpy(), _A, rtol=1e-6)


def test_distinct_arrays_have_distinct_pointers():
    A = nd.array(np.ones(4))
    assert (A + 1)._handle.ptr() != A._handle.ptr()
    assert A.compact()._handle.ptr() == A._handle.ptr()  # compact already: no copy
    assert A[::2].compact()._handle.ptr() != A._handle.ptr()


# ---- process_slice and a course-style subclass ------------------------------------------
@pytest.mark.parametrize("sl, want", [(slice(None), slice(0, 6, 1)), (slice(2, None), slice(2, 6, 1)),
                                      (slice(None, -1), slice(0, 5, 1)), (slice(1, 5, 2), slice(1, 5, 2)),
                                      (slice(-3, None, 3), slice(3, 6, 3))])
def test_process_slice(sl, want):
    A = nd.array(np.zeros((2, 6)))
    got = A.process_slice(sl, 1)
    assert (got.start, got.stop, got.step) == (want.start, want.stop, want.step)
    assert all(type(v) is int for v in (got.start, got.stop, got.step))


def test_process_slice_rejects_negative_steps():
    with pytest.raises(IndexError, match="positive"):
        nd.array(np.zeros(4)).process_slice(slice(None, None, -1), 0)


class CourseNDArray(NDArray):
    """hw3-style: indexing written against the course's helpers (keeps every axis)."""

    def __getitem__(self, idxs):
        if not isinstance(idxs, tuple):
            idxs = (idxs,)
        idxs = tuple(self.process_slice(s, i) if isinstance(s, slice) else slice(s, s + 1, 1)
                     for i, s in enumerate(idxs))
        assert len(idxs) == self.ndim
        shape = tuple(len(range(s.start, s.stop, s.step)) for s in idxs)
        strides = tuple(s.step * st for s, st in zip(idxs, self._strides))
        offset = self._offset + sum(s.start * st for s, st in zip(idxs, self._strides))
        return NDArray.make(shape, strides=strides, device=self.device, handle=self._handle, offset=offset)


@host_param
def test_a_course_style_subclass_builds_views(device):
    _A = np.random.randn(8, 16).astype(np.float32)
    A = CourseNDArray(_A, device=device)
    assert isinstance(A, NDArray) and A.shape == (8, 16)
    for idx, ref in [((slice(3, 4), slice(3, 4)), _A[3:4, 3:4]), ((slice(1, 8, 3), 2), _A[1:8:3, 2:3]),
                     ((slice(None), slice(-5, None)), _A[:, -5:])]:
        B = A[idx]
        assert B._handle.ptr() == A._handle.ptr() and B.dtype == "float32"
        assert B.strides == element_strides(ref)
        np.testing.assert_array_equal(B.numpy(), ref)
    C = A.permute((1, 0))  # the base class's views work on a subclass instance
    np.testing.assert_array_equal((C + 1).numpy(), _A.T + 1)


def test_make_allocates_with_the_course_signature():
    C = nd.NDArray.make((2, 3, 4), device=nd.cpu())
    assert C.shape == (2, 3, 4) and C.strides == (12, 4, 1) and C.dtype == "float32" and C.is_compact()
    D = NDArray.make((3,), strides=(2,), device=nd.cpu(), handle=C._handle, offset=1)
    C.fill(0.0)
    C.flat[3] = 5.0
    assert D.numpy().tolist() == [0.0, 5.0, 0.0] and D._handle.ptr() == C._handle.ptr()
    assert NDArray.compact_strides((2, 3, 4)) == (12, 4, 1)


# ---- the device's handle-level functions -------------------------------------------------
@pytest.mark.parametrize("m, n, p", [(1, 1, 1), (2, 3, 4), (3, 1, 2)])
def test_matmul_tiled(m, n, p):
    device = nd.cpu()
    t = device.__tile_size__
    A = nd.array(np.random.randn(m, n, t, t), device=device)
    B = nd.array(np.random.randn(n, p, t, t), device=device)
    C = nd.NDArray.make((m, p, t, t), device=device)
    device.matmul_tiled(A._handle, B._handle, C._handle, m * t, n * t, p * t)
    # tile (i, k) holds rows i*t.., columns k*t..: untile, multiply, compare
    lhs = A.numpy().astype(np.float64).transpose(0, 2, 1, 3).reshape(m * t, n * t) \
        @ B.numpy().astype(np.float64).transpose(0, 2, 1, 3).reshape(n * t, p * t)
    rhs = C.numpy().transpose(0, 2, 1, 3).reshape(m * t, p * t)
    np.testing.assert_allclose(rhs, lhs, rtol=1e-4, atol=1e-4)


@host_param
def test_handle_functions(device):
    _A, _B = np.random.randn(3, 4).astype(np.float32), np.random.randn(3, 4).astype(np.float32)
    A, B = nd.array(_A, device=device), nd.array(_B, device=device)
    out = NDArray.make((3, 4), device=device)
    for name, fn in [("ewise_add", np.add), ("ewise_mul", np.multiply), ("ewise_div", np.divide),
                     ("ewise_maximum", np.maximum), ("ewise_eq", np.equal), ("ewise_ge", np.greater_equal)]:
        getattr(device, name)(A._handle, B._handle, out._handle)
        np.testing.assert_allclose(out.numpy(), fn(_A, _B).astype(np.float32), rtol=1e-6, err_msg=name)
    for name, fn in [("scalar_add", np.add), ("scalar_mul", np.multiply), ("scalar_div", np.divide),
                     ("scalar_maximum", np.maximum), ("scalar_eq", np.equal), ("scalar_ge", np.greater_equal)]:
        getattr(device, name)(A._handle, 0.5, out._handle)
        np.testing.assert_allclose(out.numpy(), fn(_A, np.float32(0.5)).astype(np.float32), rtol=1e-6, err_msg=name)
    device.scalar_power(B._handle, 2.0, out._handle)
    np.testing.assert_allclose(out.numpy(), _B ** 2, rtol=1e-6)
    for name, fn in [("ewise_exp", np.exp), ("ewise_tanh", np.tanh)]:
        getattr(device, name)(A._handle, out._handle)
        np.testing.assert_allclose(out.numpy(), fn(_A), rtol=1e-6)
    device.ewise_log(nd.array(np.abs(_A), device=device)._handle, out._handle)
    np.testing.assert_allclose(out.numpy(), np.log(np.abs(_A)), rtol=1e-5)
    # compact / setitem through strides, in elements
    T = A.permute((1, 0))
    compacted = NDArray.make((4, 3), device=device)
    device.compact(T._handle, compacted._handle, T.shape, T.strides, T.offset)
    np.testing.assert_array_equal(compacted.numpy(), _A.T)
    device.ewise_setitem(compacted._handle, out._handle, (4, 3), (1, 4), 0)
    np.testing.assert_array_equal(out.numpy(), _A)
    device.scalar_setitem(3, 7.0, out._handle, (3,), (4,), 1)
    np.testing.assert_array_equal(out.numpy()[:, 1], [7.0, 7.0, 7.0])
    # reductions over the last axis of a compact view, as the course's reduce_view_out feeds them
    view, red = A.reduce_view_out(0, keepdims=True)
    device.reduce_sum(view.compact()._handle, red._handle, view.shape[-1])
    np.testing.assert_allclose(red.numpy(), _A.sum(0, keepdims=True), rtol=1e-5)
    view, red = A.reduce_view_out(None)
    device.reduce_max(view.compact()._handle, red._handle, view.shape[-1])
    assert red.shape == (1,) and red.numpy()[0] == _A.max()
    # matmul on handles, to_numpy / from_numpy with the course's arguments
    C = NDArray.make((3, 3), device=device)
    device.matmul(A._handle, B.permute((1, 0)).compact()._handle, C._handle, 3, 4, 3)
    np.testing.assert_allclose(C.numpy(), _A @ _B.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(device.to_numpy(A._handle, (4, 3), (1, 4), 0), _A.T)
    device.from_numpy(_B, A._handle)
    np.testing.assert_array_equal(A.numpy(), _B)
    buf = device.Array(5)
    device.fill(buf, 2.0)
    assert buf.size == 5 and buf.ptr() != 0 and list(buf) == [2.0] * 5
    out2 = A.ewise_or_scalar(B, device.ewise_add, device.scalar_add)
    np.testing.assert_allclose(out2.numpy(), 2 * _B, rtol=1e-6)


def test_device_module_attributes():
    assert nd.cpu().__device_name__ == "cpu" and nd.cpu().mod is nd.cpu()
    assert isinstance(nd.cpu().__tile_size__, int) and nd.cpu().__tile_size__ > 1
    cuda = nd.cuda()
    assert str(cuda) == "cuda()" and cuda.enabled() in (True, False)
