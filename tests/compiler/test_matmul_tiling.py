"""Matmul tiling of batched and short-K matmuls: a stack of small matrices whose
total work is large takes the tiled kernels, with packed panels as deep as K (not
the KC block) so the packed operand is dense; values against numpy float64."""
import math

import numpy as np
import pytest

import needle as ndl
from needle import config, ops
from needle.compiler import matmul_tiling
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes


def tensor(*shape):
    return ndl.Tensor(np.random.randn(*shape).astype(np.float32), requires_grad=False)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((4, 8, 32, 32), (4, 8, 32, 32)),    # attention-sized: 32 matrices of 32^3
    ((3, 45, 20), (3, 20, 70)),          # ragged rows and columns, K = 20
    ((2, 3, 50, 7), (2, 3, 7, 80)),      # K shorter than a vector
])
def test_batched_small_matmuls_are_tiled_and_exact(a_shape, b_shape):
    a, b = tensor(*a_shape), tensor(*b_shape)
    y = ops.relu(a @ b) * 2.0  # with a fused epilogue
    schedule, _ = plan(output_nodes([y]), cpu_target())
    macro = [c.kernel for c in schedule.calls if c.kernel.name.startswith("M_")]
    assert len(macro) == 1 and "register acc" in macro[0].text()  # the register-tiled macro-kernel
    # each matrix of the stack is small enough to read in place (DIRECT_LIMIT), so nothing
    # is packed: the same panels, without a packing kernel's launch and copy (B's ragged
    # last panel is read with masked loads)
    assert not [c.kernel.name for c in schedule.calls if c.kernel.name.startswith("P")]
    want = np.maximum(np.matmul(a.numpy().astype(np.float64), b.numpy()), 0) * 2
    # a float32 dot product of K terms is off by at most K eps sum|a||b|, and one more
    # rounding to store it; the epilogue's x2 doubles value and error alike
    scale = np.matmul(np.abs(a.numpy()).astype(np.float64), np.abs(b.numpy()))
    bound = 2 * (a_shape[-1] + 1) * np.finfo(np.float32).eps * scale
    assert np.all(np.abs(y.numpy() - want) <= bound)


def packs_a(macro) -> bool:
    """Whether a macro-kernel packs A itself: it stores into a second buffer besides C."""
    return sum(b.role == "out" for b in macro.bufs) == 2


