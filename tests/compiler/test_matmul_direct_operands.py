"""Matmul tiling reads small operands straight from their buffers instead of
packing them (no pack kernel, no copy per call; B's ragged last panel with masked
loads); values against numpy float64.
A layer-sized activation (128 x 784) is read in place as the forward's A, and packed as
the weight gradient's transposed A."""
import re

import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler import matmul_direct, matmul_tiling
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes
from tests.compiler.operands import f64, lazy, tensor  # noqa: F401  (lazy: an autouse fixture)


def names(*tensors) -> list:
    """The schedule's kernel names, but the one that sums a matmul's shares of K when its
    threads split K (matmul_tiling.splits_k: it depends on the thread count)."""
    schedule, _ = plan(output_nodes(list(tensors)), cpu_target())
    return [call.kernel.name for call in schedule.calls if not re.fullmatch(r"M_.*_K\d+", call.kernel.name)]


def close(y, want):
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


NR = matmul_tiling.tile_shape("float32", cpu_target().vector_bytes)[1]


def test_small_matmul_packs_nothing():
    """64 rows (not a multiple of MR: the last panel's rows are clamped) by a weight
    whose width is whole panels: one kernel."""
    x, w = tensor(64, 200), tensor(200, 4 * NR)
    y = x @ w
    assert names(y) == [f"M_64_{4 * NR}_200"]
    close(y, f64(x) @ f64(w))


def test_ragged_width_reads_b_in_place():
    """N = NR + 3: the last panel of B is read with masked loads; nothing is packed."""
    x, w = tensor(67, 120), tensor(120, NR + 3)  # above matmul_tiling.SMALL
    y = x @ w
    assert names(y) == [f"M_67_{NR + 3}_120"]
    close(y, f64(x) @ f64(w))


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
@pytest.mark.parametrize("m, k, n, packs_b", [
    (100, 784, 100, False),   # MLPResNet's hidden layer: 3 whole panels and one of 4 columns (AVX-512)
    (37, 300, 10, False),     # a classifier's 10 outputs: one ragged panel, ragged rows
    (128, 64, 17, False),
    (300, 500, 300, True),    # a B too large to read in place: packed, with a ragged last panel
    (64, 320, 1000, False),   # large, rows 4000 bytes apart, few rows of A: in place, ragged panel
    (128, 320, 1024, True),   # large, rows 4096 bytes apart (aliasing): packed
])
def test_ragged_columns_with_an_epilogue_on_each_vector_width(vector_bytes, m, k, n, packs_b):
    """relu(x @ w + bias) with N not a multiple of the tile's width, planned and run
    for AVX-512, AVX2 and SSE tiles: the masked last panel, the row-guarded SIMD
    write-back and the checked ragged tiles against numpy float64."""
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    x, w, bias = tensor(m, k), tensor(k, n), tensor(1, n)
    y = ops.relu(x @ w + ops.broadcast_to(bias, (m, n)))
    nodes = output_nodes([y])
    signature = structure(nodes)
    schedule, _ = plan(nodes, target, signature)
    assert any(c.kernel.name.startswith("PB_") for c in schedule.calls) == packs_b
    (out,) = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, ndl.cpu())
    want = np.maximum(f64(x) @ f64(w) + f64(bias), 0)
    # float32 dot products of k terms: error below k * eps * sum|x_ik w_kj| (+ the bias's rounding)
    bound = (k + 1) * np.finfo(np.float32).eps * (np.abs(f64(x)) @ np.abs(f64(w)) + np.abs(f64(bias)))
    assert np.all(np.abs(out.numpy() - want) <= bound)


def test_transposed_a_and_bias_relu_epilogue():
    """The weight gradient's x.T @ g reads x through a transposed view; the epilogue
    still runs on the write-back."""
    x, g, bias = tensor(64, 90), tensor(64, 2 * NR), tensor(1, 2 * NR)
    y = ops.relu(ops.transpose(x) @ g + ops.broadcast_to(bias, (90, 2 * NR)))
    assert not any(n.startswith("P") for n in names(y))
    close(y, np.maximum(f64(x).T @ f64(g) + f64(bias), 0))


def test_fused_producer_is_packed_not_recomputed():
    """An operand computed by the matmul group (here exp of the input) would be
    recomputed for every panel if read directly: it is packed once."""
    x, w = tensor(50, 70), tensor(70, 2 * NR)
    y = ops.exp(x * 0.1) @ w
    macro = next(c.kernel for c in plan(output_nodes([y]), cpu_target())[0].calls if c.kernel.name.startswith("M_"))
    assert sum(b.role == "out" for b in macro.bufs) == 2  # the macro-kernel packs A into a second buffer
    close(y, np.exp(f64(x) * 0.1) @ f64(w))


