import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
import fourth_harness as h
from fourth_loops_01 import mlp, data, setup

def t_float64_model():
    np.random.seed(0)
    m = nn.Sequential(nn.Linear(6, 8, dtype="float64"), nn.ReLU(), nn.Linear(8, 3, dtype="float64"))
    o = optim.Adam(m.parameters(), lr=0.01); lf = nn.SoftmaxLoss()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(ndl.Tensor(x.astype(np.float64), dtype="float64"), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "dt": [str(p.dtype) for p in m.parameters()]}

def t_model_cast_midway():
    m, o, lf = setup(optim.SGD, momentum=0.9)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        if i == 4:
            for p in m.parameters(): p.data = ndl.Tensor(p.numpy().astype(np.float64), dtype="float64")
        xx = T(x) if i < 4 else ndl.Tensor(x.astype(np.float64), dtype="float64")
        outs.append(s(xx, T(y)))
    return {"m": model_obs(m), "outs": snap(outs), "dt": [str(p.dtype) for p in m.parameters()], "o": opt_obs(o)}

def t_input_float16():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x.float()), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(ndl.Tensor(x.astype(np.float16), dtype="float16"), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

class SM:
    def __init__(self, m, o, lf): self.m, self.o, self.lf = m, o, lf

def t_staticmethod_under_jit():
    m, o, lf = setup()
    class K:
        @ndl.jit if h.MODE == "jit" else (lambda f: f)
        @staticmethod
        def step(x, y):
            o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    k = K()
    outs = [k.step(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}
