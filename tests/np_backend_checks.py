"""hw1-style checks run under NEEDLE_BACKEND=np by tests/test_course_semantics.py (in a
subprocess: the backend is chosen at import).  References: central finite differences
with the course's eps 1e-4 and tolerance 1e-6 (float64 only passes them), numpy values."""
import numpy as np
import needle as ndl

def gradient_check(f, *args, tol=1e-6, backward=False, **kwargs):
    eps = 1e-4
    numerical_grads = [np.zeros(a.shape) for a in args]
    for i in range(len(args)):
        for j in range(args[i].realize_cached_data().size):
            args[i].realize_cached_data().flat[j] += eps
            f1 = float(f(*args, **kwargs).numpy().sum())
            args[i].realize_cached_data().flat[j] -= 2 * eps
            f2 = float(f(*args, **kwargs).numpy().sum())
            args[i].realize_cached_data().flat[j] += eps
            numerical_grads[i].flat[j] = (f1 - f2) / (2 * eps)
    if not backward:
        out = f(*args, **kwargs)
        computed_grads = [x.numpy() for x in out.op.gradient_as_tuple(ndl.Tensor(np.ones(out.shape)), out)]
    else:
        out = f(*args, **kwargs).sum()
        out.backward()
        computed_grads = [a.grad.numpy() for a in args]
    error = sum(np.linalg.norm(computed_grads[i] - numerical_grads[i]) for i in range(len(args)))
    assert error < tol, (f, error)
    return computed_grads

np.random.seed(0)
R = np.random.randn
gradient_check(ndl.divide, ndl.Tensor(R(5, 4)), ndl.Tensor(5 + R(5, 4)))
gradient_check(ndl.divide_scalar, ndl.Tensor(R(5, 4)), scalar=R(1))
gradient_check(ndl.multiply, ndl.Tensor(R(5, 4)), ndl.Tensor(R(5, 4)))
gradient_check(ndl.mul_scalar, ndl.Tensor(R(5, 4)), scalar=R(1))
gradient_check(ndl.power_scalar, ndl.Tensor(R(5, 4)), scalar=np.random.randint(1))
gradient_check(ndl.matmul, ndl.Tensor(R(5, 4)), ndl.Tensor(R(4, 5)))
gradient_check(ndl.matmul, ndl.Tensor(R(6, 6, 5, 4)), ndl.Tensor(R(4, 3)))
gradient_check(ndl.matmul, ndl.Tensor(R(5, 4)), ndl.Tensor(R(6, 6, 4, 3)))
gradient_check(ndl.reshape, ndl.Tensor(R(5, 4)), shape=(4, 5))
gradient_check(ndl.negate, ndl.Tensor(R(5, 4)))
gradient_check(ndl.transpose, ndl.Tensor(R(3, 5, 4)), axes=(1, 2))
gradient_check(ndl.transpose, ndl.Tensor(R(3, 5, 4)), axes=(0, 1))
gradient_check(ndl.broadcast_to, ndl.Tensor(R(3, 1)), shape=(3, 3))
gradient_check(ndl.broadcast_to, ndl.Tensor(R(1, 3)), shape=(3, 3))
gradient_check(ndl.broadcast_to, ndl.Tensor(R(1,)), shape=(3, 3, 3))
gradient_check(ndl.broadcast_to, ndl.Tensor(R()), shape=(3, 3, 3))
gradient_check(ndl.broadcast_to, ndl.Tensor(R(5, 4, 1)), shape=(5, 4, 3))
gradient_check(ndl.summation, ndl.Tensor(R(5, 4)), axes=(1,))
gradient_check(ndl.summation, ndl.Tensor(R(5, 4)), axes=(0,))
gradient_check(ndl.summation, ndl.Tensor(R(5, 4)), axes=(0, 1))
gradient_check(ndl.summation, ndl.Tensor(R(5, 4, 1)), axes=(0, 1))
gradient_check(ndl.log, ndl.Tensor(1 + np.random.rand(5, 4)))
gradient_check(ndl.exp, ndl.Tensor(R(5, 4)))
gradient_check(ndl.relu, ndl.Tensor(R(5, 4)))
gradient_check(ndl.ops.logsumexp, ndl.Tensor(R(5, 4)), axes=(1,))
gradient_check(lambda A, B, C: ndl.summation((A @ B + C) * (A @ B), axes=None),
               ndl.Tensor(R(10, 9)), ndl.Tensor(R(9, 8)), ndl.Tensor(R(10, 8)), backward=True)
