"""On a real GPU only (skipped elsewhere; scripts/gpu_check.sh runs it): every case of
cuda_emulation/cases.py compiled by the runtime and run with full grids, against the
reference executor, plus a larger softmax / matmul / training step than the emulator
can afford."""
import numpy as np
import pytest

import needle as ndl
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cuda_target
from needle.backend_ndarray.ndarray import NDArray
from needle.compiler import schedule as scheduling
from needle.ir import reference

from cuda_emulation import cases


def _gpu():
    from needle.runtime import cuda as rt
    return rt if rt.available()[0] else None


pytestmark = pytest.mark.skipif(_gpu() is None, reason="no CUDA GPU (PyCUDA, driver and GPU needed)")


def _to_gpu(leaf):
    """The same strided view over a device copy of the leaf's whole storage."""
    rt = _gpu()
    return NDArray.make(leaf.shape, leaf.strides, device=ndl.cuda(), handle=rt.from_numpy(leaf._handle),
                        offset=leaf.offset, dtype=leaf.dtype)


@pytest.mark.parametrize("name", list(cases.CASES))
def test_cases_on_gpu(name):
    assert _gpu() is not None
    nodes = cases.build_case(name)
    expected = reference.evaluate(nodes)
    schedule, _ = scheduling.plan(nodes, cuda_target())
    leaves, _, scalars, _ = scheduling.graph_inputs(nodes)
    outputs = schedule_cache.compile_schedule(schedule, cuda_target()).run([_to_gpu(x) for x in leaves], scalars, ndl.cuda())
    tol = cases.CASES[name][1]
    for g, e in zip(outputs, expected):
        g = g.numpy()
        assert g.shape == e.shape and g.dtype == e.dtype
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, equal_nan=True, **tol)
        else:
            np.testing.assert_array_equal(g, e)


def test_large_fused_kernels_on_gpu():
    x = np.random.randn(4096, 1000).astype(np.float32)
    w = np.random.randn(1000, 777).astype(np.float32)
    a, b = ndl.Tensor(x, device=ndl.cuda()), ndl.Tensor(w, device=ndl.cuda())
    e = ndl.ops.exp(a - ndl.ops.broadcast_to(ndl.ops.max(a, axes=(1,), keepdims=True), a.shape))
    softmax = e / ndl.ops.broadcast_to(ndl.ops.summation(e, axes=(1,), keepdims=True), a.shape)
    product = ndl.ops.relu(a @ b)
    total = ndl.ops.summation(a)
    ndl.realize(softmax, product, total)
    ref = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax.numpy(), ref / ref.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(product.numpy(), np.maximum(x @ w, 0), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(total.numpy(), x.sum(dtype=np.float64), rtol=1e-4)
