import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

def t_randn_odd_inside_randn_outside():
    m, o, lf = setup()
    def step(x, y):
        noise = init.randn(4, 3, std=0.1)  # 12 draws
        extra = ndl.randn(3)               # odd: leaves a cached gauss
        o.reset_grad(); out = m(x) + noise + extra.reshape((1, 3)).broadcast_to((4, 3))
        loss = lf(out, y); loss.backward(); o.step(); return loss
    s = J(step)
    outs, side = [], []
    for i, (x, y) in enumerate(data()):
        outs.append(s(T(x), T(y)))
        side.append(np.random.randn(1))    # uses cached gauss if any
        if i == 5: np.random.seed(7)
    return {"m": model_obs(m), "outs": snap(outs), "side": snap(side)}

def t_randn_odd_only_inside():
    m, o, lf = setup()
    def step(x, y):
        extra = ndl.randn(1, 3)
        o.reset_grad(); out = m(x) + extra.broadcast_to((4, 3))
        loss = lf(out, y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

def t_rand_and_randb_mix_with_loader_permutation():
    np.random.seed(0); m = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.3), nn.ReLU(), nn.Linear(8, 3))
    o = optim.SGD(m.parameters(), lr=0.1); lf = nn.SoftmaxLoss()
    X = np.random.RandomState(3).randn(16, 6).astype(np.float32); Y = np.random.RandomState(4).randint(0, 3, 16)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x * ndl.rand(4, 1).broadcast_to((4, 6))), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for ep in range(3):
        perm = np.random.permutation(16)
        for b in range(4):
            idx = perm[b*4:(b+1)*4]
            outs.append(s(T(X[idx]), T(Y[idx])))
        np.random.randn(1)  # odd gauss outside
    return {"m": model_obs(m), "outs": snap(outs)}

def t_dropout_p_one_and_zero():
    np.random.seed(0); d = nn.Dropout(0.0); m = nn.Sequential(nn.Linear(6, 8), d, nn.Linear(8, 3))
    o = optim.SGD(m.parameters(), lr=0.1); lf = nn.SoftmaxLoss()
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for i, (x, y) in enumerate(data(12)):
        if i == 4: d.p = 1.0
        if i == 8: d.p = 0.0
        outs.append(s(T(x), T(y)))
    return {"m": model_obs(m), "outs": snap(outs)}

def t_randn_in_init_inside_step_reinit():
    # re-initialize a layer inside the step every call (e.g. random features)
    m, o, lf = setup()
    def step(x, y):
        rf = init.kaiming_uniform(6, 6)  # random features each call
        o.reset_grad(); loss = lf(m(ops.relu(x @ rf)), y); loss.backward(); o.step(); return loss
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

def t_random_crop_flip_transform_inside():
    from needle.data import RandomFlipHorizontal, RandomCrop
    np.random.seed(0); m = nn.Sequential(nn.Flatten(), nn.Linear(16, 3)); o = optim.SGD(m.parameters(), lr=0.1); lf = nn.SoftmaxLoss()
    flip = RandomFlipHorizontal(0.5); crop = RandomCrop(1)
    def step(x, y):
        xs = np.stack([crop(flip(img)) for img in x])
        o.reset_grad(); loss = lf(m(ndl.Tensor(xs)), y); loss.backward(); o.step(); return loss
    s = J(step)
    r = np.random.RandomState(5)
    outs = [s(r.randn(2, 4, 4, 1).astype(np.float32), T(r.randint(0, 3, 2))) for _ in range(8)]
    return {"m": model_obs(m), "outs": snap(outs)}
