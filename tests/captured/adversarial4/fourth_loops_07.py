import numpy as np, random, functools, math, dataclasses, types, collections
import needle as ndl
from needle import nn, optim, ops, init
from needle.optim import lr_scheduler
from fourth_harness import J, T, snap, model_obs, opt_obs, grads_obs
from fourth_loops_01 import mlp, data, setup

def t_sched_inside_return_last_lr():
    m, o, lf = setup()
    sch = lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); sch.step()
        return loss, sch.get_last_lr()[0]
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "lr": o.lr}

def t_sched_outside_return_pg_lr():
    m, o, lf = setup()
    sch = lr_scheduler.CosineAnnealingLR(o, T_max=8)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return loss, o.param_groups[0]["lr"]
    s = J(step)
    outs = []
    for x, y in data():
        outs.append(s(T(x), T(y))); sch.step()
    return {"m": model_obs(m), "outs": snap(outs), "lr": o.lr}

def t_sched_outside_return_state_dict_lr():
    m, o, lf = setup(optim.Adam, lr=0.01)
    sch = lr_scheduler.LambdaLR(o, lambda e: 1.0 / (1 + e))
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return loss, o.state_dict()["param_groups"][0]["lr"]
    s = J(step)
    outs = []
    for x, y in data():
        outs.append(s(T(x), T(y))); sch.step()
    return {"m": model_obs(m), "outs": snap(outs), "lr": o.lr}

def t_opt_t_returned():
    m, o, lf = setup(optim.Adam, lr=0.01)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step()
        return loss, o.state_dict()["state"][0]["step"] if "step" in o.state_dict()["state"].get(0, {}) else -1
    s = J(step)
    outs = [s(T(x), T(y)) for x, y in data()]
    return {"m": model_obs(m), "outs": snap(outs), "t": o.t}

def t_scaled_loss_by_lr():
    # loss scaled by current lr (reads lr by getattr string)
    m, o, lf = setup()
    sch = lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
    key = "lr"
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y) * getattr(o, key); loss.backward(); o.step(); return loss
    s = J(step)
    outs = []
    for x, y in data():
        outs.append(s(T(x), T(y))); sch.step()
    return {"m": model_obs(m), "outs": snap(outs), "lr": o.lr}

def t_lr_via_vars():
    m, o, lf = setup()
    sch = lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
    def step(x, y):
        o.reset_grad(); loss = lf(m(x), y); loss.backward(); o.step(); return loss, dict(vars(o)).get("l" + "r")
    s = J(step)
    outs = []
    for x, y in data():
        outs.append(s(T(x), T(y))); sch.step()
    return {"m": model_obs(m), "outs": snap(outs), "lr": o.lr}
