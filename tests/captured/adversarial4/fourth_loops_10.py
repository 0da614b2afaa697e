import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

BANK = np.random.RandomState(4).randn(20000, 6)   # float64, 120000 elements (memory bank, refreshed in place)

def t_big_bank_astype_refreshed():
    m, o, lf = setup()
    def step(x, y):
        proto = ndl.Tensor(BANK[:4].astype(np.float32))   # slice (view) then astype (copy)
        o.reset_grad(); loss = lf(m(x + proto * 0.1), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: BANK[:] = BANK * 0.5 + 1.0     # epoch boundary: bank refreshed in place
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_big_bank_mean_refreshed():
    m, o, lf = setup()
    def step(x, y):
        mu = ndl.Tensor(BANK.mean(axis=0, keepdims=True).astype(np.float32)).broadcast_to((4, 6))
        o.reset_grad(); loss = lf(m(x - mu), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: BANK[:] = BANK * 0.5 + 1.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

BANK32 = np.random.RandomState(5).randn(20000, 6).astype(np.float32)
def t_big_bank32_direct_refreshed():
    m, o, lf = setup()
    def step(x, y):
        proto = ndl.Tensor(BANK32[:4])
        o.reset_grad(); loss = lf(m(x + proto * 0.1), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: BANK32[:] = BANK32 * 0.5 + 1.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

WEIGHTS = {"cls": ndl.Tensor(np.ones((1, 3), np.float32), requires_grad=False)}
getw = WEIGHTS.get
def t_builtin_bound_getter():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x) * getw("cls").broadcast_to((4, 3)), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: WEIGHTS["cls"] = ndl.Tensor(np.full((1, 3), 2.0, np.float32), requires_grad=False)
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

HP = {"scale": 1.0}
hp = HP.__getitem__
def t_builtin_bound_hparam():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x) * hp("scale"), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: HP["scale"] = 3.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_big_bank64_direct_tensor_refreshed():
    m, o, lf = setup()
    def step(x, y):
        proto = ndl.Tensor(BANK[:4])        # float64 view -> Tensor converts to float32
        o.reset_grad(); loss = lf(m(x + proto * 0.1), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: BANK[:] = BANK * 0.5 + 1.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_big_bank_T_copy_refreshed():
    m, o, lf = setup()
    def step(x, y):
        proto = ndl.Tensor(np.ascontiguousarray(BANK32[:6, :4].T))
        o.reset_grad(); loss = lf(m(x + proto * 0.1), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(8)):
        if i == 4: BANK32[:] = BANK32 * 0.5 + 1.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}
