"""A CPU kernel's parallel loop of few iterations takes the loop inside it along
(compiler/spread_parallel.py): the rewrite on hand-written nests with a known result,
the nests it leaves alone, and a padded weight-shaped kernel (ResNet9's 3 x 3 x C x C
weight gradient, nonzero at the centre tap only) planned and run against numpy."""
import numpy as np

import needle as ndl
from needle import ops
from needle.codegen import kernel_ir as K
from needle.compiler.spread_parallel import MIN_PARALLEL_EXTENT, spread_parallel
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

F32 = "float32"


def copy_kernel(extents) -> K.Kernel:
    """out[i0, i1, ...] = x[i0, i1, ...] + 1 over a row-major nest, the outer loop parallel."""
    names = [f"i{d}" for d in range(len(extents))]
    strides = [int(np.prod(extents[d + 1:])) for d in range(len(extents))]
    at = K.affine([(K.Var(n), s) for n, s in zip(names, strides)])
    body = [K.Store("out", at, K.Binary("add", K.Load("x", at, F32), K.Const(1.0, F32), F32))]
    for d in reversed(range(len(extents))):
        body = [K.Loop(names[d], extents[d], body, "parallel" if d == 0 else "serial")]
    return K.Kernel("k", [K.Buf("x", F32, "in"), K.Buf("out", F32, "out")], 0, body, (names[0], extents[0]))


def test_a_short_parallel_loop_takes_the_next_loop_along():
    kernel = spread_parallel(copy_kernel((3, 3, 512)))
    assert kernel.parallel == ("i0i1", 9)
    assert kernel.text().splitlines()[1:] == [
        "  parallel for i0i1 in 9:",
        "    i0 = (i0i1 // 3)",
        "    i1 = (i0i1 % 3)",
        "    for i2 in 512:",
        "      out[(((i0 * 1536) + (i1 * 512)) + i2)] = (x[(((i0 * 1536) + (i1 * 512)) + i2)] + 1.0)"]


def test_long_parallel_loops_and_two_loop_nests_stay():
    for extents in ((MIN_PARALLEL_EXTENT, 3, 64), (3, 4096)):
        before = copy_kernel(extents).text()
        assert spread_parallel(copy_kernel(extents)).text() == before


def test_a_padded_weight_kernel_runs_over_all_nine_taps_in_parallel():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((128, 128)).astype(np.float32)
    with ndl.lazy(True):
        centre = ndl.Tensor(g, device=ndl.cpu(), requires_grad=False)
        padded = ops.pad(ops.reshape(centre, (1, 1, 128, 128)), ((1, 1), (1, 1), (0, 0), (0, 0)))
        kernels = [c.kernel for c in plan(output_nodes([padded]), cpu_target())[0].calls]
        assert [k.parallel for k in kernels] == [("i0i1", 9)], [k.text() for k in kernels]
        got = padded.numpy()
    np.testing.assert_array_equal(got, np.pad(g.reshape(1, 1, 128, 128), ((1, 1), (1, 1), (0, 0), (0, 0))))
