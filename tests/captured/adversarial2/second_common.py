"""Helpers for the second adversarial tester's loops."""
import random
import numpy as np
import needle as ndl
from needle import nn, optim, ops


def J(fn, jit, **kw):
    return ndl.jit(fn, **kw) if jit else fn


def T(a, rg=False, dtype=None):
    if dtype is None:
        return ndl.Tensor(a, requires_grad=rg)
    return ndl.Tensor(a, requires_grad=rg, dtype=dtype)


def data(n=8, bs=4, fin=6, ncls=3, seed=7):
    r = np.random.RandomState(seed)
    return [(r.randn(bs, fin).astype(np.float32), r.randint(0, ncls, bs)) for _ in range(n)]


def tdata(n=8, bs=4, fin=6, ncls=3, seed=7):
    return [(T(x), T(y)) for x, y in data(n, bs, fin, ncls, seed)]


def mlp(fin=6, hid=8, out=3):
    return nn.Sequential(nn.Linear(fin, hid), nn.ReLU(), nn.Linear(hid, out))


def seed(s=0):
    np.random.seed(s)
    random.seed(s)


def rng_state():
    st = np.random.get_state()
    return {"np_keys": st[1].copy(), "np_pos": st[2], "py": hash(random.getstate())}


def snap(v, _seen=None):
    if isinstance(v, ndl.Tensor):
        return ("Tensor", str(v.dtype), v.numpy().copy())
    if isinstance(v, np.ndarray):
        return ("ndarray", v.copy())
    if isinstance(v, dict):
        return {k: snap(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return ("seq", type(v).__name__, [snap(x) for x in v])
    if isinstance(v, (int, float, bool, str, type(None), np.generic)):
        return v
    if hasattr(v, "__array__"):
        return ("arr", np.array(v).copy())
    return ("obj", type(v).__name__)


def opt_state(opt):
    sd = opt.state_dict()
    return snap({"state": sd["state"], "groups": [dict(g) for g in sd["param_groups"]]})


def finish(model=None, opt=None, **extra):
    out = {}
    if model is not None:
        out["_params"] = [p.numpy().copy() for p in model.parameters()]
        out["_buffers"] = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    if opt is not None:
        out["_opt"] = opt_state(opt)
        out["_opt_t"] = getattr(opt, "t", None)
    out["_rng"] = rng_state()
    for k, v in extra.items():
        out[k] = snap(v)
    return out


def std_step(model, opt, lf):
    def train_step(x, y):
        opt.reset_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step
