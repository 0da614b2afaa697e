"""What every saved fuzzer regression runs: the needle program against its numpy
twin, with the fuzzer's error bounds (forward) or finite differences (gradient)."""
import numpy as np

import needle as ndl
from needle import config

#: the CUDA lowering's size thresholds shrunk so that small programs reach every mapping
#: (tiled matmuls with small and large tiles, reductions as rows and as ragged splits)
SMALL_THRESHOLDS = dict(NAIVE_MATMUL=0, LARGE_TILE_SIDE=5, LARGE_TILE_OUTPUTS=30, COLUMNS_MAX_REDUCED=2,
                        SPLIT_MIN=101, SPLIT_OUTPUTS=6, SPLIT_CHUNK=100)


def check_forward(inputs, needle_program, numpy_program, checks, lazy=True, together=False,
                  bounds_check=False, monkeypatch=None, device=None, small_thresholds=False):
    """`checks` holds (variable, absolute tolerance per value, values to skip) per output;
    nan must meet nan and inf the same inf.  `device`: the `gpu` fixture runs the program
    on cuda() (the emulator without a GPU), else it runs on cpu(); `small_thresholds`
    lowers it with SMALL_THRESHOLDS."""
    if bounds_check:
        monkeypatch.setattr(config, "BOUNDS_CHECK", True)
    if small_thresholds:
        _shrink_thresholds(monkeypatch)
    x = inputs()
    want = numpy_program(x)
    with ndl.lazy(lazy):
        outs, _ = needle_program(x, ndl.cuda() if device is not None else ndl.cpu())
        if together:
            ndl.realize(*outs)  # all outputs in one schedule
        got = [o.numpy() for o in outs]
    for g, (k, tol, skip) in zip(got, checks):
        assert g.shape == want[k].shape and g.dtype == x[0].dtype, f"v{k}: {g.dtype}{g.shape}"
        g64, w = g.astype(np.float64), want[k]
        with np.errstate(invalid="ignore"):
            same = (np.isnan(g64) & np.isnan(w)) | (np.isinf(w) & (g64 == w)) | (np.abs(g64 - w) <= np.asarray(tol))
        ok = same | np.asarray(skip, dtype=bool)
        assert ok.all(), f"v{k}: got {g64[~ok]}, want {w[~ok]}"


def _shrink_thresholds(monkeypatch) -> None:
    from needle.compiler import cuda_lowering
    for name, value in SMALL_THRESHOLDS.items():
        monkeypatch.setattr(cuda_lowering, name, value)


def check_gradient(inputs, needle_program, numpy_program, out, step, device=None, small_thresholds=False,
                   monkeypatch=None):
    """Gradients of a random weighting of output `out` against central differences;
    `device` (the `gpu` fixture) runs them bounds-checked on cuda(), with SMALL_THRESHOLDS
    if `small_thresholds`."""
    x = inputs()
    want = numpy_program(x)
    w = np.random.default_rng(1234).uniform(0.5, 1.5, size=want[out].shape)
    if device is not None:
        monkeypatch.setattr(config, "BOUNDS_CHECK", True)
        if small_thresholds:
            _shrink_thresholds(monkeypatch)
    dev = ndl.cuda() if device is not None else ndl.cpu()
    with ndl.lazy(True):
        outs, tensors = needle_program(x, dev, requires_grad=True)
        outs[0].backward(ndl.Tensor(w, device=dev, dtype="float64", requires_grad=False))
        np.testing.assert_allclose(outs[0].numpy(), want[out], rtol=1e-7, atol=1e-9)
        for i, t in enumerate(tensors):
            expected = np.zeros(x[i].shape)
            for j in range(x[i].size):
                plus, minus = [y.copy() for y in x], [y.copy() for y in x]
                plus[i].flat[j] += step
                minus[i].flat[j] -= step
                expected.flat[j] = (np.sum(w * numpy_program(plus)[out]) -
                                    np.sum(w * numpy_program(minus)[out])) / (2 * step)
            got = t.grad.numpy() if t.grad is not None else np.zeros(x[i].shape)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"input {i}")
