"""needle.jit against un-jitted runs of the same code (SPEC "Captured steps").

Each test trains the same model twice from the same seeds, once plainly and once
through needle.jit, and asserts bitwise equality of losses, parameters and state:
a replay runs the very kernels the plain step runs, with the same inputs, state,
random draws and run-time scalars.  The JitError cases check that a capture that
could not be faithful is refused, naming the user's line."""
import sys

import numpy as np
import pytest

import needle as ndl
from needle import config, nn, optim
from needle.errors import JitError
from needle.optim.lr_scheduler import StepLR


@pytest.fixture(params=["lazy", "eager"])
def mode(request):
    """Lazy mode captures; eager mode runs the function plainly (and must agree)."""
    with ndl.lazy(request.param == "lazy"):
        yield request.param


def make_mlp(seed=0):
    np.random.seed(seed)
    model = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))
    opt = optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-3)
    return model, opt


def batches(steps, sizes=(8,)):
    rng = np.random.default_rng(7)
    for i in range(steps):
        n = sizes[(i // 10) % len(sizes)]
        yield (rng.standard_normal((n, 12)).astype("float32"), rng.integers(0, 4, n).astype("float32"))


def train(use_jit, steps=20, sizes=(8, 6), eval_every=7, max_captures=8):
    """20 steps: Adam + weight decay, StepLR, Dropout, BatchNorm (train, and eval
    every `eval_every` steps), a batch-size change at step 10."""
    model, opt = make_mlp()
    sched = StepLR(opt, step_size=4, gamma=0.5)

    def step(x, y):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = ndl.jit(step, max_captures=max_captures) if use_jit else step
    losses = []
    np.random.seed(123)  # Dropout's draws
    for i, (xb, yb) in enumerate(batches(steps, sizes)):
        model.eval() if i % eval_every == eval_every - 1 else model.train()
        loss = fn(ndl.Tensor(xb, requires_grad=False), ndl.Tensor(yb, requires_grad=False))
        losses.append(loss.numpy().copy())
        sched.step()
    state = [p.numpy().copy() for p in model.parameters()] + [t.numpy().copy() for _, t in model.named_buffers()]
    python_runs = fn.calls - fn.replays if use_jit and ndl.autograd.lazy_mode() else steps
    return losses, state, python_runs, fn


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape and np.array_equal(x, y), f"item {i} differs: max |d| = {np.abs(x - y).max()}"


def test_a_jitted_training_run_equals_the_plain_run_bit_for_bit(mode):
    plain_losses, plain_state, _, _ = train(use_jit=False)
    jit_losses, jit_state, python_runs, fn = train(use_jit=True)
    assert_bitwise(plain_losses, jit_losses)
    assert_bitwise(plain_state, jit_state)
    # 20 calls; Python ran on the warm-up and once per capture (train/eval x 2 shapes)
    if mode == "lazy":
        assert fn.calls == 20 and python_runs <= 6, (python_runs, fn.replays)


def test_fewer_captures_than_keys_stay_correct():
    plain_losses, plain_state, _, _ = train(use_jit=False, sizes=(8, 6, 5), steps=30)
    jit_losses, jit_state, _, fn = train(use_jit=True, sizes=(8, 6, 5), steps=30, max_captures=2)
    assert_bitwise(plain_losses, jit_losses)
    assert_bitwise(plain_state, jit_state)
    assert sum(len(v) for v in fn.captures.values()) <= 2


def lstm_run(use_jit, segments=8):
    np.random.seed(1)
    lstm, head = nn.LSTM(5, 6, num_layers=2), nn.Linear(6, 3)
    opt = optim.SGD(lstm.parameters() + head.parameters(), lr=0.1, momentum=0.9)

    def segment(x, y, h):
        opt.reset_grad()
        out, h = lstm(x, h)
        loss = nn.SoftmaxLoss()(head(out.reshape((12, 6))), y)
        loss.backward()
        opt.step()
        return loss, tuple(t.detach() for t in h)

    fn = ndl.jit(segment) if use_jit else segment
    rng = np.random.default_rng(2)
    h, losses = None, []
    for _ in range(segments):
        x = ndl.Tensor(rng.standard_normal((4, 3, 5)).astype("float32"), requires_grad=False)
        y = ndl.Tensor(rng.integers(0, 3, 12).astype("float32"), requires_grad=False)
        loss, h = fn(x, y, h)
        losses.append(loss.numpy().copy())
    return losses + [t.numpy() for t in h] + [p.numpy() for p in lstm.parameters()], fn


def test_a_truncated_bptt_loop_carrying_its_hidden_state(mode):
    plain, _ = lstm_run(False)
    jitted, fn = lstm_run(True)
    assert_bitwise(plain, jitted)
    assert fn.replays >= 5 or mode == "eager"


def test_returned_values_stay_valid_after_later_calls():
    model, opt = make_mlp()
    model.eval()

    @ndl.jit
    def predict(x):
        return model(x) * 2.0

    xs = [np.random.default_rng(i).standard_normal((4, 12)).astype("float32") for i in range(5)]
    outs = [predict(ndl.Tensor(x, requires_grad=False)) for x in xs]
    with ndl.lazy(False):
        expected = [(model(ndl.Tensor(x, requires_grad=False)) * 2.0).numpy() for x in xs]
    for out, exp in zip(outs, expected):
        np.testing.assert_allclose(out.numpy(), exp, rtol=1e-5, atol=1e-6)
    assert predict.replays == 3


def test_non_tensor_arguments_select_their_own_capture():
    @ndl.jit
    def scaled(x, factor):
        return x * factor + 1.0

    x = ndl.Tensor(np.arange(6, dtype="float32"), requires_grad=False)
    results = [scaled(x, f).numpy() for f in (2.0, 2.0, 3.0, 2.0, 3.0, 3.0)]
    for r, f in zip(results, (2.0, 2.0, 3.0, 2.0, 3.0, 3.0)):
        np.testing.assert_array_equal(r, np.arange(6, dtype="float32") * np.float32(f) + 1)
    assert scaled.replays == 3  # warm-up, capture (2.0), capture (3.0); the rest replay


def test_the_shortcut_key_of_tensor_arguments_is_the_general_key():
    # f(x, y, z) with Tensors only skips the template walk; a call that took the walk
    # (a Tensor subclass among them) gets the key the walk gives, which holds each
    # argument's class: a step may branch on isinstance(x, nn.Parameter)
    from needle.captured.function import Call
    ts = tuple(ndl.Tensor(np.zeros(2, "float32"), requires_grad=False) for _ in range(3))
    p = ndl.nn.Parameter(ndl.Tensor(np.zeros(2, "float32"), requires_grad=False))
    p.requires_grad = False
    assert Call(ts, {}).key == Call(tuple(ts), {}).key and Call(ts, {}).key != Call((p,) + ts[1:], {}).key

    f = ndl.jit(lambda x, y: x * y * (2.0 if isinstance(x, ndl.nn.Parameter) else 1.0) + 1.0)
    p = ndl.nn.Parameter(ndl.Tensor(np.arange(2, dtype="float32"), requires_grad=False))
    p.requires_grad = False  # (requires_grad is part of the key: a gradient of an input is set or not)
    for _ in range(3):
        f(ts[0], ts[1])
    for _ in range(3):
        f(p, ts[1])  # a Parameter: its own capture
    assert f.replays == 3 and sum(len(v) for v in f.captures.values()) == 2
    np.testing.assert_array_equal(f(p, ndl.Tensor(np.ones(2, "float32"), requires_grad=False)).numpy(), [1.0, 3.0])


@pytest.mark.parametrize("read_each_call", [True, False])
def test_state_the_step_replaces_without_returning_it_is_computed_at_every_replay(read_each_call):
    # nothing returned, nothing realized inside: the capture itself must compute the new
    # state, or the replays (which run only captured kernels) would leave it unchanged;
    # and the warm-up's pending state must not be folded into the capture, or every
    # replay would start again from the value before the warm-up
    box = {"w": ndl.Tensor(np.ones(3, np.float32), requires_grad=False)}

    @ndl.jit
    def double():
        box["w"] = box["w"] * 2

    for k in range(1, 6):
        double()
        if read_each_call:
            np.testing.assert_array_equal(box["w"].numpy(), np.full(3, 2.0 ** k, np.float32))
    np.testing.assert_array_equal(box["w"].numpy(), np.full(3, 2.0 ** 5, np.float32))
    assert double.replays == 3


def test_module_attribute_and_tuple_state_replaced_without_returning_them():
    # a jitted method that accumulates into a module attribute, and a function that
    # rotates a tuple of state tensors; neither returns nor reads what it replaced
    class Counter(ndl.nn.Module):
        def __init__(self):
            super().__init__()
            self.count = ndl.Tensor(np.zeros(2, np.float32), requires_grad=False)

        @ndl.jit
        def tick(self, x):
            self.count = self.count + x

    counter, one = Counter(), ndl.Tensor(np.ones(2, np.float32), requires_grad=False)
    box = {"h": (ndl.Tensor(np.zeros(3, np.float32), requires_grad=False),
                 ndl.Tensor(np.ones(3, np.float32), requires_grad=False))}

    @ndl.jit
    def rotate(x):
        a, b = box["h"]
        box["h"] = (b + x, a * 2)

    ones, want = ndl.Tensor(np.ones(3, np.float32), requires_grad=False), (np.zeros(3), np.ones(3))
    for _ in range(6):
        counter.tick(one)
        rotate(ones)
        want = (want[1] + 1, want[0] * 2)
    np.testing.assert_array_equal(counter.count.numpy(), [6.0, 6.0])
    np.testing.assert_array_equal(box["h"][0].numpy(), want[0])
    np.testing.assert_array_equal(box["h"][1].numpy(), want[1])
    assert counter.tick.replays == 4 and rotate.replays == 4


READS = {
    ".numpy()": lambda loss: loss.numpy(),
    ".item()": lambda loss: loss.item(),
    "float()": lambda loss: float(loss),
    "print": lambda loss: print(loss),
    "if": lambda loss: 1 if loss else 0,
}


@pytest.mark.parametrize("read", list(READS))
def test_reading_a_value_inside_the_step_is_a_jit_error_naming_the_line(read):
    model, opt = make_mlp()

    @ndl.jit
    def step(x, y):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        READS[read](loss)
        loss.backward()
        opt.step()
        return loss

    (xb, yb), = batches(1)
    x, y = ndl.Tensor(xb, requires_grad=False), ndl.Tensor(yb, requires_grad=False)
    step(x, y)  # the warm-up call runs plainly: reading is fine there
    with pytest.raises(JitError, match=r"test_jit\.py:\d+"):
        step(x, y)


def test_masks_combined_and_a_tensor_exponents_gradient_read_no_value():
    """mask * mask and the gradient of x ** y (whose backward multiplies masks) read no
    tensor's value, so a captured step replays them (they had raised JitError: the
    operator asked the first mask whether it was true), equal to the plain calls."""
    rng = np.random.default_rng(3)

    def step(a, b):
        keep = (a > 1.0) * (b > 0.5) + (a < 0.7) * (b < 0.2)
        out = (a ** b * keep).sum()
        out.backward()
        return out, a.grad, b.grad

    jitted = ndl.jit(step)
    for _ in range(4):
        x, y = rng.random((4, 5)).astype(np.float32) + 0.5, rng.random((4, 5)).astype(np.float32)
        mine = jitted(ndl.Tensor(x), ndl.Tensor(y))
        ref = step(ndl.Tensor(x), ndl.Tensor(y))
        for m, r in zip(mine, ref):
            np.testing.assert_array_equal(m.numpy(), r.numpy())
    keep = ((x > 1.0) & (y > 0.5)) | ((x < 0.7) & (y < 0.2))
    np.testing.assert_allclose(mine[0].numpy(), (x ** y * keep).sum(), rtol=1e-5)
    np.testing.assert_allclose(mine[1].numpy(), y * x ** (y - 1) * keep, rtol=1e-5)
    np.testing.assert_allclose(mine[2].numpy(), np.log(x) * x ** y * keep, rtol=1e-5, atol=1e-7)


def test_state_kept_through_default_arguments_is_followed():
    # (state in a container reached only through the function's defaults was a JitError)
    def run(use_jit):
        hidden = {}

        def remember(t):
            hidden["h"] = t

        def step(x, store=remember, box=hidden):
            h = box.get("h")
            h = x * 1.0 if h is None else h * 0.5 + x
            store(h.detach())
            return h

        fn = ndl.jit(step) if use_jit else step
        out = []
        for i in range(6):
            out.append(fn(ndl.Tensor(np.full(3, i, "float32"), requires_grad=False)).numpy().copy())
        assert not use_jit or fn.replays >= 3
        return out + [hidden["h"].numpy()]
    _both(run)


def test_needle_jit_0_runs_the_function_every_time(monkeypatch):
    monkeypatch.setattr(config, "JIT", False)
    calls = []

    @ndl.jit
    def f(x):
        calls.append(1)
        return x + 1.0

    x = ndl.Tensor(np.zeros(2, "float32"), requires_grad=False)
    for _ in range(4):
        np.testing.assert_array_equal(f(x).numpy(), [1, 1])
    assert len(calls) == 4


def test_reset_and_explain():
    @ndl.jit
    def f(x):
        return (x * 3.0).sum()

    x = ndl.Tensor(np.ones(4, "float32"), requires_grad=False)
    for _ in range(3):
        f(x)
    text = f.explain()
    assert "1 capture(s)" in text and "schedule 0" in text and "input" in text and "guards:" in text
    f.reset()
    f(x)
    assert f.calls == 1 and f.replays == 0 and not f.captures


class Trainer:
    """State on an object whose method is jitted (and on a callable object)."""

    def __init__(self):
        self.model, self.opt = make_mlp()

    @ndl.jit
    def step(self, x, y):
        self.opt.reset_grad()
        loss = nn.SoftmaxLoss()(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def __call__(self, x, y):
        return Trainer.step.fn(self, x, y)


@pytest.mark.parametrize("how", ["method", "callable object"])
def test_jitted_methods_and_callable_objects(how):
    data = [(ndl.Tensor(x, requires_grad=False), ndl.Tensor(y, requires_grad=False)) for x, y in batches(6)]
    plain, jitted = Trainer(), Trainer()
    fn = jitted.step if how == "method" else ndl.jit(jitted)
    def run(trainer, step):
        np.random.seed(5)  # Dropout's draws
        out = []
        for i, (x, y) in enumerate(data):
            trainer.model.train(i % 3 != 2)  # the training flag of a module behind `self`
            out.append(step(x, y).numpy())
        return out
    assert_bitwise(run(plain, lambda x, y: Trainer.step.fn(plain, x, y)), run(jitted, fn))
    assert fn.replays == 3  # warm-up, a capture in train mode and one in eval mode
    assert_bitwise([p.numpy() for p in plain.model.parameters()], [p.numpy() for p in jitted.model.parameters()])


def test_a_one_schedule_call_of_inputs_and_state_replays_with_each_calls_values():
    """f(x) = x @ w + b with w, b state: new input arrays, state given new values, and state given a
    pending value (a transpose, computed when the replay reads it) all give numpy's
    result."""
    rng = np.random.default_rng(11)
    w_np, b_np = rng.standard_normal((8, 5)).astype("float32"), rng.standard_normal((1, 5)).astype("float32")
    w, b = ndl.Tensor(w_np, requires_grad=False), ndl.Tensor(b_np, requires_grad=False)
    f = ndl.jit(lambda x: x @ w + ndl.ops.broadcast_to(b, (x.shape[0], 5)))
    for call in range(4):
        x_np = rng.standard_normal((3, 8)).astype("float32")
        if call == 2:  # new values, same layout: read where they now are
            w_np = rng.standard_normal((8, 5)).astype("float32")
            w.data = ndl.Tensor(w_np, requires_grad=False)
        with ndl.lazy(True):
            got = f(ndl.Tensor(x_np, requires_grad=False)).numpy()
        np.testing.assert_allclose(got, x_np.astype(np.float64) @ w_np + b_np, rtol=1e-5, atol=1e-5)
    assert f.replays == 2
    b_np = rng.standard_normal((5, 1)).astype("float32").T.copy()
    b.data = ndl.Tensor(b_np.T, requires_grad=False).transpose()  # pending until the replay reads it
    x_np = rng.standard_normal((3, 8)).astype("float32")
    with ndl.lazy(True):
        got = f(ndl.Tensor(x_np, requires_grad=False)).numpy()
    np.testing.assert_allclose(got, x_np.astype(np.float64) @ w_np + b_np, rtol=1e-5, atol=1e-5)
    assert f.replays == 3


def _argmax_of(w):
    return ndl.ops.argmax(w, 0)


def rows(w):
    return ndl.ops.broadcast_to(ndl.ops.reshape(w, (1, 3)), (2, 3))


@pytest.mark.parametrize("how,reference", [
    ("compare", lambda w, i: (w > 0).sum()),
    ("detach", lambda w, i: (w * 2).sum()),
    ("data", lambda w, i: (w * 2).sum()),
    ("Tensor()", lambda w, i: (w * 3).sum()),
    ("argmax", lambda w, i: np.argmax(w)),
    ("index", lambda w, i: w[i].sum()),
    ("labels", lambda w, i: -w[i].mean()),
])
def test_state_read_through_a_cut_from_the_graph_is_read_at_each_replay(how, reference):
    """A comparison mask, detach, .data, Tensor(t), argmax, an index Tensor and a loss's
    labels make a new constant leaf of another tensor's data: while capturing, that is
    a read of the state tensor, so a replay after `w.data = ...` reads the new values
    (the capture once froze them: the replays returned the first call's answer)."""
    fns = {
        "compare": lambda: (w > 0).sum(),
        "detach": lambda: (w.detach() * 2).sum(),
        "data": lambda: (w.data * 2).sum(),
        "Tensor()": lambda: (ndl.Tensor(w) * 3).sum(),
        "argmax": lambda: _argmax_of(w),
        "index": lambda: w[idx].sum(),
        "labels": lambda: nn.SoftmaxLoss()(rows(w), idx) - ndl.ops.logsumexp(rows(w), (1,)).sum() / 2,
    }
    values = [np.array([1.0, -2.0, 3.0], np.float32), np.array([-1.0, 5.0, -3.0], np.float32)]
    indices = [np.array([0, 2]), np.array([1, 1])]
    w = ndl.Tensor(values[0], requires_grad=False)
    idx = ndl.Tensor(indices[0], dtype="int64", requires_grad=False)
    f = ndl.jit(fns[how])
    with ndl.lazy(True):
        for _ in range(3):
            np.testing.assert_allclose(f().numpy(), reference(values[0], indices[0]), rtol=1e-6)
        w.data = ndl.Tensor(values[1], requires_grad=False)
        idx.data = ndl.Tensor(indices[1], dtype="int64", requires_grad=False)
        np.testing.assert_allclose(f().numpy(), reference(values[1], indices[1]), rtol=1e-6)
    assert f.replays >= 2


def test_replays_of_one_schedule_with_different_constant_scalars():
    """Two captured functions that differ only in a constant (x * 2.5 + 1, x * 3.5 + 1) share
    one compiled schedule, its scalars handed over at launch; each replay must run with
    its own constants, whichever of the two ran last (the runtime gathers a replay's
    fixed scalars once, runtime/cpu.py `prepare`)."""
    x_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = ndl.Tensor(x_np, requires_grad=False)
    f2, f3 = ndl.jit(lambda: x * 2.5 + 1.0), ndl.jit(lambda: x * 3.5 + 1.0)
    with ndl.lazy(True):
        for _ in range(4):
            np.testing.assert_array_equal(f2().numpy(), x_np * 2.5 + 1)
            np.testing.assert_array_equal(f3().numpy(), x_np * 3.5 + 1)
            np.testing.assert_array_equal(f3().numpy(), x_np * 3.5 + 1)
    (s2,), (s3,) = [[s for steps in f.captures.values() for s in steps] for f in (f2, f3)]
    assert s2.runs[0].entry is s3.runs[0].entry


# ---- state that moves between calls (each case silently trained wrong before) ---------------
def _small_model(seed=0):
    np.random.seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _data(i, n=5):
    rng = np.random.default_rng(i)
    return (ndl.Tensor(rng.standard_normal((n, 6)).astype("float32"), requires_grad=False),
            ndl.Tensor(rng.integers(0, 3, n).astype("float32"), requires_grad=False))


def _training_step(model, opt, use_jit):
    def step(x, y):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return ndl.jit(step) if use_jit else step


def _both(run):
    """run(use_jit) -> list of arrays, plain and jitted, compared bit for bit."""
    with ndl.lazy(True):
        assert_bitwise(run(False), run(True))


def test_gradients_reset_outside_the_function_are_set_by_every_replay():
    # forward + backward captured; reset_grad, clipping and the step outside
    def run(use_jit):
        model = _small_model()
        opt = optim.SGD(model.parameters(), lr=0.5)

        def grads(x, y):
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            return loss
        fn = ndl.jit(grads) if use_jit else grads
        out = []
        for i in range(6):
            x, y = _data(i)
            x.requires_grad = True
            opt.reset_grad()
            out.append(fn(x, y).numpy().copy())
            assert model.parameters()[0].grad is not None and x.grad is not None, i
            out.append(x.grad.numpy().copy())
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        return out + [p.numpy().copy() for p in model.parameters()]
    _both(run)


@pytest.mark.parametrize("make,change", [
    (lambda p: optim.SGD(p, lr=0.1), lambda o: setattr(o, "momentum", 0.9)),
    (lambda p: optim.SGD(p, lr=0.1), lambda o: setattr(o, "weight_decay", 0.5)),
    (lambda p: optim.Adam(p, lr=0.01), lambda o: setattr(o, "weight_decay", 0.5)),
    (lambda p: optim.RMSprop(p, lr=0.01), lambda o: setattr(o, "centered", True)),
    (lambda p: optim.RMSprop(p, lr=0.01), lambda o: setattr(o, "momentum", 0.5)),
], ids=["sgd-momentum", "sgd-weight-decay", "adam-weight-decay", "rmsprop-centered", "rmsprop-momentum"])
def test_a_hyperparameter_turned_on_between_calls_is_used(make, change):
    def run(use_jit):
        model = _small_model()
        opt = make(model.parameters())
        fn = _training_step(model, opt, use_jit)
        out = []
        for i in range(8):
            if i == 4:
                change(opt)
            out.append(fn(*_data(0)).numpy().copy())
        return out + [p.numpy().copy() for p in model.parameters()]
    _both(run)


def test_optimizer_load_state_dict_after_a_capture_is_what_replays_use():
    def run(use_jit):
        model = _small_model()
        opt = optim.Adam(model.parameters(), lr=0.05)
        fn = _training_step(model, opt, use_jit)
        out = [fn(*_data(i)).numpy().copy() for i in range(3)]
        saved = ({k: v.detach() for k, v in model.state_dict().items()}, opt.state_dict())
        out += [fn(*_data(i)).numpy().copy() for i in range(3, 6)]
        model.load_state_dict(saved[0])
        opt.load_state_dict(saved[1])
        out += [fn(*_data(i)).numpy().copy() for i in range(3, 6)]
        assert all(np.array_equal(a, b) for a, b in zip(out[3:6], out[6:9]))  # resumed exactly
        return out + [t.numpy().copy() for t in opt.m.values()]
    _both(run)


class _Stateful(nn.Module):
    """An RNN cell carrying its hidden state in an attribute (None: start from zeros)."""

    def __init__(self):
        super().__init__()
        self.cell, self.h = nn.RNNCell(6, 4), None

    def forward(self, x):
        self.h = self.cell(x, self.h)
        return self.h.sum()


@pytest.mark.parametrize("resets", [(1, 5), tuple(range(6))], ids=["sometimes", "before-every-call"])
def test_state_set_to_none_between_calls_is_started_again(resets):
    # (a replay ignored the None, or crashed; reset before every call, none was kept and
    # no call replayed)
    def run(use_jit):
        np.random.seed(0)
        model = _Stateful()
        fn = ndl.jit(model.forward) if use_jit else model.forward
        out = []
        for i in range(6):
            if i in resets:
                model.h = None
            out += [fn(_data(i)[0]).numpy().copy(), model.h.numpy().copy()]
        assert not use_jit or fn.replays >= 3
        return out
    _both(run)


def test_rebinding_the_objects_a_step_names_captures_again():
    def run(use_jit):
        scope = {}
        exec("def step(x, y):\n"
             "    opt.reset_grad()\n"
             "    loss = loss_fn(model(x), y)\n"
             "    loss.backward()\n"
             "    opt.step()\n"
             "    return loss\n", scope)
        fn = ndl.jit(scope["step"]) if use_jit else scope["step"]
        out = []
        for seed in (0, 1):  # a second model and optimizer bound to the same names
            scope["model"] = _small_model(seed)
            scope["opt"] = optim.SGD(scope["model"].parameters(), lr=0.1)
            scope["loss_fn"] = nn.SoftmaxLoss()
            out += [fn(*_data(i)).numpy().copy() for i in range(4)]
            out += [p.numpy().copy() for p in scope["model"].parameters()]
        return out
    _both(run)


def test_dropout_probability_changed_between_calls_is_used():
    def run(use_jit):
        model = _small_model()
        drop = nn.Dropout(0.1)

        def f(x):
            return drop(model(x)).sum()
        fn = ndl.jit(f) if use_jit else f
        np.random.seed(5)
        out = []
        for i in range(6):
            if i == 3:
                drop.p = 0.6
            out.append(fn(_data(i)[0]).numpy().copy())
        return out
    _both(run)


def test_bad_labels_and_ids_raise_at_a_replay_as_without_jit():
    # (a replay clamped them: label 7 of 3 classes trained on class 2)
    with ndl.lazy(True):
        model, emb = _small_model(), nn.Embedding(5, 6)
        loss = ndl.jit(lambda x, y: nn.SoftmaxLoss()(model(x), y))
        lookup = ndl.jit(lambda ids: emb(ids).sum())
        x, y = _data(0)
        ids = ndl.Tensor(np.array([[0, 1], [4, 2]], "float32"), requires_grad=False)
        for _ in range(3):
            loss(x, y), lookup(ids)
        assert loss.replays == 1 and lookup.replays == 1
        with pytest.raises(ndl.errors.IndexingError, match="label 7 is out of range for 3 classes"):
            loss(x, ndl.Tensor(np.array([0, 7, 1, 1, 2], "float32"), requires_grad=False))
        with pytest.raises(ndl.errors.IndexingError, match="index 9 is out of bounds for an axis of size 5"):
            lookup(ndl.Tensor(np.array([[0, 9], [1, 1]], "float32"), requires_grad=False))
        assert float(loss(x, y).numpy()) > 0 and loss.replays == 2  # good labels replay again


def test_a_function_that_adds_state_at_every_call_runs_plainly_and_says_so():
    # (each call appends: no capture can be replayed; before, replays skipped the append)
    with ndl.lazy(True):
        model, history = _small_model(), []

        def f(x):
            history.append(model(x).sum())
            return history[-1]
        fn = ndl.jit(f)
        with pytest.warns(UserWarning, match="runs without capture"):
            for i in range(8):
                fn(_data(i)[0])
        assert len(history) == 8 and fn.replays == 0
        assert [float(t.numpy()) for t in history] == [float(model(_data(i)[0]).sum().numpy()) for i in range(8)]


# ---- found by a review of the above ----------------------------------------------------------
def test_a_global_hidden_state_the_step_rebinds_is_followed():
    # (the old state was read as a fixed tensor: replays trained on the first hidden state)
    src = ("hc = None\n"
           "def step(x, y):\n"
           "    global hc\n"
           "    opt.reset_grad()\n"
           "    hc = cell(x, hc)\n"
           "    loss = nn.SoftmaxLoss()(head(hc[0]), y)\n"
           "    loss.backward()\n"
           "    opt.step()\n"
           "    hc = (hc[0].detach(), hc[1].detach())\n"
           "    return loss\n")

    def run(use_jit):
        np.random.seed(0)
        scope = {"nn": nn, "cell": nn.LSTMCell(6, 8), "head": nn.Linear(8, 3)}
        scope["opt"] = optim.SGD(scope["cell"].parameters() + scope["head"].parameters(), lr=0.1)
        exec(src, scope)
        fn = ndl.jit(scope["step"]) if use_jit else scope["step"]
        out = []
        for i in range(8):
            out += [fn(*_data(i)).numpy().copy(), scope["hc"][0].numpy().copy()]
        assert not use_jit or fn.replays >= 5
        return out
    _both(run)


def test_a_swapped_submodule_and_a_frozen_layer_are_what_replays_use():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.drop, self.head = nn.Linear(6, 8), nn.Dropout(0.1), nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.drop(ndl.ops.relu(self.body(x))))

    def run(use_jit):
        np.random.seed(0)
        model = Net()
        opt = optim.SGD(model.parameters(), lr=0.1)
        fn = _training_step(model, opt, use_jit)
        out = []
        for i in range(10):
            if i == 3:
                model.head = nn.Linear(8, 3)  # a new head (and the optimizer trains it)
                opt.params = model.parameters()
            if i == 5:
                model.drop = nn.Dropout(0.9)
            if i == 7:
                for p in model.body.parameters():  # frozen: backward gives it no gradient
                    p.requires_grad = False
            out.append(fn(*_data(i)).numpy().copy())
        return out + [p.numpy().copy() for p in model.parameters()]
    _both(run)


def test_an_input_that_stops_or_starts_requiring_grad_gets_its_own_capture():
    def run(use_jit):
        model = _small_model()

        def f(x):
            loss = model(x).sum()
            loss.backward()
            return loss
        fn = ndl.jit(f) if use_jit else f
        out = []
        for i, flag in enumerate([True, True, True, False, False, True]):
            x = _data(i)[0]
            x.requires_grad = flag
            out.append(fn(x).numpy().copy())
            out.append(np.array(x.grad is not None))
            if x.grad is not None:
                out.append(x.grad.numpy().copy())
        return out
    _both(run)


def test_a_loop_variable_named_like_an_attribute_the_step_uses_does_not_recapture():
    # (`opt.step()` put "step" among the function's names: a global loop variable `step`
    # looked rebound at every call)
    src = ("def train_step(x, y):\n"
           "    opt.reset_grad()\n"
           "    loss = nn.SoftmaxLoss()(model(x), y)\n"
           "    loss.backward()\n"
           "    opt.step()\n"
           "    return loss\n")
    with ndl.lazy(True):
        scope = {"nn": nn, "model": _small_model()}
        scope["opt"] = optim.SGD(scope["model"].parameters(), lr=0.1)
        exec(src, scope)
        fn = ndl.jit(scope["train_step"])
        for step in range(8):
            scope["step"] = step
            fn(*_data(0))
        assert fn.replays == 6


# ---- found by re-running the checks after the fixes above --------------------------------------
def test_tuple_state_reset_to_none_is_made_anew_as_a_tuple():
    # (a replay wrote one Tensor where the call wrote an (h, c) pair, or left it None)
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.h, self.last = nn.LSTM(3, 4), None, None

        def forward(self, x):
            o, h = self.lstm(x, self.h)
            self.h = (h[0].detach(), h[1].detach())
            self.last = (o, h[1])  # written, never read
            return o.sum()

    def run(use_jit):
        np.random.seed(0)
        m = M()
        fn = ndl.jit(m.forward) if use_jit else m.forward
        x = ndl.Tensor(np.ones((2, 1, 3), "float32"), requires_grad=False)
        out = []
        for epoch in range(3):
            m.h = None
            for _ in range(2):
                m.last = None
                out.append(fn(x).numpy().copy())
                assert type(m.h) is tuple and type(m.last) is tuple
                out += [t.numpy().copy() for t in m.h + m.last]
        return out
    _both(run)


def test_a_scheduler_stepped_inside_the_step_steps_at_each_replay():
    def run(use_jit):
        model = _small_model()
        opt = optim.SGD(model.parameters(), lr=0.5)
        sched = StepLR(opt, step_size=1, gamma=0.5)

        def step(x, y):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            opt.step()
            sched.step()  # (after the optimizer's step: a replay keeps the order)
            return loss
        fn = ndl.jit(step) if use_jit else step
        out = [fn(*_data(i)).numpy().copy() for i in range(6)]
        assert not use_jit or fn.replays == 4
        return out + [np.array(opt.lr), np.array(sched.last_epoch)]
    _both(run)


def test_python_state_the_step_rebinds_runs_plainly_with_a_warning():
    src = ("calls = 0\n"
           "def step(x):\n"
           "    global calls\n"
           "    calls += 1\n"
           "    return model(x).sum()\n")
    with ndl.lazy(True):
        scope = {"model": _small_model()}
        exec(src, scope)
        fn = ndl.jit(scope["step"])
        with pytest.warns(UserWarning, match="changes the global calls"):
            for i in range(5):
                fn(_data(i)[0])
        assert scope["calls"] == 5 and fn.replays == 0


def test_a_function_that_never_replays_runs_plainly_with_a_warning():
    # an object argument new at every call (by identity): each call a new capture, none replayed
    class Config:
        def __init__(self, scale):
            self.scale = scale
    with ndl.lazy(True):
        model = _small_model()
        fn = ndl.jit(lambda x, cfg: model(x).sum() * cfg.scale, max_captures=2)
        with pytest.warns(UserWarning, match="none replayed"):
            got = [float(fn(_data(0)[0], Config(0.5 + i)).numpy()) for i in range(8)]
        want = [float((model(_data(0)[0]).sum() * (0.5 + i)).numpy()) for i in range(8)]
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert fn.replays == 0


def test_a_jitted_method_does_not_keep_its_instances_alive():
    import gc
    import weakref

    class Trainer(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = _small_model()
            self.opt = optim.Adam(self.model.parameters(), lr=0.01)

        @ndl.jit
        def train_step(self, x, y):
            self.opt.reset_grad()
            loss = nn.SoftmaxLoss()(self.model(x), y)
            loss.backward()
            self.opt.step()
            return loss

    with ndl.lazy(True):
        refs = []
        for _ in range(3):
            t = Trainer()
            for i in range(3):
                t.train_step(*_data(i))
            refs.append(weakref.ref(t))
            del t
        gc.collect()
        assert all(r() is None for r in refs)


def test_numbers_in_a_dict_the_step_names_are_what_replays_use():
    # (hp["l2"] read inside the step was a constant of the capture)
    hp = {"l2": 0.0}

    def run(use_jit):
        model = _small_model()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y) + hp["l2"] * (model.modules[0].weight ** 2).sum()
            loss.backward()
            opt.step()
            return loss
        fn = ndl.jit(step) if use_jit else step
        out = []
        for i in range(8):
            hp["l2"] = 0.1 * (i // 3)  # three calls each
            out.append(fn(*_data(i)).numpy().copy())
        assert not use_jit or fn.replays >= 3
        return out + [p.numpy().copy() for p in model.parameters()]
    _both(run)


def test_a_step_that_switches_train_and_eval_itself_replays():
    # (each capture kept the mode the call ended in, and the other function had switched it
    # back: no call replayed)
    def run(use_jit):
        np.random.seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.3), nn.Linear(8, 3))
        opt = optim.SGD(model.parameters(), lr=0.1)

        def train(x, y):
            model.train()
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            opt.step()
            return loss

        def evaluate(x):
            model.eval()
            return model(x).sum()
        train_fn, eval_fn = (ndl.jit(train), ndl.jit(evaluate)) if use_jit else (train, evaluate)
        out = []
        np.random.seed(1)
        for i in range(8):
            out += [train_fn(*_data(i)).numpy().copy(), eval_fn(_data(i)[0]).numpy().copy(),
                    np.array(model.training)]
        assert not use_jit or (train_fn.replays >= 5 and eval_fn.replays >= 5)
        return out
    _both(run)


def test_a_layer_swapped_in_a_sequential_is_what_replays_use():
    # (Sequential keeps its layers in a tuple: a new tuple is a new model)
    with ndl.lazy(True):
        np.random.seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        fn = ndl.jit(lambda x: model(x))
        x = _data(0)[0]
        for _ in range(3):
            fn(x)
        model.modules = model.modules[:2] + (nn.Linear(8, 3),)
        np.testing.assert_array_equal(fn(x).numpy(), model(x).numpy())
        fn(x)
        assert fn.replays == 2  # (once before the swap, once after its new capture)


def test_python_numbers_a_step_changes_on_its_objects_run_it_plainly():
    # (a replay runs no Python: `self.seen += 1` stopped counting, silently)
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.seen = nn.Linear(6, 3), 0

        def forward(self, x):
            self.seen += x.shape[0]
            return self.layer(x).sum()

    with ndl.lazy(True):
        model = Counting()
        fn = ndl.jit(model.forward)
        with pytest.warns(UserWarning, match=r"changes self\.seen"):
            for i in range(5):
                fn(_data(i)[0])
        assert model.seen == 25 and fn.replays == 0


def test_the_capture_plans_without_its_call_hook_and_watches_the_step_again_after(monkeypatch):
    # (the capture's profile hook had seen every call of the compiler's passes: planning
    # took 5x as long; the engine's own work now runs without it, and the step's code after
    # a schedule is still watched: a host call there still makes the call run plainly)
    import sys
    import time
    from needle.compiler import schedule
    hooks, plan = [], schedule.plan
    monkeypatch.setattr(schedule, "plan", lambda *a, **k: (hooks.append(sys.getprofile()), plan(*a, **k))[1])
    with ndl.lazy(True):
        model = _small_model()
        x = _data(0)[0]

        def f(x):
            h = model(x).relu()
            ndl.realize(h)  # (a schedule planned in the middle of the call)
            time.perf_counter()
            return h.sum()
        fn = ndl.jit(f)
        with pytest.warns(UserWarning, match=r"calls perf_counter\(\)"):
            for _ in range(3):
                fn(x)
        assert fn.replays == 0 and hooks and all(h is None for h in hooks)
        assert sys.getprofile() is None


def test_what_a_collection_allocation_triggers_inside_the_capture_runs_is_not_the_step_s():
    # (hypothesis, once imported, times every collection from a gc callback it puts first,
    # with perf_counter, as jax's does too: a collection that allocation happened to trigger
    # inside a capture made the step run plainly for good, a browser test's in a full
    # suite; a finalizer reading a clock did the same)
    import gc
    import time
    import warnings

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            time.perf_counter()

    def timing(phase, info):
        time.perf_counter()
    gc.callbacks.insert(0, timing)
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # (a collection at almost every allocation: inside the capture for sure)
    try:
        with ndl.lazy(True):
            model = _small_model()
            x = _data(0)[0]

            def f(x):
                Cycle()
                return model(x).relu().sum()
            fn = ndl.jit(f)
            want = [f(x).numpy() for _ in range(3)]
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for k in range(3):
                    np.testing.assert_array_equal(fn(x).numpy(), want[k])
            assert fn.replays >= 1
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(timing)


def test_what_a_gc_collect_the_step_calls_runs_is_the_step_s():
    # (a finalizer that a collection the step asks for runs at every call prints or logs at
    # every call: 3 log entries in 10 calls when such collections were left out too)
    import gc
    log = []

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            log.append(len(log))
    with ndl.lazy(True):
        model = _small_model()
        x = _data(0)[0]

        def f(x):
            Cycle()
            gc.collect()
            return model(x).relu().sum()
        for _ in range(6):
            f(x)
        plain = len(log)
        log.clear()
        fn = ndl.jit(f)
        with pytest.warns(UserWarning, match="runs without capture"):
            for _ in range(6):
                fn(x)
        assert len(log) == plain == 6


def test_a_cprofile_around_a_jitted_loop_keeps_profiling():
    # (the capture took the profiler's hook and gave it back with sys.setprofile, which
    # refuses cProfile's: TypeError at the first capture)
    import cProfile
    import pstats
    import sys
    with ndl.lazy(True):
        model, opt = make_mlp()
        step = ndl.jit(_training_step(model, opt, use_jit=False))
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            for i in range(4):
                step(*[ndl.Tensor(v, requires_grad=False) for v in next(batches(1))])
                assert sys.getprofile() is profiler
        finally:
            profiler.disable()
        assert step.replays >= 1
        names = {f[2] for f in pstats.Stats(profiler).stats}
        assert "_replay" in names  # (calls after the capture were profiled)


def _jitted_loop_equals_plain(steps=6):
    """(plain losses, jitted losses, the jitted function) of one small training loop."""
    out = []
    for use_jit in (False, True):
        model, opt = make_mlp()
        step = _training_step(model, opt, use_jit)
        losses = [step(*[ndl.Tensor(v, requires_grad=False) for v in b]).numpy() for b in batches(steps)]
        out.append((losses, step))
    (plain, _), (jitted, step) = out
    return plain, jitted, step


def test_a_pure_python_profiler_around_a_jitted_loop_sees_paired_calls():
    # (the capture took the `profile` module's hook and gave it back: it met returns of
    # frames it never saw called, AssertionError 'Bad return'; the capture now passes
    # every event on to such a hook, and the compiler's work runs under it alone)
    import gc
    import profile
    with ndl.lazy(True):
        p = profile.Profile()
        gc.disable()  # (a gc callback of another library, run inside any frame, trips `profile` too)
        try:
            plain, jitted, step = p.runcall(_jitted_loop_equals_plain)
        finally:
            gc.enable()
    assert step.replays >= 1 and sys.getprofile() is None
    for a, b in zip(plain, jitted):
        np.testing.assert_array_equal(a, b)


def test_a_profiler_switched_inside_the_step_makes_it_run_plainly():
    # (the step's own profiler took the hook through which the capture watches the call:
    # a print after prof.disable() was not seen, and replays skipped it)
    import cProfile
    printed = []
    with ndl.lazy(True):
        model, opt = make_mlp()
        inner = _training_step(model, opt, use_jit=False)

        def step(x, y):
            prof = cProfile.Profile()
            prof.enable()
            loss = inner(x, y)
            prof.disable()
            printed.append(1)
            return loss
        fn = ndl.jit(step)
        with pytest.warns(UserWarning, match=r"Profile.enable\(\)"):
            for b in batches(5):
                fn(*[ndl.Tensor(v, requires_grad=False) for v in b])
        assert fn.replays == 0 and len(printed) == 5


def test_a_profiler_hook_needle_cannot_give_back_makes_the_call_plain(monkeypatch):
    # (a C profiler other than cProfile, pyinstrument's: sys.setprofile cannot put its
    # hook back, so the call runs without capture, and later calls capture)
    from needle.engine import capture
    assert capture.can_give_back(None) and capture.can_give_back(lambda *a: None)
    foreign = object()
    assert not capture.can_give_back(foreign)
    with ndl.lazy(True):
        model, opt = make_mlp()
        fn = _training_step(model, opt, use_jit=True)
        data = [[ndl.Tensor(v, requires_grad=False) for v in b] for b in batches(6)]
        fn(*data[0])
        with monkeypatch.context() as m:
            m.setattr(sys, "getprofile", lambda: foreign)
            with pytest.warns(UserWarning, match="cannot give back"):
                fn(*data[1])
        assert fn.replays == 0 and not fn.captures
        for b in data[2:]:
            fn(*b)
        assert fn.replays >= 1
