import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

def t_adam_param_first_grad_at_capture():
    np.random.seed(0)
    body = nn.Linear(6, 8); h1 = nn.Linear(8, 3); h2 = nn.Linear(8, 3)
    params = body.parameters() + h1.parameters() + h2.parameters()
    o = optim.Adam(params, lr=0.01); lf = nn.SoftmaxLoss()
    def step(x, y, both):
        z = ops.relu(body(x))
        loss = lf(h1(z), y)
        if both:
            loss = loss + lf(h2(z), y)
        o.reset_grad(); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y), i >= 1) for i, (x, y) in enumerate(data(10))]
    return {"p": snap(params), "outs": snap(outs), "o": opt_obs(o)}

def t_sgd_mom_param_unfrozen_after_capture():
    np.random.seed(0)
    m = mlp(); o = optim.SGD(m.parameters(), lr=0.1, momentum=0.9); lf = nn.SoftmaxLoss()
    for p in m[0].parameters(): p.requires_grad = False
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(10)):
        if i == 4:
            for p in m[0].parameters(): p.requires_grad = True
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs), "o": opt_obs(o)}

def t_grad_none_for_unused_param_then_used_mid():
    # a parameter only reached when a Python flag on the module is set; flag flips twice
    np.random.seed(0)
    m = mlp(); extra = nn.Linear(3, 3); o = optim.Adam(m.parameters() + extra.parameters(), lr=0.01); lf = nn.SoftmaxLoss()
    cfg = types.SimpleNamespace(extra=False)
    def step(x, y):
        out = m(x)
        if cfg.extra: out = out + extra(out)
        o.reset_grad(); loss = lf(out, y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(12)):
        cfg.extra = 4 <= i < 8
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "e": model_obs(extra), "outs": snap(outs), "o": opt_obs(o)}

def t_zero_grad_after_step_pattern_with_read_grads():
    # zero_grad at end; outside code reads p.grad (None) between calls
    m, o, lf = setup(optim.SGD, momentum=0.5)
    def step(x, y):
        loss = lf(m(x), y); loss.backward(); o.step(); o.zero_grad(); return loss
    s = J(step)
    outs, gnone = [], []
    for x, y in data():
        outs.append(s(T(x), T(y))); gnone.append([p.grad is None for p in m.parameters()])
    return {"m": model_obs(m), "outs": snap(outs), "g": gnone}

def t_no_zero_grad_at_all():
    m, o, lf = setup(optim.SGD, momentum=0.5)
    def step(x, y):
        loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "g": grads_obs(m)}
