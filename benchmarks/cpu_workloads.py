"""The CPU benchmark's workloads, written once per implementation.

`build(impl, name, arrays)` returns a zero-argument callable that runs one
iteration of workload `name` to completion (results realized / blocked on) on
the float32 numpy `arrays` from `inputs(name)`.  Implementations: numpy, needle
(lazy fused), needle-eager (eager compiled kernels), needle-jit (lazy, captured
by needle.jit and replayed), torch (eager),
torch.compile, jax (jax.jit).  Each is imported only when asked for, so one
process measures one implementation.
"""
from __future__ import annotations

import numpy as np

# name -> (family, input shapes): float32 normals; ("labels", n, k) is n int64 class indices below k
WORKLOADS = {
    "cross-entropy 4096x1024": ("cross-entropy", {"logits": (4096, 1024), "labels": ("labels", 4096, 1024)}),
    "row softmax 4096x1024": ("softmax", {"x": (4096, 1024)}),
    "logsoftmax 4096x1024": ("logsoftmax", {"x": (4096, 1024)}),
    "layernorm 4096x1024": ("layernorm", {"x": (4096, 1024)}),
    "layernorm 8192x100": ("layernorm", {"x": (8192, 100)}),
    "sum over rows 4096^2": ("sum_rows", {"x": (4096, 4096)}),
    "sum over columns 4096^2": ("sum_cols", {"x": (4096, 4096)}),
    "sum of all 4096^2": ("sum_all", {"x": (4096, 4096)}),
    "matmul 256": ("matmul", {"a": (256, 256), "b": (256, 256)}),
    "matmul 512": ("matmul", {"a": (512, 512), "b": (512, 512)}),
    "matmul 1024": ("matmul", {"a": (1024, 1024), "b": (1024, 1024)}),
    "matmul 128x784x256": ("matmul", {"a": (128, 784), "b": (784, 256)}),
    "matmul 784x128x256": ("matmul", {"a": (784, 128), "b": (128, 256)}),
    "matmul 100x784x100": ("matmul", {"a": (100, 784), "b": (784, 100)}),
    "matmul 16x32x256": ("matmul", {"a": (16, 32), "b": (32, 256)}),
    "matmul 1x1024x1024": ("matmul", {"a": (1, 1024), "b": (1024, 1024)}),
    "matmul 32x512x2048": ("matmul", {"a": (32, 512), "b": (512, 2048)}),
    "batched matmul 4x8x32x32": ("matmul", {"a": (4, 8, 32, 32), "b": (4, 8, 32, 32)}),
    "elementwise chain 2^14": ("chain", {"x": (1 << 14,), "y": (1 << 14,), "z": (1 << 14,)}),
    "elementwise chain 2^20": ("chain", {"x": (1 << 20,), "y": (1 << 20,), "z": (1 << 20,)}),
    "elementwise chain 2^24": ("chain", {"x": (1 << 24,), "y": (1 << 24,), "z": (1 << 24,)}),
    "exp 2^20": ("exp", {"x": (1 << 20,)}),
    "tanh 2^20": ("tanh", {"x": (1 << 20,)}),
    "log 2^20": ("log", {"p": (1 << 20,)}),
    "pow 2^20 (x ** y)": ("pow", {"p": (1 << 20,), "y": (1 << 20,)}),
    # NHWC input, (K, K, C_in, C_out) weight as in the course; torch takes NCHW / OIHW copies
    "conv 3x3 64->64 32x32 b16": ("conv", {"z": (16, 32, 32, 64), "w": (3, 3, 64, 64)}),
    "conv 3x3 grads 64->64 b16": ("conv_grad1", {"z": (16, 32, 32, 64), "w": (3, 3, 64, 64),
                                                 "g": (16, 32, 32, 64)}),
    "conv 3x3/2 grads 64->128 b16": ("conv_grad", {"z": (16, 32, 32, 64), "w": (3, 3, 64, 128),
                                                          "g": (16, 16, 16, 128)}),
    "MLP step 784-256-10 b128": ("mlp", {"x": (128, 784), "labels": ("labels", 128, 10), "w1": (784, 256),
                                         "b1": (256,), "w2": (256, 10), "b2": (10,)}),
}
QUICK = ("cross-entropy 4096x1024", "row softmax 4096x1024", "sum over rows 4096^2", "matmul 256",
         "elementwise chain 2^14", "elementwise chain 2^20", "MLP step 784-256-10 b128")