gradient_check(lambda A, B: ndl.summation(ndl.broadcast_to(A, shape=(10, 9)) * B, axes=None),
               ndl.Tensor(R(10, 1)), ndl.Tensor(R(10, 9)), backward=True)
gradient_check(lambda A, B, C: ndl.summation(ndl.reshape(A, shape=(10, 10)) @ B / 5 + C, axes=None),
               ndl.Tensor(R(100)), ndl.Tensor(R(10, 5)), ndl.Tensor(R(10, 5)), backward=True)
gradient_check(lambda A, B: ndl.summation(A - B, axes=None) * ndl.summation(A * B), ndl.Tensor(R(4, 3)), ndl.Tensor(R(4, 3)), backward=True)
# exact forward values
np.testing.assert_allclose(ndl.exp(ndl.Tensor([[4.0], [4.55]])).numpy(), np.array([[54.59815003], [94.63240831]]))
np.testing.assert_allclose(ndl.log(ndl.Tensor([[4.0], [4.55]])).numpy(), np.array([[1.38629436112], [1.515127232963]]))
np.testing.assert_allclose(ndl.divide_scalar(ndl.Tensor([[1.7, 1.45]]), scalar=12).numpy(), np.array([[0.141666666667, 0.120833333333]]))
# topo sort
a1, b1 = ndl.Tensor(np.asarray([[0.88282157]])), ndl.Tensor(np.asarray([[0.90170084]]))
c1 = 3 * a1 * a1 + 4 * b1 * a1 - a1
order = ndl.autograd.find_topo_sort([c1])
assert len(order) == 9, len(order)
assert a1.dtype == "float64" and c1.dtype == "float64"
# numpy's dtype is kept: float lists and float64 arrays are float64, float32 stays float32
assert ndl.Tensor([[4.0], [4.55]]).dtype == "float64"
assert ndl.Tensor(np.float32(R(2, 2))).dtype == "float32"
assert (ndl.Tensor(np.float32(R(2, 2))) * 2.5 + 1).dtype == "float32"
assert ndl.Tensor(R(2, 2), dtype="float32").dtype == "float32"
assert ndl.Tensor([1, 2]).dtype == "int64"
# shape errors name the op (numpy's ValueError named none), and an int tensor meeting a float
# array promotes as numpy does (it was cut to ints)
for expr, says in (("a + b", "add"), ("a * b", "mul"), ("a / b", "div"), ("a ** b", "pow"), ("a - b", "sub"),
                   ("a.reshape((5,))", "reshape"), ("a.broadcast_to((4, 3))", "broadcast_to")):
    try:
        eval(expr, {"a": ndl.Tensor(R(2, 3)), "b": ndl.Tensor(R(3, 4))})
        raise AssertionError(f"{expr}: no error")
    except ndl.errors.ShapeError as e:
        assert str(e).startswith(says), (expr, str(e))
promoted = ndl.Tensor(np.array([1, -2, 3], np.int32), dtype="int32") + np.array([1.5])
np.testing.assert_array_equal(promoted.numpy(), [2.5, -0.5, 4.5])
# a 0-d tensor padded by no axes is a copy, as in the compiled backends (numpy's pad refuses it)
x = ndl.Tensor(R(2, 3), requires_grad=True)
y = ndl.ops.pad(x[1, 2], ())
y.backward()
assert y.shape == () and float(y.numpy()) == x.numpy()[1, 2] and x.grad.numpy()[1, 2] == 1
# a [False] mask times another stays a mask (the operator had asked it for its truth)
m = ndl.Tensor(np.array([False])) * ndl.Tensor(np.array([True]))
assert m.dtype == "bool" and not m.numpy()[0]
# softmax and logsoftmax over an empty axis are empty, logsumexp there is log(0) = -inf,
# as torch gives and the compiled backends (numpy's max of nothing had raised)
e = ndl.Tensor(np.zeros((3, 0), np.float32))
assert ndl.ops.logsoftmax(e, axis=1).shape == (3, 0) and ndl.nn.functional.softmax(e, 1).shape == (3, 0)
np.testing.assert_array_equal(e.logsumexp(axes=(1,)).numpy(), [-np.inf] * 3)
print("ok")
