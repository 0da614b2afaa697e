"""Optimizer state_dict / load_state_dict (a resumed run equals an uninterrupted one,
bit for bit, also through needle.save / needle.load) and PyTorch-shaped
param_groups that read and write the optimizer's hyperparameters."""
import numpy as np
import pytest

import needle as ndl
from needle import optim
from needle.errors import ArgumentError

SHAPES = [(4, 3), (3,)]
OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda ps: optim.Adam(ps, lr=0.01, beta1=0.8, beta2=0.99, weight_decay=0.001),
    "rmsprop": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
}


def gradients(steps):
    rng = np.random.RandomState(7)
    return [[rng.randn(*s).astype(np.float32) for s in SHAPES] for _ in range(steps)]


def run(make, start, grads, state=None):
    params = [ndl.Tensor(p) for p in start]
    opt = make(params)
    if state is not None:
        opt.load_state_dict(state)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = ndl.Tensor(g, requires_grad=False)
        opt.step()
    return params, opt


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resumed_run_equals_uninterrupted(name, tmp_path):
    make = OPTIMIZERS[name]
    start = [np.random.randn(*s).astype(np.float32) for s in SHAPES]
    grads = gradients(6)
    straight, _ = run(make, start, grads)
    first, opt = run(make, start, grads[:3])
    saved = {"params": [p.numpy() for p in first], "opt": opt.state_dict()}
    ndl.save(saved, tmp_path / "ckpt.npz")
    loaded = ndl.load(tmp_path / "ckpt.npz")
    for source in (saved, loaded):
        resumed, opt2 = run(make, source["params"], grads[3:], state=source["opt"])
        for a, b in zip(resumed, straight):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    if name == "adam":
        assert opt2.t == 6


def test_state_dict_layout_is_pytorchs():
    params = [ndl.Tensor(np.ones(s, np.float32)) for s in SHAPES]
    opt = optim.Adam(params, lr=0.01)
    assert opt.state_dict() == {"state": {}, "param_groups": [
        {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "params": [0, 1]}]}
    _, opt = run(lambda ps: optim.Adam(ps, lr=0.01), [np.ones(s, np.float32) for s in SHAPES], gradients(2))
    state = opt.state_dict()["state"]
    assert sorted(state) == [0, 1] and sorted(state[0]) == ["m", "step", "v"] and state[0]["step"] == 2
    assert state[0]["m"].shape == SHAPES[0]


def test_state_dict_is_a_snapshot():
    params, opt = run(OPTIMIZERS["sgd"], [np.ones(s, np.float32) for s in SHAPES], gradients(2))
    snapshot = opt.state_dict()["state"][0]["u"].numpy()
    for p, g in zip(params, gradients(1)[0]):
        p.grad = ndl.Tensor(g, requires_grad=False)
    opt.step()
    assert not np.array_equal(opt.state_dict()["state"][0]["u"].numpy(), snapshot)


def test_load_state_dict_checks_before_writing():
    params = [ndl.Tensor(np.ones(s, np.float32)) for s in SHAPES]
    opt = optim.Adam(params, lr=0.01)
    with pytest.raises(ArgumentError, match="2 parameters|has 2"):
        opt.load_state_dict({"state": {}, "param_groups": [{"lr": 0.5, "params": [0]}]})
    bad = {"state": {0: {"m": np.zeros((2, 2)), "v": np.zeros((4, 3)), "step": 1}},
           "param_groups": [{"lr": 0.5, "params": [0, 1]}]}
    with pytest.raises(ArgumentError, match="shape"):
        opt.load_state_dict(bad)
    assert opt.lr == 0.01 and opt.m == {}
    with pytest.raises(ArgumentError, match="state_dict"):
        opt.load_state_dict({"lr": 1})


def test_param_groups_read_and_write_the_optimizer():
    params = [ndl.Tensor(np.ones(s, np.float32)) for s in SHAPES]
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    group = opt.param_groups[0]
    assert len(opt.param_groups) == 1 and group["params"] is opt.params
    assert dict(group) == {"params": opt.params, "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0}
    group["lr"] = 0.05
    assert opt.lr == 0.05
    opt.lr = 0.2
    assert opt.param_groups[0]["lr"] == 0.2
    for g in opt.param_groups:  # the PyTorch idiom for a manual schedule
        g["lr"] *= 0.5
    assert opt.lr == 0.1
    adam = optim.Adam(params)
    adam.param_groups[0]["betas"] = (0.5, 0.6)
    assert (adam.beta1, adam.beta2) == (0.5, 0.6)
    with pytest.raises(KeyError, match="momentum"):
        adam.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ArgumentError, match="lr"):
        group["lr"] = -1.0


def test_scheduler_and_param_groups_agree():
    opt = optim.SGD([ndl.Tensor(np.ones(3, np.float32))], lr=1.0)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.5 == sched.get_last_lr()[0]
