"""CPU benchmarks: needle against numpy, torch eager, torch.compile and jax.jit.

    python benchmarks/bench_cpu.py [--quick] [--passes N] [--threads N] [--only TEXT] [--json FILE]

Each implementation runs in its own processes (one after the other, never two at
once) with the same thread count (NEEDLE_THREADS, OMP/MKL/OpenBLAS threads,
torch.set_num_threads, XLA's intra-op threads); torch and jax columns appear when
those packages are installed.  The implementations take turns on chunks of a few
workloads (--chunk), so a noisy minute of a shared machine lands on every column
of a few rows, not on one column.  Every figure is the median of repeats after a
warm-up that compiles; with --passes N the whole round runs N times and the table
shows the median of the N medians.  The ratio columns are needle over the best peer of that row
(numpy, torch, torch.compile, jax): lazy (every op's Python run each iteration),
and jit (the iteration captured by needle.jit and replayed, as torch.compile and
jax.jit replay theirs); > 1 means needle is slower.

Anchors: the machine's copy bandwidth (np.copyto), numpy's GEMM GFLOP/s with
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset and as inherited (OpenBLAS runs about
2x slower while they are set; the numpy column runs under the inherited setting,
printed in the header), kernel launch and compile costs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # PYTHONPATH wins
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cpu_workloads as W  # noqa: E402

PEERS = ("numpy", "torch", "torch.compile", "jax")
COLUMNS = ("numpy", "needle-eager", "needle", "needle-jit", "torch", "torch.compile", "jax")
HEADINGS = {"numpy": "numpy", "needle-eager": "ndl eager", "needle": "ndl lazy", "needle-jit": "ndl jit",
            "torch": "torch", "torch.compile": "t.compile", "jax": "jax.jit"}


#: the clock of each measurement: wall time, or the process's CPU time (with --threads 1, a
#: figure a busy machine disturbs less: time other processes run is not counted)
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}


#: seconds of calls before timing: a 2-core VM ran the first 50-100 calls of a 50 us workload
#: (torch's and needle's alike) 1.2-1.7x slower, in steps, as if its clock were rising
WARM_SECONDS = 0.3
#: a workload this fast is timed over this many seconds of calls at least (the median of more)
MIN_TIMED_SECONDS = 0.1


def median_time(fn, repeats: int, budget: float = 2.0, clock: str = "wall") -> float:
    fn()  # warm-up: compiles, allocates; torch.compile's next few calls are slow too
    start, calls = time.perf_counter(), 0
    while calls < 3 or (calls < 5000 and time.perf_counter() - start < WARM_SECONDS):
        fn()
        calls += 1
    now = CLOCK[clock]
    times, start = [], time.perf_counter()
    while len(times) < 3 or (len(times) < repeats and time.perf_counter() - start < budget) or (
            len(times) < 5000 and time.perf_counter() - start < MIN_TIMED_SECONDS):
        t = now()
        fn()
        times.append(now() - t)
    return statistics.median(times)


def worker(impl: str, names, repeats: int, threads: int, clock: str = "wall") -> None:
    """Measure `names` with one implementation; one JSON line per workload on stdout."""
    if impl.startswith("torch"):
        import torch
        torch.set_num_threads(threads)
    for name in names:
        try:
            seconds = median_time(W.build(impl, name, W.inputs(name)), repeats, clock=clock)
            print(json.dumps({"name": name, "seconds": seconds}), flush=True)
        except Exception as e:  # a peer lacking an op must not sink the table
            print(json.dumps({"name": name, "error": f"{type(e).__name__}: {e}"[:200]}), flush=True)


def available(impl: str) -> bool:
    module = {"torch.compile": "torch", "needle-eager": "needle", "needle-jit": "needle"}.get(impl, impl)
    return importlib.util.find_spec(module) is not None


def thread_env(threads: int) -> dict:
    env = dict(os.environ)
    # PJRT_NPROC sizes jax's CPU thread pools (jax 0.10 ignored XLA_FLAGS'
    # intra_op_parallelism_threads: four threads computed; see bench_training.py)
    for var in ("NEEDLE_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PJRT_NPROC"):
        env[var] = str(threads)
    return env


def run_worker(impl: str, names, repeats: int, threads: int, clock: str = "wall") -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, "--threads", str(threads),
           "--repeats", str(repeats), "--clock", clock, "--names", json.dumps(list(names))]
    out = subprocess.run(cmd, env=thread_env(threads), capture_output=True, text=True)
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            results[item["name"]] = item.get("seconds", item.get("error"))
    if out.returncode != 0:
        for name in names:
            results.setdefault(name, f"process failed: {out.stderr.strip().splitlines()[-1:]}")
    return results


def copy_bandwidth(n: int) -> float:
    src, dst = np.random.rand(n).astype(np.float32), np.empty(n, np.float32)
    return 2 * src.nbytes / median_time(lambda: np.copyto(dst, src), 20)


_SPIN = "import time; t = time.perf_counter(); n = 0\nwhile time.perf_counter() - t < 0.5: n += 1\nprint(n)"


def parallel_capacity(threads: int) -> float:
    """How many cores' worth `threads` busy processes get, from their loop counts against
    one process alone: a shared host may give two vCPUs much less than two cores (then a
    spinning idle thread slows the main one, and threads gain little), which a table
    taken in that hour shows more than the kernels do."""
    def counts(k):
        procs = [subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True)
                 for _ in range(k)]
        return [int(p.communicate()[0]) for p in procs]
    alone = counts(1)[0]
    return sum(counts(threads)) / alone if threads > 1 else 1.0


def numpy_gemm(n: int, unset: bool) -> float:
    """numpy's GFLOP/s for n x n float32 in a fresh process (OpenBLAS env unset or kept)."""
    env = dict(os.environ)
    if unset:
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    code = ("import numpy as np, time, statistics;"
            f"a=np.random.rand({n},{n}).astype(np.float32); b=a.copy(); a@b; ts=[];"
            "exec('for _ in range(7):\\n t=time.perf_counter(); a@b; ts.append(time.perf_counter()-t)');"
            f"print(2*{n}**3/statistics.median(ts)/1e9)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(out.stdout.strip()) if out.returncode == 0 else float("nan")


def launch_and_compile_costs() -> dict:
    """Launch of a cached kernel; cold compile of an elementwise kernel; warm load from disk."""
    import needle as ndl
    from needle import config
    from needle.codegen import llvm
    from needle.compiler.schedule import plan
    from needle.engine.schedule_cache import cpu_target
    from needle.ir.printer import output_nodes
    from needle.runtime import jit
    x = ndl.Tensor(np.ones(64, np.float32), requires_grad=False)
    target = cpu_target()
    with ndl.lazy(True):
        sched, _ = plan(output_nodes([x * 3.0 + 1.0]), target)
    kernel = jit.compile_kernels([sched.calls[0].kernel], target, llvm)[0]
    out = np.empty(64, np.float32)
    bufs = np.array([out.ctypes.data, x.realize_cached_data()._handle.ctypes.data], np.int64)
    params = np.array([3.0], np.float64)
    err = np.zeros(1, np.int32)
    raw = (bufs.ctypes.data, params.ctypes.data, err.ctypes.data)  # the runtime keeps raw pointers too
    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        kernel.cfunc(raw[0], raw[1], 0, 64, 0, raw[2])
    launch = (time.perf_counter() - t) / n
    # cold compiles of distinct elementwise kernels, then the same kernels from the disk cache
    cold, warm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        old_dir, config.CACHE_DIR = config.CACHE_DIR, tmp
        try:
            for k in range(7):
                with ndl.lazy(True):
                    y = ndl.exp(x * float(k + 2)) - x ** 2 * (k + 1) if k % 2 else ndl.tanh(x + x * x) * (k + 5)
                    s, _ = plan(output_nodes([y]), target)
                kern = s.calls[0].kernel
                # never seen by the caches: an empty disk cache, and no copy in memory (the
                # cache key is the kernel's code, so a new name would not make it new)
                config.CACHE_DIR = os.path.join(tmp, str(k))
                jit._compiled.clear()
                t = time.perf_counter()
                jit.compile_kernels([kern], target, llvm)
                cold.append(time.perf_counter() - t)
                jit._compiled.clear()  # forget the in-memory copy; the disk entry stays
                t = time.perf_counter()
                jit.compile_kernels([kern], target, llvm)
                warm.append(time.perf_counter() - t)
        finally:
            config.CACHE_DIR = old_dir
    return dict(launch_us=launch * 1e6, cold_compile_ms=statistics.median(cold) * 1e3,
                warm_load_ms=statistics.median(warm) * 1e3)


def thread_wake_cost(gaps_us=(0, 1000), n=60) -> dict:
    """Median time of a threaded kernel (exp over 2^20 floats) launched after each
    serial gap (the main thread busy in Python): past the time idle workers spin
    (GOMP_SPINCOUNT), the kernel waits for a sleeping worker to wake."""
    import needle as ndl
    x = ndl.Tensor(np.random.rand(1 << 20).astype(np.float32), requires_grad=False)
    step = ndl.jit(lambda: ndl.exp(x))
    with ndl.lazy(True):
        ndl.realize(step())
    out = {}
    for gap in gaps_us:
        with ndl.profile() as p:
            for _ in range(n):
                t = time.perf_counter()
                while time.perf_counter() - t < gap * 1e-6:
                    pass
                with ndl.lazy(True):
                    ndl.realize(step())
        out[gap] = statistics.median(e["dur"] for e in p.events if e["ph"] == "X")
    return out


def fmt(t) -> str:
    if not isinstance(t, float):
        return "—"
    return f"{t * 1e6:.0f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def _times(ratio) -> str:
    return f"{ratio:.2f}x" if ratio else "—"


def table(names, medians: dict, impls, bw: float) -> dict:
    print(f"{'workload':<27}" + "".join(f"{HEADINGS[i]:>11}" for i in impls)
          + f"{'best peer':>15}{'lazy/peer':>10}{'jit/peer':>9}")
    rows = {}
    for name in names:
        cells = {i: medians[i].get(name) for i in impls}
        peers = {i: t for i, t in cells.items() if i in PEERS and isinstance(t, float)}
        best = min(peers, key=peers.get) if peers else None

        def over_best(impl):
            t = cells.get(impl)
            return t / peers[best] if best and isinstance(t, float) else None
        ours = cells.get("needle")
        ratio, jit_ratio = over_best("needle"), over_best("needle-jit")
        extra = ""
        if isinstance(ours, float) and W.WORKLOADS[name][0] in ("sum_rows", "sum_cols", "sum_all", "softmax",
                                                                 "logsoftmax", "layernorm", "cross-entropy", "chain"):
            rate = W.bytes_touched(name) / ours
            extra = f"  needle reads {rate / 1e9:.1f} GB/s ({rate / bw:.0%} of copy)"
        print(f"{name:<27}" + "".join(f"{fmt(cells[i]):>11}" for i in impls)
              + f"{best or '—':>15}{_times(ratio):>10}{_times(jit_ratio):>9}{extra}")
        rows[name] = dict(cells, best_peer=best, ratio=ratio, jit_ratio=jit_ratio)
    errors = {(i, n): t for i in impls for n, t in medians[i].items() if isinstance(t, str)}
    for (i, n), e in errors.items():
        print(f"  {i} / {n}: {e}")
    return rows


def versions(impls) -> str:
    out = [f"numpy {np.__version__}"]
    for impl in ("torch", "jax"):
        if impl in impls or impl + ".compile" in impls:
            out.append(f"{impl} {__import__(impl).__version__}")
    return ", ".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few workloads, fewer repeats")
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--chunk", type=int, default=4, help="workloads per process: implementations take turns")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--only", default="", help="workloads whose name contains one of these (comma-separated) texts")
    p.add_argument("--impls", default=",".join(COLUMNS))
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                   help="cpu: the process's CPU time (use with --threads 1 on a busy machine)")
    p.add_argument("--json")
    p.add_argument("--no-costs", action="store_true", help="skip launch/compile costs and the GEMM anchor")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--names", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 15)
    if args.worker:
        return worker(args.worker, json.loads(args.names), repeats, args.threads, args.clock)
    from needle import config
    threads = args.threads or config.THREADS
    names = [n for n in (W.QUICK if args.quick else W.WORKLOADS) if any(o in n for o in args.only.split(","))]
    impls = [i for i in args.impls.split(",") if i in COLUMNS and available(i)]
    blas = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    print(f"needle CPU benchmarks — {threads} threads; {versions(impls)}; numpy's OpenBLAS env: "
          f"{blas or 'OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset'}")
    bw = copy_bandwidth(1 << 24)
    capacity = parallel_capacity(threads)
    print(f"machine copy bandwidth (np.copyto, 2^24 floats): {bw / 1e9:.1f} GB/s; {threads} busy processes got "
          f"{capacity:.2f} cores' worth; medians of {args.passes} pass(es), each implementation in its own process")
    runs = {i: [] for i in impls}
    chunks = [names[i:i + args.chunk] for i in range(0, len(names), args.chunk)]
    for _ in range(args.passes):
        results = {i: {} for i in impls}
        for c, chunk in enumerate(chunks):
            for impl in impls[c % len(impls):] + impls[:c % len(impls)]:  # none always first
                results[impl].update(run_worker(impl, chunk, repeats, threads, args.clock))
        for impl in impls:
            runs[impl].append(results[impl])
    medians = {i: {n: _median([r.get(n) for r in runs[i]]) for n in names} for i in impls}
    report = {"threads": threads, "openblas_env": blas, "versions": versions(impls), "copy_bandwidth_GBs": bw / 1e9,
              "parallel_capacity": capacity,
              "rows": table(names, medians, impls, bw)}
    if not args.no_costs:
        for n in (256, 1024):
            unset, kept = numpy_gemm(n, True), numpy_gemm(n, False)
            print(f"numpy GEMM {n}: {unset:.0f} GFLOP/s with the OpenBLAS env unset, {kept:.0f} as inherited")
            report[f"numpy_gemm_{n}"] = {"env_unset": unset, "env_as_is": kept}
        costs = report["costs"] = launch_and_compile_costs()
        print(f"cached kernel launch (ctypes call): {costs['launch_us']:.2f} us; "
              f"cold elementwise compile: {costs['cold_compile_ms']:.1f} ms median; "
              f"warm load from disk cache: {costs['warm_load_ms']:.2f} ms median")
        wake = report["threaded_kernel_after_gap_us"] = thread_wake_cost()
        print("threaded exp 2^20 launched back to back: {:.0f} us; after 1 ms of Python: {:.0f} us "
              "(GOMP_SPINCOUNT={})".format(wake[0], wake[1000], os.environ.get("GOMP_SPINCOUNT", "libgomp's default")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


def _median(values):
    """Median of the passes that measured; a pass's error text when none did."""
    times = [v for v in values if isinstance(v, float)]
    return statistics.median(times) if times else next((v for v in values if v is not None), None)


if __name__ == "__main__":
    main()
