import os, tempfile
import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

def std(m, o, lf):
    def step(x, y):
        o.reset_grad(); out = m(x); loss = lf(out, y); loss.backward(); o.step(); return loss, out
    return step

@dataclasses.dataclass
class Out:
    loss: object
    logits: object

class PlainOut:
    def __init__(self, loss, logits): self.loss, self.logits = loss, logits

NT = collections.namedtuple("NT", "loss logits")

def _ret(kind):
    m, o, lf = setup()
    inner = std(m, o, lf)
    def step(x, y):
        loss, out = inner(x, y)
        if kind == "dc": return Out(loss, out)
        if kind == "plain": return PlainOut(loss, out)
        if kind == "ns": return types.SimpleNamespace(loss=loss, logits=out)
        if kind == "nt": return NT(loss, out)
        if kind == "od": return collections.OrderedDict(loss=loss, logits=out)
        if kind == "dd": d = collections.defaultdict(list); d["loss"].append(loss); return d
        if kind == "set": return {loss}
    s = J(step)
    res = [s(T(x), T(y)) for x, y in data()]
    def get(r):
        if kind in ("dc", "plain", "ns", "nt"): return [r.loss, r.logits]
        if kind == "od": return [r["loss"], r["logits"]]
        if kind == "dd": return r["loss"]
        if kind == "set": return list(r)
    return {"m": model_obs(m), "outs": snap([get(r) for r in res]), "types": [type(r).__name__ for r in res]}

def t_ret_dataclass(): return _ret("dc")
def t_ret_plainobj(): return _ret("plain")
def t_ret_namespace(): return _ret("ns")
def t_ret_namedtuple(): return _ret("nt")
def t_ret_ordereddict(): return _ret("od")
def t_ret_defaultdict(): return _ret("dd")
def t_ret_set(): return _ret("set")

def t_backward_outside_later():
    # forward+loss jitted; from call 4 on the user adds an extra backward outside
    m, o, lf = setup()
    def fwd(x, y):
        return lf(m(x), y)
    s = J(fwd)
    outs = []
    for i, (x, y) in enumerate(data()):
        loss = s(T(x), T(y))
        if i >= 3:
            o.reset_grad(); loss.backward(); o.step()
        outs.append(loss)
    return {"m": model_obs(m), "outs": snap(outs), "g": grads_obs(m)}

def t_np_load_inside(tmp=os.path.join(tempfile.gettempdir(), "needle-adv4-cw.npy")):
    np.save(tmp, np.ones(3, np.float32))
    m, o, lf = setup()
    def step(x, y):
        w = ndl.Tensor(np.load(tmp), requires_grad=False)
        o.reset_grad(); out = m(x) * w.reshape((1, 3)).broadcast_to((4, 3)); loss = lf(out, y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        np.save(tmp, np.full(3, 1.0 + i, np.float32))
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_lru_cache_helper():
    m, o, lf = setup()
    g = {"scale": 1.0}
    @functools.lru_cache(maxsize=None)
    def wvec(n):
        return ndl.Tensor(np.full((1, n), g["scale"], np.float32), requires_grad=False)
    def step(x, y):
        o.reset_grad(); out = m(x) * wvec(3).broadcast_to((4, 3)); loss = lf(out, y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        if i == 4:
            g["scale"] = 3.0; wvec.cache_clear()
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_result_grad_read_outside():
    # user reads logits.grad? no: returns input with requires_grad and reads x.grad after
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs, gx = [], []
    for x, y in data():
        xt = T(x, rg=True)
        outs.append(s(xt, T(y))); gx.append(xt.grad)
    return {"m": model_obs(m), "outs": snap(outs), "gx": snap(gx)}

def t_param_grad_identity_kept():
    # user keeps references to .grad objects returned by step in a list, read at end
    m, o, lf = setup(optim.SGD, momentum=0.9)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return [p.grad for p in m.parameters()]
    s = J(step)
    gs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "gs": snap(gs), "o": opt_obs(o)}
