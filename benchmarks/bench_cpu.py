"""CPU benchmarks: eager numpy vs eager compiled vs lazy fused, side by side.

    python benchmarks/bench_cpu.py [--quick] [--json FILE]

Every figure is a median over repeats measured in this one run, so ratios are
meaningful on a shared, noisy machine even when absolute times drift.  The
machine's copy bandwidth (np.copyto) and numpy's own GFLOP/s are printed as
anchors.  numpy's OpenBLAS runs about 2x slower while OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE are set, so the matmul reference is measured in a subprocess with
both unset (and with the inherited environment, when it differs).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import needle as ndl  # noqa: E402
from needle import config, ops, runtime  # noqa: E402


def median_time(fn, repeats: int, budget: float = 3.0) -> float:
    fn()  # warm-up (compiles, allocates)
    times, start = [], time.perf_counter()
    while len(times) < repeats and (len(times) < 3 or time.perf_counter() - start < budget):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def three_modes(build, numpy_fn, repeats):
    """(numpy, eager compiled, lazy fused) median seconds of one iteration."""
    results = {"eager numpy": median_time(numpy_fn, repeats)}
    for mode, lazy in (("eager compiled", False), ("lazy fused", True)):
        with ndl.lazy(lazy):
            inputs = build.inputs()
            results[mode] = median_time(lambda: ndl.realize(*build.step(*inputs)), repeats)
    return results


class Case:
    def __init__(self, inputs, step):
        self.inputs, self.step = inputs, step


def tensors(*arrays):
    return lambda: [ndl.Tensor(a, device=ndl.cpu(), requires_grad=False) for a in arrays]


def copy_bandwidth(n: int) -> float:
    src, dst = np.random.rand(n).astype(np.float32), np.empty(n, np.float32)
    return 2 * src.nbytes / median_time(lambda: np.copyto(dst, src), 20)


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


def row(name, res, extra=""):
    base = res["eager numpy"]
    cells = "  ".join(f"{res[m] * 1e3:9.3f} ms" for m in ("eager numpy", "eager compiled", "lazy fused"))
    ratios = f"{base / res['eager compiled']:6.2f}x {base / res['lazy fused']:6.2f}x"
    print(f"{name:<28}{cells}   {ratios}  {extra}")


def launch_and_compile_costs() -> dict:
    """Launch of a cached kernel; cold compile of an elementwise kernel; warm load from disk."""
    from needle.compiler.schedule import plan
    from needle.ir.printer import output_nodes
    from needle.runtime import jit
    import needle.runtime.cpu as cpu_rt
    x = ndl.Tensor(np.ones(64, np.float32), requires_grad=False)
    with ndl.lazy(True):
        sched, _ = plan(output_nodes([x * 3.0 + 1.0]))
    compiled = cpu_rt.CompiledSchedule(sched)
    kernel = compiled.kernels[0]
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
                    s, _ = plan(output_nodes([y]))
                kern = s.calls[0].kernel
                kern.name += f"_bench{time.time_ns()}"  # unique: never seen by the caches
                t = time.perf_counter()
                jit.compile_kernel(kern)
                cold.append(time.perf_counter() - t)
                jit._compiled.clear()  # forget the in-memory copy; the disk entry stays
                t = time.perf_counter()
                jit.compile_kernel(kern)
                warm.append(time.perf_counter() - t)
        finally:
            config.CACHE_DIR = old_dir
    return dict(launch_us=launch * 1e6, cold_compile_ms=statistics.median(cold) * 1e3,
                warm_load_ms=statistics.median(warm) * 1e3)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    reps = 5 if args.quick else 15
    rng = np.random.default_rng(0)
    report = {"threads": config.THREADS, "openblas_env": {k: os.environ[k] for k in
              ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}}
    print(f"needle CPU benchmarks — {config.THREADS} threads; OpenBLAS env here: {report['openblas_env'] or 'unset'}")
    bw = copy_bandwidth(1 << 24)
    report["copy_bandwidth_GBs"] = bw / 1e9
    print(f"machine copy bandwidth (np.copyto, 2^24 floats): {bw / 1e9:.1f} GB/s")
    print(f"{'':<28}{'eager numpy':>12}  {'eager compiled':>12}  {'lazy fused':>12}   "
          f"{'speed-up vs numpy':>15}")
    results = report["cases"] = {}

    sizes = (14, 20) if args.quick else (14, 20, 24)
    for e in sizes:
        n = 1 << e
        a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
        case = Case(tensors(a, b, c), lambda x, y, z: [ops.relu(x * y + z) * 0.5 + ops.exp(-x)])
        res = three_modes(case, lambda: np.maximum(a * b + c, 0) * 0.5 + np.exp(-a), reps)
        gbs = 4 * n * 4 / res["lazy fused"] / 1e9
        row(f"elementwise chain 2^{e}", res, f"fused {gbs:.1f} GB/s = {gbs * 1e9 / bw:.0%} of copy")
        results[f"elementwise_2^{e}"] = dict(res, fused_GBs=gbs)

    rows, cols = (1024, 512) if args.quick else (4096, 1024)
    x = rng.standard_normal((rows, cols)).astype(np.float32)

    def softmax(t):
        e_ = ops.exp(t - ops.broadcast_to(t.max((1,), keepdims=True), t.shape))
        return [e_ / ops.broadcast_to(e_.sum((1,), keepdims=True), t.shape)]

    def np_softmax():
        e_ = np.exp(x - x.max(1, keepdims=True))
        return e_ / e_.sum(1, keepdims=True)
    res = three_modes(Case(tensors(x), softmax), np_softmax, reps)
    row(f"row softmax {rows}x{cols}", res)
    results["softmax"] = res

    def layernorm(t):
        mu = t.sum((1,), keepdims=True) / cols
        d = t - ops.broadcast_to(mu, t.shape)
        var = (d * d).sum((1,), keepdims=True) / cols
        return [d / ops.broadcast_to((var + 1e-5) ** 0.5, t.shape)]

    def np_layernorm():
        d = x - x.mean(1, keepdims=True)
        return d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5)
    res = three_modes(Case(tensors(x), layernorm), np_layernorm, reps)
    row(f"layernorm {rows}x{cols}", res)
    results["layernorm"] = res

    n = 1024 if args.quick else 4096
    big = rng.standard_normal((n, n)).astype(np.float32)
    res = three_modes(Case(tensors(big), lambda t: [t.sum((1,))]), lambda: big.sum(1), reps)
    row(f"sum over rows {n}x{n}", res, f"fused {big.nbytes / res['lazy fused'] / 1e9:.1f} GB/s")
    results["sum_rows"] = res

    for n in ((256, 512) if args.quick else (256, 512, 1024, 2048)):
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        res = three_modes(Case(tensors(a, b), lambda u, v: [u @ v]), lambda: a @ b, reps)
        flops = 2 * n ** 3
        unset, kept = numpy_gemm(n, True), numpy_gemm(n, False)
        ours = flops / res["lazy fused"] / 1e9
        row(f"matmul {n}", res, f"fused {ours:.0f} GFLOP/s; numpy {unset:.0f} (env unset) "
            f"{kept:.0f} (env as is) -> {ours / unset:.0%} of OpenBLAS")
        results[f"matmul_{n}"] = dict(res, fused_gflops=ours, numpy_gflops_env_unset=unset,
                                      numpy_gflops_env_as_is=kept)

    n = 256 if args.quick else 1024
    a, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((n, n), (n, n), (1, n)))
    res = three_modes(Case(tensors(a, w, bias), lambda u, v, c: [ops.relu(u @ v + ops.broadcast_to(c, (n, n)))]),
                      lambda: np.maximum(a @ w + bias, 0), reps)
    row(f"matmul+bias+relu {n}", res)
    results["matmul_bias_relu"] = res

    from needle.cli.workloads import MLPStep
    res = {}
    res["eager numpy"] = _workload_time(MLPStep, ndl.cpu_numpy(), False, reps)
    res["eager compiled"] = _workload_time(MLPStep, ndl.cpu(), False, reps)
    res["lazy fused"] = _workload_time(MLPStep, ndl.cpu(), True, reps)
    row("MLP step 784-256-10 b128", res)
    results["mlp_step"] = res

    costs = launch_and_compile_costs()
    report["costs"] = costs
    print(f"cached kernel launch (ctypes call): {costs['launch_us']:.2f} us; "
          f"cold elementwise compile: {costs['cold_compile_ms']:.1f} ms median; "
          f"warm load from disk cache: {costs['warm_load_ms']:.2f} ms median")
    print(f"runtime stats: {runtime.stats()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


def _workload_time(cls, device, lazy, reps):
    with ndl.lazy(lazy):
        w = cls(device)
        return median_time(lambda: ndl.realize(*w.step()), reps)


if __name__ == "__main__":
    main()
