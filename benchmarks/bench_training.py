"""Training-step benchmark on the course's own models, the way a user runs them, beside the
peers a user would pick.

    python benchmarks/bench_training.py [--models mlp,mlpresnet,cnn,resnet9,lstm,transformer] [--modes LIST]
        [--steps N] [--quick] [--background-load 0,1,2] [--cold-modes LIST] [--check] [--json FILE]

For each model and mode a fresh process trains on random data (the same batch at every
step) and reports the median step time after --warm steps (forward, backward, optimizer
step and reading the loss), the mean (which counts the occasional slow step: a full
collection of Python's cycle collector, a recompile), the first step's time, and the RSS
growth in MB/step between step `warm` and the last step.  Modes: `numpy backend`
(NEEDLE_BACKEND=np), `eager` (NEEDLE_LAZY=0), `lazy` (the default), `lazy+jit`
(`needle.jit`), and the peers `torch eager`, `torch.compile` and `jax.jit` (jax + optax)
when they import; their models are in training_peers.py (same architectures, batch sizes,
data and optimizers).  Every process gets the same thread count: NEEDLE_THREADS,
OMP/OPENBLAS/MKL_NUM_THREADS, torch.set_num_threads, and PJRT_NPROC for jax (its CPU
client sizes its thread pools from it; XLA_FLAGS' intra_op_parallelism_threads had no
effect on jax 0.10).  The `threads` column says how many threads of the process ran at
least a fifth of its busiest thread's CPU time over the measured steps (and untimed ones
after them up to 0.5 s), and in parentheses the process's CPU time / wall time.

`1st step` is the first step with the caches as they are (needle's kernel cache, torch's
inductor cache); `cold 1st` is the first step of another process whose caches start
empty (NEEDLE_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR set to a fresh temporary folder; jax keeps
no compilation cache unless JAX_COMPILATION_CACHE_DIR is set, so its first step is cold).
`jit/best peer` = needle lazy+jit's median / the smallest median of torch eager,
torch.compile and jax.jit.

--background-load N runs every process beside N busy processes (pure-Python loops, ended
when the model's runs end, and by themselves when this script is gone); a list (0,1,2)
runs each model at each load and prints one table per load and a comparison of medians.
--check compares the first step's loss of every implementation with log(classes) and
with each other, and checks that the loss went down.
"""
from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]  # this checkout's needle and examples
from training_peers import LANGUAGE_MODELS, SPECS, make_data  # noqa: E402

