"""`python -m needle profile WORKLOAD`: the profile table of a built-in workload.

The workload's step runs twice untimed (so compiling is not what is measured,
unless --cold), then `--steps` times inside `needle.profile()`; the table shows
where those steps spent their time, kernel by kernel, with the lines of
needle/cli/workloads.py that built each kernel.  With --jit the step is captured
(`needle.jit`) during the warm-up (three steps then) and the profiled steps are replays.
"""
from __future__ import annotations

import argparse

from ..backend_selection import cpu, cuda
from ..captured.function import jit
from ..profiler import Profile, profile
from ..realize import lazy, realize
from .workloads import WORKLOADS, get

DEVICES = {"cpu": cpu, "cuda": cuda}
SORTS = ("total", "mean", "calls", "bytes", "flops", "name")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", choices=sorted(WORKLOADS), help="a built-in workload")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="profiled steps (default: 3)")
    p.add_argument("--device", choices=tuple(DEVICES), default="cpu", help="device (default: cpu)")
    p.add_argument("--eager", action="store_true", help="run eagerly: one kernel per op")
    p.add_argument("--jit", action="store_true", help="capture the step with needle.jit and profile its replays")
    p.add_argument("--cold", action="store_true", help="do not warm up: include scheduling and compiling")
    p.add_argument("--full", action="store_true", help="full sizes instead of the quick ones")
    p.add_argument("--sort", choices=SORTS, default="total", help="sort the kernels by (default: total)")
    p.add_argument("--limit", type=int, default=20, metavar="K", help="kernels shown (default: 20)")
    p.add_argument("--trace", metavar="FILE", help="also write the Chrome trace (JSON) to FILE")


def profile_workload(name: str, steps: int = 3, device=None, eager: bool = False, cold: bool = False,
                     quick: bool = True, captured: bool = False) -> Profile:
    """Profile `steps` steps of workload `name` (after two warm-up steps unless `cold`;
    `captured`: the step under needle.jit, so the profiled steps are its replays)."""
    if steps < 1:
        raise ValueError(f"--steps must be at least 1, got {steps}")
    with lazy(not eager):
        workload = get(name)(device if device is not None else cpu(), quick=quick)
        step = jit(workload.step) if captured else workload.step
        # the first two steps differ (optimizer state appears); a captured step's third call
        # is its first replay, which needle.jit checks against a plain call
        for _ in range(0 if cold else 3 if captured else 2):
            realize(*step())
        with profile() as p:
            for _ in range(steps):
                realize(*step())
    return p


def run(args) -> Profile:
    p = profile_workload(args.workload, args.steps, DEVICES[args.device](), args.eager, args.cold,
                         quick=not args.full, captured=args.jit)
    mode = "eager" if args.eager else "lazy jit" if args.jit else "lazy"
    print(f"profile of {args.workload} ({get(args.workload).description}), {args.steps} step(s), "
          f"{args.device}, {mode}{', cold' if args.cold else ''}")
    p.table(sort_by=args.sort, limit=args.limit)
    if args.trace:
        print(f"wrote {p.export_chrome_trace(args.trace)} (open in chrome://tracing or ui.perfetto.dev)")
    return p
