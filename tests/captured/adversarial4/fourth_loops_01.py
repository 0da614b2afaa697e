import numpy as np, random, functools, math
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs

def mlp(): return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
def data(n=8, bs=4, seed=1):
    r = np.random.RandomState(seed)
    return [(r.randn(bs, 6).astype(np.float32), r.randint(0, 3, bs)) for _ in range(n)]
def setup(opt=optim.SGD, **kw):
    np.random.seed(0); m = mlp(); kw.setdefault("lr", 0.1)
    return m, opt(m.parameters(), **kw), nn.SoftmaxLoss()

def t_generator_step():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        yield loss
        o.reset_grad(); loss = lf(m(x * 2), y); loss.backward(); o.step()
        yield loss
    s = J(step)
    outs = []
    for x, y in data():
        outs += list(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_manual_seed_inside_dropout():
    np.random.seed(0); m = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 3))
    o = optim.SGD(m.parameters(), lr=0.1); lf = nn.SoftmaxLoss()
    def step(x, y):
        ndl.manual_seed(123)
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "after": np.random.rand(3)}

def t_realize_inside():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); h = m[0](x); h.realize(); out = m[2](m[1](h)); loss = lf(out, y); ndl.realize(loss)
        loss.backward(); o.step(); return loss, h
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

def t_return_views_of_state():
    m, o, lf = setup(optim.Adam, lr=0.01)
    def step(x, y):
        w_before = m[0].weight[0:2]
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return loss, w_before, m[0].weight.reshape((48,)), m[0].weight.transpose(), o.m[0] if 0 in o.m else None
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "o": opt_obs(o)}

def t_opt_step_twice():
    m, o, lf = setup(optim.Adam, lr=0.01)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); o.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "o": opt_obs(o), "t": o.t}

def t_adam_betas_changed():
    m, o, lf = setup(optim.Adam, lr=0.01)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        if i == 4: o.param_groups[0]["betas"] = (0.5, 0.9)
        if i == 5: o.eps = 1e-3
        if i == 6: o.beta1 = 0.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs), "o": opt_obs(o)}

def t_setitem_state_tensor_index():
    m, o, lf = setup()
    mem = ndl.Tensor(np.zeros((8, 3), np.float32), requires_grad=False)
    box = {"mem": mem}
    def step(x, y, idx):
        o.reset_grad(); out = m(x); loss = lf(out, y); loss.backward(); o.step()
        box["mem"][idx] = out.detach()
        return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        idx = T(np.array([(i * 4 + k) % 8 for k in range(4)]))
        outs.append(s(T(x), T(y), idx))
    return {"m": model_obs(m), "outs": snap(outs), "mem": snap(box["mem"])}

def t_bias_set_none():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        if i == 4: m[2].bias = None
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_grad_penalty_higher_order():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad()
        x.requires_grad = True
        out = m(x).sum()
        out.backward()
        g = x.grad
        gp = (g * g).sum()
        gp.backward()
        o.step()
        return gp
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

def t_backward_out_grad_arg():
    m, o, lf = setup()
    def step(x, w):
        o.reset_grad(); out = m(x); out.backward(w); o.step(); return out
    s = J(step)
    outs = [s(T(x), T(np.random.RandomState(i).randn(4, 3))) for i, (x, y) in enumerate(data())]
    return {"m": model_obs(m), "outs": snap(outs)}

def t_return_closure():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return lambda: loss
    s = J(step)
    fs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap([f() for f in fs])}

def t_data_shape_change_prune():
    m, o, lf = setup()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data()):
        if i == 4:
            w = m[2].weight.numpy()[:6]; m[0].weight.data = ndl.Tensor(m[0].weight.numpy()[:, :6]); m[0].bias.data = ndl.Tensor(m[0].bias.numpy()[:, :6])
            m[2].weight.data = ndl.Tensor(w)
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_param_in_two_optimizers():
    m, o, lf = setup()
    o2 = optim.Adam(m[2].parameters(), lr=0.01)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); o2.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "o2": opt_obs(o2)}
