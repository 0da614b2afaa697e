"""Autograd: graph order, requires_grad, detach/data, gradient accumulation,
backward variants, higher-order gradients, deep graphs, freeing, the course's
compatibility list and build-time errors."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import needle as ndl
from needle import autograd, ops
from needle.backend_ndarray import NDArray


def T(values, dtype="float64", **kwargs):
    return ndl.Tensor(np.asarray(values, dtype=dtype), dtype=dtype, **kwargs)


def same_nodes(got, want):
    assert len(got) == len(want), f"{len(got)} nodes, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g is w, f"position {i}: got {g.op.name if g.op else 'leaf'}, expected {w.op.name if w.op else 'leaf'}"


# ---- find_topo_sort ----------------------------------------------------------------------
def test_topo_sort_course_example():
    a, b = T([[0.88282157]]), T([[0.90170084]])
    t1 = 3 * a
    t2 = t1 * a
    t3 = 4 * b
    t4 = t3 * a
    t5 = t2 + t4
    c = t5 - a
    # a - b is add(a, negate(b)), as in the course: 9 nodes
    # post-order DFS from c, inputs in order: c(t5(t2(t1(a), a), t4(t3(b), a)), negate(a))
    assert isinstance(c.op, ops.EWiseAdd) and isinstance(c.inputs[1].op, ops.Negate)
    same_nodes(autograd.find_topo_sort([c]), [a, t1, t2, b, t3, t4, t5, c.inputs[1], c])
    values = [x.numpy().item() for x in autograd.find_topo_sort([c])]
    # the course's reference values for this graph
    np.testing.assert_allclose(values, [0.88282157, 2.64846471, 2.33812177, 0.90170084, 3.60680336,
                                        3.1841638, 5.52228558, -0.88282157, 4.63946401], rtol=1e-7)
    np.testing.assert_allclose(c.numpy(), 3 * 0.88282157 ** 2 + 4 * 0.90170084 * 0.88282157 - 0.88282157)


def test_topo_sort_shared_nodes_and_several_roots():
    a, b = T([1.0, 2.0]), T([3.0, 4.0])
    d = ops.exp(a)
    m = d * b
    e = d + m
    f = ops.log(e)
    g = a * 2
    # e's inputs are (d, m); d is visited once, before m and its other input b
    same_nodes(autograd.find_topo_sort([f]), [a, d, b, m, e, f])
    same_nodes(autograd.find_topo_sort([f, g]), [a, d, b, m, e, f, g])
    same_nodes(autograd.find_topo_sort([g, f]), [a, g, d, b, m, e, f])
    same_nodes(autograd.find_topo_sort([a]), [a])


def test_topo_sort_with_a_tuple_op():
    a = T([[1.0, 2.0], [3.0, 4.0]])
    parts = ops.split(a, 0)
    x = parts[1]
    y = x * parts[0]
    order = autograd.find_topo_sort([y])
    assert order[0] is a and order[1] is parts and order[-1] is y
    assert len(order) == 5  # a, split, tuple_get_item 1, tuple_get_item 0, multiply


# ---- requires_grad, detach, data ---------------------------------------------------------
def test_requires_grad_propagation():
    a = T([1.0, 2.0])
    b = T([3.0, 4.0], requires_grad=False)
    assert a.requires_grad and not b.requires_grad
    assert (a + b).requires_grad and (b * a).requires_grad
    c = b * 2 + b
    assert not c.requires_grad
    assert c.is_leaf() and c.op is None  # results without gradients are detached from the graph
    np.testing.assert_allclose(c.numpy(), [9.0, 12.0])
    d = (a + b).sum()
    d.backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 1.0])
    assert getattr(b, "grad", None) is None


def test_detach():
    a = T([1.0, 2.0, 3.0])
    d = a.detach()
    assert not d.requires_grad and d.is_leaf()
    np.testing.assert_array_equal(d.numpy(), a.numpy())
    assert d.dtype == a.dtype and d.device == a.device
    y = (d * a).sum()
    y.backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 2.0, 3.0])  # d is a constant


def test_data_getter_and_setter():
    a = T([1.0, 2.0])
    data = a.data
    assert isinstance(data, ndl.Tensor) and not data.requires_grad and data.is_leaf()
    np.testing.assert_array_equal(data.numpy(), [1.0, 2.0])
    (a * a).sum().backward()
    a.data = a.data - 0.5 * a.grad.data  # the course's SGD update
    np.testing.assert_allclose(a.numpy(), [0.0, 0.0])
    assert a.requires_grad and a.is_leaf()
    with pytest.raises(ndl.errors.DTypeError):
        a.data = T([1.0, 2.0], dtype="float32")


# ---- backward ----------------------------------------------------------------------------
def test_gradient_accumulates_over_uses():
    a = T([1.0, -2.0, 3.0])
    y = a * a + a * 3 + ops.exp(a) - a / 2
    y.backward()
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(a.grad.numpy(), 2 * x + 3 + np.exp(x) - 0.5)


def test_backward_with_out_grad():
    a = T([[1.0, 2.0], [3.0, 4.0]])
    y = a * a
    w = T([[1.0, 0.0], [-1.0, 2.0]], requires_grad=False)
    y.backward(w)
    np.testing.assert_allclose(a.grad.numpy(), 2 * a.numpy() * w.numpy())


def test_backward_on_non_scalar_uses_ones():
    a = T([[1.0, 2.0, 3.0]])
    (a * a).backward()
    np.testing.assert_allclose(a.grad.numpy(), [[2.0, 4.0, 6.0]])
    b = T(3.0)
    (b * b).backward()  # a 0-d output too
    np.testing.assert_allclose(b.grad.numpy(), 6.0)


def test_backward_out_grad_shape_must_match():
    a = T([1.0, 2.0])
    with pytest.raises(ValueError, match="backward"):
        (a * 2).backward(T([1.0, 2.0, 3.0], requires_grad=False))


def test_second_backward_overwrites_grad():
    a = T([1.0, 2.0])
    y = (a * 3).sum()
    y.backward()
    y.backward()
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 3.0])
    (a * 5).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [5.0, 5.0])


def test_intermediate_nodes_get_gradients():
    a = T([1.0, 2.0])
    h = a * 3
    y = (h * h).sum()
    y.backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.numpy())
    np.testing.assert_allclose(a.grad.numpy(), 18 * a.numpy())


def test_higher_order_gradients():
    x = T([1.0, 2.0, -3.0])
    y = x * x * x  # y' = 3x^2, y'' = 6x
    y.backward()
    g = x.grad
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2)
    assert g.requires_grad
    g.backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy())

    z = T([0.5, -1.0])
    ops.summation(ops.exp(z * 2)).backward()  # d/dz = 2 exp(2z); d2 = 4 exp(2z)
    np.testing.assert_allclose(z.grad.numpy(), 2 * np.exp(2 * z.numpy()))
    z.grad.backward()
    np.testing.assert_allclose(z.grad.numpy(), 4 * np.exp(2 * z.numpy()))

    w = T([2.0, 3.0])
    ops.summation(w ** 3).backward()
    w.grad.backward()
    np.testing.assert_allclose(w.grad.numpy(), 6 * w.numpy())


def test_deep_graph_builds_backprops_and_frees():
    gc.collect()
    before = autograd.TENSOR_COUNTER
    x = T([1.0, 2.0])
    y = x
    for i in range(10_000):
        y = y * 1.0001 if i % 2 else y + 0.001
    expected = np.array([1.0, 2.0])
    for i in range(10_000):
        expected = expected * 1.0001 if i % 2 else expected + 0.001
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-12)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(2, 1.0001 ** 5000), rtol=1e-10)
    del x, y
    gc.collect()
    assert autograd.TENSOR_COUNTER == before


def test_tensor_counter_goes_back_down():
    gc.collect()
    before = autograd.TENSOR_COUNTER
    a = T(np.random.randn(3, 4))
    b = T(np.random.randn(4, 2))
    loss = ops.summation(ops.logsumexp(ops.relu(a @ b), (1,)))
    loss.backward()
    parts = ops.split(a, 0)
    total = parts[0] + parts[2]
    total.numpy()
    assert autograd.TENSOR_COUNTER > before
    del a, b, loss, parts, total
    gc.collect()
    assert autograd.TENSOR_COUNTER == before


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_a_training_step_is_freed_without_the_cycle_collector(lazy):
    """A step's graph is a tree of references, not a cycle: dropping the loss frees it
    at once.  (Intermediates' .grad once held the backward graph, which leads back to
    the intermediate itself, e.g. d exp(x) is built from exp(x).)"""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with ndl.lazy(lazy):
            w = T(np.random.randn(4, 3), requires_grad=True)
            x = T(np.random.randn(5, 4), requires_grad=False)
            before = autograd.TENSOR_COUNTER
            h = ops.exp(ops.tanh(x @ w))
            loss = ops.summation(ops.logsumexp(h * ops.sigmoid(h), (1,)))
            loss.backward()
            expected = np.exp(np.tanh(x.numpy() @ w.numpy()))
            s = 1 / (1 + np.exp(-expected))
            soft = np.exp(expected * s) / np.exp(expected * s).sum(1, keepdims=True)
            # d/dh of logsumexp(h * sigmoid(h)): softmax * (s + h s (1 - s)); the course keeps it on h
            np.testing.assert_allclose(h.grad.numpy(), soft * (s + expected * s * (1 - s)), rtol=1e-10)
            w.grad.numpy()
            del h, loss
            w.grad = None
            assert autograd.TENSOR_COUNTER == before
    finally:
        if was_enabled:
            gc.enable()


# ---- course compatibility ----------------------------------------------------------------
def test_cached_data_attribute():
    a = ndl.Tensor([1.0, 2.0])
    b = a * 2 + 1
    data = b.cached_data
    if autograd.BACKEND == "nd":
        assert isinstance(data, NDArray)
    np.testing.assert_array_equal(np.asarray(data), [3.0, 5.0])
    assert a.realize_cached_data() is a.realize_cached_data()


def test_changing_leaf_storage_in_place_is_seen_by_rebuilt_graphs():
    a = ndl.Tensor([1.0, 2.0, 3.0])
    np.testing.assert_allclose(((a * 2).sum()).numpy(), 12.0)
    a.realize_cached_data().flat[1] += 0.5
    np.testing.assert_allclose(((a * 2).sum()).numpy(), 13.0)
    np.testing.assert_allclose(a.numpy(), [1.0, 2.5, 3.0])
    a.realize_cached_data().flat[0] -= 1.0
    np.testing.assert_allclose(ops.exp(a).numpy(), np.exp([0.0, 2.5, 3.0]), rtol=1e-6)


@pytest.mark.parametrize("device", [ndl.cpu(), ndl.cpu_numpy()], ids=str)
def test_tensor_constructor_sources(device):
    cases = [
        ([[1, 2], [3, 4]], (2, 2)),
        (np.array([1.5, 2.5]), (2,)),
        (np.float64(2.0), ()),
        (3.0, ()),
        (7, ()),
        (np.arange(6, dtype=np.int64).reshape(2, 3), (2, 3)),
    ]
    for src, shape in cases:
        t = ndl.Tensor(src, device=device)
        assert t.shape == shape and t.dtype == "float32" and t.device == device
        np.testing.assert_array_equal(t.numpy(), np.asarray(src, dtype=np.float32))
    nd_array = ndl.nd.array([[1.0, 2.0]], device=device, dtype="float64")
    t = ndl.Tensor(nd_array)
    assert t.shape == (1, 2)
    if autograd.BACKEND == "nd":
        assert t.device == device
    np.testing.assert_array_equal(t.numpy(), [[1.0, 2.0]])
    base = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")
    copy = ndl.Tensor(base)
    assert copy.dtype == "float64" and copy.device == device
    np.testing.assert_array_equal(copy.numpy(), [1.0, 2.0])
    assert ndl.Tensor(base, dtype="float32").dtype == "float32"
    assert ndl.Tensor([1, 2], dtype="int32").dtype == "int32"
    assert ndl.Tensor([1.0], requires_grad=False).requires_grad is False


def test_scalar_operator_forms():
    a = ndl.Tensor([1.0, 4.0])
    np.testing.assert_allclose((3 * a).numpy(), [3.0, 12.0])
    np.testing.assert_allclose((a ** -1.5).numpy(), [1.0, 0.125])
    np.testing.assert_allclose((1 - a).numpy(), [0.0, -3.0])
    np.testing.assert_allclose((2 / a).numpy(), [2.0, 0.5])
    np.testing.assert_allclose((a / 2 + 0.5).numpy(), [1.0, 2.5])
    np.testing.assert_allclose((-a).numpy(), [-1.0, -4.0])
    np.testing.assert_allclose((a - np.array([1.0, 1.0])).numpy(), [0.0, 3.0])


def test_gradient_as_tuple():
    a, b = T([1.0, 2.0]), T([3.0, 4.0])
    y = a * b
    ones = T([1.0, 1.0], requires_grad=False)
    grads = y.op.gradient_as_tuple(ones, y)
    assert isinstance(grads, tuple) and len(grads) == 2
    np.testing.assert_allclose(grads[0].numpy(), [3.0, 4.0])
    np.testing.assert_allclose(grads[1].numpy(), [1.0, 2.0])
    e = ops.exp(a)
    single = e.op.gradient_as_tuple(ones, e)
    assert isinstance(single, tuple) and len(single) == 1
    np.testing.assert_allclose(single[0].numpy(), np.exp([1.0, 2.0]))


def test_tensor_equality_is_identity():
    a = ndl.Tensor([1.0, 2.0])
    b = ndl.Tensor([1.0, 2.0])
    assert a == a
    assert not (a == b)
    assert (a == b) is False
    assert a != b
    assert len({a, b, a}) == 2
    assert {a: 1}[a] == 1


def test_device_names_and_equality():
    assert str(ndl.cpu()) == "cpu()"
    assert str(ndl.cuda()) == "cuda()"
    assert str(ndl.cpu_numpy()) == "cpu_numpy()"
    assert ndl.cpu() == ndl.cpu() and ndl.cpu() != ndl.cpu_numpy() and ndl.cuda() == ndl.cuda()
    assert ndl.Tensor([1.0]).device == ndl.cpu()  # the default device


@pytest.mark.skipif(ndl.cuda().enabled(), reason="a GPU is usable here")
def test_cuda_unavailable_is_a_clear_error():
    assert ndl.cuda().enabled() is False
    with pytest.raises(ndl.errors.DeviceError, match=r"cuda\(\)") as info:
        ndl.Tensor([1.0, 2.0], device=ndl.cuda())
    assert "not available" in str(info.value)


def test_tensor_to_device():
    a = ndl.Tensor([1.0, 2.0], device=ndl.cpu())
    b = a.to(ndl.cpu_numpy())
    assert b.device == ndl.cpu_numpy()
    np.testing.assert_array_equal(b.numpy(), [1.0, 2.0])
    assert a.to(ndl.cpu()) is a


# ---- build-time errors -------------------------------------------------------------------
def test_shape_mismatch_raises_at_build_time():
    a, b = T(np.ones((2, 3))), T(np.ones((4,)))
    with pytest.raises(ndl.errors.ShapeError, match=r"add.*\(2, 3\).*\(4,\)"):
        a + b
    with pytest.raises(ndl.errors.ShapeError, match=r"matmul.*\(2, 3\).*\(4, 1\)"):
        a @ T(np.ones((4, 1)))
    with pytest.raises(ndl.errors.ShapeError, match=r"reshape.*\(2, 3\)"):
        a.reshape((5,))
    with pytest.raises(ndl.errors.AxisError, match=r"summation.*\(2, 3\)"):
        a.sum(axes=(3,))
    assert issubclass(ndl.errors.ShapeError, ndl.errors.NeedleError)


def test_dtype_mismatch_raises_at_build_time():
    a, b = T(np.ones((2, 3)), dtype="float32"), T(np.ones((2, 3)), dtype="float64")
    with pytest.raises(ndl.errors.DTypeError, match=r"float32.*float64"):
        a * b
    with pytest.raises(ndl.errors.DTypeError, match="matmul"):
        a @ T(np.ones((3, 2)), dtype="float64")
    with pytest.raises(ndl.errors.DTypeError):
        ops.exp(ndl.Tensor([1, 2], dtype="int32"))


def test_device_mismatch_raises_at_build_time():
    a = ndl.Tensor(np.ones((2, 3)), device=ndl.cpu())
    b = ndl.Tensor(np.ones((2, 3)), device=ndl.cpu_numpy())
    with pytest.raises(ndl.errors.DeviceError, match=r"cpu\(\).*cpu_numpy\(\)|cpu_numpy\(\).*cpu\(\)"):
        a + b
    with pytest.raises(ndl.errors.DeviceError):
        ops.matmul(a, ops.transpose(b))
    with pytest.raises(ndl.errors.DeviceError):
        ops.stack([a, b], 0)


def test_device_mismatch_message_names_the_shapes():
    a = ndl.Tensor(np.ones((2, 3)), device=ndl.cpu())
    b = ndl.Tensor(np.ones((2, 3)), device=ndl.cpu_numpy())
    with pytest.raises(ndl.errors.DeviceError, match=r"\(2, 3\)"):
        a + b


# ---- the numpy-array backend -------------------------------------------------------------
NP_BACKEND_SCRIPT = textwrap.dedent("""
    import numpy as np
    import needle as ndl
    from needle import ops
    np.random.seed(0)
    a = ndl.Tensor(np.random.randn(3, 4))
    b = ndl.Tensor(np.random.randn(4, 2))
    assert type(a.realize_cached_data()) is np.ndarray, type(a.realize_cached_data())
    assert a.dtype == "float64" and a.shape == (3, 4)  # the course's numpy backend keeps numpy's dtype
    y = ops.summation(ops.logsumexp(ops.relu(a @ b) * 2, (1,))) + ops.max(a, (0,)).sum()
    assert type(y.realize_cached_data()) in (np.ndarray, np.float64), type(y.realize_cached_data())
    y.backward()
    assert isinstance(a.grad.realize_cached_data(), np.ndarray)
    assert a.grad.shape == (3, 4) and b.grad.shape == (4, 2)
    an, bn = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    h = np.maximum(an @ bn, 0) * 2
    s = np.exp(h - h.max(1, keepdims=True))
    s /= s.sum(1, keepdims=True)
    g_h = s * 2 * (an @ bn > 0)
    g_a = g_h @ bn.T + (an == an.max(0, keepdims=True))
    np.testing.assert_allclose(a.grad.numpy(), g_a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), an.T @ g_h, rtol=1e-4, atol=1e-5)
    c = ndl.Tensor(np.ones((1, 5, 5, 2)))
    w = ndl.Tensor(np.ones((3, 3, 2, 1)))
    out = ops.conv(c, w, stride=1, padding=1)
    assert out.shape == (1, 5, 5, 1) and float(out.numpy()[0, 2, 2, 0]) == 18.0
    parts = ops.split(ops.stack([a, a * 2], 0), 0)
    np.testing.assert_allclose(parts[1].numpy(), 2 * a.numpy())
    np.testing.assert_allclose(a[1:, ::-1].numpy(), a.numpy()[1:, ::-1])
    a.realize_cached_data().flat[0] += 1.0
    assert abs(float((a * 1).numpy().flat[0]) - float(an.flat[0]) - 1.0) < 1e-6
    print("np backend ok")
