"""IR construction: shape and dtype inference and the errors raised at build time
(needle/ir/build.py), identical in lazy and eager mode."""
import numpy as np
import pytest

import needle as ndl
from needle.errors import AxisError, DeviceError, DTypeError, NeedleError, ShapeError
from needle.ir import build
from needle.ir.lazy import as_lazy

MODES = [True, False]


def leaf(*shape, dtype="float32"):
    return as_lazy(ndl.nd.array(np.zeros(shape), dtype=dtype))


def test_elementwise_inference():
    a, b = leaf(2, 3), leaf(2, 3)
    assert build.elementwise("add", a, b).shape == (2, 3)
    assert build.elementwise("lt", a, b).dtype == "bool"
    assert build.cast(a, "float64").dtype == "float64"


def test_reduce_keeps_axes_and_movement_shapes():
    a = leaf(2, 3, 4)
    assert build.reduce("reduce_sum", a, (1,)).shape == (2, 1, 4)
    assert build.permute(a, (2, 0, 1)).shape == (4, 2, 3)
    assert build.pad(a, ((1, 0), (0, 2), (0, 0))).shape == (3, 5, 4)
    assert build.shrink(a, ((0, 1), (1, 3), (0, 4))).shape == (1, 2, 4)
    assert build.stride(a, (1, 2, 3)).shape == (2, 2, 2)
    assert build.window(leaf(1, 5, 6, 2), (1, 2), (3, 3), 2).shape == (1, 2, 2, 3, 3, 2)
    assert build.matmul(leaf(5, 2, 3), leaf(5, 3, 7)).shape == (5, 2, 7)


@pytest.mark.parametrize("lazy", MODES)
def test_errors_name_the_op_and_shapes(lazy):
    with ndl.lazy(lazy):
        a = ndl.Tensor(np.zeros((2, 3)))
        with pytest.raises(ShapeError, match=r"reshape.*\(2, 3\)"):
            a.reshape((4, 2))
        with pytest.raises(ShapeError, match=r"broadcast"):
            ndl.broadcast_to(a, (3, 3))
        with pytest.raises(AxisError, match="summation"):
            ndl.summation(a, axes=(5,))
        with pytest.raises(DTypeError, match=r"add.*float32.*float64"):
            a + ndl.Tensor(np.zeros((2, 3)), dtype="float64")
        with pytest.raises(DeviceError, match=r"cpu\(\).*cpu_numpy\(\)|cpu_numpy\(\).*cpu\(\)"):
            a + ndl.Tensor(np.zeros((2, 3)), device=ndl.cpu_numpy())
        with pytest.raises(ShapeError, match="matmul"):
            a @ a
        with pytest.raises(DTypeError, match="exp"):
            ndl.exp(ndl.Tensor([1, 2], dtype="int32"))


@pytest.mark.parametrize("lazy", MODES)
def test_bad_input_errors_are_needle_errors(lazy):
    with ndl.lazy(lazy):
        a = ndl.Tensor(np.zeros((2, 3)))
        for bad in (lambda: a.permute((0, 0)), lambda: ndl.conv(a, a), lambda: a[5],
                    lambda: ndl.pad(a, ((1, 1),)), lambda: ndl.stack([a, a.transpose()], 0)):
            with pytest.raises((NeedleError, IndexError)):
                bad()


def test_constant_folding_and_identities():
    a = leaf(3)
    assert build.reshape(a, (3,)) is a
    assert build.permute(a, (0,)) is a
    c = build.const(2.0, (3,), "float32", a.device)
    folded = build.elementwise("mul", c, c)
    assert folded.op == "const" and folded.arg == 4.0
    assert build.expand(build.reshape(c, (1, 3)), (4, 3)).op == "const"


def test_sum_of_disjoint_assembles_is_one_assemble():
    """The gradients of disjoint slices, summed (an LSTM's gates), become one assemble
    of all the pieces; slices that share elements stay an addition."""
    rng = np.random.default_rng(0)
    pieces = [as_lazy(ndl.nd.array(rng.standard_normal((3, 1, 5)), dtype="float32")) for _ in range(4)]
    like = pieces[0]
    slots = [build.assemble((3, 4, 5), [(p, ((0, 3, 1), (k, k + 1, 1), (0, 5, 1)))], like=like)
             for k, p in enumerate(pieces)]
    total = slots[0]
    for s in slots[1:]:
        total = build.elementwise("add", total, s)
    assert total.op == "assemble" and len(total.srcs) == 4
    want = np.concatenate([p.numpy() for p in pieces], axis=1)
    np.testing.assert_array_equal(total.numpy(), want)
    # every other column, twice: interleaved (disjoint) and overlapping (not)
    a = build.assemble((3, 4, 5), [(pieces[0], ((0, 3, 1), (0, 1, 1), (0, 5, 1)))], like=like)
    wide = as_lazy(ndl.nd.array(rng.standard_normal((3, 2, 5)), dtype="float32"))
    even = build.assemble((3, 4, 5), [(wide, ((0, 3, 1), (0, 4, 2), (0, 5, 1)))], like=like)
    odd = build.assemble((3, 4, 5), [(wide, ((0, 3, 1), (1, 4, 2), (0, 5, 1)))], like=like)
    assert build.elementwise("add", even, odd).op == "assemble"
    overlapping = build.elementwise("add", a, even)
    assert overlapping.op == "add"
    want = np.zeros((3, 4, 5), np.float32)
    want[:, 0:1] += pieces[0].numpy()
    want[:, 0::2] += wide.numpy()
    np.testing.assert_allclose(overlapping.numpy(), want, rtol=1e-6)


def test_a_runtime_scalar_has_one_param_node_per_shape():
    """An optimizer's scalar used on many parameters is one node per shape (the
    compiler merges them anyway); the values stay right, also after a node was
    itself an output (then it holds a value, and a new node is made)."""
    import gc
    from needle.ir.nodes import RuntimeScalar
    cpu = ndl.cpu()
    lr = RuntimeScalar(lambda: 0.25)
    unread = build.param(lr, (2, 3), "float32", cpu)
    a = build.param(lr, (2, 3), "float32", cpu)
    assert a is not unread  # (nothing read `unread` yet: a lazy setitem could still rewrite it)
    a * 2.0  # now read
    b = build.param(lr, (2, 3), "float32", cpu)
    assert a is b and a.op == "param"
    assert build.param(lr, (3,), "float32", cpu) is not a
    assert build.param(lr, (2, 3), "float64", cpu) is not a
    from needle.engine.realize import realize_nodes
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    xa = ndl.backend_ndarray.array(x, device=cpu)
    out = as_lazy(xa) * a + as_lazy(xa) * b
    realize_nodes([out, a])
    np.testing.assert_array_equal(out.arg.numpy(), x * np.float32(0.25) + x * np.float32(0.25))
    np.testing.assert_array_equal(a.arg.numpy(), np.full((2, 3), 0.25, np.float32))
    c = build.param(lr, (2, 3), "float32", cpu)
    assert c is not a and c.op == "param"
    del a, b, c, out
    gc.collect()
    assert all(ref() is None for ref in lr.nodes.values())  # held weakly: no cycle keeps them
