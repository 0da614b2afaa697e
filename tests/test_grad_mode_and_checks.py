"""no_grad(), backward()'s check of custom gradients, and `out[idx] = v` inside a
custom op's compute() (a functional update in lazy mode), in both modes."""
import numpy as np
import pytest

import needle as ndl
from needle.autograd import TensorOp
from tests.modes import execution_mode  # noqa: F401


def test_no_grad_context_builds_no_graph():
    w = ndl.Tensor(np.ones((2, 3), np.float32))
    with ndl.no_grad():
        out = (w * 2).sum()
        assert not ndl.is_grad_enabled()
    assert ndl.is_grad_enabled()
    assert out.op is None and not out.requires_grad and out.inputs == []
    np.testing.assert_allclose(out.numpy(), 12.0)
    assert (w * 2).requires_grad  # back on after the block


def test_no_grad_decorator_and_nesting():
    @ndl.no_grad()
    def evaluate(t):
        return t * 3

    w = ndl.Tensor(np.ones(3, np.float32))
    assert not evaluate(w).requires_grad and (w * 3).requires_grad
    with ndl.no_grad():
        with ndl.no_grad():
            pass
        assert not (w * 3).requires_grad  # the inner block restores "off", not "on"


def test_no_grad_restores_on_error():
    with pytest.raises(ZeroDivisionError):
        with ndl.no_grad():
            1 / 0
    assert ndl.is_grad_enabled()


class WrongShapeGrad(TensorOp):
    def compute(self, a):
        return a * 2

    def gradient(self, out_grad, node):
        return out_grad.sum(axes=(1,))


class WrongDtypeGrad(TensorOp):
    def compute(self, a):
        return a * 2

    def gradient(self, out_grad, node):
        return out_grad.astype("float64")


def test_backward_names_the_op_whose_gradient_has_the_wrong_shape():
    x = ndl.Tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ndl.errors.ShapeError,
                       match=r"WrongShapeGrad\.gradient\(\) returned a gradient of shape \(4,\) for input 0 of "
                             r"shape \(4, 3\)"):
        WrongShapeGrad()(x).sum().backward()


@pytest.mark.skipif(ndl.BACKEND != "nd", reason="the np backend follows numpy's dtype promotion")
def test_backward_names_the_op_whose_gradient_has_the_wrong_dtype():
    x = ndl.Tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ndl.errors.DTypeError, match=r"WrongDtypeGrad\.gradient\(\) returned a float64 gradient"):
        WrongDtypeGrad()(x).sum().backward()


class FirstColumnDoubled(TensorOp):
    """A custom op writing into an array inside compute(), course style."""

    def compute(self, a):
        out = a * 1
        out[:, 0] = a[:, 0] * 2
        out[-1, 1:] = 7.0
        return out

    def gradient(self, out_grad, node):
        mask = np.ones(node.shape, np.float32)
        mask[:, 0] = 2
        mask[-1, 1:] = 0
        return out_grad * ndl.Tensor(mask, device=out_grad.device, requires_grad=False)


def test_setitem_inside_compute_works_in_every_mode():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = ndl.Tensor(a)
    out = FirstColumnDoubled()(x)
    expected = a.copy()
    expected[:, 0] *= 2
    expected[-1, 1:] = 7
    np.testing.assert_array_equal(out.numpy(), expected)
    np.testing.assert_array_equal(x.numpy(), a)  # the input is not written
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[:, 0], [2, 2, 2, 2])


def test_lazy_setitem_with_index_arrays_says_what_to_do():
    from needle.ir.lazy import as_lazy
    lazy = as_lazy(ndl.Tensor(np.zeros((3, 2), np.float32)).realize_cached_data()) * 1
    with pytest.raises(IndexError, match="scatter_add"):
        lazy[[0, 2]] = 1.0


def test_lazy_setitem_after_a_read_is_refused():
    from needle.ir.lazy import as_lazy
    lazy = as_lazy(ndl.Tensor(np.zeros((3, 2), np.float32)).realize_cached_data()) * 1
    total = lazy + 1  # reads the old value
    with pytest.raises(ValueError, match="already read"):
        lazy[0] = 5.0
    lazy2 = lazy * 1
    lazy2[0] = 5.0
    lazy2[1, 0] = 6.0  # a written array can be written again
    np.testing.assert_array_equal(lazy2.numpy(), [[5, 5], [6, 0], [0, 0]])
    np.testing.assert_array_equal(total.numpy(), np.ones((3, 2)))


def test_lazy_switch_nests_restores_and_decorates():
    """needle.lazy restores the mode it found, also after an exception, when one object is
    entered inside itself, and as a decorator of a recursive function."""
    from needle import autograd
    start = autograd.lazy_mode()
    off = ndl.lazy(False)
    with off:
        assert autograd.lazy_mode() is False
        with ndl.lazy(True):
            assert autograd.lazy_mode() is True
            with off:
                assert autograd.lazy_mode() is False
            assert autograd.lazy_mode() is True
        assert autograd.lazy_mode() is False
    assert autograd.lazy_mode() == start
    with pytest.raises(ZeroDivisionError):
        with ndl.lazy(not start):
            1 / 0
    assert autograd.lazy_mode() == start

    @ndl.lazy(False)
    def modes(n):
        return [autograd.lazy_mode()] + (modes(n - 1) if n else [])
    assert modes(2) == [False, False, False] and autograd.lazy_mode() == start


def test_lazy_switch_is_per_thread():
    """One `needle.lazy` object decorating a function two threads run at once: each thread
    sees its own mode inside and gets its own back; the main thread's block is untouched."""
    import sys
    import threading
    from needle import autograd
    seen, errors = [], []

    @ndl.lazy(False)
    def eager_part(k):
        for _ in range(200):
            if autograd.lazy_mode() is not False:
                errors.append(k)
        return autograd.lazy_mode()

    def worker(k):
        with ndl.lazy(True):
            seen.append(eager_part(k))
            if autograd.lazy_mode() is not True:  # (the decorator restored this thread's block)
                errors.append(("after", k))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        with ndl.lazy(False):
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert autograd.lazy_mode() is False
    finally:
        sys.setswitchinterval(interval)
    assert not errors and seen == [False] * 3


def test_a_lazy_block_left_on_another_thread_gives_the_mode_back():
    """A generator whose body runs in `with needle.lazy(False)`, started on this thread and
    finished by a worker (a review found the worker's exit raising IndexError and this
    thread left eager for good): the worker gets its batches, this thread its mode, and
    the worker's own block around the iteration is untouched."""
    from concurrent.futures import ThreadPoolExecutor
    from needle import autograd
    start = autograd.lazy_mode()

    def batches(n):
        with ndl.lazy(not start):
            for i in range(n):
                yield autograd.lazy_mode(), i

    it = batches(3)
    assert next(it) == (not start, 0)

    def rest():
        with ndl.lazy(start):
            got = list(it)
            return got, autograd.lazy_mode()
    with ThreadPoolExecutor(1) as pool:
        got, worker_mode = pool.submit(rest).result()
    assert [i for _, i in got] == [1, 2] and worker_mode == start
    assert autograd.lazy_mode() == start
