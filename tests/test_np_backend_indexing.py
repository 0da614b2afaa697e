"""Indexing, index assignment, comparisons and the new methods under NEEDLE_BACKEND=np
(plain numpy arrays, float64 kept), in a subprocess: the backend is chosen at import."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    import needle as ndl
    from needle import nn, ops
    assert ndl.BACKEND == "np"
    a = ndl.Tensor(np.arange(12.0).reshape(3, 4))
    an = a.numpy()
    assert a.dtype == "float64"
    for idx in [([0, 2], 1), (an > 5,), (slice(None), [3, -1]), ([[0], [2]], [1, 3])]:
        idx = idx if len(idx) > 1 else idx[0]
        np.testing.assert_array_equal(a[idx].numpy(), an[idx])
    out = a[[2, 0, 2]]
    out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[1] * 4, [0] * 4, [2] * 4])
    b = a * 1
    b[0, [1, 2]] = 9.0
    expected = an.copy()
    expected[0, [1, 2]] = 9.0
    np.testing.assert_array_equal(b.numpy(), expected)
    np.testing.assert_array_equal((a > 5).numpy(), (an > 5).astype(np.float64))
    np.testing.assert_array_equal(a.argmax(1).numpy(), an.argmax(1))
    np.testing.assert_allclose(a.var(0).numpy(), an.var(0, ddof=1))
    logits = ndl.Tensor(np.random.randn(4, 3))
    loss = nn.SoftmaxLoss()(logits, ndl.Tensor([0, 2, 1, 2]))
    loss.backward()
    L = logits.numpy()
    p = np.exp(L) / np.exp(L).sum(1, keepdims=True)
    p[np.arange(4), [0, 2, 1, 2]] -= 1
    np.testing.assert_allclose(logits.grad.numpy(), p / 4, rtol=1e-12)
    with ndl.no_grad():
        assert not (a * 2).requires_grad
    print("ok")
""")


def test_indexing_under_the_numpy_backend():
    env = dict(os.environ, NEEDLE_BACKEND="np")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
