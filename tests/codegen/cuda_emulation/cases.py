"""The graphs whose CUDA kernels the tests compile with nvcc and run in emulation.

Each case returns the output nodes of a pending graph over `cpu()` leaves (the
device does not matter to the compiler; `plan(..., target="cuda")` lowers for the
GPU).  Together they reach every lowering path: grid-stride elementwise kernels
(every unary and binary op, every cast, views with masks, run-time scalars),
reductions mapped as rows, columns and splits (with fused stages and epilogues),
matmuls (naive, small and large tiles, batched, transposed operands, fused
producers and epilogues, integer and float64), assemble pieces and fills, and the
graphs of real layers: conv forward and backward, an MLP and a CNN training step.
Sizes are small (the emulator runs one fiber per CUDA thread) and odd (ragged
edges, grid-stride remainders).
"""
from __future__ import annotations

import numpy as np

import needle as ndl
from needle import nn, ops, optim
from needle.backend_ndarray.ndarray import NDArray
from needle.ir import build
from needle.ir.nodes import BINARY, UNARY
from needle.ir.printer import output_nodes

CPU = ndl.cpu()
CASES = {}       # name -> (builder, tolerances)
DTYPES = ("float32", "float64", "int32", "int64", "uint8", "bool")


def case(rtol=1e-5, atol=1e-6):
    def register(fn):
        CASES[fn.__name__] = (fn, dict(rtol=rtol, atol=atol))
        return fn
    return register


def build_case(name: str) -> list:
    """The output nodes of case `name` (numpy's global RNG seeded per case)."""
    np.random.seed(sum(map(ord, name)))
    nodes = output_nodes(CASES[name][0]())
    from needle import engine
    engine.forget_later()  # backward() registers losses; not ours to realize later
    return nodes


def leaf(x, dtype=None):
    x = np.asarray(x)
    return build.buffer(NDArray(x, device=CPU, dtype=dtype or x.dtype.name))


def randn(*shape, dtype="float32"):
    return np.random.randn(*shape).astype(dtype)


def tensor(*shape, requires_grad=True):
    return ndl.Tensor(randn(*shape), device=CPU, requires_grad=requires_grad)


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 88.5, -87.0, 1e-30, 0.5, -0.5,
                    1.0, 9.0, -9.0, 20.0, -20.0, 3.25, 2.0, 1e-3], dtype=np.float32)


# ---- elementwise ----------------------------------------------------------------------------------
@case()
def unary_f32():
    x = leaf(np.concatenate([SPECIAL, randn(517) * 4]))
    return [build.elementwise(op, x) for op in UNARY]


@case()
def unary_f64():
    x = leaf(np.concatenate([SPECIAL.astype(np.float64), randn(300, dtype="float64") * 4]))
    return [build.elementwise(op, x) for op in UNARY]


@case()
def binary_f32():
    a = leaf(np.concatenate([SPECIAL, np.abs(randn(200)) + 0.1]))
    b = leaf(np.concatenate([SPECIAL[::-1].copy(), randn(200)]))
    return [build.elementwise(op, a, b) for op in BINARY]


@case()
def binary_ints():
    out = []
    for dtype in ("int32", "int64", "uint8"):
        a = leaf(np.random.randint(0, 200, size=301).astype(dtype))
        b = leaf(np.random.randint(0, 200, size=301).astype(dtype))
        out += [build.elementwise(op, a, b) for op in BINARY if op not in ("div", "pow")]
    return out


@case()
def bool_ops():
    a = leaf(np.random.rand(77) < 0.5)
    b = leaf(np.random.rand(77) < 0.5)
    return [build.elementwise(op, a, b) for op in ("max", "min", "eq", "ne", "lt", "le")]


@case()
def casts():
    values = {"float32": randn(53) * 50 + 60, "float64": randn(53).astype(np.float64) * 50 + 60,
              "int32": np.random.randint(-3, 250, 53).astype(np.int32),
              "int64": np.random.randint(-3, 250, 53).astype(np.int64),
              "uint8": np.random.randint(0, 256, 53).astype(np.uint8), "bool": np.random.rand(53) < 0.5}
    values["float32"][:3] = [0.0, -0.0, 0.5]
    out = []
    for src in DTYPES:
        x = values[src]
        if src.startswith("float"):
            x = np.abs(x) % 250  # float -> uint8 / int is defined only in range
        for dst in DTYPES:
            if dst != src:
                out.append(build.cast(leaf(x.astype(src)), dst))
    return out


