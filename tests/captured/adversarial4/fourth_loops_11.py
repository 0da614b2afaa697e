import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
import fourth_harness as h
from fourth_loops_01 import mlp, data, setup

def maybe_jit(f):
    return ndl.jit(f) if h.MODE == "jit" else f

@dataclasses.dataclass
class DCTrainer:
    model: object
    opt: object
    lf: object
    @maybe_jit
    def step(self, x, y):
        self.opt.reset_grad(); loss = self.lf(self.model(x), y); loss.backward(); self.opt.step(); return loss

def t_jit_method_on_dataclass_trainer():
    m, o, lf = setup()
    tr = DCTrainer(m, o, lf)
    outs = [tr.step(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

class SlotTrainer:
    __slots__ = ("model", "opt", "lf")
    def __init__(self, m, o, lf): self.model, self.opt, self.lf = m, o, lf
    @maybe_jit
    def step(self, x, y):
        self.opt.reset_grad(); loss = self.lf(self.model(x), y); loss.backward(); self.opt.step(); return loss

def t_jit_method_on_slots_trainer():
    m, o, lf = setup()
    tr = SlotTrainer(m, o, lf)
    outs = [tr.step(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs)}

class EqTrainer:
    def __init__(self, m, o, lf, name): self.model, self.opt, self.lf, self.name = m, o, lf, name
    def __eq__(self, other): return isinstance(other, EqTrainer) and self.name == other.name
    def __hash__(self): return hash(self.name)
    @maybe_jit
    def step(self, x, y):
        self.opt.reset_grad(); loss = self.lf(self.model(x), y); loss.backward(); self.opt.step(); return loss

def t_jit_method_two_equal_instances():
    # two trainers that compare equal (same run name) but wrap different models (e.g. a restart)
    m1, o1, lf = setup(); np.random.seed(1); m2 = mlp(); o2 = optim.SGD(m2.parameters(), lr=0.1)
    t1 = EqTrainer(m1, o1, lf, "run"); t2 = EqTrainer(m2, o2, lf, "run")
    outs = []
    for i, (x, y) in enumerate(data(10)):
        outs.append((t1 if i % 2 == 0 else t2).step(T(x), T(y)))
    return {"m1": model_obs(m1), "m2": model_obs(m2), "outs": snap(outs)}
