"""A transposing elementwise copy is tiled in TRANSPOSE_BLOCK x TRANSPOSE_BLOCK blocks
(compiler/transpose_blocks.py): values against numpy (copies and one rounding each, so
exact or within an ulp), ragged blocks, AVX-512, AVX2 and SSE code; and which nests
are left as they are."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler import transpose_blocks
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes
from tests.compiler.operands import lazy, tensor  # noqa: F401  (lazy: an autouse fixture)


def run(y, vector_bytes):
    """(the one kernel's text, its output) for `vector_bytes`-wide SIMD code."""
    host = cpu_target()
    target = host.with_vector_bytes(vector_bytes)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    nodes = output_nodes([y])
    signature = structure(nodes)
    schedule, _ = plan(nodes, target, signature)
    (call,) = schedule.calls
    text = call.kernel.text()
    (out,) = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, ndl.cpu())
    return text, out.numpy()


B, ROW = transpose_blocks.TRANSPOSE_BLOCK, transpose_blocks.TRANSPOSE_MIN_ROW


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
def test_a_transposed_copy_with_ragged_blocks(vector_bytes):
    """(3, 100, ROW + 6) -> its last two axes swapped: neither axis a multiple of the block."""
    rows, cols = 12 * B + 4, ROW + 6
    x = tensor(3, cols, rows)
    text, out = run(ops.transpose(x) * 2.0, vector_bytes)
    assert "o in" in text and "b in" in text  # the block loops
    np.testing.assert_array_equal(out, np.swapaxes(x.numpy(), 1, 2) * np.float32(2))


@pytest.mark.parametrize("vector_bytes", [64, 32, 16])
def test_nchw_to_nhwc_beside_a_channels_last_operand(vector_bytes):
    """A conv's NCHW input read channels-last next to an NHWC operand: the NCHW read
    jumps H * W floats along the channels, the NHWC one runs along them."""
    n, c, h, w = 2, ROW, 9, 7  # 63 positions: a ragged last block of positions
    x, g = tensor(n, c, h, w), tensor(n, h, w, c)
    text, out = run(ops.relu(x.permute((0, 2, 3, 1))) * g + 1.0, vector_bytes)
    assert "o in" in text
    want = np.maximum(x.numpy().transpose(0, 2, 3, 1), 0) * g.numpy() + np.float32(1)
    np.testing.assert_allclose(out, want, rtol=np.finfo(np.float32).eps, atol=0)


@pytest.mark.parametrize("shape, axes, blocked", [
    ((4, 8, 8, 16), (0, 3, 1, 2), True),    # NHWC -> NCHW: rows of H * W = 64
    ((4, 16, 8, 8), (0, 2, 3, 1), False),   # NCHW -> NHWC of 16 channels: rows of 16
    ((32, ROW), (1, 0), False),             # output rows of 32, shorter than TRANSPOSE_MIN_ROW
    ((ROW, ROW), (0, 1), False),            # no transpose at all
])
def test_which_nests_are_tiled(shape, axes, blocked):
    x = tensor(*shape)
    text, out = run(x.permute(axes) + 1.0, cpu_target().vector_bytes)
    assert ("o in" in text) == blocked
    np.testing.assert_array_equal(out, x.numpy().transpose(axes) + np.float32(1))
