"""Optimizers against independent float64 numpy implementations of their update rules."""
import numpy as np
import pytest

import needle as ndl
from needle.autograd import is_pending

SHAPES = [(4, 3), (3,), (1, 3)]
STEPS = 5


def make_params():
    return [ndl.Tensor(np.random.randn(*s).astype(np.float32)) for s in SHAPES]


def grad_sequence():
    """Gradients for STEPS steps, fixed up front so the reference sees the same ones."""
    return [[np.random.randn(*s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]


def run_optimizer(make_opt, grads):
    params = make_params()
    start = [p.numpy().astype(np.float64) for p in params]
    opt = make_opt(params)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = ndl.Tensor(g, requires_grad=False)
        opt.step()
    return start, params, opt


# ---- numpy references, written from the textbook formulas --------------------------------
def sgd_reference(ps, grads, lr, momentum, wd):
    ps = [p.copy() for p in ps]
    u = [np.zeros_like(p) for p in ps]
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            d = g + wd * ps[i]
            u[i] = momentum * u[i] + (1 - momentum) * d
            ps[i] = ps[i] - lr * u[i]
    return ps


def adam_reference(ps, grads, lr, b1, b2, eps, wd):
    ps = [p.copy() for p in ps]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for t, step_grads in enumerate(grads, start=1):
        for i, g in enumerate(step_grads):
            d = g + wd * ps[i]
            m[i] = b1 * m[i] + (1 - b1) * d
            v[i] = b2 * v[i] + (1 - b2) * d * d
            m_hat = m[i] / (1 - b1 ** t)
            v_hat = v[i] / (1 - b2 ** t)
            ps[i] = ps[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return ps


def rmsprop_reference(ps, grads, lr, alpha, eps, wd, momentum, centered):
    """torch.optim.RMSprop's algorithm as documented."""
    ps = [p.copy() for p in ps]
    sq = [np.zeros_like(p) for p in ps]
    ga = [np.zeros_like(p) for p in ps]
    buf = [np.zeros_like(p) for p in ps]
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            d = g + wd * ps[i]
            sq[i] = alpha * sq[i] + (1 - alpha) * d * d
            if centered:
                ga[i] = alpha * ga[i] + (1 - alpha) * d
                avg = np.sqrt(sq[i] - ga[i] ** 2) + eps
            else:
                avg = np.sqrt(sq[i]) + eps
            if momentum > 0:
                buf[i] = momentum * buf[i] + d / avg
                ps[i] = ps[i] - lr * buf[i]
            else:
                ps[i] = ps[i] - lr * d / avg
    return ps


def assert_params_close(params, expected):
    for p, e in zip(params, expected):
        assert p.dtype == "float32"
        np.testing.assert_allclose(p.numpy(), e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lr,momentum,wd", [(0.1, 0.0, 0.0), (0.05, 0.9, 0.0), (0.1, 0.0, 0.01),
                                            (0.02, 0.5, 0.1)])
def test_sgd_matches_reference(lr, momentum, wd):
    grads = grad_sequence()
    start, params, _ = run_optimizer(lambda ps: ndl.optim.SGD(ps, lr=lr, momentum=momentum,
                                                              weight_decay=wd), grads)
    assert_params_close(params, sgd_reference(start, grads, lr, momentum, wd))


@pytest.mark.parametrize("lr,b1,b2,eps,wd", [(0.01, 0.9, 0.999, 1e-8, 0.0), (0.1, 0.5, 0.9, 1e-3, 0.0),
                                             (0.01, 0.9, 0.999, 1e-8, 0.05)])
def test_adam_matches_reference(lr, b1, b2, eps, wd):
    grads = grad_sequence()
    start, params, opt = run_optimizer(lambda ps: ndl.optim.Adam(ps, lr=lr, beta1=b1, beta2=b2, eps=eps,
                                                                 weight_decay=wd), grads)
    assert opt.t == STEPS  # t counts steps, not parameters
    assert_params_close(params, adam_reference(start, grads, lr, b1, b2, eps, wd))


def test_adam_first_step_is_lr_times_sign():
    """Bias correction makes the first step lr * g / (|g| + eps): a hand-checkable value."""
    p = ndl.Tensor(np.zeros(3, dtype=np.float32))
    p.grad = ndl.Tensor(np.array([2.0, -0.5, 1e-3], dtype=np.float32), requires_grad=False)
    ndl.optim.Adam([p], lr=0.1, eps=0.0).step()
    np.testing.assert_allclose(p.numpy(), [-0.1, 0.1, -0.1], rtol=1e-5)


@pytest.mark.parametrize("lr,alpha,eps,wd,momentum,centered", [
    (0.01, 0.99, 1e-8, 0.0, 0.0, False),
    (0.01, 0.9, 1e-6, 0.1, 0.0, False),
    (0.005, 0.99, 1e-8, 0.0, 0.9, False),
    (0.01, 0.95, 1e-4, 0.01, 0.5, True),
])
def test_rmsprop_matches_reference(lr, alpha, eps, wd, momentum, centered):
    grads = grad_sequence()
    start, params, _ = run_optimizer(
        lambda ps: ndl.optim.RMSprop(ps, lr=lr, alpha=alpha, eps=eps, weight_decay=wd, momentum=momentum,
                                     centered=centered), grads)
    assert_params_close(params, rmsprop_reference(start, grads, lr, alpha, eps, wd, momentum, centered))


def test_sgd_momentum_hand_values():
    """u1 = 0.1 * 1 = 0.1, p = 1 - 0.1; u2 = 0.9 * 0.1 + 0.1 * 1 = 0.19, p = 0.9 - 0.19."""
    p = ndl.Tensor(np.array([1.0], dtype=np.float32))
    opt = ndl.optim.SGD([p], lr=1.0, momentum=0.9)
    for _ in range(2):
        p.grad = ndl.Tensor(np.array([1.0], dtype=np.float32), requires_grad=False)
        opt.step()
    np.testing.assert_allclose(p.numpy(), [0.71], rtol=1e-6)


OPTIMIZERS = [
    lambda ps: ndl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda ps: ndl.optim.Adam(ps, lr=0.01, weight_decay=0.01),
    lambda ps: ndl.optim.RMSprop(ps, lr=0.01, momentum=0.5, weight_decay=0.01),
]


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_step_uses_backward_gradients_and_leaves_grad_alone(make_opt):
    """A real loss: grads come from backward(); step() must not touch them."""
    W = ndl.Tensor(np.random.randn(5, 3).astype(np.float32))
    b = ndl.Tensor(np.random.randn(1, 3).astype(np.float32))
    X = ndl.Tensor(np.random.randn(8, 5).astype(np.float32), requires_grad=False)
    opt = make_opt([W, b])
    for _ in range(3):
        opt.reset_grad()
        loss = ((X @ W + b.broadcast_to((8, 3))) ** 2).sum()
        loss.backward()
        # d/dW sum((XW + b)^2) = 2 X^T (XW + b), computed here in numpy
        Z = X.numpy() @ W.numpy() + b.numpy()
        np.testing.assert_allclose(W.grad.numpy(), 2 * X.numpy().T @ Z, rtol=1e-4, atol=1e-4)
        grads_before = [W.grad.numpy().copy(), b.grad.numpy().copy()]
        grad_objects = [W.grad, b.grad]
        params_before = [W.numpy().copy(), b.numpy().copy()]
        opt.step()
        assert [W.grad, b.grad] == grad_objects
        np.testing.assert_array_equal(W.grad.numpy(), grads_before[0])
        np.testing.assert_array_equal(b.grad.numpy(), grads_before[1])
        assert not np.allclose(W.numpy(), params_before[0])


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_step_realizes_params_and_detached_state(make_opt):
    params = make_params()
    opt = make_opt(params)
    for _ in range(2):
        for p in params:
            p.grad = ndl.Tensor(np.random.randn(*p.shape).astype(np.float32), requires_grad=False)
        opt.step()
    for p in params:
        assert p.is_leaf() and p.requires_grad and p.dtype == "float32"
        assert not is_pending(p._cached_data)
    state = opt.state_tensors()
    assert state
    for s in state:
        assert s.is_leaf() and not s.requires_grad and s.dtype == "float32"
        assert not is_pending(s._cached_data)


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_params_without_grad_are_skipped(make_opt):
    a = ndl.Tensor(np.ones(3, dtype=np.float32))
    b = ndl.Tensor(np.ones(3, dtype=np.float32))
    a.grad = ndl.Tensor(np.ones(3, dtype=np.float32), requires_grad=False)
    opt = make_opt([a, b])
    opt.step()
    np.testing.assert_array_equal(b.numpy(), np.ones(3))
    assert not np.allclose(a.numpy(), np.ones(3))
    assert getattr(b, "grad", None) is None


def test_float64_grad_keeps_float32_param():
    p = ndl.Tensor(np.ones(3, dtype=np.float32))
    p.grad = ndl.Tensor(np.full(3, 0.5), dtype="float64", requires_grad=False)
    ndl.optim.SGD([p], lr=1.0).step()
    assert p.dtype == "float32"
    np.testing.assert_allclose(p.numpy(), [0.5, 0.5, 0.5])


def test_reset_grad_and_zero_grad():
    params = make_params()
    opt = ndl.optim.SGD(params, lr=0.1)
    for reset in (opt.reset_grad, opt.zero_grad):
        for p in params:
            p.grad = ndl.Tensor(np.ones(p.shape, dtype=np.float32), requires_grad=False)
        reset()
        assert all(p.grad is None for p in params)


def test_lr_attribute_is_used_at_each_step():
    p = ndl.Tensor(np.zeros(2, dtype=np.float32))
    opt = ndl.optim.SGD([p], lr=1.0)
    assert opt.lr == 1.0
    for lr in (1.0, 0.5, 0.25):
        opt.lr = lr
        p.grad = ndl.Tensor(np.ones(2, dtype=np.float32), requires_grad=False)
        opt.step()
    np.testing.assert_allclose(p.numpy(), [-1.75, -1.75])


def test_params_accepts_generator():
    params = make_params()
    opt = ndl.optim.Adam(p for p in params)
    assert len(opt.params) == len(params)


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_one_schedule_per_step(make_opt):
    """The whole update (all params and state) is one schedule, in eager mode too (not
    a kernel per scalar op of each parameter's update)."""
    from needle import runtime
    params = make_params()
    opt = make_opt(params)
    for _ in range(3):
        for p in params:
            p.grad = ndl.Tensor(np.random.randn(*p.shape).astype(np.float32), requires_grad=False)
        before = runtime.stats()["schedules"]
        opt.step()
        assert runtime.stats()["schedules"] - before == 1


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_training_loop_does_not_accumulate_tensors(make_opt):
    """Detached state and realized params: live tensors stay flat over many steps."""
    import gc
    W = ndl.Tensor(np.random.randn(6, 2).astype(np.float32))
    X = ndl.Tensor(np.random.randn(4, 6).astype(np.float32), requires_grad=False)
    opt = make_opt([W])

    def step():
        opt.reset_grad()
        ((X @ W) ** 2).sum().backward()
        opt.step()

    for _ in range(3):
        step()
    gc.collect()
    before = ndl.autograd.TENSOR_COUNTER
    for _ in range(20):
        step()
    gc.collect()
    assert ndl.autograd.TENSOR_COUNTER <= before


@pytest.mark.parametrize("make_opt, reference, expressions", [
    (lambda ps: ndl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
     lambda ps, gs: sgd_reference(ps, gs, 0.1, 0.9, 0.01), 4),                  # wd, 1 - m, m, lr
    (lambda ps: ndl.optim.Adam(ps, lr=0.01, weight_decay=0.01),
     lambda ps, gs: adam_reference(ps, gs, 0.01, 0.9, 0.999, 1e-8, 0.01), 7),   # wd, 1 - b1, 1 - b2, b1, b2,
])                                                                  # lr and eps with the corrections folded in
def test_parameters_share_one_run_time_scalar_per_hyperparameter(make_opt, reference, expressions):
    """A captured step passes each hyperparameter expression once, however many
    parameters read it (Adam's bias corrections change every step)."""
    with ndl.lazy(True):
        params = make_params()
        start = [p.numpy().astype(np.float64) for p in params]
        opt = make_opt(params)
        grads = grad_sequence()

        @ndl.jit
        def step(*gs):
            for p, g in zip(params, gs):
                p.grad = g
            opt.step()

        for step_grads in grads:
            step(*[ndl.Tensor(g, requires_grad=False) for g in step_grads])
        assert step.replays == STEPS - 2
        (capture,) = [c for steps in step.captures.values() for c in steps]
        scalars = [s for run in capture.runs for s in getattr(run, "scalars", ())]
        assert len(scalars) == expressions, len(scalars)
        assert_params_close(params, reference(start, grads))


@pytest.mark.parametrize("make_opt", [
    lambda ps: ndl.optim.Adam(ps, lr=0.01, weight_decay=0.01),
    lambda ps: ndl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
])
def test_steps_leave_no_garbage_cycles(make_opt):
    """With Python's cycle collector off, a training loop's tracked objects stop growing
    after warm-up (lazy and eager): nothing a step makes (run-time scalars, graphs) is
    kept alive by a reference cycle.  One cycle per step would add at least 40 objects."""
    import gc
    model = ndl.nn.Sequential(ndl.nn.Linear(8, 8), ndl.nn.ReLU(), ndl.nn.Linear(8, 2))
    opt = make_opt(model.parameters())
    x = ndl.Tensor(np.random.randn(4, 8).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(np.array([0, 1, 0, 1], np.float32), requires_grad=False)

    def step():
        opt.reset_grad()
        loss = ndl.nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.numpy())

    for _ in range(5):
        step()
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            step()
        before = len(gc.get_objects())
        for _ in range(40):
            step()
        grown = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert grown < 20, grown


def _course_momentum_subclass(store_of):
    """A user's Optimizer subclass (course momentum through `_update` and `keep`) whose
    state dict for parameter i is `store_of(optimizer, i)`, checked step by step: its
    state is computed with each step, and the parameters follow the float64 reference."""
    from needle.optim.optimizer import Optimizer, data_of, keep

    class Momentum(Optimizer):
        def __init__(self, params, lr=0.1, beta=0.9):
            super().__init__(params, lr)
            self.beta = beta

        def _update(self, i, p, g):
            store = store_of(self, i)
            m = g * (1 - self.beta) + (data_of(store[0]) * self.beta if 0 in store else 0)
            keep(store, 0, m)
            return p - m * self.lr

    params = make_params()
    start = [p.numpy().astype(np.float64) for p in params]
    grads = grad_sequence()
    opt = Momentum(params)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = ndl.Tensor(g, requires_grad=False)
        opt.step()
        assert not any(is_pending(store_of(opt, i)[0]._cached_data) for i in range(len(params)))
    for p, w in zip(params, sgd_reference(start, grads, lr=0.1, momentum=0.9, wd=0.0)):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-5, atol=1e-6)


def test_a_subclass_update_that_keeps_state_gets_it_computed_with_the_step():
    # (the base class's state_tensors() named no state: a subclass's kept momentum stayed
    # pending, each step's graph chained to the last, and lazy steps slowed step by step)
    _course_momentum_subclass(lambda opt, i: opt.__dict__.setdefault("m", {}).setdefault(i, {}))


def test_state_kept_in_an_object_of_the_subclass_is_computed_with_the_step():
    # (state_tensors() walks lists, tuples and dicts: a keep() store inside a dataclass per
    # parameter stayed pending, and lazy steps slowed step by step)
    import dataclasses

    @dataclasses.dataclass
    class Slot:
        store: dict

    def store_of(opt, i):
        slots = opt.__dict__.setdefault("slots", {})
        return slots.setdefault(i, Slot({})).store
    _course_momentum_subclass(store_of)
