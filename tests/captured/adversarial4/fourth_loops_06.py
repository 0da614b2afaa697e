import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

def t_returned_intermediate_grad():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); logits = m(x); loss = lf(logits, y); loss.backward(); o.step()
        return loss, logits
    s = J(step)
    res = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap([r[0] for r in res]),
            "lgrad": [None if r[1].grad is None else snap(r[1].grad) for r in res],
            "loss_grad": [None if r[0].grad is None else snap(r[0].grad) for r in res]}

def t_returned_tensor_attribute():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        loss.batch_size = x.shape[0]
        return loss
    s = J(step)
    res = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(res), "bs": [getattr(r, "batch_size", "MISSING") for r in res]}

def t_returned_parameter_created_inside_type():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return nn.Parameter(m[0].weight.detach() * 1.0)
    s = J(step)
    res = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(res), "types": [type(r).__name__ for r in res]}

def t_power_int_vs_float_state():
    m, o, lf = setup()
    cfg = types.SimpleNamespace(gamma=2)
    def step(x, y):
        o.reset_grad(); out = m(x); loss = lf(out, y) + (out ** cfg.gamma).sum() * 0.01; loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        if i == 4: cfg.gamma = 2.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_mask_cache_dict_var_T():
    np.random.seed(0)
    emb = nn.Linear(4, 4); head = nn.Linear(4, 3); params = emb.parameters() + head.parameters()
    o = optim.Adam(params, lr=0.01); lf = nn.SoftmaxLoss()
    masks = {}
    def step(x, y):
        B, Tn, D = x.shape
        if Tn not in masks:
            masks[Tn] = ndl.Tensor(np.tril(np.ones((Tn, Tn), np.float32)) / np.arange(1, Tn + 1, dtype=np.float32)[:, None], requires_grad=False)
        h = emb(x.reshape((B * Tn, D))).reshape((B, Tn, D))
        mk = masks[Tn].reshape((1, Tn, Tn)).broadcast_to((B, Tn, Tn))
        z = (mk @ h).sum(axes=(1,))
        o.reset_grad(); loss = lf(head(z), y); loss.backward(); o.step(); return loss
    s = J(step)
    r = np.random.RandomState(2); outs = []
    for i in range(12):
        Tn = [4, 5, 4, 5, 6, 4][i % 6]
        outs.append(s(T(r.randn(2, Tn, 4)), T(r.randint(0, 3, 2))))
    return {"p": snap(params), "outs": snap(outs)}

def t_manual_sgd_params_list_arg_grads_outside():
    m, o, lf = setup()
    def update(params, lr):
        for p in params:
            p.data = p.data - lr * p.grad
    s = J(update)
    outs = []
    for x, y in data():
        for p in m.parameters(): p.grad = None
        loss = lf(m(T(x)), T(y)); loss.backward()
        s(m.parameters(), 0.1)
        outs.append(loss)
    return {"m": model_obs(m), "outs": snap(outs)}