@case()
def where_and_params():
    x, y = tensor(9, 31), tensor(9, 31)
    cond = leaf(np.random.rand(9, 31) < 0.3)
    zn, yn = output_nodes([x * 0.37 + 1.3 - y / 2.7, y])
    return [build.elementwise("where", cond, zn, yn), zn]


@case()
def chain_odd_size():
    x, y = tensor(12345), tensor(12345)
    return [ops.tanh(ops.exp(x * 0.5) + y * y) - ops.relu(y) / 3.0]


@case()
def strided_views():
    x, y = tensor(13, 21), tensor(21, 13)
    z = tensor(4, 5, 6)
    a = x + ops.transpose(y)
    b = ops.flip(x, (0, 1)) * ops.broadcast_to(ops.reshape(tensor(21), (1, 21)), (13, 21))
    c = ops.permute(z, (2, 0, 1)) + 1.0
    d = x[2:11:3, 1:20:4] * 2.0
    return [a, b, c, d]


@case()
def long_row_transposes():
    """Transposing copies with rows of 64 and more, which CPU kernels tile in blocks
    (compiler/transpose_blocks.py); CUDA kernels keep one grid-stride loop."""
    x, h = tensor(2, 64, 9, 7), tensor(2, 9, 7, 70)
    return [ops.permute(x, (0, 2, 3, 1)) * 2.0, ops.permute(h, (0, 3, 1, 2)) + 1.0]


@case()
def pad_masks():
    x = tensor(5, 7)
    p = ops.pad(x, ((1, 2), (3, 0)))
    w = tensor(8, 10)
    return [p * 2.0 + w, ops.exp(ops.pad(x, ((0, 0), (2, 2))))]


@case()
def scalar_output():
    x = leaf(randn(1))
    return [build.elementwise("exp", build.reshape(x, ()))]


# ---- reductions -----------------------------------------------------------------------------------
@case(rtol=1e-4, atol=1e-5)
def reduce_axes():
    x = leaf(randn(5, 6, 7))
    outs = [build.reduce("reduce_sum", x, axes) for axes in ((0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2))]
    outs += [build.reduce("reduce_max", x, axes) for axes in ((0,), (2,), (0, 2))]
    return outs


@case()
def reduce_dtypes_and_specials():
    xi = leaf(np.random.randint(-50, 50, size=(6, 40)).astype(np.int32))
    xb = leaf(np.random.rand(6, 40) < 0.1)
    v = randn(6, 40)
    v[2, 5], v[4, 0] = np.nan, np.inf
    xf = leaf(v)
    xl = leaf(np.random.randint(-50, 50, size=(3, 300)).astype(np.int64))
    return [build.reduce("reduce_sum", xi, (1,)), build.reduce("reduce_max", xi, (0,)),
            build.reduce("reduce_max", xb, (1,)), build.reduce("reduce_max", xf, (1,)),
            build.reduce("reduce_sum", xl, (1,)), build.reduce("reduce_max", xl, (1,))]


@case()
def reduce_degenerate():
    x = leaf(randn(4, 1, 9))
    e = leaf(np.zeros((3, 0), np.float32))
    return [build.reduce("reduce_sum", x, (1,)), build.reduce("reduce_sum", e, (1,)),
            build.reduce("reduce_max", e, (1,))]


@case(rtol=1e-4, atol=1e-6)
def softmax_layernorm_logsumexp():
    x = tensor(37, 300)
    e = ops.exp(x - ops.broadcast_to(ops.max(x, axes=(1,), keepdims=True), x.shape))
    softmax = e / ops.broadcast_to(ops.summation(e, axes=(1,), keepdims=True), x.shape)
    y = tensor(11, 70)
    mean = ops.broadcast_to(ops.summation(y, axes=(1,), keepdims=True) / 70, y.shape)
    var = ops.broadcast_to(ops.summation((y - mean) ** 2, axes=(1,), keepdims=True) / 70, y.shape)
    layernorm = (y - mean) / (var + 1e-5) ** 0.5
    return [softmax, layernorm, ops.logsumexp(tensor(9, 130), axes=(1,))]


@case(rtol=1e-4, atol=1e-5)
def reduce_columns_and_tiny():
    return [ops.summation(tensor(5, 1100), axes=(0,)), ops.summation(tensor(100, 7), axes=(1,)),
            ops.max(tensor(3, 2, 1030), axes=(0, 1))]


@case(rtol=1e-4, atol=1e-4)
def reduce_split():
    x = tensor(2, 40000)
    g = tensor(300, 250)
    return [ops.summation(x, axes=(1,)), ops.log(ops.summation(ops.exp(g), axes=None)),
            ops.max(tensor(33000), axes=(0,))]


