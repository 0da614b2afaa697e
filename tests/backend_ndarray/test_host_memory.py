"""Host storage: large buffers start on a cache line, copies never alias their source."""
import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import host_memory
from needle.runtime.pool import POOL


def _address(a) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8"])
@pytest.mark.parametrize("size", [0, 1, 7, 1023, 1024, 4096, 100_003])
def test_empty_sizes_dtypes_and_alignment(size, dtype):
    dtype = np.dtype(dtype)
    buf, address = host_memory.empty_with_address(size, dtype)
    assert buf.shape == (size,) and buf.dtype == dtype and buf.flags.c_contiguous and buf.flags.writeable
    if size:
        assert address == _address(buf)
    if size * dtype.itemsize >= host_memory.ALIGN_MIN_BYTES:
        assert _address(buf) % host_memory.ALIGN == 0
    buf[:] = 3  # the whole range is writable storage of its own
    assert (buf == 3).all()


def test_many_large_buffers_are_aligned_whatever_malloc_returns():
    buffers = [host_memory.empty(1024 + k, np.float32) for k in range(64)]
    assert all(_address(b) % 64 == 0 for b in buffers)


@pytest.mark.parametrize("values", [
    np.arange(5000, dtype=np.float64).reshape(50, 100) * 1.25 - 99.5,  # converted from float64
    np.arange(5000, dtype=np.float32).reshape(100, 50).T,          # not contiguous
    np.arange(8000, dtype=np.float32)[1:],                         # same dtype, 4 bytes past an aligned start
    [[1.5, 2.5], [3.5, 4.5]],                                     # lists
    np.float32(2.0),                                              # 0-d
])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_copy_of_matches_numpy_and_never_aliases(values, dtype):
    expected = np.array(values, dtype=dtype, order="C", copy=True)  # numpy's casts (int32 truncates)
    out = host_memory.copy_of(values, np.dtype(dtype))
    assert out.shape == expected.shape and out.dtype == dtype and out.flags.c_contiguous
    np.testing.assert_array_equal(out, expected)
    if isinstance(values, np.ndarray):
        assert not np.shares_memory(out, values)
    if out.nbytes >= host_memory.ALIGN_MIN_BYTES:
        assert _address(out) % 64 == 0


def test_tensors_kernel_outputs_and_pool_buffers_are_aligned():
    x = np.random.default_rng(0).standard_normal((96, 128)).astype(np.float32)
    t = ndl.Tensor(x, device=ndl.cpu())
    assert _address(t.cached_data._handle) % 64 == 0
    y = (t @ ndl.Tensor(x.T.copy(), device=ndl.cpu()) + 1).realize_cached_data()
    assert _address(y._handle) % 64 == 0
    x64 = x.astype(np.float64)
    # a float32 dot product of 128 terms (128 u sum |a||b|), then + 1 rounded once more
    bound = 129 * 2.0 ** -24 * (np.abs(x64) @ np.abs(x64).T) + 2.0 ** -23
    assert (np.abs(y.numpy() - (x64 @ x64.T + 1)) <= bound).all()
    temp = POOL.acquire(1 << 16)
    assert _address(temp) % 64 == 0
    POOL.release(temp)