def test_packed_panels_are_as_deep_as_k():
    """A packed operand holds BT * MP * K * MR elements when K fits one block."""
    # A: 140,000 elements a matrix, its rows across K (a transpose): packed
    a, b = ops.transpose(tensor(2, 100, 1400)), tensor(2, 100, 64)
    schedule, _ = plan(output_nodes([a @ b]), cpu_target())
    mr, nr = matmul_tiling.tile_shape("float32", cpu_target().vector_bytes)
    macro = next(c for c in schedule.calls if c.kernel.name.startswith("M_"))
    assert packs_a(macro.kernel)
    packed = macro.slots[[b.role for b in macro.kernel.bufs].index("out")]  # the first out: packed A
    rows = 2 * math.ceil(1400 / mr)
    assert schedule.temp_bytes[schedule.slot_kinds[packed][1]] >= rows * 100 * mr * 4
    assert a.numpy().size * 4 <= rows * 100 * mr * 4 < 2 * a.numpy().size * 4  # not KC deep


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_pack_the_a_panels_they_multiply(threads, monkeypatch):
    """The macro-kernel packs A itself, each row block's panels by the thread that
    multiplies them, and is split across threads by the matmul's flops (B's packing
    kernel by its own size, as a copy); the row blocks are a multiple of the thread
    count and differ by at most one panel; values against numpy."""
    monkeypatch.setattr(config, "THREADS", threads)  # the realize below runs on as many
    target = cpu_target()
    assert target.threads == threads
    # B of 132,000 elements a matrix, reused by 779 rows: packed (matmul_tiling.direct);
    # A's rows run across K (a transpose): packed too
    a, b = ops.transpose(tensor(2, 400, 98 * 8 - 5)), tensor(2, 400, 330)
    y = a @ b
    schedule, _ = plan(output_nodes([y]), target)
    assert [c.kernel.name[:2] for c in schedule.calls] == ["PB", "M_"]
    pack_b, macro = (c.kernel for c in schedule.calls)
    assert packs_a(macro) and (macro.parallel[1] // 2) % threads == 0
    assert macro.thread_work == 2 * 2 * (98 * 8 - 5) * 400 * 330
    assert pack_b.thread_work == 0 and pack_b.work >= 2 * 400 * 330  # (padded to whole panels)
    blocks = macro.parallel[1] // 2
    mr, _ = matmul_tiling.tile_shape("float32", target.vector_bytes)
    panels = math.ceil((98 * 8 - 5) / mr)
    assert blocks * math.ceil(panels / blocks) - panels < blocks  # no block is all padding
    want = np.matmul(a.numpy().astype(np.float64), b.numpy().astype(np.float64))
    scale = np.matmul(np.abs(a.numpy()).astype(np.float64), np.abs(b.numpy()))
    assert np.all(np.abs(y.numpy() - want) <= 401 * np.finfo(np.float32).eps * scale)


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_one_vector_of_columns_takes_a_one_vector_tile(vector_bytes):
    """N = one vector (a conv with 16 output channels on AVX-512): the tile is one
    vector wide and twice as tall (32 zmm: 16 x 1 accumulators; 16 ymm: 12 x 1), so no
    tile is half padding; values against numpy."""
    target = cpu_target().with_vector_bytes(vector_bytes)
    lanes, rows = vector_bytes // 4, (8 if vector_bytes >= 64 else 6)
    a, b = tensor(300, 72), tensor(72, lanes)
    y = a @ b
    schedule, _ = plan(output_nodes([y]), target)
    macro = next(c.kernel for c in schedule.calls if c.kernel.name.startswith("M_"))
    assert f"register tile: float32[{2 * rows * lanes}]" in macro.text()
    assert f"unroll for r in {2 * rows}:" in macro.text()
    want = a.numpy().astype(np.float64) @ b.numpy()  # computed with the host's tiles
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_an_operand_is_packed_once_per_schedule():
    """Five matmuls by one transposed weight (an RNN's steps): one packing kernel for
    it, read by all five; values against numpy."""
    w = tensor(96, 80)
    xs = [tensor(64, 80) for _ in range(5)]
    ys = [x @ ops.transpose(w) for x in xs]
    schedule, _ = plan(output_nodes(ys), cpu_target())
    names = [c.kernel.name for c in schedule.calls]
    assert names.count("PB_80_96") == 1, names
    assert sum(n.startswith("M_") for n in names) == 5
    got = [t.numpy() for t in ndl.realize(*ys)]  # one schedule
    for x, y in zip(xs, got):
        want = x.numpy().astype(np.float64) @ w.numpy().T
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("panels, threads, busiest", [
    (64, 2, 32), (128, 2, 64), (98, 2, 49), (100, 4, 25), (32, 2, 16),  # even splits exist: taken
    (13, 2, 7), (3, 2, 2), (1, 2, 1), (64, 1, 64), (7, 16, 1),
])
def test_row_blocks_split_panels_evenly_between_threads(panels, threads, busiest):
    """Blocks are a multiple of the thread count and at most MC_PANELS panels; every
    panel is in a block; each thread takes an equal run of blocks, and the busiest
    thread has as few panels as an even split allows (hand-counted above)."""
    from needle.compiler.matmul_tiling import MC_PANELS, row_blocks
    blocks, size = row_blocks(panels, threads)
    assert blocks % threads == 0 and 1 <= size <= MC_PANELS and blocks * size >= panels
    per_thread = blocks // threads
    load = [max(0, min(panels, (t + 1) * per_thread * size) - t * per_thread * size) for t in range(threads)]
    assert sum(load) == panels and max(load) == busiest


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_the_ragged_edge_is_written_back_as_vectors_of_the_columns_left(vector_bytes):
    """N = 100: the last panel's 100 % NR columns are stored (with the epilogue) as
    one vector that wide per row, not lane by lane over the panel's NR places; values
    against numpy (the lanes past N are neither read nor written: see the bounds-checked
    runs of test_matmul_split_k and test_matmul_direct_operands)."""
    target = cpu_target().with_vector_bytes(vector_bytes)
    _, nr = matmul_tiling.tile_shape("float32", vector_bytes)
    x, w, bias = tensor(96, 200), tensor(200, 100), tensor(1, 100)
    y = ops.relu(x @ w + ops.broadcast_to(bias, (96, 100)))
    schedule, _ = plan(output_nodes([y]), target)
    macro = next(c.kernel for c in schedule.calls if c.kernel.name.startswith("M_"))
    text = macro.text()
    assert f"vector for wc in {100 % nr}:" in text and f"vector for wc in {nr}:" in text
    assert "    for wc in" not in text.replace("vector for wc", "")  # no lane-by-lane loop
    want = np.maximum(a64(x) @ a64(w) + a64(bias), 0)
    bound = 202 * np.finfo(np.float32).eps * (np.abs(a64(x)) @ np.abs(a64(w)) + np.abs(a64(bias)))
    assert np.all(np.abs(y.numpy() - want) <= bound)


def a64(t):
    return t.numpy().astype(np.float64)