MODELS = ("tiny", "mlp", "mlpresnet", "cnn", "resnet9", "lstm", "transformer")
NEEDLE_MODES = ("numpy backend", "eager", "lazy", "lazy+jit")
PEERS = ("torch eager", "torch.compile", "jax.jit")
MODES = NEEDLE_MODES + PEERS
COLD_MODES = ("lazy+jit", "torch.compile", "jax.jit")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def thread_cpu() -> dict:
    """{thread id: CPU seconds} of this process's threads (Linux's schedstat), {} elsewhere."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return out


def thread_usage(before: dict, after: dict, wall: float):
    """(threads that ran at least a fifth of the busiest one's CPU time, total CPU time / wall)
    between two thread_cpu()s (relative, so that a loaded machine, which gives every
    thread less, still counts the threads that computed)."""
    if not before or not after or wall <= 0:
        return None, None
    used = [after[t] - before.get(t, 0.0) for t in after]
    return sum(1 for u in used if u > 0 and u >= 0.2 * max(used)), sum(used) / wall


# ---- needle ---------------------------------------------------------------------------------
def needle_optimizer(params, model_name: str):
    from needle import optim
    name, lr, momentum, wd = SPECS[model_name]["opt"]
    if name == "adam":
        return optim.Adam(params, lr=lr, weight_decay=wd)
    return optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)


def needle_case(model_name: str, use_jit: bool):
    """(step function, (inputs...), jitted function or the body) for one model; step(*inputs) -> loss as a float."""
    import needle as ndl
    from needle import nn
    np.random.seed(0)
    data = make_data(model_name)

    if model_name == "tiny":  # the cost of one realize: add two 16-float tensors
        a, b = (ndl.Tensor(d, requires_grad=False) for d in data)

        def add(a, b):
            return a + b
        fn = ndl.jit(add) if use_jit else add
        return (lambda a, b: fn(a, b).realize()), (a, b), fn

    spec = SPECS[model_name]
    loss_fn = nn.SoftmaxLoss()
    if model_name in LANGUAGE_MODELS:
        from examples.models import LanguageModel
        x, y = (ndl.Tensor(d.astype("float32"), requires_grad=False) for d in data)
        if model_name == "lstm":
            model = LanguageModel(spec["embedding"], spec["classes"], spec["hidden"], num_layers=spec["layers"],
                                  seq_model="lstm")
        else:  # hw4_extra's LanguageModel(seq_model="transformer"), with the heads and Dropout of SPECS
            model = LanguageModel(spec["embedding"], spec["classes"], spec["hidden"], num_layers=spec["layers"],
                                  seq_model="transformer", seq_len=spec["seq"])
            model.seq_model = nn.Transformer(spec["embedding"], spec["hidden"], spec["layers"], num_head=spec["heads"],
                                             dim_head=spec["dim_head"], dropout=spec["drop"], causal=True,
                                             sequence_len=spec["seq"])
        model.train()
        opt = needle_optimizer(model.parameters(), model_name)
        if model_name == "transformer":
            def body(x, y):
                opt.reset_grad()
                out, _ = model(x)
                loss = loss_fn(out, y)
                loss.backward()
                opt.step()
                return loss
            fn = ndl.jit(body) if use_jit else body
            return (lambda x, y: float(fn(x, y).numpy())), (x, y), fn

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
    elif model_name == "mlpresnet":
        from examples.mlp_resnet import MLPResNet
        model = MLPResNet(784, spec["hidden"], num_blocks=spec["blocks"], drop_prob=spec["drop"])
    elif model_name == "cnn":  # `needle train --model cnn`: NCHW convs, batch norms, max pools
        from needle.cli.train import build_model
        model = build_model("cnn")
    else:
        from examples.models import ResNet9
        model = ResNet9()
    opt = needle_optimizer(model.parameters(), model_name)
    model.train()
    x = ndl.Tensor(data[0], requires_grad=False)
    y = ndl.Tensor(data[1].astype("float32"), requires_grad=False)

    def body(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = ndl.jit(body) if use_jit else body
    return (lambda x, y: float(fn(x, y).numpy())), (x, y), fn


# ---- one process: one model in one mode -----------------------------------------------------
def worker(model_name: str, mode: str, steps: int, warm: int, budget: float, threads: int) -> dict:
    fn = None
    if mode in ("torch eager", "torch.compile"):
        import torch
        torch.set_num_threads(threads)
        from training_peers import torch_case
        step, inputs = torch_case(model_name, compiled=(mode == "torch.compile"))
    elif mode == "jax.jit":
        from training_peers import jax_case
        step, inputs = jax_case(model_name)
    else:
        step, inputs, fn = needle_case(model_name, use_jit=(mode == "lazy+jit"))
    times, losses, rss_at_warm = [], [], None
    cpu_first = cpu_warm = None
    start = t_first = t_warm = time.perf_counter()
    for i in range(steps):
        if i == warm:
            cpu_warm, t_warm = thread_cpu(), time.perf_counter()
        t0 = time.perf_counter()
        loss = step(*inputs)
        times.append(time.perf_counter() - t0)
        loss = 0.0 if model_name == "tiny" else loss
        losses.append(loss)
        if not math.isfinite(loss):
            raise RuntimeError(f"{model_name} in {mode}: the loss at step {i + 1} is {loss}")
        if i == 0:  # the budget counts from here: a first step that compiles does not eat it
            cpu_first, start = thread_cpu(), time.perf_counter()
            t_first = start
        if i == warm:
            rss_at_warm = rss_mb()
        elapsed = time.perf_counter() - start
        if (elapsed > budget and i >= warm + 10) or elapsed > 3 * budget:
            break
    done = len(times)
    growth = (rss_mb() - rss_at_warm) / (done - 1 - warm) if rss_at_warm is not None and done - 1 > warm else float("nan")
    # the threads' CPU time over the measured steps, and over untimed steps after them until
    # the window is 0.5 s long (a few fast steps are too short a window to read)
    cpu_start, t_start = (cpu_warm, t_warm) if cpu_warm is not None else (cpu_first, t_first)
    for _ in range(10_000):
        if time.perf_counter() - t_start >= 0.5 or done < 2:
            break
        step(*inputs)
    used, cpu_per_wall = thread_usage(cpu_start, thread_cpu(), time.perf_counter() - t_start)
    steady = times[min(warm, done // 2):]
    return {"median_ms": statistics.median(steady) * 1e3, "mean_ms": statistics.fmean(steady) * 1e3,
            "first_ms": times[0] * 1e3, "first_steps_ms": [t * 1e3 for t in times[:3]], "steps": done,
            "rss_mb_per_step": growth, "first_loss": losses[0], "loss": losses[-1],
            "threads_used": used, "cpu_per_wall": cpu_per_wall,
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


def environment(mode: str, threads: int, cold_dir: str = None) -> dict:
    env = dict(os.environ)
    for var in ("NEEDLE_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PJRT_NPROC"):
        env[var] = str(threads)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if mode == "numpy backend":
        env["NEEDLE_BACKEND"] = "np"
    elif mode == "eager":
        env["NEEDLE_LAZY"] = "0"
    if cold_dir is not None:  # every compilation cache starts empty
        env["NEEDLE_CACHE_DIR"] = os.path.join(cold_dir, "needle")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cold_dir, "inductor")
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def available_modes() -> list:
    modes = list(MODES)
    try:
        import needle
        if not hasattr(needle, "jit"):
            modes.remove("lazy+jit")
    except ImportError:
        pass
    for mode, module in (("torch eager", "torch"), ("torch.compile", "torch"), ("jax.jit", "jax"), ("jax.jit", "optax")):
        try:
            __import__(module)
        except ImportError:
            if mode in modes:
                modes.remove(mode)
    return modes


# ---- background load --------------------------------------------------------------------------
def busy(seconds: float, parent: int) -> None:
    """Spin in pure Python for `seconds` at most, and stop as soon as `parent` is gone."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end and os.getppid() == parent:
        for _ in range(100_000):
            n += 1


class BackgroundLoad:
    """`n` busy processes (this script with --busy) while the block runs; each ends when the
    block ends (also on an error or SIGTERM: atexit), when `seconds` have passed or when
    this process is gone."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds, self.procs = n, seconds, []

    def __enter__(self) -> "BackgroundLoad":
        atexit.register(self.stop)
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--busy", f"{self.seconds:.0f}",
                                                str(os.getpid())], stdin=subprocess.DEVNULL))
        time.sleep(0.2 if self.n else 0)  # let them start spinning
        return self

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = []

    def __exit__(self, *exc) -> None:
        self.stop()
        atexit.unregister(self.stop)


# ---- the table ------------------------------------------------------------------------------
def _time(ms) -> str:
    if ms is None or not math.isfinite(ms):
        return "-"
    if ms >= 1000:
        return f"{ms / 1e3:.2f} s" if ms < 10_000 else f"{ms / 1e3:.1f} s"
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def best_peer(results: dict, level: int, model: str):
    """(lazy+jit median / the best peer's median, that peer) or None."""
    jit = results.get((level, model, "lazy+jit"), {}).get("median_ms")
    peers = [(results[(level, model, p)]["median_ms"], p) for p in PEERS if (level, model, p) in results]
    if jit is None or not peers:
        return None
    ms, peer = min(peers)
    return jit / ms, peer


def print_table(results: dict, level: int, models: list, modes: list) -> None:
    header = (f"{'model':<11} {'mode':<14} {'median':>9} {'mean':>9} {'1st step':>9} {'cold 1st':>9} {'vs numpy':>9} "
              f"{'vs torch':>9} {'jit/best peer':>20} {'RSS MB/step':>11} {'steps':>5} {'guard us':>8} {'threads':>10}")
    print(header)
    print("-" * len(header))
    for model in models:
        ref_np = results.get((level, model, "numpy backend"), {}).get("median_ms")
        ref_torch = results.get((level, model, "torch eager"), {}).get("median_ms")
        for mode in modes:
            r = results.get((level, model, mode))
            if r is None:
                print(f"{model:<11} {mode:<14} {'failed':>9}")
                continue
            vs_np = f"{r['median_ms'] / ref_np:8.2f}x" if ref_np else f"{'-':>9}"
            vs_t = f"{r['median_ms'] / ref_torch:8.2f}x" if ref_torch else f"{'-':>9}"
            ratio = best_peer(results, level, model) if mode == "lazy+jit" else None
            peer = f"{ratio[0]:.2f}x {ratio[1]}" if ratio else "-"
            guard = f"{r['guard_us']:8.1f}" if r.get("guard_us") is not None else f"{'-':>8}"
            threads = (f"{r['threads_used']} ({r['cpu_per_wall']:.1f})" if r.get("threads_used") is not None else "-")
            print(f"{model:<11} {mode:<14} {_time(r['median_ms']):>9} {_time(r['mean_ms']):>9} {_time(r['first_ms']):>9} "
                  f"{_time(r.get('cold_first_ms')):>9} {vs_np} {vs_t} {peer:>20} {r['rss_mb_per_step']:11.3f} "
                  f"{r['steps']:5d} {guard} {threads:>10}")


def print_comparison(results: dict, levels: list, models: list, modes: list) -> None:
    """Per model and mode, the median at each load, and the last load's over the first's."""
    cols = [f"{n} busy" for n in levels]
    last = f"{levels[-1]}/{levels[0]} busy"
    header = f"{'model':<11} {'mode':<14} " + " ".join(f"{c:>10}" for c in cols) + f" {last:>11}"
    print(header)
    print("-" * len(header))
    for model in models:
        for mode in list(modes) + ["jit/best peer"]:
            if mode == "jit/best peer":
                vals = [best_peer(results, n, model) for n in levels]
                cells = [f"{v[0]:.2f}x" if v else "-" for v in vals]
                growth = vals[-1][0] / vals[0][0] if vals[0] and vals[-1] else None
            else:
                vals = [results.get((n, model, mode), {}).get("median_ms") for n in levels]
                cells = [_time(v) if v is not None else "failed" for v in vals]
                growth = vals[-1] / vals[0] if vals[0] and vals[-1] else None
            if mode == "jit/best peer" and not any(vals):
                continue
            print(f"{model:<11} {mode:<14} " + " ".join(f"{c:>10}" for c in cells)
                  + f" {(f'{growth:.2f}x' if growth else '-'):>11}")


def check(results: dict, levels: list, models: list, modes: list) -> bool:
    """Every implementation's first-step loss in the ballpark of log(classes) (0.5x to 3x: the
    course's kaiming init, which the peers use too, starts above log(classes)) and within
    1.35x of each other's (same architecture, same init distributions, other random draws);
    the loss lower at the last step than at the first.  Prints a table; True when all hold."""
    ok = True
    print("check: first-step loss (last loss) of each implementation, against log(classes) and each other")
    for model in models:
        if model == "tiny":
            continue
        expected = math.log(SPECS[model]["classes"])
        runs = {(n, mode): results[(n, model, mode)] for n in levels for mode in modes if (n, model, mode) in results}
        if not runs:
            continue
        firsts = [r["first_loss"] for r in runs.values()]
        problems = []
        far = [f"{mode}@{n}busy" for (n, mode), r in runs.items() if not 0.5 * expected <= r["first_loss"] <= 3 * expected]
        if far:
            problems.append(f"first loss outside 0.5x..3x log({SPECS[model]['classes']}) = {expected:.2f}: {', '.join(far)}")
        if max(firsts) > 1.35 * min(firsts):
            problems.append(f"first losses disagree: {min(firsts):.3f} .. {max(firsts):.3f}")
        flat = [f"{mode}@{n}busy" for (n, mode), r in runs.items() if r["steps"] >= 5 and not r["loss"] < r["first_loss"]]
        if flat:
            problems.append(f"loss did not go down: {', '.join(flat)}")
        cells = ", ".join(f"{mode} {r['first_loss']:.3f} ({r['loss']:.3f})" for (n, mode), r in runs.items() if n == levels[0])
        print(f"  {model:<11} log(C) {expected:.2f}  {'ok' if not problems else 'FAILED'}: {cells}")
        for p in problems:
            print(f"      {p}")
        ok = ok and not problems
    return ok


# ---- main -----------------------------------------------------------------------------------
def run_worker(model: str, mode: str, args, cold: bool = False):
    steps, warm = (3, 1) if cold else (args.steps, args.warm)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model, mode, "--steps", str(steps),
           "--warm", str(warm), "--budget", str(args.budget), "--threads", str(args.threads)]
    cold_dir = tempfile.mkdtemp(prefix="bench-training-cold-") if cold else None
    try:
        proc = subprocess.run(cmd, env=environment(mode, args.threads, cold_dir), capture_output=True, text=True)
    finally:
        if cold_dir:
            shutil.rmtree(cold_dir, ignore_errors=True)
    if proc.returncode != 0:
        print(f"  {model} / {mode}{' (cold)' if cold else ''}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # so that `finally` and atexit stop the busy processes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--modes", default=None, help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("--steps", type=int, default=250, help="steps per run (RSS growth is measured from --warm on)")
    ap.add_argument("--warm", type=int, default=50, help="steps left out of the median")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds per run after its first step (it stops after --warm + 10 steps past this, or at 3x)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--quick", action="store_true", help="30 steps, 10 warm, 20 s per run")
    ap.add_argument("--background-load", default="0", metavar="N[,N...]",
                    help="busy processes beside every run; several (0,1,2): each model at each load, and a comparison")
    ap.add_argument("--cold-modes", default=",".join(COLD_MODES),
                    help="modes also run once with empty compilation caches for the `cold 1st` column ('' for none, "
                         f"'all'; default {','.join(COLD_MODES)})")
    ap.add_argument("--check", action="store_true",
                    help="check that every implementation's first loss is near log(classes) and the others', and "
                         "that the loss goes down; exit 1 if not")
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--busy", nargs=2, type=float, metavar=("SECONDS", "PARENT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.busy:
        busy(args.busy[0], int(args.busy[1]))
        return
    if args.quick:
        args.steps, args.warm, args.budget = 30, 10, 20.0
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.warm, args.budget, args.threads)))
        return
    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}; choose from {', '.join(MODELS)}")
    available = available_modes()
    if args.modes:
        modes = args.modes.split(",")
        for m in modes:
            if m not in MODES:
                ap.error(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
        skipped = [m for m in modes if m not in available]
        modes = [m for m in modes if m in available]
    else:
        modes, skipped = available, [m for m in MODES if m not in available]
    cold_modes = set(MODES if args.cold_modes == "all" else filter(None, args.cold_modes.split(",")))
    levels = [int(n) for n in args.background_load.split(",")]
    signal.signal(signal.SIGTERM, _on_sigterm)

    from bench_cpu import parallel_capacity  # this directory is on sys.path
    coretype = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    jax_cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    print(f"bench_training: {args.threads} threads per process (NEEDLE_THREADS, OMP/OPENBLAS/MKL_NUM_THREADS, "
          f"torch.set_num_threads, jax PJRT_NPROC={args.threads}), {args.steps} steps, median after {args.warm} "
          f"(RSS growth from there),\n  {args.budget:.0f} s per run after its first step; numpy {np.__version__} with "
          f"{coretype}; background load: {', '.join(str(n) for n in levels)} busy processes")
    if skipped:
        print(f"  skipped (not importable): {', '.join(skipped)}")
    results, capacity = {}, {}
    runs_per_block = len(modes) + len(cold_modes & set(modes))
    for model in models:
        for level in levels:
            with BackgroundLoad(level, seconds=runs_per_block * (3 * args.budget + 900)):
                if level not in capacity:
                    capacity[level] = parallel_capacity(args.threads)
                for mode in modes:
                    r = run_worker(model, mode, args)
                    if r is None:
                        continue
                    if mode in cold_modes:
                        if mode == "jax.jit" and not jax_cache:
                            r["cold_first_ms"] = r["first_ms"]  # no persistent cache: its first step is cold
                        else:
                            cold = run_worker(model, mode, args, cold=True)
                            if cold is not None:
                                r["cold_first_ms"], r["cold_first_steps_ms"] = cold["first_ms"], cold["first_steps_ms"]
                    results[(level, model, mode)] = r
                    print(f"  {model:<11} {mode:<14} {level} busy  median {_time(r['median_ms'])}  1st "
                          f"{_time(r['first_ms'])}  cold 1st {_time(r.get('cold_first_ms'))}", file=sys.stderr)
    for level in levels:
        print(f"\nbackground load: {level} busy processes (pure-Python loops); beside them {args.threads} spinning "
              f"processes got {capacity[level]:.2f} cores' worth")
        print_table(results, level, models, modes)
    if len(levels) > 1:
        print("\nmedian step by background load (busy processes beside each run)")
        print_comparison(results, levels, models, modes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "steps": args.steps, "warm": args.warm, "background_load": levels,
                       "capacity": {str(n): c for n, c in capacity.items()},
                       "results": [dict(model=m, mode=mode, busy=n, **r) for (n, m, mode), r in results.items()]},
                      f, indent=1)
    if args.check:
        print()
        if not check(results, levels, models, modes):
            sys.exit(1)


if __name__ == "__main__":
    main()