def test_batched_direct_operands():
    a, b = tensor(3, 60, 80), tensor(3, 80, 2 * NR)
    y = a @ b
    assert not any(n.startswith("P") for n in names(y))
    close(y, f64(a) @ f64(b))


def macro_kernel(y):
    schedule, _ = plan(output_nodes([y]), cpu_target())
    return next(c.kernel for c in schedule.calls if c.kernel.name.startswith("M_"))


def test_large_operands_are_packed_but_a_row_major_a():
    """A large B is packed (PB_); a large A is read in place when its rows run along K,
    and packed by the macro-kernel (a second output buffer) when they do not."""
    n = 1 << 9
    a, b = tensor(n, 2 * n), tensor(2 * n, n)  # 2**19 elements each, above both limits
    assert a.numpy().size > max(matmul_direct.DIRECT_LIMIT.values())
    at = tensor(2 * n, n)
    for y, want, packs_a in ((a @ b, f64(a) @ f64(b), False), (ops.transpose(at) @ b, f64(at).T @ f64(b), True)):
        assert [k[:3] for k in names(y)] == ["PB_", "M_5"]
        assert sum(buf.role == "out" for buf in macro_kernel(y).bufs) == 1 + packs_a
        close(y, want)


def test_a_row_major_activation_is_read_in_place_a_transposed_one_packed():
    """A of 100,352 elements (past A_AFFINE_LIMIT): read in place when its rows run along
    K (x @ w), packed when they do not (x.T @ g, a weight's gradient), where the tile's
    row streams would jump across memory."""
    x, w = tensor(128, 784), tensor(784, 256)
    g = tensor(128, 256)
    assert matmul_direct.A_AFFINE_LIMIT < x.numpy().size

    forward, weight_grad = x @ w, ops.transpose(x) @ g
    assert sum(b.role == "out" for b in macro_kernel(forward).bufs) == 1      # C only: A read in place
    assert sum(b.role == "out" for b in macro_kernel(weight_grad).bufs) == 2  # C and the packed A
    close(forward, f64(x) @ f64(w))
    close(weight_grad, f64(x).T @ f64(g))


def test_a_large_weight_times_few_rows_is_read_in_place():
    """A layer's forward pass (128 x 784 @ 784 x 256): B is past its size limit, but
    only 128 rows of A reuse it, so it is read in place: one kernel, no copy of the
    weight per call.  Its rows are 1 KB apart (within B_ROW_BYTES)."""
    x, w = tensor(128, 784), tensor(784, 256)
    assert w.numpy().size > matmul_direct.DIRECT_LIMIT["b"] and 128 <= matmul_direct.FEW_ROWS
    y = x @ w
    assert [k[:2] for k in names(y)] == ["M_"]
    close(y, f64(x) @ f64(w))


@pytest.mark.parametrize("rows, cols", [(matmul_direct.FEW_ROWS + 128, 256),  # many rows reuse B: packed
                                        (128, 1024)])  # rows 4 KB apart share few cache sets: packed
def test_a_large_weight_is_packed_past_the_few_rows_rule(rows, cols):
    x, w = tensor(rows, 640), tensor(640, cols)
    y = x @ w
    assert [k[:3] for k in names(y)] == ["PB_", "M_" + str(rows)[0]]
    close(y, f64(x) @ f64(w))


@pytest.mark.parametrize("rows, cols, transposed", [(64, 1000, True),    # an LSTM's output-layer gradient
                                                    (128, 1000, False),  # a 1000-class classifier
                                                    (16, 1500, False)])
def test_a_large_b_with_rows_apart_but_not_aliasing_is_read_in_place(rows, cols, transposed):
    """B past its size limit with rows 4000 or 6000 bytes apart (beyond B_ROW_BYTES, not a
    multiple of ALIASING_BYTES) and few rows of A: read in place, no packing kernel."""
    x, w = tensor(*((640, rows) if transposed else (rows, 640))), tensor(640, cols)
    assert w.numpy().size > matmul_direct.DIRECT_LIMIT["b"] and cols * 4 > matmul_direct.B_ROW_BYTES
    assert (cols * 4) % matmul_direct.ALIASING_BYTES != 0 and rows <= matmul_direct.FEW_ROWS
    a = ops.transpose(x) if transposed else x
    y = a @ w
    assert names(y) == [f"M_{rows}_{cols}_640"]  # one kernel: nothing packed
    close(y, (f64(x).T if transposed else f64(x)) @ f64(w))