#: (stride, padding) of the conv families; the GRADS families compute dL/dZ and dL/dW given g = dL/d out
CONV = {"conv": (1, 1), "conv_grad": (2, 1), "conv_grad1": (1, 1)}
GRADS = ("conv_grad", "conv_grad1")
IMPLEMENTATIONS = ("numpy", "needle-eager", "needle", "needle-jit", "torch", "torch.compile", "jax")


def inputs(name: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for key, shape in WORKLOADS[name][1].items():
        if shape[0] == "labels":
            out[key] = rng.integers(0, shape[2], shape[1]).astype(np.int64)
        else:
            scale = 0.05 if key.startswith("w") else 1.0
            value = rng.standard_normal(shape) * scale
            out[key] = (np.abs(value) + 0.1 if key == "p" else value).astype(np.float32)  # p: positive
    return out


def bytes_touched(name: str) -> int:
    """Input bytes one iteration must read (for the bandwidth column)."""
    return sum(int(np.prod(s[1:2] if s[0] == "labels" else s)) * (8 if s[0] == "labels" else 4)
               for s in WORKLOADS[name][1].values())


def build(impl: str, name: str, arrays: dict):
    builder = {"numpy": _numpy, "needle": _needle, "needle-eager": _needle, "needle-jit": _needle,
               "torch": _torch, "torch.compile": _torch, "jax": _jax}[impl]
    return builder(impl, WORKLOADS[name][0], arrays)


# ---- numpy ----------------------------------------------------------------------------------------
def _numpy(impl, family, a):
    def logsumexp(x):
        m = x.max(1, keepdims=True)
        return np.log(np.exp(x - m).sum(1, keepdims=True)) + m

    def mlp():
        x, y = a["x"], a["labels"]
        h = np.maximum(x @ a["w1"] + a["b1"], 0)
        z = h @ a["w2"] + a["b2"]
        p = np.exp(z - logsumexp(z))
        p[np.arange(len(y)), y] -= 1
        dz = p / len(y)
        dh = (dz @ a["w2"].T) * (h > 0)
        for w, g in ((a["w2"], h.T @ dz), (a["b2"], dz.sum(0)), (a["w1"], x.T @ dh), (a["b1"], dh.sum(0))):
            w -= 0.01 * g
    def windows():
        stride, pad = CONV[family]
        zp = np.pad(a["z"], ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        k = a["w"].shape[0]
        return np.lib.stride_tricks.sliding_window_view(zp, (k, k), axis=(1, 2))[:, ::stride, ::stride]

    def conv_grad():  # (N, Ho, Wo, C, kh, kw) windows; dZ by adding each tap's share back
        stride, pad = CONV[family]
        cols, g, w = windows(), a["g"], a["w"]
        dw = np.tensordot(cols, g, axes=([0, 1, 2], [0, 1, 2])).transpose(1, 2, 0, 3)
        dcols = np.tensordot(g, w, axes=([3], [3]))  # (N, Ho, Wo, kh, kw, C)
        n, h, wd, c = a["z"].shape
        dzp = np.zeros((n, h + 2 * pad, wd + 2 * pad, c), np.float32)
        ho, wo = g.shape[1:3]
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                dzp[:, i:i + stride * ho:stride, j:j + stride * wo:stride] += dcols[:, :, :, i, j]
        return dzp[:, pad:pad + h, pad:pad + wd], dw
    fns = {
        "conv": lambda: np.tensordot(windows(), a["w"], axes=([3, 4, 5], [2, 0, 1])),
        "conv_grad": conv_grad,
        "conv_grad1": conv_grad,
        "cross-entropy": lambda: (logsumexp(a["logits"])[:, 0]
                                  - a["logits"][np.arange(len(a["labels"])), a["labels"]]).mean(),
        "softmax": lambda: (lambda e: e / e.sum(1, keepdims=True))(np.exp(a["x"] - a["x"].max(1, keepdims=True))),
        "logsoftmax": lambda: a["x"] - logsumexp(a["x"]),
        "layernorm": lambda: (lambda d: d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5))(
            a["x"] - a["x"].mean(1, keepdims=True)),
        "sum_rows": lambda: a["x"].sum(1),
        "sum_cols": lambda: a["x"].sum(0),
        "sum_all": lambda: a["x"].sum(),
        "matmul": lambda: a["a"] @ a["b"],
        "chain": lambda: np.maximum(a["x"] * a["y"] + a["z"], 0) * 0.5 + np.exp(-a["x"]),
        "exp": lambda: np.exp(a["x"]),
        "tanh": lambda: np.tanh(a["x"]),
        "log": lambda: np.log(a["p"]),
        "pow": lambda: a["p"] ** a["y"],
        "mlp": mlp,
    }
    return fns[family]


# ---- needle ---------------------------------------------------------------------------------------
def _needle(impl, family, a):
    import needle as ndl
    from needle import nn, ops
    lazy = impl != "needle-eager"
    # needle-jit: the iteration captured once by needle.jit and replayed (as torch.compile
    # and jax.jit compile theirs); needle: lazy, the Python of every op run each time
    wrap = ndl.jit if impl == "needle-jit" else (lambda f: f)
    if family == "mlp":
        # the peers' step exactly: these weights, plain SGD at lr 0.01 (no momentum), int labels
        with ndl.lazy(lazy):
            model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
            for layer, w, b in ((model.modules[0], "w1", "b1"), (model.modules[2], "w2", "b2")):
                layer.weight = nn.Parameter(ndl.Tensor(a[w], device=ndl.cpu()))
                layer.bias = nn.Parameter(ndl.Tensor(a[b].reshape(1, -1), device=ndl.cpu()))
            opt, loss_fn = ndl.optim.SGD(model.parameters(), lr=0.01), nn.SoftmaxLoss()
            x, y = (ndl.Tensor(a[k], device=ndl.cpu(), requires_grad=False) for k in ("x", "labels"))

        def train_step():
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return [loss] + model.parameters()
        step = wrap(train_step)

        def run():
            with ndl.lazy(lazy):
                ndl.realize(*step())
        return run
    with ndl.lazy(lazy):
        t = {k: ndl.Tensor(v, device=ndl.cpu(), requires_grad=False) for k, v in a.items() if k != "labels"}
        if "labels" in a:
            t["labels"] = ndl.Tensor(a["labels"], device=ndl.cpu())
        if family in GRADS:
            t["z"], t["w"] = (ndl.Tensor(a[k], device=ndl.cpu()) for k in ("z", "w"))
        layernorm = nn.LayerNorm1d(a["x"].shape[1], device=ndl.cpu()) if family == "layernorm" else None

    def softmax(x):
        e = ops.exp(x - ops.broadcast_to(x.max((1,), keepdims=True), x.shape))
        return e / ops.broadcast_to(e.sum((1,), keepdims=True), x.shape)

    def conv_grad():
        y = ops.conv(t["z"], t["w"], *CONV[family])
        y.backward(t["g"])
        return [t["z"].grad, t["w"].grad]
    fns = {
        "conv": lambda: ops.conv(t["z"], t["w"], *CONV[family]),
        "conv_grad": conv_grad,
        "conv_grad1": conv_grad,
        "cross-entropy": lambda: nn.SoftmaxLoss()(t["logits"], t["labels"]),
        "softmax": lambda: softmax(t["x"]),
        "logsoftmax": lambda: ops.logsoftmax(t["x"], axis=1),
        "layernorm": lambda: layernorm(t["x"]),
        "sum_rows": lambda: t["x"].sum((1,)),
        "sum_cols": lambda: t["x"].sum((0,)),
        "sum_all": lambda: t["x"].sum(),
        "matmul": lambda: t["a"] @ t["b"],
        "chain": lambda: ops.relu(t["x"] * t["y"] + t["z"]) * 0.5 + ops.exp(-t["x"]),
        "exp": lambda: ops.exp(t["x"]),
        "tanh": lambda: ops.tanh(t["x"]),
        "log": lambda: ops.log(t["p"]),
        "pow": lambda: ops.power(t["p"], t["y"]),
    }
    fn = wrap(fns[family])

    def run():
        with ndl.lazy(lazy):
            ndl.realize(fn())
    return run


# ---- torch ----------------------------------------------------------------------------------------
def _torch(impl, family, a):
    import torch
    import torch.nn.functional as F
    t = {k: torch.from_numpy(v.copy()) for k, v in a.items()}
    if family == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        forward = torch.compile(model) if impl == "torch.compile" else model

        def step():
            opt.zero_grad()
            F.cross_entropy(forward(t["x"]), t["labels"]).backward()
            opt.step()
        return step
    if family in CONV:
        stride, pad = CONV[family]
        t["z"] = torch.from_numpy(a["z"].transpose(0, 3, 1, 2).copy()).requires_grad_(family in GRADS)
        t["w"] = torch.from_numpy(a["w"].transpose(3, 2, 0, 1).copy()).requires_grad_(family in GRADS)
        def conv(z, w):
            return F.conv2d(z, w, stride=stride, padding=pad)
        conv = torch.compile(conv) if impl == "torch.compile" else conv
        if family in GRADS:
            g = torch.from_numpy(a["g"].transpose(0, 3, 1, 2).copy())
            return lambda: torch.autograd.grad(conv(t["z"], t["w"]), (t["z"], t["w"]), g)

        def conv_forward():
            with torch.no_grad():
                conv(t["z"], t["w"])
        return conv_forward
    fns = {
        "cross-entropy": lambda logits, labels: F.cross_entropy(logits, labels),
        "softmax": lambda x: torch.softmax(x, 1),
        "logsoftmax": lambda x: torch.log_softmax(x, 1),
        "layernorm": lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5),
        "sum_rows": lambda x: x.sum(1),
        "sum_cols": lambda x: x.sum(0),
        "sum_all": lambda x: x.sum(),
        "matmul": lambda a_, b_: a_ @ b_,
        "chain": lambda x, y, z: torch.relu(x * y + z) * 0.5 + torch.exp(-x),
        "exp": torch.exp,
        "tanh": torch.tanh,
        "log": torch.log,
        "pow": torch.pow,
    }
    fn = torch.compile(fns[family]) if impl == "torch.compile" else fns[family]
    args = [t[k] for k in ARGS[family]]

    def run():
        with torch.no_grad():
            fn(*args)
    return run


