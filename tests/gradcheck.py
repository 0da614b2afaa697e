"""Shared helpers of the op tests: devices to run on, tensor makers, and a
finite-difference gradient check in the style of the course's `gradient_check`.

References are always independent of needle: numpy for forward values, central
finite differences (float64) for gradients.
"""
import numpy as np

import needle as ndl

#: devices every op test runs on (cuda() joins when a GPU is usable).
DEVICES = [ndl.cpu(), ndl.cpu_numpy()] + ([ndl.cuda()] if ndl.cuda().enabled() else [])
DEVICE_IDS = [str(d) for d in DEVICES]


def tensor(array, device, dtype="float64", requires_grad=True) -> ndl.Tensor:
    return ndl.Tensor(np.asarray(array, dtype=dtype), device=device, dtype=dtype, requires_grad=requires_grad)


def randn(shape, device, dtype="float64", requires_grad=True) -> ndl.Tensor:
    return tensor(np.random.randn(*shape), device, dtype, requires_grad)


def positive(shape, device, low=0.5, high=2.0, dtype="float64") -> ndl.Tensor:
    """Values in [low, high): a safe domain for log, sqrt, division and powers."""
    return tensor(np.random.uniform(low, high, size=shape), device, dtype)


def away_from_zero(shape, device, margin=0.1, dtype="float64") -> ndl.Tensor:
    """Random signs with |x| >= margin, so finite differences do not straddle a kink at 0."""
    values = np.random.uniform(margin, 2.0, size=shape) * np.random.choice([-1.0, 1.0], size=shape)
    return tensor(values, device, dtype)


def _weighted_sum(out, weights) -> float:
    return float(np.sum(out.numpy().astype(np.float64) * weights))


def gradient_check(f, *args, eps=1e-6, atol=1e-6, rtol=1e-5, **kwargs):
    """Compare the gradients that `backward()` gives for `f(*args, **kwargs)` with
    central finite differences.

    The output is contracted with a fixed random weight tensor `w` (so wrong
    permutations of the adjoint are caught, unlike with all-ones), and
    `f(...).backward(w)` must give d(sum(w * f)) / d(arg) for each arg.  Each
    perturbation writes the leaf's live storage through
    `realize_cached_data().flat[j]` and rebuilds the graph, as in the course.
    Returns the backward gradients (numpy arrays)."""
    out = f(*args, **kwargs)
    weights = np.random.uniform(0.5, 1.5, size=out.shape)
    numerical = []
    for arg in args:
        grad = np.zeros(arg.shape)
        storage = arg.realize_cached_data()
        for j in range(grad.size):
            storage.flat[j] += eps
            f_plus = _weighted_sum(f(*args, **kwargs), weights)
            storage.flat[j] -= 2 * eps
            f_minus = _weighted_sum(f(*args, **kwargs), weights)
            storage.flat[j] += eps
            grad.flat[j] = (f_plus - f_minus) / (2 * eps)
        numerical.append(grad)
    for arg in args:
        arg.grad = None
    out = f(*args, **kwargs)
    out.backward(ndl.Tensor(weights, device=out.device, dtype=out.dtype, requires_grad=False))
    computed = []
    for i, (arg, expected) in enumerate(zip(args, numerical)):
        assert arg.grad is not None, f"argument {i} got no gradient"
        assert tuple(arg.grad.shape) == tuple(arg.shape), \
            f"argument {i}: gradient shape {arg.grad.shape} differs from the input's {arg.shape}"
        assert arg.grad.dtype == arg.dtype, f"argument {i}: gradient dtype {arg.grad.dtype} != {arg.dtype}"
        got = arg.grad.numpy()
        np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of argument {i} differs from finite differences")
        computed.append(got)
    return computed
