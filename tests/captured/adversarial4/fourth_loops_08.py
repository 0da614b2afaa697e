import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

def t_input_rg_set_inside_observed():
    m, o, lf = setup()
    def step(x, y):
        x.requires_grad = True
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs, flags, gx = [], [], []
    for x, y in data():
        xt = T(x); outs.append(s(xt, T(y))); flags.append(xt.requires_grad); gx.append(None if xt.grad is None else xt.grad)
    return {"m": model_obs(m), "outs": snap(outs), "flags": flags, "gx": snap(gx)}

def t_input_detach_alias_then_distinct():
    m, o, lf = setup()
    def step(a, b):
        o.reset_grad(); loss = ((m(a) - m(b)) ** 2).sum() + lf(m(a), ndl.Tensor([0., 1., 2., 0.])); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    d = data()
    for i, (x, y) in enumerate(d):
        xa = T(x)
        xb = xa.detach() if i < 3 else T(d[(i + 1) % 8][0])
        outs.append(s(xa, xb))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_input_reshape_alias():
    m, o, lf = setup()
    def step(a, b):
        o.reset_grad(); loss = lf(m(a), ndl.Tensor([0., 1., 2., 0.])) + (b * b).sum() * 0.0 + (m(b.reshape((4, 6))).sum()); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    d = data()
    for i, (x, y) in enumerate(d):
        xa = T(x); xa.realize()
        xb = xa.reshape((24,)) if i < 3 else T(d[(i + 3) % 8][0].reshape(24))
        xb.realize()
        outs.append(s(xa, xb))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_input_inplace_setitem_inside():
    # step normalizes an input tensor in place with setitem (x[:] = ...)
    m, o, lf = setup()
    def step(x, y):
        x[:, 0] = x[:, 0] * 0.0
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs, xs = [], []
    for x, y in data():
        xt = T(x); outs.append(s(xt, T(y))); xs.append(xt)
    return {"m": model_obs(m), "outs": snap(outs), "xs": snap(xs)}

def t_state_setitem_python_index_arg_cycle():
    # ring buffer with index passed as int (few distinct values -> several captures)
    m, o, lf = setup()
    mem = types.SimpleNamespace(buf=ndl.Tensor(np.zeros((3, 4, 3), np.float32), requires_grad=False))
    def step(x, y, slot):
        o.reset_grad(); out = m(x); loss = lf(out, y); loss.backward(); o.step()
        mem.buf[slot] = out.detach()
        return loss, mem.buf.sum()
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(12)):
        outs.append(s(T(x), T(y), i % 3))
    return {"m": model_obs(m), "outs": snap(outs), "buf": snap(mem.buf)}

def t_grad_clip_returns_norm_used_in_loss_next():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward()
        n = nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        o.step(); return loss, n
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}
