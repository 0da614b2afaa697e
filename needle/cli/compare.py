"""`python -m needle compare`: the built-in workloads in three modes, side by side.

Modes: eager numpy (`cpu_numpy()`, op by op in numpy), eager compiled (the chosen
device with lazy mode off: one compiled kernel per primitive, but a training step's
backward pass and optimizer update, one schedule each) and lazy fused
(lazy mode on: the whole step compiled into few fused kernels).  For each we
report the median time of one iteration after warm-up, the speed-up over eager
numpy, the kernels launched per iteration and the one-off compile time (the
first iteration's extra time, kept apart from the median).  The three modes'
results of the first iteration are compared numerically.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from .. import runtime
from ..backend_selection import cpu, cpu_numpy, cuda
from ..realize import lazy, realize
from .workloads import WORKLOADS, get

MODES = ("eager numpy", "eager compiled", "lazy fused", "lazy jit")
RTOL, ATOL = 2e-3, 2e-4


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", action="append", metavar="NAME",
                   help=f"run only these (repeatable or comma-separated): {', '.join(WORKLOADS)}")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="device of the compiled modes")
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats (under a minute)")
    p.add_argument("--repeats", type=int, default=None, help="timed iterations per mode")
    p.add_argument("--json", metavar="FILE", help="write all numbers as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="write a bar chart (log scale)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")


def modes_of(workload_cls) -> tuple:
    """Training steps also run captured (`needle.jit`: replayed without Python)."""
    return MODES if getattr(workload_cls, "captured", False) else MODES[:3]


def measure(workload_cls, mode: str, device, quick: bool, repeats: int, budget_s: float) -> dict:
    """Time one workload in one mode; returns times (s), kernels, compile and outputs."""
    with lazy(mode.startswith("lazy")):
        w = workload_cls(cpu_numpy() if mode == "eager numpy" else device, quick=quick)
        if mode == "lazy jit":
            from ..captured.function import jit
            w.step = jit(w.step)
        before = runtime.stats()
        t0 = time.perf_counter()
        outs = w.step()
        realize(*outs)
        first = time.perf_counter() - t0
        compiled = runtime.stats()
        outputs = [o.numpy() for o in outs]
        for _ in range(2 if mode == "lazy jit" else 1):  # warm-up: caches, allocator, threads (jit: the
            realize(*w.step())                          # capture, then its first replay, checked)
        times, kernels = [], []
        start = time.perf_counter()
        while len(times) < repeats and (len(times) < 3 or time.perf_counter() - start < budget_s):
            s0 = runtime.stats()["kernels_launched"]
            t = time.perf_counter()
            realize(*w.step())
            times.append(time.perf_counter() - t)
            kernels.append(runtime.stats()["kernels_launched"] - s0)
    median = statistics.median(times)
    return dict(median_s=median, min_s=min(times), first_s=first, repeats=len(times),
                compile_s=max(first - median, 0.0) if mode != "eager numpy" else 0.0,
                jit_compile_s=compiled["compile_seconds"] - before["compile_seconds"],
                kernels_compiled=compiled["kernels_compiled"] - before["kernels_compiled"],
                kernels=int(statistics.median(kernels)) if mode != "eager numpy" else None,
                flops=w.flops(), outputs=outputs)


def agreement(results: dict) -> tuple:
    """(ok, worst relative error) of the compiled modes against eager numpy."""
    ref = results["eager numpy"]["outputs"]
    worst, ok = 0.0, True
    for mode in list(results)[1:]:
        for a, b in zip(results[mode]["outputs"], ref):
            scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-6)
            worst = max(worst, float(np.max(np.abs(a - b))) / scale if b.size else 0.0)
            ok = ok and np.allclose(a, b, rtol=RTOL, atol=ATOL * scale, equal_nan=True)
    return ok, worst


def run(args) -> dict:
    names = []
    for item in args.workload or list(WORKLOADS):
        names.extend(n.strip() for n in item.split(",") if n.strip())
    classes = [get(n) for n in names]
    device = cuda() if args.device == "cuda" else cpu()
    if args.device == "cuda" and not device.enabled():
        from ..runtime import cuda as cuda_runtime
        raise ValueError(f"--device cuda: {cuda_runtime.available()[1]}")
    repeats = args.repeats or (5 if args.quick else 20)
    budget = 1.0 if args.quick else 4.0
    report = dict(device=str(device), quick=bool(args.quick), machine=machine(), workloads={})
    total = sum(len(modes_of(cls)) for cls in classes)
    done = 0
    for cls in classes:
        results = {}
        for mode in modes_of(cls):
            done += 1
            if not args.no_progress:
                print(f"[{done}/{total}] {cls.name}: {mode} ...", file=sys.stderr, flush=True)
            results[mode] = measure(cls, mode, device, args.quick, repeats, budget)
        ok, worst = agreement(results)
        base = results["eager numpy"]["median_s"]
        entry = dict(description=cls.description, agree=ok, max_rel_error=worst, modes={})
        for mode, r in results.items():
            r = {k: v for k, v in r.items() if k != "outputs"}
            r["speedup"] = base / r["median_s"]
            if r["flops"]:
                r["gflops"] = r["flops"] / r["median_s"] / 1e9
            entry["modes"][mode] = r
        report["workloads"][cls.name] = entry
    print(table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return report


def table(report: dict) -> str:
    lines = [f"needle compare on {report['device']} ({'quick' if report['quick'] else 'full'} sizes; "
             f"{report['machine']['cpu']}, {report['machine']['threads']} threads)",
             f"{'workload':<18} {'mode':<15} {'median':>10} {'vs numpy':>9} {'kernels':>8} {'compile':>9}",
             "-" * 74]
    for name, entry in report["workloads"].items():
        for i, (mode, r) in enumerate(entry["modes"].items()):
            kernels = "-" if r["kernels"] is None else str(r["kernels"])
            compile_s = "-" if mode == "eager numpy" else f"{r['compile_s']:.2f} s"
            lines.append(f"{name if i == 0 else '':<18} {mode:<15} {_ms(r['median_s']):>10} "
                         f"{r['speedup']:>8.2f}x {kernels:>8} {compile_s:>9}")
        verdict = "agree" if entry["agree"] else "DISAGREE"
        lines.append(f"{'':<18} results {verdict} (max relative difference {entry['max_rel_error']:.1e})")
    all_ok = all(e["agree"] for e in report["workloads"].values())
    lines.append("all modes agree numerically" if all_ok else "WARNING: some modes disagree (see above)")
    lines.append("median of timed iterations after warm-up; compile = first iteration's extra time")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"


def plot(report: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(report["workloads"])
    fig, ax = plt.subplots(figsize=(1.8 * len(names) + 2, 4.5))
    width = 0.2
    for k, mode in enumerate(MODES):
        values = [report["workloads"][n]["modes"].get(mode, {}).get("median_s", 0.0) * 1e3 for n in names]
        ax.bar(np.arange(len(names)) + (k - 1.5) * width, values, width, label=mode)
    ax.set_yscale("log")
    ax.set_ylabel("median time per iteration (ms, log scale)")
    ax.set_xticks(np.arange(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_title(f"needle compare ({report['device']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine() -> dict:
    from .. import config
    return dict(cpu=platform.processor() or platform.machine(), threads=config.THREADS,
                python=platform.python_version(), numpy=np.__version__,
                openblas_env={k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
                              if k in os.environ})
