"""needle.profile() on cuda(): launches timed through CUDA events (on the PyCUDA
stand-in when there is no GPU: its events report 1 us per kernel)."""
import numpy as np

import needle as ndl
from cuda_emulation.gpu import gpu, pytestmark  # noqa: F401  (the fixture and its skip)


def test_cuda_launches_are_profiled(gpu):
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal((8, 33)).astype(np.float32) for _ in range(2))
    a, b = ndl.Tensor(a_np, device=ndl.cuda()), ndl.Tensor(b_np, device=ndl.cuda())
    with ndl.lazy(True):
        with ndl.profile() as p:
            for _ in range(2):
                out = (ndl.relu(a * b)).sum(axes=(1,))
                got = out.numpy()
    np.testing.assert_allclose(got, np.maximum(a_np * b_np, 0).sum(axis=1), rtol=1e-5)
    rows = p.rows()
    assert rows and all(r.device == "cuda()" for r in rows)
    assert {r.calls for r in rows} == {2}
    assert set().union(*(set(r.ops) for r in rows)) == {"EWiseMul", "ReLU", "Summation"}
    assert all(line[0].endswith("test_profiler_cuda_emulated.py") for r in rows for line in r.lines)
    assert "cuda()" in p.table(print_it=False)