# ---- matmul ---------------------------------------------------------------------------------------
@case(rtol=1e-4, atol=1e-4)
def matmul_small_tile_ragged_epilogue():
    x, w, b = tensor(33, 65), tensor(65, 17), tensor(1, 17)
    return [ops.relu(x @ w + ops.broadcast_to(b, (33, 17)))]


@case(rtol=1e-4, atol=1e-4)
def matmul_large_tile():
    return [tensor(260, 9) @ tensor(9, 260)]


@case(rtol=1e-4, atol=1e-4)
def matmul_batched_transposed_fused():
    a, b = tensor(3, 20, 30), tensor(3, 30, 40)
    x, w = tensor(70, 45), tensor(70, 33)
    return [a @ b, ops.transpose(x) @ w, ops.relu(x) @ tensor(45, 50) * 2.0]


@case(rtol=1e-10, atol=1e-10)
def matmul_dtypes():
    ai = leaf(np.random.randint(-5, 5, size=(40, 30)).astype(np.int32))
    bi = leaf(np.random.randint(-5, 5, size=(30, 41)).astype(np.int32))
    ad = leaf(randn(35, 36, dtype="float64"))
    bd = leaf(randn(36, 37, dtype="float64"))
    small = build.matmul(leaf(randn(4, 5).astype(np.float64)), leaf(randn(5, 6).astype(np.float64)))
    return [build.matmul(ai, bi), build.matmul(ad, bd), small]


# ---- assemble, conv, layers -----------------------------------------------------------------------
@case()
def assemble_ops():
    x, y = tensor(3, 4), tensor(3, 4)
    parts = ops.split(tensor(3, 5, 2), axis=1)
    return [ops.stack([x, y], axis=1), ops.concatenate([x, y, x], axis=0),
            ops.dilate(x, (0, 1), 2), parts[3] * 2.0]


@case()
def gather_scatter():
    """Advanced indexing: gathers fused with their readers (float and int indices,
    computed out-of-range ones clamped, two index arrays), a gather feeding a matmul,
    and scatter_add with repeated indices (a thread per fiber, index loops serial)."""
    w = tensor(7, 5)
    ids = leaf(np.array([[6.0, 0.0, 6.0], [2.0, -1.0, 3.0]], dtype=np.float32))
    wild = leaf(np.array([-9, 12, 3, -2], dtype=np.int64))
    rows, cols = leaf(np.array([0, 6, 6], dtype=np.int32)), leaf(np.array([4, 0, 4], dtype=np.int32))
    wl = leaf(randn(7, 5))
    values = build.elementwise("tanh", leaf(randn(2, 3, 5)))
    return [build.elementwise("exp", build.gather(wl, [ids], 0)), build.gather(wl, [wild], 0),
            build.gather(wl, [rows, cols], 0), build.matmul(build.gather(wl, [wild], 0), leaf(randn(5, 3))),
            build.scatter_add(values, [ids], 0, (7,)), build.scatter_add(values, [rows], 1, (7,)),
            w[[1, 1, 4]] * 2.0]


@case(rtol=1e-4, atol=1e-4)
def conv_forward_backward():
    z, w = tensor(2, 7, 7, 3), tensor(3, 3, 3, 4)
    out = ops.conv(z, w, stride=2, padding=1)
    loss = ops.summation(out * out)
    loss.backward()
    return [ops.conv(z, w, stride=1, padding=1), out, z.grad, w.grad]


@case(rtol=1e-4, atol=1e-4)
def mlp_train_step():
    model = nn.Sequential(nn.Linear(20, 32, device=CPU), nn.ReLU(), nn.Linear(32, 10, device=CPU))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _train_step(model, opt, tensor(16, 20, requires_grad=False), classes=10)


@case(rtol=1e-4, atol=1e-4)
def cnn_train_step():
    model = nn.Sequential(nn.Conv(3, 4, 3, device=CPU), nn.BatchNorm2d(4, device=CPU), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 6 * 6, 5, device=CPU))
    opt = optim.Adam(model.parameters(), lr=0.01)
    return _train_step(model, opt, tensor(2, 3, 6, 6, requires_grad=False), classes=5)


def _train_step(model, opt, x, classes):
    """One optimizer step on random labels: the loss and the updated parameters."""
    y = ndl.Tensor(np.random.randint(0, classes, x.shape[0]), device=CPU, requires_grad=False)
    loss = nn.SoftmaxLoss()(model(x), y)
    opt.reset_grad()
    loss.backward()
    opt.step()
    return [loss] + list(model.parameters())
