"""How needle's thread team holds up beside busy processes.

    python benchmarks/bench_threads_under_load.py [--models mlp,mlpresnet,transformer] [--loads 0,1,2]
        [--runs 3] [--seconds 3]

For each load (that many pure-Python busy processes, bench_training's BackgroundLoad) and
each model's captured step (bench_training's needle cases, `lazy+jit`), three settings run
in alternation, each in a fresh process that warms up and then counts the steps it
finishes in `--seconds`: `NEEDLE_THREADS=1`, the default (the team sized from the cores
other processes leave free, runtime/team.py) and `NEEDLE_ADAPT_THREADS=0` (every launch on
all the CPUs, as before the team adapted).  More steps is better; on a shared VM single
runs swing, so each setting runs `--runs` times and the table prints every count and
their mean.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_training import BackgroundLoad, environment, needle_case  # noqa: E402

SETTINGS = {"NEEDLE_THREADS=1": {"NEEDLE_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
            "default": {}, "NEEDLE_ADAPT_THREADS=0": {"NEEDLE_ADAPT_THREADS": "0"}}


def count_steps(model: str, seconds: float) -> int:
    """Steps of the captured step finished in `seconds`, after warming up (and a pause, so
    the team's readings of the compile spell have aged out, as in a longer loop)."""
    step, inputs, _ = needle_case(model, use_jit=True)
    for _ in range(10):
        step(*inputs)
    time.sleep(0.4)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        step(*inputs)
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,mlpresnet,transformer")
    ap.add_argument("--loads", default="0,1,2")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(count_steps(args.worker, args.seconds))
        return
    threads = len(os.sched_getaffinity(0))
    print(f"bench_threads_under_load: {threads} CPUs; steps of each captured step in {args.seconds:g} s "
          f"(more is better), {args.runs} alternating runs per setting")
    counts = {}
    for load in [int(x) for x in args.loads.split(",")]:
        with BackgroundLoad(load, seconds=3600):
            for _ in range(args.runs):
                for model in args.models.split(","):
                    for name, extra in SETTINGS.items():
                        env = dict(environment("lazy+jit", threads), **extra)
                        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", model,
                                              "--seconds", str(args.seconds)], env=env, capture_output=True,
                                             text=True, check=True)
                        counts.setdefault((model, load, name), []).append(int(out.stdout.split()[-1]))
    print(f"{'model':<12} {'load':>4}  " + "  ".join(f"{name:<30}" for name in SETTINGS))
    for model in args.models.split(","):
        for load in [int(x) for x in args.loads.split(",")]:
            cells = []
            for name in SETTINGS:
                c = counts[(model, load, name)]
                cells.append(f"{'/'.join(map(str, c))} (mean {sum(c) / len(c):.0f})")
            print(f"{model:<12} {load:>4}  " + "  ".join(f"{cell:<30}" for cell in cells))


if __name__ == "__main__":
    main()