""")


def test_numpy_array_backend_in_a_subprocess():
    env = dict(os.environ, NEEDLE_BACKEND="np")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", NP_BACKEND_SCRIPT], cwd=root, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "np backend ok" in result.stdout


def test_hw1_gradient_checks_pass_under_the_numpy_backend():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NEEDLE_BACKEND="np")
    result = subprocess.run([sys.executable, os.path.join(root, "tests", "np_backend_checks.py")], cwd=root,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize("expr", ["np.float32(2) * x", "np.float64(1) - x", "np.float32(1) + x", "np.float32(3) / x",
                                  "np.ones(3, np.float32) + x", "np.full(3, 2, np.float32) * x"])
def test_numpy_scalars_and_arrays_on_the_left_give_tensors_with_gradients(expr):
    # (numpy's operators took the Tensor for an array: an ndarray came back, the graph lost)
    x = ndl.Tensor(np.array([1.0, 2.0, 4.0], dtype=np.float32))
    out = eval(expr, {"np": np, "x": x})
    assert isinstance(out, ndl.Tensor)
    out.sum().backward()
    h = 1e-3  # the gradient against central differences of the same expression in numpy
    xs = np.array([1.0, 2.0, 4.0])
    f = lambda v: float(np.sum(eval(expr.replace("np.float32", "np.float64"), {"np": np, "x": v})))  # noqa: E731
    expected = [(f(xs + h * e) - f(xs - h * e)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-3)


def test_a_dtype_given_as_a_str_subclass_reads_back_as_its_name():
    """numpy's str_ and a str Enum name a dtype as well as a str (dtype_name keeps them)."""
    import enum

    class DT(str, enum.Enum):
        F32 = "float32"
    for dtype in (np.array(["float32"])[0], DT.F32):
        t = ndl.Tensor(np.ones(3, np.float32), dtype=dtype)
        assert t.dtype == "float32"
        assert (t + 1).dtype == "float32"
