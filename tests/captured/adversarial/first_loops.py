"""Adversarial training loops for needle.jit.

Every loop is a function `loop(jit: bool)` that builds everything from fixed seeds, runs a
few training steps either plainly (`step = fn`) or jitted (`step = needle.jit(fn)`), and
returns a dict of observables (parameters, optimizer state, returned values, Python
counters, RNG states).  run.py compares the two runs bit for bit.

Written the way users write loops, without looking at needle's capture implementation,
by an independent tester (tests/captured/test_adversarial_loops.py runs them); its first
run found 30 of 221 loops silently different under the first redesign of needle.jit.
"""
import functools
import random
import types

import numpy as np

import needle as ndl
from needle import nn, optim, ops
from needle.optim import lr_scheduler

LOOPS = []


def loop(fn):
    LOOPS.append(fn)
    return fn


# ---------------------------------------------------------------------------------- helpers
def J(fn, jit):
    return ndl.jit(fn) if jit else fn


def T(a, rg=False):
    return ndl.Tensor(a, requires_grad=rg)


def mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def batches(n=8, bs=4, seed=1, fin=6, ncls=3):
    r = np.random.RandomState(seed)
    return [(r.randn(bs, fin).astype(np.float32), r.randint(0, ncls, bs)) for _ in range(n)]


def tensors(n=8, bs=4, seed=1):
    return [(T(x), T(y)) for x, y in batches(n, bs, seed)]


def log_softmax(z, dim=1):
    """(needle.nn.functional is missing, see report) z - logsumexp(z) along axis 1."""
    n, k = z.shape
    return z - ops.logsumexp(z, axes=(1,)).reshape((n, 1)).broadcast_to((n, k))


def onehot(y, k=3):
    """one-hot of a label Tensor without reading it (init.one_hot reads its labels)."""
    n = y.shape[0]
    c = ndl.Tensor(np.arange(k, dtype=np.float32), requires_grad=False)
    return y.reshape((n, 1)).broadcast_to((n, k)).eq(c.reshape((1, k)).broadcast_to((n, k))) * 1.0


def rng_state():
    st = np.random.get_state()
    return {"np_keys": st[1].copy(), "np_pos": st[2], "py": hash(random.getstate())}


