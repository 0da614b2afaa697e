"""Training-step benchmark on the course's own models, the way a user runs them.

    python benchmarks/bench_training.py [--models mlp,mlpresnet,cnn,resnet9,lstm] [--steps N] [--quick]

For each model and mode a fresh process trains on random data and reports the
median step time (forward, backward, optimizer step and reading the loss), the
mean (which counts the occasional slow step: a full collection of Python's cycle
collector, a recompile), and the RSS growth in MB/step between step `warm` and the last step.  Modes:
`numpy backend` (NEEDLE_BACKEND=np), `eager` (NEEDLE_LAZY=0), `lazy` (the
default), `lazy+jit` (`needle.jit`), and `torch eager` when torch is installed.
Every process gets the same thread count; ratios are measured in this one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("tiny", "mlp", "mlpresnet", "cnn", "resnet9", "lstm")
MODES = ("numpy backend", "eager", "lazy", "lazy+jit", "torch eager")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


# ---- needle ---------------------------------------------------------------------------------
def needle_case(model_name: str, use_jit: bool):
    """(step function, (inputs...)) for one model; step(*inputs) -> loss as a float."""
    sys.path.insert(0, ROOT)
    import needle as ndl
    from needle import nn, optim
    rng = np.random.default_rng(0)
    np.random.seed(0)

    if model_name == "tiny":  # the cost of one realize: add two 16-float tensors
        a, b = (ndl.Tensor(rng.standard_normal(16).astype("float32"), requires_grad=False) for _ in range(2))

        def add(a, b):
            return a + b
        fn = ndl.jit(add) if use_jit else add
        return (lambda a, b: fn(a, b).realize()), (a, b), fn

    if model_name == "lstm":
        from examples.models import LanguageModel
        vocab, bptt, batch = 1000, 20, 16
        model = LanguageModel(32, vocab, 64, num_layers=2, seq_model="lstm")
        opt = optim.SGD(model.parameters(), lr=0.01)
        loss_fn = nn.SoftmaxLoss()
        x = ndl.Tensor(rng.integers(0, vocab, (bptt, batch)).astype("float32"), requires_grad=False)
        y = ndl.Tensor(rng.integers(0, vocab, (bptt * batch,)).astype("float32"), requires_grad=False)
        state = {"h": None}

        def body(x, y, h):
            opt.reset_grad()
            out, h = model(x, h)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            return loss, tuple(t.detach() for t in h)

        fn = ndl.jit(body) if use_jit else body

        def step(x, y):
            loss, state["h"] = fn(x, y, state["h"])
            return float(loss.numpy())
        return step, (x, y), fn

    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt, shape, batch = optim.SGD(model.parameters(), lr=0.1), (784,), 128
    elif model_name == "mlpresnet":
        from examples.mlp_resnet import MLPResNet
        model = MLPResNet(784, 100, num_blocks=3, drop_prob=0.1)
        opt, shape, batch = optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-3), (784,), 100
    elif model_name == "cnn":  # `needle train --model cnn`: NCHW convs, batch norms, max pools
        from needle.cli.train import build_model
        model = build_model("cnn")
        opt, shape, batch = optim.SGD(model.parameters(), lr=0.01), (784,), 128
    else:
        from examples.models import ResNet9
        model = ResNet9()
        opt, shape, batch = optim.SGD(model.parameters(), lr=0.01, momentum=0.9), (3, 32, 32), 16
    loss_fn = nn.SoftmaxLoss()
    model.train()
    x = ndl.Tensor(rng.standard_normal((batch,) + shape).astype("float32"), requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 10, batch).astype("float32"), requires_grad=False)

    def body(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = ndl.jit(body) if use_jit else body
    return (lambda x, y: float(fn(x, y).numpy())), (x, y), fn


# ---- torch ----------------------------------------------------------------------------------
def torch_case(model_name: str):
    import torch
    from torch import nn
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if model_name == "tiny":
        return (lambda a, b: a + b), tuple(torch.as_tensor(rng.standard_normal(16).astype("float32"))
                                           for _ in range(2))
    if model_name == "lstm":
        vocab, bptt, batch = 1000, 20, 16

        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.lstm, self.lin = nn.Embedding(vocab, 32), nn.LSTM(32, 64, 2), nn.Linear(64, vocab)

            def forward(self, x, h):
                out, h = self.lstm(self.emb(x), h)
                return self.lin(out.reshape(-1, 64)), h
        model = LM()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.as_tensor(rng.integers(0, vocab, (bptt, batch)))
        y = torch.as_tensor(rng.integers(0, vocab, (bptt * batch,)))
        state = {"h": None}

        def step(x, y):
            opt.zero_grad()
            out, h = model(x, state["h"])
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            state["h"] = tuple(t.detach() for t in h)
            return loss.item()
        return step, (x, y)
    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt, shape, batch = torch.optim.SGD(model.parameters(), lr=0.1), (784,), 128
    elif model_name == "mlpresnet":
        def block(dim, hidden):
            main = nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.1),
                                 nn.Linear(hidden, dim), nn.BatchNorm1d(dim))

            class Res(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.main = main

                def forward(self, x):
                    return torch.relu(x + self.main(x))
            return Res()
        model = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), *[block(100, 50) for _ in range(3)],
                              nn.Linear(100, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-3)
        shape, batch = (784,), 100
    elif model_name == "cnn":
        def stage(a, b):
            return [nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(), nn.MaxPool2d(2)]
        model = nn.Sequential(nn.Unflatten(1, (1, 28, 28)), *stage(1, 16), *stage(16, 32), nn.Flatten(),
                              nn.Linear(32 * 7 * 7, 10))
        opt, shape, batch = torch.optim.SGD(model.parameters(), lr=0.01), (784,), 128
    else:
        def cbn(a, b, k, s):
            return nn.Sequential(nn.Conv2d(a, b, k, s, k // 2), nn.BatchNorm2d(b), nn.ReLU())

        class Res(nn.Module):
            def __init__(self, f):
                super().__init__()
                self.f = f

            def forward(self, x):
                return x + self.f(x)
        model = nn.Sequential(cbn(3, 16, 7, 4), cbn(16, 32, 3, 2), Res(nn.Sequential(cbn(32, 32, 3, 1), cbn(32, 32, 3, 1))),
                              cbn(32, 64, 3, 2), cbn(64, 128, 3, 2),
                              Res(nn.Sequential(cbn(128, 128, 3, 1), cbn(128, 128, 3, 1))),
                              nn.Flatten(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        shape, batch = (3, 32, 32), 16
    model.train()
    x = torch.as_tensor(rng.standard_normal((batch,) + shape).astype("float32"))
    y = torch.as_tensor(rng.integers(0, 10, batch))

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step, (x, y)


# ---- one process: one model in one mode -----------------------------------------------------
def worker(model_name: str, mode: str, steps: int, warm: int, budget: float, threads: int) -> dict:
    if mode == "torch eager":
        import torch
        torch.set_num_threads(threads)
        step, inputs = torch_case(model_name)
    else:
        step, inputs, fn = needle_case(model_name, use_jit=(mode == "lazy+jit"))
    times, rss_at_warm, start = [], None, time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        loss = step(*inputs)
        times.append(time.perf_counter() - t0)
        if model_name == "tiny":
            loss = 0.0
        if i == warm:
            rss_at_warm = rss_mb()
        elapsed = time.perf_counter() - start
        if (elapsed > budget and i >= warm + 10) or elapsed > 3 * budget:
            break
    if not np.isfinite(loss):
        raise RuntimeError(f"{model_name} in {mode}: the loss is {loss}")
    done = len(times)
    growth = (rss_mb() - rss_at_warm) / (done - 1 - warm) if rss_at_warm is not None and done - 1 > warm else float("nan")
    steady = times[min(warm, done // 2):]
    return {"median_ms": statistics.median(steady) * 1e3, "mean_ms": statistics.fmean(steady) * 1e3,
            "first_ms": times[0] * 1e3, "steps": done,
            "rss_mb_per_step": growth, "loss": loss,
            "guard_us": guard_cost(fn) if mode == "lazy+jit" else None}


def guard_cost(fn) -> float:
    """Microseconds a replay of the step spends deciding that its capture still holds
    (`CapturedStep.why_not`: the world's guards; needle.jit's contract)."""
    steps = [s for captures in getattr(fn, "captures", {}).values() for s in captures]
    if not steps:
        return float("nan")
    step, best = steps[-1], float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            step.why_not()
        best = min(best, (time.perf_counter() - t0) / 200 * 1e6)
    return best


def _time(ms: float) -> str:
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def environment(mode: str, threads: int) -> dict:
    env = dict(os.environ)
    env["NEEDLE_THREADS"] = env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if mode == "numpy backend":
        env["NEEDLE_BACKEND"] = "np"
    elif mode == "eager":
        env["NEEDLE_LAZY"] = "0"
    return env


def available_modes() -> list:
    modes = list(MODES)
    try:
        import needle
        if not hasattr(needle, "jit"):
            modes.remove("lazy+jit")
    except ImportError:
        pass
    try:
        import torch  # noqa: F401
    except ImportError:
        modes.remove("torch eager")
    return modes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--modes", default=None, help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("--steps", type=int, default=250, help="steps per run (RSS growth is measured from --warm on)")
    ap.add_argument("--warm", type=int, default=50)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per run at most")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--quick", action="store_true", help="30 steps, 10 warm, 20 s per run")
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.steps, args.warm, args.budget = 30, 10, 20.0
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.warm, args.budget, args.threads)))
        return
    modes = args.modes.split(",") if args.modes else available_modes()
    coretype = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    from bench_cpu import parallel_capacity  # this directory is on sys.path when run as a script
    print(f"bench_training: {args.threads} threads per process, {args.steps} steps (RSS growth from step "
          f"{args.warm}), numpy {np.__version__} with {coretype}; {args.threads} busy processes got "
          f"{parallel_capacity(args.threads):.2f} cores' worth")
    results = {}
    for model in args.models.split(","):
        for mode in modes:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", model, mode, "--steps", str(args.steps),
                   "--warm", str(args.warm), "--budget", str(args.budget), "--threads", str(args.threads)]
            proc = subprocess.run(cmd, env=environment(mode, args.threads), capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"  {model} / {mode}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            results[(model, mode)] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"  {model:<10} {mode:<14} {_time(results[(model, mode)]['median_ms'])}", file=sys.stderr)
    header = (f"{'model':<10} {'mode':<14} {'median step':>12} {'mean step':>10} {'vs numpy be':>12} {'vs torch':>9} "
              f"{'RSS MB/step':>12} {'steps':>6} {'guard us':>9}")
    print(header)
    print("-" * len(header))
    for model in args.models.split(","):
        ref_np = results.get((model, "numpy backend"), {}).get("median_ms")
        ref_torch = results.get((model, "torch eager"), {}).get("median_ms")
        for mode in modes:
            r = results.get((model, mode))
            if r is None:
                print(f"{model:<10} {mode:<14} {'failed':>12}")
                continue
            vs_np = f"{r['median_ms'] / ref_np:11.2f}x" if ref_np else f"{'-':>12}"
            vs_t = f"{r['median_ms'] / ref_torch:8.2f}x" if ref_torch else f"{'-':>9}"
            guard = f"{r['guard_us']:9.1f}" if r.get("guard_us") is not None else f"{'-':>9}"
            print(f"{model:<10} {mode:<14} {_time(r['median_ms']):>12} {_time(r['mean_ms']):>10} {vs_np} {vs_t} {r['rss_mb_per_step']:12.3f} "
                  f"{r['steps']:6d} {guard}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{m}|{mode}": r for (m, mode), r in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
