"""A training-loop fuzzer for needle.jit: random models x optimizers x schedulers x the
habits users have between and inside calls, each program run plainly and jitted (with
`verify` on every replay), compared bit for bit.

Verdicts: "equal" (and how many replays), "plain" (needle said it runs without capture:
allowed), "silent" (different results, no warning: the bug class this hunts), "error"
(the jitted run raised where the plain run did not, verify's JitError included).

    python tests/fuzz/training_loops.py --programs 500 --seed 0      # a long run, counts at the end
"""
from __future__ import annotations

import argparse
import functools
import random
import sys
import time
import warnings

import numpy as np

import needle as ndl
from needle import nn, optim
from needle.optim.lr_scheduler import StepLR

INSIDE = ["train-mode", "append", "np-noise", "hp-dict", "clip", "flag", "counter"]
BETWEEN = ["eval", "lr", "hp", "flag", "freeze", "reset-h", "clear-opt", "batch-size", "alias", "dropout-p",
           "momentum", "swap-layer", "state-dict", "grad-outside"]
STYLES = ["tensors", "numpy", "partial", "method", "kwargs", "dict-arg", "helper", "two-inputs"]
RETURNS = ["loss", "loss+input", "dict", "loss+shape"]


def program(seed: int) -> dict:
    """A random program: what the model, optimizer and loop are, and the habits of each call."""
    r = random.Random(seed)
    steps = r.randint(5, 9)
    p = {"seed": seed, "model": r.choice(["mlp", "mlp", "rnn", "residual"]),
         "norm": r.choice([None, "bn", "ln"]), "dropout": r.choice([0.0, 0.0, 0.3]),
         "opt": r.choice(["sgd", "momentum", "adam", "rmsprop"]), "wd": r.choice([0.0, 0.0, 1e-3]),
         "sched": r.choice([None, None, "outside", "inside"]), "style": r.choice(STYLES),
         "returns": r.choice(RETURNS), "inside": r.sample(INSIDE, r.choice([0, 0, 1, 2])), "steps": steps}
    rate = r.choice([0.03, 0.08, 0.15])
    p["between"] = [[h for h in BETWEEN if r.random() < rate] for _ in range(steps)]
    return p


class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.kind, self.flag, self.h = p["model"], False, None
        norm = {"bn": lambda: nn.BatchNorm1d(8), "ln": lambda: nn.LayerNorm1d(8), None: lambda: nn.Identity()}
        if self.kind == "rnn":
            self.cell = nn.RNNCell(6, 8)
        else:
            self.inp = nn.Linear(6, 8)
        self.body = nn.Sequential(norm[p["norm"]](), nn.ReLU(), nn.Dropout(p["dropout"]), nn.Linear(8, 8))
        self.head, self.aux = nn.Linear(8, 3), nn.Linear(6, 3)

    def forward(self, x):
        if self.kind == "rnn":
            self.h = self.cell(x, None if self.h is None else self.h.detach())
            z = self.h
        else:
            z = self.inp(x)
        z = self.body(z) + z if self.kind == "residual" else self.body(z)
        out = self.head(z)
        return out + self.aux(x) if self.flag else out


HELPER = {}


def helper_forward(x):
    return HELPER["model"](x)


