"""Data-parallel throughput: samples/s on 1 and 2 MPI ranks (1 thread each), and the
communication time per step, for the MLP and ResNet9 training steps.

    python benchmarks/bench_distributed.py [--quick] [--json FILE] [--ranks 1 2]

Each configuration runs as `mpiexec -n R python bench_distributed.py --worker ...`
with NEEDLE_THREADS=1 per rank.  The global batch is fixed (strong scaling): with R
ranks each rank steps on batch/R examples, then `average_gradients` all-reduces the
gradients.  A step is timed from the forward pass to the realized update; inside
it, "comm" is the time of `average_gradients` after the gradients were realized
and the ranks met at a barrier (packing, the one Allreduce, unpacking); "wait" is the
time spent at that barrier (load imbalance, not communication).  Scaling efficiency = samples/s on R ranks
/ (R x samples/s on 1 rank).  On a machine with fewer free cores than ranks the
ranks share cores and the efficiency says so.
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
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

WORKLOADS = {  # name: (global batch, measured steps, quick steps)
    "mlp": (256, 40, 10),
    "resnet9": (32, 8, 3),
}


# ---- one rank ------------------------------------------------------------------------------
def build(name: str, batch: int):
    import needle as ndl
    from needle import nn
    np.random.seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        x = np.random.rand(batch, 784).astype(np.float32)
    else:
        from models import ResNet9
        model = ResNet9()
        x = np.random.rand(batch, 3, 32, 32).astype(np.float32)
    y = np.random.randint(0, 10, size=batch)
    return model, ndl.Tensor(x, requires_grad=False), ndl.Tensor(y, requires_grad=False)


def worker(name: str, steps: int) -> None:
    import needle as ndl
    import needle.distributed as dist
    from needle import nn, optim
    dist.init()
    size = dist.world_size()
    batch = WORKLOADS[name][0]
    model, X, y = build(name, batch // size)
    dist.broadcast_parameters(model)
    params = model.parameters()
    opt = optim.SGD(params, lr=0.01, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    step_times, comm_times, wait_times = [], [], []
    for i in range(steps + 2):  # two warm-up steps compile the kernels
        dist.barrier()
        t0 = time.perf_counter()
        loss = loss_fn(model(X), y)
        opt.reset_grad()
        loss.backward()
        comm = wait = 0.0
        if size > 1:
            ndl.realize(*[p.grad for p in params])
            w0 = time.perf_counter()
            dist.barrier()  # waiting for the slowest rank is not communication
            c0 = time.perf_counter()
            dist.average_gradients(params)
            comm, wait = time.perf_counter() - c0, c0 - w0
        opt.step()
        float(loss.numpy())
        if i >= 2:
            step_times.append(time.perf_counter() - t0)
            comm_times.append(comm)
            wait_times.append(wait)
    step = statistics.median(step_times)
    if dist.rank() == 0:
        print("RESULT " + json.dumps(dict(
            workload=name, ranks=size, global_batch=batch, step_ms=step * 1e3,
            comm_ms=statistics.median(comm_times) * 1e3, wait_ms=statistics.median(wait_times) * 1e3,
            samples_per_s=batch / step,
            grad_mb=sum(int(np.prod(p.shape)) for p in params) * 4 / 2**20)), flush=True)


# ---- the driver ----------------------------------------------------------------------------
def launcher() -> str:
    from needle.distributed import mpiexec_path
    found = mpiexec_path()
    if not found:
        sys.exit("bench_distributed: mpiexec not found; pip install 'needle[distributed]'")
    return found


def measure(name: str, ranks: int, steps: int) -> dict:
    env = dict(os.environ, NEEDLE_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    command = [launcher(), "-n", str(ranks), sys.executable, os.path.abspath(__file__),
               "--worker", name, "--steps", str(steps)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{name} on {ranks} ranks failed:\n{proc.stdout}\n{proc.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workload", choices=tuple(WORKLOADS), action="append")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    print(f"bench_distributed: {os.cpu_count()} cores, 1 thread per rank, MPICH via mpi4py; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}")
    print(f"{'workload':<9} {'ranks':>5} {'batch':>6} {'grads MB':>8} {'step ms':>9} {'comm ms':>8} "
          f"{'wait ms':>8} {'samples/s':>10} {'efficiency':>10}")
    results = []
    for name in args.workload or list(WORKLOADS):
        batch, steps, quick = WORKLOADS[name]
        base = None
        for ranks in sorted(args.ranks):
            r = measure(name, ranks, quick if args.quick else steps)
            base = r["samples_per_s"] if ranks == 1 else base
            r["efficiency"] = r["samples_per_s"] / (ranks * base) if base else None
            results.append(r)
            eff = f"{r['efficiency']:.0%}" if r["efficiency"] is not None else "-"
            print(f"{name:<9} {ranks:>5} {batch:>6} {r['grad_mb']:>8.2f} {r['step_ms']:>9.2f} "
                  f"{r['comm_ms']:>8.3f} {r['wait_ms']:>8.3f} {r['samples_per_s']:>10.0f} {eff:>10}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(cores=os.cpu_count(), results=results), f, indent=2)


if __name__ == "__main__":
    main()
