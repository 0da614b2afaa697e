"""Helpers of the nn tests: devices, tensor makers, a finite-difference gradient
check that perturbs any leaf (inputs or a module's parameters), and numpy
reference implementations of the layers, written from the textbook formulas
(never from needle)."""
import numpy as np

import needle as ndl

#: devices the nn tests run on where cheap.
DEVICES = [ndl.cpu(), ndl.cpu_numpy()]
DEVICE_IDS = [str(d) for d in DEVICES]


def tensor(array, device=None, dtype="float32", requires_grad=True) -> ndl.Tensor:
    return ndl.Tensor(np.asarray(array, dtype=dtype), device=device or ndl.cpu(), dtype=dtype,
                      requires_grad=requires_grad)


def grad_check(fn, leaves, eps=1e-6, rtol=1e-5, atol=1e-6):
    """Check d(sum(w * fn())) / d(leaf) from backward() against central differences
    for every leaf (float64 tensors that fn reads: inputs or Parameters).  `w` is a
    fixed random weighting, so a permuted or mis-broadcast adjoint is caught.  Leaves
    are perturbed by assigning `.data`, which works the same eagerly and lazily."""
    out = fn()
    weights = np.asarray(np.random.uniform(0.5, 1.5, size=out.shape))
    for leaf in leaves:
        leaf.grad = None
    (out * ndl.Tensor(weights, device=out.device, dtype=out.dtype, requires_grad=False)).sum().backward()
    for k, leaf in enumerate(leaves):
        assert leaf.grad is not None, f"leaf {k} of shape {leaf.shape} got no gradient"
        got = leaf.grad.numpy()
        base = leaf.numpy().astype(np.float64)
        expected = np.zeros_like(base)
        for j in range(base.size):
            for sign in (1.0, -1.0):
                moved = base.copy()
                moved.flat[j] += sign * eps
                leaf.data = ndl.Tensor(moved, device=leaf.device, dtype=leaf.dtype, requires_grad=False)
                expected.flat[j] += sign * float(np.sum(fn().numpy() * weights)) / (2 * eps)
        leaf.data = ndl.Tensor(base, device=leaf.device, dtype=leaf.dtype, requires_grad=False)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of leaf {k} (shape {leaf.shape}) differs from finite differences")


# ---- numpy references ---------------------------------------------------------------------
def kaiming_bound(fan_in):
    """Kaiming uniform bound for ReLU: gain sqrt(2) times sqrt(3 / fan_in)."""
    return np.sqrt(2.0) * np.sqrt(3.0 / fan_in)


def uniform_draw(shape, low, high):
    """What the course's init.rand draws from the global RNG: rand(*shape) in float32, scaled."""
    return np.random.rand(*shape).astype(np.float32) * (high - low) + low


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def batchnorm_train(x, w, b, eps):
    """Per-feature batch statistics over axis 0, biased variance."""
    mean = x.mean(axis=0)
    var = ((x - mean) ** 2).mean(axis=0)
    return w * (x - mean) / np.sqrt(var + eps) + b, mean, var


def conv_nchw(x, w, b, stride, padding):
    """Cross-correlation, NCHW input, kernel (k, k, C_in, C_out), one output pixel at a time."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, _, h, wd = x.shape
    k, c_out = w.shape[0], w.shape[3]
    ho, wo = (h - k) // stride + 1, (wd - k) // stride + 1
    out = np.zeros((n, c_out, ho, wo), dtype=np.float64)
    for i in range(ho):
        for j in range(wo):
            patch = x[:, :, i * stride:i * stride + k, j * stride:j * stride + k]  # (n, c_in, k, k)
            out[:, :, i, j] = np.einsum("ncyx,yxco->no", patch, w)
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def maxpool_nchw(x, kh, kw, sh, sw):
    """Max over windows by plain loops, PyTorch's floor output size."""
    n, c, h, w = x.shape
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    out = np.empty((n, c, ho, wo), dtype=x.dtype)
    for a in range(n):
        for ch in range(c):
            for i in range(ho):
                for j in range(wo):
                    out[a, ch, i, j] = x[a, ch, i * sh:i * sh + kh, j * sw:j * sw + kw].max()
    return out


def rnn_cell(x, h, w_ih, w_hh, b_ih, b_hh, nonlinearity="tanh"):
    pre = x @ w_ih + h @ w_hh
    if b_ih is not None:
        pre = pre + b_ih + b_hh
    return np.tanh(pre) if nonlinearity == "tanh" else np.maximum(pre, 0)


def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """The LSTM equations, gates in the order input, forget, cell, output."""
    gates = x @ w_ih + h @ w_hh
    if b_ih is not None:
        gates = gates + b_ih + b_hh
    i, f, g, o = np.split(gates, 4, axis=1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c_new), c_new