# ---- jax ------------------------------------------------------------------------------------------
def _jax(impl, family, a):
    import jax
    import jax.numpy as jnp
    t = {k: jnp.asarray(v) for k, v in a.items()}
    if family == "mlp":
        params = {k: t[k] for k in ("w1", "b1", "w2", "b2")}

        def loss(p, x, y):
            z = jnp.maximum(x @ p["w1"] + p["b1"], 0) @ p["w2"] + p["b2"]
            return jnp.mean(jax.nn.logsumexp(z, 1) - jnp.take_along_axis(z, y[:, None], 1)[:, 0])

        @jax.jit
        def step(p, x, y):
            g = jax.grad(loss)(p, x, y)
            return {k: p[k] - 0.01 * g[k] for k in p}
        state = [params]

        def run():
            state[0] = jax.block_until_ready(step(state[0], t["x"], t["labels"]))
        return run
    if family in CONV:
        stride, pad = CONV[family]

        def conv(z, w):
            return jax.lax.conv_general_dilated(z, w, (stride, stride), ((pad, pad), (pad, pad)),
                                                dimension_numbers=("NHWC", "HWIO", "NHWC"))
        if family in GRADS:
            grads = jax.jit(lambda z, w, g: jax.vjp(conv, z, w)[1](g))
            return lambda: jax.block_until_ready(grads(t["z"], t["w"], t["g"]))
        forward = jax.jit(conv)
        return lambda: jax.block_until_ready(forward(t["z"], t["w"]))
    fns = {
        "cross-entropy": lambda logits, labels: jnp.mean(
            jax.nn.logsumexp(logits, 1) - jnp.take_along_axis(logits, labels[:, None], 1)[:, 0]),
        "softmax": lambda x: jax.nn.softmax(x, 1),
        "logsoftmax": lambda x: jax.nn.log_softmax(x, 1),
        "layernorm": lambda x: (lambda d: d / jnp.sqrt((d * d).mean(1, keepdims=True) + 1e-5))(
            x - x.mean(1, keepdims=True)),
        "sum_rows": lambda x: x.sum(1),
        "sum_cols": lambda x: x.sum(0),
        "sum_all": lambda x: x.sum(),
        "matmul": lambda a_, b_: a_ @ b_,
        "chain": lambda x, y, z: jnp.maximum(x * y + z, 0) * 0.5 + jnp.exp(-x),
        "exp": jnp.exp,
        "tanh": jnp.tanh,
        "log": jnp.log,
        "pow": lambda x, y: x ** y,
    }
    fn = jax.jit(fns[family])
    args = [t[k] for k in ARGS[family]]
    return lambda: jax.block_until_ready(fn(*args))


ARGS = {"cross-entropy": ("logits", "labels"), "softmax": ("x",), "logsoftmax": ("x",),
               "layernorm": ("x",), "sum_rows": ("x",), "sum_cols": ("x",), "sum_all": ("x",),
               "matmul": ("a", "b"),
               "chain": ("x", "y", "z"), "exp": ("x",), "tanh": ("x",), "log": ("p",), "pow": ("p", "y")}
