"""Nested loops that walk one run of memory become one loop (compiler/loop_collapse.py):
the rewrite on hand-written nests with a known result, the nests it must keep (a
mask, a value or a bound reading a variable, an index that is not one run), and a
reduction over two trailing axes (an NCHW average pool) planned and run against numpy."""
import numpy as np

import needle as ndl
from needle.codegen import kernel_ir as K
from needle.compiler.loop_collapse import collapse_loops
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes

F32 = "float32"
U = 2.0 ** -24


def text(body) -> str:
    return K.print_kernel(K.Kernel("k", [], 0, body))


def row_sum(index, valid=None, extent=8) -> list:
    """acc += x[index] over `for a in 4: for b in extent`."""
    acc = K.Var("acc", F32)
    update = K.Assign("acc", K.Binary("add", acc, K.Load("x", index, F32, valid), F32))
    return [K.Loop("a", 4, [K.Loop("b", extent, [update])])]


def test_two_loops_over_one_run_become_one():
    index = K.affine([(K.Var("k"), 32), (K.Var("a"), 8), (K.Var("b"), 1)])
    assert text(collapse_loops(row_sum(index))).splitlines()[1:] == [
        "  for ab in 32:",
        "    acc = (acc + x[(((k * 32) + (0 * 8)) + ab)])"]


def test_three_loops_over_one_run_become_one():
    c = K.Var("c")
    inner = row_sum(K.affine([(K.Var("a"), 16), (K.Var("b"), 2), (c, 1)]), extent=8)
    inner[0].body[0].body = [K.Loop("c", 2, inner[0].body[0].body)]
    (loop,) = collapse_loops(inner)
    assert (loop.var, loop.extent) == ("abc", 64) and not isinstance(loop.body[0], K.Loop)


def test_nests_that_are_not_one_run_stay():
    a, b = K.Var("a"), K.Var("b")
    strided = K.affine([(a, 16), (b, 1)])                      # a's step is not b's extent
    transposed = K.affine([(a, 1), (b, 4)])
    masked = (K.affine([(a, 8), (b, 1)]), K.Binary("lt", b, K.Const(7), "bool"))
    for body in (row_sum(strided), row_sum(transposed), row_sum(*masked)):
        assert text(collapse_loops(body)) == text(body)
    value = [K.Loop("a", 4, [K.Loop("b", 8, [K.Assign("acc", K.Cast(a, F32))])])]  # reads `a` as a value
    assert text(collapse_loops(value)) == text(value)
    bound = [K.Loop("a", 4, [K.Loop("b", a, [K.Assign("acc", K.Const(1.0, F32))])])]  # `b`'s extent is `a`
    assert text(collapse_loops(bound)) == text(bound)


def test_an_average_pool_over_two_trailing_axes_runs_as_one_loop():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 12, 20)).astype(np.float32)
    with ndl.lazy(True):
        t = ndl.Tensor(x, device=ndl.cpu(), requires_grad=False)
        pooled = t.sum((2, 3)) / 240.0
        (kernel,) = [c.kernel for c in plan(output_nodes([pooled]), cpu_target())[0].calls]
        got = pooled.numpy()
    assert "for r2r3 in 240:" in kernel.text(), kernel.text()
    want = x.astype(np.float64).mean((2, 3))
    bound = (240 + 1) * U * np.abs(x.astype(np.float64)).mean((2, 3))  # the sum's, and the division's
    assert np.all(np.abs(got - want) <= bound + U * np.abs(want))