def snap(v):
    """Observable value -> comparable plain structure (numpy arrays, numbers, ...)."""
    if isinstance(v, ndl.Tensor):
        return ("Tensor", v.numpy().copy())
    if isinstance(v, np.ndarray):
        return ("ndarray", v.copy())
    if isinstance(v, dict):
        return {k: snap(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(snap(x) for x in v)
    if isinstance(v, (int, float, bool, str, type(None), np.generic)):
        return v
    return ("obj", type(v).__name__)


def opt_state(opt):
    sd = opt.state_dict()
    return snap({"state": sd["state"], "groups": [{k: v for k, v in g.items()} for g in sd["param_groups"]]})


def finish(model=None, opt=None, **extra):
    extra = {('x_' + k if k in ('params', 'buffers', 'lr', 'rng') else k): v for k, v in extra.items()}
    out = {}
    if model is not None:
        out["params"] = [p.numpy().copy() for p in model.parameters()]
        out["buffers"] = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    if opt is not None:
        out["opt"] = opt_state(opt)
        out["lr"] = opt.lr
    out["rng"] = rng_state()
    out.update({k: snap(v) for k, v in extra.items()})
    return out


def setup(seed=0, optcls=optim.SGD, model_fn=mlp, **kw):
    np.random.seed(seed)
    random.seed(seed)
    model = model_fn()
    kw.setdefault("lr", 0.1)
    opt = optcls(model.parameters(), **kw)
    return model, opt, nn.SoftmaxLoss()


def std_fn(model, opt, lf):
    def train_step(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


# =============================================================================== baselines
@loop
def baseline_sgd_momentum(jit):
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def baseline_adam_bn_dropout(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def baseline_rmsprop_layernorm(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.RMSprop(model.parameters(), lr=0.01, momentum=0.5, centered=True)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = [step(x, y).numpy() for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def adamw_if_present(jit):
    """SPEC lists optim.AdamW."""
    model, opt, lf = setup(optcls=optim.AdamW, lr=0.01, weight_decay=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


# ========================================================================== aliased inputs
def _alias_fn(model, opt, lf):
    def fn(a, b, y):
        opt.reset_grad()
        a.data = a.data * 0.5          # user "normalizes" the first input in place
        loss = lf(model(a) + model(b), y)
        loss.backward()
        opt.step()
        return loss
    return fn


@loop
def aliased_then_distinct(jit):
    model, opt, lf = setup()
    step = J(_alias_fn(model, opt, lf), jit)
    outs, xs = [], []
    B = batches(8)
    for i, (x, y) in enumerate(B):
        a = T(x)
        b = a if i < 4 else T(B[i - 1][0])
        xs += [a, b]
        outs.append(step(a, b, T(y)))
    return finish(model, opt, outs=outs, xs=xs)


@loop
def distinct_then_aliased(jit):
    model, opt, lf = setup()
    step = J(_alias_fn(model, opt, lf), jit)
    outs, xs = [], []
    B = batches(8)
    for i, (x, y) in enumerate(B):
        a = T(x)
        b = a if i >= 4 else T(B[i - 1][0])
        xs += [a, b]
        outs.append(step(a, b, T(y)))
    return finish(model, opt, outs=outs, xs=xs)


@loop
def alias_input_with_label(jit):
    """a regression where target is the input itself (autoencoder): step(x, x)."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 6))
    opt = optim.SGD(model.parameters(), lr=0.05)
    mse = nn.MSELoss()

    def fn(x, target):
        opt.reset_grad()
        loss = mse(model(x), target)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, _) in enumerate(batches(8)):
        xt = T(x)
        outs.append(step(xt, xt) if i % 2 == 0 else step(xt, T(x * 0.0 + 1.0)))
    return finish(model, opt, outs=outs)


# ============================================================================ numpy inputs
@loop
def numpy_buffer_refilled(jit):
    model, opt, lf = setup()

    def fn(xb, yb):
        opt.reset_grad()
        loss = lf(model(ndl.Tensor(xb, requires_grad=False)), ndl.Tensor(yb, requires_grad=False))
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    xbuf = np.empty((4, 6), np.float32)
    ybuf = np.empty((4,), np.int64)
    outs = []
    for x, y in batches(8):
        xbuf[:] = x
        ybuf[:] = y
        outs.append(step(xbuf, ybuf))
    return finish(model, opt, outs=outs)


@loop
def numpy_div255_inside(jit):
    model, opt, lf = setup()

    def fn(img_u8, y_np):
        opt.reset_grad()
        x = ndl.Tensor(img_u8 / 255.0, requires_grad=False)
        loss = lf(model(x), ndl.Tensor(y_np, requires_grad=False))
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(3)
    outs = [step(r.randint(0, 256, (4, 6)).astype(np.uint8), r.randint(0, 3, 4)) for _ in range(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_astype_inside(jit):
    model, opt, lf = setup()

    def fn(x64, y):
        opt.reset_grad()
        loss = lf(model(ndl.Tensor(x64.astype(np.float32), requires_grad=False)), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x.astype(np.float64), T(y)) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_slice_inside(jit):
    """the dataset has 8 columns; the step keeps the first 6 and the last one as label."""
    model, opt, lf = setup()

    def fn(rows):
        opt.reset_grad()
        x = ndl.Tensor(rows[:, :6], requires_grad=False)
        y = ndl.Tensor(rows[:, 7], requires_grad=False)
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for x, y in batches(8):
        rows = np.concatenate([x, np.zeros((4, 1), np.float32), y[:, None].astype(np.float32)], 1)
        outs.append(step(rows))
    return finish(model, opt, outs=outs)


@loop
def numpy_label_array_direct(jit):
    """labels passed to the loss as a numpy array (no Tensor)."""
    model, opt, lf = setup()

    def fn(x, y_np):
        opt.reset_grad()
        loss = lf(model(x), y_np)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(T(x), y) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def python_list_labels(jit):
    """labels as a Python list of ints."""
    model, opt, lf = setup()

    def fn(x, labels):
        opt.reset_grad()
        loss = lf(model(x), labels)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(T(x), [int(v) for v in y]) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_onehot_inside_mse(jit):
    model, opt, _ = setup()
    mse = nn.MSELoss()

    def fn(x, y_np):
        opt.reset_grad()
        target = ndl.Tensor(np.eye(3, dtype=np.float32)[y_np], requires_grad=False)
        loss = mse(model(x), target)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(T(x), y) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def init_one_hot_label_smoothing(jit):
    model, opt, _ = setup()

    def fn(x, y):
        opt.reset_grad()
        logits = model(x)
        target = ndl.init.one_hot(3, y) * 0.9 + 0.1 / 3
        logp = log_softmax(logits, dim=1)
        loss = -(logp * target).sum() / x.shape[0]
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def dataset_index_int_arg(jit):
    """step(i) slices a global numpy dataset with the batch index i."""
    global DATA_X, DATA_Y
    r = np.random.RandomState(5)
    DATA_X, DATA_Y = r.randn(32, 6).astype(np.float32), r.randint(0, 3, 32)
    model, opt, lf = setup()

    def fn(i):
        opt.reset_grad()
        x = ndl.Tensor(DATA_X[i * 4:(i + 1) * 4], requires_grad=False)
        y = ndl.Tensor(DATA_Y[i * 4:(i + 1) * 4], requires_grad=False)
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(i) for i in range(8)]
    return finish(model, opt, outs=outs)


@loop
def global_numpy_buffer_no_args(jit):
    """the step reads a global numpy batch buffer that the loop refills (no arguments)."""
    global XB, YB
    XB, YB = np.zeros((4, 6), np.float32), np.zeros(4, np.int64)
    model, opt, lf = setup()

    def fn():
        opt.reset_grad()
        loss = lf(model(ndl.Tensor(XB, requires_grad=False)), ndl.Tensor(YB, requires_grad=False))
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for x, y in batches(8):
        XB[:] = x
        YB[:] = y
        outs.append(step())
    return finish(model, opt, outs=outs)


@loop
def global_class_weights_numpy_changed(jit):
    """class weights in a global numpy array, re-balanced between calls."""
    global CLASS_W
    CLASS_W = np.ones(3, np.float32)
    model, opt, _ = setup()

    def fn(x, y_np):
        opt.reset_grad()
        logp = log_softmax(model(x), dim=1)
        w = np.eye(3, dtype=np.float32)[y_np] * CLASS_W
        loss = -(logp * ndl.Tensor(w, requires_grad=False)).sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(batches(8)):
        CLASS_W[i % 3] += 0.5  # in place
        outs.append(step(T(x), y))
    return finish(model, opt, outs=outs)


@loop
def input_numpy_mutated_inside(jit):
    """the step normalizes its numpy input in place (host side effect on an input)."""
    model, opt, lf = setup()

    def fn(x_np, y):
        x_np -= x_np.mean(axis=0, keepdims=True)
        opt.reset_grad()
        loss = lf(model(ndl.Tensor(x_np, requires_grad=False)), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs, xs = [], []
    for x, y in batches(8):
        xs.append(x)
        outs.append(step(x, T(y)))
    return finish(model, opt, outs=outs, xs=xs)


@loop
def global_numpy_counts_inside(jit):
    """class histogram kept in a global numpy array, updated inside the step."""
    global COUNTS
    COUNTS = np.zeros(3, np.int64)
    model, opt, lf = setup()

    def fn(x, y_np):
        np.add.at(COUNTS, y_np, 1)
        opt.reset_grad()
        loss = lf(model(x), ndl.Tensor(y_np, requires_grad=False))
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(T(x), y) for x, y in batches(8)]
    return finish(model, opt, outs=outs, counts=COUNTS.copy())


@loop
def index_array_arg_gather(jit):
    """a sampled sub-batch: x[idx] with an integer index array argument (same shape)."""
    model, opt, lf = setup()

    def fn(x, y, idx):
        opt.reset_grad()
        loss = lf(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(9)
    outs = [step(T(x), T(y), r.permutation(4)[:3]) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def bool_mask_arg(jit):
    """train only on the valid rows: x[mask] with a numpy bool mask argument."""
    model, opt, lf = setup()

    def fn(x, y, mask):
        opt.reset_grad()
        loss = lf(model(x[mask]), y[mask])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    masks = [np.array(m) for m in ([1, 1, 0, 1], [1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0],
                                   [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 1, 1])]
    outs = [step(T(x), T(y), m.astype(bool)) for (x, y), m in zip(batches(8), masks)]
    return finish(model, opt, outs=outs)


@loop
def tensor_bool_mask_computed_inside(jit):
    """x[x.sum(1) > 0]-style selection computed inside the step."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        keep = y < 2
        loss = lf(model(x[keep]), y[keep])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


# ============================================================================ return values
@loop
def returns_input(jit):
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return x, loss
    step = J(fn, jit)
    ins = tensors(8)
    rets = [step(x, y) for x, y in ins]
    return finish(model, opt, rets=rets, ident=[r[0] is x for r, (x, _) in zip(rets, ins)])


@loop
def data_rebind_input_inside(jit):
    model, opt, lf = setup()

    def fn(x, y):
        x.data = x.data / 2
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    ins = tensors(8)
    outs = [step(x, y) for x, y in ins]
    return finish(model, opt, outs=outs, xs=[x for x, _ in ins])


@loop
def returns_dict(jit):
    model, opt, lf = setup(momentum=0.5)

    def fn(x, y):
        opt.reset_grad()
        logits = model(x)
        loss = lf(logits, y)
        loss.backward()
        opt.step()
        return {"loss": loss.detach(), "logits": logits.detach(), "n": x.shape[0], "tag": "train"}
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def returns_parameter_object(jit):
    """logging returns the live bias parameter; the log is read at the end."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss, model.modules[2].bias
    step = J(fn, jit)
    rets = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, rets=rets, ident=[r[1] is model.modules[2].bias for r in rets])


@loop
def returns_grads_list(jit):
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        opt.step()
        return loss, grads
    step = J(fn, jit)
    rets = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, rets=rets)


@loop
def returns_python_numbers(jit):
    model, opt, lf = setup()
    count = {"n": 0}

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        count["n"] += 1
        return loss, x.shape[0], count["n"]
    step = J(fn, jit)
    rets = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, rets=rets, count=count["n"])


@loop
def store_tensor_on_module_inside(jit):
    """the step caches the last logits on the model for later inspection."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        logits = model(x)
        model.last_logits = logits.detach()
        loss = lf(logits, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs, seen = [], []
    for x, y in tensors(8):
        outs.append(step(x, y))
        seen.append(model.last_logits.numpy().copy())
    return finish(model, opt, outs=outs, seen=seen)


# ======================================================================= attributes / flags
class TempNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()
        self.temperature = 1.0
        self.use_aux = False
        self.aux = nn.Linear(6, 3)

    def forward(self, x):
        out = self.body(x) / self.temperature
        if self.use_aux:
            out = out + self.aux(x)
        return out


@loop
def temperature_annealed(jit):
    model, opt, lf = setup(model_fn=TempNet)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for x, y in tensors(10):
        outs.append(step(x, y))
        model.temperature *= 0.9
    return finish(model, opt, outs=outs)


@loop
def temperature_numpy_scalar(jit):
    model, opt, lf = setup(model_fn=TempNet)
    model.temperature = np.float32(1.0)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for x, y in tensors(8):
        outs.append(step(x, y))
        model.temperature = model.temperature * np.float32(0.7)
    return finish(model, opt, outs=outs)


class ArrTempNet(TempNet):
    def forward(self, x):
        return self.body(x) * float(self.inv_t[0])


@loop
def temperature_numpy_array_inplace(jit):
    def build():
        m = ArrTempNet()
        m.inv_t = np.array([1.0], np.float32)
        return m
    model, opt, lf = setup(model_fn=build)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for x, y in tensors(8):
        outs.append(step(x, y))
        model.inv_t[0] *= 1.5   # in place
    return finish(model, opt, outs=outs)


@loop
def use_aux_flag_flipped(jit):
    model, opt, lf = setup(model_fn=TempNet)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.use_aux = i % 3 == 2
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


class ClassScaled(nn.Module):
    SCALE = 1.0

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, x):
        return self.body(x) * self.SCALE


@loop
def class_attribute_changed(jit):
    ClassScaled.SCALE = 1.0
    model, opt, lf = setup(model_fn=ClassScaled)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        ClassScaled.SCALE = 1.0 + 0.5 * (i + 1)
    ClassScaled.SCALE = 1.0
    return finish(model, opt, outs=outs)


class PropTemp(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()
        self.epoch = 0

    @property
    def temp(self):
        return 2.0 * 0.8 ** self.epoch

    def forward(self, x):
        return self.body(x) / self.temp


@loop
def property_from_epoch(jit):
    model, opt, lf = setup(model_fn=PropTemp)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.epoch = i // 2
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


class ActNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)
        self.act = ops.relu

    def forward(self, x):
        return self.l2(self.act(self.l1(x)))


@loop
def activation_function_attr_swapped(jit):
    model, opt, lf = setup(model_fn=ActNet)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            model.act = ops.tanh
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


ACT = None


@loop
def global_activation_swapped(jit):
    global ACT
    ACT = ops.relu
    model, opt, lf = setup()
    l1, l2 = model.modules[0], model.modules[2]

    def fn(x, y):
        opt.reset_grad()
        loss = lf(l2(ACT(l1(x))), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            ACT = ops.sigmoid
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def dropout_p_changed(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.modules[2].p = [0.5, 0.2, 0.0, 0.2][i % 4]
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def loss_weights_list_mutated(jit):
    """a module keeps a Python list of per-head weights that the loop re-weights in place."""
    class TwoHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Linear(6, 8)
            self.h1, self.h2 = nn.Linear(8, 3), nn.Linear(8, 3)
            self.w = [1.0, 0.0]

    model, opt, lf = setup(model_fn=TwoHead)

    def fn(x, y):
        opt.reset_grad()
        h = ops.relu(model.trunk(x))
        loss = lf(model.h1(h), y) * model.w[0] + lf(model.h2(h), y) * model.w[1]
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        model.w[1] += 0.25
    return finish(model, opt, outs=outs)


# ======================================================================= hyperparameters
CFG = {}


@loop
def hparams_global_dict(jit):
    global CFG
    CFG = {"l2": 0.0, "scale": 1.0}
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x) * CFG["scale"], y)
        if CFG["l2"]:
            loss = loss + sum((p * p).sum() for p in model.parameters()) * CFG["l2"]
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        CFG["scale"] *= 1.1
        if i == 3:
            CFG["l2"] = 1e-2
    return finish(model, opt, outs=outs)


@loop
def hparams_nested_dict_closure(jit):
    cfg = {"loss": {"smooth": 0.0}, "opt": {"clip": 10.0}}
    model, opt, _ = setup()

    def fn(x, y):
        opt.reset_grad()
        logp = log_softmax(model(x), dim=1)
        s = cfg["loss"]["smooth"]
        tgt = onehot(y) * (1 - s) + s / 3
        loss = -(logp * tgt).sum() / 4
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), cfg["opt"]["clip"])
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        cfg["loss"]["smooth"] = 0.05 * (i + 1)
        cfg["opt"]["clip"] = 0.5
    return finish(model, opt, outs=outs)


@loop
def hparams_object(jit):
    hp = types.SimpleNamespace(aux_weight=0.0, margin=1.0)
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        logits = model(x)
        loss = lf(logits, y) + (logits * logits).sum() * hp.aux_weight + hp.margin
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        hp.aux_weight += 0.01
        hp.margin = -hp.margin
    return finish(model, opt, outs=outs)


config = types.ModuleType("config")
config.NOISE = 0.0


@loop
def hparams_module_attribute(jit):
    """a `config` module whose attributes are tweaked between calls."""
    config.NOISE = 0.0
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x + config.NOISE), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        config.NOISE = 0.1 * (i + 1)
    return finish(model, opt, outs=outs)


@loop
def closure_lr_nonlocal_manual_sgd(jit):
    """manual SGD (no optimizer), lr in a closure cell changed through a setter."""
    np.random.seed(0)
    model = mlp()
    lf = nn.SoftmaxLoss()
    lr = 0.1

    def set_lr(v):
        nonlocal lr
        lr = v

    def fn(x, y):
        for p in model.parameters():
            p.grad = None
        loss = lf(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data = p.data - lr * p.grad.data
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        set_lr(0.1 / (i + 2))
    return finish(model, outs=outs, lr=lr)


# ============================================================== optimizer / lr / schedulers
class CourseSGD(optim.Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0):
        super().__init__(params)
        self.lr = lr
        self.momentum = momentum
        self.u = {}
        self.weight_decay = weight_decay

    def step(self):
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.data + self.weight_decay * p.data
            self.u[i] = self.momentum * self.u.get(i, 0.0) + (1 - self.momentum) * g
            p.data = ndl.Tensor(p.data - self.lr * self.u[i], dtype=p.dtype)


class CourseAdam(optim.Optimizer):
    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8):
        super().__init__(params)
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.t = 0
        self.m, self.v = {}, {}

    def step(self):
        self.t += 1
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.data
            self.m[i] = self.beta1 * self.m.get(i, 0.0) + (1 - self.beta1) * g
            self.v[i] = self.beta2 * self.v.get(i, 0.0) + (1 - self.beta2) * g ** 2
            mh = self.m[i] / (1 - self.beta1 ** self.t)
            vh = self.v[i] / (1 - self.beta2 ** self.t)
            p.data = ndl.Tensor(p.data - self.lr * mh / (vh ** 0.5 + self.eps), dtype=p.dtype)


def _course_opt_state(opt):
    return {k: snap(v) for k, v in opt.__dict__.items() if k != "params"}


@loop
def course_sgd_subclass_with_steplr(jit):
    model, opt, lf = setup(optcls=CourseSGD, momentum=0.9)
    sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for x, y in tensors(10):
        outs.append(step(x, y))
        sched.step()
    return finish(model, outs=outs, course_opt=_course_opt_state(opt))


@loop
def course_adam_subclass(jit):
    model, opt, lf = setup(optcls=CourseAdam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, outs=outs, course_opt=_course_opt_state(opt))


@loop
def course_sgd_subclass_scheduler_inside(jit):
    model, opt, lf = setup(optcls=CourseSGD, momentum=0.5)
    sched = lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1 + e))

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, outs=outs, course_opt=_course_opt_state(opt), last=sched.last_epoch)


@loop
def weight_decay_on_mid_run(jit):
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            opt.weight_decay = 0.1
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def momentum_on_mid_run_param_groups(jit):
    model, opt, lf = setup()
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 3:
            opt.param_groups[0]["momentum"] = 0.9
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def lr_changed_between_calls(jit):
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        opt.lr = 0.01 * (0.7 ** i)
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def lr_set_inside_from_epoch_arg(jit):
    """warmup computed inside the step from the epoch number passed in."""
    model, opt, lf = setup(momentum=0.9)

    def fn(x, y, epoch):
        opt.lr = 0.2 * min(1.0, (epoch + 1) / 4)
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def lr_set_inside_param_groups_counter(jit):
    """warmup inside via param_groups, counting steps on the optimizer object."""
    model, opt, lf = setup()
    opt.n_steps = 0

    def fn(x, y):
        opt.n_steps += 1
        opt.param_groups[0]["lr"] = 0.1 * min(1.0, opt.n_steps / 5)
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, n=opt.n_steps)


