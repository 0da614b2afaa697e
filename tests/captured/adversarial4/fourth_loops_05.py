import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

@dataclasses.dataclass
class Rec:
    loss: object
    step: int = 0

class Holder:
    def __init__(self, loss): self.loss = loss

def t_store_obj_on_module():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        m.last = Holder(loss.detach())
        return loss
    s = J(step)
    outs, lasts = [], []
    for x, y in data():
        outs.append(s(T(x), T(y))); lasts.append(m.last.loss)
    return {"m": model_obs(m), "outs": snap(outs), "lasts": snap(lasts)}

def t_store_dataclass_in_dict():
    m, o, lf = setup()
    log = {}
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        log["last"] = Rec(loss.detach())
        return loss
    s = J(step)
    outs, lasts = [], []
    for x, y in data():
        outs.append(s(T(x), T(y))); lasts.append(log["last"].loss)
    return {"m": model_obs(m), "outs": snap(outs), "lasts": snap(lasts)}

def t_append_namespace_to_list():
    m, o, lf = setup()
    hist = []
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        hist.append(types.SimpleNamespace(loss=loss.detach()))
        return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "hist": snap([h.loss for h in hist]), "n": len(hist)}

def t_nested_tuple_in_obj_attr():
    # module keeps (h, c) hidden state as attribute, stored as a Holder of the tuple
    m, o, lf = setup()
    st = types.SimpleNamespace(h=None)
    def step(x, y):
        o.reset_grad(); out = m(x); loss = lf(out, y); loss.backward(); o.step()
        st.h = Holder(out.detach())
        return loss
    s = J(step)
    outs, hs = [], []
    for x, y in data():
        outs.append(s(T(x), T(y))); hs.append(st.h.loss)
    return {"m": model_obs(m), "outs": snap(outs), "hs": snap(hs)}