def run(p: dict, use_jit: bool):
    """One run of program `p`: everything observable, as bytes and values."""
    np.random.seed(p["seed"] % 1000)
    model = Model(p)
    HELPER["model"] = model
    opts = {"sgd": lambda ps: optim.SGD(ps, lr=0.1, weight_decay=p["wd"]),
            "momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=p["wd"]),
            "adam": lambda ps: optim.Adam(ps, lr=0.01, weight_decay=p["wd"]),
            "rmsprop": lambda ps: optim.RMSprop(ps, lr=0.01, weight_decay=p["wd"])}
    opt = opts[p["opt"]](model.parameters())
    sched = StepLR(opt, step_size=2, gamma=0.7) if p["sched"] else None
    hp, seen, loss_fn, inside = {"scale": 1.0}, [], nn.SoftmaxLoss(), set(p["inside"])
    state = {"count": 0}

    def step(x, y, x2=None, opt=opt):
        if "train-mode" in inside:
            model.train()
        if "append" in inside:
            seen.append(1)
        if "counter" in inside:
            state["count"] += 1
        if "np-noise" in inside:
            x = x + ndl.Tensor(np.random.randn(*x.shape).astype("float32") * 0.01, requires_grad=False)
        if "flag" in inside:
            model.flag = True
        opt.reset_grad()
        out = helper_forward(x) if p["style"] == "helper" else model(x)
        if x2 is not None:
            out = out + model(x2) * 0.5
        loss = loss_fn(out * hp["scale"] if "hp-dict" in inside else out, y)
        loss.backward()
        if "clip" in inside:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if p["sched"] == "inside":
            sched.step()
        if p["returns"] == "loss+input":
            return loss, x
        if p["returns"] == "dict":
            return {"loss": loss, "n": x.shape[0]}
        if p["returns"] == "loss+shape":
            return loss, x.shape[0], state["count"]
        return loss

    style = p["style"]
    if style == "numpy":
        def body(xb, yb):
            return step(ndl.Tensor(xb, requires_grad=False), ndl.Tensor(yb, requires_grad=False))
    elif style == "partial":
        body = functools.partial(lambda o, x, y: step(x, y, opt=o), opt)
    elif style == "kwargs":
        def body(x, y):
            return step(x=x, y=y)
    elif style == "dict-arg":
        def body(batch):
            return step(batch["x"], batch["y"])
    elif style == "two-inputs":
        def body(x, x2, y):
            return step(x, y, x2=x2)
    elif style == "method":
        class Trainer:
            def train(self, x, y):
                return step(x, y)
        body = Trainer().train
    else:
        body = step
    fn = ndl.jit(body, verify=100) if use_jit else body

    rng, out, n = np.random.default_rng(p["seed"]), [], 4
    buf = (np.empty((n, 6), "float32"), np.empty(n, "float32"))
    np.random.seed(p["seed"] % 997)
    for i, habits in enumerate(p["between"]):
        for h in habits:
            if h == "eval":
                model.eval() if model.training else model.train()
            elif h == "lr":
                opt.lr *= 0.5
            elif h == "hp":
                hp["scale"] = hp["scale"] * 1.5
            elif h == "flag":
                model.flag = not model.flag
            elif h == "freeze":
                for q in model.head.parameters():
                    q.requires_grad = not q.requires_grad
            elif h == "reset-h":
                model.h = None
            elif h == "clear-opt":
                for name in type(opt)._state_names:
                    getattr(opt, name).clear()
            elif h == "batch-size":
                n = 5 if n == 4 else 4
                buf = (np.empty((n, 6), "float32"), np.empty(n, "float32"))
                model.h = None  # (a carried state has the batch size)
            elif h == "dropout-p":
                model.body.modules[2].p = 0.1 if model.body.modules[2].p != 0.1 else 0.4
            elif h == "momentum" and hasattr(opt, "momentum"):
                opt.momentum = 0.5 if opt.momentum == 0 else 0.0
            elif h == "swap-layer":
                np.random.seed(i)
                model.body.modules = model.body.modules[:3] + (nn.Linear(8, 8),)
            elif h == "state-dict":
                saved = {k: v.detach() for k, v in model.state_dict().items()}
                model.load_state_dict(saved)
            elif h == "grad-outside":
                opt.reset_grad()
        xs, ys = rng.standard_normal((n, 6)).astype("float32"), rng.integers(0, 3, n).astype("float32")
        if style == "numpy":
            buf[0][:], buf[1][:] = xs, ys
            args = buf
        else:
            x = ndl.Tensor(xs, requires_grad=False)
            args = (x, ndl.Tensor(ys, requires_grad=False))
            if style == "two-inputs":  # (the same tensor for both inputs, or another)
                other = x if "alias" in habits else ndl.Tensor(xs[::-1].copy(), requires_grad=False)
                args = (x, other, args[1])
        result = fn({"x": args[0], "y": args[1]}) if style == "dict-arg" else fn(*args)
        out.append(observe(result))
        if p["sched"] == "outside":
            sched.step()
    out.append([observe(q) for q in model.parameters()])
    out.append([observe(t) for _, t in sorted(opt.state_dict()["state"].items())])
    out.append((observe(model.h), model.training, model.flag, hp["scale"], len(seen), state["count"],
                float(opt.lr), np.random.get_state()[1].tobytes(), np.random.get_state()[2]))
    return out, fn


def observe(x):
    if isinstance(x, ndl.Tensor):
        return x.numpy().tobytes(), x.shape
    if isinstance(x, dict):
        return tuple((k, observe(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return tuple(observe(v) for v in x)
    return x


def verdict(p: dict):
    """("equal" | "plain" | "silent" | "error", detail)."""
    try:
        want, _ = run(p, False)
    except Exception as e:  # (an invalid program: both runs would fail alike)
        return "invalid", f"{type(e).__name__}: {e}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got, fn = run(p, True)
        except Exception as e:
            return "error", f"{type(e).__name__}: {e}"
    said = [str(w.message) for w in caught if "needle.jit" in str(w.message)]
    if got == want:
        return ("plain", said[0]) if said else ("equal", f"{fn.replays} replays")
    if said:
        return "plain", said[0]  # (ran plainly after a warning: differences before it are the user's)
    first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    return "silent", f"first difference in observation {first}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    counts, t0 = {}, time.perf_counter()
    with ndl.lazy(True):
        for seed in range(args.seed, args.seed + args.programs):
            kind, detail = verdict(program(seed))
            counts[kind] = counts.get(kind, 0) + 1
            if kind in ("silent", "error"):
                print(f"seed {seed}: {kind}: {detail}\n  {program(seed)}", flush=True)
    print(f"{args.programs} programs in {time.perf_counter() - t0:.0f} s: " +
          ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 1 if counts.get("silent") or counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