@loop
def scheduler_inside(jit):
    model, opt, lf = setup(optcls=optim.Adam, lr=0.02)
    sched = lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, last=sched.last_epoch, last_lr=sched.get_last_lr())


@loop
def scheduler_outside_cosine(jit):
    model, opt, lf = setup(momentum=0.9)
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=6)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for x, y in tensors(8):
        outs.append(step(x, y))
        sched.step()
    return finish(model, opt, outs=outs, last=sched.last_epoch)


@loop
def scheduler_inside_epoch_arg(jit):
    """sched.step(epoch) with the epoch passed to the step."""
    model, opt, lf = setup(momentum=0.9)
    sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def fn(x, y, epoch):
        sched.step(epoch)
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs, last=sched.last_epoch)


@loop
def scheduler_inside_conditional(jit):
    """scheduler stepped every other call, by a flag argument."""
    model, opt, lf = setup(momentum=0.9)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)

    def fn(x, y, end_of_epoch):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        if end_of_epoch:
            sched.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i % 2 == 1) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs, last=sched.last_epoch)


@loop
def optimizer_swapped_between_calls(jit):
    """switch from Adam to SGD after 4 steps (global rebinding)."""
    global OPT
    model, OPT, lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y):
        OPT.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        OPT.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            OPT = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        outs.append(step(x, y))
    return finish(model, OPT, outs=outs)


@loop
def optimizer_swapped_inside(jit):
    """the step itself switches to a fresh optimizer when the epoch arg reaches 4."""
    holder = {}
    model, holder["opt"], lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y, epoch):
        if epoch == 4:
            holder["opt"] = optim.SGD(model.parameters(), lr=0.05)
        opt = holder["opt"]
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, holder["opt"], outs=outs)


@loop
def optimizer_as_argument(jit):
    """two optimizers over the same parameters passed alternately as argument."""
    model, opt_a, lf = setup(optcls=optim.Adam, lr=0.01)
    opt_b = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def fn(opt, x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(opt_a if i % 2 == 0 else opt_b, x, y) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt_a, outs=outs, opt_b=opt_state(opt_b))


@loop
def new_optimizer_each_call(jit):
    """a fresh SGD built inside every call (user bug, still must match)."""
    model, _, lf = setup()

    def fn(x, y):
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, outs=outs)


# ============================================================================ grads / clip
@loop
def reset_grad_outside(jit):
    model, opt, lf = setup(momentum=0.9)

    def fn(x, y):
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for x, y in tensors(8):
        opt.reset_grad()
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def forward_only_jit_backward_outside(jit):
    model, opt, lf = setup(momentum=0.9)
    fwd = J(lambda x, y: lf(model(x), y), jit)
    outs = []
    for x, y in tensors(8):
        opt.reset_grad()
        loss = fwd(x, y)
        loss.backward()
        opt.step()
        outs.append(loss)
    return finish(model, opt, outs=outs)


@loop
def grad_accumulation_bool_arg(jit):
    """accumulate into a buffer; step the optimizer every second call (bool argument)."""
    model, opt, lf = setup()
    acc = {}

    def fn(x, y, do_step):
        loss = lf(model(x), y)
        loss.backward()
        for i, p in enumerate(model.parameters()):
            acc[i] = p.grad.data + acc[i] if i in acc else p.grad.data
        if do_step:
            for i, p in enumerate(model.parameters()):
                p.grad = acc[i] * 0.5
            opt.step()
            acc.clear()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i % 2 == 1) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def grad_accumulation_backward_only_calls(jit):
    """torch habit: backward on call 1, backward + step + zero on call 2 (needle overwrites grads)."""
    model, opt, lf = setup()

    def micro(x, y):
        loss = lf(model(x), y) * 0.5
        loss.backward()
        return loss
    m = J(micro, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(m(x, y))
        if i % 2 == 1:
            opt.step()
            opt.reset_grad()
    return finish(model, opt, outs=outs)


@loop
def clip_grad_norm_inside(jit):
    model, opt, lf = setup(momentum=0.9, lr=0.5)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss, norm
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def float_arg_branch_clip(jit):
    """max_norm passed per call; 0 disables clipping (Python `if` on the argument)."""
    model, opt, lf = setup(lr=0.5)

    def fn(x, y, max_norm):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        if max_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        return loss
    step = J(fn, jit)
    norms = [1.0, 1.0, 1.0, 0.0, 0.0, 0.3, 0.0, 1.0]
    outs = [step(x, y, m) for (x, y), m in zip(tensors(8), norms)]
    return finish(model, opt, outs=outs)


@loop
def float_arg_scalar_weight(jit):
    """a mixing weight passed as a float argument (arithmetic only)."""
    model, opt, lf = setup()

    def fn(x, y, alpha):
        opt.reset_grad()
        logits = model(x)
        loss = lf(logits, y) * alpha + (logits * logits).mean() * (1 - alpha)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 1.0 - 0.1 * i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def int_arg_loop_count(jit):
    """number of inner SGD iterations on the same batch passed per call."""
    model, opt, lf = setup()

    def fn(x, y, n_inner):
        for _ in range(n_inner):
            opt.reset_grad()
            loss = lf(model(x), y)
            loss.backward()
            opt.step()
        return loss
    step = J(fn, jit)
    ks = [1, 1, 1, 2, 1, 3, 2, 1]
    outs = [step(x, y, k) for (x, y), k in zip(tensors(8), ks)]
    return finish(model, opt, outs=outs)


@loop
def int_arg_used_as_shape(jit):
    """the step slices the first k rows of the batch, k passed per call."""
    model, opt, lf = setup()

    def fn(x, y, k):
        opt.reset_grad()
        loss = lf(model(x[:k]), y[:k])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    ks = [4, 4, 4, 3, 4, 2, 3, 4]
    outs = [step(x, y, k) for (x, y), k in zip(tensors(8), ks)]
    return finish(model, opt, outs=outs)


@loop
def numpy_scalar_arg(jit):
    model, opt, lf = setup()

    def fn(x, y, scale):
        opt.reset_grad()
        loss = lf(model(x) * float(scale), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, np.float32(1.0 + 0.25 * i)) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def numpy_scalar_arg_in_branch(jit):
    """a numpy bool from a comparison decides whether to step."""
    model, opt, lf = setup()

    def fn(x, y, ok):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        if ok:
            opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, np.float32(i % 3) > 0) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def string_arg_mode(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()

    def fn(x, y, mode):
        if mode == "train":
            model.train()
            opt.reset_grad()
            loss = lf(model(x), y)
            loss.backward()
            opt.step()
        else:
            model.eval()
            loss = lf(model(x), y).detach()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, "eval" if i % 3 == 2 else "train") for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs, training=model.training)


@loop
def optional_none_or_tensor_arg(jit):
    """sample weights are optional."""
    model, opt, _ = setup()

    def fn(x, y, w=None):
        opt.reset_grad()
        logp = log_softmax(model(x), dim=1)
        nll = -(logp * onehot(y)).sum(axes=(1,))
        if w is not None:
            nll = nll * w
        loss = nll.sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        w = T(np.full(4, 0.5 + i, np.float32)) if i % 2 else None
        outs.append(step(x, y, w))
    return finish(model, opt, outs=outs)


@loop
def list_of_numbers_arg_mutated(jit):
    """per-class weights list passed every call and edited in place between calls."""
    model, opt, _ = setup()
    weights = [1.0, 1.0, 1.0]

    def fn(x, y, cw):
        opt.reset_grad()
        logp = log_softmax(model(x), dim=1)
        wt = ndl.Tensor(np.array(cw, np.float32), requires_grad=False)
        loss = -(logp * onehot(y) * wt.reshape((1, 3)).broadcast_to((4, 3))).sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y, weights))
        weights[i % 3] *= 2.0
    return finish(model, opt, outs=outs)


@loop
def list_of_numbers_arg_used_arith(jit):
    """per-class weights list passed every call; used as a Tensor of the list directly."""
    model, opt, _ = setup()
    weights = [1.0, 1.0, 1.0]

    def fn(x, y, cw):
        opt.reset_grad()
        logp = log_softmax(model(x), dim=1)
        loss = -(logp * onehot(y) * cw[0]).sum() / 4 + logp.sum() * cw[1] * 0.01
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y, weights))
        weights[i % 2] *= 2.0
    return finish(model, opt, outs=outs)