@pytest.mark.parametrize("rows, packed", [(matmul_direct.FEW_ROWS * 2, True), (matmul_direct.FEW_ROWS, False)])
def test_a_small_b_with_rows_4kb_apart_is_packed_when_many_rows_reuse_it(rows, packed):
    """B of 64 x 1024 (within DIRECT_LIMIT, rows 4 KB apart: few cache sets): packed for
    512 rows of A, read in place for 256."""
    x, w = tensor(rows, 64), tensor(64, 1024)
    assert w.numpy().size <= matmul_direct.DIRECT_LIMIT["b"] and 1024 * 4 > matmul_direct.B_ROW_BYTES
    y = x @ w
    assert [k[:3] for k in names(y)] == ["PB_"] * packed + ["M_" + str(rows)[0]]
    close(y, f64(x) @ f64(w))


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
@pytest.mark.parametrize("n", [10, 50])
@pytest.mark.parametrize("case, by_rows", [
    ("relu(z + b) @ w", True),      # a layer after its hidden layer: A's rows K apart
    ("exp(z) @ w", True),           # a transcendental: computed along K, vectorized
    ("relu(z + b).T @ g", False),   # the weight gradient: A's rows contiguous, packed in panels
])
def test_a_computed_a_whose_rows_lie_apart_is_packed_row_major(vector_bytes, n, case, by_rows):
    """A computed from its producers with rows K apart is packed row-major, computed
    along K (no gathers across rows); values against numpy float64 for AVX-512, AVX2 and
    SSE tiles (131 rows and 10 or 50 columns: ragged panels)."""
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    m, k = 131, 150
    assert m * k * n > matmul_tiling.SMALL  # tiled, not the plain loop nest
    z, b, w, g = tensor(m, k), tensor(1, k), tensor(k, n), tensor(m, n)
    relu = np.maximum(f64(z) + f64(b), 0)
    zb = ops.relu(z + ops.broadcast_to(b, (m, k)))
    y, a, other = {
        "relu(z + b) @ w": (zb @ w, relu, w),
        "exp(z) @ w": (ops.exp(z * 0.1) @ w, np.exp(f64(z) * 0.1), w),
        "relu(z + b).T @ g": (ops.transpose(zb) @ g, relu.T, g),
    }[case]
    nodes = output_nodes([y])
    signature = structure(nodes)
    schedule, _ = plan(nodes, target, signature)
    (macro,) = [c.kernel for c in schedule.calls if c.kernel.name.startswith("M_")]
    assert sum(buf.role == "out" for buf in macro.bufs) == 2  # C and the packed A
    assert ("for ai in" in macro.text()) == by_rows            # rows_block's loop
    (out,) = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, ndl.cpu())
    # float32: each A element within a few eps of its float64 value, then k-term dot products
    bound = (a.shape[1] + 3) * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(f64(other)))
    assert np.all(np.abs(out.numpy() - a @ f64(other)) <= bound)


@pytest.mark.parametrize("m, k, n, dtype", [
    (7, 1100, 40, "float32"),    # three K blocks, the last ragged; one ragged row panel
    (200, 600, 24, "float64"),   # float64 tiles, two K blocks
])
def test_a_computed_a_packed_row_major_over_several_k_blocks(m, k, n, dtype):
    """relu(z + b) @ w with K past one block (KC): each block's rows are computed along
    its own depth; values against numpy float64."""
    z = ndl.Tensor(np.random.randn(m, k).astype(dtype), requires_grad=False, dtype=dtype)
    b = ndl.Tensor(np.random.randn(1, k).astype(dtype), requires_grad=False, dtype=dtype)
    w = ndl.Tensor(np.random.randn(k, n).astype(dtype), requires_grad=False, dtype=dtype)
    y = ops.relu(z + ops.broadcast_to(b, (m, k))) @ w
    assert k > matmul_tiling.KC and "for ai in" in macro_kernel(y).text()
    a = np.maximum(f64(z) + f64(b), 0)
    bound = (k + 3) * np.finfo(dtype).eps * (np.abs(a) @ np.abs(f64(w)))
    assert np.all(np.abs(y.numpy() - a @ f64(w)) <= bound)
