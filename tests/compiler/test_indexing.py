"""The gather and scatter_add primitives through the compiler: build-time checks,
fusion (a gather is computed inside its reader's kernel, scatter_add fuses its
producers), and compiled kernels against the reference executor, with
bounds-checked code generation on (config.BOUNDS_CHECK: any load or store outside
its buffer raises), for computed indices far out of range."""
import numpy as np
import pytest

import needle as ndl
from needle import config
from needle.backend_ndarray.ndarray import NDArray
from needle.compiler.schedule import plan
from needle.engine.schedule_cache import cpu_target
from needle.errors import DTypeError, ShapeError
from needle.ir import build, reference
from needle.ir.nodes import toposort
from needle.ir.printer import output_nodes
from needle.engine.realize import realize_nodes

CPU = ndl.cpu()


def leaf(x, dtype=None):
    x = np.asarray(x)
    return build.buffer(NDArray(x, device=CPU, dtype=dtype or x.dtype.name))


@pytest.fixture
def bounds_checked():
    previous, config.BOUNDS_CHECK = config.BOUNDS_CHECK, True
    yield
    config.BOUNDS_CHECK = previous


def check_reasons(fused) -> None:
    """Every kernel boundary says why it is there."""
    for node_id in fused.stored:
        assert fused.reasons.get(node_id, "").strip(), f"stored node without a reason: {node_id}"


def run(*nodes):
    expected = reference.evaluate(list(nodes))
    realize_nodes(list(nodes))
    return [n.arg.numpy() for n in nodes], expected


def test_build_checks_name_the_op_and_shapes():
    src = leaf(np.zeros((4, 3), np.float32))
    with pytest.raises(ShapeError, match="gather: index arrays differ in shape"):
        build.gather(src, [leaf(np.zeros(2, np.int64)), leaf(np.zeros(3, np.int64))], 0)
    with pytest.raises(DTypeError, match="gather: index arrays must be numbers, not bool"):
        build.gather(src, [leaf(np.zeros(2, bool))], 0)
    with pytest.raises(ShapeError, match="scatter_add: values \\(4, 3\\) do not hold the index shape \\(2,\\)"):
        build.scatter_add(src, [leaf(np.zeros(2, np.int64))], 0, (5,))
    with pytest.raises(ShapeError, match="cannot index an empty axis"):
        build.gather(leaf(np.zeros((0, 3), np.float32)), [leaf(np.zeros(2, np.int64))], 0)


def test_gather_is_computed_inside_its_readers_kernel():
    src = leaf(np.random.randn(6, 4).astype(np.float32))
    ids = leaf(np.array([5, 0, 5], np.int64))
    out = build.elementwise("exp", build.gather(build.elementwise("tanh", src), [ids], 0))
    schedule, fused = plan([out], cpu_target())
    assert len(schedule.calls) == 1 and fused.groups[0].kind == "elementwise"
    got, expected = run(out)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)


def test_scatter_add_fuses_its_producers_and_adds_repeats(bounds_checked):
    values = leaf(np.random.randn(2, 5, 3).astype(np.float32))
    ids = leaf(np.array([4, 1, 4, 4, 0], np.float32))
    out = build.scatter_add(build.elementwise("exp", values), [ids], 1, (6,))
    schedule, fused = plan([out], cpu_target())
    assert [g.kind for g in fused.groups] == ["fill", "scatter"]  # a parallel zero fill, then the additions
    check_reasons(fused)
    text = schedule.calls[1].kernel.text()
    assert "exp(" in text and "parallel for p0" in text and "    for j0" in text  # index loop serial in a task
    got, expected = run(out)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    want = np.zeros((2, 6, 3), np.float32)
    np.add.at(want, (slice(None), [4, 1, 4, 4, 0]), np.exp(values.arg.numpy()))
    np.testing.assert_allclose(got[0], want, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_computed_indices_never_leave_the_array(bounds_checked, dtype):
    src = leaf(np.arange(20, dtype=np.float32).reshape(5, 4))
    raw = np.array([0, 4, 7, 200, 3], dtype=dtype) if dtype == "uint8" else \
        np.array([-1, -5, -6, 9, 1e6 if "float" in dtype else 2**30, 3], dtype=dtype)
    ids = build.elementwise("add", leaf(raw), build.const(0, raw.shape, dtype, CPU))  # a computed index
    gathered = build.gather(src, [ids], 0)
    scattered = build.scatter_add(build.elementwise("exp", leaf(np.ones((raw.size, 4), np.float32))), [ids], 0, (5,))
    got, expected = run(gathered, scattered)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def test_nan_index_reads_the_last_row(bounds_checked):
    src = leaf(np.arange(6, dtype=np.float32).reshape(3, 2))
    ids = build.elementwise("mul", leaf(np.array([np.nan, 1.0], np.float32)),
                            build.const(1.0, (2,), "float32", CPU))
    got, expected = run(build.gather(src, [ids], 0))
    np.testing.assert_array_equal(got[0], [[4.0, 5.0], [2.0, 3.0]])
    np.testing.assert_array_equal(expected[0], got[0])


def test_reduction_read_by_a_gather_is_not_a_stage():
    x = leaf(np.random.randn(4, 6).astype(np.float32))
    row_max = build.reshape(build.reduce("reduce_max", x, (1,)), (4,))
    picked = build.gather(row_max, [leaf(np.array([3, 3, 0], np.int64))], 0)
    out = build.elementwise("add", picked, build.const(1.0, (3,), "float32", CPU))
    _, fused = plan([out], cpu_target())
    assert any("gather reads it" in why for why in fused.reasons.values())
    got, expected = run(out)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    np.testing.assert_allclose(got[0], x.arg.numpy().max(1)[[3, 3, 0]] + 1, rtol=1e-6)


def test_gather_through_movement_and_into_matmul(bounds_checked):
    w = leaf(np.random.randn(7, 8).astype(np.float32))
    ids = leaf(np.array([[6, 1], [0, 6], [2, 2]], np.int64))
    rows = build.reshape(build.gather(w, [ids], 0), (6, 8))     # read through a view: stored
    out = build.matmul(rows, leaf(np.random.randn(8, 5).astype(np.float32)))
    direct = build.matmul(build.gather(w, [build.reshape(ids, (6,))], 0), leaf(np.random.randn(8, 3).astype(np.float32)))
    _, fused = plan([out, direct], cpu_target())
    check_reasons(fused)
    assert any("read through a view" in why for why in fused.reasons.values())  # the reshaped gather
    got, expected = run(out, direct)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_softmax_loss_needs_no_scatter_and_no_host_one_hot():
    logits = ndl.Tensor(np.random.randn(64, 10).astype(np.float32))
    labels = ndl.Tensor(np.random.randint(0, 10, 64), requires_grad=False)
    loss = ndl.nn.SoftmaxLoss()(logits * 1.0, labels)
    loss.backward()
    _, forward = plan(output_nodes([loss]), cpu_target())
    schedule, backward = plan(output_nodes([logits.grad]), cpu_target())
    assert [g.kind for g in forward.groups] == ["reduce", "reduce"]  # the pick fuses into the sum
    assert all(g.kind == "reduce" for g in backward.groups) and len(schedule.calls) <= 2
    # the only (64, 10) input is the logits themselves: no one-hot matrix comes from the host
    leaves = [x for x in toposort(output_nodes([loss, logits.grad])) if x.op == "buffer"]
    assert [x.shape for x in leaves].count((64, 10)) == 1