# ============================================================================ RNG habits
@loop
def np_random_noise_inside(jit):
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        noise = ndl.Tensor(np.random.randn(*x.shape).astype(np.float32) * 0.1, requires_grad=False)
        loss = lf(model(x + noise), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def mixup_np_beta_inside(jit):
    model, opt, _ = setup()

    def fn(x, y):
        opt.reset_grad()
        lam = float(np.random.beta(0.4, 0.4))
        perm = np.random.permutation(4)
        xm = x * lam + x[perm] * (1 - lam)
        oh = onehot(y)
        ym = oh * lam + oh[perm] * (1 - lam)
        loss = -(log_softmax(model(xm), dim=1) * ym).sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def python_random_flip_inside(jit):
    model, opt, lf = setup()

    def fn(x, y):
        if random.random() < 0.5:
            x = -x
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def python_random_uniform_scale_inside(jit):
    model, opt, lf = setup()

    def fn(x, y):
        s = random.uniform(0.8, 1.2)
        opt.reset_grad()
        loss = lf(model(x * s), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


RNG = None


@loop
def np_generator_object_inside(jit):
    """modern numpy: a Generator object in a global, not the legacy global RNG."""
    global RNG
    RNG = np.random.default_rng(0)
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        noise = ndl.Tensor(RNG.normal(size=x.shape).astype(np.float32) * 0.1, requires_grad=False)
        loss = lf(model(x + noise), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, gen=RNG.bit_generator.state["state"]["state"])


@loop
def randomstate_object_arg(jit):
    """a np.random.RandomState passed as an argument."""
    model, opt, lf = setup()
    rs = np.random.RandomState(7)

    def fn(x, y, rng):
        opt.reset_grad()
        noise = ndl.Tensor(rng.randn(4, 6).astype(np.float32) * 0.1, requires_grad=False)
        loss = lf(model(x + noise), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, rs) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, rs=int(rs.randint(1 << 30)))


@loop
def init_randn_gradient_noise_inside(jit):
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.grad = p.grad + ndl.init.randn(*p.shape, std=0.01)
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def loader_shuffle_between_dropout_inside(jit):
    """np.random.permutation between calls (loader) interleaved with Dropout draws inside."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    r = np.random.RandomState(2)
    X, Y = r.randn(16, 6).astype(np.float32), r.randint(0, 3, 16)
    outs = []
    for epoch in range(3):
        order = np.random.permutation(16)
        for b in range(0, 16, 4):
            idx = order[b:b + 4]
            outs.append(step(T(X[idx]), T(Y[idx])))
    return finish(model, opt, outs=outs)


@loop
def dataloader_tuple_batches(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    lf = nn.SoftmaxLoss()
    r = np.random.RandomState(2)
    ds = ndl.data.NDArrayDataset(r.randn(14, 6).astype(np.float32), r.randint(0, 3, 14).astype(np.float32))
    dl = ndl.data.DataLoader(ds, batch_size=4, shuffle=True)

    def fn(batch):
        x, y = batch
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for epoch in range(2):
        for batch in dl:
            outs.append(step(batch))
    return finish(model, opt, outs=outs)


@loop
def iterator_argument(jit):
    """the step pulls its own batch from an iterator argument."""
    model, opt, lf = setup()

    def fn(it):
        x, y = next(it)
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    it = iter(tensors(10))
    outs = [step(it) for _ in range(8)]
    return finish(model, opt, outs=outs, left=len(list(it)))


# ==================================================================== Python side effects
SEEN = []
STEP_COUNT = 0


@loop
def seen_append_inside(jit):
    global SEEN
    SEEN = []
    model, opt, lf = setup()

    def fn(x, y):
        SEEN.append(x.shape[0])
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, seen=list(SEEN))


@loop
def loss_history_append_detached(jit):
    model, opt, lf = setup()
    history = []

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        history.append(loss.detach())
    step = J(fn, jit)
    for x, y in tensors(8):
        step(x, y)
    return finish(model, opt, history=history)


@loop
def global_counter_inside(jit):
    global STEP_COUNT
    STEP_COUNT = 0
    model, opt, lf = setup()

    def fn(x, y):
        global STEP_COUNT
        STEP_COUNT += 1
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, count=STEP_COUNT)


@loop
def mutable_default_arg_history(jit):
    model, opt, lf = setup()

    def fn(x, y, _hist=[]):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        _hist.append(1)
        return loss, len(_hist)
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt, self.lf = model, opt, nn.SoftmaxLoss()
        self.steps = 0
        self.total = 0.0

    def train_step(self, x, y):
        self.steps += 1
        self.opt.reset_grad()
        loss = self.lf(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss


@loop
def trainer_bound_method_counter(jit):
    model, opt, _ = setup(momentum=0.9)
    tr = Trainer(model, opt)
    step = J(tr.train_step, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, steps=tr.steps)


class JitTrainer:
    def __init__(self, seed):
        np.random.seed(seed)
        self.model = mlp()
        self.opt = optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.lf = nn.SoftmaxLoss()

    def _step(self, x, y):
        self.opt.reset_grad()
        loss = self.lf(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss


class JitTrainerDecorated(JitTrainer):
    pass


@loop
def decorated_method_two_instances(jit):
    """@needle.jit on a method in the class body, two trainer instances alternating."""
    cls = type("T" + str(jit), (JitTrainer,), {"step": ndl.jit(JitTrainer._step) if jit else JitTrainer._step})
    a, b = cls(0), cls(1)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append((a if i % 2 == 0 else b).step(x, y))
    return finish(a.model, a.opt, outs=outs, b=finish(b.model, b.opt))


@loop
def jitted_attribute_method_per_instance(jit):
    """self.step = needle.jit(self._step) in each instance."""
    a, b = JitTrainer(0), JitTrainer(1)
    for t in (a, b):
        t.step = J(t._step, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append((a if i % 2 == 0 else b).step(x, y))
    return finish(a.model, a.opt, outs=outs, b=finish(b.model, b.opt))


def train_step_fn(model, opt, x, y):
    opt.reset_grad()
    loss = nn.SoftmaxLoss()(model(x), y)
    loss.backward()
    opt.step()
    return loss


@loop
def model_as_argument_two_models(jit):
    """one jitted generic train_step(model, opt, x, y) shared by an ensemble of two."""
    np.random.seed(0)
    m1, m2 = mlp(), mlp()
    o1 = optim.SGD(m1.parameters(), lr=0.1, momentum=0.9)
    o2 = optim.SGD(m2.parameters(), lr=0.1, momentum=0.9)
    step = J(train_step_fn, jit)
    outs = []
    for x, y in tensors(6):
        outs.append(step(m1, o1, x, y))
        outs.append(step(m2, o2, x, y))
    return finish(m1, o1, outs=outs, m2=finish(m2, o2))


@loop
def functools_partial_two_models(jit):
    np.random.seed(0)
    m1, m2 = mlp(), mlp()
    o1 = optim.Adam(m1.parameters(), lr=0.01)
    o2 = optim.Adam(m2.parameters(), lr=0.01)
    s1 = J(functools.partial(train_step_fn, m1, o1), jit)
    s2 = J(functools.partial(train_step_fn, m2, o2), jit)
    outs = []
    for x, y in tensors(6):
        outs.append(s1(x, y))
        outs.append(s2(x, y))
    return finish(m1, o1, outs=outs, m2=finish(m2, o2))


@loop
def partial_rebuilt_same_jit(jit):
    """partial objects are jitted once, but the partial's model attribute is a container
    the loop edits: partial(train_step, models_dict)."""
    np.random.seed(0)
    models = {"cur": mlp(), "other": mlp()}
    opts = {k: optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}

    def ts(ms, os_, x, y):
        return train_step_fn(ms["cur"], os_["cur"], x, y)
    step = J(functools.partial(ts, models, opts), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            models["cur"], models["other"] = models["other"], models["cur"]
            opts["cur"], opts["other"] = opts["other"], opts["cur"]
        outs.append(step(x, y))
    return finish(models["cur"], opts["cur"], outs=outs, other=finish(models["other"], opts["other"]))


MODELS = {}


def get_model():
    return MODELS["current"]


@loop
def global_helper_reaches_model(jit):
    """a helper function in module globals returns the current model; swapped mid-run."""
    global MODELS
    np.random.seed(0)
    MODELS = {"current": mlp(), "spare": mlp()}
    params = MODELS["current"].parameters() + MODELS["spare"].parameters()
    opt = optim.SGD(params, lr=0.1)
    lf = nn.SoftmaxLoss()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(get_model()(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            MODELS["current"] = MODELS["spare"]
        outs.append(step(x, y))
    return finish(outs=outs, opt_st=opt_state(opt), p=[p.numpy() for p in params])


class CallableStep:
    def __init__(self, model, opt):
        self.model, self.opt, self.lf = model, opt, nn.SoftmaxLoss()
        self.l1 = 0.0

    def __call__(self, x, y):
        self.opt.reset_grad()
        loss = self.lf(self.model(x), y)
        if self.l1:
            loss = loss + sum(ops.relu(p).sum() + ops.relu(-p).sum() for p in self.model.parameters()) * self.l1
        loss.backward()
        self.opt.step()
        return loss


@loop
def callable_object(jit):
    model, opt, _ = setup()
    cs = CallableStep(model, opt)
    step = J(cs, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 3:
            cs.l1 = 1e-3
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


# ============================================================================ modes / layers
@loop
def eval_between_calls_forgot_train(jit):
    """eval plainly every 3 calls; the user forgets model.train() once."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lf = nn.SoftmaxLoss()
    step = J(std_fn(model, opt, lf), jit)
    outs, evals = [], []
    for i, (x, y) in enumerate(tensors(9)):
        outs.append(step(x, y))
        if i % 3 == 2:
            model.eval()
            evals.append(lf(model(x), y).numpy())
            if i != 5:
                model.train()
    return finish(model, opt, outs=outs, evals=evals)


@loop
def eval_train_inside_step(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    lf = nn.SoftmaxLoss()
    xv, yv = tensors(1, seed=99)[0]

    def fn(x, y):
        model.eval()
        val = lf(model(xv), yv).detach()
        model.train()
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss, val
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def two_jitted_train_eval_alternating(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lf = nn.SoftmaxLoss()

    def train(x, y):
        model.train()
        return std_fn(model, opt, lf)(x, y)

    def evaluate(x, y):
        model.eval()
        logits = model(x)
        return lf(logits, y).detach(), logits.argmax(axis=1)
    tr, ev = J(train, jit), J(evaluate, jit)
    outs = []
    for x, y in tensors(8):
        outs.append(tr(x, y))
        outs.append(ev(x, y))
    return finish(model, opt, outs=outs)


@loop
def freeze_layer_between_calls(jit):
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 3:
            for p in model.modules[0].parameters():
                p.requires_grad = False
        if i == 6:
            for p in model.modules[0].parameters():
                p.requires_grad = True
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


class ListNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.blocks = []
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        h = ops.relu(self.inp(x))
        for b in self.blocks:
            h = h + ops.relu(b(h))
        return self.out(h)


@loop
def blocks_appended_to_list(jit):
    """progressive growing: a block appended to a plain list; optimizer rebuilt."""
    holder = {}
    model, holder["opt"], lf = setup(model_fn=ListNet, momentum=0.0)

    def fn(x, y):
        opt = holder["opt"]
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(9)):
        if i in (3, 6):
            model.blocks.append(nn.Linear(8, 8))
            holder["opt"] = optim.SGD(model.parameters(), lr=0.1)
        outs.append(step(x, y))
    return finish(model, holder["opt"], outs=outs)


@loop
def blocks_appended_opt_not_rebuilt(jit):
    """block appended but the optimizer keeps the old parameter list."""
    model, opt, lf = setup(model_fn=ListNet)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            model.blocks.append(nn.Linear(8, 8))
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def replace_layer_between_calls(jit):
    """re-initialize the head: a fresh Linear of the same shape put into the Sequential."""
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            mods = list(model.modules)
            mods[2] = nn.Linear(8, 3)
            model.modules = tuple(mods)
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


class TwoSame(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(ops.relu(self.b(ops.relu(self.a(ops.relu(self.inp(x)))))))


@loop
def swap_same_shape_layers(jit):
    model, opt, lf = setup(model_fn=TwoSame)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            model.a, model.b = model.b, model.a
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def replace_parameter_object(jit):
    """re-init one weight by assigning a new Parameter (optimizer keeps the old one)."""
    model, opt, lf = setup()
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            lin = model.modules[2]
            lin.weight = nn.Parameter(lin.weight.numpy() * 0.5)
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def weight_data_scaled_between_calls(jit):
    """weight.data rebinding between calls (e.g. max-norm constraint applied outside)."""
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        w = model.modules[0].weight
        w.data = w.data * 0.9
    return finish(model, opt, outs=outs)


@loop
def weight_inplace_flat_between_calls(jit):
    """course-style in-place edit of a parameter's storage between calls."""
    model, opt, lf = setup()
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        model.modules[0].weight.realize_cached_data().flat[i] = 0.0
    return finish(model, opt, outs=outs)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 4)
        self.dec_bias = nn.Parameter(np.zeros((1, 6), np.float32))

    def forward(self, x):
        h = ops.relu(self.enc(x))
        return h @ self.enc.weight.transpose() + self.dec_bias.broadcast_to((x.shape[0], 6))


@loop
def weight_tying_autoencoder(jit):
    np.random.seed(0)
    model = Tied()
    opt = optim.Adam(model.parameters(), lr=0.01)
    mse = nn.MSELoss()

    def fn(x):
        opt.reset_grad()
        loss = mse(model(x), x)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x) for x, _ in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def shared_linear_twice(jit):
    """one Linear applied twice (weight sharing in depth)."""
    np.random.seed(0)
    inp, mid, out = nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 3)
    model = nn.Sequential(inp, nn.ReLU(), mid, nn.ReLU(), mid, nn.ReLU(), out)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def load_state_dict_rollback(jit):
    """checkpoint at step 2, roll the model and optimizer back at step 5."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    ck = None
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        if i == 2:
            ck = (model.state_dict(), opt.state_dict())
        if i == 5:
            model.load_state_dict(ck[0])
            opt.load_state_dict(ck[1])
    return finish(model, opt, outs=outs)


@loop
def save_load_roundtrip_between_calls(jit):
    import os
    import tempfile
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    path = os.path.join(tempfile.mkdtemp(), "ck.pkl")
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        if i == 3:
            ndl.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
            for p in model.parameters():
                p.data = p.data * 0.0
            ck = ndl.load(path)
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])
    return finish(model, opt, outs=outs)


@loop
def bn_momentum_changed(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.modules[1].momentum = 0.1 if i < 4 else 0.5
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def batch_size_changes_last_batch(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    r = np.random.RandomState(4)
    X, Y = r.randn(14, 6).astype(np.float32), r.randint(0, 3, 14)
    outs = []
    for epoch in range(3):
        for b in range(0, 14, 4):
            outs.append(step(T(X[b:b + 4]), T(Y[b:b + 4])))
    return finish(model, opt, outs=outs)


@loop
def input_requires_grad_fgsm(jit):
    """adversarial training: gradient w.r.t. the input inside the step."""
    model, opt, lf = setup()

    def fn(x, y):
        x.requires_grad = True
        loss = lf(model(x), y)
        loss.backward()
        x_adv = (x + x.grad * 0.1).detach()
        opt.reset_grad()
        loss2 = lf(model(x_adv), y)
        loss2.backward()
        opt.step()
        return loss2, x_adv
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def gan_two_optimizers(jit):
    np.random.seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
    D = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
    og = optim.Adam(G.parameters(), lr=0.01)
    od = optim.Adam(D.parameters(), lr=0.01)

    def fn(real, z):
        fake = G(z)
        od.reset_grad()
        d_loss = -(ops.log(D(real) + 1e-6).sum() + ops.log(1 - D(fake.detach()) + 1e-6).sum()) / 4
        d_loss.backward()
        od.step()
        og.reset_grad()
        g_loss = -ops.log(D(fake) + 1e-6).sum() / 4
        g_loss.backward()
        og.step()
        return d_loss, g_loss
    step = J(fn, jit)
    r = np.random.RandomState(3)
    outs = [step(T(r.randn(4, 6).astype(np.float32)), T(r.randn(4, 4).astype(np.float32))) for _ in range(8)]
    return finish(G, og, outs=outs, D=finish(D, od))


@loop
def ema_teacher_decay_changed(jit):
    """mean-teacher: EMA update of a teacher model inside the step, decay from a global dict."""
    global CFG
    CFG = {"ema": 0.9}
    np.random.seed(0)
    student, teacher = mlp(), mlp()
    opt = optim.SGD(student.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(student(x), y)
        loss.backward()
        opt.step()
        with ndl.no_grad():
            for tp, sp in zip(teacher.parameters(), student.parameters()):
                tp.data = tp.data * CFG["ema"] + sp.data * (1 - CFG["ema"])
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        CFG["ema"] = min(0.99, CFG["ema"] + 0.02)
    return finish(student, opt, outs=outs, teacher=[p.numpy() for p in teacher.parameters()])


# ============================================================================ recurrent
class CharRNN(nn.Module):
    def __init__(self, lstm=False):
        super().__init__()
        self.rnn = nn.LSTM(6, 8) if lstm else nn.RNN(6, 8)
        self.head = nn.Linear(8, 3)
        self.h = None

    def forward(self, x):
        out, h = self.rnn(x, self.h)
        self.h = tuple(t.detach() for t in h) if isinstance(h, tuple) else h.detach()
        seq, bs, hid = out.shape
        return self.head(out.reshape((seq * bs, hid)))


def _seq_batches(n=8, seed=6):
    r = np.random.RandomState(seed)
    return [(T(r.randn(3, 2, 6).astype(np.float32)), T(r.randint(0, 3, 6))) for _ in range(n)]


@loop
def rnn_hidden_reset_none_between_epochs(jit):
    model, opt, lf = setup(model_fn=CharRNN, lr=0.05)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(_seq_batches(9)):
        if i % 3 == 0:
            model.h = None
        outs.append(step(x, y))
    return finish(model, opt, outs=outs, h=model.h)


@loop
def lstm_hidden_tuple_carried(jit):
    model, opt, lf = setup(model_fn=lambda: CharRNN(lstm=True), optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(_seq_batches(8)):
        if i == 5:
            model.h = None
        outs.append(step(x, y))
    return finish(model, opt, outs=outs, h=model.h)


@loop
def rnn_hidden_passed_and_returned(jit):
    """truncated BPTT: h returned and passed back as an argument."""
    np.random.seed(0)
    rnn, head = nn.RNN(6, 8), nn.Linear(8, 3)
    params = rnn.parameters() + head.parameters()
    opt = optim.SGD(params, lr=0.05)
    lf = nn.SoftmaxLoss()

    def fn(x, y, h):
        opt.reset_grad()
        out, h = rnn(x, h)
        loss = lf(head(out.reshape((6, 8))), y)
        loss.backward()
        opt.step()
        return loss, h.detach()
    step = J(fn, jit)
    h, outs = None, []
    for i, (x, y) in enumerate(_seq_batches(8)):
        if i == 4:
            h = None
        loss, h = step(x, y, h)
        outs.append(loss)
    return finish(outs=outs, h=h, p=[p.numpy() for p in params], opt_st=opt_state(opt))


# ============================================================================ argument forms
@loop
def dict_of_tensors_arg(jit):
    model, opt, lf = setup()

    def fn(batch):
        opt.reset_grad()
        loss = lf(model(batch["x"]), batch["y"])
        loss.backward()
        opt.step()
        return {"loss": loss}
    step = J(fn, jit)
    outs = [step({"x": x, "y": y}) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def dict_arg_key_order_changes(jit):
    """the batch dict is built in a different key order on some calls."""
    model, opt, lf = setup()

    def fn(batch):
        opt.reset_grad()
        a, b = list(batch.values())
        x, y = (a, b) if len(a.shape) == 2 else (b, a)
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step({"x": x, "y": y} if i % 2 == 0 else {"y": y, "x": x}) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def kwargs_order_swapped(jit):
    model, opt, lf = setup()

    def fn(x, y, scale=1.0):
        opt.reset_grad()
        loss = lf(model(x) * scale, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i % 2 == 0:
            outs.append(step(x=x, y=y, scale=1.0 + i))
        else:
            outs.append(step(scale=2.0, y=y, x=x))
    return finish(model, opt, outs=outs)


@loop
def kwargs_vs_positional_mixed(jit):
    model, opt, lf = setup()

    def fn(x, y, scale=1.0):
        opt.reset_grad()
        loss = lf(model(x) * scale, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append([step(x, y), step(x, y, 0.5), step(x, y=y, scale=2.0)][i % 3])
    return finish(model, opt, outs=outs)


@loop
def list_of_tensors_varying_length(jit):
    """a list of micro-batches whose length varies."""
    model, opt, lf = setup()

    def fn(xs, ys):
        opt.reset_grad()
        loss = sum(lf(model(x), y) for x, y in zip(xs, ys)) / len(xs)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    data = tensors(12)
    lens = [2, 2, 2, 1, 3, 2]
    outs, k = [], 0
    for n in lens:
        chunk = data[k:k + n]
        k += n
        outs.append(step([c[0] for c in chunk], [c[1] for c in chunk]))
    return finish(model, opt, outs=outs)


@loop
def tensor_arg_dtype_float64_numpy(jit):
    """inputs built from float64 arrays sometimes, float32 other times."""
    model, opt, lf = setup()
    step = J(std_fn(model, opt, lf), jit)
    outs = [step(T(x.astype(np.float64) if i % 2 else x), T(y)) for i, (x, y) in enumerate(batches(8))]
    return finish(model, opt, outs=outs)


@loop
def same_input_object_refilled_data(jit):
    """one input Tensor object reused; its .data rebound between calls."""
    model, opt, lf = setup()
    step = J(std_fn(model, opt, lf), jit)
    xt, yt = T(np.zeros((4, 6), np.float32)), T(np.zeros(4, np.int64))
    outs = []
    for x, y in batches(8):
        xt.data = T(x)
        yt.data = T(y)
        outs.append(step(xt, yt))
    return finish(model, opt, outs=outs)


@loop
def pending_lazy_input(jit):
    """inputs computed lazily outside (normalized) and not realized before the call."""
    model, opt, lf = setup()
    step = J(std_fn(model, opt, lf), jit)
    mean = T(np.full((4, 6), 0.3, np.float32))
    outs = [step((T(x) - mean) * 2.0, T(y)) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


# ============================================================================ reads (JitError)
def _read_loop(reader):
    def run(jit):
        model, opt, lf = setup()
        logged = []

        def fn(x, y):
            opt.reset_grad()
            loss = lf(model(x), y)
            loss.backward()
            opt.step()
            logged.append(reader(loss))
            return loss
        step = J(fn, jit)
        outs = [step(x, y) for x, y in tensors(6)]
        return finish(model, opt, outs=outs, logged=[np.asarray(v, dtype=np.float64) for v in logged])
    return run


for _name, _reader in [
    ("read_numpy_inside", lambda t: t.numpy().copy()),
    ("read_float_inside", lambda t: float(t)),
    ("read_item_inside", lambda t: t.item()),
    ("read_cached_data_inside", lambda t: np.asarray(t.cached_data.numpy()).copy()),
    ("read_realize_cached_data_inside", lambda t: np.asarray(t.realize_cached_data().numpy()).copy()),
    ("read_np_asarray_inside", lambda t: np.array(t, dtype=np.float64)),
    ("read_tolist_inside", lambda t: t.tolist()),
    ("read_str_format_inside", lambda t: len(f"loss={t}")),
    ("read_if_tensor_inside", lambda t: 1.0 if (t > 1.0) else 0.0),
]:
    _f = _read_loop(_reader)
    _f.__name__ = _name
    LOOPS.append(_f)


@loop
def read_grad_norm_after_step_for_logging(jit):
    """early stopping: if loss is nan, skip the update (reads inside)."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        if not np.isnan(loss.numpy()):
            opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(6)]
    return finish(model, opt, outs=outs)


