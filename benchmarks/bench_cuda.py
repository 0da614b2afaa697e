"""CUDA benchmarks: what needle's generated kernels reach against the device's anchors.

    python benchmarks/bench_cuda.py [--quick] [--json FILE]

- fused elementwise: out = tanh(a * b + c) * 0.5 + a over 2^27 float32 (4 arrays
  touched), GB/s, next to the device-to-device copy bandwidth (cuMemcpyDtoD,
  counting bytes read and written);
- matmul: float32 n x n for n = 1024, 2048, 4096, GFLOP/s (and cuBLAS through
  PyTorch, TF32 off, when torch is installed, as the anchor);
- row softmax over 8192 x 4096 (GB/s), a global sum over 2^27 (GB/s);
- an MLP training step (784-1024-1024-10, batch 1024, SGD with momentum), ms.

Kernel figures are timed with CUDA events around several back-to-back runs of a
compiled schedule (the median over repeats); the MLP step with wall time around
`loss.numpy()`, as a training loop sees it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import needle as ndl  # noqa: E402
from needle import nn, ops, optim  # noqa: E402


def gpu_ms(fn, inner: int = 5, repeats: int = 7) -> float:
    """Median milliseconds of one `fn()` (inner calls between two events)."""
    from needle.runtime import cuda as rt
    drv = rt.require()["drv"]
    fn()
    rt.synchronize()
    times = []
    for _ in range(repeats):
        start, end = drv.Event(), drv.Event()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.time_till(end) / inner)
    return statistics.median(times)


def schedule_ms(build, inner: int = 5, repeats: int = 7) -> float:
    """GPU milliseconds of the schedule that realizes `build()`: its kernels are
    launched back to back (no synchronize between runs), so host overhead hides."""
    from needle.ir.printer import output_nodes
    from needle.engine import schedule_cache
    nodes = output_nodes([build()])
    entry, leaves, scalars = schedule_cache.compiled_schedule(nodes)
    return gpu_ms(lambda: entry.run(leaves, scalars, ndl.cuda()), inner, repeats)


def copy_bandwidth(nbytes: int) -> float:
    from needle.runtime import cuda as rt
    drv = rt.require()["drv"]
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    ms = gpu_ms(lambda: drv.memcpy_dtod(dst, src, nbytes))
    return 2 * nbytes / ms / 1e6


def tensor(*shape):
    return ndl.Tensor(np.random.rand(*shape).astype(np.float32), device=ndl.cuda(), requires_grad=False)


def elementwise(n: int) -> float:
    a, b, c = tensor(n), tensor(n), tensor(n)
    ms = schedule_ms(lambda: ops.tanh(a * b + c) * 0.5 + a)
    return 4 * 4 * n / ms / 1e6


def matmul(n: int) -> float:
    a, b = tensor(n, n), tensor(n, n)
    ms = schedule_ms(lambda: a @ b, inner=3, repeats=5)
    return 2 * n ** 3 / ms / 1e6


def torch_matmul(n: int) -> float:
    try:
        import torch
    except ImportError:
        return float("nan")
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.rand(n, n, device="cuda")
    b = torch.rand(n, n, device="cuda")
    a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(3):
            a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 3)
    return 2 * n ** 3 / statistics.median(times) / 1e6


def softmax(rows: int, cols: int) -> float:
    x = tensor(rows, cols)

    def step():
        e = ops.exp(x - ops.broadcast_to(ops.max(x, axes=(1,), keepdims=True), x.shape))
        return e / ops.broadcast_to(ops.summation(e, axes=(1,), keepdims=True), x.shape)
    ms = schedule_ms(step)
    return 2 * 4 * rows * cols / ms / 1e6


def global_sum(n: int) -> float:
    x = tensor(n)
    ms = schedule_ms(lambda: ops.summation(x))
    return 4 * n / ms / 1e6


def mlp_step_ms(batch: int, hidden: int, steps: int) -> float:
    np.random.seed(0)
    device = ndl.cuda()
    model = nn.Sequential(nn.Linear(784, hidden, device=device), nn.ReLU(),
                          nn.Linear(hidden, hidden, device=device), nn.ReLU(), nn.Linear(hidden, 10, device=device))
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = tensor(batch, 784)
    y = ndl.Tensor(np.random.randint(0, 10, batch), device=device, requires_grad=False)
    loss_fn = nn.SoftmaxLoss()

    def step():
        loss = loss_fn(model(x), y)
        opt.reset_grad()
        loss.backward()
        opt.step()
        return float(loss.numpy())
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (a check that the script runs)")
    p.add_argument("--device", default="cuda", choices=("cuda",), help="only cuda (the CPU has bench_cpu.py)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    from needle.runtime import cuda as rt
    ok, why = rt.available()
    if not ok:
        print(f"bench_cuda: {why}")
        return {}
    report = {"device": rt.describe(), "quick": args.quick}
    n = 1 << (12 if args.smoke else 24 if args.quick else 27)
    report["copy_GBps"] = copy_bandwidth(4 * n)
    report["fused_elementwise_GBps"] = elementwise(n)
    print(f"device: {report['device']}")
    print(f"device-to-device copy        {report['copy_GBps']:9.0f} GB/s")
    print(f"fused elementwise (2^{n.bit_length() - 1})   {report['fused_elementwise_GBps']:9.0f} GB/s  "
          f"({100 * report['fused_elementwise_GBps'] / report['copy_GBps']:.0f}% of copy)")
    report["softmax_GBps"] = softmax(16 if args.smoke else 2048 if args.quick else 8192, 4096)
    report["global_sum_GBps"] = global_sum(n)
    print(f"row softmax                  {report['softmax_GBps']:9.0f} GB/s")
    print(f"global sum                   {report['global_sum_GBps']:9.0f} GB/s")
    report["matmul_GFLOPs"], report["torch_matmul_GFLOPs"] = {}, {}
    for size in ((64,) if args.smoke else (512, 1024) if args.quick else (1024, 2048, 4096)):
        ours, ref = matmul(size), torch_matmul(size)
        report["matmul_GFLOPs"][size], report["torch_matmul_GFLOPs"][size] = ours, ref
        print(f"matmul f32 {size:5d}             {ours:9.0f} GFLOP/s   (cuBLAS via torch, no TF32: {ref:.0f})")
    report["mlp_step_ms"] = mlp_step_ms(*((8, 16, 2) if args.smoke else (256, 256, 5) if args.quick else
                                          (1024, 1024, 20)))
    print(f"MLP training step            {report['mlp_step_ms']:9.2f} ms")
    print(f"runtime stats: {ndl.runtime.stats()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