# =========================================================================== round 2
# (loops written after the first run, probing around what it found)

@loop
def dict_of_tensors_cleared_inside(jit):
    """a per-step cache of tensors, filled and cleared inside the step."""
    model, opt, lf = setup()
    cache = {}

    def fn(x, y):
        opt.reset_grad()
        h = model.modules[0](x)
        cache["h"] = h.detach()
        loss = lf(model.modules[2](ops.relu(h)), y)
        loss.backward()
        opt.step()
        cache.clear()
        return loss
    step = J(fn, jit)
    outs, sizes = [], []
    for x, y in tensors(8):
        cache["stale"] = x
        outs.append(step(x, y))
        sizes.append(sorted(cache.keys()))
    return finish(model, opt, outs=outs, sizes=sizes)


@loop
def numpy_fancy_index_input_inside(jit):
    """the step shuffles its numpy batch with a fixed permutation (fancy indexing)."""
    model, opt, lf = setup()
    perm = np.array([3, 2, 1, 0])

    def fn(x_np, y_np):
        opt.reset_grad()
        loss = lf(model(ndl.Tensor(x_np[perm], requires_grad=False)), ndl.Tensor(y_np[perm], requires_grad=False))
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_concatenate_inputs_inside(jit):
    """two numpy half-batches joined inside the step."""
    model, opt, lf = setup()

    def fn(xa, xb, y):
        opt.reset_grad()
        x = ndl.Tensor(np.concatenate([xa, xb], axis=0), requires_grad=False)
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x[:2], x[2:], T(y)) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_reshape_transpose_inside(jit):
    """inputs arrive feature-major (6, 4); the step transposes them."""
    model, opt, lf = setup()

    def fn(x_t, y):
        opt.reset_grad()
        loss = lf(model(ndl.Tensor(x_t.T.copy(), requires_grad=False)), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(np.ascontiguousarray(x.T), T(y)) for x, y in batches(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_weights_times_tensor(jit):
    """per-sample weights as a numpy array multiplied into a Tensor."""
    model, opt, _ = setup()

    def fn(x, y, w_np):
        opt.reset_grad()
        nll = -(log_softmax(model(x)) * onehot(y)).sum(axes=(1,))
        loss = (nll * ndl.Tensor(w_np, requires_grad=False)).sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(8)
    outs = [step(x, y, r.rand(4).astype(np.float32)) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def numpy_weights_direct_operand(jit):
    """numpy array used directly as an operand of a Tensor op (no explicit Tensor())."""
    model, opt, lf = setup()

    def fn(x, y, shift_np):
        opt.reset_grad()
        loss = lf(model(x + shift_np), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(8)
    outs = [step(x, y, r.randn(4, 6).astype(np.float32)) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def python_list_index_arg(jit):
    """sub-batch chosen with a Python list of row indices."""
    model, opt, lf = setup()

    def fn(x, y, rows):
        opt.reset_grad()
        loss = lf(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(9)
    outs = [step(x, y, [int(v) for v in r.permutation(4)[:3]]) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def tensor_index_arg(jit):
    """sub-batch chosen with an integer Tensor of row indices."""
    model, opt, lf = setup()

    def fn(x, y, rows):
        opt.reset_grad()
        loss = lf(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(9)
    # (an integer Tensor: Tensor() of integers is float32 unless asked, and a float index raises)
    outs = [step(x, y, ndl.Tensor(r.permutation(4)[:3], dtype="int64", requires_grad=False)) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def int_arg_as_row_index(jit):
    """online learning: one sample per step, picked by an int argument."""
    model, opt, lf = setup()
    X, Y = tensors(1, bs=8)[0]

    def fn(i):
        opt.reset_grad()
        loss = lf(model(X[i:i + 1]), Y[i:i + 1])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(i) for i in [0, 1, 2, 3, 5, 7, 6, 4]]
    return finish(model, opt, outs=outs)


@loop
def int_arg_as_list_index(jit):
    """curriculum: a weight list indexed by the epoch passed in."""
    model, opt, lf = setup()
    sched = [0.2, 0.5, 1.0, 2.0]

    def fn(x, y, epoch):
        opt.reset_grad()
        loss = lf(model(x) * sched[epoch % 4], y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def float_arg_math_functions(jit):
    """Python math on a float argument: exp decay, max, round."""
    import math
    model, opt, lf = setup()

    def fn(x, y, t):
        opt.reset_grad()
        w = max(0.1, math.exp(-t)) + round(t, 1) * 0.01
        loss = lf(model(x) * w, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 0.3 * i + 0.05) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def float_arg_numpy_math(jit):
    """numpy math on a float argument."""
    model, opt, lf = setup()

    def fn(x, y, t):
        opt.reset_grad()
        w = float(np.cos(t) ** 2 + 0.5)
        loss = lf(model(x) * w, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 0.4 * i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def float_arg_int_conversion(jit):
    """number of warmup-frozen layers computed with int() from a float progress value."""
    model, opt, lf = setup()

    def fn(x, y, progress):
        opt.reset_grad()
        k = int(progress * 3)
        out = model(x)
        loss = lf(out, y) * (1.0 + k)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i / 8) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def float_arg_in_tensor_constructor(jit):
    """a float argument turned into a Tensor inside."""
    model, opt, lf = setup()

    def fn(x, y, margin):
        opt.reset_grad()
        m = ndl.Tensor([margin], requires_grad=False)
        loss = lf(model(x), y) + (m * m).sum()
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 0.1 * i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def float_arg_init_constant(jit):
    """init.constant / init.ones * value with a float argument."""
    model, opt, lf = setup()

    def fn(x, y, bias):
        opt.reset_grad()
        b = ndl.init.constant(4, 3, c=bias)
        loss = lf(model(x) + b, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 0.5 * i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def float_arg_as_power_exponent(jit):
    """focal-style loss with a gamma argument used as a power."""
    model, opt, _ = setup()

    def fn(x, y, gamma):
        opt.reset_grad()
        logp = log_softmax(model(x))
        p = ops.exp(logp)
        loss = -(((1 - p) ** gamma) * logp * onehot(y)).sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, [2.0, 2.0, 2.0, 1.0, 0.5, 2.0, 3.0, 1.0][i]) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


class SlotsCfg:
    __slots__ = ("scale", "l2")

    def __init__(self):
        self.scale, self.l2 = 1.0, 0.0


@loop
def hparams_slots_object(jit):
    cfg = SlotsCfg()
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x) * cfg.scale, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        cfg.scale += 0.5
    return finish(model, opt, outs=outs)


class Cfg:
    SCALE = 1.0


@loop
def hparams_global_class_attr(jit):
    """hyperparameters as attributes of a global class (no instance)."""
    Cfg.SCALE = 1.0
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x) * Cfg.SCALE, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        Cfg.SCALE *= 1.5
    Cfg.SCALE = 1.0
    return finish(model, opt, outs=outs)


@loop
def hparams_function_attribute(jit):
    """a value stored as an attribute of the step function itself."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x) * fn.scale, y)
        loss.backward()
        opt.step()
        return loss
    fn.scale = 1.0
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        fn.scale += 0.5
    return finish(model, opt, outs=outs)


@loop
def hparams_kwonly_default_object(jit):
    """config object bound as a keyword-only default argument."""
    hp = types.SimpleNamespace(scale=1.0)
    model, opt, lf = setup()

    def fn(x, y, *, cfg=hp):
        opt.reset_grad()
        loss = lf(model(x) * cfg.scale, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        hp.scale += 0.5
    return finish(model, opt, outs=outs)


@loop
def hparams_os_environ(jit):
    import os
    os.environ["ADV_SCALE"] = "1.0"
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x) * float(os.environ.get("ADV_SCALE", "1")), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        os.environ["ADV_SCALE"] = str(1.0 + 0.5 * (i + 1))
    return finish(model, opt, outs=outs)


@loop
def hparams_set_membership(jit):
    """feature flags in a global set."""
    global FLAGS
    FLAGS = set()
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        out = model(x)
        if "double" in FLAGS:
            out = out * 2.0
        loss = lf(out, y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            FLAGS.add("double")
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def hparams_partial_keywords_helper(jit):
    """a global functools.partial helper whose keywords are edited."""
    global SCALER
    SCALER = functools.partial(lambda z, s: z * s, s=1.0)
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(SCALER(model(x)), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        if i == 3:
            SCALER = functools.partial(SCALER.func, s=3.0)
    return finish(model, opt, outs=outs)


class Counted(nn.Module):
    calls = 0

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, x):
        Counted.calls += 1
        return self.body(x)


@loop
def class_counter_mutated_inside(jit):
    """forward counts calls on a class attribute."""
    Counted.calls = 0
    model, opt, lf = setup(model_fn=Counted)
    step = J(std_fn(model, opt, lf), jit)
    outs = [step(x, y) for x, y in tensors(8)]
    n = Counted.calls
    return finish(model, opt, outs=outs, calls=n)


@loop
def module_attr_counter_mutated_inside(jit):
    config.STEP = 0
    model, opt, lf = setup()

    def fn(x, y):
        config.STEP += 1
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, steps=config.STEP)


@loop
def slots_counter_mutated_inside(jit):
    cfg = SlotsCfg()

    model, opt, lf = setup()

    def fn(x, y):
        cfg.l2 += 1
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, n=cfg.l2)


@loop
def deque_append_inside(jit):
    import collections
    model, opt, lf = setup()
    recent = collections.deque(maxlen=3)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        recent.append(loss.detach())
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, recent=list(recent))


@loop
def set_add_inside(jit):
    model, opt, lf = setup()
    shapes = set()

    def fn(x, y):
        shapes.add(x.shape[0] * 100 + len(shapes))
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, shapes=sorted(shapes))


@loop
def numpy_setitem_global_log_inside(jit):
    """a preallocated numpy log written with the step index argument."""
    global LOG
    LOG = np.zeros(8, np.float32)
    model, opt, lf = setup()

    def fn(x, y, i):
        LOG[i] = 1.0
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs, log=LOG.copy())


@loop
def file_log_inside(jit):
    """append a line to a log file every step."""
    import os
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "log.txt")
    model, opt, lf = setup()

    def fn(x, y):
        with open(path, "a") as f:
            f.write("step\n")
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, lines=open(path).read().count("\n"))


@loop
def logging_inside(jit):
    import logging
    records = []

    class H(logging.Handler):
        def emit(self, rec):
            records.append(rec.getMessage())
    log = logging.getLogger("adv_train_%d" % jit)
    log.handlers[:] = [H()]
    log.setLevel(logging.INFO)
    log.propagate = False
    model, opt, lf = setup()

    def fn(x, y):
        log.info("step")
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs, records=len(records))


@loop
def list_arg_mutated_inside(jit):
    """the step normalizes the batch stored in the list argument in place."""
    model, opt, lf = setup()

    def fn(batch):
        batch[0] = batch[0] * 0.5
        opt.reset_grad()
        loss = lf(model(batch[0]), batch[1])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    bs = [[x, y] for x, y in tensors(8)]
    outs = [step(b) for b in bs]
    return finish(model, opt, outs=outs, batches=bs)


@loop
def dict_arg_mutated_inside(jit):
    """the step writes the logits into the batch dict for the caller."""
    model, opt, lf = setup()

    def fn(batch):
        opt.reset_grad()
        logits = model(batch["x"])
        batch["logits"] = logits.detach()
        loss = lf(logits, batch["y"])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    bs = [{"x": x, "y": y} for x, y in tensors(8)]
    outs = [step(b) for b in bs]
    return finish(model, opt, outs=outs, batches=bs)


@loop
def varargs_kwargs_collect(jit):
    model, opt, lf = setup()

    def fn(*batch, **opts):
        x, y = batch
        opt.reset_grad()
        loss = lf(model(x) * opts.get("scale", 1.0), y)
        if opts.get("l2"):
            loss = loss + sum((p * p).sum() for p in model.parameters()) * opts["l2"]
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        kw = [{}, {"scale": 2.0}, {"l2": 0.01}, {"scale": 0.5, "l2": 0.02}][i % 4]
        outs.append(step(x, y, **kw))
    return finish(model, opt, outs=outs)


@loop
def input_requires_grad_toggled(jit):
    """inputs sometimes require grad (saliency logging), sometimes not."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss, (x.grad if x.requires_grad else None)
    step = J(fn, jit)
    outs = [step(T(x, rg=(i % 3 == 1)), T(y)) for i, (x, y) in enumerate(batches(8))]
    return finish(model, opt, outs=outs)


@loop
def params_passed_as_argument(jit):
    """L2 penalty over a list of tensors passed in: the model's own parameters."""
    model, opt, lf = setup()

    def fn(x, y, reg_params):
        opt.reset_grad()
        loss = lf(model(x), y) + sum((p * p).sum() for p in reg_params) * 0.01
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, model.parameters()) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def anchor_snapshot_argument(jit):
    """L2-SP: penalty towards a snapshot of the weights passed each call; snapshot updated every 3."""
    model, opt, lf = setup()

    def fn(x, y, anchor):
        opt.reset_grad()
        loss = lf(model(x), y) + sum(((p - a) * (p - a)).sum() for p, a in zip(model.parameters(), anchor)) * 0.1
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    anchor = [p.detach() for p in model.parameters()]
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y, anchor))
        if i % 3 == 2:
            anchor = [p.detach() for p in model.parameters()]
    return finish(model, opt, outs=outs, anchor=anchor)


@loop
def detached_snapshots_between_calls(jit):
    """update-to-weight ratio: detach params before the step, compare after."""
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs, before_all = [], []
    for x, y in tensors(8):
        before = [p.detach() for p in model.parameters()]
        data_views = [p.data for p in model.parameters()]
        outs.append(step(x, y))
        before_all.append((before, data_views))
    return finish(model, opt, outs=outs, before=before_all)


@loop
def state_dict_snapshots_each_call(jit):
    """keep a checkpoint after every call (model and optimizer)."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs, cks = [], []
    for x, y in tensors(8):
        outs.append(step(x, y))
        cks.append((model.state_dict(), opt.state_dict()))
    return finish(model, opt, outs=outs, cks=cks)


@loop
def returns_bn_running_mean(jit):
    """logging returns the BatchNorm running mean object."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss, model.modules[1].running_mean
    step = J(fn, jit)
    rets = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, rets=rets, ident=[r[1] is model.modules[1].running_mean for r in rets])


@loop
def returns_optimizer_state_tensor(jit):
    """returns Adam's first moment of the first weight, to plot later."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss, opt.m[0]
    step = J(fn, jit)
    rets = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, rets=rets, ident=[r[1] is opt.m[0] for r in rets])


@loop
def hidden_state_refs_kept_outside(jit):
    """the loop keeps references to the carried hidden state after each call."""
    model, opt, lf = setup(model_fn=CharRNN, lr=0.05)
    step = J(std_fn(model, opt, lf), jit)
    outs, hs = [], []
    for x, y in _seq_batches(8):
        outs.append(step(x, y))
        hs.append(model.h)
    return finish(model, opt, outs=outs, hs=hs, ident=[h is model.h for h in hs])


@loop
def returns_same_tensor_twice(jit):
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        d = loss.detach()
        return d, d, x, x
    step = J(fn, jit)
    rets = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, rets=rets, ident=[(r[0] is r[1], r[2] is r[3]) for r in rets])


@loop
def jit_optimizer_step_only(jit):
    """only opt.step is jitted; forward/backward run outside."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    ostep = J(opt.step, jit)
    outs = []
    for x, y in tensors(8):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        ostep()
        outs.append(loss.detach())
    return finish(model, opt, outs=outs)


@loop
def jit_step_and_reset_closure(jit):
    """jitted lambda that steps the optimizer and clips, grads from an outside backward."""
    model, opt, lf = setup(momentum=0.9)

    def update():
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.reset_grad()
    up = J(update, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        out = model(x)
        if i % 3 == 2:  # sometimes only the last layer gets a gradient
            out = model.modules[2](ops.relu(model.modules[0](x)).detach())
        loss = lf(out, y)
        loss.backward()
        up()
        outs.append(loss.detach())
    return finish(model, opt, outs=outs)


@loop
def grads_from_outside_then_jitted_update_backward_twice(jit):
    """outside: two backward passes (aux loss overwrites grads); jitted: the update."""
    model, opt, lf = setup()

    def update():
        opt.step()
    up = J(update, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        if i % 2:
            (loss * 2.0).backward()
        up()
        outs.append(loss.detach())
    return finish(model, opt, outs=outs)


@loop
def nested_jit_call(jit):
    """a jitted train step that calls a jitted forward."""
    model, opt, lf = setup()
    fwd = J(lambda x: model(x), jit)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(fwd(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def exception_mid_run_bad_labels(jit):
    """one batch has an out-of-range label; the loop catches the error and goes on."""
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs, errors, grads_none = [], [], []
    for i, (x, y) in enumerate(batches(8)):
        if i == 5:
            y = y.copy()
            y[0] = 7
        try:
            outs.append(step(T(x), T(y)))
        except Exception as e:  # noqa: BLE001
            errors.append(type(e).__name__)
        grads_none.append([p.grad is None for p in model.parameters()])
    return finish(model, opt, outs=outs, errors=errors, grads_none=grads_none)


@loop
def exception_mid_run_bad_shape(jit):
    """one batch has the wrong feature count; caught, training goes on."""
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs, errors = [], []
    for i, (x, y) in enumerate(batches(8)):
        if i == 5:
            x = np.concatenate([x, x], 1)
        try:
            outs.append(step(T(x), T(y)))
        except Exception as e:  # noqa: BLE001
            errors.append(type(e).__name__)
    return finish(model, opt, outs=outs, errors=errors)


@loop
def step_reset_between(jit):
    model, opt, lf = setup(momentum=0.9)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4 and jit:
            step.reset()
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def embedding_int_tokens(jit):
    """bag-of-embeddings classifier with token ids as Tensor input."""
    np.random.seed(0)
    emb = nn.Embedding(10, 6)
    head = mlp()
    params = emb.parameters() + head.parameters()
    opt = optim.Adam(params, lr=0.01)
    lf = nn.SoftmaxLoss()

    def fn(tok, y):
        opt.reset_grad()
        e = emb(tok)  # (seq, batch, 6)
        loss = lf(head(e.sum(axes=(0,)) / 3), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(4)
    outs = [step(T(r.randint(0, 10, (3, 4))), T(r.randint(0, 3, 4))) for _ in range(8)]
    return finish(outs=outs, p=[p.numpy() for p in params], opt_st=opt_state(opt))


@loop
def weight_decay_from_dict_inside(jit):
    """step sets opt.weight_decay from a config dict inside (0 for the first 3 calls)."""
    global CFG
    CFG = {"wd": 0.0}
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y):
        opt.weight_decay = CFG["wd"]
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 3:
            CFG["wd"] = 0.1
        if i == 6:
            CFG["wd"] = 0.2
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def lr_from_dict_inside(jit):
    """step copies the lr from a config dict into the optimizer inside."""
    global CFG
    CFG = {"lr": 0.1}
    model, opt, lf = setup(momentum=0.9)

    def fn(x, y):
        opt.lr = CFG["lr"]
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(step(x, y))
        CFG["lr"] *= 0.5
    return finish(model, opt, outs=outs)


@loop
def lr_inside_from_float_arg(jit):
    """the lr is an argument of the step."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y, lr):
        opt.lr = lr
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 0.01 / (1 + i)) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def manual_sgd_lr_arg(jit):
    """manual parameter update with an lr argument, no optimizer."""
    np.random.seed(0)
    model = mlp()
    lf = nn.SoftmaxLoss()

    def fn(x, y, lr):
        loss = lf(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data = p.data - p.grad.data * lr
            p.grad = None
        return loss
    step = J(fn, jit)
    outs = [step(x, y, 0.2 / (1 + i)) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, outs=outs)


@loop
def adam_betas_changed_between_calls(jit):
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            opt.param_groups[0]["betas"] = (0.5, 0.9)
        outs.append(step(x, y))
    return finish(model, opt, outs=outs, t=opt.t)


@loop
def adam_t_reset_between_calls(jit):
    """restart Adam's bias correction by hand (opt.t = 0)."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            opt.t = 0
            opt.m.clear()
            opt.v.clear()
        outs.append(step(x, y))
    return finish(model, opt, outs=outs, t=opt.t)


@loop
def opt_params_list_appended(jit):
    """a new head is added and its parameters appended to opt.params."""
    np.random.seed(0)
    model = ListNet()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            blk = nn.Linear(8, 8)
            model.blocks.append(blk)
            opt.params.extend(blk.parameters())
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def sequential_modules_tuple_same_types_rebuilt(jit):
    """model rebuilt from scratch (same architecture) into the same global name."""
    global NET, NET_OPT
    np.random.seed(0)
    NET = mlp()
    NET_OPT = optim.SGD(NET.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()

    def fn(x, y):
        NET_OPT.reset_grad()
        loss = lf(NET(x), y)
        loss.backward()
        NET_OPT.step()
        return loss
    step = J(fn, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:  # restart the run with a fresh model
            NET = mlp()
            NET_OPT = optim.SGD(NET.parameters(), lr=0.1)
        outs.append(step(x, y))
    return finish(NET, NET_OPT, outs=outs)


@loop
def bn_eval_stats_after_jitted_train(jit):
    """train jitted, then a plain eval pass using the BatchNorm statistics each call."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()
    step = J(std_fn(model, opt, lf), jit)
    outs, evals = [], []
    for x, y in tensors(8):
        outs.append(step(x, y))
        model.eval()
        evals.append(model(x).numpy())
        model.train()
    return finish(model, opt, outs=outs, evals=evals)


@loop
def no_grad_decorated_eval_jitted(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()
    train = J(std_fn(model, opt, lf), jit)

    @ndl.no_grad()
    def evaluate(x, y):
        return lf(model(x), y), model(x).argmax(axis=1)
    ev = J(evaluate, jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        outs.append(train(x, y))
        model.eval()
        outs.append(ev(x, y))
        model.train()
    return finish(model, opt, outs=outs)


# =========================================================================== round 3
@loop
def scheduler_inside_return_last_lr(jit):
    """returns the learning rate used, read after sched.step() inside, for logging."""
    model, opt, lf = setup(momentum=0.9)
    sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss, sched.get_last_lr()[0]
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def scheduler_inside_lr_used_in_loss(jit):
    """scheduler stepped first; the loss is scaled by the current lr (lr-aware penalty)."""
    model, opt, lf = setup(momentum=0.9)
    sched = lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1 + e))

    def fn(x, y):
        sched.step()
        opt.reset_grad()
        loss = lf(model(x), y) + sum((p * p).sum() for p in model.parameters()) * opt.lr
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def adam_returns_step_count(jit):
    """returns Adam's step counter for logging."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss, opt.t
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def adam_bias_correction_used_in_loss(jit):
    """a user reads opt.t inside after opt.step and folds it into a returned metric."""
    model, opt, lf = setup(optcls=optim.Adam, lr=0.01)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss * (1.0 / opt.t)
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def course_sgd_lr_changed_between_calls(jit):
    model, opt, lf = setup(optcls=CourseSGD, momentum=0.5)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        opt.lr = 0.1 * 0.8 ** i
        outs.append(step(x, y))
    return finish(model, outs=outs, course_opt=_course_opt_state(opt))


@loop
def course_sgd_plain_steplr_inside(jit):
    """course-style SGD without momentum; StepLR stepped inside the step."""
    model, opt, lf = setup(optcls=CourseSGD)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, outs=outs, course_opt=_course_opt_state(opt), lr=opt.lr)


@loop
def manual_seed_inside_step(jit):
    """the step re-seeds needle before dropout (same mask every step, on purpose)."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    lf = nn.SoftmaxLoss()

    def fn(x, y):
        ndl.manual_seed(1234)
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def manual_seed_between_calls(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        ndl.manual_seed(i % 3)
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def needle_randn_inside(jit):
    """needle.randn (module function) noise inside the step."""
    model, opt, lf = setup()

    def fn(x, y):
        opt.reset_grad()
        loss = lf(model(x + ndl.randn(4, 6) * 0.1), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def np_random_seed_inside_arg(jit):
    """per-step deterministic augmentation: np.random.seed(step) inside."""
    model, opt, lf = setup()

    def fn(x, y, i):
        np.random.seed(i)
        noise = ndl.init.randn(4, 6, std=0.1)
        opt.reset_grad()
        loss = lf(model(x + noise), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, i) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def tensor_setitem_numpy_cols_arg(jit):
    """feature dropout (cutout): zero the columns given by a numpy index array argument."""
    model, opt, lf = setup()

    def fn(x, y, cols):
        x = x.clone() if hasattr(x, "clone") else x + 0.0
        x[:, cols] = 0.0
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(3)
    outs = [step(x, y, r.permutation(6)[:2]) for x, y in tensors(8)]
    return finish(model, opt, outs=outs)


@loop
def tensor_bool_mask_arg(jit):
    """a bool mask Tensor made outside selects the rows."""
    model, opt, lf = setup()

    def fn(x, y, mask):
        opt.reset_grad()
        loss = lf(model(x[mask]), y[mask])
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    masks = [[1, 1, 0, 1], [1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 1, 1]]
    outs = [step(x, y, ndl.Tensor(np.array(m, bool), dtype="bool", requires_grad=False))
            for (x, y), m in zip(tensors(8), masks)]
    return finish(model, opt, outs=outs)


@loop
def numpy_labels_to_pick_via_onehot_init(jit):
    """init.one_hot with numpy labels argument (labels never a Tensor)."""
    model, opt, _ = setup()

    def fn(x, y_np):
        opt.reset_grad()
        loss = -(log_softmax(model(x)) * ndl.init.one_hot(3, y_np)).sum() / 4
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y) for x, y in tensors_np_labels(8)]
    return finish(model, opt, outs=outs)


def tensors_np_labels(n):
    return [(T(x), y) for x, y in batches(n)]


@loop
def numpy_bool_flag_attr(jit):
    """a flag stored as numpy bool (from a comparison) on the model."""
    model, opt, lf = setup(model_fn=TempNet)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.use_aux = np.float32(i) > 3.5
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def zero_d_array_flag_inplace(jit):
    """a 0-d numpy array flag toggled in place."""
    class FlagNet(TempNet):
        def forward(self, x):
            out = self.body(x)
            if self.flag:
                out = out + self.aux(x)
            return out

    def build():
        m = FlagNet()
        m.flag = np.array(False)
        return m
    model, opt, lf = setup(model_fn=build)
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.flag[...] = i >= 4
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def enum_mode_attr(jit):
    import enum

    class Mode(enum.Enum):
        PLAIN = 1
        AUX = 2

    class EnumNet(TempNet):
        def forward(self, x):
            out = self.body(x)
            if self.mode is Mode.AUX:
                out = out + self.aux(x)
            return out
    model, opt, lf = setup(model_fn=EnumNet)
    model.mode = Mode.PLAIN
    step = J(std_fn(model, opt, lf), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            model.mode = Mode.AUX
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def tie_weights_between_calls(jit):
    """weight tying switched on mid-run by assigning one parameter to another module."""
    np.random.seed(0)
    model = TwoSame()
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        if i == 4:
            model.b.weight = model.a.weight
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)


@loop
def skip_small_last_batch(jit):
    """the step returns None for batches smaller than 4 (shape branch)."""
    model, opt, lf = setup()

    def fn(x, y):
        if x.shape[0] < 4:
            return None
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    r = np.random.RandomState(4)
    X, Y = r.randn(14, 6).astype(np.float32), r.randint(0, 3, 14)
    outs = []
    for epoch in range(3):
        for b in range(0, 14, 4):
            outs.append(step(T(X[b:b + 4]), T(Y[b:b + 4])))
    return finish(model, opt, outs=outs)


@loop
def aliased_inside_list_arg(jit):
    """aliasing inside a list argument: [x, x] then [a, b]; the step rescales element 0's data."""
    model, opt, lf = setup()

    def fn(xs, y):
        xs[0].data = xs[0].data * 0.5
        opt.reset_grad()
        loss = lf(model(xs[0]) + model(xs[1]), y)
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    B = tensors(8)
    outs = []
    for i, (x, y) in enumerate(B):
        outs.append(step([x, x] if i in (0, 1, 2, 5) else [x, B[i - 1][0]], y))
    return finish(model, opt, outs=outs, xs=[b[0] for b in B])


@loop
def tuple_of_numbers_arg(jit):
    model, opt, lf = setup()

    def fn(x, y, coefs):
        a, b = coefs
        opt.reset_grad()
        logits = model(x)
        loss = lf(logits, y) * a + (logits * logits).mean() * b
        loss.backward()
        opt.step()
        return loss
    step = J(fn, jit)
    outs = [step(x, y, (1.0, 0.1 * i)) for i, (x, y) in enumerate(tensors(8))]
    return finish(model, opt, outs=outs)


@loop
def dropout_eval_on_submodule_only(jit):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = J(std_fn(model, opt, nn.SoftmaxLoss()), jit)
    outs = []
    for i, (x, y) in enumerate(tensors(8)):
        model.modules[2].training = i % 2 == 0
        outs.append(step(x, y))
    return finish(model, opt, outs=outs)
